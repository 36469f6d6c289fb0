"""Rows, name rules and transforms shared by several entries.

``COMMON`` is llama.cpp's ``TextModel.set_gguf_parameters`` (conversion/base.py): the
``<arch>.*`` rows every text model writes, in its order, ending with
``general.file_type``.  The name lists are gguf-py's tensor map for the HF layouts
the entries use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ._model import (
    FILE_TYPE,
    VT,
    NameRule,
    Stack,
    Transform,
    first,
    full_rope,
    head_counts,
    head_dim,
    layer_at_or_past,
    m,
)
from ._model import rope_parameters as rope_parameters

# --------------------------------------------------------------------------- metadata rows


def _rope_theta(cfg: dict) -> Any:
    return full_rope(cfg).get("rope_theta")


def _rope_theta_swa(cfg: dict) -> Any:
    return rope_parameters(cfg).get("sliding_attention", {}).get("rope_theta")


def _head_dim_if_given(cfg: dict) -> Any:
    return cfg.get("head_dim")


def _rope_scaling(kind: str) -> Callable[[dict], Any]:
    """TextModel's rope scaling rows: linear and yarn (with its extras), longrope's type."""

    def get(cfg: dict) -> Any:
        rp = full_rope(cfg)
        t, f = rp.get("rope_type"), rp.get("factor")
        if t in ("su", "longrope"):
            return "longrope" if kind == "type" else None
        if f is None or t not in ("linear", "yarn"):
            return None
        if kind == "type":
            return t
        if kind == "factor":
            return f
        if t != "yarn":
            return None
        if kind == "orig":
            return rp["original_max_position_embeddings"]
        if kind == "attn_factor":
            return rp.get("attention_factor", rp.get("attn_factor"))
        return rp.get(kind)

    return get


_GATING = {"softmax": 1, "sigmoid": 2, "sqrtsoftplus": 4}
_GATING_BACK = {v: k for k, v in _GATING.items()}
_SCORE_FIELDS = (
    "score_function",
    "scoring_func",
    "score_func",
    "moe_router_activation",
    "moe_router_activation_func",
    "expert_selection_fn",
)


def _gating(cfg: dict) -> Any:
    for k in _SCORE_FIELDS:
        if k in cfg:
            return _GATING[cfg[k]] if cfg[k] is not None else None
    return None


def _causal(cfg: dict) -> Any:
    return False if cfg.get("is_causal") is False else None


COMMON: list = [
    m("block_count", "num_hidden_layers", "n_layers", "n_layer", "num_layers"),
    m(
        "context_length",
        "max_position_embeddings",
        "n_ctx",
        "n_positions",
        "max_length",
        "max_sequence_length",
        "model_max_length",
    ),
    m("embedding_length", "hidden_size", "n_embd", "dim"),
    m(
        "feed_forward_length",
        "intermediate_size",
        "prefix_dense_intermediate_size",
        "dense_intermediate_size",
        "n_inner",
        "hidden_dim",
        value=lambda c: first(
            c,
            (
                "prefix_dense_intermediate_size",
                "dense_intermediate_size",
                "intermediate_size",
                "n_inner",
                "hidden_dim",
            ),
        ),
    ),
    m("attention.head_count", "num_attention_heads", "n_head", "n_heads"),
    m("attention.head_count_kv", "num_key_value_heads", "n_kv_heads"),
    m("attention.causal", "is_causal", t=VT.BOOL, value=_causal),
    m("rope.scaling.type", "rope_scaling.type", t=VT.STRING, value=_rope_scaling("type")),
    m("rope.scaling.factor", "rope_scaling.factor", t=VT.FLOAT32, value=_rope_scaling("factor")),
    m(
        "rope.scaling.original_context_length",
        "rope_scaling.original_max_position_embeddings",
        value=_rope_scaling("orig"),
    ),
    m(
        "rope.scaling.yarn_ext_factor",
        "rope_scaling.extrapolation_factor",
        t=VT.FLOAT32,
        value=_rope_scaling("extrapolation_factor"),
    ),
    m(
        "rope.scaling.yarn_attn_factor",
        "rope_scaling.attention_factor",
        t=VT.FLOAT32,
        value=_rope_scaling("attn_factor"),
    ),
    m(
        "rope.scaling.yarn_beta_fast",
        "rope_scaling.beta_fast",
        t=VT.FLOAT32,
        value=_rope_scaling("beta_fast"),
    ),
    m(
        "rope.scaling.yarn_beta_slow",
        "rope_scaling.beta_slow",
        t=VT.FLOAT32,
        value=_rope_scaling("beta_slow"),
    ),
    m("rope.freq_base", "rope_theta", t=VT.FLOAT32, value=_rope_theta),
    m("rope.freq_base_swa", "rope_local_base_freq", t=VT.FLOAT32, value=_rope_theta_swa),
    m("attention.layer_norm_rms_epsilon", "rms_norm_eps", "norm_eps", t=VT.FLOAT32),
    m(
        "attention.layer_norm_epsilon",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "norm_epsilon",
        t=VT.FLOAT32,
    ),
    m("expert_count", "num_local_experts", "num_experts", "n_routed_experts"),
    m("expert_used_count", "num_experts_per_tok", "num_experts_per_token", "top_k_experts"),
    m("expert_group_count", "n_group"),
    m("expert_group_used_count", "topk_group"),
    m("expert_gating_func", "scoring_func", value=_gating, inverse=_GATING_BACK.get),
    m("attention.key_length", "head_dim", value=_head_dim_if_given),
    m("attention.value_length", "head_dim", value=_head_dim_if_given),
    FILE_TYPE,
]


def replace_rows(rows: list, **new: Any) -> list:
    """``rows`` with the row of each key in ``new`` (``.`` spelled ``__``) replaced in place:
    a model class that overrides one of TextModel's values keeps its place in the order."""
    by_key = {k.replace("__", "."): v for k, v in new.items()}
    assert len(by_key) == sum(1 for r in rows if getattr(r, "key", None) in by_key)
    return [by_key.get(getattr(r, "key", None), r) for r in rows]


