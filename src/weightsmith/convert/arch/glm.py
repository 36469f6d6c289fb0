"""GLM-4 (dense) and GLM-4.5 / GLM-4.6 MoE: conversion/glm.py ``Glm4Model`` (GGUF
``glm4``) and ``Glm4MoeModel`` (GGUF ``glm4moe``).

GLM-4-0414 (``glm4``): TextModel's rows then ``rope.dimension_count`` (``head_dim *
partial_rotary_factor``, interleaved pairs as llama.cpp's normal RoPE runs them: no Q/K
permutation), the fused ``mlp.gate_up_proj`` kept as ``ffn_up`` (gate rows first), and
four norms a layer: ``input_layernorm`` (``attn_norm``), ``post_self_attn_layernorm``
(``post_attention_norm``), ``post_attention_layernorm`` (``ffn_norm``) and
``post_mlp_layernorm`` (``post_ffw_norm``).  Its vocabulary is the ``glm4`` route (GLM
Edge's special tokens: eos, unk and bos ``<|endoftext|>``, eot ``<|user|>``).

GLM-4V's text half (``Glm4vForConditionalGeneration``, also ``glm4``) is the same model
with its RoPE in MRoPE sections: the ``rope.dimension_sections`` row (before
``rope.freq_base``) and, since llama.cpp's M-RoPE kernel rotates NeoX halves, the rotated
part of each Q/K head (weights and biases) reordered from interleaved pairs to halves
(``normal_to_neox``: even rows, then odd rows, the unrotated rest kept).  GGUF -> HF of
that file alone is not offered (:data:`GLM4V_TEXT` has no HF class: the sections say
which it is); with its projector it converts back as the whole model (``_mmproj_to_hf``).
GLM-OCR's (``GlmOcrForConditionalGeneration``, ``glm4``: ``GlmOCRModel``) is GLM-4V's
plus its multi-token-prediction block after the trunk, counted in ``block_count`` and
written as ``blk.N.nextn.*`` with ``nextn_predict_layers`` last, as for GLM-4.5 (the
sections and that row say which it is).
GLM-4.5V's (``Glm4vMoeForConditionalGeneration``, ``glm4moe``) is GLM-4.5's with the
sections row only: its text model rotates NeoX halves already; alone refused by GGUF ->
HF too.

Sigmoid-gated experts in groups with a score-correction bias (``exp_probs_b``), shared
experts, the first ``first_k_dense_replace`` layers dense, partial NeoX RoPE (no Q/K
permutation: the HF rotary is rotate-half already; ``rope.dimension_count`` is
``head_dim * partial_rotary_factor``).  Experts come per expert, stacked per layer
(``down``, ``gate``, ``up``) when a layer's last one is read.

The checkpoints append ``num_nextn_predict_layers`` multi-token-prediction blocks
after the trunk (``model.layers.<num_hidden_layers>.*``: a full decoder layer plus
``eh_proj``, ``enorm``, ``hnorm``, ``shared_head.*``, ``embed_tokens``); llama.cpp
counts them in ``block_count`` and writes them as ``blk.N.nextn.*``.  GGUF -> HF gives
``num_hidden_layers`` back as ``block_count - nextn_predict_layers``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    LAYER,
    NEXTN_NAMES,
    QK_NORM,
    expert_stacks,
    layer_rules,
    replace_rows,
)
from ._model import (
    APPENDED_MTP,
    VT,
    Arch,
    MetaKey,
    NameRule,
    PlanError,
    Transform,
    full_rope,
    head_counts,
    head_dim,
    m,
)


def _n_routed(cfg: dict) -> int:
    return cfg["n_routed_experts"]


def _block_count(cfg: dict) -> int:
    return cfg["num_hidden_layers"] + cfg.get("num_nextn_predict_layers", 0)


def _rope_dim(cfg: dict) -> int:
    return int(head_dim(cfg) * full_rope(cfg).get("partial_rotary_factor", 0.5))


# COMMON, the trunk plus the MTP blocks as block_count, then Glm4MoeModel's rows
_ROWS = [
    *replace_rows(
        COMMON,
        block_count=m("block_count", "num_hidden_layers", value=_block_count),
        expert_count=m("expert_count", "n_routed_experts"),
    ),
    m("rope.dimension_count", "_rope_dimension_count", value=_rope_dim),
    m("expert_count", "n_routed_experts"),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_count", "n_shared_experts"),
    m("leading_dense_block_count", "first_k_dense_replace"),
    # always sigmoid (the same key as COMMON's scoring_func row: replaced in place)
    m("expert_gating_func", "_gating", value=lambda c: 2),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
    m("expert_weights_norm", "norm_topk_prob", t=VT.BOOL),
    m("nextn_predict_layers", "num_nextn_predict_layers"),
]

_MLP = LAYER + "mlp."


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    nextn = cfg.get("num_nextn_predict_layers", 0)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return {
        "hidden_act": "silu",
        "num_hidden_layers": cfg["num_hidden_layers"] - nextn,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "use_qk_norm": "blk.0.attn_q_norm.weight" in names,
        "partial_rotary_factor": cfg.get("_rope_dimension_count", hd // 2) / hd,
        "first_k_dense_replace": cfg.get("first_k_dense_replace", 0),
    }


GLM4MOE = Arch(
    hf_archs=("Glm4MoeForCausalLM",),
    gguf_arch="glm4moe",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *QK_NORM,
        *layer_rules(
            [
                ("post_attention_layernorm", "post_attention_norm"),
                ("mlp.gate", "ffn_gate_inp"),
                ("mlp.shared_experts.gate_proj", "ffn_gate_shexp"),
                ("mlp.shared_experts.up_proj", "ffn_up_shexp"),
                ("mlp.shared_experts.down_proj", "ffn_down_shexp"),
            ]
        ),
        *NEXTN_NAMES,
        NameRule(_MLP + "gate.e_score_correction_bias", BLK + "exp_probs_b.bias"),
    ],
    stacks=expert_stacks(_n_routed),
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "n_routed_experts",
    ),
    tokenizer={"vocab": "glm"},
    model_types={"Glm4MoeForCausalLM": "glm4_moe"},
    hf_config=_hf_config,
    mtp=APPENDED_MTP,
)


def _glm4_hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    # Glm4Config's pad_token_id default (151329) is past a small vocabulary; the GGUF's
    # padding id, if any, replaces this None
    return {
        "hidden_act": "silu",
        "pad_token_id": None,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "partial_rotary_factor": cfg.get("_rope_dimension_count", hd // 2) / hd,
    }


def _sections(cfg: dict) -> list[int] | None:
    sec = full_rope(cfg).get("mrope_section")
    return None if sec is None else [*sec, 0, 0, 0, 0][:4]


def _neox_order(n_rows: int, cfg: dict) -> np.ndarray:
    """Glm4Model.normal_to_neox as a row order: per head, the rotated rows' even ones,
    then their odd ones, then the unrotated rest."""
    hd = head_dim(cfg)
    rot = _rope_dim(cfg)
    if rot % 2 or n_rows % hd:
        raise ValueError(f"{n_rows} rows are not heads of {hd} with {rot} rotated (even)")
    one = np.concatenate([np.arange(0, rot, 2), np.arange(1, rot, 2), np.arange(rot, hd)])
    return (np.arange(n_rows // hd)[:, None] * hd + one).reshape(-1)


def _neox(which: int, back: bool = False):
    """Q (``which`` 0) or K (1) rows to NeoX order (``back``: from it), for M-RoPE only."""

    def fn(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
        if _sections(cfg) is None:  # the reference permutes for M-RoPE only
            return x
        heads = head_counts(cfg)[which]
        if x.shape[0] != heads * head_dim(cfg):
            raise ValueError(f"{x.shape[0]} rows are not {heads} heads of {head_dim(cfg)}")
        order = _neox_order(x.shape[0], cfg)
        return x[np.argsort(order) if back else order]

    return fn


def _with_sections(rows: list) -> list:
    """TextModel's rows with ``rope.dimension_sections`` before ``rope.freq_base`` (written
    when the config has ``mrope_section``)."""
    at = next(i for i, r in enumerate(rows) if isinstance(r, MetaKey) and r.key == "rope.freq_base")
    row = m("rope.dimension_sections", "_mrope_section", t=VT.INT32, value=_sections)
    return [*rows[:at], row, *rows[at:]]


_GLM4_ROWS = _with_sections(
    [*COMMON, m("rope.dimension_count", "_rope_dimension_count", value=_rope_dim)]
)


def _neox_shape(which: int):
    """The shape unchanged, once the rows are checked to be heads with an even rotated
    part (the reference raises there too): a named error before anything is written."""

    def fn(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
        if _sections(cfg) is not None:
            heads, hd, rot = head_counts(cfg)[which], head_dim(cfg), _rope_dim(cfg)
            if shape[0] != heads * hd or rot % 2:
                raise PlanError(
                    "rope heads",
                    "q_proj" if which == 0 else "k_proj",
                    f"{shape[0]} rows for {heads} heads of {hd}, {rot} of them rotated "
                    "(M-RoPE reorders an even rotated part per head)",
                )
        return shape

    return fn


#: Glm4Model.modify_tensors: Q/K to NeoX order when the RoPE is in sections
_GLM4_TRANSFORMS = [
    Transform(
        f"neox_{w}",
        rf"{w}_proj\.(weight|bias)$",
        _neox(i),
        _neox(i, back=True),
        shape=_neox_shape(i),
    )
    for i, w in enumerate("qk")
]

#: the dense layer: the fused rule first, so GGUF -> HF maps ffn_up back to gate_up_proj
GLM4_LAYER = [
    NameRule(LAYER + "mlp.gate_up_proj.weight", BLK + "ffn_up.weight"),
    *BASE_NAMES,
    *layer_rules(
        [
            ("post_self_attn_layernorm", "post_attention_norm"),
            ("post_attention_layernorm", "ffn_norm"),
            ("post_mlp_layernorm", "post_ffw_norm"),
        ]
    ),
]

GLM4 = Arch(
    hf_archs=("Glm4ForCausalLM",),
    gguf_arch="glm4",
    meta=_GLM4_ROWS,
    names=GLM4_LAYER,
    transforms=_GLM4_TRANSFORMS,
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "glm4"},
    model_types={"Glm4ForCausalLM": "glm4"},
    hf_config=_glm4_hf_config,
)


# the same reference class for GLM-4V; its file has no HF class of its own
GLM4V_TEXT = replace(GLM4, hf_archs=("Glm4vForConditionalGeneration",), model_types={})


# Glm4MoeModel for GLM-4.5V: GLM-4.5's rows with the sections (no Q/K reorder: this text
# model rotates NeoX halves already); its file has no HF class of its own
GLM4VMOE_TEXT = replace(
    GLM4MOE,
    hf_archs=("Glm4vMoeForConditionalGeneration",),
    meta=_with_sections(_ROWS),
    model_types={},
)


def has_sections(md) -> bool:
    """A ``glm4`` / ``glm4moe`` GGUF written from GLM-4V / GLM-4.5V (RoPE in sections)."""
    return f"{md.get('general.architecture')}.rope.dimension_sections" in md


def has_mtp_sections(md) -> bool:
    """A ``glm4`` GGUF written from GLM-OCR: sections and multi-token-prediction blocks."""
    return has_sections(md) and f"{md.get('general.architecture')}.nextn_predict_layers" in md


def _glmocr_hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    # block_count counts the MTP blocks after the trunk (as for GLM-4.5)
    nextn = cfg.get("num_nextn_predict_layers", 0)
    return {**_glm4_hf_config(cfg, names), "num_hidden_layers": cfg["num_hidden_layers"] - nextn}


# GlmOCRModel: GLM-4V's text half with the MTP blocks counted and their count last
GLMOCR_TEXT = replace(
    GLM4V_TEXT,
    hf_archs=("GlmOcrForConditionalGeneration",),
    hf_config=_glmocr_hf_config,
    meta=[
        *replace_rows(
            _GLM4_ROWS, block_count=m("block_count", "num_hidden_layers", value=_block_count)
        ),
        m("nextn_predict_layers", "num_nextn_predict_layers"),
    ],
    names=[*GLM4_LAYER, *NEXTN_NAMES],
)
