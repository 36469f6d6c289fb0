"""Granite and GraniteMoE: conversion/granite.py (``LlamaModel`` subclasses).

Granite drops ``head_dim`` and adds its four multipliers.  GraniteMoE keeps each
layer's experts fused: ``input_linear`` ``[n_expert, 2 * n_ff, n_embd]`` splits into
gate and up halves, ``output_linear`` is the down projection.

Granite SWA (``GraniteSWAForCausalLM``, ``GraniteMoeSWAForCausalLM``; GGUF
``granite_swa``) is Granite with sliding-window layers and a learnable per-head
attention sink: the Granite rows, then ``attention.sliding_window`` (default 128) and
``attention.sliding_window_pattern`` (one BOOL per layer, true for
``sliding_attention``; without ``layer_types`` every layer but each 4th from 0), and
``attention.rope_pattern`` (true = RoPE) only from a ``no_rope_layers`` list -- the
reference reads no ``layer_rope_theta``, transformers 5's spelling of NoPE layers
(theta 0).  ``self_attn.sinks`` -> ``attn_sinks.weight``.  The MoE form keeps the
experts fused as transformers 5 saves them (``experts.gate_up_proj`` ->
``ffn_gate_up_exps``; the older ``input_linear`` too) and the shared MLP's
``input_linear`` as one ``ffn_up_shexp`` (gate rows first), as llama.cpp runs them.
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


# ----------------------------------------------------------------------------- Granite SWA

_SLIDING, _FULL = "sliding_attention", "full_attention"


def _layer_types(cfg: dict) -> list[str] | None:
    """GraniteSWAConfig's default ``layer_types``: full attention on every 4th layer from 0
    (the reference's own fallback is the same pattern)."""
    n = cfg.get("num_hidden_layers")
    return [_FULL if i % 4 == 0 else _SLIDING for i in range(n)] if isinstance(n, int) else None


def _swa_pattern(cfg: dict) -> list[bool]:
    return [t == _SLIDING for t in cfg["layer_types"]]


def _rope_pattern(cfg: dict) -> list[bool] | None:
    nope = cfg.get("no_rope_layers")
    return [bool(x) for x in nope] if nope else None


def _swa_hf(cfg: dict, names: set[str]) -> dict:
    """GGUF -> HF: ``layer_types`` from the pattern, NoPE layers (rope_pattern false) as
    ``layer_rope_theta`` 0, the others at the file's theta."""
    n = cfg["num_hidden_layers"]
    swa = cfg.get("_swa_pattern") or [False] * n
    theta = cfg.get("rope_theta", 10000.0)
    rope = cfg.get("_rope_pattern") or [True] * n
    return {
        **_hf(cfg, names),
        "sliding_window": cfg.get("sliding_window"),
        "layer_types": [_SLIDING if s else _FULL for s in swa],
        "layer_rope_theta": [theta if r else 0.0 for r in rope],
    }


#: GraniteSWAModel.set_gguf_parameters: Granite's rows, then the window and the patterns
_SWA_ROWS = [
    *GRANITE_ROWS,
    m("attention.sliding_window", "sliding_window"),
    m("attention.sliding_window_pattern", "_swa_pattern", t=VT.BOOL, value=_swa_pattern),
    m("attention.rope_pattern", "_rope_pattern", t=VT.BOOL, value=_rope_pattern),
]
_SINKS = NameRule(LAYER + "self_attn.sinks", BLK + "attn_sinks.weight")
_SWA_DEFAULTS = {"sliding_window": 128, "layer_types": _layer_types}

GRANITE_SWA = Arch(
    hf_archs=("GraniteSWAForCausalLM",),
    gguf_arch="granite_swa",
    meta=_SWA_ROWS,
    names=[*BASE_NAMES, *FFN_NORM, _SINKS],
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    defaults=_SWA_DEFAULTS,
    ignored=("head_dim",),
    skip=GRANITE_SKIP,
    tokenizer={"vocab": "llama"},
    model_types={"GraniteSWAForCausalLM": "granite_swa"},
    hf_config=_swa_hf,
)
#: GraniteMoeSWAModel.modify_tensors: the experts and the shared MLP kept fused
GRANITEMOE_SWA = Arch(
    hf_archs=("GraniteMoeSWAForCausalLM",),
    gguf_arch="granite_swa",
    meta=[*_SWA_ROWS, GRANITE_SHARED_FF],
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        _SINKS,
        # transformers 5's layout first: GGUF -> HF writes what it loads
        NameRule(_MOE + "experts.gate_up_proj", BLK + "ffn_gate_up_exps.weight"),
        NameRule(_MOE + "experts.down_proj", BLK + "ffn_down_exps.weight"),
        NameRule(_MOE + "router.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(_MOE + "input_linear.weight", BLK + "ffn_gate_up_exps.weight"),
        NameRule(_SHARED + "input_linear.weight", BLK + "ffn_up_shexp.weight"),
        *GRANITE_MOE_NAMES,
    ],
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    # GraniteMoeSWAConfig's (GraniteMoeShared's) expert defaults, as AutoConfig fills them
    defaults={**_SWA_DEFAULTS, "num_local_experts": 8, "num_experts_per_tok": 2},
    ignored=("head_dim",),
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    skip=GRANITE_SKIP,
    tokenizer={"vocab": "llama"},
    model_types={"GraniteMoeSWAForCausalLM": "granitemoe_swa"},
    hf_config=_swa_hf,
)


def is_granitemoe_swa_file(md) -> bool:
    """A ``granite_swa`` file with experts is GraniteMoeSWA's."""
    return bool(md.get("granite_swa.expert_count"))
