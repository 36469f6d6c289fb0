"""Phi-3 / Phi-4: conversion/phi.py ``Phi3MiniModel`` (GGUF ``phi3``).

The fused projections stay fused, as llama.cpp runs them: ``self_attn.qkv_proj``
-> ``attn_qkv``, ``mlp.gate_up_proj`` -> ``ffn_up`` (gate rows first, then up).
``Phi3MiniModel.set_gguf_parameters`` does not call the base class: its own rows
only, ``attention.sliding_window`` 0 when the config has none (Phi-4).

LongRoPE (``rope_scaling.type`` ``longrope`` or ``su``): the ``long_factor`` and
``short_factor`` lists become the ``rope_factors_long`` / ``rope_factors_short``
tensors (F32, written first), and ``rope.scaling.attn_factor`` =
``sqrt(1 + ln(s) / ln(original context))`` with ``s`` = context / original context,
a row the reference writes while it prepares the tensors, so before ``general.type``.

Vocabulary: the ``phi3`` route (SentencePiece with Phi-3's added-token rules, or
byte-level BPE when ``tokenizer_config.json`` names ``GPT2Tokenizer``, as Phi-4 does).
"""

from __future__ import annotations

import math

import numpy as np

from ... import errors as E
from ._common import BASE_NAMES, BLK, FFN_NORM, LAYER
from ._model import FILE_TYPE, VT, Arch, NameRule, first, full_rope, m, rope_parameters


def _rope_dims(cfg: dict) -> int:
    pct = rope_parameters(cfg).get("partial_rotary_factor", 1.0)
    return int(pct * cfg["hidden_size"]) // cfg["num_attention_heads"]


def _orig_ctx(cfg: dict):
    return rope_parameters(cfg).get("original_max_position_embeddings")


def _longrope(cfg: dict) -> dict | None:
    rp = rope_parameters(cfg)
    return rp if rp.get("long_factor") else None


def _attn_factor(cfg: dict) -> float | None:
    rp = _longrope(cfg)
    if rp is None:
        return None
    scale = first(cfg, ("n_positions", "max_position_embeddings")) / _orig_ctx(cfg)
    kind = str(rp.get("rope_type", "")).lower()
    if kind in ("su", "longrope"):
        return math.sqrt(1 + math.log(scale) / math.log(_orig_ctx(cfg))) if scale > 1.0 else 1.0
    if kind == "yarn":
        return 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0
    raise E.InvalidModelConfig(
        "unsupported RoPE scaling type for Phi-3",
        field="rope_scaling.type",
        expected="longrope, su or yarn",
        found=repr(kind),
    )


def _factors(which: str):
    def make(cfg: dict) -> np.ndarray | None:
        rp = _longrope(cfg)
        if rp is None:
            return None
        long, short = rp.get("long_factor"), rp.get("short_factor")
        want = _rope_dims(cfg) / 2
        if short is None or len(long) != len(short) or len(long) != want:
            raise E.InvalidModelConfig(
                "LongRoPE factor lists do not match the rotary dimensions",
                field="rope_scaling.long_factor / short_factor",
                expected=f"two lists of {want:g} values",
                found=f"{len(long)} and {None if short is None else len(short)}",
            )
        return np.array(rp[which + "_factor"], dtype=np.float32)

    return make


def _hf_config(cfg: dict, names: set[str]) -> dict:
    # Phi3Config's pad_token_id default (32000) is past a small vocabulary; the GGUF's
    # padding id, if any, replaces this None
    out: dict = {"hidden_act": "silu", "pad_token_id": None}
    dims = cfg.get("rope_dimension_count")
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    if dims is not None and dims != head:
        out["partial_rotary_factor"] = dims / head
    return out


PHI3 = Arch(
    # Phi4ForCausalLMV: Phi-4 reasoning-vision, whose text the reference converts with this
    # class (its tower and ``mm_projector.`` are other modalities; arch/phi4v.py)
    hf_archs=("Phi3ForCausalLM", "Phi4ForCausalLMV"),
    gguf_arch="phi3",
    meta=[
        m("context_length", "max_position_embeddings", "n_positions"),
        m(
            "rope.scaling.original_context_length",
            "original_max_position_embeddings",
            value=_orig_ctx,
        ),
        m("embedding_length", "hidden_size", "n_embd"),
        m("feed_forward_length", "intermediate_size"),
        m("block_count", "num_hidden_layers", "n_layers", "n_layer", "num_layers"),
        m("attention.head_count", "num_attention_heads", "n_head"),
        m("attention.head_count_kv", "num_key_value_heads", "n_head_kv"),
        m("attention.layer_norm_rms_epsilon", "rms_norm_eps", t=VT.FLOAT32),
        m("rope.dimension_count", "rope_dimension_count", value=_rope_dims),
        m("rope.freq_base", "rope_theta", t=VT.FLOAT32, value=lambda c: full_rope(c)["rope_theta"]),
        FILE_TYPE,
        m(
            "attention.sliding_window",
            "sliding_window",
            value=lambda c: c.get("sliding_window") or 0,
            inverse=lambda v: v or None,
        ),
    ],
    early_meta=[m("rope.scaling.attn_factor", "_attn_factor", t=VT.FLOAT32, value=_attn_factor)],
    # the fused rules first: GGUF -> HF maps ffn_up back to gate_up_proj, not up_proj
    names=[
        NameRule(LAYER + "self_attn.qkv_proj.weight", BLK + "attn_qkv.weight"),
        NameRule(LAYER + "mlp.gate_up_proj.weight", BLK + "ffn_up.weight"),
        *BASE_NAMES,
        *FFN_NORM,
    ],
    extra={
        "rope_factors_long.weight": _factors("long"),
        "rope_factors_short.weight": _factors("short"),
    },
    tokenizer={"vocab": "phi3"},
    model_types={"Phi3ForCausalLM": "phi3"},
    hf_config=_hf_config,
)
