"""GGUF -> Hugging Face model folder that transformers loads.

The inverse of :mod:`weightsmith.convert` HF -> GGUF, driven by the same
architecture registry (:mod:`weightsmith.convert.arch`); nothing here keeps a
second table of names or transforms:

* ``config.json`` -- every ``<arch>.*`` metadata row of the registry entry is
  written back to the config field it came from (``MetaKey.fields[0]``; dotted
  fields such as ``rope_scaling.type`` become nested objects).  Facts GGUF keeps
  elsewhere are added: ``vocab_size`` (rows of ``token_embd``),
  ``tie_word_embeddings`` (no ``output.weight``), the special token ids, and
  ``rope_scaling`` of type ``llama3`` recovered from the ``rope_freqs`` tensor
  (checked by recomputing that tensor with the registry's own function), and
  LongRoPE's ``rope_scaling`` from the ``rope_factors_long/short`` tensors;
  What GGUF does not keep cannot come back: llama.cpp writes Mistral as ``llama``
  (``general.name`` then picks MistralForCausalLM, with full attention as llama.cpp
  runs it), and Gemma 3's embedding rows past the tokenizer are dropped by its
  converter (``vocab_size`` is then the tokenizer's size);
* ``generation_config.json`` -- the special token ids;
* ``README.md`` -- a model card whose YAML front matter carries the ``general.*``
  provenance (license, languages, tags, base models, name, organization, finetune,
  basename), which HF -> GGUF reads back;
* ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` --
  :func:`weightsmith.convert.tokenizer.write_hf_tokenizer`;
* ``modules.json`` and ``1_Pooling/config.json`` -- an embedding model's
  ``<arch>.pooling_type`` as sentence-transformers modules (:mod:`._pooling`), with
  ``2_Dense`` / ``3_Dense`` (``config.json`` + ``model.safetensors``) for the entry's
  ``dense`` tensors (EmbeddingGemma);
* ``model.safetensors`` or ``model-0000i-of-0000N.safetensors`` with
  ``model.safetensors.index.json`` -- laid out as
  :func:`weightsmith.safetensors.save_sharded` lays them out.

Streaming: shard sizes follow from the tensor shapes, so each shard is opened
with a :class:`~weightsmith.safetensors.StreamWriter` (header first) and its
tensors are then, one at a time, dequantized to float32 (any ggml type),
inverse-transformed (registry ``Transform.inverse``, last transform first),
cast and written.  At most a dequantized tensor, its transformed copy and its
cast copy are alive at once: peak memory stays under 3x the largest tensor in
float32 plus the interpreter.  Every file is written atomically; config.json
goes last.  The folder is built beside ``dst_folder`` and renamed into place
(:func:`weightsmith._atomic.atomic_folder`): it appears complete or not at
all, and an older folder there is replaced as a whole (no leftover shards).
The tokenizer files are built before anything is written, so a missing
dependency or bad tokenizer metadata leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np

from .. import errors as E
from .._atomic import atomic_folder, atomic_output
from ..dtypes import SAFETENSORS, DType, dtype_by_name
from ..gguf import GGUFFile, read
from ..quant import dequantize
from ..quant.file import dequantize_tensor
from ..safetensors import (
    INDEX_NAME,
    StreamWriter,
    parse_size,
    save_file,
    shard_names,
    split_shards,
    write_index,
)
from . import _mmproj_to_hf as V  # a module import: it imports this module too
from ._model_card import card_text
from ._pooling import late_interaction_files, sentence_transformers_files
from .arch import FILE_TYPE, REGISTRY, HfTensor, by_gguf_arch, llama3_rope_freqs
from .tokenizer import hf_tokenizer_files

__all__ = ["gguf_to_hf"]

_NATIVE = "<" if sys.byteorder == "little" else ">"

# the dtypes a GGUF -> HF folder may be written in (safetensors codes): the
# 16- and 32-bit floats, what a transformers ``torch_dtype`` names
_OUT_DTYPES = tuple(d.name for d in SAFETENSORS.values() if d.is_float and d.bits in (16, 32))


# GGUF special-token key suffix -> config.json field
_SPECIAL_IDS = {"bos": "bos_token_id", "eos": "eos_token_id", "padding": "pad_token_id"}


def _float(v: Any) -> Any:
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.99e-06)."""
    if isinstance(v, float):
        return float(str(np.float32(v)))
    return v


