"""Youtu-LLM and Youtu-VL's text: conversion/deepseek.py's ``DeepseekV2Model`` registers
``YoutuForCausalLM`` and ``YoutuVLForConditionalGeneration`` (GGUF ``deepseek2``).

DeepSeek-V3's multi-head latent attention with a dense MLP in every layer (no experts):
the ``deepseek2`` entry's rows give ``leading_dense_block_count`` = the layer count,
``expert_feed_forward_length`` = ``intermediate_size`` and ``expert_shared_count`` 0, as
the reference writes them for it.  A tied head is not written (llama.cpp reuses the
embedding).  GGUF -> HF gives a ``YoutuForCausalLM`` back for a ``deepseek2`` file without
experts (:func:`is_dense`: DeepSeek-V2 / V3 files have them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .deepseek import DEEPSEEK2


def is_dense(md: Mapping[str, Any]) -> bool:
    """A ``deepseek2`` file without routed experts: Youtu's layout."""
    return "deepseek2.expert_count" not in md


YOUTU = replace(
    DEEPSEEK2,
    hf_archs=("YoutuForCausalLM", "YoutuVLForConditionalGeneration"),
    stacks=[],
    model_types={"YoutuForCausalLM": "youtu"},
    hf_config=lambda cfg, names: {
        **DEEPSEEK2.hf_config(cfg, names),
        "rope_interleave": True,
        "attention_bias": False,
    },
)