def defaulted(field_: str, default: Any) -> Callable[[dict], Any]:
    """A row value read with the model class's own default (``hparams.get(f, d)``)."""
    return lambda cfg: cfg.get(field_, default)


# --------------------------------------------------------------------------- names

LAYER = "model.layers.{bid}."
BLK = "blk.{bid}."


def past_blocks(name: str, n_blocks: int) -> str:
    """``name`` for the rules: a ``model.layers.{i}.*`` tensor with ``i >= n_blocks`` (an
    MTP layer the config does not count) gets a prefix no rule maps, so it is refused as
    unmapped before any output, as the reference's tensor map (built for ``block_count``
    blocks) cannot map it; a ``rename`` hook of the entries whose blocks follow the trunk."""
    return "past_block_count." + name if layer_at_or_past(name, n_blocks) else name


def layer_rules(pairs: list[tuple[str, str]]) -> list[NameRule]:
    """Rules for per-layer tensors: ``(HF suffix, GGUF suffix)`` pairs, ``.weight`` added."""
    return [NameRule(LAYER + h + ".weight", BLK + g + ".weight") for h, g in pairs]


def wb_rules(hf_layer: str, pairs: list[tuple[str, str]], top: list[tuple[str, str]] = ()):
    """Weight and bias rules: per-layer ``(HF suffix, GGUF suffix)`` pairs under
    ``hf_layer`` (with ``{bid}``), and whole-model ``top`` pairs."""
    out = []
    for h, g in pairs:
        for suf in (".weight", ".bias"):
            out.append(NameRule(hf_layer + h + suf, BLK + g + suf))
    for h, g in top:
        for suf in (".weight", ".bias"):
            out.append(NameRule(h + suf, g + suf))
    return out


def expert_stacks(count: Callable[[dict], int]) -> list[Stack]:
    """``mlp.experts.{xid}.{down,gate,up}_proj`` stacked per layer, emitted in that order
    when a layer's last expert is read (Qwen2MoeModel, DeepseekV2Model)."""
    exp = LAYER + "mlp.experts.{xid}."
    return [
        Stack(exp + f"{w}_proj.weight", BLK + f"ffn_{w}_exps.weight", count)
        for w in ("down", "gate", "up")
    ]


