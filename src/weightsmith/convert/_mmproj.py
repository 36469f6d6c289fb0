"""The vision projector of a Hugging Face VLM folder -> an ``mmproj`` GGUF.

What ``convert_hf_to_gguf.py --mmproj`` writes, from the
:mod:`~weightsmith.convert.arch.mmproj` entry of ``architectures[0]``:

1. KVs: ``general.architecture = clip``, ``general.type = mmproj``, the provenance
   ``general.*`` rows (as the text file's, sized by the projector's tensors), the
   entry's ``clip.*`` rows with ``general.file_type`` first, then
   ``general.quantization_version``.  No tokenizer.
2. The vision tower and projector tensors in the source's order (shards sorted by
   name), renamed, permuted or split by the entry, the text model's left out.
3. Types: the reference's outtypes (``f32``, ``f16``, ``bf16``, ``q8_0``; ``auto``
   from the first 2-D *vision* tensor), with the entry's forced types and the F32
   rules of ``prepare_tensors``.  llama-quantize does not quantize projectors: with
   a llama-quantize type (``q4_k_m``, ...) for the text file, the projector is f16.

Everything is planned (and every input checked) by :func:`plan_mmproj` before
:func:`write_mmproj` writes a byte; the text conversion plans both first.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import errors as E
from .._json import read_json
from ..gguf import GGUFValueType, Writer, encode_value
from ..quant.recipes import FILE_TYPES
from . import _hf_to_gguf as H  # a module import: _hf_to_gguf imports this module too
from ._model_card import provenance_rows
from .arch import FILE_TYPE, PlanError
from .arch.mmproj import (
    AUDIO,
    FOLDER,
    MMPROJ_REGISTRY,
    TOKEN_ID,
    TOKEN_SOURCE,
    Projector,
    towers,
    vision_view,
)

VT = GGUFValueType

__all__ = ["plan_mmproj", "plan_tower", "write_mmproj"]


def _preprocessor(d: Path) -> dict:
    """MmprojModel's image processor settings: preprocessor_config.json, then
    processor_config.json (its ``image_processor`` moved up) over it."""
    out: dict[str, Any] = {}
    for fname, inner in (("preprocessor_config.json", "media_proc_cfg"),
                         ("processor_config.json", "image_processor")):  # fmt: skip
        p = d / fname
        if p.is_file():
            j = read_json(p, E.InvalidModelConfig, fname, expected="a JSON object")
            if not isinstance(j, dict):
                raise E.InvalidModelConfig(
                    f"{fname} is not an object", path=p, expected="a JSON object",
                    found=type(j).__name__,
                )  # fmt: skip
            if isinstance(j.get(inner), dict):
                j = {**j, **j[inner]}
            out.update(j)
    return out


def _class_vision(cfg: dict, path: Path) -> dict:
    """The config with the ``vision_config`` an entry's class builds from other fields
    (:attr:`Projector.vision_of`), when it has none of its own."""
    archs = cfg.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs else None
    proj = MMPROJ_REGISTRY.get(name) if isinstance(name, str) else None
    if proj is None or proj.vision_of is None or "vision_config" in cfg:
        return cfg
    try:
        vc = proj.vision_of(cfg)
    except KeyError as exc:
        raise E.InvalidModelConfig(
            "vision hyperparameter missing",
            path=path, field=str(exc.args[0]), expected="a value", found=None,
        ) from None  # fmt: skip
    except TypeError as exc:  # a field of the wrong kind (a string for a number, ...)
        raise E.InvalidModelConfig(
            "vision hyperparameters of the wrong type", path=path,
            field=f"{name}'s vision fields", expected="numbers", found=str(exc),
        ) from None  # fmt: skip
    return cfg if vc is None else {**cfg, "vision_config": vc}


def _projector(cfg: dict, path: Path) -> Projector:
    vc = towers(cfg).get("vision_config")
    # as get_model_architecture: the vision config's own architecture first
    archs = (vc if isinstance(vc, dict) else {}).get("architectures") or cfg.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs else None
    proj = MMPROJ_REGISTRY.get(name) if isinstance(name, str) else None
    if not isinstance(vc, dict) and (proj is None or proj.vision):
        raise E.InvalidModelConfig(
            "the model has no vision tower to write a projector from",
            path=path, field="vision_config", expected="an object", found=vc,
        )  # fmt: skip
    if proj is None:
        raise E.UnknownArchitecture(
            "no vision projector conversion for this architecture",
            path=path,
            field="architectures[0]",
            expected="one of " + ", ".join(sorted(MMPROJ_REGISTRY)),
            found=name,
        )
    vc = vc if isinstance(vc, dict) else {}
    for keys in proj.required:
        if not any(k in vc for k in keys):
            raise E.InvalidModelConfig(
                "vision hyperparameter missing",
                path=path, field="vision_config." + keys[0], expected="a value", found=None,
            )  # fmt: skip
    # MmprojModel's (whisper_config, else audio_config), unless the entry names its own
    akey = proj.audio_key or ("whisper_config" if "whisper_config" in cfg else "audio_config")
    ac = towers(cfg).get(akey)
    for keys in proj.audio_required:
        if not isinstance(ac, dict) or not any(k in ac for k in keys):
            raise E.InvalidModelConfig(
                "audio hyperparameter missing (this projector always has an audio part)",
                path=path, field=f"{akey}.{keys[0]}", expected="a value",
                found=ac if not isinstance(ac, dict) else None,
            )  # fmt: skip
    if proj.check is not None and (bad := proj.check(towers(cfg))) is not None:
        field, want, found = bad
        raise E.InvalidModelConfig(
            "the reference converter accepts only this tower variant",
            path=path, field=field, expected=want, found=found,
        )  # fmt: skip
    return proj


def _token_id(d: Path, token: str) -> int:
    """The id of a special token: tokenizer_config.json's ``added_tokens_decoder``, then
    tokenizer.json's ``added_tokens`` (LlavaVisionModel.get_token_id)."""
    tc = d / "tokenizer_config.json"
    if tc.is_file():
        j = read_json(tc, E.TokenizerInconsistent, "tokenizer_config.json")
        dec = j.get("added_tokens_decoder") if isinstance(j, dict) else None
        for k, v in (dec or {}).items():
            if isinstance(v, dict) and v.get("content") == token and str(k).isdecimal():
                return int(k)
    tj = d / "tokenizer.json"
    if tj.is_file():
        j = read_json(tj, E.TokenizerInconsistent, "tokenizer.json")
        for t in (j.get("added_tokens") or []) if isinstance(j, dict) else []:
            if isinstance(t, dict) and t.get("content") == token and isinstance(t.get("id"), int):
                return t["id"]
    raise E.MissingModelFile(
        f"the projector needs the {token} token, which the tokenizer files do not name",
        path=d,
        field=token,
        expected="an added token in tokenizer_config.json or tokenizer.json",
        found="none",
    )


