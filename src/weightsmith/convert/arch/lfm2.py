"""LFM2: gated short-convolution layers mixed with attention layers (conversion/lfm2.py).

``layer_types`` says which layers are ``conv`` and which ``full_attention``; llama.cpp
reads it as a per-layer ``attention.head_count_kv`` array (0 for a conv layer, written
INT32 as gguf-py infers it from Python ints).  The conv weight ``[C, 1, L]`` is
squeezed to ``[C, L]`` (kept F32, as every type keeps it); the feed-forward width is
the one the model class derives (``block_auto_adjust_ff_dim``: 2/3, times the
multiplier, rounded up to ``block_multiple_of``).  The final norm is
``embedding_norm``.  GGUF -> HF writes ``layer_types`` back from the array and the
derived width with ``block_auto_adjust_ff_dim = False``.

LFM2-MoE (conversion/lfm2.py's ``LFM2MoeModel``): the same layers, a dense lead
(``num_dense_layers``), then sigmoid-routed experts with a routing bias
(``expert_bias`` -> ``exp_probs_b.bias``); the Hub's per-expert ``w1``/``w2``/``w3`` are
stacked per layer, emitted in that order when the layer's last expert is read.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._common import BLK, COMMON, LAYER, layer_rules
from ._model import VT, Arch, NameRule, Stack, Transform, first, head_counts, m


def _ff_dim(cfg: dict) -> int:
    ff = cfg.get("block_ff_dim", cfg["intermediate_size"])
    if cfg.get("block_auto_adjust_ff_dim"):
        ff = int(2 * ff / 3)
        mult = cfg.get("block_ffn_dim_multiplier")
        if mult is not None:
            ff = int(mult * ff)
        k = cfg["block_multiple_of"]
        ff = k * ((ff + k - 1) // k)
    return ff


def _kv_per_layer(cfg: dict) -> list[int]:
    n_kv = head_counts(cfg)[1]
    return [n_kv if t != "conv" else 0 for t in cfg["layer_types"]]


def _squeeze(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return x.reshape(x.shape[0], x.shape[-1])


CONV_SQUEEZE = Transform(
    "shortconv_squeeze",
    r"conv\.conv\.weight$",
    _squeeze,
    lambda x, cfg, ctx: x.reshape(x.shape[0], 1, x.shape[-1]),
    shape=lambda s, cfg, ctx: (s[0], s[-1]),
    inverse_shape=lambda s, cfg, ctx: (s[0], 1, s[-1]),
)


def _hf_config(cfg: dict, names: set[str]) -> dict:
    kv = cfg.get("num_key_value_heads")
    kv = list(kv) if isinstance(kv, (list, tuple)) or hasattr(kv, "tolist") else [kv]
    kv = [int(x) for x in kv]
    return {
        "layer_types": ["conv" if n == 0 else "full_attention" for n in kv],
        "num_key_value_heads": max(kv),
        "norm_eps": cfg.get("rms_norm_eps"),
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.get("rope_theta")},
        "block_auto_adjust_ff_dim": False,
        "conv_bias": "blk.0.shortconv.conv.bias" in names,
        "full_attn_idxs": None,
    }


_NAMES = [
    NameRule("model.embed_tokens.weight", "token_embd.weight"),
    NameRule("model.embedding_norm.weight", "token_embd_norm.weight"),
    NameRule("lm_head.weight", "output.weight"),
    *layer_rules(
        [
            ("operator_norm", "attn_norm"),
            ("ffn_norm", "ffn_norm"),
            ("conv.in_proj", "shortconv.in_proj"),
            ("conv.out_proj", "shortconv.out_proj"),
            ("conv.conv", "shortconv.conv"),
            ("feed_forward.w1", "ffn_gate"),
            ("feed_forward.w2", "ffn_down"),
            ("feed_forward.w3", "ffn_up"),
            ("self_attn.q_layernorm", "attn_q_norm"),
            ("self_attn.k_layernorm", "attn_k_norm"),
            ("self_attn.q_proj", "attn_q"),
            ("self_attn.k_proj", "attn_k"),
            ("self_attn.v_proj", "attn_v"),
            ("self_attn.out_proj", "attn_output"),
        ]
    ),
    NameRule(LAYER + "conv.conv.bias", BLK + "shortconv.conv.bias"),
]


LFM2 = Arch(
    hf_archs=("Lfm2ForCausalLM", "LFM2ForCausalLM"),
    gguf_arch="lfm2",
    meta=[
        *COMMON,
        m("vocab_size", "vocab_size"),
        m("shortconv.l_cache", "conv_L_cache"),
        # LFM2Model re-sets these two after the base rows: same place, its values
        m("attention.head_count_kv", "num_key_value_heads", t=VT.INT32, value=_kv_per_layer),
        m("feed_forward_length", "intermediate_size", value=_ff_dim),
    ],
    names=_NAMES,
    transforms=[CONV_SQUEEZE],
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "intermediate_size",
        "vocab_size",
        "conv_L_cache",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"Lfm2ForCausalLM": "lfm2"},
    hf_config=_hf_config,
    # LFM2Model.filter_tensors: LFM2-Audio's text is under ``lfm.``
    renames=((r"^lfm\.", "model."),),
)


def _n_experts(cfg: dict) -> int:
    return first(cfg, ("num_experts", "num_local_experts"))


def _moe_kv(cfg: dict) -> list[int]:
    n_kv = head_counts(cfg)[1]
    return [n_kv if t == "full_attention" else 0 for t in cfg["layer_types"]]


def _moe_hf_config(cfg: dict, names: set[str]) -> dict:
    out = _hf_config(cfg, names)
    for k in ("block_auto_adjust_ff_dim", "full_attn_idxs"):  # not LFM2-MoE fields
        del out[k]
    out["use_expert_bias"] = any(n.endswith("exp_probs_b.bias") for n in names)
    return out


_FF = LAYER + "feed_forward."

LFM2MOE = Arch(
    hf_archs=("Lfm2MoeForCausalLM",),
    gguf_arch="lfm2moe",
    meta=[
        *COMMON,
        m("attention.head_count_kv", "num_key_value_heads", t=VT.INT32, value=_moe_kv),
        # the same key again, in place: GGUF -> HF writes LFM2-MoE's config field
        m("expert_count", "num_experts", value=_n_experts),
        m("expert_feed_forward_length", "moe_intermediate_size"),
        m("leading_dense_block_count", "num_dense_layers"),
        m("expert_gating_func", "_gating", value=lambda cfg: 2),  # sigmoid
        m("vocab_size", "vocab_size"),
        m("shortconv.l_cache", "conv_L_cache"),
    ],
    names=[
        *_NAMES,
        NameRule(_FF + "gate.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(_FF + "expert_bias", BLK + "exp_probs_b.bias"),
    ],
    stacks=[
        Stack(_FF + "experts.{xid}." + w + ".weight", BLK + f"ffn_{g}_exps.weight", _n_experts)
        for w, g in (("w1", "gate"), ("w2", "down"), ("w3", "up"))
    ],
    transforms=[CONV_SQUEEZE],
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "conv_L_cache",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"Lfm2MoeForCausalLM": "lfm2_moe"},
    hf_config=_moe_hf_config,
)


def _colbert_hf_config(cfg: dict, names: set[str]) -> dict:
    return {k: v for k, v in _hf_config(cfg, names).items() if k != "full_attn_idxs"}


#: LFM2-ColBERT (conversion/lfm2.py's ``LFM2ColBertModel`` for ``Lfm2Model``): the LFM2
#: trunk saved without its ``model.`` prefix, no pooling module (late interaction: one
#: vector per token), and PyLate's ``1_Dense`` projection read from
#: ``1_Dense/model.safetensors`` whatever ``modules.json`` says, written first as
#: ``dense_2.weight`` with its output width as ``embedding_length_out`` (a row the
#: reference adds while it prepares the tensors, so before ``general.type``)
LFM2_COLBERT = replace(
    LFM2,
    hf_archs=("Lfm2Model",),
    meta=[*LFM2.meta, m("pooling_type", "_pooling_type", value=lambda c: c.get("_pooling_type"))],
    early_meta=[m("embedding_length_out", "_dense_out", value=lambda c: c.get("_dense_out"))],
    names=[*_NAMES, NameRule("dense_2.weight", "dense_2.weight")],
    # the reference prefixes every name but the Dense head's with ``model.`` (the Hub's
    # are unprefixed); a name already prefixed is taken as it is
    renames=((r"^(embed_tokens|embedding_norm|layers)\.", r"model.\1."),),
    pooling=True,
    dense=("dense_2.weight",),
    dense_file="1_Dense",
    model_types={"Lfm2Model": "lfm2"},
    hf_config=_colbert_hf_config,
)

#: LFM2.5-Embedding (``Lfm2BidirectionalModel``, the Hub's remote code): the same
#: conversion plus ``attention.causal = false`` (llama.cpp then runs attention
#: bidirectionally and centres the short convolutions) and the pooling type.  GGUF -> HF
#: is refused by name: transformers 5.24 has no bidirectional LFM2 class.
LFM2_BIDIRECTIONAL = replace(
    LFM2_COLBERT,
    hf_archs=("Lfm2BidirectionalModel",),
    meta=[
        *LFM2.meta,
        m("attention.causal", "_causal", t=VT.BOOL, value=lambda c: False),
        m("pooling_type", "_pooling_type", value=lambda c: c.get("_pooling_type")),
    ],
    model_types={},
)


def is_colbert_file(md) -> bool:
    """An ``lfm2`` GGUF of LFM2-ColBERT (its Dense head's width) rather than LFM2's."""
    return "lfm2.embedding_length_out" in md and md.get("lfm2.attention.causal", True)


def is_bidirectional_file(md) -> bool:
    """An ``lfm2`` GGUF run bidirectionally (LFM2.5-Embedding)."""
    return md.get("lfm2.attention.causal") is False
