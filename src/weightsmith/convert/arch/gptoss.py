"""gpt-oss: conversion/gpt_oss.py ``GptOssModel`` (GGUF ``gpt-oss``).

Each layer's experts come fused, in one of two on-disk layouts:

* float (what transformers saves): ``mlp.experts.gate_up_proj`` ``[n_expert, n_embd,
  2 * n_ff]`` (inputs first) with gate and up *interleaved* along the last axis
  (gate = columns 0, 2, 4, ..., up = 1, 3, 5, ...), and ``mlp.experts.down_proj``
  ``[n_expert, n_ff, n_embd]``: llama.cpp transposes them to ggml's ``[n_expert,
  out, in]`` and takes every other row for gate and up;
* MXFP4 (the published checkpoints, ``quantization_config.quant_method = "mxfp4"``):
  ``*_blocks`` uint8 ``[n_expert, out, in / 32, 16]`` and ``*_scales`` uint8 ``[n_expert,
  out, in / 32]``, already in ggml's orientation.  They are written as ggml MXFP4
  tensors without a float round trip (:class:`~._model.Packed`), before every other
  tensor, as the reference does.

Byte layouts of one 32-value block (E2M1 codes ``c0..c31``, E8M0 scale ``e``)::

    HF    blocks[j] = c[2j] | c[2j + 1] << 4          (16 bytes), scales = e
    ggml  e, qs[j]  = c[j]  | c[j + 16]  << 4         (1 + 16 bytes)

Both scales are E8M0 with bias 127 (ggml's MXFP4 values are twice E2M1, its scale
half: the same numbers), so the scale byte passes unchanged.

Biases (attention, router, per-expert ``gate_up_proj_bias`` interleaved like the
weights, ``down_proj_bias``) and the per-head attention sinks are kept (F32, 1-D or
2-D non-``.weight`` tensors).  llama.cpp hard-codes the sliding-window pattern (every
other layer, the first one sliding), which is transformers' default ``layer_types``.
"""

from __future__ import annotations

import numpy as np

from ._common import BASE_NAMES, BLK, COMMON, LAYER, layer_rules
from ._model import Arch, NameRule, Packed, Split, Transform, m

_EXP = LAYER + "mlp.experts."
_GATE_UP = (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight")


def repack_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """HF MXFP4 ``blocks [..., nb, 16]`` + ``scales [..., nb]`` -> ggml bytes ``[..., nb * 17]``."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    out = np.concatenate([scales[..., None], qs], axis=-1)
    return np.ascontiguousarray(out.reshape(*blocks.shape[:-2], blocks.shape[-2] * 17))


def _swap(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(x, -1, -2))


def _swap_shape(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2])


# gate_up_proj [E, n_embd, 2 n_ff] -> transposed, rows 0::2 (gate) and 1::2 (up)
def _gate_up(x: np.ndarray, cfg: dict) -> list[np.ndarray]:
    t = np.swapaxes(x, -1, -2)
    return [t[..., 0::2, :], t[..., 1::2, :]]


def _gate_up_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    part = (*shape[:-2], shape[-1] // 2, shape[-2])
    return [part, part]


def _gate_up_join(parts: list[np.ndarray], cfg: dict) -> np.ndarray:
    g, u = parts
    rows = np.stack([g, u], axis=-2).reshape(*g.shape[:-2], 2 * g.shape[-2], g.shape[-1])
    return np.ascontiguousarray(np.swapaxes(rows, -1, -2))


def _hf_config(cfg: dict, names: set[str]) -> dict:
    # pad_token_id: the class default may be past a small vocabulary; the GGUF's wins
    out: dict = {"hidden_act": "silu", "attention_bias": True, "pad_token_id": None}
    rs = cfg.get("rope_scaling")
    if isinstance(rs, dict) and rs.get("type") == "yarn":
        # gpt-oss's YaRN does not truncate its correction range; GGUF has no key for it
        out["rope_scaling"] = {**rs, "truncate": False}
    return out


GPT_OSS = Arch(
    hf_archs=("GptOssForCausalLM",),
    gguf_arch="gpt-oss",
    meta=[
        *COMMON,
        m("attention.sliding_window", "sliding_window"),
        m("expert_feed_forward_length", "intermediate_size"),
    ],
    names=[
        *BASE_NAMES,
        *layer_rules([("post_attention_layernorm", "post_attention_norm")]),
        NameRule(LAYER + "self_attn.sinks", BLK + "attn_sinks.weight"),
        NameRule(LAYER + "mlp.router.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(LAYER + "mlp.router.bias", BLK + "ffn_gate_inp.bias"),
        NameRule(_EXP + "down_proj", BLK + "ffn_down_exps.weight"),
        NameRule(_EXP + "down_proj_bias", BLK + "ffn_down_exps.bias"),
    ],
    transforms=[
        Transform(
            "experts_transpose",
            r"mlp\.experts\.down_proj$",
            _swap,
            _swap,
            _swap_shape,
            inverse_shape=_swap_shape,
        ),
    ],
    splits=[
        Split(
            _EXP + "gate_up_proj",
            _GATE_UP,
            fn=_gate_up,
            shapes=_gate_up_shapes,
            join=_gate_up_join,
        ),
        Split(
            _EXP + "gate_up_proj_bias",
            (BLK + "ffn_gate_exps.bias", BLK + "ffn_up_exps.bias"),
            axis=-1,
            interleave=True,
        ),
    ],
    packed=[
        Packed(_EXP + "down_proj", (BLK + "ffn_down_exps.weight",), repack_mxfp4),
        Packed(_EXP + "gate_up_proj", _GATE_UP, repack_mxfp4, interleave=True),
    ],
    tokenizer={"vocab": "gpt2"},
    model_types={"GptOssForCausalLM": "gpt_oss"},
    hf_config=_hf_config,
)
