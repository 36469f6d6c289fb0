"""MiniMax-Text-01 / MiniMax-M1: conversion/minimax.py ``MiniMaxText01Model`` (GGUF
``minimax-01``), read from the Hub's checkpoint layout.

Layers of two kinds.  Lightning (linear) attention: the fused ``self_attn.qkv_proj``
(``attn_qkv``), the output gate ``output_gate`` (``attn_gate``), the gated RMS norm
``norm`` (``attn_norm_2``) and ``out_proj`` (``attn_output``); softmax attention:
``q/k/v/o_proj`` with NeoX RoPE over ``rotary_dim`` (no Q/K permutation: the reference
writes them as stored).  Every layer's MLP is a softmax-routed MoE: per-expert
``block_sparse_moe.experts.N.w1/w2/w3`` stacked into ``ffn_gate/down/up_exps``,
``block_sparse_moe.gate`` (``ffn_gate_inp``).

Metadata: TextModel's rows, then ``residual_scale`` (the layer norms' common alpha) and
``rope.dimension_count`` (``rotary_dim``).  The reference writes no layer kinds:
llama.cpp's graph takes every 8th layer as softmax attention (its default
``full_attention_interval``), so a checkpoint of another pattern converts as the
reference converts it and runs wrong in llama.cpp (as the reference's file does).  The
reference reads the Hub's config spellings (``layernorm_{full_attention,
linear_attention,mlp}_{alpha,beta}``, ``rotary_dim``), which transformers 5.24's
``minimax`` config renames (``*_alpha_factor`` / ``*_beta_factor``, no ``rotary_dim``):
a config without them is refused before any output, by name; so is one whose alphas
differ or whose betas are not 1 (the reference asserts both).  Transformers also saves
the lightning layers' decay tables (``slope_rate``, ``*_decay``) as tensors: the Hub's
checkpoint has none and the reference cannot map them (refused as unmapped).

Not converted: the suppressed tokens (the reference lists the embedding rows past the
tokenizer's vocabulary that are all zero, ``tokenizer.ggml.suppress_tokens``; the tiny
test models have none, and ours writes none) and the reference's fallback chat template
(its own tree's ``MiniMax-M1.jinja`` when the folder has no ``chat_template.jinja``;
ours writes the folder's template only).
"""

from __future__ import annotations

from typing import Any

from ._common import BASE_NAMES, BLK, COMMON, FFN_NORM, LAYER, layer_rules
from ._model import VT, Arch, Stack, m

_MOE = LAYER + "block_sparse_moe."

_ALPHAS = tuple(f"layernorm_{k}_alpha" for k in ("full_attention", "linear_attention", "mlp"))
_BETAS = tuple(f"layernorm_{k}_beta" for k in ("full_attention", "linear_attention", "mlp"))

_ROWS = [
    *COMMON,
    m("residual_scale", "layernorm_full_attention_alpha", t=VT.FLOAT32),
    m("rope.dimension_count", "rotary_dim"),
]


def _check(cfg: dict) -> tuple[str, Any, Any] | None:
    """MiniMaxText01Model's asserts: one alpha for every norm, every beta 1."""
    alphas = [cfg[k] for k in _ALPHAS]
    if len(set(alphas)) != 1:
        return "layernorm_*_alpha", "one value for all three", alphas
    betas = [cfg[k] for k in _BETAS]
    if any(b != 1.0 for b in betas):
        return "layernorm_*_beta", "1.0 for all three", betas
    return None


MINIMAX01 = Arch(
    hf_archs=("MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM"),
    gguf_arch="minimax-01",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        *layer_rules(
            [
                ("self_attn.qkv_proj", "attn_qkv"),
                ("self_attn.output_gate", "attn_gate"),
                ("self_attn.norm", "attn_norm_2"),
                ("self_attn.out_proj", "attn_output"),
                ("block_sparse_moe.gate", "ffn_gate_inp"),
            ]
        ),
    ],
    stacks=[
        Stack(
            _MOE + "experts.{xid}." + w + ".weight",
            BLK + f"ffn_{g}_exps.weight",
            lambda c: c["num_local_experts"],
        )
        for w, g in (("w1", "gate"), ("w2", "down"), ("w3", "up"))
    ],
    check=_check,
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "num_local_experts",
        "rotary_dim",
    ),
    present=(*_ALPHAS, *_BETAS),
    tokenizer={"vocab": "gpt2"},
)
