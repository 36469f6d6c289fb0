"""Mamba 2 (state-space layers only): conversion/mamba.py's ``Mamba2Model``.

Per layer the mixer's ``A_log`` becomes ``A = -exp(A_log)`` and, like ``D``, a column
``[n_head, 1]``; the conv weight ``[C, 1, K]`` is squeezed to ``[C, K]`` (F32 at every
type); the gated norm is reshaped to ``[n_group, d_inner / n_group]``; ``dt_bias`` is
``ssm_dt.bias``.  The metadata is the class's own (no base rows): a 2**20 context,
feed-forward length and head count 0, and the ``ssm.*`` sizes.  ``-exp`` is computed
with torch's float32 ``exp`` when torch is importable, as the reference does (numpy's
float32 ``exp`` may round differently); its inverse ``log(-A)`` is not exact.
"""

from __future__ import annotations

import numpy as np

from ._model import FILE_TYPE, VT, Arch, NameRule, Transform, first, m


def _d_inner(cfg: dict) -> int:
    v = first(cfg, ("mamba_d_ssm", "intermediate_size", "d_inner"))
    expand = first(cfg, ("mamba_expand", "expand")) or 2
    return v or expand * first(cfg, ("hidden_size", "d_model", "dim"))


def _head_dim(cfg: dict) -> int:
    return first(cfg, ("mamba_d_head", "head_dim")) or 64


def _or(keys: tuple[str, ...], default):
    return lambda cfg: first(cfg, keys) or default


def _neg_exp(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    try:
        import torch
    except ImportError:
        return (-np.exp(x)).reshape(*x.shape, 1)
    return (-torch.exp(torch.from_numpy(x))).numpy().reshape(*x.shape, 1)


def _column(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return (*shape, 1)


def _uncolumn(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return tuple(shape[:-1])


def _groups(cfg: dict) -> int:
    return first(cfg, ("n_groups",)) or 1


_TRANSFORMS = [
    Transform(
        "ssm_a_neg_exp",
        r"mixer\.A_log$",
        _neg_exp,
        lambda x, cfg, ctx: np.log(-x.astype(np.float32)).reshape(x.shape[:-1]),
        shape=_column,
        exact=False,
        inverse_shape=_uncolumn,
    ),
    Transform(
        "ssm_d_column",
        r"mixer\.D$",
        lambda x, cfg, ctx: x.reshape(*x.shape, 1),
        lambda x, cfg, ctx: x.reshape(x.shape[:-1]),
        shape=_column,
        inverse_shape=_uncolumn,
    ),
    Transform(
        "ssm_conv_squeeze",
        r"mixer\.conv1d\.weight$",
        lambda x, cfg, ctx: x.reshape(x.shape[0], x.shape[-1]),
        lambda x, cfg, ctx: x.reshape(x.shape[0], 1, x.shape[-1]),
        shape=lambda s, cfg, ctx: (s[0], s[-1]),
        inverse_shape=lambda s, cfg, ctx: (s[0], 1, s[-1]),
    ),
    Transform(
        "ssm_norm_groups",
        r"mixer\.norm\.weight$",
        lambda x, cfg, ctx: x.reshape(_groups(cfg), -1),
        lambda x, cfg, ctx: x.reshape(-1),
        shape=lambda s, cfg, ctx: (_groups(cfg), s[0] // _groups(cfg)),
        inverse_shape=lambda s, cfg, ctx: (s[0] * s[1],),
    ),
]

_L = "backbone.layers.{bid}."
_M = _L + "mixer."
_B = "blk.{bid}."

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
        NameRule("backbone.embeddings.weight", "token_embd.weight"),
        NameRule("backbone.norm_f.weight", "output_norm.weight"),
        NameRule("lm_head.weight", "output.weight"),
        NameRule(_L + "norm.weight", _B + "attn_norm.weight"),
        NameRule(_M + "A_log", _B + "ssm_a"),
        NameRule(_M + "D", _B + "ssm_d"),
        NameRule(_M + "conv1d.weight", _B + "ssm_conv1d.weight"),
        NameRule(_M + "conv1d.bias", _B + "ssm_conv1d.bias"),
        NameRule(_M + "dt_bias", _B + "ssm_dt.bias"),
        NameRule(_M + "in_proj.weight", _B + "ssm_in.weight"),
        NameRule(_M + "in_proj.bias", _B + "ssm_in.bias"),
        NameRule(_M + "norm.weight", _B + "ssm_norm.weight"),
        NameRule(_M + "out_proj.weight", _B + "ssm_out.weight"),
        NameRule(_M + "out_proj.bias", _B + "ssm_out.bias"),
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
