"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL text: conversion/qwenvl.py's ``Qwen2VLModel`` (GGUF
``qwen2vl``) and conversion/qwen3vl.py's ``Qwen3VLTextModel`` (GGUF ``qwen3vl``).

A Qwen2 (Qwen3: with Q/K norms) decoder whose RoPE is split in MRoPE sections (time,
height, width): the base rows plus ``rope.dimension_sections`` (``mrope_section`` padded
to 4, INT32 as gguf-py infers it), written before ``rope.freq_base``.  Qwen3-VL adds
``n_deepstack_layers`` (the vision tower's deepstack count: llama.cpp's input width is
``n_embd * (1 + n)``) after ``general.file_type``.  The vision tower is the projector's
(:mod:`.mmproj`).  GGUF -> HF of this text alone is not offered (no HF class is the
text half of a Qwen-VL).
"""

from __future__ import annotations

from typing import Any

from ._common import BASE_NAMES, COMMON, FFN_NORM, QK_NORM
from ._model import VT, Arch, MetaKey, m, rope_parameters


def _sections(cfg: dict) -> list[int] | None:
    sec = rope_parameters(cfg).get("mrope_section")
    return None if sec is None else [*sec, 0, 0, 0, 0][:4]


def _with_sections(rows: list[Any]) -> list[Any]:
    at = next(i for i, r in enumerate(rows) if isinstance(r, MetaKey) and r.key == "rope.freq_base")
    row = m("rope.dimension_sections", "_mrope_section", t=VT.INT32, value=_sections)
    return [*rows[:at], row, *rows[at:]]


QWEN2VL = Arch(
    hf_archs=("Qwen2_5_VLForConditionalGeneration", "Qwen2VLForConditionalGeneration"),
    gguf_arch="qwen2vl",
    meta=_with_sections(list(COMMON)),
    names=[*BASE_NAMES, *FFN_NORM],
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
    tokenizer={"vocab": "spm_or_gpt2"},
)
