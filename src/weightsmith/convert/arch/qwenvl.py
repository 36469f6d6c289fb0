"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL text: conversion/qwenvl.py's ``Qwen2VLModel`` (GGUF
``qwen2vl``) and conversion/qwen3vl.py's ``Qwen3VLTextModel`` (GGUF ``qwen3vl``).

A Qwen2 (Qwen3: with Q/K norms) decoder whose RoPE is split in MRoPE sections (time,
height, width): the base rows plus ``rope.dimension_sections`` (``mrope_section`` padded
to 4, INT32 as gguf-py infers it), written before ``rope.freq_base``.  Qwen3-VL adds
``n_deepstack_layers`` (the vision tower's deepstack count: llama.cpp's input width is
``n_embd * (1 + n)``) after ``general.file_type``; Qwen3-VL MoE (``qwen3vlmoe``) is the
same over Qwen3-MoE, its fused experts in the Hub's layout.  The vision tower is the projector's
(:mod:`.mmproj`).  GGUF -> HF of this text alone is not offered (no HF class is the
text half of a Qwen-VL).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ._common import BASE_NAMES, BLK, COMMON, FFN_NORM, QK_NORM
from ._model import VT, Arch, MetaKey, PlanError, Split, Transform, m, rope_parameters
from .llama4 import _gate_up, _gate_up_join, _gate_up_shapes, _t, _t_shape
from .qwen import (
    _EXP,
    _MOE_NAMES,
    _MOE_ROWS,
    _MOE_STACKS,
    _RERANK_ROWS,
    QWEN3_RERANK,
    QWEN3_RERANK_TIED,
)


def _sections(cfg: dict) -> list[int] | None:
    sec = rope_parameters(cfg).get("mrope_section")
    return None if sec is None else [*sec, 0, 0, 0, 0][:4]


def _with_sections(rows: list[Any]) -> list[Any]:
    at = next(i for i, r in enumerate(rows) if isinstance(r, MetaKey) and r.key == "rope.freq_base")
    row = m("rope.dimension_sections", "_mrope_section", t=VT.INT32, value=_sections)
    return [*rows[:at], row, *rows[at:]]


QWEN2VL = Arch(
    # Qwen2.5-Omni: the Hub's config names the class Qwen2_5OmniModel (transformers 5's
    # Qwen2_5OmniForConditionalGeneration is not the reference's, which refuses it); its
    # text model is the thinker's, under ``thinker.`` (``thinker_config.text_config``)
    hf_archs=(
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5OmniModel",
    ),
    gguf_arch="qwen2vl",
    meta=_with_sections(list(COMMON)),
    names=[*BASE_NAMES, *FFN_NORM],
    renames=((r"^thinker\.", ""),),
    tokenizer={"vocab": "spm_or_gpt2"},
)


def _deepstack_count(cfg: dict) -> int:
    return len((cfg.get("vision_config") or {}).get("deepstack_visual_indexes") or [])


QWEN3VL = Arch(
    hf_archs=("Qwen3VLForConditionalGeneration",),
    gguf_arch="qwen3vl",
    meta=[
        *_with_sections(list(COMMON)),
        m("n_deepstack_layers", "_deepstack", value=_deepstack_count),
    ],
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM],
    # the reference's Qwen3VLTextModel is its Qwen3 class: Qwen3-VL-Reranker's mode too
    rerank=True,
    tokenizer={"vocab": "spm_or_gpt2"},
)
# Qwen3-VL-Reranker's text: Qwen3's reranker rows before the deepstack count, cls.output
# from the head's yes / no rows (qwen.py); the tower is the projector's, unchanged
QWEN3VL_RERANK = replace(
    QWEN3VL,
    meta=[
        *QWEN3VL.meta[:-1],
        *_RERANK_ROWS[len(COMMON) :],
        QWEN3VL.meta[-1],
    ],
    splits=QWEN3_RERANK.splits,
)
QWEN3VL_RERANK_TIED = replace(QWEN3VL_RERANK, splits=QWEN3_RERANK_TIED.splits)


def _hub_gate_up_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    """The parts' shapes; transformers 5's own layout ``[n_expert, 2 n_ff, n_embd]`` (what
    it saves) is refused: read as the Hub's it would give wrong experts."""
    if len(shape) != 3 or shape[1] != cfg.get("hidden_size") or shape[2] % 2:
        raise PlanError(
            "expert shape",
            "mlp.experts.gate_up_proj",
            f"{list(shape)}: not the Hub's [n_expert, hidden_size={cfg.get('hidden_size')}, "
            "2 * moe_intermediate_size] (transformers 5 saves the transpose)",
        )
    return _gate_up_shapes(shape, cfg)


# Qwen3VLMoeTextModel: Qwen3-MoE rows with the sections and the deepstack count; the
# experts come fused in the Hub's layout, gate_up_proj [n_expert, n_embd, 2 n_ff] (gate
# and up the halves of the last axis, each transposed) and down_proj [n_expert, n_ff,
# n_embd] (transposed) -- the transpose of the Qwen3-MoE layout the qwen3moe entry reads
QWEN3VLMOE = Arch(
    hf_archs=("Qwen3VLMoeForConditionalGeneration",),
    gguf_arch="qwen3vlmoe",
    meta=[
        *_with_sections(list(_MOE_ROWS)),
        m("n_deepstack_layers", "_deepstack", value=_deepstack_count),
    ],
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM, *_MOE_NAMES],
    splits=[
        Split(
            _EXP + "gate_up_proj",
            (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"),
            fn=_gate_up,
            shapes=_hub_gate_up_shapes,
            join=_gate_up_join,
        ),
    ],
    transforms=[
        Transform(
            "experts_down_transpose",
            r"mlp\.experts\.down_proj$",
            _t,
            _t,
            shape=_t_shape,
            inverse_shape=_t_shape,
        ),
    ],
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
)


# Qwen3OmniMoeTextModel: the thinker's Qwen3-VL-MoE text model (``thinker.`` dropped, its
# config ``thinker_config.text_config``), the Hub's experts one tensor each (stacked as
# Qwen3-MoE's), ``n_deepstack_layers`` 0 (its deepstack is not in the text model's input),
# BOS and EOS both ``<|im_end|>``
QWEN3OMNIMOE = replace(
    QWEN3VLMOE,
    hf_archs=("Qwen3OmniMoeForConditionalGeneration",),
    meta=[
        *_with_sections(list(_MOE_ROWS)),
        m("n_deepstack_layers", "_deepstack", value=lambda cfg: 0),
    ],
    stacks=_MOE_STACKS,
    renames=((r"thinker\.", ""),),
    tokenizer={"vocab": "qwen3omni"},
)


# Qwen3ASRTextModel: Qwen3-ASR's text model is a Qwen3 (transformers' ``text_config`` of
# model_type qwen3, under ``model.language_model.``; Qwen's own release keeps it under
# ``thinker.`` with ``thinker_config``) written as Qwen3-VL's: the sections row when the
# config has ``mrope_section`` (the Qwen3-ASR configs do not), ``n_deepstack_layers`` 0,
# the ChatML template and BOS / EOS both ``<|im_end|>`` (tokenizer route ``qwen3asr``)
QWEN3ASR = replace(
    QWEN3VL,
    hf_archs=("Qwen3ASRForConditionalGeneration",),
    meta=[
        *_with_sections(list(COMMON)),
        m("n_deepstack_layers", "_deepstack", value=lambda cfg: 0),
    ],
    renames=((r"^thinker\.", ""),),
    tokenizer={"vocab": "qwen3asr"},
)