def _norm_dtype(dtype: str | DType) -> DType:
    """``"bf16"``, ``"float16"``, ``"F32"``, ... -> the dtype table's entry."""
    try:
        dt = dtype if isinstance(dtype, DType) else dtype_by_name(dtype)
    except KeyError:
        dt = None
    if dt is None or dt.name not in _OUT_DTYPES:
        raise E.UnsupportedTargetDtype(
            "unsupported output dtype",
            field="dtype",
            expected="one of bf16, f16, f32",
            found=repr(dtype),
        )
    return dt


# --------------------------------------------------------------------------- config.json


def _entry(md: Mapping[str, Any], path: Path, tensor_names: set[str]):
    arch = md.get("general.architecture")
    vocab = md.get("tokenizer.ggml.model")
    entry = (
        by_gguf_arch(arch, vocab if isinstance(vocab, str) else None, md, tensor_names)
        if isinstance(arch, str)
        else None
    )
    if entry is None:
        known = sorted({a.gguf_arch for a in REGISTRY.values()})
        raise E.UnknownArchitecture(
            "no GGUF -> HF conversion for this architecture",
            path=path,
            field="general.architecture",
            expected="one of " + ", ".join(known),
            found=repr(arch) if arch is not None else "no such key",
        )
    return entry


def _hf_arch(entry: Any, md: Mapping[str, Any], names: set[str] | None = None) -> str:
    """The HF class: the entry's first, or a sibling sharing its GGUF layout whose model
    type the file names (llama.cpp writes Mistral as ``llama``; ``general.name`` keeps it),
    or whose experts the file has (Mixtral is ``llama`` with ``ffn_*_exps``; DeepSeek-V3
    is ``deepseek2`` with ``exp_probs_b``; UMT5 is ``t5`` with a bias in every block), or
    whose classification head it has (a DistilBERT reranker's ``cls.output``), or whose
    masked-LM head (ModernBERT's ``cls`` + ``cls.norm``, no ``cls.output``)."""
    if names and any(n.endswith("_exps.weight") for n in names) and entry.stacks:
        for cls in entry.hf_archs:
            if entry.model_types.get(cls) == "mixtral":
                return cls
    # DeepSeek-V3 shares V2's layout; only V3 has the router's score-correction bias
    # (and transformers' V3 class applies its rotary interleaved, V2's does not)
    if names and any(n.endswith("exp_probs_b.bias") for n in names):
        for cls in entry.hf_archs:
            if entry.model_types.get(cls) == "deepseek_v3":
                return cls
    # UMT5 keeps a relative attention bias in every block, T5 and mT5 in the first only
    if names and "enc.blk.1.attn_rel_b.weight" in names:
        for cls in entry.hf_archs:
            if entry.model_types.get(cls) == "umt5":
                return cls
    # a reranker's head (llama.cpp's cls.output) where the entry can rebuild its HF class
    if names and "cls.output.weight" in names:
        for cls in entry.hf_archs:
            if cls.endswith("ForSequenceClassification") and cls in entry.model_types:
                return cls
    # a masked-LM prediction head without a classifier (ModernBERT's head.dense / head.norm
    # as cls / cls.norm; the decoder is the tied embedding)
    if names and "cls.norm.weight" in names and "cls.output.weight" not in names:
        for cls in entry.hf_archs:
            if cls.endswith("ForMaskedLM") and cls in entry.model_types:
                return cls
    name = " ".join(str(md.get(k, "")) for k in ("general.basename", "general.name")).lower()
    for cls in entry.hf_archs[1:]:
        mt = entry.model_types.get(cls, "")
        if mt and mt in name and mt != entry.model_types.get(entry.hf_archs[0]):
            return cls
    return entry.hf_archs[0]


def _set(cfg: dict, field: str, value: Any) -> None:
    """``rope_scaling.type`` -> ``cfg["rope_scaling"]["type"]``; the first value wins."""
    *parents, leaf = field.split(".")
    d = cfg
    for p in parents:
        d = d.setdefault(p, {})
    d.setdefault(leaf, value)