def _mmproj_type(type: str, kept: list[H._Source]) -> str:
    t = type.lower()
    if t == "auto":
        return H._auto_type(kept)
    return t if t in H._OUTTYPES else "f16"


def _type_of(proj: Projector, tp: H.TensorPlan, ot: str, hf: str | None = None) -> str:
    """prepare_tensors' choice for a projector tensor (``hf``: its source key; an extra
    one by its GGUF name)."""
    if hf is None:
        hf = tp.pieces[0][1].hf if tp.pieces else tp.name
    forced = proj.force(hf, tp.name, ot)
    if len(tp.shape) <= 1 or tp.name.endswith("_norm.weight"):
        return "F32"
    if forced is not None:
        return forced
    # position embeddings and non-.weight tensors F32, Q8_0's F16 fallback: as the text file
    return H._outtype_type(ot, tp.name, tp.shape)


def _fold_groups(
    proj: Projector, by_key: dict[str, H._Source], d: Path
) -> tuple[list[tuple[list[str], list[str]]], set[str]]:
    """The projector's fold groups present in the source: ``[(member keys, GGUF names)]``
    and every member key; a group with a member missing (UnmappedTensor) or members of
    different shapes (TensorShapeMismatch) is named."""
    if proj.fold is None:
        return [], set()
    members, names, _ = proj.fold
    groups: dict[str, dict] = {}
    for k in by_key:
        for t in members:
            fields = _fields(t, k)
            if fields is not None:
                groups.setdefault(fields["bid"], {})[t] = k
    out, folded = [], set()
    for bid, got in groups.items():
        if len(got) != len(members):
            missing = [t.format(bid=bid) for t in members if t not in got]
            raise E.UnmappedTensor(
                "a folded tensor group is incomplete",
                path=d,
                field=f"tensor {next(iter(got.values()))!r}",
                expected="all of " + ", ".join(t.format(bid=bid) for t in members),
                found="missing " + ", ".join(missing),
            )
        keys = [got[t] for t in members]
        shapes = [list(by_key[k].shape) for k in keys]
        if any(sh != shapes[0] for sh in shapes):
            raise E.TensorShapeMismatch(
                "folded tensors of different shapes",
                path=d,
                field=f"tensor {keys[0]!r}",
                expected=f"{shapes[0]} for all of " + ", ".join(keys),
                found=str(shapes),
            )
        out.append((keys, [n.format(bid=bid) for n in names]))
        folded.update(keys)
    return out, folded


