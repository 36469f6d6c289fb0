"""GLM-5-Next (GLM-5.3-Flash): conversion/glm.py ``Glm5NextModel`` (GGUF ``glm5-next``),
the text half of ``Glm5NextForConditionalGeneration`` (transformers 5.24 has no text-only
class, so GGUF -> HF of the text alone is not offered: the entry names no model type;
with its projector it converts back as ``Glm5NextForConditionalGeneration``, its text
config from the rows and :func:`_hf_config`).

Layers of two kinds (``layer_types``):

* KDA linear attention (``linear_attention``): ``q/k/v/o_proj``, the short convolutions
  ``{q,k,v}_conv1d`` reshaped ``[C, 1, K]`` -> ``[1, C, 1, K]`` (F32 at every type),
  the forget and output gates' low-rank pairs ``f_a/f_b``, ``g_a/g_b`` (``ssm_f_*`` /
  ``ssm_g_*``), ``b_proj`` (``ssm_beta``), ``A_log`` -> ``-exp`` in float32 over the first
  ``num_attention_heads`` values (``ssm_a``), ``dt_bias`` (``ssm_dt.bias``) and the gated
  ``o_norm`` (``ssm_norm``);
* nope-only MLA with a DSA indexer (``indexed_attention``): DeepSeek-V2's ``kv_b_proj``
  split into ``attn_k_b`` / ``attn_v_b``, the indexer's ``wq_b`` / ``wk`` / ``k_norm`` /
  ``weights_proj`` and its k-pool compressor ``index_kpool_compress_{ape,gate}``
  (``indexer_compressor_*``, F32).

Every layer has mHC hyper-connections (``hc_{attn,ffn}_{fn,base,scale}``, stored
without a ``.weight`` suffix in the checkpoint, written with one, F32 at every type) and
a dense (the first ``first_k_dense_replace``) or sigmoid-routed MoE MLP as GLM-4.5's
(``exp_probs_b`` F32).

Metadata: TextModel's rows with ``attention.head_count_kv`` as a per-layer array (0 on
KDA layers, 1 on MLA ones), then the vocabulary size, a fixed ``layer_norm_epsilon`` of
1e-6, the KDA, MLA, indexer, mHC and MoE rows and ``swiglu_limit`` as per-layer clamps.
The reference reads the Hub's config spelling: ``linear_attn_config`` (a dict) and
``mla_use_nope``, ``first_k_dense_replace`` (transformers' own config.json spells them
``linear_*`` and ``mlp_layer_types``: the reference fails on it, so does this entry, by
name); ``head_dim`` is dropped as the reference pops it.  The MTP block (none in the
tiny models; llama.cpp 0.3.36 has no graph for it) is not converted: its ``eh_proj`` /
``enorm`` / ``hnorm`` have no rule, so such a checkpoint is refused before any output.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    DSA_INDEXER_NAMES,
    FFN_NORM,
    KDA_NAMES,
    LAYER,
    kda_conv_4d,
    neg_exp,
    replace_rows,
)
from ._model import APPENDED_MTP, VT, Arch, NameRule, Transform, m
from .deepseek import DEEPSEEK2

_ATT = LAYER + "self_attn."


def _n_nextn(cfg: dict) -> int:
    return cfg.get("num_nextn_predict_layers") or 0


def _block_count(cfg: dict) -> int:
    return cfg["num_hidden_layers"] + _n_nextn(cfg)


def _layer_types(cfg: dict) -> list[str]:
    n = cfg["num_hidden_layers"]
    return ["linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(n)]


def _indexer_types(cfg: dict) -> list[str]:
    """Glm5NextTextConfig's default: from ``index_topk_pattern``, else the frequency and
    offset schedule."""
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        return (
            [{"F": "full", "S": "shared"}[c] for c in pattern]
            if isinstance(pattern, str)
            else list(pattern)
        )
    freq = max(cfg.get("index_topk_freq", 1), 1)
    offset = cfg.get("index_skip_topk_offset", 2)
    n = cfg["num_hidden_layers"]
    return ["full" if (max(i - offset + 1, 0) % freq) == 0 else "shared" for i in range(n)]


def _kv_heads(cfg: dict) -> list[int]:
    kv = [0 if t == "linear_attention" else 1 for t in cfg["layer_types"]]
    return kv + [1] * (_block_count(cfg) - len(kv))


def _lin(key: str):
    return lambda c: c["linear_attn_config"][key]


def _clamp(cfg: dict) -> list[float] | None:
    limit = cfg.get("swiglu_limit")
    return None if limit is None else [float(limit)] * _block_count(cfg)


_ROWS = [
    *replace_rows(
        COMMON,
        block_count=m("block_count", "num_hidden_layers", value=_block_count),
        expert_count=m("expert_count", "n_routed_experts"),
        attention__head_count_kv=m(
            "attention.head_count_kv",
            "layer_types",
            t=VT.INT32,
            value=_kv_heads,
            inverse=lambda kv: ["indexed_attention" if n else "linear_attention" for n in kv],
        ),
    ),
    m("vocab_size", "vocab_size"),
    m("attention.layer_norm_epsilon", "_eps", t=VT.FLOAT32, value=lambda c: 1e-6),
    m("nextn_predict_layers", "num_nextn_predict_layers", value=lambda c: _n_nextn(c) or None),
    # the dotted fields: GGUF -> HF writes them back into the Hub's dict
    m(
        "ssm.conv_kernel",
        "linear_attn_config.short_conv_kernel_size",
        value=_lin("short_conv_kernel_size"),
    ),
    m("kda.head_dim", "linear_attn_config.head_dim", value=_lin("head_dim")),
    m(
        "kda.gate_lower_bound",
        "linear_attn_config.gate_lower_bound",
        t=VT.FLOAT32,
        value=lambda c: c["linear_attn_config"].get("gate_lower_bound"),
    ),
    m("attention.q_lora_rank", "q_lora_rank"),
    m("attention.kv_lora_rank", "kv_lora_rank"),
    m("rope.dimension_count", "qk_rope_head_dim"),
    m(
        "attention.key_length",
        "kv_lora_rank",
        value=lambda c: c["kv_lora_rank"] + c["qk_rope_head_dim"],
    ),
    m("attention.value_length", "kv_lora_rank"),
    m(
        "attention.key_length_mla",
        "qk_nope_head_dim",
        value=lambda c: c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
    ),
    m("attention.value_length_mla", "v_head_dim"),
    m("attention.indexer.head_count", "index_n_heads"),
    m("attention.indexer.key_length", "index_head_dim"),
    m("attention.indexer.top_k", "index_topk"),
    m("attention.indexer.kpool", "index_kpool"),
    m("attention.indexer.kpool_select_tail", "index_kpool_always_select_tail", t=VT.BOOL),
    m(
        "attention.indexer.types",
        "indexer_types",
        t=VT.BOOL,
        value=lambda c: [t == "full" for t in c["indexer_types"]],
        inverse=lambda flags: ["full" if f else "shared" for f in flags],
    ),
    m("hyper_connection.count", "hc_mult"),
    m("hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters"),
    m("hyper_connection.epsilon", "hc_eps", t=VT.FLOAT32),
    m("leading_dense_block_count", "first_k_dense_replace"),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_count", "n_shared_experts"),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
    m("expert_weights_norm", "norm_topk_prob", t=VT.BOOL),
    m("swiglu_clamp_exp", "swiglu_limit", t=VT.FLOAT32, value=_clamp, inverse=lambda c: c[0]),
    m("swiglu_clamp_shexp", "swiglu_limit", t=VT.FLOAT32, value=_clamp),
]

_HC = [
    NameRule(LAYER + f"hc_{w}_{p}", BLK + f"hc_{w}_{p}.weight")
    for w in ("attn", "ffn")
    for p in ("fn", "base", "scale")
]

_INDEXER = [
    *DSA_INDEXER_NAMES,
    NameRule(_ATT + "indexer.index_kpool_compress_ape", BLK + "indexer_compressor_ape.weight"),
    NameRule(_ATT + "indexer.index_kpool_compress_gate", BLK + "indexer_compressor_gate.weight"),
]
_MLA = [r for r in DEEPSEEK2.names if r.hf.startswith(_ATT)]
_MOE = [r for r in DEEPSEEK2.names if r.hf.startswith(LAYER + "mlp.")]


def _neg_exp_heads(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    """``-exp`` of the first ``num_attention_heads`` values, in float32 (the reference
    casts before its ``exp``)."""
    flat = x.astype(np.float32).reshape(-1)[: cfg["num_attention_heads"]]
    return neg_exp(flat, cfg, ctx)


_TRANSFORMS = [
    kda_conv_4d(r"self_attn\."),
    Transform(
        "kda_a_neg_exp",
        r"self_attn\.A_log$",
        _neg_exp_heads,
        lambda x, cfg, ctx: np.log(-x.astype(np.float32)),
        shape=lambda s, cfg, ctx: (min(int(np.prod(s)), cfg["num_attention_heads"]),),
        exact=False,
    ),
]

#: Glm5NextModel.tensor_force_quant: the mHC and gating parameters stay F32 at every type
_EXACT = re.compile(
    r"^(blk\.\d+\.(hc_attn_|hc_ffn_|indexer_compressor_|ssm_a|ssm_dt|exp_probs_b)|output_hc)"
)


def _force_f32(name: str, dtype: str, ndim: int) -> str | None:
    return "F32" if _EXACT.search(name) else None


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    """The text config's fields GGUF keeps only implied, in the spellings both
    transformers' Glm5NextTextConfig and the reference read: the KDA heads are the
    attention heads (llama.cpp reads ``ssm_a`` per attention head), transformers asserts
    as many KV heads as heads (the MLA's), the dense layers as ``mlp_layer_types`` too."""
    n = cfg["num_hidden_layers"]
    dense = cfg.get("first_k_dense_replace", 0)
    return {
        "linear_attn_config": {**cfg.get("linear_attn_config", {}),
                               "num_heads": cfg["num_attention_heads"]},
        "num_key_value_heads": cfg["num_attention_heads"],
        "mlp_layer_types": ["dense"] * dense + ["sparse"] * (n - dense),
        "mla_use_nope": True,
        # no padding id unless the vocabulary has one (the class default is past a
        # smaller vocabulary); a tokenizer.ggml.padding_token_id row sets it after
        "pad_token_id": None,
    }  # fmt: skip


# Glm5NextTextConfig's defaults that AutoConfig fills in (the reference reads them)
_DEFAULTS: dict[str, Any] = {
    "hc_mult": 4,
    "hc_eps": 1e-6,
    "hc_sinkhorn_iters": 20,
    "index_kpool": 16,
    "index_kpool_always_select_tail": True,
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 32,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "swiglu_limit": 10.0,
    "qk_rope_head_dim": 0,
    "rms_norm_eps": 1e-5,
    "layer_types": _layer_types,
    "indexer_types": _indexer_types,
}

GLM5NEXT_TEXT = Arch(
    hf_archs=("Glm5NextForConditionalGeneration",),
    gguf_arch="glm5-next",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        *_HC,
        *KDA_NAMES,
        NameRule(_ATT + "A_log", BLK + "ssm_a"),
        NameRule(_ATT + "dt_bias", BLK + "ssm_dt.bias"),
        *_INDEXER,
        *_MLA,
        *_MOE,
    ],
    transforms=_TRANSFORMS,
    stacks=DEEPSEEK2.stacks,
    splits=DEEPSEEK2.splits,
    source_type=_force_f32,
    defaults=_DEFAULTS,
    present=("linear_attn_config",),
    ignored=("head_dim",),
    # the reference asserts a nope-only MLA
    fixed={"mla_use_nope": True, "qk_rope_head_dim": 0},
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_nope_head_dim",
        "v_head_dim",
        "moe_intermediate_size",
        "n_routed_experts",
    ),
    tokenizer={"vocab": "glm"},
    hf_config=_hf_config,
    mtp=APPENDED_MTP,
)