def _metadata_config(entry: Any, md: Mapping[str, Any]) -> tuple[dict, dict[str, str]]:
    """Config fields from the ``<arch>.*`` rows; also GGUF key -> field for each row."""
    cfg: dict[str, Any] = {}
    key_of: dict[str, str] = {}
    for row in entry.meta:
        if row == FILE_TYPE:
            continue
        key = row.full_key(entry.gguf_arch)
        field = row.fields[0]
        key_of.setdefault(field, key)
        if key in md:  # "_...": derived, no config field (seen by hf_config, then dropped)
            _set(cfg, field, row.back(_float(md[key])))
    return cfg, key_of


def _missing_keys(entry: Any, md: Mapping[str, Any], key_of: dict[str, str]) -> list[str]:
    # vocab_size is the embedding's row count, never a required key
    need = entry.required if entry.hf_required is None else entry.hf_required
    return [key_of.get(f, f) for f in need if f != "vocab_size" and key_of.get(f, f) not in md]


def _llama3_rope(entry: Any, cfg: dict, freqs: np.ndarray) -> dict | None:
    """``rope_scaling`` of type llama3 whose ``rope_freqs`` equal ``freqs``.

    The factors only fix ``factor`` and the ratios of the context length and the two
    frequency factors; Meta's models use ``low_freq_factor = 1``, which fixes the rest.
    Candidates (a least-squares fit over the smoothly scaled frequencies, then Llama
    3.1's values, then Llama 4's ``high_freq_factor = 1``) are checked by recomputing
    the tensor with the registry's function.
    """
    freqs = np.asarray(freqs, np.float64)
    factor = float(np.float32(freqs.max()))
    theta = cfg.get("rope_theta", 10000.0)
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / theta ** (np.arange(0, dim, 2) / dim)
    wavelen = 2 * math.pi / inv
    cands: list[tuple[float, float, float]] = []
    mid = (freqs > 1 + 1e-6) & (freqs < factor * (1 - 1e-6))
    if mid.sum() >= 2 and factor > 1:
        # 1/r = (1 - s)/factor + s with s = (L/wl - lo)/(hi - lo): s is linear in 1/wl
        s = (1 / freqs[mid] - 1 / factor) / (1 - 1 / factor)
        a, b = np.polyfit(1 / wavelen[mid], s, 1)
        if b < 0:
            hi = 1 - 1 / b
            length = a * (hi - 1)
            cands.append((float(round(length)), 1.0, float(round(hi, 4))))
    cands.append((8192.0, 1.0, 4.0))
    for p in (2**k for k in range(4, 21)):
        cands.append((float(p), 1.0, 4.0))
    # Llama 4's step (low = high = 1: no smoothed band), which the fit above cannot see
    cands += [(float(2**k), 1.0, 1.0) for k in range(4, 21)]
    best, best_err = None, math.inf
    for length, lo, hi in cands:
        rope = {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": lo,
            "high_freq_factor": hi,
            "original_max_position_embeddings": int(length),
        }
        probe = {**cfg, "rope_scaling": rope, "rope_theta": theta}
        got = llama3_rope_freqs(probe)
        if got is None or got.shape != freqs.shape:
            continue
        err = float(np.max(np.abs(got - freqs) / np.maximum(np.abs(freqs), 1e-30)))
        if err < best_err:
            best, best_err = rope, err
        if err == 0.0:
            break
    return best


