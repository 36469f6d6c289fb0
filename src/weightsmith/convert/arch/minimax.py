"""MiniMax-M3: conversion/minimax.py ``MiniMaxM3Model`` (GGUF ``minimax-m3``).

MiniMax-M2's layout (GQA with per-head Q/K RMS norms, partial RoPE over ``rotary_dim``,
MoE layers under ``block_sparse_moe`` with per-expert ``w1`` / ``w2`` / ``w3`` stacked
into ``ffn_gate_exps`` / ``ffn_down_exps`` / ``ffn_up_exps`` once a layer's last expert is
read, a sigmoid router with ``e_score_correction_bias``) plus a shared expert, leading
dense layers (``moe_layer_freq`` zeros) and the lightning indexer of MiniMax Sparse
Attention (``self_attn.index_{q,k}_{proj,norm}`` -> ``indexer.*``, always F32).  Every
RMS norm is Gemma-style (``1 + w``): the reference adds the 1 to each ``*norm.weight``.
The rows read the Hub's config fields (``n_shared_experts``, ``sparse_attention_config``,
``moe_layer_freq``, ``rotary_dim``), which transformers 5's ``MiniMaxM3VLTextConfig``
drops or renames.

GGUF -> HF: the text alone is refused (no model type); with its projector it goes back
into ``MiniMaxM3SparseForConditionalGeneration`` with :func:`_hf_config`'s fields.

The vision tower's Q / K reorder (:func:`vision_qk`) is here too; its projector entry is
:data:`~.mmproj.MINIMAXM3_VISION`.
"""

from __future__ import annotations

import numpy as np

from ._common import BASE_NAMES, BLK, COMMON, GEMMA_NORM, LAYER, QK_NORM, layer_rules
from ._model import FILE_TYPE, VT, Arch, MetaKey, NameRule, Stack, m

_MOE = LAYER + "block_sparse_moe."


def _sparse(key: str):
    return lambda c: c["sparse_attention_config"][key]


def _leading_dense(cfg: dict) -> int:
    n = 0
    for v in cfg["moe_layer_freq"]:
        if v != 0:
            break
        n += 1
    return n


# TextModel's rows, then MiniMaxM2Model's and MiniMaxM3Model's
_ROWS: list[MetaKey | str] = [
    *COMMON,
    m("expert_feed_forward_length", "intermediate_size"),
    m("rope.dimension_count", "rotary_dim"),
    m("expert_shared_count", "n_shared_experts"),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
    m("expert_weights_norm", "_expert_weights_norm", t=VT.BOOL, value=lambda c: True),
    # the dotted fields: GGUF -> HF writes them back into the Hub's dict
    m("attention.indexer.head_count", "sparse_attention_config.sparse_num_index_heads",
      value=_sparse("sparse_num_index_heads")),
    m("attention.indexer.key_length", "sparse_attention_config.sparse_index_dim",
      value=_sparse("sparse_index_dim")),
    m("attention.indexer.top_k", "sparse_attention_config.sparse_topk_blocks",
      value=_sparse("sparse_topk_blocks")),
    m("attention.indexer.block_size", "sparse_attention_config.sparse_block_size",
      value=_sparse("sparse_block_size")),
    m("attention.indexer.local_blocks", "sparse_attention_config.sparse_local_block",
      value=_sparse("sparse_local_block")),
    m("leading_dense_block_count", "_leading_dense", value=lambda c: _leading_dense(c)),
]  # fmt: skip
assert FILE_TYPE in _ROWS


def _n_experts(cfg: dict) -> int:
    return cfg.get("num_local_experts", cfg.get("num_experts"))


def _hf_config(cfg: dict, names: set[str]) -> dict:
    """The text config both the reference (the Hub's fields) and transformers 5.24's
    MiniMaxM3VLTextConfig (its own spellings) read, from the rows and the tensors: the
    leading dense layers (``leading_dense_block_count``), the indexer's layers (those
    with ``indexer.*`` tensors), the dense and shared MLP widths (shapes)."""
    n = cfg["num_hidden_layers"]
    dense = cfg.get("_leading_dense", 0)
    sparse = [int(f"blk.{i}.indexer.q_proj.weight" in names) for i in range(n)]
    shapes = cfg["_shapes"]
    idx = cfg.get("sparse_attention_config", {})
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    out = {
        # the Hub's fields (the reference's rows read them)
        "moe_layer_freq": [0] * dense + [1] * (n - dense),
        "scoring_func": "sigmoid",
        "sparse_attention_config": {**idx, "sparse_attention_freq": sparse},
        # transformers' own
        "mlp_layer_types": ["dense"] * dense + ["sparse"] * (n - dense),
        "layer_types": ["minimax_m3_sparse" if f else "full_attention" for f in sparse],
        "index_n_heads": idx.get("sparse_num_index_heads"),
        "index_head_dim": idx.get("sparse_index_dim"),
        "index_topk_blocks": idx.get("sparse_topk_blocks"),
        "index_block_size": idx.get("sparse_block_size"),
        "index_local_blocks": idx.get("sparse_local_block"),
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": cfg.get("rope_theta", 10000.0),
            "partial_rotary_factor": cfg["rotary_dim"] / head_dim,
        },
    }
    # numpy order [n_expert, n_ff, n_embd]: the experts' width (the rows give the
    # dense MLP's first)
    exps = next((s for k, s in shapes.items() if k.endswith("ffn_up_exps.weight")), None)
    if exps is not None:
        out["intermediate_size"] = exps[1]
    if dense:  # numpy order [out, in]: the dense MLP's width
        out["dense_intermediate_size"] = shapes["blk.0.ffn_up.weight"][0]
    shexp = next((s for k, s in shapes.items() if k.endswith("ffn_up_shexp.weight")), None)
    if shexp is not None:
        out["shared_intermediate_size"] = shexp[0]
    return {k: v for k, v in out.items() if v is not None}


