"""Falcon-H1: conversion/falcon_h1.py's ``FalconH1Model`` (GGUF ``falcon-h1``).

A parallel hybrid: every layer runs attention (RoPE, rotate-half: no Q/K permutation,
llama.cpp ropes it NEOX-style) and a Mamba 2 mixer on the same normed input, adds both
to the residual, then a SwiGLU MLP behind ``pre_ff_layernorm``.  The reference class is
a ``Mamba2Model`` that reads ``config.json`` as written (no AutoConfig) and looks every
field up also with a ``mamba_`` prefix (``mamba_d_conv``, ``mamba_n_groups``, ...).

**muP multipliers folded into the weights**, as the reference does (its
``modify_tensors``; llama.cpp's graph has no multipliers):

* ``embed_tokens`` x ``embedding_multiplier``; ``lm_head`` x ``lm_head_multiplier``;
* ``gate_proj`` x ``mlp_multipliers[0]``, ``down_proj`` x ``mlp_multipliers[1]``;
* ``q_proj`` / ``v_proj`` x ``attention_in_multiplier``, ``k_proj`` x ``key_multiplier``
  then x ``attention_in_multiplier`` (two roundings, in that order), ``o_proj`` x
  ``attention_out_multiplier``;
* the mixer's ``out_proj`` x ``ssm_out_multiplier``; ``in_proj`` x ``ssm_in_multiplier``
  and then its row blocks z, x, B, C, dt (``mamba_d_ssm``, ``mamba_d_ssm``,
  ``groups * state``, ``groups * state``, the rest) x ``ssm_multipliers[0..4]``.

Each product is one float32 multiply rounded to the tensor's own type (float16 stays
float16, everything else was widened to float32), as torch's ``tensor * python_float``
computes it.  Biases of those layers are scaled as their weights (the reference matches
on the name); an ``in_proj`` bias (``mamba_proj_bias``) is not mapped: the reference
cannot convert it (its row slicing assumes a matrix) and transformers would scale it by
the ``ssm_multipliers`` alone.  A missing multiplier is transformers' default (1) here;
the reference needs every one in ``config.json``.

The other tensors get the Mamba 2 ops (:mod:`.mamba`): ``A = -exp(A_log)`` and ``D`` as
columns, conv weight squeezed, the gated norm as ``[n_group, d_inner / n_group]``,
``dt_bias`` -> ``ssm_dt.bias``.

Rows: Mamba 2's, in its order, with the values Falcon-H1 writes over them in place
(context length, feed-forward length, head count), then ``vocab_size``, ``head_count_kv``,
``key_length`` / ``value_length`` (``head_dim``) and ``rope.freq_base``.  The vocabulary
is always the ``tokenizer.json`` BPE (``gpt2``), unpadded.

GGUF -> HF writes the folded weights as they are and every multiplier as 1 (the GGUF does
not keep them; the model computes the same function), ``mamba_rms_norm`` from the
presence of ``ssm_norm``, and ``mamba_norm_before_gate = False`` (llama.cpp gates, then
norms).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import BLK
from ._model import FILE_TYPE, VT, Arch, NameRule, Transform, first, full_rope, m
from .mamba import MAMBA2

_L = "model.layers.{bid}."


def _find(cfg: dict, keys: tuple[str, ...]) -> Any:
    """FalconH1Model.find_hparam: the keys, then each with the ``mamba_`` prefix."""
    return first(cfg, (*keys, *(f"mamba_{k}" for k in keys)))


def _inner(cfg: dict) -> int:
    return _find(cfg, ("mamba_d_ssm",))


def _n_heads(cfg: dict) -> int:
    head = _find(cfg, ("mamba_d_head", "head_dim")) or 64
    return _inner(cfg) // head


def _times(x: np.ndarray, k: float) -> np.ndarray:
    """``x * k`` as torch computes ``tensor * python_float``: one float32 product rounded
    to the tensor's type."""
    y = x.astype(np.float32) * np.float32(k)
    return y if x.dtype == np.float32 else y.astype(x.dtype)


