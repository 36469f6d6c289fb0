"""Qwen2, Qwen3 and their MoE variants: conversion/qwen.py.

Qwen2-MoE and Qwen3-MoE experts come per expert (the Hub layout: llama.cpp stacks a
layer's ``down``, ``gate``, ``up`` when the last of them is read) or already fused
(``mlp.experts.gate_up_proj`` ``[n_expert, 2 * n_ff, n_embd]``, split in two halves,
and ``mlp.experts.down_proj``).
"""

from __future__ import annotations

from ._common import BASE_NAMES, BLK, COMMON, FFN_NORM, LAYER, QK_NORM, expert_stacks
from ._model import Arch, NameRule, Split, first, m


def _n_experts(cfg: dict) -> int:
    return first(cfg, ("num_local_experts", "num_experts"))


_EXP = LAYER + "mlp.experts."
_MOE_NAMES = [
    NameRule(LAYER + "mlp.gate.weight", BLK + "ffn_gate_inp.weight"),
    NameRule(LAYER + "mlp.shared_expert_gate.weight", BLK + "ffn_gate_inp_shexp.weight"),
    NameRule(LAYER + "mlp.shared_expert.gate_proj.weight", BLK + "ffn_gate_shexp.weight"),
    NameRule(LAYER + "mlp.shared_expert.up_proj.weight", BLK + "ffn_up_shexp.weight"),
    NameRule(LAYER + "mlp.shared_expert.down_proj.weight", BLK + "ffn_down_shexp.weight"),
    NameRule(_EXP + "down_proj", BLK + "ffn_down_exps.weight"),  # fused checkpoints
]
_MOE_STACKS = expert_stacks(_n_experts)
_MOE_SPLITS = [
    Split(_EXP + "gate_up_proj", (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"), -2)
]
# Qwen2MoeModel.set_gguf_parameters
_MOE_ROWS = [
    *COMMON,
    # the same key again, in place: GGUF -> HF writes the Qwen-MoE config field
    m("expert_count", "num_experts", value=_n_experts),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_feed_forward_length", "shared_expert_intermediate_size"),
]
_SILU = {"hidden_act": "silu"}

QWEN2 = Arch(
    # the text halves of Qwen2-Audio and Audio Flamingo 3 (their audio towers are the
    # projector's: whisper_audio.py)
    hf_archs=(
        "Qwen2ForCausalLM",
        "Qwen2AudioForConditionalGeneration",
        "AudioFlamingo3ForConditionalGeneration",
    ),
    gguf_arch="qwen2",
    meta=list(COMMON),
    names=[*BASE_NAMES, *FFN_NORM],
    tokenizer={"vocab": "spm_or_gpt2"},
    model_types={"Qwen2ForCausalLM": "qwen2"},
    hf_config=lambda cfg, names: _SILU,
)
QWEN3 = Arch(
    hf_archs=("Qwen3ForCausalLM",),
    gguf_arch="qwen3",
    meta=list(COMMON),
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM],
    tokenizer={"vocab": "spm_or_gpt2"},
    model_types={"Qwen3ForCausalLM": "qwen3"},
    hf_config=lambda cfg, names: _SILU,
)
QWEN2MOE = Arch(
    hf_archs=("Qwen2MoeForCausalLM",),
    gguf_arch="qwen2moe",
    meta=_MOE_ROWS,
    names=[*BASE_NAMES, *FFN_NORM, *_MOE_NAMES],
    stacks=_MOE_STACKS,
    splits=_MOE_SPLITS,
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"Qwen2MoeForCausalLM": "qwen2_moe"},
    hf_config=lambda cfg, names: {
        **_SILU,
        "qkv_bias": "blk.0.attn_q.bias" in names,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
)
QWEN3MOE = Arch(
    hf_archs=("Qwen3MoeForCausalLM",),
    gguf_arch="qwen3moe",
    meta=_MOE_ROWS,
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM, *_MOE_NAMES],
    stacks=_MOE_STACKS,
    splits=_MOE_SPLITS,
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"Qwen3MoeForCausalLM": "qwen3_moe"},
    hf_config=lambda cfg, names: {
        **_SILU,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    },
)
