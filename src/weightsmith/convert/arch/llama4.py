"""Llama 4 text: conversion/llama.py ``Llama4Model`` (GGUF ``llama4``).

The text model of ``Llama4ForCausalLM``, or of ``Llama4ForConditionalGeneration`` with
its ``language_model.`` wrapper stripped (the vision tower is llama.cpp's mmproj file,
not converted here).  Every ``interleave_moe_layer_step``-th layer is MoE: a sigmoid
router (``feed_forward.router``), one shared expert and the routed experts stored
fused, ``feed_forward.experts.gate_up_proj`` ``[n_expert, n_embd, 2 * n_ff]`` and
``down_proj`` ``[n_expert, n_ff, n_embd]`` -- the transpose of every other layout, so
gate and up are the halves of the last axis, each transposed, and down is transposed.
The other layers are dense (``intermediate_size_mlp``; ``intermediate_size`` is the
expert width).  RoPE is interleaved in the HF weights already: no Q/K permutation.

llama.cpp writes no NoPE-layer list or attention chunk size: its runtime fixes both
(every 4th layer without RoPE, chunks of 8192), as the transformers config defaults
do; ``attention.sliding_window`` 0 is written only when every ``layer_types`` entry is
full attention (MobileLLM-R1), which turns both off.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    FFN_NORM,
    LAYER,
    layer_rules,
    llama3_rope_freqs,
    replace_rows,
)
from ._model import Arch, NameRule, Split, Transform, head_dim, m


def _sliding_window(cfg: dict) -> int | None:
    types = cfg.get("layer_types")
    if types is not None and all(t == "full_attention" for t in types):
        return 0
    return None


# Llama4Model swaps the two widths before LlamaModel's rows are written
_ROWS = [
    *replace_rows(
        COMMON,
        feed_forward_length=m("feed_forward_length", "intermediate_size_mlp"),
    ),
    m("vocab_size", "vocab_size"),
    m("rope.dimension_count", "head_dim", value=head_dim),
    m("interleave_moe_layer_step", "interleave_moe_layer_step"),
    m("expert_feed_forward_length", "intermediate_size"),
    m("attention.sliding_window", "_sliding_window", value=_sliding_window),
]


def _gate_up(x: np.ndarray, cfg: dict) -> list[np.ndarray]:
    n = x.shape[-1] // 2
    return [x[..., :n].swapaxes(-1, -2), x[..., n:].swapaxes(-1, -2)]


def _gate_up_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    *lead, rows, cols = shape
    return [(*lead, cols // 2, rows)] * 2


def _gate_up_join(parts: list[np.ndarray], cfg: dict) -> np.ndarray:
    return np.concatenate([p.swapaxes(-1, -2) for p in parts], axis=-1)


def _t(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return np.ascontiguousarray(x.swapaxes(-1, -2))


def _t_shape(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2])


_FF = LAYER + "feed_forward."

LLAMA4 = Arch(
    hf_archs=("Llama4ForCausalLM", "Llama4ForConditionalGeneration"),
    gguf_arch="llama4",
    meta=_ROWS,
    names=[
        # before BASE_NAMES, whose mlp.* rules would otherwise win the GGUF -> HF lookup
        *layer_rules(
            [
                ("feed_forward.gate_proj", "ffn_gate"),
                ("feed_forward.up_proj", "ffn_up"),
                ("feed_forward.down_proj", "ffn_down"),
                ("feed_forward.router", "ffn_gate_inp"),
                ("feed_forward.shared_expert.gate_proj", "ffn_gate_shexp"),
                ("feed_forward.shared_expert.up_proj", "ffn_up_shexp"),
                ("feed_forward.shared_expert.down_proj", "ffn_down_shexp"),
            ]
        ),
        *BASE_NAMES,
        *FFN_NORM,
        NameRule(_FF + "experts.down_proj", BLK + "ffn_down_exps.weight"),
    ],
    splits=[
        Split(
            _FF + "experts.gate_up_proj",
            (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"),
            fn=_gate_up,
            shapes=_gate_up_shapes,
            join=_gate_up_join,
        ),
    ],
    transforms=[
        Transform(
            "experts_down_transpose",
            r"feed_forward\.experts\.down_proj$",
            _t,
            _t,
            shape=_t_shape,
            inverse_shape=_t_shape,
        ),
    ],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "intermediate_size",
        "intermediate_size_mlp",
        "interleave_moe_layer_step",
        "vocab_size",
    ),
    tokenizer={"vocab": "gpt2"},
    # GGUF -> HF writes the text model (the GGUF holds no vision tower)
    model_types={"Llama4ForCausalLM": "llama4_text"},
    hf_config=lambda cfg, names: {"hidden_act": "silu"},
)