BASE_NAMES = [
    NameRule("model.embed_tokens.weight", "token_embd.weight"),
    NameRule("model.norm.weight", "output_norm.weight"),
    NameRule("lm_head.weight", "output.weight"),
    NameRule(LAYER + "input_layernorm.weight", BLK + "attn_norm.weight"),
    NameRule(LAYER + "self_attn.q_proj.weight", BLK + "attn_q.weight"),
    NameRule(LAYER + "self_attn.k_proj.weight", BLK + "attn_k.weight"),
    NameRule(LAYER + "self_attn.v_proj.weight", BLK + "attn_v.weight"),
    NameRule(LAYER + "self_attn.q_proj.bias", BLK + "attn_q.bias"),
    NameRule(LAYER + "self_attn.k_proj.bias", BLK + "attn_k.bias"),
    NameRule(LAYER + "self_attn.v_proj.bias", BLK + "attn_v.bias"),
    NameRule(LAYER + "self_attn.o_proj.weight", BLK + "attn_output.weight"),
    NameRule(LAYER + "self_attn.o_proj.bias", BLK + "attn_output.bias"),
    NameRule(LAYER + "mlp.gate_proj.weight", BLK + "ffn_gate.weight"),
    NameRule(LAYER + "mlp.up_proj.weight", BLK + "ffn_up.weight"),
    NameRule(LAYER + "mlp.down_proj.weight", BLK + "ffn_down.weight"),
]
#: the multi-token-prediction (MTP, "nextn") block's own tensors, as the Hub's GLM-4.5,
#: GLM-5, Step-3.5 and MiMo-V2 checkpoints name them in the block's layer
NEXTN_NAMES = layer_rules(
    [
        ("eh_proj", "nextn.eh_proj"),
        ("embed_tokens", "nextn.embed_tokens"),
        ("enorm", "nextn.enorm"),
        ("hnorm", "nextn.hnorm"),
        ("shared_head.head", "nextn.shared_head_head"),
        ("shared_head.norm", "nextn.shared_head_norm"),
    ]
)
QK_NORM = layer_rules([("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm")])
FFN_NORM = layer_rules([("post_attention_layernorm", "ffn_norm")])
GEMMA_NORMS = layer_rules(
    [
        ("post_attention_layernorm", "post_attention_norm"),
        ("pre_feedforward_layernorm", "ffn_norm"),
        ("post_feedforward_layernorm", "post_ffw_norm"),
    ]
)

# --------------------------------------------------------------------------- transforms


def as_reference(x: np.ndarray, widen: bool = False) -> np.ndarray:
    """``x`` as the reference converter holds a tensor it computes on: float32 as it is,
    float16 as it is unless ``widen`` (the reference's own ``.float()``), any other type
    widened to float32 (its loader widens the rest before ``modify_tensors``); contiguous,
    as ``torch.from_numpy`` needs."""
    keep = (np.float32,) if widen else (np.float16, np.float32)
    return np.ascontiguousarray(x if x.dtype in keep else x.astype(np.float32))


def reference_math(
    x: np.ndarray | tuple[np.ndarray, ...],
    with_torch: Callable[..., Any],
    with_numpy: Callable[..., Any],
    *,
    widen: bool = False,
) -> np.ndarray:
    """Values computed from tensors as the reference converter computes them, so the files
    are byte-identical: on the tensors as it holds them (:func:`as_reference`, ``widen``
    as there) and with torch's kernels when torch is importable -- torch's ``exp`` /
    ``sqrt`` are not numpy's in the last bit, and its matmul (``F.linear``) sums in the
    order of the BLAS kernel torch picks for the machine, which no numpy summation order
    reproduces.  Without torch (the plain install), ``with_numpy`` on the same arrays, its
    result in the first one's dtype (torch's rule): equal within rounding, each caller's
    tests say how close.

    ``x`` is one array (an elementwise transform: ``-exp``, ``softplus``) or a tuple (a
    fold of several tensors: a linear layer into an embedding); ``with_torch(torch,
    *tensors)`` and ``with_numpy(*arrays)`` give the same function."""
    xs = tuple(as_reference(a, widen) for a in (x if isinstance(x, tuple) else (x,)))
    try:
        import torch
    except ImportError:
        return np.asarray(with_numpy(*xs), dtype=xs[0].dtype)
    with torch.no_grad():
        return with_torch(torch, *(torch.from_numpy(a) for a in xs)).numpy()


