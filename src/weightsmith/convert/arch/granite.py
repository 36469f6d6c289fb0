"""Granite and GraniteMoE: conversion/granite.py (``LlamaModel`` subclasses).

Granite drops ``head_dim`` and adds its four multipliers.  GraniteMoE keeps each
layer's experts fused: ``input_linear`` ``[n_expert, 2 * n_ff, n_embd]`` splits into
gate and up halves, ``output_linear`` is the down projection.
"""

from __future__ import annotations

from ._common import BASE_NAMES, BLK, FFN_NORM, LAYER, PERMUTE_K, PERMUTE_Q, llama3_rope_freqs
from ._model import VT, Arch, NameRule, Split, m
from .granite4_vision import deepstack_mapping
from .llama import LLAMA

# GraniteModel.set_gguf_parameters: the Llama rows, then the multipliers
GRANITE_ROWS = [
    *LLAMA.meta,
    m(
        "attention.scale",
        "attention_multiplier",
        t=VT.FLOAT32,
        value=lambda c: c.get("attention_multiplier") or None,
    ),
    m(
        "embedding_scale",
        "embedding_multiplier",
        t=VT.FLOAT32,
        value=lambda c: c.get("embedding_multiplier") or None,
    ),
    m(
        "residual_scale",
        "residual_multiplier",
        t=VT.FLOAT32,
        value=lambda c: c.get("residual_multiplier") or None,
    ),
    m(
        "logit_scale",
        "logits_scaling",
        t=VT.FLOAT32,
        value=lambda c: c.get("logits_scaling") or None,
    ),
    # Granite 4 Vision's text: which projector's features each layer adds
    # (derived: no HF field of the text model; GGUF -> HF drops it)
    m("deepstack_mapping", "_deepstack_mapping", t=VT.INT32, value=deepstack_mapping),
]
#: GraniteMoeShared's row (0 / absent: no shared MLP); every Granite-derived class writes it
GRANITE_SHARED_FF = m(
    "expert_shared_feed_forward_length",
    "shared_intermediate_size",
    value=lambda c: c.get("shared_intermediate_size") or None,
)
_MOE = LAYER + "block_sparse_moe."
_SHARED = LAYER + "shared_mlp."
#: GraniteMoeModel's experts (the fused ``input_linear`` ``[n_expert, 2 n_ff, n_embd]``
#: split into gate and up halves), router and shared MLP as the shared expert; Granite
#: 4.0-H with experts (arch/mamba.py) has the same
GRANITE_MOE_NAMES = [
    NameRule(_MOE + "router.layer.weight", BLK + "ffn_gate_inp.weight"),
    NameRule(_MOE + "output_linear.weight", BLK + "ffn_down_exps.weight"),
    NameRule(_SHARED + "output_linear.weight", BLK + "ffn_down_shexp.weight"),
]
GRANITE_MOE_SPLITS = [
    Split(
        _MOE + "input_linear.weight", (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"), -2
    ),
    Split(
        _SHARED + "input_linear.weight",
        (BLK + "ffn_gate_shexp.weight", BLK + "ffn_up_shexp.weight"),
        -2,
    ),
]


#: GraniteModel.filter_tensors: the audio encoder (Granite Speech) and the image side
#: (Granite 4 Vision) of a multimodal checkpoint are not text tensors
GRANITE_SKIP = (
    *LLAMA.skip,
    r"^encoder\.",
    r"image_",
    r"layerwise_projectors",
    r"spatial_projectors",
)


def _hf(cfg: dict, names: set[str]) -> dict:
    return {"hidden_act": "silu", "attention_bias": "blk.0.attn_q.bias" in names, "mlp_bias": False}


GRANITE = Arch(
    hf_archs=("GraniteForCausalLM",),
    gguf_arch="granite",
    meta=GRANITE_ROWS,
    names=[*BASE_NAMES, *FFN_NORM],
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    ignored=("head_dim",),
    skip=GRANITE_SKIP,
    tokenizer={"vocab": "llama"},
    model_types={"GraniteForCausalLM": "granite"},
    hf_config=_hf,
)
GRANITEMOE = Arch(
    hf_archs=("GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM"),
    gguf_arch="granitemoe",
    meta=[
        *GRANITE_ROWS,
        GRANITE_SHARED_FF,
    ],
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        *GRANITE_MOE_NAMES,
    ],
    splits=GRANITE_MOE_SPLITS,
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    ignored=("head_dim",),
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    skip=GRANITE_SKIP,
    tokenizer={"vocab": "llama"},
    model_types={"GraniteMoeForCausalLM": "granitemoe"},
    hf_config=_hf,
)
