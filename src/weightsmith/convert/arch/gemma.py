"""Gemma 2 and Gemma 3 text: conversion/gemma.py.

Both store RMS norm weights as ``w`` and multiply by ``1 + w``: llama.cpp writes
``w + 1``.  Gemma 3 cuts the embedding rows past the tokenizer.  The text half of
``Gemma3ForConditionalGeneration`` converts too (``language_model.`` is stripped,
the vision tower and projector are left out, ``text_config`` is read).
"""

from __future__ import annotations

from typing import Any

from ._common import (
    BASE_NAMES,
    COMMON,
    GEMMA_EMBED_ROWS,
    GEMMA_NORM,
    GEMMA_NORMS,
    QK_NORM,
    defaulted,
    layer_rules,
)
from ._model import FILE_TYPE, VT, Arch, full_rope, m


def _query_scalar(cfg: dict, big_layers: int) -> int:
    # llama.cpp scales queries by 1/sqrt(head_dim), by 1/sqrt(n_embd/n_head) for the 27B
    if cfg.get("num_hidden_layers") == big_layers:
        return cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg.get("head_dim", 256)


_GEMMA3_ROWS: list[Any] = [
    *COMMON,
    # Gemma3Model.set_gguf_parameters re-adds these with its defaults
    m(
        "context_length",
        "max_position_embeddings",
        value=defaulted("max_position_embeddings", 131072),
    ),
    m("attention.head_count", "num_attention_heads", value=defaulted("num_attention_heads", 8)),
    m(
        "attention.layer_norm_rms_epsilon",
        "rms_norm_eps",
        t=VT.FLOAT32,
        value=defaulted("rms_norm_eps", 1e-6),
    ),
    m("attention.key_length", "head_dim", value=defaulted("head_dim", 256)),
    m("attention.value_length", "head_dim", value=defaulted("head_dim", 256)),
    m(
        "rope.freq_base",
        "rope_theta",
        t=VT.FLOAT32,
        value=lambda cfg: full_rope(cfg).get("rope_theta", 1_000_000.0),
    ),
    m(
        "final_logit_softcapping",
        "final_logit_softcapping",
        t=VT.FLOAT32,
        value=lambda cfg: cfg.get("final_logit_softcapping") or None,
    ),
    m(
        "attention.sliding_window",
        "sliding_window",
        value=lambda cfg: cfg["sliding_window"] if cfg.get("sliding_window_pattern") != 1 else None,
    ),
    m("attention.head_count_kv", "num_key_value_heads", value=defaulted("num_key_value_heads", 4)),
]

# Gemma2Model.set_gguf_parameters does not call the base class: its own rows only
_GEMMA2_ROWS: list[Any] = [
    m("context_length", "max_position_embeddings"),
    m("embedding_length", "hidden_size"),
    m("block_count", "num_hidden_layers"),
    m("feed_forward_length", "intermediate_size"),
    m("attention.head_count", "num_attention_heads"),
    m(
        "attention.head_count_kv",
        "num_key_value_heads",
        value=lambda cfg: cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
    ),
    m("attention.layer_norm_rms_epsilon", "rms_norm_eps", t=VT.FLOAT32),
    m("attention.key_length", "head_dim"),
    m("attention.value_length", "head_dim"),
    FILE_TYPE,
    m("attn_logit_softcapping", "attn_logit_softcapping", t=VT.FLOAT32),
    m("final_logit_softcapping", "final_logit_softcapping", t=VT.FLOAT32),
    m("attention.sliding_window", "sliding_window"),
]

GEMMA2 = Arch(
    hf_archs=("Gemma2ForCausalLM",),
    gguf_arch="gemma2",
    meta=_GEMMA2_ROWS,
    names=[*BASE_NAMES, *GEMMA_NORMS],
    transforms=[GEMMA_NORM],
    # MERaLiON 2 (remote code) keeps a Gemma 2 under ``text_decoder.`` beside its audio
    # tower and adaptor (the projector's: mmproj.MERALION2_AUDIO); the reference's text
    # run refuses that folder (``ln_speech`` unmapped), ours converts its text half
    skip=(
        r"^lm_head\.weight$",
        r"rotary_emb\.inv_freq$",
        r"^(speech_encoder|ln_speech|speech_audio_adapter)\.",
    ),
    renames=((r"^text_decoder\.", ""),),
    # Gemma2Config's defaults, as AutoConfig fills them before llama.cpp reads them
    defaults={
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "head_dim": 256,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 4096,
    },
    tokenizer={"vocab": "gemma"},
    model_types={"Gemma2ForCausalLM": "gemma2"},
    hf_config=lambda cfg, names: {
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _query_scalar(cfg, 46),
    },
)
GEMMA3 = Arch(
    hf_archs=("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"),
    gguf_arch="gemma3",
    meta=_GEMMA3_ROWS,
    names=[*BASE_NAMES, *QK_NORM, *GEMMA_NORMS],
    transforms=[GEMMA_EMBED_ROWS, GEMMA_NORM],
    vocab_rows=True,
    required=("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"),
    # Gemma3TextConfig's defaults: llama.cpp writes rope.freq_base_swa from the local one
    defaults={"rope_local_base_freq": 10000.0},
    tokenizer={"vocab": "gemma"},
    model_types={"Gemma3ForCausalLM": "gemma3_text"},
    hf_config=lambda cfg, names: {
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _query_scalar(cfg, 62),
    },
)


#: the layer names Gemma 3n and Gemma 4 share: the sandwich norms and the per-layer input
#: (PLE) gate and projection
GEMMA_PLE_NAMES = [
    *BASE_NAMES,
    *QK_NORM,
    *layer_rules(
        [
            ("post_attention_layernorm", "post_attention_norm"),
            ("pre_feedforward_layernorm", "ffn_norm"),
            ("post_feedforward_layernorm", "post_ffw_norm"),
            ("per_layer_input_gate", "inp_gate"),
            ("per_layer_projection", "proj"),
            ("post_per_layer_input_norm", "post_norm"),
        ]
    ),
]
