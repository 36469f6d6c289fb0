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

from ._common import BASE_NAMES, BLK, COMMON, FFN_NORM, LAYER
from ._model import Arch, NameRule, Stack, m
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


def _shexp_ff(cfg: dict) -> int | None:
    """Ernie4_5MoeModel's shared-expert width: ``intermediate_size // num_key_value_heads``
    (the reference's formula: it equals ``moe_intermediate_size * moe_num_shared_experts``
    in the published models, which is what transformers builds), with shared experts."""
    shared, ff, kv = (cfg.get(k) for k in ("moe_num_shared_experts", "intermediate_size",
                                            "num_key_value_heads"))  # fmt: skip
    return ff // kv if shared and ff is not None and kv else None


_MOE = LAYER + "mlp."

# Ernie4_5MoeModel: the dense rows, then the expert rows (after general.file_type, as
# the reference adds them); per-expert gate / up / down stacked (emitted in that order
# when a layer's last expert is read); the router (F32), its score-correction bias
# (``moe_statics``) and the shared experts; the MTP block of the Hub's checkpoints is
# not converted (as the reference)
ERNIE4_5_MOE = Arch(
    hf_archs=("Ernie4_5_MoeForCausalLM",),
    gguf_arch="ernie4_5-moe",
    meta=[
        *COMMON,
        m("expert_count", "moe_num_experts"),
        m("expert_used_count", "moe_k"),
        m("interleave_moe_layer_step", "moe_layer_interval"),
        m("leading_dense_block_count", "moe_layer_start_index"),
        m("expert_feed_forward_length", "moe_intermediate_size"),
        m("expert_shared_count", "moe_num_shared_experts"),
        m("expert_shared_feed_forward_length", "_shexp_ff", value=_shexp_ff),
    ],
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        NameRule(_MOE + "gate.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(_MOE + "moe_statics.e_score_correction_bias", BLK + "exp_probs_b.bias"),
        NameRule(_MOE + "shared_experts.gate_proj.weight", BLK + "ffn_gate_shexp.weight"),
        NameRule(_MOE + "shared_experts.up_proj.weight", BLK + "ffn_up_shexp.weight"),
        NameRule(_MOE + "shared_experts.down_proj.weight", BLK + "ffn_down_shexp.weight"),
    ],
    stacks=[
        Stack(
            _MOE + f"experts.{{xid}}.{w}_proj.weight",
            BLK + f"ffn_{w}_exps.weight",
            lambda cfg: cfg["moe_num_experts"],
        )
        for w in ("gate", "up", "down")
    ],
    skip=(
        *ERNIE4_5.skip,
        r"^model\.mtp_block\.\d+",
        r"^model\.mtp_emb_norm\.\d+",
        r"^model\.mtp_hidden_norm\.\d+",
        r"^model\.mtp_linear_proj\.\d+",
    ),
    renames=ERNIE4_5.renames,
    required=(*Arch.__dataclass_fields__["required"].default, "moe_num_experts", "moe_k"),
    tokenizer={"vocab": "ernie"},
    model_types={"Ernie4_5_MoeForCausalLM": "ernie4_5_moe"},
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "use_bias": "blk.0.attn_q.bias" in names,
    },
)
