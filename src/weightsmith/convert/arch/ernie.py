"""ERNIE 4.5 (dense) and PaddleOCR-VL's text: conversion/ernie.py's ``Ernie4_5Model`` and
``PaddleOCRModel``.

TextModel's rows and Llama's tensor names, with no Q/K permutation: ERNIE rotates
interleaved pairs (transformers' ``rotate_half`` over ``x[..., 0::2]``/``x[..., 1::2]``),
which is llama.cpp's NORM RoPE as stored.  A checkpoint under ``ernie.`` is read as
``model.``.  The vocabulary is SentencePiece, then ``add_space_prefix`` from
tokenizer_config.json's ``add_prefix_space`` (route ``ernie``).  PaddleOCR-VL's text is the
same class under the GGUF name ``paddleocr`` (llama.cpp runs it with M-RoPE), its vision
tower left to the projector (:mod:`.mmproj`).
"""

from __future__ import annotations

from dataclasses import replace

from ._common import BASE_NAMES, COMMON, FFN_NORM
from ._model import Arch
from .qwenvl import _with_sections

ERNIE4_5 = Arch(
    hf_archs=("Ernie4_5ForCausalLM", "Ernie4_5_ForCausalLM"),
    gguf_arch="ernie4_5",
    meta=list(COMMON),
    names=[*BASE_NAMES, *FFN_NORM],
    renames=((r"ernie\.", "model."),),
    tokenizer={"vocab": "ernie"},
    model_types={"Ernie4_5ForCausalLM": "ernie4_5"},
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "use_bias": "blk.0.attn_q.bias" in names,
    },
)

# PaddleOCRModel: the text of PaddleOCRVLForConditionalGeneration (the Hub's flat config,
# or transformers 5's text_config merged up), TextModel's rows with the M-RoPE sections
# before rope.freq_base; the tower (``visual.``) and projector (``mlp_AR.``) are other
# modalities here.  No HF class is this text alone: GGUF -> HF refuses it, as qwen2vl
PADDLEOCR = replace(
    ERNIE4_5,
    hf_archs=("PaddleOCRVLForConditionalGeneration",),
    gguf_arch="paddleocr",
    meta=_with_sections(list(COMMON)),
    model_types={},
)
