"""Hugging Face model folder -> one GGUF file, in one streaming pass.

What goes into the file, in order (the order llama.cpp's ``convert_hf_to_gguf.py``
and ``llama-quantize`` produce):

1. KVs: ``general.architecture``, ``general.type``, ``general.name``,
   ``general.size_label``; the architecture's ``<arch>.*`` rows from the
   :mod:`~weightsmith.convert.arch` registry with ``general.file_type`` at its place;
   ``general.quantization_version``; the ``tokenizer.*`` rows of
   :func:`weightsmith.convert.tokenizer.vocab_metadata`; with an importance matrix,
   llama-quantize's ``quantize.imatrix.*`` rows.
2. Tensor infos: the registry's extra tensors (``rope_freqs.weight``) first, then
   every weight in the reference's order (shard files sorted by name, tensor names
   sorted within each), under its GGUF name, with numpy-order shapes reversed into
   ggml order by the writer.
3. Tensor data, one tensor at a time: read (mmap), dequantized if the checkpoint is
   stored quantized (FP8 block scales, :mod:`._dequant`), widened to float32 unless
   float16 (as the reference does), transformed (Q/K permutation, norm + 1, ...), then cast
   or quantized to its type.

Types: ``f32``/``f16``/``bf16``/``q8_0`` follow the reference converter (1-D tensors,
``*_norm.weight`` and non-``.weight`` tensors stay F32; Q8_0 falls back to F16 for
rows not a multiple of 32); ``auto`` picks bf16/f16 from the first 2-D source tensor
(f16 when neither); any other llama-quantize file type (``q4_k_m``, ``iq4_xs``, ...)
gives what ``llama_model_quantize`` gives on the reference's f32 file: the
:func:`weightsmith.quant.recipes.plan` type per tensor, quantized from float32.

Inputs: :func:`hf_to_gguf` reads a folder; Meta's and Mistral's original layouts
(:mod:`._meta_to_hf`, :mod:`._mistral`) hand the same plan and writer a
:class:`ModelInput` (config, weight sources, tokenizer rows) and get the same steps.

Memory: only the tensor in flight is held: its float32 copy, the transformed copy
and the quantized output (quantization temporaries are bounded by
:data:`weightsmith.quant.MEMORY_BUDGET`).

Remote sources (``hf://ORG/REPO[@REV][/FOLDER]``, an ``http(s)://`` folder URL such
as ``.../resolve/main``, or an fsspec folder URL), streamed without a local copy:

* the small files (:data:`SMALL_FILES`: config, tokenizer, model card, index) are
  fetched whole into a temporary folder beside the output, deleted at the end;
  which exist comes from the Hub's repo listing for ``hf://`` (no probes), from
  probing each name elsewhere;
* the safetensors weights are opened remotely (headers only,
  :func:`weightsmith.safetensors.safe_open` of the URLs) and each source tensor is
  fetched by range when the plan needs it, exactly once, by prefetch threads
  that run up to :data:`PREFETCH_BYTES` ahead of the writer, so the download of
  the next tensors overlaps the quantization of this one;
* the output is byte-identical to converting a downloaded copy in a folder named
  like the repo (``general.name`` comes from that name).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import math
import os
import re
import threading
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors as E
from .. import torchfile
from .._json import read_json
from .._lazy import require
from ..byteio import (
    RemoteOptions,
    Session,
    fetch_whole,
    hub_listing,
    hub_token,
    is_url,
    parse_hub_ref,
    url_name,
)
from ..cluster import batches, map_tasks
from ..dtypes import GGML, SAFETENSORS
from ..gguf import GGUFValueType, Writer, ggml_n_dims, split
from ..progress import ProgressFn
from ..quant import dequantize, quantize
from ..quant.file import quantize_tensor
from ..quant.imatrix import Imatrix, for_tensor, read_imatrix
from ..quant.recipes import FILE_TYPES, file_type
from ..quant.recipes import plan as recipe_plan
from ..safetensors import Checkpoint, load, open_checkpoint, read_index, safe_open
from . import _mmproj
from ._dequant import dequantize_sources, e8m0_dequantize_sources
from ._model_card import provenance_rows
from ._pooling import (
    dense_modules,
    is_qwen3_reranker,
    module_files,
    pooling_type,
    rerank_tokens,
)
from .arch import (
    ENTRIES,
    FILE_TYPE,
    SLOT,
    Arch,
    Compose,
    Packed,
    Piece,
    PlanError,
    by_shapes,
    first,
    head_counts,
    layer_of,
    lookup,
    supported,
    text_merged,
)
from .tokenizer import vocab_metadata

VT = GGUFValueType

__all__ = ["ConversionResult", "TensorPlan", "hf_to_gguf", "plan_conversion"]

QUANTIZATION_VERSION = 2

# reference --outtype -> ggml type for quantizable tensors, also the name of its
# llama-quantize file type (whose LLAMA_FTYPE number goes into general.file_type)
_OUTTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}


# --------------------------------------------------------------------------- inputs


def _guessed_config(d: Any, weights: Callable[[], list[_Source]] | None) -> dict | None:
    """The config of a checkpoint that ships none, or None: a local folder without
    ``config.json`` holding one ``model*.safetensors`` file whose tensor shapes a registry
    entry claims (:func:`~weightsmith.convert.arch.by_shapes`), as the reference's
    hparams loaders.  ``weights()`` gives the folder's tensors (read once, kept for
    the conversion; None: read here for the shapes only)."""
    if not isinstance(d, Path):  # a folder held in memory (remote, Meta): always a config.json
        return None
    parts = sorted(p.name for p in d.iterdir() if p.name.startswith("model")
                   and p.name.endswith(".safetensors"))  # fmt: skip
    if len(parts) != 1:
        return None
    if weights is None:  # a caller that reads no tensors itself: the headers just for this
        stack: list = []
        try:
            shapes = {s.name: s.shape for s in _sources(d, stack)}
        finally:
            for h in stack:
                h.close()
    else:
        shapes = {s.name: s.shape for s in weights()}
    entry = by_shapes(shapes)
    if entry is None:
        return None
    sc = entry.config_from_shapes
    assert sc is not None
    for name, ndim in sc.needs.items():
        if name not in shapes or len(shapes[name]) != ndim:
            raise E.MissingModelFile(
                f"{sc.what} (no config.json) lacks a tensor read before any output "
                "(its hyperparameters come from the tensor shapes)",
                path=d / parts[0], field=f"tensor {name!r}", expected=f"a {ndim}-D tensor",
                found=list(shapes[name]) if name in shapes else "no such tensor",
            )  # fmt: skip
    return sc.config(shapes)


def _raw_config(d: Any, weights: Callable[[], list[_Source]] | None = None) -> dict:
    """The folder's config as written (``config.json``, checked to be a JSON object), or
    the one its tensor shapes give when it ships none (``weights()``: the folder's
    tensors, read at most once by the caller's memo)."""
    p = d / "config.json"
    if not d.is_dir():
        raise E.MissingModelFile(
            "model folder not found", path=d, expected="a folder", found="nothing"
        )
    if not p.is_file() and (guessed := _guessed_config(d, weights)) is not None:
        return guessed
    if not p.is_file():
        raise E.MissingModelFile(
            "no config.json in the model folder",
            path=p,
            expected="config.json",
            found=", ".join(sorted(x.name for x in d.iterdir())) or "an empty folder",
        )
    cfg = read_json(p, E.InvalidModelConfig, "config.json", expected="a JSON object")
    if not isinstance(cfg, dict):
        raise E.InvalidModelConfig(
            "config.json is not an object", path=p, expected="a JSON object",
            found=type(cfg).__name__,
        )  # fmt: skip
    return cfg


def _read_config(d: Any, weights: Callable[[], list[_Source]] | None = None) -> dict:
    """:func:`_raw_config` with the text model's config merged up, as the reference reads it
    (where a multimodal layout keeps it: :data:`~weightsmith.convert.arch.NESTED_TEXT`)."""
    return text_merged(_raw_config(d, weights))


def _suppress_tokens(d: Any) -> list[int] | None:
    """``generation_config.json``'s ``suppress_tokens`` (None without the file or field)."""
    p = d / "generation_config.json"
    if not p.is_file():
        return None
    gen = read_json(p, E.InvalidModelConfig, "generation_config.json", expected="a JSON object")
    v = gen.get("suppress_tokens") if isinstance(gen, dict) else None
    ids = isinstance(v, list) and all(
        isinstance(x, int) and not isinstance(x, bool) and -(2**31) <= x < 2**31 for x in v
    )
    if v is not None and not ids:
        raise E.InvalidModelConfig(
            "suppress_tokens is not a list of token ids",
            path=p,
            field="suppress_tokens",
            expected="a list of int32 token ids",
            found=v,
        )
    return v


def _arch(cfg: dict, path: Path) -> Arch:
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise E.InvalidModelConfig(
            "config.json names no architecture",
            path=path,
            field="architectures",
            expected="a list with the model class name",
            found=archs,
        )
    a = lookup(archs[0], cfg)
    if a is None:
        raise E.UnknownArchitecture(
            "architecture not supported",
            path=path,
            field="architectures[0]",
            expected="one of " + ", ".join(supported()),
            found=archs[0],
        )
    return a


def _positive_int(cfg: dict, key: str, path: Path) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise E.InvalidModelConfig(
            "missing or invalid hyperparameter",
            path=path,
            field=key,
            expected="a positive integer",
            found=v,
        )
    return v


def _check_config(cfg: dict, arch: Arch, path: Path) -> None:
    for key in arch.required:
        _positive_int(cfg, key, path)
    for key in arch.present:
        if cfg.get(key) is None:
            raise E.InvalidModelConfig(
                "a hyperparameter the reference converter needs is missing",
                path=path, field=key, expected="a value", found="no such field",
            )  # fmt: skip
    for key, want in arch.fixed.items():
        if cfg.get(key) != want:
            raise E.InvalidModelConfig(
                "the reference converter accepts only this value",
                path=path, field=key, expected=want, found=cfg.get(key),
            )  # fmt: skip
    if arch.check is not None and (bad := arch.check(cfg)) is not None:
        raise E.InvalidModelConfig(
            "the reference converter refuses this configuration",
            path=path, field=bad[0], expected=bad[1], found=bad[2],
        )  # fmt: skip
    n_head = cfg.get("num_attention_heads")
    if n_head is not None:
        _positive_int(cfg, "num_attention_heads", path)
        hidden = cfg["hidden_size"]
        if cfg.get("head_dim") is None and hidden % n_head:
            raise E.InvalidModelConfig(
                "num_attention_heads does not divide hidden_size",
                path=path,
                field="num_attention_heads",
                expected=f"a divisor of hidden_size={hidden}",
                found=n_head,
            )
        if cfg.get("num_key_value_heads") is not None:
            n_kv = _positive_int(cfg, "num_key_value_heads", path)
            if n_head % n_kv:
                raise E.InvalidModelConfig(
                    "num_key_value_heads does not divide num_attention_heads",
                    path=path,
                    field="num_key_value_heads",
                    expected=f"a divisor of num_attention_heads={n_head}",
                    found=n_kv,
                )
    if cfg.get("head_dim") is not None:
        _positive_int(cfg, "head_dim", path)


@dataclass
class _Source:
    """One source weight: where it is and how to read it."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype code
    load: Callable[[], np.ndarray]


def _safetensors_sources(d: Path, stack: list, repo: _Repo | None = None) -> list[_Source] | None:
    index = d / "model.safetensors.index.json"
    if index.is_file():
        if repo is not None:  # fetched: held in memory
            idx = read_index(repo.url(index.name), data=index.read_bytes())
        else:
            idx = read_index(index)
        parts = sorted(dict.fromkeys(idx["weight_map"].values()))
    elif repo is not None:
        parts = repo.weights
    else:
        parts = sorted(p.name for p in d.glob("model*.safetensors") if p.is_file()) or sorted(
            p.name for p in d.glob("*.safetensors") if p.is_file()
        )
    if not parts:
        return None
    # pread, not mmap: mapped pages that were read stay resident (and in the RSS) until
    # unmapped, so a whole model would pile up; a read copy is freed with its tensor
    ck = None
    if index.is_file() and repo is not None:  # the index was fetched: open its shards' URLs
        shards = [repo.url(s) for s in dict.fromkeys(idx["weight_map"].values())]
        ck = Checkpoint(shards, index=idx, index_path=repo.url(index.name), remote=repo.options)
    elif index.is_file():
        ck = open_checkpoint(index, mmap=False)
    out: list[_Source] = []
    if ck is not None:
        stack.append(ck)
        by_file: dict[str, list[str]] = {}
        for name, fname in ck.weight_map().items():
            by_file.setdefault(fname, []).append(name)
        for fname in parts:
            for name in sorted(by_file.get(fname, [])):
                info = ck.info(name)
                out.append(_Source(name, tuple(info.shape), info.dtype.name,
                                   lambda n=name, c=ck: np.asarray(c.get_tensor(n))))  # fmt: skip
        return out
    return file_sources(d, parts, stack, repo)


def file_sources(
    d: Path, parts: list[str], stack: list, repo: _Repo | None = None
) -> list[_Source]:
    """The tensors of the safetensors files ``parts`` in ``d`` (or of the remote ``repo``),
    in the reference's order (files as listed, names sorted within each)."""
    out: list[_Source] = []
    for fname in parts:
        if repo is not None:
            f = safe_open(repo.url(fname), framework="np", remote=repo.options)
        else:
            f = safe_open(d / fname, framework="np", mmap=False)
        stack.append(f)
        for name in f.keys():  # noqa: SIM118 (a file handle, not a dict)
            info = f.info(name)
            out.append(_Source(name, tuple(info.shape), info.dtype.name,
                               lambda n=name, h=f: np.asarray(h.get_tensor(n))))  # fmt: skip
    return out


def _torch_sources(d: Path, stack: list) -> list[_Source] | None:
    index = d / "pytorch_model.bin.index.json"
    if index.is_file():
        cks = [torchfile.open(index)]
    else:
        parts = sorted(p for p in d.glob("pytorch_model*.bin") if p.is_file())
        if not parts:
            return None
        cks = [torchfile.open(p) for p in parts]
    out: list[_Source] = []
    by_np = {v.numpy: k for k, v in SAFETENSORS.items() if v.numpy is not None}
    for ck in cks:
        stack.append(ck)
        for name in ck.tensors:  # the reference keeps torch.load's (insertion) order
            info = ck.tensors[name]
            code = info.safetensors_dtype or by_np.get(np.dtype(info.dtype), str(info.dtype))
            out.append(_Source(name, tuple(info.shape), code,
                               lambda n=name, c=ck: np.asarray(c[n])))  # fmt: skip
    return out


def _dense_sources(d: Any, arch: Arch) -> list[_Source]:
    """The sentence-transformers Dense weights (``linear.weight``) under their GGUF names.

    The module files are small (a few matrices of the hidden size): each is read whole,
    which also serves a folder held in memory (a remote conversion).  With
    ``arch.dense_file``, only that folder's weight, as ``arch.dense[0]``."""
    by_np = {v.numpy: k for k, v in SAFETENSORS.items() if v.numpy is not None}
    out = []
    if arch.dense_file:
        file = d / arch.dense_file / "model.safetensors"
        if not file.is_file():
            return out  # as the reference: no projection head
        x = load(file.read_bytes()).get("linear.weight")
        if x is None or x.ndim != 2:
            raise E.TensorShapeMismatch(
                "Dense module without a 2-D linear.weight", path=file,
                field="tensor 'linear.weight'", expected="[out_features, in_features]",
                found="no such tensor" if x is None else list(x.shape),
            )  # fmt: skip
        code = by_np.get(x.dtype, str(x.dtype))
        return [_Source(arch.dense[0], tuple(x.shape), code, lambda x=x: x)]
    for mod in dense_modules(d):
        x = load(mod.file.read_bytes()).get("linear.weight")
        if x is None or x.shape != (mod.n_out, mod.n_in):
            raise E.TensorShapeMismatch(
                "Dense module weight disagrees with its config.json",
                path=mod.file, field="tensor 'linear.weight'",
                expected=f"[out_features={mod.n_out}, in_features={mod.n_in}]",
                found="no such tensor" if x is None else list(x.shape),
            )  # fmt: skip
        code = by_np.get(x.dtype, str(x.dtype))
        out.append(_Source(mod.tensor, tuple(x.shape), code, lambda x=x: x))
    return out


def _sources(d: Path, stack: list, repo: _Repo | None = None) -> list[_Source]:
    src = _safetensors_sources(d, stack, repo)
    if src is None and repo is not None:
        raise E.MissingModelFile(
            "no safetensors weights in the remote model (remote conversion streams "
            "safetensors; download .bin checkpoints first)",
            path=repo.base,
            expected="model.safetensors, or sharded safetensors with an index",
            found="none",
        )
    if src is None:
        src = _torch_sources(d, stack)
    if src is None:
        raise E.MissingModelFile(
            "no weights in the model folder",
            path=d,
            expected="model.safetensors, sharded safetensors with an index, or pytorch_model*.bin",
            found=", ".join(sorted(x.name for x in d.iterdir())) or "an empty folder",
        )
    return src


# --------------------------------------------------------------------------- planning


@dataclass
class TensorPlan:
    """One output tensor: GGUF name, numpy-order shape, ggml type, and its sources.

    ``pieces``: ``(source, slice)`` reads; one for a renamed or split tensor, one per
    expert slab for a stacked one (``stacked``).  ``source`` is the first piece's.
    """

    name: str
    shape: tuple[int, ...]
    type: str
    source: _Source | None = None  # None: an extra tensor (``make``)
    make: Callable[[], np.ndarray] | None = None
    hf_name: str | None = None
    pieces: list[tuple[_Source, Piece]] = field(default_factory=list)
    stacked: bool = False
    raw: Packed | None = None  # already-quantized blocks + scales (registry ``Packed``)
    # the type the reference's f32 file holds it in, when llama-quantize then reads
    # those values (a source-typed Q8_0 tensor: its values rounded through Q8_0 first)
    via: str | None = None


# tensors the reference converter always writes in F32 (``prepare_tensors``)
_ALWAYS_F32 = re.compile(
    r"(^|\.)(ffn_gate_inp|ffn_gate_inp_shexp|position_embd|token_types|ssm_conv1d|"
    r"shortconv\.conv|altup_correct_coef|altup_predict_coef|ssm_conv1d_[qkv]|indexer\.proj)\.weight$"
)


def _is_quantizable_weight(name: str, ndim: int, f32_list: bool = True) -> bool:
    """The reference converter's rule for tensors that get the output type (``f32_list``:
    its list of always-F32 tensors applies)."""
    if ndim <= 1 or name.endswith("_norm.weight") or (f32_list and _ALWAYS_F32.search(name)):
        return False
    return name.endswith(".weight")


def _outtype_type(ot: str, name: str, shape: tuple[int, ...], f32_list: bool = True) -> str:
    if not _is_quantizable_weight(name, len(shape), f32_list):
        return "F32"
    t = _OUTTYPES[ot]
    if t == "Q8_0" and shape[-1] % 32:
        return "F16"  # gguf-py raises QuantError and the reference falls back to F16
    return t


def _auto_type(sources: list[_Source]) -> str:
    for s in sources:
        if len(s.shape) < 2:
            continue
        if s.dtype == "BF16":
            return "bf16"
        if s.dtype == "F16":
            return "f16"
    return "f16"


def _n_vocab(d: Path, vocab: list) -> int | None:
    for k, v, _ in vocab:
        if k == "tokenizer.ggml.tokens" and (d / "tokenizer.model").is_file():
            return len(v)
    tj = d / "tokenizer.json"
    if tj.is_file():
        j = read_json(tj, E.TokenizerInconsistent, "tokenizer.json")
        model = j.get("model") if isinstance(j, dict) else None
        vocab_j = model.get("vocab") if isinstance(model, dict) else None
        added = j.get("added_tokens", []) if isinstance(j, dict) else []
        if isinstance(vocab_j, (dict, list)) and isinstance(added, list):
            return len(vocab_j) + len(added)
    return None


@dataclass
class _Plan:
    input: ModelInput
    arch: Arch
    cfg: dict
    ctx: dict
    tensors: list[TensorPlan]
    type_name: str
    file_type: int
    vocab: list
    prefetch: _Prefetch | None = None

    def load(self, src: _Source) -> np.ndarray:
        return self.prefetch.load(src) if self.prefetch is not None else src.load()


def _resolve_type(type: str, sources: list[_Source]) -> tuple[str, Any]:
    t = type.lower()
    if t == "auto":
        t = _auto_type(sources)
    if t in _OUTTYPES:
        return t, None
    return t, file_type(type)


def plan_conversion(src: str | os.PathLike[str], type: str = "auto", *, imatrix: bool = False):
    """Names, shapes and types of the output tensors, from the headers alone (no data read)."""
    stack: list = []
    try:
        return _plan(Path(src), type, stack, has_imatrix=imatrix)
    finally:
        for h in stack:
            h.close()


@dataclass
class ModelInput:
    """What one conversion reads: the model's config, weights and tokenizer.

    ``folder`` holds the small files (``config.json``, ``generation_config.json``,
    ``README.md``, tokenizer files) the metadata comes from: the model folder, or a
    :class:`zipfile.Path` over files built in memory (the Meta route: no folder is
    written).  ``given`` is the path as the user gave it (provenance);
    ``name_or_path``: False when there is no ``config.json`` whose ``_name_or_path``
    gguf-py would read (Mistral's original layout).  ``vocab`` builds the
    ``tokenizer.*`` rows, ``n_vocab`` the tokenizer size for registry entries that cut
    the embeddings to it.
    """

    folder: Any
    given: str
    arch: Arch
    cfg: dict
    sources: list[_Source]
    vocab: Callable[[], list]
    n_vocab: Callable[[list], int | None] = lambda vocab: None
    name_or_path: bool = True
    streamed: bool = False  # remote weights: prefetch them ahead of the writer
    #: the folder's tensors as read (before any dequantization or composition): their
    #: headers are parsed once for the config guess, the text and the projector
    weights: Callable[[], list[_Source]] = list


def hf_input(
    d: Any,
    stack: list,
    *,
    sources: list[_Source] | None = None,
    pre: str | None = None,
    given: str | None = None,
    repo: _Repo | None = None,
    mtp: str | None = None,
) -> ModelInput:
    """The HF folder ``d`` (a Path, or a :class:`zipfile.Path` of files held in memory)
    as a conversion input; ``sources`` replace the folder's weights, ``pre`` names the
    BPE pre-tokenizer instead of fingerprinting it; ``mtp`` (``"drop"`` / ``"only"``):
    without the multi-token-prediction blocks, or those alone (:func:`hf_to_gguf`)."""
    if sources is None:
        weights = functools.cache(lambda: _sources(d, stack, repo))
    else:
        weights = lambda: sources  # noqa: E731
    cfg = _read_config(d, weights)
    cfg_path = d / "config.json"
    arch = _arch(cfg, cfg_path)
    if arch.rerank and is_qwen3_reranker(d, os.fspath(d) if given is None else given, cfg):
        cfg["_rerank"] = rerank_tokens(d, cfg.get("vocab_size"))
        arch = _arch(cfg, cfg_path)
        if not any("cls.output.weight" in sp.gguf for sp in arch.splits):
            # the reference's other Qwen3 subclasses (Qwen3-ASR's text) take the mode too
            raise E.UnknownArchitecture(
                "the reference converts this folder as a Qwen3 reranker (README, path or "
                "class), which is not done for this class",
                path=cfg_path, field="architectures[0]",
                expected="Qwen3ForCausalLM, Qwen3Model or Qwen3VLForConditionalGeneration",
                found=cfg["architectures"][0],
            )  # fmt: skip
    cfg = arch.config(cfg)
    _check_config(cfg, arch, cfg_path)
    if arch.pooling:
        cfg["_pooling_type"] = pooling_type(d)
    sources = dequantize_sources(weights(), cfg, d)
    if mtp is not None:
        sources, cfg = _mtp_sources(arch, mtp, sources, cfg, cfg_path)
    if arch.e8m0_scales:
        sources = e8m0_dequantize_sources(sources, d)
    sources = _drop_copies(arch, sources)
    for c in arch.compose:
        sources = _composed(c, sources, cfg)
    if arch.dense:  # written first, as the reference's extra tensors
        dense = _dense_sources(d, arch)
        cfg["_dense"] = {s.name: s.shape[::-1] for s in dense}
        if dense and arch.dense_file:
            cfg["_dense_out"] = dense[0].shape[0]
        sources = dense + sources
    if arch.from_tensors is not None:
        cfg = {**cfg, **arch.from_tensors(cfg, [s.name for s in sources])}
    if arch.suppress_tokens:
        cfg = {**cfg, "_suppress_tokens": _suppress_tokens(d)}
    route = arch.tokenizer.get("vocab")
    return ModelInput(
        folder=d,
        given=os.fspath(d) if given is None else given,
        arch=arch,
        cfg=cfg,
        sources=sources,
        vocab=lambda: vocab_metadata(d, cfg, route=route, pre=pre),
        n_vocab=lambda vocab: _n_vocab(d, vocab),
        streamed=repo is not None,
        weights=weights,
    )


#: ``mtp=`` values: the reference's ``--no-mtp`` and ``--mtp``
MTP_MODES = ("drop", "only")


def _mtp_sources(
    arch: Arch, mode: str, sources: list[_Source], cfg: dict, cfg_path: Any
) -> tuple[list[_Source], dict]:
    """The sources and config of ``mode``: ``drop`` leaves out the entry's MTP blocks
    (the config's count with them), ``only`` keeps them and the tensors they share."""
    if mode not in MTP_MODES:
        raise E.UsageError(f"mtp={mode!r}: expected one of {', '.join(MTP_MODES)} or None")
    if arch.mtp is None:
        raise E.MtpNotSupported(
            "--mtp / --no-mtp: this class has no multi-token-prediction blocks to drop or "
            "export here (the reference refuses most such classes too)",
            path=cfg_path, field="architectures[0]",
            expected="a class with MTP blocks: "
            + ", ".join(sorted({a for e in ENTRIES if e.mtp is not None for a in e.hf_archs})),
            found=cfg["architectures"][0],
        )  # fmt: skip
    key = {s.name: arch.source_key(s.name) for s in sources}
    is_mtp = {n: k is not None and arch.mtp.is_mtp(k, cfg) for n, k in key.items()}
    if mode == "drop":
        return [s for s in sources if not is_mtp[s.name]], arch.mtp.drop(cfg)
    if not any(is_mtp.values()):
        # Nemotron-H's reference refuses this (a ValueError); the others write a "draft"
        # of the shared tensors alone, which no runtime can use
        raise E.MtpNotSupported(
            "mtp='only' (--mtp) exports the checkpoint's multi-token-prediction blocks, "
            "and it has none",
            path=cfg_path.parent, field="tensors",
            expected=f"the MTP blocks of a {cfg['architectures'][0]} checkpoint",
            found="none",
        )  # fmt: skip
    kept = [s for s in sources if is_mtp[s.name] or key[s.name] in arch.mtp.keep]
    return kept, arch.mtp.only(cfg)


def _composed(c: Compose, sources: list[_Source], cfg: dict) -> list[_Source]:
    """``sources`` with ``c.target`` replaced by ``c.fn`` of it and ``c.inputs`` (those
    present), read when the target is; the inputs stay sources of their own."""
    by = {s.name: s for s in sources}
    if c.target not in by:
        return sources
    used = [by[c.target]] + [by[n] for n in c.inputs if n in by]
    shape = c.shape({s.name: s.shape for s in used})
    t = by[c.target]

    def load(used: list[_Source] = used) -> np.ndarray:
        values = {s.name: _widen(s.load()) for s in used}
        return c.fn(values, cfg) if c.config else c.fn(values)

    new = _Source(t.name, tuple(shape), t.dtype, load)
    return [new if s is t else s for s in sources]


def _drop_copies(arch: Arch, sources: list[_Source]) -> list[_Source]:
    """``sources`` without those the entry drops when they repeat another's values
    (``Arch.drop_if_same``), compared as the reference does: widened to float32, and
    only when the other one is read first (the reference keeps the first it reads)."""
    at = {s.name: i for i, s in enumerate(sources)}
    drop = set()
    for name, other in arch.drop_if_same:
        if name not in at or other not in at or at[other] > at[name]:
            continue
        a, b = sources[at[name]], sources[at[other]]
        if a.shape == b.shape and np.array_equal(_widen(a.load()), _widen(b.load())):
            drop.add(name)
    return [s for s in sources if s.name not in drop]


def _plan(
    d: Path, type: str, stack: list, *, has_imatrix: bool = False, tokenizer: bool = True
) -> _Plan:
    return plan_input(hf_input(d, stack), type, has_imatrix=has_imatrix, tokenizer=tokenizer)


def plan_input(
    m: ModelInput, type: str, *, has_imatrix: bool = False, tokenizer: bool = True
) -> _Plan:
    """The output plan of ``m`` for the file type ``type`` (no data read)."""
    arch, cfg, sources = m.arch, m.cfg, m.sources
    vocab = m.vocab() if tokenizer else []
    ctx: dict[str, Any] = {}
    if arch.vocab_rows:
        ctx["n_vocab"] = m.n_vocab(vocab)
    ot, ft = _resolve_type(type, sources)

    tensors: list[TensorPlan] = []
    for gname, fn in arch.extra.items():
        arr = fn(cfg)
        if arr is not None:
            tensors.append(TensorPlan(gname, arr.shape, "F32", make=lambda a=arr: a))
    tensors.extend(_weight_plan(arch, sources, cfg, ctx, m.folder))
    _check_shapes(tensors, cfg, arch, m.folder)

    if ft is None:
        for tp in tensors:
            if tp.source is None:
                tp.type = "F32"
            else:
                tp.type = _outtype_type(ot, tp.name, tp.shape, _f32_list_applies(arch, tp))
                if arch.source_type is not None:
                    st = arch.source_type(tp.name, tp.source.dtype, len(tp.shape))
                    tp.type = st or tp.type
            if tp.raw is not None:  # packed data is written as it is, whatever the outtype
                tp.type = tp.raw.ggml
        file_type_id = FILE_TYPES[_OUTTYPES[ot]].id
        if ot in ("f32", "f16", "bf16") and _quant_method(cfg) == "mxfp4":
            file_type_id = FILE_TYPES["MXFP4_MOE"].id  # as the reference labels such files
        if arch.file_type is not None:
            file_type_id = FILE_TYPES[arch.file_type].id
        type_name = ot
    else:
        has_heads = first(cfg, ("num_attention_heads", "n_heads")) is not None
        n_head, n_kv = head_counts(cfg) if has_heads else (1, 1)
        n_kv = _arch_kv(arch, cfg, "attention.head_count_kv", n_kv)
        types = recipe_plan(
            [(tp.name, _ggml_dims(tp.shape)) for tp in tensors],
            ft,
            arch=arch.gguf_arch,
            n_layer=_block_count(arch, cfg),
            n_head=n_head,
            n_head_kv=n_kv,
            n_expert=_n_expert(cfg),
            has_imatrix=has_imatrix,
        )
        for tp in tensors:
            tp.type = types[tp.name]
            if arch.source_type is not None and tp.source is not None:
                _as_in_f32_file(arch, tp)
        # llama-quantize writes the tensors sorted by layer number (-1 outside blocks), then name
        tensors.sort(key=lambda tp: (_layer(tp.name), tp.name))
        file_type_id = ft.id
        type_name = ft.name.lower()
    return _Plan(m, arch, cfg, ctx, tensors, type_name, file_type_id, vocab)


def _as_in_f32_file(arch: Arch, tp: TensorPlan) -> None:
    """llama-quantize reads the reference's f32 file, where a source-typed tensor (the
    entry's ``source_type``) is already BF16 / Q8_0 / I32 / MXFP4: a tensor it does not
    quantize keeps that type, one it quantizes starts from those values."""
    assert arch.source_type is not None and tp.source is not None
    base = tp.raw.ggml if tp.raw is not None else None
    base = base or arch.source_type(tp.name, tp.source.dtype, len(tp.shape))
    if base in (None, "F32"):
        return
    if tp.type == "F32":
        tp.type = base
    elif base == "Q8_0":
        tp.via = base


def _f32_list_applies(arch: Arch, tp: TensorPlan) -> bool:
    """The reference matches its always-F32 list by the block id of the name it read:
    with a late rename (:attr:`Arch.late_rename`) a tensor moved to another block misses it."""
    return not arch.late_rename or layer_of(tp.hf_name or "") == layer_of(tp.name)


def _quant_method(cfg: dict) -> Any:
    qc = cfg.get("quantization_config")
    return qc.get("quant_method") if isinstance(qc, dict) else None


def _weight_plan(arch: Arch, sources: list[_Source], cfg: dict, ctx: dict, d: Path):
    """The registry's plan over the sources, as :class:`TensorPlan` rows."""
    by_key: dict[str, _Source] = {}
    for s in sources:
        key = arch.source_key(s.name, cfg)
        if key is not None:
            by_key[key] = s
    try:
        outs = arch.plan([(k, s.shape) for k, s in by_key.items()], cfg, ctx)
    except PlanError as exc:
        src = by_key.get(exc.name)
        name = src.name if src is not None else exc.name
        if exc.kind == "unmapped":
            raise E.UnmappedTensor(
                "weight has no GGUF name for this architecture",
                path=d,
                field=f"tensor {name!r}",
                expected=f"a {arch.gguf_arch} weight",
                found=f"{name} {exc.detail}".strip(),
            ) from None
        experts = "expert" in exc.kind
        raise E.TensorShapeMismatch(
            f"experts do not stack ({exc.kind})"
            if experts
            else f"tensor does not fit the config ({exc.kind})",
            path=d,
            field=f"tensor {name!r}",
            expected="every expert of a layer present, all of one shape"
            if experts
            else "the shape the config's heads give",
            found=exc.detail,
        ) from None
    plans = []
    for o in outs:
        pieces = [(by_key[p.hf], p) for p in o.pieces]
        first = pieces[0][0]
        plans.append(TensorPlan(o.name, o.shape, "F32", source=first, hf_name=first.name,
                                pieces=pieces, stacked=o.stacked, raw=o.raw))  # fmt: skip
    return plans


def _block_count(arch: Arch, cfg: dict) -> int | None:
    """The GGUF ``block_count`` (llama-quantize's layer count: GLM's MTP blocks count)."""
    return _arch_kv(arch, cfg, "block_count", first(cfg, ("num_hidden_layers", "n_layers")))


def _arch_kv(arch: Arch, cfg: dict, key: str, default: Any) -> Any:
    """The value the output file gives ``<arch>.<key>``, as llama-quantize will read it
    (a hybrid's per-layer ``head_count_kv`` array stays an array: the recipe reads it)."""
    for k, v, _ in arch.metadata(cfg):
        if k == f"{arch.gguf_arch}.{key}":
            return v
    return default


def _ggml_dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape as ggml_n_dims counts it: outer dims of 1 do not count (a ``[1, n]``
    router gate is 1-D to llama-quantize, which then leaves it unquantized)."""
    return ggml_n_dims(tuple(shape)[::-1])[::-1]


def _n_expert(cfg: dict) -> int:
    # llama-quantize reads expert_count; ERNIE 4.5 MoE's config spells it moe_num_experts
    for k in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return 0


def _layer(name: str) -> int:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def _check_shapes(tensors: list[TensorPlan], cfg: dict, arch: Arch, d: Path) -> None:
    hidden, vocab = first(cfg, ("hidden_size", "n_embd", "dim", "d_model")), cfg["vocab_size"]
    for tp in tensors:
        if tp.name in ("token_embd.weight", "output.weight"):
            want_rows = vocab if not arch.vocab_rows else tp.shape[0]
            if len(tp.shape) != 2 or tp.shape[1] != hidden or tp.shape[0] != want_rows:
                raise E.TensorShapeMismatch(
                    "embedding shape disagrees with config.json",
                    path=d,
                    field=f"tensor {tp.hf_name!r}",
                    expected=f"[vocab_size={vocab}, hidden_size={hidden}]",
                    found=list(tp.shape),
                )


# --------------------------------------------------------------------------- metadata


def _metadata(p: _Plan, name: str | None) -> list[tuple[str, Any, Any]]:
    """The KVs in file order.  The reference converter writes ``general.file_type`` among
    the arch rows and ``general.quantization_version`` before the tokenizer; for the
    llama-quantize types both move to the end, where ``llama_model_quantize`` re-sets
    them (gguf's set removes a key and appends it)."""
    # rows the reference writes while preparing tensors come before general.type
    rows: list[tuple[str, Any, Any]] = list(p.arch.metadata(p.cfg, early=True))
    rows.append(("general.type", "model", VT.STRING))
    m = p.input
    shapes = [(t.name, t.shape) for t in p.tensors]
    rows += provenance_rows(m.folder, m.given, shapes, name, name_or_path=m.name_or_path)
    file_type = ("general.file_type", p.file_type, VT.UINT32)
    qversion = ("general.quantization_version", QUANTIZATION_VERSION, VT.UINT32)
    quantized = p.type_name not in _OUTTYPES
    for k, v, t in p.arch.metadata(p.cfg):
        if k != FILE_TYPE:
            rows.append((k, v, t))
        elif not quantized:
            rows.append(file_type)
    if not quantized:
        rows.append(qversion)
    rows.extend(p.vocab)
    if quantized:
        rows += [qversion, file_type]
    return _fill_slots(rows)


def _fill_slots(rows: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """A later row of an earlier row's key takes that row's place (the reference
    overwrites a key in place: a :data:`SLOT` row holds a place for a later row, Qwen3-TTS's
    codec EOS is overwritten by the tokenizer's); a slot nobody fills is dropped."""
    first: dict[str, int] = {}
    out: list[tuple[str, Any, Any] | None] = list(rows)
    for i, (k, v, t) in enumerate(rows):
        if k not in first:
            first[k] = i
        elif v is not SLOT:
            out[first[k]] = (k, v, t)
            out[i] = None
    return [r for r in out if r is not None and r[1] is not SLOT]


# --------------------------------------------------------------------------- data


def _widen(x: np.ndarray) -> np.ndarray:
    """The reference keeps float16/float32 and widens everything else to float32
    (integers are kept: DeepSeek-V4's routing tables are written as I32)."""
    if x.dtype in (np.float16, np.float32) or x.dtype.kind in "iu":
        return x
    return x.astype(np.float32)


def _encode(x: np.ndarray, t: str, im: Imatrix | None, workers: int | None, name: str):
    if t == "F32":
        return np.ascontiguousarray(x, dtype=np.float32)
    if t == "I32":
        return np.ascontiguousarray(x, dtype=np.int32)
    if t == "F16":
        return np.ascontiguousarray(x.astype(np.float16))
    return quantize_tensor(np.ascontiguousarray(x, dtype=np.float32), t, name, im, workers)


def _piece_data(src: _Source, piece: Piece, p: _Plan) -> np.ndarray:
    """One source read, widened, transformed (registry transforms), then sliced."""
    x = _widen(p.load(src))
    for t in p.arch.transforms_for(piece.hf):
        x = t.forward(x, p.cfg, p.ctx)
    return piece.apply(x, p.cfg)


def _raw_bytes(tp: TensorPlan, p: _Plan) -> np.ndarray:
    """The ggml bytes of a packed tensor: blocks and scales read as stored, repacked
    (per-expert pairs stacked)."""
    parts = []
    for k in range(0, len(tp.pieces), 2):
        (bsrc, bpiece), (ssrc, spiece) = tp.pieces[k : k + 2]
        parts.append(tp.raw.repack(bpiece.apply(p.load(bsrc)), spiece.apply(p.load(ssrc))))
    data = parts[0] if len(parts) == 1 else np.stack(parts)
    want = GGML[tp.raw.ggml].nbytes(math.prod(tp.shape))
    if data.dtype != np.uint8 or data.nbytes != want:
        raise E.TensorShapeMismatch(
            "packed blocks and scales disagree with their header",
            field=f"tensor {bsrc.name!r}",
            expected=f"{want} bytes of {tp.raw.ggml}",
            found=f"{data.nbytes} bytes",
        )
    return data


def _tensor_slabs(tp: TensorPlan, p: _Plan, only: int | None = None) -> Iterator[np.ndarray]:
    """The tensor's values, whole or (stacked experts) one slab at a time; ``only=k``:
    slab k alone."""
    if tp.make is not None:
        yield tp.make()
        return
    if tp.raw is not None:
        yield dequantize(_raw_bytes(tp, p), tp.raw.ggml, tp.shape)
        return
    want = tp.shape[1:] if tp.stacked else tp.shape
    for src, piece in tp.pieces if only is None else tp.pieces[only : only + 1]:
        x = _piece_data(src, piece, p)
        if tp.via is not None:
            x = dequantize(quantize(np.ascontiguousarray(x, np.float32), tp.via), tp.via, x.shape)
        if tuple(x.shape) != tuple(want):
            raise E.TensorShapeMismatch(
                "tensor data disagrees with its header",
                field=f"tensor {src.name!r}",
                expected=list(want),
                found=list(x.shape),
            )
        yield x
        del x


def _tensor_data(tp: TensorPlan, p: _Plan) -> np.ndarray:
    """The whole tensor (stacked experts joined: for reports, not for writing)."""
    parts = list(_tensor_slabs(tp, p))
    return np.stack(parts) if tp.stacked else parts[0]


def _encoded(
    tp: TensorPlan, p: _Plan, im: Imatrix | None, workers, only: int | None = None
) -> Iterator[np.ndarray]:
    """The bytes of one tensor as written; a stacked one slab by slab (rows never cross
    slabs, so quantizing each slab gives the bytes of quantizing the whole)."""
    if tp.raw is not None and tp.type == tp.raw.ggml:
        yield _raw_bytes(tp, p)  # passthrough: no float round trip
        return
    e = None
    if tp.stacked and im is not None and tp.type not in ("F32", "F16", "BF16"):
        e = for_tensor(tp.name, tp.shape, im)
    for k, x in enumerate(_tensor_slabs(tp, p, only), only or 0):
        if tp.stacked:
            yield _encode_slab(x, tp.type, None if e is None else e[k], workers, tp.name)
        else:
            yield _encode(x, tp.type, im, workers, tp.name)
        del x


def _pieces_of(tp: TensorPlan) -> list[int | None]:
    """How a cluster cuts a tensor: one task item per expert slab, else the whole."""
    return list(range(len(tp.pieces))) if tp.stacked else [None]


def _cluster_data(p: _Plan, job: tuple) -> Iterator[tuple[TensorPlan, np.ndarray]]:
    """(tensor, bytes) in write order, encoded by the cluster's nodes: a window of at
    most WINDOW_BYTES of output at a time, in tasks of about CLUSTER_TASK_BYTES."""
    items = [
        (i, tp.name, tp.shape, tp.type, k, _out_nbytes(tp) // len(_pieces_of(tp)))
        for i, tp in enumerate(p.tensors)
        for k in _pieces_of(tp)
    ]
    for window in batches(items, lambda it: it[5], WINDOW_BYTES):
        tasks = batches(window, lambda it: it[5], CLUSTER_TASK_BYTES)
        results: dict[int, list[np.ndarray]] = {}
        for t, out in map_tasks(job[0], convert_task, [(*job[1:], task) for task in tasks]):
            results[t] = out
        for t, task in enumerate(tasks):
            for it, data in zip(task, results.pop(t)):
                yield p.tensors[it[0]], data


#: Output bytes in flight on a cluster (the driver holds at most this much).
WINDOW_BYTES = 256 * 1024 * 1024
#: Output bytes per cluster task: its work dwarfs Ray's per-task cost.
CLUSTER_TASK_BYTES = 8 * 1024 * 1024

_worker_plan: dict[tuple, tuple[_Plan, Imatrix | None, list]] = {}


def convert_task(
    src: str, type: str, imatrix: str | None, tokenizer: bool, items: list[tuple]
) -> list[np.ndarray]:
    """What a cluster node runs: plan the conversion of ``src`` itself (the folder is on
    a path every node sees), then encode ``items``' tensors or expert slabs."""
    key = (src, type, imatrix, tokenizer)
    if key not in _worker_plan:
        for _, _, stack in _worker_plan.values():
            for h in stack:
                h.close()
        _worker_plan.clear()
        stack: list = []
        im = read_imatrix(imatrix) if imatrix is not None else None
        plan = _plan(Path(src), type, stack, has_imatrix=im is not None, tokenizer=tokenizer)
        _worker_plan[key] = (plan, im, stack)
    p, im, _ = _worker_plan[key]
    out = []
    for i, name, shape, t, k, _ in items:
        tp = p.tensors[i] if i < len(p.tensors) else None
        if tp is None or (tp.name, tp.shape, tp.type) != (name, shape, t):
            raise E.ClusterSourceMismatch(
                "the worker plans another tensor than the driver",
                path=src,
                field=f"output tensor {i}",
                expected=f"{name} {t} {list(shape)}",
                found="none" if tp is None else f"{tp.name} {tp.type} {list(tp.shape)}",
            )
        out.extend(_encoded(tp, p, im, 1, k))
    return out


def _encode_slab(x: np.ndarray, t: str, e: np.ndarray | None, workers, name: str):
    if t in ("F32", "F16"):
        return _encode(x, t, None, workers, name)
    return quantize(np.ascontiguousarray(x, dtype=np.float32), t, e, name=name, workers=workers)


# --------------------------------------------------------------------------- API


@dataclass
class ConversionResult:
    """What :func:`hf_to_gguf` wrote."""

    files: list[str]
    architecture: str
    type: str
    file_type: int
    tensor_types: dict[str, str] = field(default_factory=dict)
    n_params: int = 0


def hf_to_gguf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str = "auto",
    *,
    imatrix: str | os.PathLike[str] | None = None,
    split_max_size: int | str | None = None,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    name: str | None = None,
    tokenizer: bool = True,
    ray: str | None = None,
    mmproj: str | os.PathLike[str] | None = None,
    remote: RemoteOptions | None = None,
    mtp: str | None = None,
) -> ConversionResult:
    """Convert the Hugging Face model folder ``src`` to the GGUF file ``dst``.

    ``type``: ``f32``, ``f16``, ``bf16``, ``q8_0`` (as llama.cpp's converter),
    ``auto`` (the source's 16-bit float type), or any llama-quantize file type
    (``q4_k_m``, ``q6_k``, ``iq4_xs``, ...: as ``llama-quantize`` on the f32 file).
    ``imatrix``: a llama.cpp importance matrix (``.gguf`` or legacy ``.dat``).
    ``split_max_size`` (bytes or ``"2G"``): write llama.cpp split shards instead.
    ``progress(bytes_done, bytes_total, tensors_done, tensors_total)`` is called
    after each tensor.  ``workers`` is passed to the quantizer.
    ``tokenizer=False`` writes no ``tokenizer.*`` keys (weights only: llama.cpp will
    not run such a file, but it inspects, compares and quantizes).
    ``ray``: the address of a Ray cluster ("auto": the one this machine belongs
    to) whose nodes read and encode the tensors (``src`` on a path every node
    sees); the file is byte-identical to the one made here.
    ``mmproj``: also write the vision projector of a vision-language model to this
    path (:mod:`weightsmith.convert._mmproj`; both files are planned before either
    is written); ``files`` then ends with it.
    ``src`` may be remote (module docstring; ``remote=`` options, e.g. a token).
    ``mtp``: ``"drop"`` writes the model without its multi-token-prediction (NextN)
    blocks, ``"only"`` those blocks alone with the embedding, final norm and head they
    share (a speculative draft), as the reference's ``--no-mtp`` / ``--mtp``; refused
    (:class:`~weightsmith.errors.MtpNotSupported`) for a class without such blocks.
    """
    if ray is not None and mtp is not None:
        raise E.UsageError(
            "ray= has every node plan the folder itself, with all its blocks; "
            "drop ray= to convert with mtp="
        )
    if ray is not None and is_url(src):
        raise E.UsageError(
            f"{src}: ray= has every node read a folder it sees; a remote source is streamed "
            "on this machine (drop ray=, or download the model to shared storage)"
        )
    stack: list = []
    try:
        im = read_imatrix(imatrix) if imatrix is not None else None
        if is_url(src):
            if mmproj is not None:
                raise E.UsageError(
                    f"{src}: mmproj= reads the vision tensors from a local model folder; "
                    "download the model first"
                )
            # the small files are held in memory: no source byte is stored on disk
            repo, files = _small_files(os.fspath(src), remote or RemoteOptions())
            d = _memory_folder(files, Path(repo.name))
            m = hf_input(d, stack, given=repo.name, repo=repo, mtp=mtp)
        else:
            d = Path(src)
            m = hf_input(d, stack, given=os.fspath(src), mtp=mtp)
        # the projector is planned (and its inputs checked) before the text file is written
        proj = _mmproj.plan_mmproj(d, type, stack, m.weights) if mmproj is not None else None
        cluster = None
        if ray is not None:  # the nodes plan the folder again themselves
            cluster = (ray, os.path.abspath(src), type, imatrix and os.path.abspath(imatrix))
        result = convert_input(
            m, dst, type, im=im, split_max_size=split_max_size, workers=workers,
            progress=progress, name=name, tokenizer=tokenizer, cluster=cluster,
        )  # fmt: skip
        if proj is not None:
            _mmproj.write_mmproj(proj, d, mmproj, name=name, workers=workers)
            result.files.append(os.fspath(mmproj))
        return result
    finally:
        for h in stack:
            h.close()


def convert_input(
    m: ModelInput,
    dst: str | os.PathLike[str],
    type: str = "auto",
    *,
    im: Imatrix | None = None,
    split_max_size: int | str | None = None,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    name: str | None = None,
    tokenizer: bool = True,
    cluster: tuple | None = None,
) -> ConversionResult:
    """Write the GGUF file ``dst`` for the conversion input ``m`` (see :func:`hf_to_gguf`);
    ``cluster``: ``(ray address, HF folder, type, imatrix path)`` to encode on a Ray cluster."""
    dst = Path(dst)
    p = plan_input(m, type, has_imatrix=im is not None, tokenizer=tokenizer)
    if m.streamed:
        p.prefetch = _Prefetch([s for tp in p.tensors for s, _ in tp.pieces])
    try:
        return _write(p, dst, im, split_max_size, workers, progress, name, tokenizer, cluster)
    finally:
        if p.prefetch is not None:
            p.prefetch.close()


def _write(p: _Plan, dst: Path, im, split_max_size, workers, progress, name, tokenizer, cluster):
    """Write the planned tensors of ``p`` to ``dst`` (the body of :func:`convert_input`)."""
    rows = _metadata(p, name)
    if im is not None:
        rows.extend(im.gguf_rows())
    target = dst if split_max_size is None else _unsplit_path(dst)
    target.parent.mkdir(parents=True, exist_ok=True)
    total = sum(_out_nbytes(tp) for tp in p.tensors)
    w = Writer(target, arch=p.arch.gguf_arch)
    with w:
        for k, v, t in rows:
            w.add(k, v, t)
        # llama-quantize stores ggml_n_dims dims: trailing 1s (numpy's leading) dropped
        squeeze = p.type_name not in _OUTTYPES
        for tp in p.tensors:
            w.add_tensor_info(tp.name, tp.type, _ggml_dims(tp.shape) if squeeze else tp.shape)
        if cluster is None:
            data = ((tp, b) for tp in p.tensors for b in _encoded(tp, p, im, workers))
        else:
            data = _cluster_data(p, (*cluster, tokenizer))
        done = i = part = 0
        for tp, b in data:
            w.write_tensor_chunk(tp.name, b)
            part += b.nbytes
            if part == _out_nbytes(tp):  # the tensor's last chunk
                done, i, part = done + part, i + 1, 0
                if progress is not None:
                    progress(done, total, i, len(p.tensors))
    files = [str(dst)]
    if split_max_size is not None:
        files = _split(target, dst, split_max_size)
    return ConversionResult(
        files=files,
        architecture=p.arch.gguf_arch,
        type=p.type_name,
        file_type=p.file_type,
        tensor_types={tp.name: tp.type for tp in p.tensors},
        n_params=sum(int(np.prod(tp.shape)) for tp in p.tensors),
    )


def _out_nbytes(tp: TensorPlan) -> int:
    return GGML[tp.type].nbytes(math.prod(tp.shape))


def _unsplit_path(dst: Path) -> Path:
    stem = dst.name[: -len(".gguf")] if dst.name.endswith(".gguf") else dst.name
    return dst.parent / f".{stem}.unsplit" / f"{stem}.gguf"


def _split(tmp: Path, dst: Path, max_size: int | str) -> list[str]:
    """llama.cpp split shards beside ``dst``: ``<stem>-00001-of-0000N.gguf`` (as gguf-split)."""
    try:
        return [str(o) for o in split(tmp, max_size=max_size, out_dir=dst.parent)]
    finally:
        tmp.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            tmp.parent.rmdir()


# --------------------------------------------------------------------------- remote sources

#: the files of a model repo fetched whole for a remote conversion (weights: by range)
SMALL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "README.md",
    "model.safetensors.index.json",
    "modules.json",
)
#: a remote conversion reads source tensors at most this many bytes ahead of the writer ...
PREFETCH_BYTES = 256 * 1024 * 1024
#: ... with this many tensors in flight (each also split into parallel ranged requests)
PREFETCH_TENSORS = 4


@dataclass
class _Repo:
    """A remote model folder: its URL (ending in ``/``), weight file names, options."""

    base: str
    weights: list[str]
    options: RemoteOptions
    name: str  # the folder name a downloaded copy would have

    def url(self, name: str) -> str:
        return self.base + name


def _memory_folder(files: dict[str, bytes], where: Path) -> zipfile.Path:
    """``files`` as a read-only folder held in memory (a zip archive never written),
    named after ``where`` in messages, for the readers of the HF route."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    archive = zipfile.ZipFile(buf)
    archive.filename = os.fspath(where)
    return zipfile.Path(archive)


def _small_files(src: str, options: RemoteOptions) -> tuple[_Repo, dict[str, bytes]]:
    """Fetch the small files of a remote model folder (config, tokenizer, card, index)
    into memory; name its weights."""
    ref = parse_hub_ref(src, bare=False)
    names: list[str] | None = None
    if ref is not None:
        tok, tok_origin = hub_token(options.token, options.endpoint)
        with Session(tok, tok_origin, timeout=options.timeout, retries=options.retries) as s:
            listing = hub_listing(ref, s, options.endpoint)
        sub = (ref.path or "").strip("/")
        names = [n[len(sub) + 1 :] for n in listing if n.startswith(sub + "/")] if sub else listing
        base = f"hf://{ref.repo}@{ref.revision}/" + (f"{sub}/" if sub else "")
        name = sub.rsplit("/", 1)[-1] if sub else ref.repo.split("/", 1)[1]
    else:
        base = src.rstrip("/") + "/"
        if not base.startswith(("http://", "https://")):  # fsspec: list the folder
            names = _fsspec_names(base, options)
        parts = base.rstrip("/").split("/")
        # a Hub-style .../ORG/REPO/resolve/REV folder is named like the repo
        name = parts[-3] if len(parts) > 4 and parts[-2] == "resolve" else url_name(base[:-1])
    files: dict[str, bytes] = {}
    wanted = [n for n in SMALL_FILES if names is None or n in names]
    wanted += [n for n in names or [] if fnmatch.fnmatch(n, "additional_chat_templates/*.jinja")]
    for n in wanted:
        try:
            data = fetch_whole(base + n, options)
        except E.RemoteNotFound:
            if names is None:  # a probe: the file is simply not there
                continue
            raise
        files[n] = data
        if n == "modules.json":  # its modules' files (pooling, Dense): this loop visits them
            wanted += [m for m in module_files(data) if names is None or m in names]
    if names is not None:
        top = [n for n in names if "/" not in n and n.endswith(".safetensors")]
        weights = sorted(n for n in top if fnmatch.fnmatch(n, "model*.safetensors")) or sorted(top)
    else:
        weights = ["model.safetensors"]
    return _Repo(base, weights, options, name), files


def _fsspec_names(base: str, options: RemoteOptions) -> list[str]:
    """File names (relative, ``/``-separated) in an fsspec folder and its subfolders."""
    fsspec = require("fsspec", "fsspec URLs")
    fs, root = fsspec.core.url_to_fs(base, **options.storage_options)
    root = root.rstrip("/")
    return sorted(p[len(root) + 1 :] for p in fs.find(root) if p.startswith(root + "/"))


class _Prefetch:
    """Loads the plan's source tensors in the order the writer asks for them, each once,
    on :data:`PREFETCH_TENSORS` threads that run at most :data:`PREFETCH_BYTES` ahead (at
    least one tensor); a tensor used by several outputs (split Q/K/V) is kept until its
    last use."""

    def __init__(self, order: list[_Source]) -> None:
        self._uses: dict[int, int] = {}
        self._order: list[_Source] = []
        for s in order:
            if id(s) not in self._uses:
                self._order.append(s)
            self._uses[id(s)] = self._uses.get(id(s), 0) + 1
        self._futures: dict[int, Future] = {}
        self._pending = 0
        self._next = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(
            max_workers=PREFETCH_TENSORS, thread_name_prefix="ws-prefetch"
        )

    @staticmethod
    def _nbytes(s: _Source) -> int:
        return SAFETENSORS[s.dtype].nbytes(math.prod(s.shape)) if s.dtype in SAFETENSORS else 0

    def _fill(self, need: _Source | None = None) -> None:
        while self._next < len(self._order) and (
            self._pending < PREFETCH_BYTES or (need is not None and id(need) not in self._futures)
        ):
            s = self._order[self._next]
            self._futures[id(s)] = self._pool.submit(s.load)
            self._pending += self._nbytes(s)
            self._next += 1

    def load(self, s: _Source) -> np.ndarray:
        with self._lock:
            self._fill(s)
            fut = self._futures[id(s)]
        x = fut.result()
        with self._lock:
            self._uses[id(s)] -= 1
            if not self._uses[id(s)]:
                del self._futures[id(s)]
                self._pending -= self._nbytes(s)
            self._fill()
        return x

    def close(self) -> None:
        with self._lock:
            for f in self._futures.values():
                f.cancel()
        self._pool.shutdown(wait=True)