def build_config(
    f: GGUFFile,
    dtype: str | DType = "bf16",
    *,
    path: Path | None = None,
    text_model_type: str | None = None,
) -> tuple[Any, dict, dict]:
    """``(registry entry, config.json, generation_config.json)`` for the GGUF ``f``.

    ``text_model_type``: the file is the text half of a vision-language model whose
    text config has this ``model_type`` (a text GGUF with no HF class alone, such as
    ``qwen2vl``, then converts); no ``architectures`` is written."""
    dtype = _norm_dtype(dtype)
    md = f.metadata
    path = path or f.path
    entry = _entry(md, path, {t.name for t in f.tensors})
    if not entry.hf_back:  # DeepSeek-V4: transformers reads DeepSeek's own layout only
        raise E.UnknownArchitecture(
            "GGUF -> HF is not done for this GGUF architecture",
            path=path,
            field="general.architecture",
            expected="an architecture with an HF layout the converter writes",
            found=entry.gguf_arch,
        )
    cfg, key_of = _metadata_config(entry, md)
    missing = _missing_keys(entry, md, key_of)
    if missing:
        raise E.MissingGGUFMetadata(
            "metadata needed for config.json is missing",
            path=path,
            field=f"{entry.gguf_arch}.*",
            expected="keys " + ", ".join(missing),
            found="none of them" if len(missing) > 1 else "no such key",
        )
    if "token_embd.weight" not in f:
        raise E.MissingGGUFTensor(
            "the token embedding is missing",
            path=path,
            field="tensor 'token_embd.weight'",
            expected="a tensor [n_vocab, n_embd]",
            found="no such tensor",
        )
    tensor_names = {t.name for t in f.tensors}
    hf_arch = _hf_arch(entry, md, tensor_names)
    out: dict[str, Any]
    if text_model_type is not None:
        out = {"model_type": text_model_type}
    elif hf_arch in entry.model_types:
        out = {"architectures": [hf_arch], "model_type": entry.model_types[hf_arch]}
    else:  # e.g. the text half of a VLM (qwen2vl): only with its projector
        raise E.UnknownArchitecture(
            "no HF model class for this GGUF architecture alone (a VLM's text half: give its projector)",
            path=path,
            field="general.architecture",
            expected="an architecture with an HF class of its own",
            found=f"{entry.gguf_arch} (as {entry.hf_archs[0]})",
        )
    out.update(cfg)
    if out["model_type"] in ("mistral", "mixtral"):
        # llama.cpp runs a `llama` GGUF with full attention; MistralConfig would default to
        # a 4096-token window
        out.setdefault("sliding_window", None)
    out["vocab_size"] = int(f.tensor("token_embd.weight").shape[0])
    out["tie_word_embeddings"] = "output.weight" not in f
    if "token_types.weight" in f:  # BERT's segment embeddings: their rows are the count
        out["type_vocab_size"] = int(f.tensor("token_types.weight").shape[0])
    # the hook also sees the vocabulary size (Gemma 4's per-layer embedding has as many rows)
    # and the tensors' shapes (numpy order): Gemma 3n's LAuReL rank is only a shape
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in f.tensors}
    out.update(
        entry.hf_config({**cfg, "vocab_size": out["vocab_size"], "_shapes": shapes}, tensor_names)
    )
    out = {k: v for k, v in out.items() if not k.startswith("_")}
    rs = out.get("rope_scaling")
    if isinstance(rs, dict) and "type" in rs:
        rs.setdefault("rope_type", rs["type"])
    if "rope_freqs.weight" in f and "rope_freqs.weight" in entry.extra:
        rope = _llama3_rope(entry, out, dequantize_tensor(f, "rope_freqs.weight"))
        if rope is not None:
            out["rope_scaling"] = rope
    if "rope_factors_long.weight" in f and "rope_factors_long.weight" in entry.extra:
        # LongRoPE (Phi-3): the factor lists are the two tensors' values
        out["rope_scaling"] = {"rope_type": "longrope", "type": "longrope"} | {
            f"{k}_factor": [
                _float(float(v)) for v in dequantize_tensor(f, f"rope_factors_{k}.weight")
            ]
            for k in ("long", "short")
        }
    gen: dict[str, Any] = {}
    for suffix, field in _SPECIAL_IDS.items():
        v = md.get(f"tokenizer.ggml.{suffix}_token_id")
        if isinstance(v, int):
            out[field] = v
            gen[field] = v
    eot = md.get("tokenizer.ggml.eot_token_id")
    if isinstance(eot, int) and "eos_token_id" in gen and eot != gen["eos_token_id"]:
        gen["eos_token_id"] = [gen["eos_token_id"], eot]
    name = dtype.torch  # config.json names dtypes as torch does
    out["torch_dtype"] = name  # transformers 4.x
    out["dtype"] = name  # transformers 5.x
    return entry, dict(sorted(out.items())), gen


# --------------------------------------------------------------------------- tensors


@dataclass
class Part:
    """One GGUF of a folder being written: the file, its registry entry (a text
    :class:`~.arch.Arch`, or a projector's), the config its transforms read, its path."""

    f: GGUFFile
    entry: Any
    cfg: dict
    path: Path


@dataclass
class _Out:
    """One HF tensor: its name as written, its shape, how it is read (registry
    ``HfTensor``, whose ``name`` the entry's transforms match), and from which part."""

    hf: str
    shape: tuple[int, ...]
    src: HfTensor
    part: int = 0
    # a tensor in neither GGUF, made from ``src``'s values (Granite Speech's batch norm
    # running statistics beside the folded scale); None: ``src``'s values themselves
    derive: Callable[[np.ndarray], np.ndarray] | None = None