def _companion_read(proj: Projector, d: Path, stack: list) -> tuple[dict, Any]:
    """The second checkpoint's config and open file (``Projector.companion``; the handle
    joins ``stack``, so its header is parsed once for the view, the plan and the data); a
    missing file is named (the reference stops on a FileNotFoundError)."""
    assert proj.companion is not None
    wfile, cfile, _ = proj.companion
    for rel in (cfile, wfile):
        if not (d / rel).is_file():
            raise E.MissingModelFile(
                "the projector's second checkpoint is missing a file",
                path=d / rel, expected=rel, found="no such file",
            )  # fmt: skip
    cfg = read_json(d / cfile, E.InvalidModelConfig, cfile, expected="a JSON object")
    f = H.safe_open(d / wfile, framework="np", mmap=False)
    stack.append(f)
    return (cfg if isinstance(cfg, dict) else {}), f


def _shapes(f: Any) -> dict[str, tuple[int, ...]]:
    return {n: tuple(f.info(n).shape) for n in f.keys()}  # noqa: SIM118 (a handle)


def _companion_error(proj: Projector, d: Path, exc: Exception) -> E.MissingModelFile:
    assert proj.companion is not None
    wfile, cfile, _ = proj.companion
    return E.MissingModelFile(
        "the projector's second checkpoint lacks a tensor or config field it needs",
        path=d / wfile, field=str(exc).strip("'\""), expected=f"it in {wfile} / {cfile}",
        found="none",
    )  # fmt: skip


def _companion(proj: Projector, d: Path, read: tuple[dict, Any] | None) -> list[H.TensorPlan]:
    """The tensors of the projector's second checkpoint (``Projector.companion``) from its
    header and config; a missing file, config field or tensor, or a tensor the entry
    cannot name (its ``fn`` raises ValueError with the name) is named (the reference stops
    on a FileNotFoundError / KeyError / ValueError)."""
    if proj.companion is None or read is None:
        return []
    wfile, _, fn = proj.companion
    cfg, handle = read
    try:
        items = fn(_shapes(handle), cfg)
    except (KeyError, TypeError, IndexError) as exc:
        raise _companion_error(proj, d, exc) from None
    except ValueError as exc:  # a tensor the projector cannot name
        raise E.UnmappedTensor(
            "the projector's second checkpoint has a tensor without a GGUF name",
            path=d / wfile, field=f"tensor {exc.args[0]!r}", expected="a weight the projector names",
            found=str(exc.args[0]),
        ) from None  # fmt: skip

    def get(name: str) -> Any:
        return H._widen(handle.get_tensor(name))

    return [H.TensorPlan(g, tuple(shape), "F32", make=lambda f=f: f(get)) for g, shape, f in items]


def _fields(template: str, name: str) -> dict | None:
    mt = re.fullmatch(re.escape(template).replace(r"\{bid\}", r"(?P<bid>\d+)"), name)
    return None if mt is None else mt.groupdict()


def _fold_data(proj: Projector, srcs: list[H._Source]) -> list:
    assert proj.fold is not None
    return proj.fold[2](*(H._widen(s.load()) for s in srcs))


def _check_rows(
    proj: Projector,
    view: dict,
    cfg_path: Path,
    first: Callable[[], None] = lambda: None,
    *,
    section: str = "vision_config",
) -> None:
    """Every clip.* row now (after ``first``), so a bad value stops the plan before any
    file is written (``section``: the config part a vision row reads)."""
    try:
        first()
        for k, v, t in proj.entry.metadata(view):
            if k != FILE_TYPE:  # a value the writer cannot store stops here, not mid-write
                encode_value(v, t, key=k)
    except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError,
            E.GGUFInvalidValue) as exc:  # fmt: skip
        # an audio-only class also reads top-level fields (Ultravox's ``stack_factor``)
        kind, where = ("vision", section) if proj.vision else ("audio", "audio config")
        raise E.InvalidModelConfig(
            f"{kind} hyperparameters the projector cannot use",
            path=cfg_path, field=where, expected="values llama.cpp's class accepts",
            found=str(exc),
        ) from None  # fmt: skip


