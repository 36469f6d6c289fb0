"""OLMo 2: conversion/olmo.py ``Olmo2Model`` (no RoPE permutation, norms after the
attention and the MLP, Q/K norms over all heads)."""

from __future__ import annotations

from ._common import BASE_NAMES, COMMON, QK_NORM, layer_rules
from ._model import Arch, m

OLMO2 = Arch(
    hf_archs=("Olmo2ForCausalLM",),
    gguf_arch="olmo2",
    meta=[*COMMON, m("attention.sliding_window", "sliding_window")],
    names=[
        *BASE_NAMES,
        *QK_NORM,
        *layer_rules(
            [
                ("post_attention_layernorm", "post_attention_norm"),
                ("post_feedforward_layernorm", "post_ffw_norm"),
            ]
        ),
    ],
    tokenizer={"vocab": "gpt2"},
    model_types={"Olmo2ForCausalLM": "olmo2"},
    hf_config=lambda cfg, names: {"hidden_act": "silu", "attention_bias": False},
)
