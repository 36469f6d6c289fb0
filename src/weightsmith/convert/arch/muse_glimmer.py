"""Muse Glimmer text: conversion/muse_glimmer.py's ``MuseGlimmerModel`` (GGUF ``muse-glimmer``).

A Gemma-like decoder (four norms a layer, ``1 + w`` centred RMS norms; the final norm is
a plain one) with an attention output gate (``self_attn.gate_proj`` -> ``attn_gate``),
sliding-window layers with RoPE and full layers without (``layer_types``), and logits
``T * tanh(logits * output_multiplier / T)``.  The reference:

* adds 1 to the four per-layer norms (names ending ``layernorm.weight``), not to
  ``model.norm``;
* permutes Q/K from transformers' rotate-half rows to ggml's interleaved pairs (as Llama);
* writes Q/K norm weights the checkpoint does not have, when it reads ``q_proj``: the
  model's scaleless QK RMS norm times ``qk_scale_factor`` on Q becomes ``attn_q_norm`` =
  ``qk_scale_factor`` in every element and ``attn_k_norm`` = ones (float32, ``head_dim``
  long), both before ``attn_q`` -- here a function :class:`Split` of ``q_proj`` into
  those three tensors;
* adds ``final_logit_softcapping``, ``logit_scale`` (``output_multiplier``), the sliding
  window and its per-layer pattern after ``general.file_type``.

The vision tower is the projector's (:mod:`.mmproj`).  GGUF -> HF is not offered: the
text alone has no HF class (transformers 5.24 has only the ``ForConditionalGeneration``).
"""

from __future__ import annotations

import numpy as np

from ._common import BASE_NAMES, COMMON, GEMMA_NORMS, PERMUTE_K, PERMUTE_Q, _plus_one
from ._model import VT, Arch, NameRule, Split, Transform, m

_DEFAULTS = {  # MuseGlimmerTextConfig's, as AutoConfig fills them before the reference reads
    "head_dim": 128,
    "sliding_window": 2048,
    "final_logit_softcapping": 20.0,
    "qk_scale_factor": 3.87,
    "output_multiplier": 0.19611613513818404,
}


def _layer_types(cfg: dict) -> list[str] | None:
    n = cfg.get("num_hidden_layers")
    if n is None:
        return None
    return ["full_attention" if (n - 1 - i) % 4 == 0 else "sliding_attention" for i in range(n)]


def _q_split(x: np.ndarray, cfg: dict) -> list[np.ndarray]:
    hd = cfg["head_dim"]
    return [
        np.full((hd,), cfg["qk_scale_factor"], np.float32),
        np.ones((hd,), np.float32),
        x,
    ]


def _q_split_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    return [(cfg["head_dim"],), (cfg["head_dim"],), shape]


_LAYER_NORM_PLUS_ONE = Transform(
    "centred_norm_plus_one",
    r"layernorm\.weight$",
    _plus_one,
    lambda x, cfg, ctx: x.astype(np.float32) - np.float32(1.0),
    exact=False,
)

MUSE_GLIMMER = Arch(
    hf_archs=("MuseGlimmerForConditionalGeneration",),
    gguf_arch="muse-glimmer",
    meta=[
        *COMMON,
        m("final_logit_softcapping", "final_logit_softcapping", t=VT.FLOAT32),
        m("logit_scale", "output_multiplier", t=VT.FLOAT32),
        m("attention.sliding_window", "sliding_window"),
        m(
            "attention.sliding_window_pattern",
            "layer_types",
            t=VT.BOOL,
            value=lambda cfg: [t == "sliding_attention" for t in cfg["layer_types"]],
        ),
    ],
    names=[
        *BASE_NAMES,
        *GEMMA_NORMS,
        NameRule("model.layers.{bid}.self_attn.gate_proj.weight", "blk.{bid}.attn_gate.weight"),
    ],
    transforms=[_LAYER_NORM_PLUS_ONE, PERMUTE_Q, PERMUTE_K],
    splits=[
        Split(
            "model.layers.{bid}.self_attn.q_proj.weight",
            (
                "blk.{bid}.attn_q_norm.weight",
                "blk.{bid}.attn_k_norm.weight",
                "blk.{bid}.attn_q.weight",
            ),
            fn=_q_split,
            shapes=_q_split_shapes,
            join=lambda parts, cfg: parts[2],
        ),
    ],
    defaults={**_DEFAULTS, "layer_types": _layer_types},
    tokenizer={"vocab": "muse_glimmer"},
)