def plan_mmproj(
    src: str | os.PathLike[str],
    type: str,
    stack: list,
    weights: Callable[[], list[H._Source]] | None = None,
) -> H._Plan:
    """The projector file's plan (tensors, types, config view), from the headers alone;
    ``weights()`` gives the folder's tensors as read (the text conversion's
    :attr:`~weightsmith.convert._hf_to_gguf.ModelInput.weights`: the headers are parsed
    once for both files), else they are read here.

    Raises the named errors of a folder that has no projector to write: no
    ``vision_config`` (an audio-only entry: no audio config field it reads), an
    architecture without a projector entry, a missing vision hyperparameter, no image
    mean/std (``preprocessor_config.json``, vision entries), no tower tensors, or a
    tower tensor the entry cannot name.
    """
    d = Path(src)
    if weights is None:
        weights = functools.cache(lambda: H._sources(d, stack))
    cfg_path = d / "config.json"
    # the class reads the config as written (text_config not merged up): the top-level
    # architecture (a text_config may name its own: SmolVLM's VLlama3ForCausalLM), and
    # Qwen2.5-VL's vision norm epsilon is the top-level rms_norm_eps or 1e-6; a checkpoint
    # without config.json: the config its tensor shapes give (the registry's hook)
    raw = _class_vision(H._raw_config(d, weights), cfg_path)
    proj = _projector(raw, cfg_path)
    pre = {**dict(proj.pre_defaults), **_preprocessor(d)}
    if proj.pre_nested is not None and isinstance(pre.get(proj.pre_nested), dict):
        pre = {**pre, **pre[proj.pre_nested]}
    for key in ("image_mean", "image_std") if proj.vision else ():
        if not isinstance(pre.get(key), list):
            raise E.MissingModelFile(
                "the image processor settings are missing",
                path=d / "preprocessor_config.json",
                field=key,
                expected="a list of 3 floats in preprocessor_config.json or processor_config.json",
                found=pre.get(key),
            )
    view = vision_view(raw, pre)
    view[FOLDER] = d.name
    if proj.audio_key is not None:  # the class's own get_audio_config (MERaLiON's speech_config)
        view[AUDIO] = towers(raw).get(proj.audio_key)
    if proj.token is not None:
        view[TOKEN_ID] = _token_id(d, proj.token)
    comp = _companion_read(proj, d, stack) if proj.companion is not None else None
    if proj.companion_view is not None and comp is not None:  # MiMo-V2.5's second checkpoint
        try:
            view.update(proj.companion_view(comp[0], _shapes(comp[1])))
        except (KeyError, TypeError, IndexError) as exc:
            raise _companion_error(proj, d, exc) from None
    return plan_tower(proj, view, d, type, weights(), cfg_path, comp=comp)