MINIMAX_M3 = Arch(
    hf_archs=("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"),
    gguf_arch="minimax-m3",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *QK_NORM,
        *layer_rules(
            [
                ("post_attention_layernorm", "ffn_norm"),
                ("self_attn.index_q_proj", "indexer.q_proj"),
                ("self_attn.index_k_proj", "indexer.k_proj"),
                ("self_attn.index_q_norm", "indexer.q_norm"),
                ("self_attn.index_k_norm", "indexer.k_norm"),
                ("block_sparse_moe.gate", "ffn_gate_inp"),
                ("block_sparse_moe.shared_experts.gate_proj", "ffn_gate_shexp"),
                ("block_sparse_moe.shared_experts.up_proj", "ffn_up_shexp"),
                ("block_sparse_moe.shared_experts.down_proj", "ffn_down_shexp"),
            ]
        ),
        NameRule(_MOE + "e_score_correction_bias", BLK + "exp_probs_b.bias"),
    ],
    stacks=[
        Stack(_MOE + "experts.{xid}." + w + ".weight", BLK + f"ffn_{g}_exps.weight", _n_experts)
        for w, g in (("w1", "gate"), ("w2", "down"), ("w3", "up"))
    ],
    transforms=[GEMMA_NORM],
    # the class's tensor_force_quant: the indexer F32 at every float outtype
    source_type=lambda name, dtype, ndim: "F32" if ".indexer." in name else None,
    # the Hub's fields the rows read (transformers 5.24's config drops them)
    present=("sparse_attention_config", "moe_layer_freq"),
    # no model type: transformers' text class (MiniMaxM3VLForCausalLM) keeps fused experts
    # in its own layout, so the text alone is refused; with its projector the text goes
    # back into MiniMaxM3SparseForConditionalGeneration's Hub layout (per-expert weights)
    hf_config=lambda cfg, names: _hf_config(cfg, names),
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "intermediate_size",
        "vocab_size",
        "rotary_dim",
        "n_shared_experts",
    ),
    tokenizer={"vocab": "gpt2"},
)


# --------------------------------------------------------------------------- vision tower

#: the head width the reference's MiniMaxM3VisionModel accepts (it asserts it)
VISION_HEAD_DIM = 80


def vision_head_dim(v: dict) -> int:
    """The tower's head width, checked as the reference asserts it (a ValueError the
    planner names otherwise)."""
    hd = v["hidden_size"] // v["num_attention_heads"]
    if hd != VISION_HEAD_DIM or v["hidden_size"] % v["num_attention_heads"]:
        raise ValueError(f"vision head width {v['hidden_size']}/{v['num_attention_heads']} "
                         f"is not {VISION_HEAD_DIM}")  # fmt: skip
    return hd


def _axis_order(d_head: int) -> list[int]:
    """The tower's 3-D RoPE keeps each head as ``[Ta Ha Wa | Tb Hb Wb | rest]`` (a / b:
    the two rotated halves of each axis); llama.cpp wants ``[Ta Tb | Ha Hb | Wa Wb | rest]``."""
    axis = 2 * ((2 * (d_head // 2) // 3) // 2)
    ah, half = axis // 2, 3 * (axis // 2)
    order: list[int] = []
    for k in range(3):
        order += [*range(k * ah, (k + 1) * ah), *range(half + k * ah, half + (k + 1) * ah)]
    return order + list(range(2 * half, d_head))


def vision_qk(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    """Q / K rows (weight or bias) of the tower in llama.cpp's axis order, per head."""
    hd = vision_head_dim(v)
    n = x.shape[0] // hd
    return x.reshape(n, hd, *x.shape[1:])[:, _axis_order(hd)].reshape(x.shape)


def vision_qk_back(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    hd = vision_head_dim(v)
    n = x.shape[0] // hd
    return x.reshape(n, hd, *x.shape[1:])[:, np.argsort(_axis_order(hd))].reshape(x.shape)
