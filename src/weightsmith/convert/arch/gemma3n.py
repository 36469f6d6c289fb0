"""Gemma 3n text: conversion/gemma.py ``Gemma3NModel`` (GGUF ``gemma3n``).

Gemma 3's rows, then Gemma 3n's own keys:

* ``altup.active_idx`` / ``altup.num_inputs`` (AltUp: the hidden state is carried as
  ``num_inputs`` streams, one of them active); the reference converts 4 streams only;
* ``embedding_length_per_layer_input`` and ``attention.shared_kv_layers`` (the last
  layers reuse the KV of earlier ones and have no K/V projections of their own in a
  transformers 5 checkpoint);
* ``activation_sparsity_scale``: per layer the standard normal quantile of
  ``activation_sparsity_pattern`` (``-inf`` for 0, no sparsity), FLOAT32 array;
* ``attention.sliding_window_pattern``: one BOOL per layer from ``layer_types``;
* ``feed_forward_length`` as an INT32 array: the config class keeps one width per layer.

Tensors: AltUp's 3 ``altup_projections`` and 3 ``altup_unembed_projections`` are each
stacked into one ``[3, n_embd, n_embd]`` tensor (``altup_proj``, ``altup_unembd_proj``);
per layer ``altup.*`` (``correct_output_scale`` has no ``.weight`` suffix: the reference
adds it), LAuReL's two low-rank factors and norm, and the per-layer-input gate,
projection and norm.  Norm weights are stored as they are (Gemma 3n's RMS norm
multiplies by ``w``).  The token embedding is not cut to the tokenizer; the token and
per-layer embeddings shorter than ``vocab_size`` are padded with zero rows to it (the
Hub's per-layer table has 262144 rows of 262400: the vision and audio token slots).

The text half of ``Gemma3nForConditionalGeneration`` converts the same way
(``text_config``, ``model.language_model.`` -> ``model.``; the vision and audio towers
and their embedders are left out).

GGUF -> HF writes ``Gemma3nForCausalLM`` (``gemma3n_text``).  Not in the metadata:
``laurel_rank`` (read off ``laurel_l``'s shape) and ``vocab_size_per_layer_input``:
the file keeps the padded per-layer table, so it is written as ``vocab_size`` -- the
zero rows then give ids past the original per-layer vocabulary a zero per-layer input,
as llama.cpp computes, where the original model used row 0.  A file without the
sliding-window pattern gets the config class's layer types (every 5th layer full, as
llama.cpp falls back to); without ``feed_forward_length``, the widths of ``ffn_up``.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from ._common import BLK, LAYER, layer_rules, reference_math, replace_rows
from ._model import VT, Arch, NameRule, Stack, Transform, m
from .gemma import GEMMA3, GEMMA_PLE_NAMES

_SLIDING = "sliding_attention"
_FULL = "full_attention"
_N_ALTUP_PROJ = 3  # altup_num_inputs - 1: the reference accepts 4 streams only (``fixed``)


def sparsity_scale(s: float) -> float:
    """``torch.distributions.Normal(0, 1).icdf`` of ``s`` in float32, as the reference
    computes it: with torch when importable (:func:`reference_math`: torch's ``erfinv``
    differs by CPU in the last bit, 1 ulp at s = 0.267 on an AVX-512 machine), else
    ``erfinv(2 s - 1) * sqrt(2)`` with each step rounded to float32 and erfinv correctly
    rounded from float64 (within 1 ulp of torch's on a 0.001 grid over [0, 1])."""

    def with_numpy(a: np.ndarray) -> np.float32:
        x = np.float32(np.float32(2.0) * a.reshape(-1)[0] - np.float32(1.0))
        if x <= -1.0 or x >= 1.0:
            return np.float32(np.inf if x > 0 else -np.inf)
        e = np.float32(NormalDist().inv_cdf((float(x) + 1.0) / 2.0) / math.sqrt(2.0))
        return np.float32(e * np.float32(math.sqrt(2.0)))

    scale = reference_math(
        np.array([s], dtype=np.float32),
        lambda torch, t: torch.distributions.normal.Normal(0, 1).icdf(t),
        with_numpy,
    )
    return float(scale.reshape(-1)[0])


def _sparsity_back(scales: Any) -> list[float]:
    # the pattern is a probability; -inf is 0 (no sparsity)
    return [0.0 if math.isinf(v) and v < 0 else NormalDist().cdf(float(v)) for v in scales]


def _ffn(cfg: dict) -> list[int]:
    ff = cfg["intermediate_size"]
    return (
        [int(x) for x in ff] if isinstance(ff, (list, tuple)) else [ff] * cfg["num_hidden_layers"]
    )


def _swa_pattern(cfg: dict) -> list[bool]:
    return [t == _SLIDING for t in cfg["layer_types"]]


_ROWS: list[Any] = [
    *replace_rows(
        GEMMA3.meta,
        feed_forward_length=m("feed_forward_length", "intermediate_size", t=VT.INT32, value=_ffn),
    ),
    m("altup.active_idx", "altup_active_idx"),
    m("altup.num_inputs", "altup_num_inputs"),
    m("embedding_length_per_layer_input", "hidden_size_per_layer_input"),
    m("attention.shared_kv_layers", "num_kv_shared_layers"),
    m(
        "activation_sparsity_scale",
        "activation_sparsity_pattern",
        t=VT.FLOAT32,
        value=lambda cfg: [sparsity_scale(s) for s in cfg["activation_sparsity_pattern"]],
        inverse=_sparsity_back,
    ),
    m("attention.sliding_window_pattern", "_swa_pattern", t=VT.BOOL, value=_swa_pattern),
]


def _pad_rows(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return (max(shape[0], cfg["vocab_size"]), *shape[1:])


def _pad(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    n = cfg["vocab_size"] - x.shape[0]
    return x if n <= 0 else np.concatenate([x, np.zeros((n, *x.shape[1:]), x.dtype)])


#: the reference pads (never cuts) both embeddings to ``vocab_size``; the inverse keeps
#: the padded rows (see the module docstring)
PAD_EMBEDDINGS = Transform(
    "embedding_rows_padded_to_vocab_size",
    r"embed_tokens(_per_layer)?\.weight$",
    _pad,
    lambda x, cfg, ctx: x,
    shape=_pad_rows,
    exact=False,
)

_NAMES = [
    *GEMMA_PLE_NAMES,
    *layer_rules(
        [
            ("altup.correction_coefs", "altup_correct_coef"),
            ("altup.prediction_coefs", "altup_predict_coef"),
            ("altup.modality_router", "altup_router"),
            ("altup.router_norm", "altup_router_norm"),
            ("laurel.linear_left", "laurel_l"),
            ("laurel.linear_right", "laurel_r"),
            ("laurel.post_laurel_norm", "laurel_post_norm"),
        ]
    ),
    # stored without ``.weight``: the reference's filter_tensors adds it
    NameRule(LAYER + "altup.correct_output_scale", BLK + "altup_correct_scale.weight"),
    NameRule("model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"),
    NameRule("model.per_layer_model_projection.weight", "per_layer_model_proj.weight"),
    NameRule("model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"),
]

_STACKS = [
    Stack(
        "model.altup_projections.{xid}.weight",
        "altup_proj.weight",
        lambda cfg: _N_ALTUP_PROJ,
        group="altup_proj",
    ),
    Stack(
        "model.altup_unembed_projections.{xid}.weight",
        "altup_unembd_proj.weight",
        lambda cfg: _N_ALTUP_PROJ,
        group="altup_unembd_proj",
    ),
]


def _layer_types(cfg: dict) -> list[str]:
    """Gemma3nTextConfig's default: every 5th layer full."""
    n = cfg.get("num_hidden_layers", 35)
    return [_FULL if (i + 1) % 5 == 0 else _SLIDING for i in range(n)]


def _sparsity_default(cfg: dict) -> list[float]:
    """Gemma3nTextConfig's default: 0.95 on the first 10 layers of a deeper model."""
    n = cfg.get("num_hidden_layers", 35)
    k = 10 if n > 10 else 0
    return [0.95] * k + [0.0] * (n - k)


# Gemma3nTextConfig's defaults, as AutoConfig fills them before llama.cpp reads them
_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_400,
    "vocab_size_per_layer_input": 262_144,
    "hidden_size": 2048,
    "intermediate_size": 16_384,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "max_position_embeddings": 32_768,
    "rms_norm_eps": 1e-6,
    "sliding_window": 512,
    "final_logit_softcapping": 30.0,
    "hidden_size_per_layer_input": 256,
    "altup_active_idx": 0,
    "altup_num_inputs": 4,
    "num_kv_shared_layers": 15,
    "laurel_rank": 64,
    "layer_types": _layer_types,
    "activation_sparsity_pattern": _sparsity_default,
    "rope_parameters": lambda cfg: {
        _SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        _FULL: {"rope_type": "default", "rope_theta": 1_000_000.0},
    },
}


def _hf_config(cfg: dict, names: set[str]) -> dict:
    shapes = cfg.get("_shapes") or {}
    laurel = shapes.get("blk.0.laurel_l.weight")
    swa = cfg.get("_swa_pattern")
    out: dict[str, Any] = {
        "hidden_activation": "gelu_pytorch_tanh",
        # without the pattern llama.cpp takes every 5th layer as full, as the config class
        "layer_types": (
            [_SLIDING if s else _FULL for s in swa] if swa is not None else _layer_types(cfg)
        ),
        "rope_parameters": {
            _FULL: {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 1_000_000.0)},
            _SLIDING: {
                "rope_type": "default",
                "rope_theta": cfg.get("rope_local_base_freq", 10_000.0),
            },
        },
        # the per-layer table as the file keeps it: padded to the vocabulary
        "vocab_size_per_layer_input": cfg["vocab_size"],
    }
    ff = cfg.get("intermediate_size")
    n = cfg["num_hidden_layers"]
    ups = [shapes.get(f"blk.{i}.ffn_up.weight") for i in range(n)]
    if isinstance(ff, (list, tuple)) or hasattr(ff, "tolist"):
        out["intermediate_size"] = [int(x) for x in ff]
    elif isinstance(ff, int):
        out["intermediate_size"] = [ff] * n
    elif all(u is not None for u in ups):  # no key: the widths are the tensors' rows
        out["intermediate_size"] = [int(u[0]) for u in ups]
    if laurel is not None:
        out["laurel_rank"] = int(laurel[0])  # numpy order: [rank, n_embd]
    return out


GEMMA3N = Arch(
    hf_archs=("Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"),
    gguf_arch="gemma3n",
    meta=_ROWS,
    names=_NAMES,
    stacks=_STACKS,
    transforms=[PAD_EMBEDDINGS],
    # intermediate_size is one width per layer (a list) in the config class
    required=("hidden_size", "num_hidden_layers", "vocab_size"),
    fixed={"altup_num_inputs": 4},
    defaults=_DEFAULTS,
    tokenizer={"vocab": "gemma3n"},
    model_types={"Gemma3nForCausalLM": "gemma3n_text"},
    hf_config=_hf_config,
)
