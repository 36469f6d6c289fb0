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

The vision tower is the projector's (:mod:`.mmproj`).  GGUF -> HF of the text alone is
not offered: it has no HF class (transformers 5.24 has only the
``ForConditionalGeneration``, which the text GGUF with its projector converts back to).
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


def _hf_config(cfg: dict, names: set[str]) -> dict:
    # RoPE on the sliding layers only (llama.cpp's graph; the class's default pattern
    # counts from the last layer, so the per-layer bases are written out)
    theta = cfg.get("rope_theta", 10000.0)
    types = cfg.get("layer_types") or []
    return {"layer_rope_theta": [theta if t == "sliding_attention" else 0 for t in types]}


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
            inverse=lambda flags: ["sliding_attention" if f else "full_attention" for f in flags],
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
    hf_config=_hf_config,
)


# --------------------------------------------------------------------------- projector

#: the projector's sources (MuseGlimmerVisionModel.filter_tensors)
VISION_KEEP = ("model.vision_tower.", "model.vision_adapter.", "model.vision_projection.")
_VT = "model.vision_tower."
_VL = _VT + "layers.{bid}."


def _wb(pairs: list[tuple[str, str]]) -> list[NameRule]:
    return [NameRule(h + s, g + s) for h, g in pairs for s in (".weight", ".bias")]


#: the vision tower and the 3-linear projector (``mm.0`` .. ``mm.2``) under gguf-py's names
VISION_NAMES = _wb(
    [
        (_VT + "patch_embedder.patch_embedding", "v.patch_embd"),
        (_VT + "patch_embedder.position_embedding_table", "v.position_embd"),
        (_VT + "ln_pre", "v.pre_ln"),
        (_VT + "ln_post", "v.post_ln"),
        (_VL + "attn.q_proj", "v.blk.{bid}.attn_q"),
        (_VL + "attn.k_proj", "v.blk.{bid}.attn_k"),
        (_VL + "attn.v_proj", "v.blk.{bid}.attn_v"),
        (_VL + "attn.proj", "v.blk.{bid}.attn_out"),
        (_VL + "norm1", "v.blk.{bid}.ln1"),
        (_VL + "norm2", "v.blk.{bid}.ln2"),
        (_VL + "mlp.fc1", "v.blk.{bid}.ffn_up"),
        (_VL + "mlp.fc2", "v.blk.{bid}.ffn_down"),
        ("model.vision_adapter.fc1", "mm.0"),
        ("model.vision_adapter.fc2", "mm.1"),
        ("model.vision_projection", "mm.2"),
    ]
)


def nominal_image_size(v: dict) -> int:
    """The ``clip.vision.image_size`` the reference writes for this dynamic-size tower:
    position table side x patch x merge."""
    return v["pos_emb_height"] * v["patch_size"] * v["merge_size"]


def _patch_slabs(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    """``[n_embd, pt * 3 * p * p]`` -> the Conv2d kernel ``[n_embd, 3, p, p]``: the
    ``patch_temporal`` slabs summed (a still image repeats its frame), in float32 and
    rounded once to the tensor's type, as torch's ``sum`` does."""
    pt, p = int(v["patch_temporal"]), int(v["patch_size"])
    dtype = x.dtype if x.dtype in (np.float16, np.float32) else np.float32
    slabs = x.astype(np.float32).reshape(x.shape[0], pt, 3, p, p)
    acc = slabs[:, 0].copy()
    for k in range(1, pt):
        acc += slabs[:, k]
    return acc.astype(dtype)


def _patch_slabs_shape(s: tuple[int, ...], v: dict, ctx: dict) -> tuple[int, ...]:
    p = int(v["patch_size"])
    return (s[0], 3, p, p)


def _patch_slabs_back(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    """The Conv2d kernel -> the linear patch embedding over ``patch_temporal`` frames:
    the summed kernel as the first frame's slab, zeros for the others (the slabs' split
    is not kept; on a still image, whose frames repeat, it computes what llama.cpp does)."""
    pt = int(v["patch_temporal"])
    flat = x.reshape(x.shape[0], -1)
    return np.concatenate([flat, np.zeros((x.shape[0], flat.shape[1] * (pt - 1)), x.dtype)], 1)


def _patch_slabs_back_shape(s: tuple[int, ...], v: dict, ctx: dict) -> tuple[int, ...]:
    return (s[0], int(v["patch_temporal"]) * int(np.prod(s[1:])))


PATCH_SLABS = Transform(
    "muse_glimmer_patch_slabs",
    r"patch_embedder\.patch_embedding\.weight$",
    _patch_slabs,
    _patch_slabs_back,
    shape=_patch_slabs_shape,
    inverse_shape=_patch_slabs_back_shape,
    exact=False,
)

VISION_ROWS_AFTER_BASE = [
    m("projector_type", "_projector_type", t=VT.STRING, value=lambda v: "muse-glimmer"),
    m(
        "vision.attention.layer_norm_epsilon",
        "layer_norm_eps",
        t=VT.FLOAT32,
        value=lambda v: float(v["layer_norm_eps"]),
    ),
    m("vision.spatial_merge_size", "merge_size", value=lambda v: int(v["merge_size"])),
]
