"""The architecture registry of the HF <-> GGUF converters.

One :class:`Arch` entry per Hugging Face architecture (``config.json``'s
``architectures[0]``) says everything the converters need, in both directions:

* ``gguf_arch`` -- the ``general.architecture`` value (``llama``, ``qwen2``, ...);
* ``meta`` -- the ``<arch>.*`` hyperparameters as :class:`MetaKey` rows, in the order
  llama.cpp's ``convert_hf_to_gguf.py`` writes them.  Each row names its GGUF key,
  the ``config.json`` field(s) it comes from and its GGUF value type, so the inverse
  converter can rebuild ``config.json`` from the metadata (``MetaKey.fields[0]``);
* ``names`` -- the tensor name map as :class:`NameRule` rows (a regex over the HF
  name with ``{bid}`` for the layer number, and the GGUF template); every rule is a
  bijection, :func:`Arch.hf_name` inverts :func:`Arch.gguf_name`;
* ``transforms`` -- :class:`Transform` rows (the Llama Q/K RoPE permutation, Gemma's
  norm weight + 1, ...) each with ``forward`` (HF -> GGUF) and ``inverse``;
* ``skip`` -- HF tensors that are not written (rotary inverse frequencies).

Adding an architecture means adding one entry to :data:`REGISTRY`.  The values and
their order reproduce llama.cpp's converter (``conversion/base.py`` ``TextModel.
set_gguf_parameters`` and the model classes in ``conversion/llama.py``, ``qwen.py``,
``gemma.py``); the tests compare against it byte for byte.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...gguf import GGUFValueType

VT = GGUFValueType

__all__ = [
    "REGISTRY",
    "Arch",
    "MetaKey",
    "NameRule",
    "Transform",
    "head_counts",
    "lookup",
    "rope_parameters",
    "supported",
]


# --------------------------------------------------------------------------- config helpers


def rope_parameters(cfg: dict) -> dict:
    """The RoPE settings as llama.cpp's TextModel normalises them (``rope_parameters`` or
    ``rope_scaling``, with the top-level ``rope_theta`` etc. mirrored in)."""
    rp = cfg.get("rope_parameters", cfg.get("rope_scaling")) or {}
    rp = dict(rp)
    if "full_attention" not in rp and "sliding_attention" not in rp:
        local = _first(
            cfg,
            ("local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta",
             "rope_local_base_freq"),
        )  # fmt: skip
        theta = _first(cfg, ("global_rope_theta", "rope_global_theta", "rope_theta_global",
                             "rope_theta", "rotary_emb_base"))  # fmt: skip
        if local is not None:
            rp["sliding_attention"] = {"rope_theta": local}
        if "rope_theta" not in rp and theta is not None:
            rp["rope_theta"] = theta
        if "rope_type" not in rp and rp.get("type") is not None:
            rp["rope_type"] = rp["type"]
        orig = cfg.get("original_max_position_embeddings")
        if "original_max_position_embeddings" not in rp and orig is not None:
            rp["original_max_position_embeddings"] = orig
    return rp


def _full_rope(cfg: dict) -> dict:
    rp = rope_parameters(cfg)
    return rp.get("full_attention", rp)


def _first(cfg: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in cfg:
            return cfg[k]
    return None


def head_counts(cfg: dict) -> tuple[int, int]:
    n_head = cfg["num_attention_heads"]
    return n_head, cfg.get("num_key_value_heads") or n_head


def head_dim(cfg: dict) -> int:
    hd = cfg.get("head_dim")
    return hd if hd is not None else cfg["hidden_size"] // cfg["num_attention_heads"]


# --------------------------------------------------------------------------- metadata rows


@dataclass(frozen=True)
class MetaKey:
    """One ``<arch>.<key>`` hyperparameter.

    ``fields`` are the config.json fields read (first present wins; the inverse
    writes ``fields[0]``).  ``value`` overrides the lookup with a function of the
    whole config (returning None omits the key), for derived or defaulted values.
    ``general`` rows are written under ``general.`` instead of the arch prefix.
    """

    key: str
    fields: tuple[str, ...]
    type: GGUFValueType
    value: Callable[[dict], Any] | None = None
    general: bool = False

    def get(self, cfg: dict) -> Any:
        if self.value is not None:
            return self.value(cfg)
        return _first(cfg, self.fields)

    def full_key(self, arch: str) -> str:
        return f"general.{self.key}" if self.general else f"{arch}.{self.key}"


FILE_TYPE = "file_type"  # placeholder row: general.file_type goes here in the order


def _m(key: str, *fields: str, t: GGUFValueType = VT.UINT32, value=None) -> MetaKey:
    return MetaKey(key, tuple(fields), t, value)


def _rope_theta(cfg: dict) -> Any:
    return _full_rope(cfg).get("rope_theta")


def _rope_theta_swa(cfg: dict) -> Any:
    return rope_parameters(cfg).get("sliding_attention", {}).get("rope_theta")


def _head_dim_if_given(cfg: dict) -> Any:
    return cfg.get("head_dim")


def _rope_linear_or_yarn(kind: str) -> Callable[[dict], Any]:
    def get(cfg: dict) -> Any:
        rp = _full_rope(cfg)
        t, f = rp.get("rope_type"), rp.get("factor")
        if f is None or t not in ("linear", "yarn"):
            return None
        if kind == "type":
            return t
        if kind == "factor":
            return f
        if kind == "orig" and t == "yarn":
            return rp["original_max_position_embeddings"]
        return None

    return get


# TextModel.set_gguf_parameters: the common rows, in order
COMMON: list[MetaKey] = [
    _m("block_count", "num_hidden_layers", "n_layers", "n_layer", "num_layers"),
    _m(
        "context_length",
        "max_position_embeddings",
        "n_ctx",
        "n_positions",
        "max_length",
        "max_sequence_length",
        "model_max_length",
    ),
    _m("embedding_length", "hidden_size", "n_embd", "dim"),
    _m("feed_forward_length", "intermediate_size", "n_inner", "hidden_dim"),
    _m("attention.head_count", "num_attention_heads", "n_head", "n_heads"),
    _m("attention.head_count_kv", "num_key_value_heads", "n_kv_heads"),
    _m("rope.scaling.type", "rope_scaling.type", t=VT.STRING, value=_rope_linear_or_yarn("type")),
    _m(
        "rope.scaling.factor",
        "rope_scaling.factor",
        t=VT.FLOAT32,
        value=_rope_linear_or_yarn("factor"),
    ),
    _m(
        "rope.scaling.original_context_length",
        "rope_scaling.original_max_position_embeddings",
        value=_rope_linear_or_yarn("orig"),
    ),
    _m("rope.freq_base", "rope_theta", t=VT.FLOAT32, value=_rope_theta),
    _m("rope.freq_base_swa", "rope_local_base_freq", t=VT.FLOAT32, value=_rope_theta_swa),
    _m("attention.layer_norm_rms_epsilon", "rms_norm_eps", "norm_eps", t=VT.FLOAT32),
    _m(
        "attention.layer_norm_epsilon",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "norm_epsilon",
        t=VT.FLOAT32,
    ),
    _m("attention.key_length", "head_dim", value=_head_dim_if_given),
    _m("attention.value_length", "head_dim", value=_head_dim_if_given),
]


# --------------------------------------------------------------------------- tensors


@dataclass(frozen=True)
class NameRule:
    """HF name regex (``{bid}`` = layer number) <-> GGUF name template."""

    hf: str
    gguf: str

    def _rx(self, s: str) -> re.Pattern[str]:
        return re.compile(re.escape(s).replace(r"\{bid\}", r"(?P<bid>\d+)") + r"$")

    def forward(self, name: str) -> str | None:
        m = self._rx(self.hf).match(name)
        return None if m is None else self.gguf.format(**m.groupdict())

    def inverse(self, name: str) -> str | None:
        m = self._rx(self.gguf).match(name)
        return None if m is None else self.hf.format(**m.groupdict())


@dataclass(frozen=True)
class Transform:
    """A tensor transform for HF names matching ``pattern`` (a regex, ``search``ed).

    ``forward(x, cfg)`` maps HF values to GGUF values, ``inverse(x, cfg)`` back;
    ``shape(shape, cfg, ctx)`` gives the GGUF shape (numpy order) without data
    (identity by default).  ``ctx`` carries converter facts such as ``n_vocab``
    (the tokenizer's size).  ``exact`` says whether the inverse restores the
    original bits (a float add does not in general).
    """

    name: str
    pattern: str
    forward: Callable[[np.ndarray, dict, dict], np.ndarray]
    inverse: Callable[[np.ndarray, dict, dict], np.ndarray]
    shape: Callable[[tuple[int, ...], dict, dict], tuple[int, ...]] | None = None
    exact: bool = True

    def matches(self, hf_name: str) -> bool:
        return re.search(self.pattern, hf_name) is not None


def permute_rope(x: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotate-half Q/K rows -> ggml's interleaved pairs (llama.cpp's ``permute``)."""
    r = x.shape[0]
    return x.reshape(n_head, 2, r // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def unpermute_rope(x: np.ndarray, n_head: int) -> np.ndarray:
    r = x.shape[0]
    return x.reshape(n_head, r // n_head // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def _q_heads(cfg: dict) -> int:
    return head_counts(cfg)[0]


def _k_heads(cfg: dict) -> int:
    return head_counts(cfg)[1]


PERMUTE_Q = Transform(
    "rope_permute_q",
    r"q_proj\.(weight|bias)$",
    lambda x, cfg, ctx: permute_rope(x, _q_heads(cfg)),
    lambda x, cfg, ctx: unpermute_rope(x, _q_heads(cfg)),
)
PERMUTE_K = Transform(
    "rope_permute_k",
    r"k_proj\.(weight|bias)$",
    lambda x, cfg, ctx: permute_rope(x, _k_heads(cfg)),
    lambda x, cfg, ctx: unpermute_rope(x, _k_heads(cfg)),
)


def _plus_one(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    # llama.cpp adds in the tensor's own float type (f16 stays f16, others f32)
    one = x.dtype.type(1.0) if x.dtype in (np.float16, np.float32) else np.float32(1.0)
    return (x if x.dtype in (np.float16, np.float32) else x.astype(np.float32)) + one


def _minus_one(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return x.astype(np.float32) - np.float32(1.0)


GEMMA_NORM = Transform("gemma_norm_plus_one", r"norm\.weight$", _plus_one, _minus_one, exact=False)


def _vocab_rows(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    n = ctx.get("n_vocab")
    return shape if n is None else (min(shape[0], n), *shape[1:])


GEMMA_EMBED_ROWS = Transform(
    "embedding_rows_to_vocab",
    r"embed_tokens\.weight$",
    lambda x, cfg, ctx: x[: _vocab_rows(x.shape, cfg, ctx)[0]],
    # rows past the tokenizer are padding the model never produces: zeros restore the shape
    lambda x, cfg, ctx: (
        np.concatenate([x, np.zeros((cfg["vocab_size"] - x.shape[0], *x.shape[1:]), x.dtype)])
        if cfg.get("vocab_size", 0) > x.shape[0]
        else x
    ),
    shape=_vocab_rows,
    exact=False,
)


# --------------------------------------------------------------------------- extra tensors


def llama3_rope_freqs(cfg: dict) -> np.ndarray | None:
    """The ``rope_freqs.weight`` factors of ``rope_type: llama3`` (None for other RoPE).

    llama.cpp computes them with torch float32 ops, whose ``pow`` is not correctly
    rounded; when torch is importable the same ops are used so the bytes agree,
    otherwise numpy (float64 pow rounded to float32: within one ulp).
    """
    rp = _full_rope(cfg)
    if str(rp.get("rope_type", "")).lower() != "llama3":
        return None
    base = float(rp.get("rope_theta", 10000.0))
    dim = head_dim(cfg)
    factor = rp.get("factor", 8.0)
    lo_f = rp.get("low_freq_factor", 1.0)
    hi_f = rp.get("high_freq_factor", 4.0)
    old = rp.get("original_max_position_embeddings", 8192)
    lo_wl, hi_wl = old / lo_f, old / hi_f
    try:
        import torch  # optional dependency: the reference computes these in torch
    except ImportError:
        torch = None
    if torch is not None:
        freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        vals: list = []
        for fr in freqs:
            wl = 2 * math.pi / fr
            if wl < hi_wl:
                vals.append(1)
            elif wl > lo_wl:
                vals.append(factor)
            else:
                smooth = (old / wl - lo_f) / (hi_f - lo_f)
                vals.append(1 / ((1 - smooth) / factor + smooth))
        return torch.tensor(vals, dtype=torch.float32).numpy()
    f32 = np.float32
    exps = np.arange(0, dim, 2, dtype=f32) / f32(dim)
    freqs_np = f32(1.0) / np.power(np.float64(base), exps.astype(np.float64)).astype(f32)
    out = []
    for fr in freqs_np:
        # torch's scalar / tensor is reciprocal(tensor) * scalar, in float32
        wl = (f32(1) / fr) * f32(2 * math.pi)
        if wl < hi_wl:
            out.append(f32(1))
        elif wl > lo_wl:
            out.append(f32(factor))
        else:
            smooth = ((f32(1) / wl) * f32(old) - f32(lo_f)) / f32(hi_f - lo_f)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=f32)


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class Arch:
    hf_archs: tuple[str, ...]
    gguf_arch: str
    meta: list[MetaKey | str]
    names: list[NameRule]
    transforms: list[Transform] = field(default_factory=list)
    skip: tuple[str, ...] = (r"rotary_emb\.inv_freq$", r"\.attention\.masked_bias$")
    # extra tensors written first: GGUF name -> function of the config (None: not written)
    extra: dict[str, Callable[[dict], np.ndarray | None]] = field(default_factory=dict)
    # config.json fields that must be present (named in the error otherwise)
    required: tuple[str, ...] = (
        "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
        "vocab_size",
    )  # fmt: skip
    # True: the embedding table is cut to the tokenizer's size (ctx["n_vocab"])
    vocab_rows: bool = False
    # GGUF -> HF: config.json ``model_type`` of each HF architecture, and the config
    # fields GGUF does not carry, as a function of the rebuilt config and the tensor names
    model_types: dict[str, str] = field(default_factory=dict)
    hf_config: Callable[[dict, set[str]], dict] = field(default=lambda cfg, names: {})

    def gguf_name(self, hf_name: str) -> str | None:
        for r in self.names:
            if (g := r.forward(hf_name)) is not None:
                return g
        return None

    def hf_name(self, gguf_name: str) -> str | None:
        for r in self.names:
            if (h := r.inverse(gguf_name)) is not None:
                return h
        return None

    def skipped(self, hf_name: str) -> bool:
        return any(re.search(p, hf_name) for p in self.skip)

    def transforms_for(self, hf_name: str) -> list[Transform]:
        return [t for t in self.transforms if t.matches(hf_name)]

    def metadata(self, cfg: dict) -> list[tuple[str, Any, GGUFValueType]]:
        """``(key, value, type)`` rows for this config, ``general.file_type`` as a
        ``(FILE_TYPE, None, UINT32)`` placeholder at its place in the order."""
        out: dict[str, tuple[Any, GGUFValueType]] = {}
        for row in self.meta:
            if row == FILE_TYPE:
                out[FILE_TYPE] = (None, VT.UINT32)
                continue
            assert isinstance(row, MetaKey)
            v = row.get(cfg)
            if v is not None:
                # a later row for the same key replaces the value in place, as gguf-py does
                out[row.full_key(self.gguf_arch)] = (v, row.type)
        return [(k, v, t) for k, (v, t) in out.items()]


def _llama_rows() -> list:
    return [
        *COMMON,
        FILE_TYPE,
        _m("vocab_size", "vocab_size"),
        _m("rope.dimension_count", "head_dim", value=head_dim),
    ]


_LAYER = "model.layers.{bid}."
_BLK = "blk.{bid}."

_BASE_NAMES = [
    NameRule("model.embed_tokens.weight", "token_embd.weight"),
    NameRule("model.norm.weight", "output_norm.weight"),
    NameRule("lm_head.weight", "output.weight"),
    NameRule(_LAYER + "input_layernorm.weight", _BLK + "attn_norm.weight"),
    NameRule(_LAYER + "self_attn.q_proj.weight", _BLK + "attn_q.weight"),
    NameRule(_LAYER + "self_attn.k_proj.weight", _BLK + "attn_k.weight"),
    NameRule(_LAYER + "self_attn.v_proj.weight", _BLK + "attn_v.weight"),
    NameRule(_LAYER + "self_attn.q_proj.bias", _BLK + "attn_q.bias"),
    NameRule(_LAYER + "self_attn.k_proj.bias", _BLK + "attn_k.bias"),
    NameRule(_LAYER + "self_attn.v_proj.bias", _BLK + "attn_v.bias"),
    NameRule(_LAYER + "self_attn.o_proj.weight", _BLK + "attn_output.weight"),
    NameRule(_LAYER + "mlp.gate_proj.weight", _BLK + "ffn_gate.weight"),
    NameRule(_LAYER + "mlp.up_proj.weight", _BLK + "ffn_up.weight"),
    NameRule(_LAYER + "mlp.down_proj.weight", _BLK + "ffn_down.weight"),
]
_QK_NORM = [
    NameRule(_LAYER + "self_attn.q_norm.weight", _BLK + "attn_q_norm.weight"),
    NameRule(_LAYER + "self_attn.k_norm.weight", _BLK + "attn_k_norm.weight"),
]
_FFN_NORM = [NameRule(_LAYER + "post_attention_layernorm.weight", _BLK + "ffn_norm.weight")]
_GEMMA_NORMS = [
    NameRule(_LAYER + "post_attention_layernorm.weight", _BLK + "post_attention_norm.weight"),
    NameRule(_LAYER + "pre_feedforward_layernorm.weight", _BLK + "ffn_norm.weight"),
    NameRule(_LAYER + "post_feedforward_layernorm.weight", _BLK + "post_ffw_norm.weight"),
]


def _gemma3_rows() -> list:
    def d(field_: str, default: Any) -> Callable[[dict], Any]:
        return lambda cfg: cfg.get(field_, default)

    return [
        *COMMON,
        FILE_TYPE,
        # Gemma3Model.set_gguf_parameters re-adds these with its defaults
        _m("context_length", "max_position_embeddings", value=d("max_position_embeddings", 131072)),
        _m("attention.head_count", "num_attention_heads", value=d("num_attention_heads", 8)),
        _m(
            "attention.layer_norm_rms_epsilon",
            "rms_norm_eps",
            t=VT.FLOAT32,
            value=d("rms_norm_eps", 1e-6),
        ),
        _m("attention.key_length", "head_dim", value=d("head_dim", 256)),
        _m("attention.value_length", "head_dim", value=d("head_dim", 256)),
        _m(
            "rope.freq_base",
            "rope_theta",
            t=VT.FLOAT32,
            value=lambda cfg: _full_rope(cfg).get("rope_theta", 1_000_000.0),
        ),
        _m(
            "final_logit_softcapping",
            "final_logit_softcapping",
            t=VT.FLOAT32,
            value=lambda cfg: cfg.get("final_logit_softcapping") or None,
        ),
        _m(
            "attention.sliding_window",
            "sliding_window",
            value=lambda cfg: (
                cfg["sliding_window"] if cfg.get("sliding_window_pattern") != 1 else None
            ),
        ),
        _m("attention.head_count_kv", "num_key_value_heads", value=d("num_key_value_heads", 4)),
    ]


LLAMA = Arch(
    hf_archs=("LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM"),
    gguf_arch="llama",
    meta=_llama_rows(),
    names=[*_BASE_NAMES, *_FFN_NORM],
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    model_types={
        "LlamaForCausalLM": "llama",
        "LLaMAForCausalLM": "llama",
        "MistralForCausalLM": "mistral",
    },
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": False,
    },
)
QWEN2 = Arch(
    hf_archs=("Qwen2ForCausalLM",),
    gguf_arch="qwen2",
    meta=[*COMMON, FILE_TYPE],
    names=[*_BASE_NAMES, *_FFN_NORM],
    model_types={"Qwen2ForCausalLM": "qwen2"},
    hf_config=lambda cfg, names: {"hidden_act": "silu"},
)
QWEN3 = Arch(
    hf_archs=("Qwen3ForCausalLM",),
    gguf_arch="qwen3",
    meta=[*COMMON, FILE_TYPE],
    names=[*_BASE_NAMES, *_QK_NORM, *_FFN_NORM],
    model_types={"Qwen3ForCausalLM": "qwen3"},
    hf_config=lambda cfg, names: {"hidden_act": "silu"},
)
GEMMA3 = Arch(
    hf_archs=("Gemma3ForCausalLM",),
    gguf_arch="gemma3",
    meta=_gemma3_rows(),
    names=[*_BASE_NAMES, *_QK_NORM, *_GEMMA_NORMS],
    transforms=[GEMMA_EMBED_ROWS, GEMMA_NORM],
    vocab_rows=True,
    required=("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"),
    model_types={"Gemma3ForCausalLM": "gemma3_text"},
    hf_config=lambda cfg, names: {
        "hidden_activation": "gelu_pytorch_tanh",
        # llama.cpp scales queries by 1/sqrt(head_dim), by 1/sqrt(n_embd/n_head) for 27B
        "query_pre_attn_scalar": (
            cfg["hidden_size"] // cfg["num_attention_heads"]
            if cfg.get("num_hidden_layers") == 62
            else cfg.get("head_dim", 256)
        ),
    },
)

#: HF architecture name -> entry
REGISTRY: dict[str, Arch] = {h: a for a in (LLAMA, QWEN2, QWEN3, GEMMA3) for h in a.hf_archs}


def supported() -> list[str]:
    return sorted(REGISTRY)


def lookup(hf_arch: str) -> Arch | None:
    return REGISTRY.get(hf_arch)


def by_gguf_arch(name: str) -> Arch | None:
    """The entry for a ``general.architecture`` value (for the GGUF -> HF direction)."""
    for a in (LLAMA, QWEN2, QWEN3, GEMMA3):
        if a.gguf_arch == name:
            return a
    return None