def plan_tower(
    proj: Projector,
    view: dict,
    d: Path,
    type: str,
    weights: list[H._Source],
    cfg_path: Path,
    *,
    comp: tuple[dict, Any] | None = None,
    section: str = "vision_config",
    auto: list[H._Source] | None = None,
) -> H._Plan:
    """The projector file's plan for the entry ``proj`` over the vision ``view`` (its
    config checked, the rows not yet read) and the folder's tensors ``weights``:
    ``comp`` the second checkpoint read, ``section`` the config part a bad row is
    named by, ``auto`` the tensors ``auto`` reads its type from (default: the kept
    ones)."""
    if proj.from_shapes is None:
        _check_rows(proj, view, cfg_path, section=section)
    by_key: dict[str, H._Source] = {}
    for s in weights:
        key = proj.source_key(s.name, view)
        if key is not None:
            by_key[key] = s
    if not any(k != TOKEN_SOURCE for k in by_key):  # the text embedding's row is no tower
        raise E.MissingModelFile(
            f"no {'vision' if proj.vision else 'audio'} tower tensors in the weights",
            path=d,
            expected="tensors under " + ", ".join(proj.keep),
            found="none",
        )
    if proj.from_shapes is not None:  # the rows read the tensors' shapes too
        shapes = {k: tuple(s.shape) for k, s in by_key.items()}
        _check_rows(
            proj, view, cfg_path, lambda: view.update(proj.from_shapes(view, shapes)),
            section=section,
        )  # fmt: skip
    if proj.token is not None:
        emb = by_key.get(TOKEN_SOURCE)
        if emb is None or len(emb.shape) != 2 or not 0 <= view[TOKEN_ID] < emb.shape[0]:
            raise E.TensorShapeMismatch(
                f"no text embedding row for the {proj.token} token",
                path=d,
                field=proj.embeddings[0],
                expected=f"a 2-D embedding with row {view[TOKEN_ID]}",
                found=None if emb is None else list(emb.shape),
            )
    folds, folded = _fold_groups(proj, by_key, d)
    try:
        outs = proj.entry.plan(
            [(k, s.shape) for k, s in by_key.items() if k not in folded], view, {}
        )
    except PlanError as exc:
        src_ = by_key.get(exc.name)
        raise E.UnmappedTensor(
            "vision tensor has no GGUF name for this projector",
            path=d,
            field=f"tensor {src_.name if src_ else exc.name!r}",
            expected="a clip (mmproj) weight",
            found=f"{exc.name} {exc.detail}".strip(),
        ) from None
    ot = _mmproj_type(type, list(by_key.values()) if auto is None else auto)
    tensors = []
    for gname, fn in proj.entry.extra.items():  # computed from the config, written first
        arr = fn(view)
        if arr is not None:
            tp = H.TensorPlan(gname, arr.shape, "F32", make=lambda a=arr: a)
            tp.type = _type_of(proj, tp, ot)
            tensors.append(tp)
    for tp in _companion(proj, d, comp):  # a second checkpoint's, written next
        tp.type = _type_of(proj, tp, ot)
        tensors.append(tp)
    order = {k: i for i, k in enumerate(by_key)}
    placed: list[tuple[int, H.TensorPlan, str]] = []
    for o in outs:
        pieces = [(by_key[p.hf], p) for p in o.pieces]
        tp = H.TensorPlan(o.name, o.shape, "F32", source=pieces[0][0], hf_name=pieces[0][0].name,
                        pieces=pieces, stacked=o.stacked)  # fmt: skip
        placed.append((order[o.pieces[0].hf], tp, o.pieces[0].hf))
    for members, names in folds:
        srcs = [by_key[k] for k in members]
        at = max(order[k] for k in members)  # written when the last member is read
        folded_once: dict = {}  # the group's members are read and folded once for all
        for j, gname in enumerate(names):

            def make(srcs=srcs, j=j, memo=folded_once) -> Any:
                if "out" not in memo:
                    memo["out"] = _fold_data(proj, srcs)
                return memo["out"][j]

            tp = H.TensorPlan(gname, tuple(srcs[0].shape), "F32", source=srcs[0],
                              hf_name=srcs[0].name, make=make)  # fmt: skip
            placed.append((at, tp, members[0]))
    placed.sort(key=lambda x: x[0])  # stable: a fold's outputs in their own order
    for _, tp, hf in placed:
        tp.type = _type_of(proj, tp, ot, hf)
        tensors.append(tp)
    # no ModelInput: the text file's metadata path (_metadata) is not taken for this plan
    return H._Plan(
        input=None,  # type: ignore[arg-type]
        arch=proj.entry,
        cfg=view,
        ctx={},
        tensors=tensors,
        type_name=ot,
        file_type=FILE_TYPES[H._OUTTYPES[ot]].id,
        vocab=[],
    )


def _rows(
    p: H._Plan, d: Path, given: str, name: str | None, name_or_path: bool
) -> list[tuple[str, Any, Any]]:
    rows: list[tuple[str, Any, Any]] = [("general.type", "mmproj", VT.STRING)]
    shapes = [(t.name, t.shape) for t in p.tensors]
    rows += provenance_rows(d, given, shapes, name, name_or_path=name_or_path)
    for k, v, t in p.arch.metadata(p.cfg):
        rows.append(("general.file_type", p.file_type, VT.UINT32) if k == FILE_TYPE else (k, v, t))
    rows.append(("general.quantization_version", H.QUANTIZATION_VERSION, VT.UINT32))
    return rows


def write_mmproj(
    p: H._Plan,
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    name: str | None = None,
    workers: int | None = None,
    name_or_path: bool = True,
) -> dict[str, str]:
    """Write the planned projector to ``dst``; its tensor types by name
    (``name_or_path``: as :attr:`~weightsmith.convert._hf_to_gguf.ModelInput.name_or_path`)."""
    d, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with Writer(dst, arch=p.arch.gguf_arch) as w:
        for k, v, t in _rows(p, d, os.fspath(src), name, name_or_path):
            w.add(k, v, t)
        for tp in p.tensors:
            w.add_tensor_info(tp.name, tp.type, tp.shape)
        for tp in p.tensors:
            for b in H._encoded(tp, p, None, workers):
                w.write_tensor_chunk(tp.name, b)
    return {tp.name: tp.type for tp in p.tensors}