def plan_tensors(
    part: Part,
    index: int = 0,
    rename: Callable[[str], str] = lambda name: name,
    skip: frozenset[str] = frozenset(),
) -> list[_Out]:
    """Every HF tensor written from ``part`` (the ``index``-th of the folder), in file
    order, from the registry's inverse plan; ``rename`` gives the name written (the
    rules' name stays the one transforms match), ``skip`` GGUF tensors not read."""
    f, entry, cfg, path = part.f, part.entry, part.cfg, part.path
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in f.tensors if t.name not in skip}
    hf, unmapped = entry.inverse_plan(list(shapes.items()), cfg)
    if unmapped:
        raise E.UnmappedTensor(
            f"no Hugging Face name for {len(unmapped)} tensor(s)",
            path=path,
            field="tensors " + ", ".join(repr(n) for n in unmapped[:8]),
            expected=f"names of the {entry.gguf_arch!r} name map",
            found=", ".join(unmapped[:8]) + (" ..." if len(unmapped) > 8 else ""),
        )
    plan = []
    for h in hf:
        if h.expert is not None:
            shape = shapes[h.sources[0]][1:]
        elif len(h.sources) > 1:
            shape = h.shape([shapes[s] for s in h.sources], cfg)
        else:
            shape = shapes[h.sources[0]]
            for t in reversed(entry.transforms_for(h.name)):
                if t.inverse_shape is not None:
                    shape = t.inverse_shape(shape, cfg, {})
        plan.append(_Out(rename(h.name), shape, h, index))
    return plan


def _read_f32(f: GGUFFile, files: list[BinaryIO], name: str, slab: int | None = None) -> np.ndarray:
    """float32 values of one tensor (or of its slab ``slab`` along the first axis), read
    into private memory.

    Reading (rather than taking views of the mmap) keeps the file's pages out of
    the process's resident set: the pages of tensors already converted would
    otherwise stay counted until the kernel reclaims them.
    """
    t = f.tensor(name)
    dt = t.ggml_type.numpy
    if dt is not None and dt.itemsize > 1 and f.byte_order != _NATIVE:
        x = dequantize_tensor(f, name)  # byte-swapped file: the reader handles the swap
        return x if slab is None else np.ascontiguousarray(x[slab])
    shape = tuple(t.shape) if slab is None else tuple(t.shape)[1:]
    nbytes = t.nbytes if slab is None else t.nbytes // t.shape[0]
    offset = t.offset + (0 if slab is None else slab * nbytes)
    buf = np.empty(nbytes, np.uint8)
    fh = files[t.shard]
    fh.seek(offset)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = fh.readinto(view[got:])
        if not n:
            raise E.GGUFDataPastEOF(
                "tensor data ends early",
                path=f.paths[t.shard],
                field=f"tensor {name!r}",
                offset=offset,
                expected=f"{nbytes} bytes",
                found=f"{got} bytes",
            )
        got += n
    if dt is None:
        return dequantize(buf, t.ggml_type, shape)
    x = buf.view(dt).reshape(shape)
    return x if dt == np.float32 else x.astype(np.float32)


def _hf_values(part: Part, files: list[BinaryIO], out: _Out) -> np.ndarray:
    """float32 values of one HF tensor: its GGUF source(s) read (a slab of a stacked
    tensor, or split parts joined), then the registry's inverse transforms."""
    f, entry, cfg, path = part.f, part.entry, part.cfg, part.path
    h = out.src
    if h.expert is not None:
        x = _read_f32(f, files, h.sources[0], slab=h.expert)
    elif len(h.sources) > 1:
        x = h.join([_read_f32(f, files, s) for s in h.sources], cfg)
    else:
        x = _read_f32(f, files, h.sources[0])
    for tr in reversed(entry.transforms_for(h.name)):
        try:
            x = tr.inverse(x, cfg, {})
        except ValueError as exc:  # a reshape that the head counts do not fit
            raise E.TensorShapeMismatch(
                f"cannot undo {tr.name}: {exc}",
                path=path,
                field=f"tensor {h.sources[0]!r}",
                expected="a shape matching the head counts in the metadata",
                found=list(x.shape),
            ) from None
    if out.derive is not None:
        x = out.derive(x)
    return np.asarray(x, np.float32)


