"""DeepSeek-V2 / V3: conversion/deepseek.py ``DeepseekV2Model`` (GGUF ``deepseek2``).

Multi-head latent attention: llama.cpp writes the model as MQA (``head_count_kv`` 1)
and splits each ``kv_b_proj`` ``[n_head * (nope + v), kv_lora_rank]`` per head into
``attn_k_b`` ``[n_head, kv_lora_rank, nope]`` (the key part, transposed) and
``attn_v_b`` ``[n_head, v, kv_lora_rank]``.  Experts are stacked per layer (``down``,
``gate``, ``up`` once the last is read); the first ``first_k_dense_replace`` layers
have a dense MLP; V3's sigmoid router adds ``exp_probs_b``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._common import BASE_NAMES, BLK, COMMON, FFN_NORM, LAYER, expert_stacks, replace_rows
from ._model import FILE_TYPE, VT, Arch, MetaKey, NameRule, Split, full_rope, m
from ._text_config import TOP_ARCHITECTURES


def _kv_heads(cfg: dict) -> int:
    return cfg.get("num_key_value_heads") or cfg["num_attention_heads"]


def _kv_b(x: np.ndarray, cfg: dict) -> list[np.ndarray]:
    nope, v = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    kv = x.reshape(_kv_heads(cfg), nope + v, x.shape[-1])
    return [kv[:, :nope, :].transpose(0, 2, 1), kv[:, nope:, :]]


def _kv_b_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    n, nope, v = _kv_heads(cfg), cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    return [(n, shape[-1], nope), (n, v, shape[-1])]


def _kv_b_join(parts: list[np.ndarray], cfg: dict) -> np.ndarray:
    k, v = parts
    kv = np.concatenate([k.transpose(0, 2, 1), v], axis=1)
    return kv.reshape(-1, kv.shape[-1])


def _n_routed(cfg: dict) -> int:
    return cfg["n_routed_experts"]


def _leading_dense(cfg: dict) -> int:
    k = cfg.get("first_k_dense_replace")
    if k is None:
        return cfg["num_hidden_layers"] if cfg.get("n_routed_experts") is None else 0
    return k


def _yarn_log_mul(cfg: dict):
    ms = full_rope(cfg).get("mscale_all_dim")
    return None if ms is None else 0.1 * ms


_ATT = LAYER + "self_attn."


def _head_dim(cfg: dict):
    # AutoConfig's DeepseekV2/V3Config set head_dim = qk_rope_head_dim when config.json
    # (the Hub's V3 one) has none; the reference reads the filled config
    return cfg.get("head_dim", cfg.get("qk_rope_head_dim"))


# DeepseekV2Model's expert rows and the rope width, in its order (the OCR text's too)
_MOE_ROWS = [
    m(
        "expert_feed_forward_length",
        "moe_intermediate_size",
        value=lambda c: c.get("moe_intermediate_size", c.get("intermediate_size")),
    ),
    m("expert_count", "n_routed_experts"),
    m("expert_shared_count", "n_shared_experts", value=lambda c: c.get("n_shared_experts", 0)),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
    m(
        "expert_weights_norm",
        "norm_topk_prob",
        t=VT.BOOL,
        value=lambda c: True if c.get("norm_topk_prob") else None,
    ),
    m("rope.dimension_count", "qk_rope_head_dim"),
]

# COMMON with MLA's MQA head count, the eps default and AutoConfig's head_dim (the MLA
# key/value lengths below replace its value in place), then DeepseekV2Model's rows
_ROWS = [
    *replace_rows(
        COMMON,
        attention__head_count_kv=m(
            "attention.head_count_kv", "num_key_value_heads", value=lambda c: 1
        ),
        attention__layer_norm_rms_epsilon=m(
            "attention.layer_norm_rms_epsilon",
            "rms_norm_eps",
            t=VT.FLOAT32,
            value=lambda c: c.get("rms_norm_eps", 1e-6),
        ),
        attention__key_length=m("attention.key_length", "head_dim", value=_head_dim),
        attention__value_length=m("attention.value_length", "head_dim", value=_head_dim),
    ),
    m("leading_dense_block_count", "first_k_dense_replace", value=_leading_dense),
    m("vocab_size", "vocab_size"),
    m("attention.q_lora_rank", "q_lora_rank"),
    m("attention.kv_lora_rank", "kv_lora_rank", value=lambda c: c.get("kv_lora_rank", 512)),
    m(
        "attention.key_length",
        "_mla_key_length",
        value=lambda c: c.get("kv_lora_rank", 512) + c["qk_rope_head_dim"],
    ),
    m("attention.value_length", "_mla_value_length", value=lambda c: c.get("kv_lora_rank", 512)),
    m(
        "attention.key_length_mla",
        "qk_head_dim",
        value=lambda c: c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
    ),
    m("attention.value_length_mla", "v_head_dim"),
    *_MOE_ROWS,
    m(
        "rope.scaling.yarn_log_multiplier",
        "_yarn_log_multiplier",
        t=VT.FLOAT32,
        value=_yarn_log_mul,
    ),
]
assert FILE_TYPE in _ROWS

DEEPSEEK2 = Arch(
    # Kimi-K2.5's and Kimi-VL's text halves are DeepSeek-V3 (their towers are not read here)
    hf_archs=(
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "KimiVLForConditionalGeneration",
    ),
    gguf_arch="deepseek2",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        NameRule(_ATT + "q_a_proj.weight", BLK + "attn_q_a.weight"),
        NameRule(_ATT + "q_a_layernorm.weight", BLK + "attn_q_a_norm.weight"),
        NameRule(_ATT + "q_b_proj.weight", BLK + "attn_q_b.weight"),
        NameRule(_ATT + "kv_a_proj_with_mqa.weight", BLK + "attn_kv_a_mqa.weight"),
        NameRule(_ATT + "kv_a_layernorm.weight", BLK + "attn_kv_a_norm.weight"),
        NameRule(LAYER + "mlp.gate.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(LAYER + "mlp.gate.e_score_correction_bias", BLK + "exp_probs_b.bias"),
        NameRule(LAYER + "mlp.shared_experts.gate_proj.weight", BLK + "ffn_gate_shexp.weight"),
        NameRule(LAYER + "mlp.shared_experts.up_proj.weight", BLK + "ffn_up_shexp.weight"),
        NameRule(LAYER + "mlp.shared_experts.down_proj.weight", BLK + "ffn_down_shexp.weight"),
    ],
    stacks=expert_stacks(_n_routed),
    splits=[
        Split(
            _ATT + "kv_b_proj.weight",
            (BLK + "attn_k_b.weight", BLK + "attn_v_b.weight"),
            fn=_kv_b,
            shapes=_kv_b_shapes,
            join=_kv_b_join,
        ),
    ],
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "qk_rope_head_dim",
        "v_head_dim",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3"},
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "num_key_value_heads": cfg["num_attention_heads"],
        # the GGUF keeps nope + rope (key_length_mla) and rope (rope.dimension_count)
        "qk_nope_head_dim": cfg["qk_head_dim"] - cfg["qk_rope_head_dim"],
        "head_dim": cfg["qk_rope_head_dim"],
    },
)


#: the top-level classes whose DeepSeek-V2 text is ``deepseek2-ocr`` (DeepseekV2Model's
#: ``origin_hf_arch`` test)
OCR_ARCHS = ("DeepseekOCRForCausalLM", "DeepseekOCR2ForCausalLM", "UnlimitedOCRForCausalLM")


def is_ocr(cfg: dict) -> bool:
    """A DeepSeek-OCR checkpoint: its config.json's top-level class is an OCR one (the
    text class, from ``language_config``, is DeepSeek-V2's)."""
    top = cfg.get(TOP_ARCHITECTURES) or []
    return bool(top) and top[0] in OCR_ARCHS


