"""Mamba, Mamba 2, the Granite 4 hybrid and Bamba: conversion/mamba.py's ``MambaModel``
and ``Mamba2Model``, conversion/granite.py's ``GraniteHybridModel``.

``GraniteHybridModel`` converts three layouts into one GGUF architecture
(``granitehybrid``), so three entries write it: Granite 4.0-H dense (the shared MLP is
the layer's feed-forward), Granite 4.0-H with experts (``num_local_experts`` > 0: the
fused ``input_linear`` experts split into gate/up, the router, and the shared MLP as the
shared expert) and Bamba (``feed_forward.*``, RoPE).  HF -> GGUF picks the expert entry
by the config (:data:`~weightsmith.convert.arch.VARIANTS`); GGUF -> HF tells the three
apart by the file's metadata (:data:`~weightsmith.convert.arch.GGUF_VARIANTS`): Bamba is
the one with RoPE (the reference switches RoPE on for ``BambaForCausalLM`` only, and a
Granite hybrid without SSM layers is written as ``granite``), the expert form the one
with a non-zero ``expert_count``.  That last layout (granite-4.0-micro: attention layers
only) has two entries of its own, the hybrid ones under the ``granite`` / ``granitemoe``
names, told apart from GraniteForCausalLM's files by their ``ssm.*`` rows.

Mamba (1) keeps ``A = -exp(A_log)`` as ``[d_inner, d_state]`` and has ``x_proj`` and a
full ``dt_proj``; a separate ``lm_head`` equal to the embedding is dropped, as llama.cpp
drops it (a comparison of the data: ``drop_if_same``).

Per layer the mixer's ``A_log`` becomes ``A = -exp(A_log)`` and, like ``D``, a column
``[n_head, 1]``; the conv weight ``[C, 1, K]`` is squeezed to ``[C, K]`` (F32 at every
type); the gated norm is reshaped to ``[n_group, d_inner / n_group]``; ``dt_bias`` is
``ssm_dt.bias``.  The metadata is the class's own (no base rows): a 2**20 context,
feed-forward length and head count 0, and the ``ssm.*`` sizes.  ``-exp`` is computed
with torch's float32 ``exp`` when torch is importable, as the reference does (numpy's
float32 ``exp`` may round differently); its inverse ``log(-A)`` is not exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ._common import BASE_NAMES, BLK, LAYER, PERMUTE_K, PERMUTE_Q, neg_exp
from ._model import FILE_TYPE, VT, Arch, NameRule, Split, Transform, first, m
from .granite import GRANITE_MOE_NAMES, GRANITE_MOE_SPLITS, GRANITE_ROWS, GRANITE_SHARED_FF


def _d_inner(cfg: dict) -> int:
    v = first(cfg, ("mamba_d_ssm", "intermediate_size", "d_inner"))
    expand = first(cfg, ("mamba_expand", "expand")) or 2
    return v or expand * first(cfg, ("hidden_size", "d_model", "dim"))


def _head_dim(cfg: dict) -> int:
    return first(cfg, ("mamba_d_head", "head_dim")) or 64


def _or(keys: tuple[str, ...], default):
    return lambda cfg: first(cfg, keys) or default


def _column(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return (*shape, 1)


def _uncolumn(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return tuple(shape[:-1])


def _groups(cfg: dict) -> int:
    return first(cfg, ("n_groups", "mamba_n_groups")) or 1


_TRANSFORMS = [
    Transform(
        "ssm_a_neg_exp",
        r"(mixer|mamba)\.A_log$",
        lambda x, cfg, ctx: neg_exp(x, cfg, ctx).reshape(*x.shape, 1),
        lambda x, cfg, ctx: np.log(-x.astype(np.float32)).reshape(x.shape[:-1]),
        shape=_column,
        exact=False,
        inverse_shape=_uncolumn,
    ),
    Transform(
        "ssm_d_column",
        r"(mixer|mamba)\.D$",
        lambda x, cfg, ctx: x.reshape(*x.shape, 1),
        lambda x, cfg, ctx: x.reshape(x.shape[:-1]),
        shape=_column,
        inverse_shape=_uncolumn,
    ),
    Transform(
        "ssm_conv_squeeze",
        r"(mixer|mamba)\.conv1d\.weight$",
        lambda x, cfg, ctx: x.reshape(x.shape[0], x.shape[-1]),
        lambda x, cfg, ctx: x.reshape(x.shape[0], 1, x.shape[-1]),
        shape=lambda s, cfg, ctx: (s[0], s[-1]),
        inverse_shape=lambda s, cfg, ctx: (s[0], 1, s[-1]),
    ),
    Transform(
        "ssm_norm_groups",
        r"(mixer|mamba)\.norm\.weight$",
        lambda x, cfg, ctx: x.reshape(_groups(cfg), -1),
        lambda x, cfg, ctx: x.reshape(-1),
        shape=lambda s, cfg, ctx: (_groups(cfg), s[0] // _groups(cfg)),
        inverse_shape=lambda s, cfg, ctx: (s[0] * s[1],),
    ),
]

_L = "backbone.layers.{bid}."
_M = _L + "mixer."
_B = "blk.{bid}."

# the tensors both Mamba generations name alike (each entry adds its own in between)
_SSM_NAMES = [
    NameRule("backbone.embeddings.weight", "token_embd.weight"),
    NameRule("backbone.norm_f.weight", "output_norm.weight"),
    NameRule("lm_head.weight", "output.weight"),
    NameRule(_L + "norm.weight", _B + "attn_norm.weight"),
    NameRule(_M + "A_log", _B + "ssm_a"),
    NameRule(_M + "D", _B + "ssm_d"),
    NameRule(_M + "conv1d.weight", _B + "ssm_conv1d.weight"),
    NameRule(_M + "conv1d.bias", _B + "ssm_conv1d.bias"),
]
_SSM_OUT = [
    NameRule(_M + "out_proj.weight", _B + "ssm_out.weight"),
    NameRule(_M + "out_proj.bias", _B + "ssm_out.bias"),
]

MAMBA2 = Arch(
    hf_archs=("Mamba2ForCausalLM",),
    gguf_arch="mamba2",
    # Mamba2Model.set_gguf_parameters; "_" fields are not written back to config.json
    meta=[
        m("context_length", "_context", value=lambda cfg: 2**20),
        m("embedding_length", "hidden_size", "d_model", "dim"),
        m("feed_forward_length", "_ff", value=lambda cfg: 0),
        m("attention.head_count", "_heads", value=lambda cfg: 0),
        m("block_count", "num_hidden_layers", "n_layers", "n_layer", "num_layers"),
        m("ssm.conv_kernel", "conv_kernel", value=_or(("conv_kernel", "d_conv"), 4)),
        m("ssm.inner_size", "intermediate_size", value=_d_inner),
        m("ssm.state_size", "state_size", value=_or(("state_size", "d_state"), 128)),
        m("ssm.time_step_rank", "num_heads", value=lambda c: _d_inner(c) // _head_dim(c)),
        m("ssm.group_count", "n_groups", value=_groups),
        m(
            "attention.layer_norm_rms_epsilon",
            "layer_norm_epsilon",
            t=VT.FLOAT32,
            value=_or(("layer_norm_epsilon", "rms_norm_eps"), 1e-5),
        ),
        FILE_TYPE,
    ],
    names=[
        *_SSM_NAMES,
        NameRule(_M + "dt_bias", _B + "ssm_dt.bias"),
        NameRule(_M + "in_proj.weight", _B + "ssm_in.weight"),
        NameRule(_M + "in_proj.bias", _B + "ssm_in.bias"),
        NameRule(_M + "norm.weight", _B + "ssm_norm.weight"),
        *_SSM_OUT,
    ],
    transforms=_TRANSFORMS,
    required=("hidden_size", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "llama"},
    model_types={"Mamba2ForCausalLM": "mamba2"},
    hf_config=lambda cfg, names: {
        "expand": cfg["intermediate_size"] // cfg["hidden_size"],
        "head_dim": cfg["intermediate_size"] // cfg["num_heads"],
        "use_conv_bias": "blk.0.ssm_conv1d.bias" in names,
        "use_bias": "blk.0.ssm_in.bias" in names,
        "residual_in_fp32": True,
    },
)


# --------------------------------------------------------------------------- Granite hybrid


def _mamba_layers(cfg: dict) -> list[bool]:
    """GraniteHybridModel.get_attn_layers, as a per-layer "is SSM" list."""
    n = cfg["num_hidden_layers"]
    if types := cfg.get("layer_types"):
        # transformers 5 writes full_attention / linear_attention; the pinned converter
        # reads only the Hub's attention / mamba (all-SSM otherwise: a file llama.cpp
        # cannot run); both spellings give the same file here
        attn = {i for i, t in enumerate(types) if t in ("attention", "full_attention")}
    elif idx := cfg.get("attn_layer_indices"):
        attn = set(idx)
    else:
        period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset")
        attn = {i for i in range(n) if period and i % period == offset}
    return [i not in attn for i in range(n)]


def _hybrid_kv(cfg: dict) -> list[int]:
    n_kv = first(cfg, ("num_key_value_heads", "n_head_kv"))
    return [0 if ssm else n_kv for ssm in _mamba_layers(cfg)]


def _uses_rope(cfg: dict) -> bool:
    # Bamba, or a Granite hybrid without SSM layers; Granite 4.0-H is NoPE
    return "BambaForCausalLM" in (cfg.get("architectures") or []) or not any(_mamba_layers(cfg))


def _hybrid_inner(cfg: dict) -> int:
    d_model = first(cfg, ("mamba_head_dim", "hidden_size", "d_model"))
    return first(cfg, ("expand", "num_heads", "mamba_expand", "mamba_num_heads")) * d_model


def _any(names: set[str], suffix: str) -> bool:
    # layer 0 may be of either kind: any layer that has the tensor says it
    return any(n.endswith(suffix) for n in names)


def _ssm_hf(cfg: dict, names: set[str]) -> dict:
    """The config fields of the SSM layers and the attention heads, both HF classes."""
    kv = [int(x) for x in cfg["num_key_value_heads"]]
    inner, n_heads = cfg["mamba_d_inner"], cfg["mamba_n_heads"]
    return {
        "num_key_value_heads": max(kv),
        "mamba_expand": inner // cfg["hidden_size"],
        "mamba_d_head": inner // n_heads,
        "mamba_conv_bias": _any(names, ".ssm_conv1d.bias"),
        "mamba_proj_bias": _any(names, ".ssm_in.bias"),
        "hidden_act": "silu",
        "attention_bias": _any(names, ".attn_q.bias"),
    }


def _hybrid_hf(cfg: dict, names: set[str]) -> dict:
    kv = [int(x) for x in cfg["num_key_value_heads"]]
    return {
        **_ssm_hf(cfg, names),
        "layer_types": ["mamba" if n == 0 else "attention" for n in kv],
        # the dense form's file says 0 experts (the reference writes the config's 0)
        "num_local_experts": cfg.get("num_local_experts") or 0,
        "num_experts_per_tok": cfg.get("num_experts_per_tok") or 0,
    }


def _bamba_hf(cfg: dict, names: set[str]) -> dict:
    kv = [int(x) for x in cfg["num_key_value_heads"]]
    return {
        **_ssm_hf(cfg, names),
        "attn_layer_indices": [i for i, n in enumerate(kv) if n],
        # rope.dimension_count is the rotary part (attn_rotary_emb), not the head size
        # BambaAttention reads from head_dim
        "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"],
        "attn_rotary_emb": cfg.get("_attn_rotary_emb"),
        "mlp_bias": _any(names, ".ffn_gate.bias"),
    }


def is_bamba(md: Mapping[str, Any]) -> bool:
    """A ``granitehybrid`` file written from Bamba: the one with RoPE on (a Granite hybrid
    with SSM layers is NoPE; one without is written as ``granite``)."""
    return bool(md.get("granitehybrid.rope.scaling.finetuned"))


def hybrid_has_experts(md: Mapping[str, Any]) -> bool:
    """A ``granitehybrid`` file of Granite 4.0-H with experts (tiny, small)."""
    return bool(md.get("granitehybrid.expert_count"))


_SSM = LAYER + "mamba."
_SHARED = LAYER + "shared_mlp."
# the Mamba 2 mixer rules every granitehybrid layout shares
_HYBRID_SSM_NAMES = [
    NameRule(_SSM + "A_log", BLK + "ssm_a"),
    NameRule(_SSM + "D", BLK + "ssm_d"),
    NameRule(_SSM + "conv1d.weight", BLK + "ssm_conv1d.weight"),
    NameRule(_SSM + "conv1d.bias", BLK + "ssm_conv1d.bias"),
    NameRule(_SSM + "dt_bias", BLK + "ssm_dt.bias"),
    NameRule(_SSM + "in_proj.weight", BLK + "ssm_in.weight"),
    NameRule(_SSM + "in_proj.bias", BLK + "ssm_in.bias"),
    NameRule(_SSM + "norm.weight", BLK + "ssm_norm.weight"),
    NameRule(_SSM + "out_proj.weight", BLK + "ssm_out.weight"),
    NameRule(_SSM + "out_proj.bias", BLK + "ssm_out.bias"),
]
_GRANITE_FFN_NORM = NameRule(LAYER + "post_attention_layernorm.weight", BLK + "ffn_norm.weight")
GRANITEHYBRID = Arch(
    hf_archs=("GraniteMoeHybridForCausalLM",),
    gguf_arch="granitehybrid",
    # GraniteMoeModel's rows, the ssm.* rows, then Bamba's rotary size, head_count_kv (per
    # layer) and, without RoPE, context_length re-set in place
    meta=[
        *GRANITE_ROWS,
        GRANITE_SHARED_FF,
        m(
            "ssm.conv_kernel",
            "mamba_d_conv",
            value=lambda c: first(c, ("conv_kernel", "d_conv", "mamba_d_conv")),
        ),
        m(
            "ssm.state_size",
            "mamba_d_state",
            value=lambda c: first(
                c, ("state_size", "d_state", "state_dim", "ssm_state_size", "mamba_d_state")
            ),
        ),
        m("ssm.group_count", "mamba_n_groups", value=_groups),
        m("ssm.inner_size", "mamba_d_inner", value=_hybrid_inner),
        m(
            "ssm.time_step_rank",
            "mamba_n_heads",
            value=lambda c: first(c, ("n_heads", "num_heads", "mamba_n_heads", "mamba_num_heads")),
        ),
        # Bamba's config says how much of the head is rotated; "_": back only for Bamba
        m(
            "rope.dimension_count",
            "_attn_rotary_emb",
            value=lambda c: c.get("attn_rotary_emb") or None,
        ),
        m("attention.head_count_kv", "num_key_value_heads", t=VT.INT32, value=_hybrid_kv),
        m(
            "rope.scaling.finetuned",
            "position_embedding_type",
            t=VT.BOOL,
            value=_uses_rope,
            inverse=lambda v: "rope" if v else "nope",
        ),
        m(
            "context_length",
            "max_position_embeddings",
            value=lambda c: None if _uses_rope(c) else 2**20,
        ),
    ],
    # the shared MLP's rules before the base ones: ffn_down goes back to output_linear
    names=[
        NameRule(_SHARED + "output_linear.weight", BLK + "ffn_down.weight"),
        *BASE_NAMES,
        _GRANITE_FFN_NORM,
        *_HYBRID_SSM_NAMES,
    ],
    splits=[
        Split(_SHARED + "input_linear.weight", (BLK + "ffn_gate.weight", BLK + "ffn_up.weight"), -2)
    ],
    transforms=[PERMUTE_Q, PERMUTE_K, *_TRANSFORMS],
    ignored=("head_dim",),
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "llama"},
    model_types={"GraniteMoeHybridForCausalLM": "granitemoehybrid"},
    hf_config=_hybrid_hf,
)
# Granite 4.0-H tiny / small: GraniteMoeModel's experts, router and shared expert
# (``*_shexp``), where the dense form writes the shared MLP as the FFN
GRANITEHYBRID_MOE = replace(
    GRANITEHYBRID,
    names=[*GRANITE_MOE_NAMES, *BASE_NAMES, _GRANITE_FFN_NORM, *_HYBRID_SSM_NAMES],
    splits=GRANITE_MOE_SPLITS,
)
# Bamba: the same class and rows (no multipliers in its config, RoPE on); its own
# feed-forward and norm names, which gguf-py maps as Jamba's, before the base rules so
# GGUF -> HF gives them back
BAMBA = replace(
    GRANITEHYBRID,
    hf_archs=("BambaForCausalLM",),
    names=[
        NameRule("model.final_layernorm.weight", "output_norm.weight"),
        NameRule(LAYER + "pre_ff_layernorm.weight", BLK + "ffn_norm.weight"),
        *(
            NameRule(LAYER + f"feed_forward.{w}_proj.{k}", BLK + f"ffn_{w}.{k}")
            for w in ("gate", "up", "down")
            for k in ("weight", "bias")
        ),
        *BASE_NAMES,
        *_HYBRID_SSM_NAMES,
    ],
    splits=[],
    model_types={"BambaForCausalLM": "bamba"},
    hf_config=_bamba_hf,
)


# A GraniteMoeHybrid config without SSM layers (granite-4.0-micro) is written by the same
# class under llama.cpp's plain Granite architectures (the rows, ssm.* included, and the
# names unchanged): ``granitemoe`` when the config names experts per token, else ``granite``
GRANITEHYBRID_AS_GRANITE = replace(GRANITEHYBRID, gguf_arch="granite")
GRANITEHYBRID_AS_GRANITEMOE = replace(GRANITEHYBRID_MOE, gguf_arch="granitemoe")


def attention_only(cfg: dict) -> bool:
    """A GraniteMoeHybrid config.json whose layers are all attention."""
    n = cfg.get("num_hidden_layers")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return False  # left to the config check's named error
    return not any(_mamba_layers(cfg))


def is_granitehybrid_file(md: Mapping[str, Any]) -> bool:
    """A ``granite`` / ``granitemoe`` file written by GraniteHybridModel: it has the SSM rows."""
    arch = md.get("general.architecture")
    return f"{arch}.ssm.conv_kernel" in md


# --------------------------------------------------------------------------- Mamba (1)

_PLAIN_MAMBA = {"architectures": ["MambaForCausalLM"], "model_type": "mamba"}
# the norms' own epsilon (``mixer_rms_eps``) is not in the file (llama.cpp uses the
# layer norms' one): transformers' default (1e-6) is kept
_FALCON_MAMBA = {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba"}

MAMBA = Arch(
    hf_archs=("MambaForCausalLM", "MambaLMHeadModel", "FalconMambaForCausalLM"),
    gguf_arch="mamba",
    meta=[
        m("context_length", "_context", value=lambda cfg: 2**20),
        m("embedding_length", "hidden_size", "d_model"),
        m("feed_forward_length", "_ff", value=lambda cfg: 0),
        m("attention.head_count", "_heads", value=lambda cfg: 0),
        m("block_count", "num_hidden_layers", "n_layers", "n_layer", "num_layers"),
        m("ssm.conv_kernel", "conv_kernel", value=_or(("conv_kernel", "d_conv"), 4)),
        m(
            "ssm.inner_size",
            "intermediate_size",
            value=lambda c: (
                first(c, ("intermediate_size", "d_inner"))
                or 2 * first(c, ("hidden_size", "d_model"))
            ),
        ),
        m("ssm.state_size", "state_size", value=_or(("state_size", "d_state"), 16)),
        m(
            "ssm.time_step_rank",
            "time_step_rank",
            value=lambda c: (
                first(c, ("time_step_rank", "dt_rank"))
                or -(first(c, ("hidden_size", "d_model")) // -16)
            ),
        ),
        m(
            "attention.layer_norm_rms_epsilon",
            "layer_norm_epsilon",
            t=VT.FLOAT32,
            value=_or(("layer_norm_epsilon", "rms_norm_eps"), 1e-5),
        ),
        # RMS norm on B / dt / C: FalconMamba only
        m(
            "ssm.dt_b_c_rms",
            "_dt_b_c_rms",
            t=VT.BOOL,
            value=lambda c: c.get("model_type") == "falcon_mamba",
        ),
        FILE_TYPE,
    ],
    names=[
        *_SSM_NAMES,
        NameRule(_M + "in_proj.weight", _B + "ssm_in.weight"),
        NameRule(_M + "in_proj.bias", _B + "ssm_in.bias"),
        NameRule(_M + "x_proj.weight", _B + "ssm_x.weight"),
        NameRule(_M + "dt_proj.weight", _B + "ssm_dt.weight"),
        NameRule(_M + "dt_proj.bias", _B + "ssm_dt.bias"),
        *_SSM_OUT,
    ],
    transforms=[
        Transform(
            "ssm_a_neg_exp",
            r"mixer\.A_log$",
            neg_exp,
            lambda x, cfg, ctx: np.log(-x.astype(np.float32)),
            exact=False,
        ),
        _TRANSFORMS[2],  # conv squeeze
    ],
    required=("hidden_size", "num_hidden_layers", "vocab_size"),
    drop_if_same=(("lm_head.weight", "backbone.embeddings.weight"),),
    tokenizer={"vocab": "llama"},
    model_types={"MambaForCausalLM": "mamba", "FalconMambaForCausalLM": "falcon_mamba"},
    hf_config=lambda cfg, names: {
        "expand": cfg["intermediate_size"] // cfg["hidden_size"],
        "use_conv_bias": "blk.0.ssm_conv1d.bias" in names,
        "use_bias": "blk.0.ssm_in.bias" in names,
        "residual_in_fp32": True,
        # the RMS norms on dt / B / C are what makes a Mamba file FalconMamba's
        **(_FALCON_MAMBA if cfg.get("_dt_b_c_rms") else _PLAIN_MAMBA),
    },
)