def cast(x: np.ndarray, np_name: str) -> np.ndarray:
    """float32 values as ``np_name`` (``bfloat16`` rounded to nearest even, as torch does)."""
    if np_name == "bfloat16":
        return x.astype(ml_dtypes.bfloat16)
    return x.astype(np_name, copy=False)


def write_weights(
    parts: list[Part],
    plan: list[_Out],
    folder: Path,
    dtype: DType,
    max_shard_size: int | str,
    progress: Callable | None,
) -> list[str]:
    """The safetensors file(s) of ``plan`` (tensors of ``parts``) in ``folder``; their names."""
    code, np_name, itemsize = dtype.name, dtype.numpy.name, dtype.itemsize
    sizes = {o.hf: math.prod(o.shape) * itemsize for o in plan}
    shards = split_shards([(o.hf, sizes[o.hf]) for o in plan], parse_size(max_shard_size))
    names = shard_names(len(shards))
    by_hf = {o.hf: o for o in plan}
    total = sum(sizes.values())
    done = [0, 0]  # bytes, tensors

    def tick(hf: str) -> None:
        done[0] += sizes[hf]
        done[1] += 1
        if progress is not None:
            progress(done[0], total, done[1], len(plan))

    with contextlib.ExitStack() as stack:
        files = [_files_of(p.f, stack) for p in parts]
        for fname, members in zip(names, shards):
            _write_shard(parts, files, folder / fname, members, by_hf, code, np_name, tick)
    if len(names) > 1:
        write_index(
            folder / INDEX_NAME,
            {hf: fname for fname, members in zip(names, shards) for hf in members},
            total_size=total,
            total_parameters=sum(math.prod(o.shape) for o in plan),
        )
        return [*names, INDEX_NAME]
    return names


def _write_shard(
    parts: list[Part],
    files: list[list[BinaryIO]],
    dest: Path,
    members: list[str],
    by_hf: dict[str, _Out],
    code: str,
    np_name: str,
    tick: Callable[[str], None],
) -> None:
    """One safetensors file: header first, then each tensor read, inverted, cast, written."""
    specs = [(hf, code, by_hf[hf].shape) for hf in members]
    with StreamWriter(dest, specs, {"format": "pt"}) as w:
        for hf in members:
            out = by_hf[hf]
            x = _hf_values(parts[out.part], files[out.part], out)
            if tuple(x.shape) != out.shape:
                raise E.TensorShapeMismatch(
                    "inverse transform changed the shape",
                    path=parts[out.part].path,
                    field=f"tensor {out.src.sources[0]!r}",
                    expected=list(out.shape),
                    found=list(x.shape),
                )
            y = cast(x, np_name)
            del x  # the float32 copy goes before the write, so two copies at most
            w.write(hf, np.ascontiguousarray(y))
            del y
            tick(hf)


def _files_of(f: GGUFFile, stack: contextlib.ExitStack) -> list[BinaryIO]:
    """The GGUF's shard files opened for reading (closed with ``stack``)."""
    return [stack.enter_context(open(p, "rb")) for p in f.paths]


def write_json(path: Path, obj: Any, *, sort_keys: bool = False) -> None:
    text = json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n"
    with atomic_output(path) as out:
        out.write(text.encode("utf-8"))  # UTF-8 whatever the locale (token strings)


# --------------------------------------------------------------------------- entry point