def _mult(cfg: dict, key: str) -> float:
    v = cfg.get(key)
    return 1.0 if v is None else v


def _list_mult(cfg: dict, key: str, i: int) -> float:
    v = cfg.get(key)
    return 1.0 if v is None else v[i]


def _scale(name: str, pattern: str, factors) -> Transform:
    """Multiply by ``factors(cfg)`` in turn; back: as is (GGUF -> HF writes multipliers 1)."""

    def fwd(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
        for k in factors(cfg):
            x = _times(x, k)
        return x

    return Transform(name, pattern, fwd, lambda x, cfg, ctx: x, exact=False)


def _in_proj(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    y = _times(x, _mult(cfg, "ssm_in_multiplier"))
    d, gs = cfg["mamba_d_ssm"], cfg["mamba_n_groups"] * cfg["mamba_d_state"]
    bounds = (0, d, 2 * d, 2 * d + gs, 2 * d + 2 * gs, y.shape[0])
    for i in range(5):
        a, b = bounds[i], bounds[i + 1]
        y[a:b] = _times(y[a:b], _list_mult(cfg, "ssm_multipliers", i))
    return y


_WB = r"\.(weight|bias)$"
_MULTIPLIERS = [
    _scale("mup_embedding", r"^model\.embed_tokens\.weight$",
           lambda c: [_mult(c, "embedding_multiplier")]),
    _scale("mup_lm_head", r"^lm_head\.weight$", lambda c: [_mult(c, "lm_head_multiplier")]),
    _scale("mup_gate", r"feed_forward\.gate_proj" + _WB,
           lambda c: [_list_mult(c, "mlp_multipliers", 0)]),
    _scale("mup_down", r"feed_forward\.down_proj" + _WB,
           lambda c: [_list_mult(c, "mlp_multipliers", 1)]),
    _scale("mup_q", r"self_attn\.q_proj" + _WB, lambda c: [_mult(c, "attention_in_multiplier")]),
    _scale("mup_k", r"self_attn\.k_proj" + _WB,
           lambda c: [_mult(c, "key_multiplier"), _mult(c, "attention_in_multiplier")]),
    _scale("mup_v", r"self_attn\.v_proj" + _WB, lambda c: [_mult(c, "attention_in_multiplier")]),
    _scale("mup_o", r"self_attn\.o_proj" + _WB, lambda c: [_mult(c, "attention_out_multiplier")]),
    _scale("mup_ssm_out", r"mamba\.out_proj" + _WB, lambda c: [_mult(c, "ssm_out_multiplier")]),
    Transform("mup_ssm_in", r"mamba\.in_proj\.weight$", _in_proj, lambda x, cfg, ctx: x,
              exact=False),
]  # fmt: skip


def _hf(cfg: dict, names: set[str]) -> dict:
    return {
        "mamba_d_head": cfg["mamba_d_ssm"] // cfg["mamba_n_heads"],
        "mamba_conv_bias": "blk.0.ssm_conv1d.bias" in names,
        "mamba_proj_bias": False,
        "mamba_rms_norm": "blk.0.ssm_norm.weight" in names,
        "mamba_norm_before_gate": False,
        "projectors_bias": "blk.0.ssm_out.bias" in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": "blk.0.ffn_up.bias" in names,
        "hidden_act": "silu",
        # folded into the weights
        "embedding_multiplier": 1.0,
        "lm_head_multiplier": 1.0,
        "mlp_multipliers": [1.0, 1.0],
        "key_multiplier": 1.0,
        "attention_in_multiplier": 1.0,
        "attention_out_multiplier": 1.0,
        "ssm_in_multiplier": 1.0,
        "ssm_out_multiplier": 1.0,
        "ssm_multipliers": [1.0] * 5,
    }


def _pairs(pairs: list[tuple[str, str]], bias: bool = True) -> list[NameRule]:
    sufs = (".weight", ".bias") if bias else (".weight",)
    return [NameRule(_L + h + s, BLK + g + s) for h, g in pairs for s in sufs]


FALCON_H1 = Arch(
    hf_archs=("FalconH1ForCausalLM",),
    gguf_arch="falcon-h1",
    # Mamba2Model.set_gguf_parameters with FalconH1Model's values written over its rows
    # in place, then FalconH1Model's own rows
    meta=[
        m(
            "context_length",
            "max_position_embeddings",
            value=lambda c: c.get("max_position_embeddings", 0),
        ),
        m(
            "embedding_length",
            "hidden_size",
            value=lambda c: _find(c, ("hidden_size", "d_model", "dim")),
        ),
        m("feed_forward_length", "intermediate_size", value=lambda c: c["intermediate_size"]),
        m("attention.head_count", "num_attention_heads", value=lambda c: c["num_attention_heads"]),
        m(
            "block_count",
            "num_hidden_layers",
            value=lambda c: _find(c, ("n_layers", "num_hidden_layers", "n_layer", "num_layers")),
        ),
        m(
            "ssm.conv_kernel",
            "mamba_d_conv",
            value=lambda c: _find(c, ("conv_kernel", "d_conv")) or 4,
        ),
        m("ssm.inner_size", "mamba_d_ssm", value=_inner),
        m(
            "ssm.state_size",
            "mamba_d_state",
            value=lambda c: _find(c, ("state_size", "d_state")) or 128,
        ),
        m("ssm.time_step_rank", "mamba_n_heads", value=_n_heads),
        m("ssm.group_count", "mamba_n_groups", value=lambda c: _find(c, ("n_groups",))),
        m(
            "attention.layer_norm_rms_epsilon",
            "rms_norm_eps",
            t=VT.FLOAT32,
            value=lambda c: _find(c, ("layer_norm_epsilon", "rms_norm_eps")) or 1e-5,
        ),
        FILE_TYPE,
        m("vocab_size", "vocab_size", value=lambda c: c["vocab_size"]),
        m(
            "attention.head_count_kv",
            "num_key_value_heads",
            value=lambda c: c["num_key_value_heads"],
        ),
        m("attention.key_length", "head_dim", value=lambda c: c["head_dim"]),
        m("attention.value_length", "head_dim", value=lambda c: c["head_dim"]),
        m(
            "rope.freq_base",
            "rope_theta",
            t=VT.FLOAT32,
            value=lambda c: full_rope(c).get("rope_theta"),
        ),
    ],
    names=[
        NameRule("model.embed_tokens.weight", "token_embd.weight"),
        NameRule("model.final_layernorm.weight", "output_norm.weight"),
        NameRule("lm_head.weight", "output.weight"),
        NameRule(_L + "input_layernorm.weight", BLK + "attn_norm.weight"),
        # gguf-py maps the whole name to FFN_PRE_NORM's "ffn_norm", and llama.cpp loads
        # it under that name: no ".weight"
        NameRule(_L + "pre_ff_layernorm.weight", BLK + "ffn_norm"),
        *_pairs(
            [
                ("self_attn.q_proj", "attn_q"),
                ("self_attn.k_proj", "attn_k"),
                ("self_attn.v_proj", "attn_v"),
                ("self_attn.o_proj", "attn_output"),
                ("feed_forward.gate_proj", "ffn_gate"),
                ("feed_forward.up_proj", "ffn_up"),
                ("feed_forward.down_proj", "ffn_down"),
                ("mamba.conv1d", "ssm_conv1d"),
                ("mamba.out_proj", "ssm_out"),
            ]
        ),
        *_pairs([("mamba.in_proj", "ssm_in"), ("mamba.norm", "ssm_norm")], bias=False),
        NameRule(_L + "mamba.dt_bias", BLK + "ssm_dt.bias"),
        NameRule(_L + "mamba.A_log", BLK + "ssm_a"),
        NameRule(_L + "mamba.D", BLK + "ssm_d"),
    ],
    transforms=[*MAMBA2.transforms, *_MULTIPLIERS],
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "intermediate_size",
        "head_dim",
        "mamba_d_ssm",
        "mamba_n_groups",
        "mamba_d_state",
        "vocab_size",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"FalconH1ForCausalLM": "falcon_h1"},
    hf_config=_hf,
)
