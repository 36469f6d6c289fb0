"""Original Meta Llama checkpoints (``consolidated.NN.pth`` + ``params.json``) -> HF folder.

The layout Meta's download gives, and what each piece becomes::

    ORIGINAL_DIR/
        params.json           dim, n_layers, n_heads, [n_kv_heads], vocab_size,
                              multiple_of, [ffn_dim_multiplier], norm_eps,
                              [rope_theta], [use_scaled_rope], [rope_scaling_factor]
        consolidated.00.pth   one shard per model-parallel rank: 00 .. NN, all present
        ...
        tokenizer.model       SentencePiece (Llama 1/2) or tiktoken BPE ranks (Llama 3.x)

Tensor names, and how model-parallel shards are merged (Meta's fairscale layers):

============================  =====================================  ===================
Meta name                     HF name                                merge
============================  =====================================  ===================
tok_embeddings.weight         model.embed_tokens.weight              columns (Llama 1/2,
                                                                     ParallelEmbedding);
                                                                     rows (Llama 3)
layers.N.attention.wq.weight  model.layers.N.self_attn.q_proj.weight rows, then RoPE
                                                                     permutation
layers.N.attention.wk.weight  ...self_attn.k_proj.weight             rows, permutation
layers.N.attention.wv.weight  ...self_attn.v_proj.weight             rows
layers.N.attention.wo.weight  ...self_attn.o_proj.weight             columns
layers.N.feed_forward.w1      ...mlp.gate_proj.weight                rows
layers.N.feed_forward.w2      ...mlp.down_proj.weight                columns
layers.N.feed_forward.w3      ...mlp.up_proj.weight                  rows
layers.N.attention_norm       ...input_layernorm.weight              replicated (checked)
layers.N.ffn_norm             ...post_attention_layernorm.weight     replicated (checked)
norm.weight                   model.norm.weight                      replicated (checked)
output.weight                 lm_head.weight (absent when tied)      rows
rope.freqs                    (not written: HF recomputes it)        replicated
============================  =====================================  ===================

The Q/K permutation turns Meta's interleaved rotary pairs into HF's half-split
layout: ``w.reshape(heads, head_dim // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)``.
Names, permutation, ``config.json`` and ``generation_config.json`` follow
transformers' ``convert_llama_weights_to_hf.py`` (the last one shipped, 4.47), which
the tests run as the oracle.  Nothing in a ``.pth`` is executed: shards are read by
:mod:`weightsmith.torchfile`, one merged tensor at a time.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors as E
from .. import torchfile

__all__ = [
    "GENERATIONS",
    "MetaCheckpoint",
    "MetaParams",
    "is_meta_dir",
    "read_params",
]

# Llama generations we convert, with what the generation decides (context length,
# rope scaling, token ids, tied embeddings); "3.3" is 3.1's config in a 70B body.
GENERATIONS = ("1", "2", "3", "3.1", "3.2", "3.3")
_CONTEXT = {"1": 2048, "2": 4096, "3": 8192, "3.1": 131072, "3.2": 131072, "3.3": 131072}

_SHARD_RE = re.compile(r"consolidated\.(\d+)\.pth$")
_LAYER_RE = re.compile(r"layers\.(\d+)\.(.+)$")

# Meta per-layer name -> (HF per-layer name, merge axis: 0 rows, 1 columns, None replicated)
_LAYER = {
    "attention.wq.weight": ("self_attn.q_proj.weight", 0),
    "attention.wk.weight": ("self_attn.k_proj.weight", 0),
    "attention.wv.weight": ("self_attn.v_proj.weight", 0),
    "attention.wo.weight": ("self_attn.o_proj.weight", 1),
    "feed_forward.w1.weight": ("mlp.gate_proj.weight", 0),
    "feed_forward.w2.weight": ("mlp.down_proj.weight", 1),
    "feed_forward.w3.weight": ("mlp.up_proj.weight", 0),
    "attention_norm.weight": ("input_layernorm.weight", None),
    "ffn_norm.weight": ("post_attention_layernorm.weight", None),
}
_GLOBAL = {
    "norm.weight": ("model.norm.weight", None),
    "output.weight": ("lm_head.weight", 0),
}
_SKIPPED = {"rope.freqs"}


# --------------------------------------------------------------------------- params.json


@dataclass(frozen=True)
class MetaParams:
    """``params.json`` with every field the conversion needs, checked."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int  # -1 in Llama 1/2 files: taken from the embeddings
    multiple_of: int
    ffn_dim_multiplier: float
    norm_eps: float
    rope_theta: float
    use_scaled_rope: bool
    rope_scaling_factor: float | None
    raw: dict

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def intermediate_size(self) -> int:
        """Meta's FeedForward hidden size (``multiple_of`` rounding of 8/3 * dim * multiplier)."""
        hidden = int(self.ffn_dim_multiplier * int(8 * self.dim / 3))
        m = self.multiple_of
        return m * ((hidden + m - 1) // m)


def _field(params: dict, key: str, kind: type, path: Path, default: Any = ...) -> Any:
    v = params.get(key, default)
    if v is ...:
        raise E.InvalidModelConfig(
            "params.json lacks a field", path=path, field=key, expected=kind.__name__,
            found="nothing",
        )  # fmt: skip
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float else None
    if kind is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif kind is bool:
        ok = isinstance(v, bool)
    if not ok:
        raise E.InvalidModelConfig(
            "params.json field has the wrong type", path=path, field=key,
            expected=kind.__name__, found=repr(v),
        )  # fmt: skip
    return kind(v)


def read_params(folder: str | os.PathLike[str]) -> MetaParams:
    """Read and check ``params.json`` (the ``{"model": {...}}`` wrapper is accepted too)."""
    path = Path(folder) / "params.json"
    try:
        params = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise E.MissingModelFile(
            "no params.json in the original checkpoint folder", path=path,
            expected="params.json", found="nothing",
        ) from None  # fmt: skip
    except (OSError, ValueError) as exc:  # ValueError: bad JSON/UTF-8, int() digit limit
        raise E.InvalidModelConfig(
            "cannot parse params.json", path=path, expected="a JSON object", found=str(exc)
        ) from None
    if isinstance(params, dict) and isinstance(params.get("model"), dict):
        params = params["model"]
    if not isinstance(params, dict):
        raise E.InvalidModelConfig(
            "params.json is not an object", path=path, expected="a JSON object",
            found=type(params).__name__,
        )  # fmt: skip
    dim = _field(params, "dim", int, path)
    n_heads = _field(params, "n_heads", int, path)
    n_kv = params.get("n_kv_heads")
    n_kv = n_heads if n_kv is None else _field(params, "n_kv_heads", int, path)
    for key, value in (("dim", dim), ("n_heads", n_heads), ("n_kv_heads", n_kv)):
        if value <= 0:
            raise E.InvalidModelConfig(
                "params.json field must be positive", path=path, field=key,
                expected="> 0", found=value,
            )  # fmt: skip
    if dim % n_heads or n_heads % n_kv or (dim // n_heads) % 2:
        raise E.InvalidModelConfig(
            "params.json head counts do not divide", path=path, field="dim/n_heads/n_kv_heads",
            expected="dim divisible by n_heads into an even head size, n_heads by n_kv_heads",
            found=f"dim={dim}, n_heads={n_heads}, n_kv_heads={n_kv}",
        )  # fmt: skip
    factor = params.get("rope_scaling_factor")
    return MetaParams(
        dim=dim,
        n_layers=_field(params, "n_layers", int, path),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        vocab_size=_field(params, "vocab_size", int, path, -1),
        multiple_of=_field(params, "multiple_of", int, path, 256),
        ffn_dim_multiplier=_field(params, "ffn_dim_multiplier", float, path, 1.0)
        if params.get("ffn_dim_multiplier") is not None
        else 1.0,
        norm_eps=_field(params, "norm_eps", float, path),
        rope_theta=_field(params, "rope_theta", float, path, 10000.0),
        use_scaled_rope=_field(params, "use_scaled_rope", bool, path, False),
        rope_scaling_factor=None
        if factor is None
        else _field(params, "rope_scaling_factor", float, path),
        raw=params,
    )


# --------------------------------------------------------------------------- generation


def tokenizer_kind(folder: Path) -> str | None:
    """``"spm"`` for a SentencePiece model, ``"tiktoken"`` for Llama 3's BPE ranks, None
    when the folder has no ``tokenizer.model`` (converting it then needs ``tokenizer=False``)."""
    path = folder / "tokenizer.model"
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except FileNotFoundError:
        return None
    first = head.split(b"\n", 1)[0]
    if re.fullmatch(rb"[A-Za-z0-9+/]+=* \d+", first):
        return "tiktoken"
    if head[:1] == b"\x0a":  # protobuf field 1 (pieces), length-delimited
        return "spm"
    raise E.TokenizerInconsistent(
        "tokenizer.model is neither SentencePiece nor tiktoken", path=path, offset=0,
        expected="a SentencePiece protobuf or 'base64 rank' lines", found=repr(head[:16]),
    )  # fmt: skip


def detect_generation(params: MetaParams, kind: str | None, path: Path) -> str:
    """The Llama generation, from the tokenizer kind and ``params.json``.

    SentencePiece: Llama 1 used ``norm_eps`` 1e-6, Llama 2 1e-5.  tiktoken: Llama 3
    has no scaled RoPE; 3.2 scales by 32 (stated, or its 1B/3B widths), 3.1 by 8.
    Llama 3.3 cannot be told from 3.1 and needs no other setting.  Without a
    tokenizer, Llama 3's ``vocab_size`` (its params.json states 128256; 1 and 2 say -1)
    stands for the kind.
    """
    if kind is None:
        kind = "tiktoken" if params.vocab_size >= 100_000 else "spm"
    if kind == "spm":
        if math.isclose(params.norm_eps, 1e-6):
            return "1"
        if math.isclose(params.norm_eps, 1e-5):
            return "2"
    else:
        if not params.use_scaled_rope:
            return "3"
        factor = params.rope_scaling_factor
        if factor == 32.0 or (factor is None and params.dim in (2048, 3072)):
            return "3.2"
        if factor in (None, 8.0):
            return "3.1"
    raise E.UnknownLlamaGeneration(
        "cannot tell which Llama generation this checkpoint is; pass llama_version=",
        path=path,
        expected="one of " + ", ".join(GENERATIONS),
        found=f"{kind or 'no'} tokenizer, norm_eps={params.norm_eps}, "
        f"use_scaled_rope={params.use_scaled_rope}, rope_scaling_factor={params.rope_scaling_factor}",
    )


def is_llama3(generation: str) -> bool:
    return generation.startswith("3")


# --------------------------------------------------------------------------- shards


def is_meta_dir(folder: str | os.PathLike[str]) -> bool:
    """True for a folder in Meta's original layout (params.json + consolidated.*.pth)."""
    d = Path(folder)
    return (
        d.is_dir()
        and (d / "params.json").is_file()
        and any(_SHARD_RE.fullmatch(p.name) for p in d.iterdir())
    )


def _shard_paths(d: Path) -> list[Path]:
    found = sorted((int(m.group(1)), p) for p in d.iterdir() if (m := _SHARD_RE.fullmatch(p.name)))
    if not found:
        raise E.MissingModelFile(
            "no consolidated.NN.pth in the original checkpoint folder", path=d,
            expected="consolidated.00.pth", found="none",
        )  # fmt: skip
    for want, (rank, p) in enumerate(found):
        if rank != want:
            raise E.MissingShard(
                "a model-parallel shard is missing", path=d,
                expected=f"consolidated.{want:02d}.pth", found=p.name,
            )  # fmt: skip
    return [p for _, p in found]


@dataclass(frozen=True)
class MergedTensor:
    """One HF tensor and where it comes from in the shards."""

    hf_name: str
    meta_name: str
    axis: int | None  # merge axis; None: replicated
    shape: tuple[int, ...]  # merged shape
    dtype: np.dtype
    permute_heads: int = 0  # Q/K rotary permutation with this many heads


class MetaCheckpoint:
    """A Meta original checkpoint folder, read lazily, shards merged one tensor at a time.

    ``generation`` may be given ("1", "2", "3", "3.1", "3.2", "3.3"); otherwise it is
    detected from the tokenizer and ``params.json``.  Use as a context manager.
    """

    def __init__(self, folder: str | os.PathLike[str], generation: str | None = None) -> None:
        self.path = Path(folder)
        if not self.path.is_dir():
            raise E.MissingModelFile(
                "original checkpoint folder not found", path=self.path, expected="a folder",
                found="nothing",
            )  # fmt: skip
        self.params = read_params(self.path)
        self.tokenizer_kind = tokenizer_kind(self.path)
        if generation is None:
            generation = detect_generation(self.params, self.tokenizer_kind, self.path)
        elif generation not in GENERATIONS:
            raise E.UnknownLlamaGeneration(
                "unknown Llama generation", path=self.path, field="llama_version",
                expected="one of " + ", ".join(GENERATIONS), found=generation,
            )  # fmt: skip
        self.generation = generation
        self.shard_paths = _shard_paths(self.path)
        self._shards: list[Any] = []
        try:
            self._shards = [torchfile.open(p) for p in self.shard_paths]
            self.tensors = self._plan()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ plan
    def _infos(self, name: str) -> list[Any]:
        infos = []
        for shard, path in zip(self._shards, self.shard_paths):
            info = shard.tensors.get(name)
            if info is None:
                raise E.ShardTensorMismatch(
                    "a model-parallel shard lacks a tensor the others have", path=path,
                    field=name, expected="the same tensor names in every shard",
                    found="no such tensor",
                )  # fmt: skip
            infos.append(info)
        return infos

    def _merged_shape(self, name: str, axis: int | None) -> tuple[tuple[int, ...], np.dtype]:
        infos = self._infos(name)
        first = infos[0]
        for info, path in zip(infos[1:], self.shard_paths[1:]):
            same = info.dtype == first.dtype and len(info.shape) == len(first.shape)
            if same and axis is not None:
                same = all(
                    a == b for i, (a, b) in enumerate(zip(info.shape, first.shape)) if i != axis
                )
            elif same:
                same = info.shape == first.shape
            if not same:
                raise E.ShardTensorMismatch(
                    "model-parallel shards disagree on a tensor", path=path, field=name,
                    expected=f"{first.torch_dtype} {list(first.shape)} as in "
                    f"{self.shard_paths[0].name}",
                    found=f"{info.torch_dtype} {list(info.shape)}",
                )  # fmt: skip
        shape = list(first.shape)
        if axis is not None:
            shape[axis] = sum(i.shape[axis] for i in infos)
        return tuple(shape), first.dtype

    def _plan(self) -> list[MergedTensor]:
        p = self.params
        names = set(self._shards[0].tensors)
        for shard, path in zip(self._shards[1:], self.shard_paths[1:]):
            if set(shard.tensors) != names:
                extra = sorted(set(shard.tensors) ^ names)[:3]
                raise E.ShardTensorMismatch(
                    "model-parallel shards hold different tensor names", path=path,
                    expected=f"the names of {self.shard_paths[0].name}",
                    found=f"differences such as {extra}",
                )  # fmt: skip
        embed_axis = 0 if is_llama3(self.generation) else 1
        plan: list[MergedTensor] = []

        def add(meta: str, hf: str, axis: int | None, heads: int = 0) -> None:
            shape, dtype = self._merged_shape(meta, axis)
            plan.append(MergedTensor(hf, meta, axis, shape, dtype, heads))

        add("tok_embeddings.weight", "model.embed_tokens.weight", embed_axis)
        for meta in sorted(names):
            if meta in _SKIPPED or meta == "tok_embeddings.weight":
                continue
            if meta in _GLOBAL:
                hf, axis = _GLOBAL[meta]
                if hf == "lm_head.weight" and self.tied:
                    continue
                add(meta, hf, axis)
                continue
            m = _LAYER_RE.fullmatch(meta)
            if m is None or m.group(2) not in _LAYER or int(m.group(1)) >= p.n_layers:
                raise E.UnmappedTensor(
                    "tensor not in Meta's Llama layout", path=self.shard_paths[0], field=meta,
                    expected="tok_embeddings, layers.N.{attention,feed_forward,*_norm}, norm, "
                    f"output with N < n_layers={p.n_layers}",
                    found=meta,
                )  # fmt: skip
            layer, rest = m.groups()
            hf, axis = _LAYER[rest]
            heads = {"attention.wq.weight": p.n_heads, "attention.wk.weight": p.n_kv_heads}
            add(meta, f"model.layers.{layer}.{hf}", axis, heads.get(rest, 0))
        self._check_shapes(plan)
        return plan

    @property
    def tied(self) -> bool:
        """Llama 3.2 ties the output to the embeddings (the HF folder has no lm_head)."""
        return self.generation == "3.2"

    def _check_shapes(self, plan: list[MergedTensor]) -> None:
        p = self.params
        vocab = plan[0].shape[0]
        if p.vocab_size > 0 and vocab != p.vocab_size:
            self._contradict("tok_embeddings.weight", (p.vocab_size, p.dim), plan[0].shape)
        kv = p.head_dim * p.n_kv_heads
        ffn = p.intermediate_size
        want = {
            "tok_embeddings.weight": (vocab, p.dim),
            "norm.weight": (p.dim,),
            "output.weight": (vocab, p.dim),
            "attention.wq.weight": (p.dim, p.dim),
            "attention.wk.weight": (kv, p.dim),
            "attention.wv.weight": (kv, p.dim),
            "attention.wo.weight": (p.dim, p.dim),
            "feed_forward.w1.weight": (ffn, p.dim),
            "feed_forward.w2.weight": (p.dim, ffn),
            "feed_forward.w3.weight": (ffn, p.dim),
            "attention_norm.weight": (p.dim,),
            "ffn_norm.weight": (p.dim,),
        }
        layers = set()
        for t in plan:
            m = _LAYER_RE.fullmatch(t.meta_name)
            if m:
                layers.add(int(m.group(1)))
            key = m.group(2) if m else t.meta_name
            if t.shape != want[key]:
                self._contradict(t.meta_name, want[key], t.shape)
        if layers != set(range(p.n_layers)):
            missing = sorted(set(range(p.n_layers)) - layers)
            raise E.ParamsShapeMismatch(
                "params.json n_layers contradicts the checkpoint", path=self.path / "params.json",
                field="n_layers", expected=f"layers 0..{p.n_layers - 1}",
                found=f"missing layers {missing[:5]}",
            )  # fmt: skip

    def _contradict(self, name: str, want: tuple, found: tuple) -> None:
        raise E.ParamsShapeMismatch(
            "params.json contradicts a tensor's shape", path=self.path / "params.json",
            field=name, expected=list(want), found=list(found),
        )  # fmt: skip

    # ------------------------------------------------------------------ data
    @property
    def vocab_size(self) -> int:
        return self.tensors[0].shape[0]

    def read(self, t: MergedTensor) -> np.ndarray:
        """The merged tensor in HF layout (Q/K permuted), in the checkpoint's dtype.

        Shards are copied slab by slab into one output array; each shard's pages are
        released as soon as its slab is in place, so only the merged tensor is held.
        """
        if t.axis is None:
            out = np.array(self._shards[0][t.meta_name])
            for shard, path in zip(self._shards[1:], self.shard_paths[1:]):
                other = shard[t.meta_name]
                if out.tobytes() != np.ascontiguousarray(other).tobytes():
                    raise E.ShardTensorMismatch(
                        "a replicated tensor differs between model-parallel shards",
                        path=path, field=t.meta_name,
                        expected=f"the values in {self.shard_paths[0].name}",
                        found="different values",
                    )  # fmt: skip
                shard.release(t.meta_name)
        else:
            out = np.empty(t.shape, dtype=t.dtype)
            pos = 0
            for shard in self._shards:
                part = shard[t.meta_name]
                n = part.shape[t.axis]
                index = (slice(None),) * t.axis + (slice(pos, pos + n),)
                out[index] = part
                pos += n
                shard.release(t.meta_name)
        if t.permute_heads:
            rows, cols = out.shape
            h = t.permute_heads
            out = out.reshape(h, rows // h // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
        return out

    def __iter__(self) -> Iterator[tuple[MergedTensor, np.ndarray]]:
        for t in self.tensors:
            yield t, self.read(t)

    def close(self) -> None:
        for shard in self._shards:
            shard.close()
        self._shards = []

    def __enter__(self) -> MetaCheckpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
