"""Kimi Linear: conversion/kimi_linear.py ``KimiLinearModel`` (GGUF ``kimi-linear``), read
from the Hub's checkpoint layout, which transformers 5.24's ``kimi_linear`` loads (and
saves, but for a dense layer's MLP: see tests/support/hf_models.py ``kimi_linear``).

Layers of two kinds, named by ``linear_attn_config.full_attn_layers`` (1-based):

* KDA linear attention: ``self_attn.q/k/v/o_proj``, the short convolutions
  ``{q,k,v}_conv1d`` reshaped ``[C, 1, K]`` -> ``[1, C, 1, K]``, the forget and output
  gates' low-rank pairs ``f_a/f_b``, ``g_a/g_b`` (``ssm_f_*`` / ``ssm_g_*``), ``b_proj``
  (``ssm_beta``), ``A_log`` -> ``-exp`` kept in its stored 4-D shape (``ssm_a``),
  ``dt_bias`` (``ssm_dt.bias``) and the gated ``o_norm`` (``ssm_norm``) -- GLM-5-Next's
  KDA names;
* NoPE MLA as DeepSeek-V2's (``kv_b_proj`` split into ``attn_k_b`` / ``attn_v_b`` per KV
  head of the config).

The MLP is dense (``mlp.*``) for the first ``first_k_dense_replace`` layers, then a
sigmoid-routed MoE under ``block_sparse_moe`` (per-expert ``w1/w2/w3`` stacked into
``ffn_gate/down/up_exps``, ``e_score_correction_bias`` -> ``exp_probs_b.bias``, a shared
expert).

Metadata: TextModel's rows with ``attention.head_count_kv`` as a per-layer array (0 on
KDA layers, 1 on MLA ones: the reference's MQA rewrite) and ``attention.key_length`` the
MLA's ``kv_lora_rank + qk_rope_head_dim`` in TextModel's place, then the vocabulary
size, the KDA rows (from ``linear_attn_config``), the MLA rows and the MoE rows.  The
reference reads the Hub's spellings (``linear_attn_config``, ``first_k_dense_replace``),
which transformers 5.24's config class folds into its own fields: a config without them
is refused before any output, by name (``required`` / ``present``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import (
    BASE_NAMES,
    BLK,
    FFN_NORM,
    KDA_NAMES,
    LAYER,
    MLA_ROWS,
    kda_conv_4d,
    kda_mla_rows,
    layer_rules,
    neg_exp,
)
from ._model import VT, Arch, NameRule, Stack, Transform, m
from .deepseek import DEEPSEEK2

_ATT = LAYER + "self_attn."
_MOE = LAYER + "block_sparse_moe."


def _kv_heads(cfg: dict) -> list[int]:
    full = cfg["linear_attn_config"]["full_attn_layers"]
    return [1 if i + 1 in full else 0 for i in range(cfg["num_hidden_layers"])]


def _lin(key: str):
    return lambda c: c["linear_attn_config"].get(key)


def _n_experts(cfg: dict) -> int:
    return cfg.get("num_local_experts") or cfg["num_experts"]


_ROWS = [
    *kda_mla_rows(_kv_heads),
    m("vocab_size", "vocab_size"),
    # the dotted fields: GGUF -> HF writes them back into the Hub's dict
    m(
        "ssm.conv_kernel",
        "linear_attn_config.short_conv_kernel_size",
        value=_lin("short_conv_kernel_size"),
    ),
    m("kda.head_dim", "linear_attn_config.head_dim", value=_lin("head_dim")),
    *MLA_ROWS,
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_count", "num_shared_experts"),
    m("leading_dense_block_count", "first_k_dense_replace"),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
]

_NAMES = [
    *BASE_NAMES,
    *FFN_NORM,
    *KDA_NAMES,
    *layer_rules(
        [
            ("block_sparse_moe.gate", "ffn_gate_inp"),
            ("block_sparse_moe.shared_experts.gate_proj", "ffn_gate_shexp"),
            ("block_sparse_moe.shared_experts.up_proj", "ffn_up_shexp"),
            ("block_sparse_moe.shared_experts.down_proj", "ffn_down_shexp"),
        ]
    ),
    NameRule(_ATT + "A_log", BLK + "ssm_a"),
    NameRule(_ATT + "dt_bias", BLK + "ssm_dt.bias"),
    *[r for r in DEEPSEEK2.names if r.hf.startswith(_ATT)],
    NameRule(_MOE + "gate.e_score_correction_bias", BLK + "exp_probs_b.bias"),
]


_TRANSFORMS = [
    kda_conv_4d(r"self_attn\."),
    Transform(
        "kda_a_neg_exp",
        r"self_attn\.A_log$",
        neg_exp,
        lambda x, cfg, ctx: np.log(-x.astype(np.float32)),
        exact=False,
    ),
]


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    """What GGUF keeps only implied, in the Hub's spellings (transformers' KimiLinearConfig
    reads them too): the layer kinds from the per-layer KV heads, the KDA head count (the
    attention heads: llama.cpp reads no other), the MLA's KV heads (as many as heads) and
    its nope width (the GGUF keeps nope + rope)."""
    kinds = cfg["_kv_heads"]
    return {
        "linear_attn_config": {
            **cfg.get("linear_attn_config", {}),
            "full_attn_layers": [i + 1 for i, n in enumerate(kinds) if n],
            "kda_layers": [i + 1 for i, n in enumerate(kinds) if not n],
            "num_heads": cfg["num_attention_heads"],
        },
        "num_key_value_heads": cfg["num_attention_heads"],
        "qk_nope_head_dim": cfg["qk_head_dim"] - cfg["qk_rope_head_dim"],
        "pad_token_id": None,
    }


KIMI_LINEAR = Arch(
    hf_archs=("KimiLinearForCausalLM",),
    gguf_arch="kimi-linear",
    meta=_ROWS,
    names=_NAMES,
    transforms=_TRANSFORMS,
    stacks=[
        Stack(_MOE + "experts.{xid}." + w + ".weight", BLK + f"ffn_{g}_exps.weight", _n_experts)
        for w, g in (("w1", "gate"), ("w2", "down"), ("w3", "up"))
    ],
    splits=DEEPSEEK2.splits,
    # read by the reference, named back by no GGUF row as such (hf_config derives them)
    present=("linear_attn_config", "routed_scaling_factor", "qk_nope_head_dim"),
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "v_head_dim",
        "moe_intermediate_size",
        "num_shared_experts",
        "first_k_dense_replace",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"KimiLinearForCausalLM": "kimi_linear"},
    hf_config=_hf_config,
)