def _sliding_window(cfg: dict):
    # Unlimited-OCR's window, written for the record (llama.cpp's decoder ignores it)
    return cfg.get("sliding_window_size") or cfg.get("sliding_window") or None


# DeepseekV2Model for the OCR checkpoints: plain multi-head attention (no MLA: no latent
# rows, real KV heads, q/k/v/o projections as they are), the rest as DeepSeek-V2's; the
# rope dimension row is qk_rope_head_dim as given (0 on the Hub's: llama.cpp's OCR graph
# ropes the whole head), the default chat template written with the architecture.  No
# HF class of its own (transformers' DeepSeek-V2 is MLA only): GGUF -> HF refuses it
_OCR_ROWS = [
    *replace_rows(
        COMMON,
        attention__layer_norm_rms_epsilon=m(
            "attention.layer_norm_rms_epsilon",
            "rms_norm_eps",
            t=VT.FLOAT32,
            value=lambda c: c.get("rms_norm_eps", 1e-6),
        ),
    ),
    m("leading_dense_block_count", "first_k_dense_replace", value=_leading_dense),
    m("vocab_size", "vocab_size"),
    m("attention.q_lora_rank", "q_lora_rank"),
    *_MOE_ROWS,
    m("attention.sliding_window", "sliding_window_size", "sliding_window", value=_sliding_window),
    m(
        "rope.scaling.yarn_log_multiplier",
        "_yarn_log_multiplier",
        t=VT.FLOAT32,
        value=_yarn_log_mul,
    ),
]
assert FILE_TYPE in _OCR_ROWS

DEEPSEEK2OCR = replace(
    DEEPSEEK2,
    # the reference's text classes of these names (DeepSeek-OCR-2's is not one: its text
    # converts only through language_config's DeepSeek-V2 class, see VARIANTS)
    hf_archs=("DeepseekOCRForCausalLM", "UnlimitedOCRForCausalLM"),
    gguf_arch="deepseek2-ocr",
    meta=_OCR_ROWS,
    early_meta=[
        MetaKey(
            "tokenizer.chat_template",
            (),
            VT.STRING,
            lambda c: "{% for m in messages %}{{m['content']}}{% endfor %}",
            absolute=True,
        )
    ],
    splits=[],
    # the vision towers (DeepseekV2Model.filter_tensors); the projector and the view
    # separator are other-modality names already
    skip=(*DEEPSEEK2.skip, r"(^|\.)sam_model\.", r"(^|\.)qwen2_model\."),
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    model_types={},
    hf_config=lambda cfg, names: {},
)