def _embedding_modules(entry: Any, f: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """An embedding model's sentence-transformers files (relative path -> JSON) and its
    Dense weights (relative path -> GGUF tensor): the pooling modules when the file has a
    pooling type, else a late-interaction (ColBERT) model's one Dense module, else none."""
    pooling = f.metadata.get(f"{entry.gguf_arch}.pooling_type")
    if isinstance(pooling, int) and not isinstance(pooling, bool):
        dense = [t for t in entry.dense if t in f]
        dims = [tuple(int(n) for n in f.tensor(t).shape[::-1]) for t in dense]
        width = int(f.tensor("token_embd.weight").shape[1])  # DistilBERT calls it dim
        weights = {f"{2 + k}_Dense/model.safetensors": t for k, t in enumerate(dense)}
        return sentence_transformers_files(pooling, width, dims), weights
    if entry.dense_file and entry.dense[0] in f:  # LFM2-ColBERT: no pooling
        n_out, n_in = (int(n) for n in f.tensor(entry.dense[0]).shape)
        files = late_interaction_files(entry.dense_file, n_in, n_out)
        return files, {f"{entry.dense_file}/model.safetensors": entry.dense[0]}
    return {}, {}


def gguf_to_hf(
    src: str | os.PathLike[str],
    dst_folder: str | os.PathLike[str],
    dtype: str = "bf16",
    max_shard_size: int | str = "5GB",
    progress: Callable[[int, int | None, int | None, int | None], None] | None = None,
    *,
    tokenizer: bool = True,
    mmproj: str | os.PathLike[str] | None = None,
) -> list[Path]:
    """Write the Hugging Face folder of the GGUF model ``src`` (a file, or any shard of a
    split set) into ``dst_folder``; return the paths written.

    ``dtype``: ``"bf16"``, ``"f16"`` or ``"f32"`` for every tensor (quantized ones are
    dequantized first).  ``max_shard_size``: as in ``save_pretrained`` (``"5GB"``, bytes).
    ``progress(bytes_done, bytes_total, tensors_done, tensors_total)`` is called after
    each tensor.  ``tokenizer=False`` skips the tokenizer files (a GGUF without
    ``tokenizer.ggml.*`` keys then converts too).  ``mmproj``: the text GGUF's vision
    projector (``general.architecture = clip``); the folder is then the whole
    ``*ForConditionalGeneration`` model (:mod:`._mmproj_to_hf`).
    """
    dtype = _norm_dtype(dtype)
    parse_size(max_shard_size)  # a bad size fails before any work
    src = Path(src)
    with read(src) as f, contextlib.ExitStack() as stack:
        inputs = tuple(f.paths)
        extra_files: dict[str, Any] = {}
        if mmproj is None:
            entry, cfg, gen = build_config(f, dtype, path=src)
            part = Part(f, entry, cfg, src)
            parts, plan = [part], plan_tensors(part)
            out_cfg = cfg if entry.hf_wrap is None else entry.hf_wrap(cfg)
        else:
            proj_path = Path(mmproj)
            proj = stack.enter_context(read(proj_path))
            entry, out_cfg, gen, parts, plan, extra_files = V.vlm_parts(
                f, proj, dtype, src, proj_path
            )
            inputs += tuple(proj.paths)
        if tokenizer and "tokenizer.ggml.model" not in f.metadata:
            raise E.MissingGGUFMetadata(
                "no tokenizer in the GGUF (pass tokenizer=False to convert the weights only)",
                path=src,
                field="tokenizer.ggml.*",
                expected="keys tokenizer.ggml.model, tokenizer.ggml.tokens",
                found="no such key",
            )
        # the tokenizer files are built (dependency and metadata checked) before any write
        tok_files: dict[str, Any] = {}
        if tokenizer:
            tok_files = hf_tokenizer_files(f.metadata, where=os.fspath(src))
        # the whole folder appears at once, replacing an older one as a whole
        folder = stack.enter_context(atomic_folder(dst_folder, inputs=inputs))
        names = write_weights(parts, plan, folder, dtype, max_shard_size, progress)
        for name, content in extra_files.items():  # a VLM's processor files
            write_json(folder / name, content)
            names.append(name)
        for name, content in tok_files.items():
            write_json(folder / name, content)
        names += list(tok_files)
        modules, weights = _embedding_modules(entry, f)
        for name, content in modules.items():  # an embedding model's modules
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            write_json(folder / name, content)
            names.append(name)
        for name, t in weights.items():  # the Dense weights beside their config.json
            x = cast(_read_f32(f, _files_of(f, stack), t), dtype.numpy.name)
            save_file({"linear.weight": np.ascontiguousarray(x)}, folder / name)
            names.append(name)
        card = card_text(f.metadata)
        if card is not None:  # provenance as a Hub model card, read back by HF -> GGUF
            (folder / "README.md").write_text(card, encoding="utf-8")
            names.append("README.md")
        if gen:
            write_json(folder / "generation_config.json", gen)
            names.append("generation_config.json")
        write_json(folder / "config.json", out_cfg)
        names.append("config.json")
    return [Path(dst_folder) / n for n in names]