def neg_exp(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    """SSM ``A_log`` -> ``A = -exp(A_log)`` (Mamba, Mamba 2, Jamba, gated DeltaNet)."""
    return reference_math(x, lambda torch, t: -torch.exp(t), lambda a: -np.exp(a))


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
    x = as_reference(x)
    return x + x.dtype.type(1.0)


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
    rp = full_rope(cfg)
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
        import torch
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


# --------------------------------------------------------------------------- KDA layers


def kda_conv_4d(attn: str) -> Transform:
    r"""A KDA layer's ``{q,k,v}_conv1d`` kernel ``[C, 1, K]`` as llama.cpp's ``[1, C, 1, K]``
    (``attn``: the regex of the attention module, e.g. ``r"self_attn\."``)."""
    return Transform(
        "kda_conv_4d",
        attn + r"[qkv]_conv1d\.weight$",
        lambda x, cfg, ctx: x.reshape(1, x.shape[0], 1, x.shape[-1]),
        lambda x, cfg, ctx: x.reshape(x.shape[1], 1, x.shape[-1]),
        shape=lambda s, cfg, ctx: (1, s[0], 1, s[-1]),
        inverse_shape=lambda s, cfg, ctx: (s[1], 1, s[-1]),
    )


def kda_mla_rows(kv_heads: Callable[[dict], list[int]]) -> list:
    """TextModel's rows for a KDA + MLA hybrid: per-layer KV heads (0 KDA, 1 MLA) and the
    MLA's key length (latent rank + rope width) in place."""
    return replace_rows(
        COMMON,
        attention__head_count_kv=m(
            "attention.head_count_kv", "_kv_heads", t=VT.INT32, value=kv_heads
        ),
        attention__key_length=m(
            "attention.key_length",
            "_mla_key_length",
            value=lambda c: c["kv_lora_rank"] + c["qk_rope_head_dim"],
        ),
    )


#: a KDA layer's tensors under ``self_attn.`` (GLM-5-Next's and Kimi Linear's names)
KDA_NAMES = layer_rules(
    [
        ("self_attn.q_conv1d", "ssm_conv1d_q"),
        ("self_attn.k_conv1d", "ssm_conv1d_k"),
        ("self_attn.v_conv1d", "ssm_conv1d_v"),
        ("self_attn.f_a_proj", "ssm_f_a"),
        ("self_attn.f_b_proj", "ssm_f_b"),
        ("self_attn.g_a_proj", "ssm_g_a"),
        ("self_attn.g_b_proj", "ssm_g_b"),
        ("self_attn.b_proj", "ssm_beta"),
        ("self_attn.o_norm", "ssm_norm"),
    ]
)

#: the MLA layers' ranks and lengths of a KDA + MLA hybrid (DeepSeek-V2's spellings)
MLA_ROWS = [
    m("attention.q_lora_rank", "q_lora_rank"),
    m("attention.kv_lora_rank", "kv_lora_rank"),
    m("rope.dimension_count", "qk_rope_head_dim"),
    m(
        "attention.key_length_mla",
        "qk_head_dim",
        value=lambda c: c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
    ),
    m("attention.value_length_mla", "v_head_dim"),
]


#: the DSA (DeepSeek sparse attention) indexer of an attention layer (DeepSeek-V3.2, GLM-5,
#: GLM-5-Next and Dots3 Note spell it alike)
DSA_INDEXER_NAMES = [
    *layer_rules(
        [
            ("self_attn.indexer.wq_b", "indexer.attn_q_b"),
            ("self_attn.indexer.wk", "indexer.attn_k"),
            ("self_attn.indexer.k_norm", "indexer.k_norm"),
            ("self_attn.indexer.weights_proj", "indexer.proj"),
        ]
    ),
    NameRule(LAYER + "self_attn.indexer.k_norm.bias", BLK + "indexer.k_norm.bias"),
]
