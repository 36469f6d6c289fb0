"""Qwen3.5 / Qwen3.6 (dense and MoE) and Qwen3-Next: conversion/qwen.py's
``Qwen3_5TextModel``, ``Qwen3_5MoeTextModel`` and ``Qwen3NextModel`` (GGUF ``qwen35``,
``qwen35moe``, ``qwen3next``).

Gated-DeltaNet ("linear attention") layers mixed with gated full-attention layers
(``layer_types``; every ``full_attention_interval``-th layer is full).  Per DeltaNet
layer llama.cpp writes ``A = -exp(A_log)`` (a ``[n_v_heads]`` vector, torch's ``exp``
in the tensor's own float type), the conv weight ``[C, 1, K]`` squeezed to ``[C, K]``
(F32 at every type), ``dt_bias`` as ``ssm_dt.bias``, and ``in_proj_qkv`` / ``in_proj_z``
/ ``in_proj_b`` / ``in_proj_a`` as ``attn_qkv`` / ``attn_gate`` / ``ssm_beta`` /
``ssm_alpha``.  Every RMS norm but the DeltaNet's gated one is stored as ``1 + w``.

Qwen3.5 reorders the value heads when there are fewer key heads than value heads: HF
groups them by key head (``[k0: v0 .. v(r-1)], [k1: ...]``), ggml broadcasts tiled
(``v0 of every k``, then ``v1`` ...): the V rows of ``in_proj_qkv``, the rows of
``in_proj_z`` / ``in_proj_a`` / ``in_proj_b``, ``A_log``, ``dt_bias``, the V channels of
the conv, and the columns of ``out_proj``.  Qwen3-Next instead keeps the fused
``in_proj_qkvz`` (per key head ``[q, k, v, z]``), regrouped into ``attn_qkv`` (all q,
then all k, then all v) and ``attn_gate``; its ``in_proj_ba`` is written as it is.

The multi-token-prediction block (``mtp.*``, which transformers does not load) follows
the trunk as llama.cpp's ``_QwenMtpMixin`` renames it: ``mtp.layers.i.*`` ->
``model.layers.<n_layer + i>.*``, ``mtp.fc`` -> ``eh_proj``, ``mtp.pre_fc_norm_embedding``
/ ``_hidden`` -> ``enorm`` / ``hnorm``, ``mtp.norm`` -> ``shared_head.norm``; ``block_count``
counts it and ``nextn_predict_layers`` says how many.  Qwen3-Next's config has no
``mtp_num_hidden_layers``: the count comes from the checkpoint (the reference asserts
there is one; a checkpoint without MTP tensors converts here without the block).

Metadata: the base rows (``rope.dimension_sections`` from ``mrope_section`` where given,
else Qwen3.5's default ``[11, 11, 10, 0]`` at the end), the MoE rows, then the ``ssm.*``
sizes, the per-layer ``attention.recurrent_layers`` (MTP layers False),
``full_attention_interval`` and ``rope.dimension_count`` (the rotated part of the head).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ._common import (
    BASE_NAMES,
    BLK,
    GEMMA_NORM,
    LAYER,
    QK_NORM,
    layer_rules,
    neg_exp,
    replace_rows,
)
from ._model import VT, Arch, Mtp, NameRule, Split, Transform, m, rope_parameters
from .qwen import _MOE_NAMES, _MOE_ROWS, _MOE_SPLITS, _MOE_STACKS
from .qwenvl import _with_sections

_LA = "linear_attn."

# --------------------------------------------------------------------------- MTP names


_MTP_TOP = {
    "fc": "eh_proj",
    "pre_fc_norm_embedding": "enorm",
    "pre_fc_norm_hidden": "hnorm",
    "norm": "shared_head.norm",
}
_MTP_LAYER = re.compile(r"^mtp\.layers\.(\d+)\.(.+)$")
_MTP_NAMED = re.compile(r"^mtp\.([a-z_]+)\.([a-z_]+)$")


def _mtp_to_trunk(name: str, cfg: dict) -> str:
    """``mtp.*`` -> the layer after the trunk (the reference's filter_tensors)."""
    if name.startswith("model.mtp."):
        name = name[len("model.") :]
    n = cfg["num_hidden_layers"]
    if mt := _MTP_LAYER.match(name):
        return f"model.layers.{n + int(mt[1])}.{mt[2]}"
    if (mt := _MTP_NAMED.match(name)) and mt[1] in _MTP_TOP:
        return f"model.layers.{n}.{_MTP_TOP[mt[1]]}.{mt[2]}"
    return name


_TOP_BACK = {v: k for k, v in _MTP_TOP.items()}
_TRUNK_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def _trunk_to_mtp(name: str, cfg: dict) -> str:
    n = cfg["num_hidden_layers"]
    mt = _TRUNK_LAYER.match(name)
    if mt is None or int(mt[1]) < n:
        return name
    rest = mt[2]
    for short, top in _TOP_BACK.items():
        if rest.startswith(short + "."):
            return f"mtp.{top}.{rest[len(short) + 1 :]}"
    return f"mtp.layers.{int(mt[1]) - n}.{rest}"


def _mtp_count(cfg: dict, names: list[str]) -> dict[str, Any]:
    """The MTP layers the checkpoint holds (for configs without ``mtp_num_hidden_layers``)."""
    ids = [int(mt[1]) for s in names if (mt := _MTP_LAYER.match(s.removeprefix("model.")))]
    return {"_mtp_layers": max(ids) + 1 if ids else 0}


def _n_mtp(cfg: dict) -> int:
    return cfg.get("mtp_num_hidden_layers") or cfg.get("_mtp_layers", 0)


# --------------------------------------------------------------------------- values


def _heads(cfg: dict) -> tuple[int, int, int, int]:
    """(key heads, value heads per key head, key head dim, value head dim)."""
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    return nk, nv // nk, cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]


def _tile(x: np.ndarray, nk: int, r: int, hd: int, axis: int, back: bool) -> np.ndarray:
    """Value heads along ``axis`` grouped by key head -> tiled (``back``: the inverse)."""
    x = np.moveaxis(x, axis, 0)
    s = x.shape
    a, b = (r, nk) if back else (nk, r)
    x = x.reshape(a, b, hd, *s[1:]).swapaxes(0, 1).reshape(s)
    return np.ascontiguousarray(np.moveaxis(x, 0, axis))


def _reorders(cfg: dict) -> bool:
    nk, nv = cfg.get("linear_num_key_heads", 0), cfg.get("linear_num_value_heads", 0)
    return nk > 0 and nv > 0 and nk != nv


def _v_heads(what: str, back: bool):
    """The V-head reorder of one kind of tensor (a no-op when the head counts agree)."""

    def fn(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
        if not _reorders(cfg):
            return x
        nk, r, hk, hv = _heads(cfg)
        if what in ("qkv", "conv"):  # the V rows / channels after q and k
            qk = 2 * nk * hk
            return np.concatenate([x[:qk], _tile(x[qk:], nk, r, hv, 0, back)])
        if what == "rows":
            return _tile(x, nk, r, hv, 0, back)
        if what == "per_head":
            return _tile(x, nk, r, 1, 0, back)
        return _tile(x, nk, r, hv, 1, back)  # out_proj columns

    return fn


def _v_transform(what: str, pattern: str) -> Transform:
    return Transform(f"v_heads_tiled_{what}", pattern, _v_heads(what, False), _v_heads(what, True))


V_REORDER = [
    _v_transform("qkv", r"linear_attn\.in_proj_qkv\.weight$"),
    _v_transform("rows", r"linear_attn\.in_proj_z\.weight$"),
    _v_transform("per_head", r"linear_attn\.(in_proj_[ab]\.weight|A_log|dt_bias)$"),
    _v_transform("conv", r"linear_attn\.conv1d\.weight$"),
    _v_transform("cols", r"linear_attn\.out_proj\.weight$"),
]


DELTANET = [
    Transform(
        "conv_squeeze",
        r"linear_attn\.conv1d\.weight$",
        lambda x, cfg, ctx: x.reshape(x.shape[0], x.shape[-1]),
        lambda x, cfg, ctx: x.reshape(x.shape[0], 1, x.shape[-1]),
        shape=lambda s, cfg, ctx: (s[0], s[-1]),
        inverse_shape=lambda s, cfg, ctx: (s[0], 1, s[-1]),
    ),
    Transform(
        "ssm_a_neg_exp",
        r"linear_attn\.A_log$",
        neg_exp,
        lambda x, cfg, ctx: np.log(-x.astype(np.float32)),
        exact=False,
    ),
    # every RMS norm but the DeltaNet's gated one is stored as 1 + w (the MTP input norms
    # named as in the checkpoint too: GGUF -> HF looks the transforms up by HF name)
    Transform(
        "norm_plus_one",
        r"((?<!linear_attn\.)norm|pre_fc_norm_(embedding|hidden))\.weight$",
        GEMMA_NORM.forward,
        GEMMA_NORM.inverse,
        exact=False,
    ),
]


def _qkvz_sizes(cfg: dict) -> tuple[int, int, int]:
    nk, r, hk, hv = _heads(cfg)
    return nk, hk, r * hv


def _qkvz_split(x: np.ndarray, cfg: dict) -> list[np.ndarray]:
    """Per key head ``[q, k, v, z]`` -> ``[all q, all k, all v]`` and ``[all z]``."""
    nk, hk, vz = _qkvz_sizes(cfg)
    w = x.reshape(nk, 2 * hk + 2 * vz, *x.shape[1:])
    q, k, v, z = np.split(w, [hk, 2 * hk, 2 * hk + vz], axis=1)
    rows = [p.reshape(-1, *x.shape[1:]) for p in (q, k, v)]
    return [np.concatenate(rows), z.reshape(-1, *x.shape[1:])]


def _qkvz_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    nk, hk, vz = _qkvz_sizes(cfg)
    return [(nk * (2 * hk + vz), *shape[1:]), (nk * vz, *shape[1:])]


def _qkvz_join(parts: list[np.ndarray], cfg: dict) -> np.ndarray:
    nk, hk, vz = _qkvz_sizes(cfg)
    qkv, z = parts
    tail = qkv.shape[1:]
    q = qkv[: nk * hk].reshape(nk, hk, *tail)
    k = qkv[nk * hk : 2 * nk * hk].reshape(nk, hk, *tail)
    v = qkv[2 * nk * hk :].reshape(nk, vz, *tail)
    return np.concatenate([q, k, v, z.reshape(nk, vz, *tail)], axis=1).reshape(-1, *tail)


# --------------------------------------------------------------------------- metadata


def _interval(cfg: dict) -> int:
    # AutoConfig consumes full_attention_interval when it derives layer_types
    return cfg.get("full_attention_interval", 4) if cfg.get("layer_types") is not None else 4


def _layer_types(cfg: dict) -> list[str]:
    k = cfg.get("full_attention_interval", 4)
    n = cfg["num_hidden_layers"]
    return ["linear_attention" if (i + 1) % k else "full_attention" for i in range(n)]


def _recurrent(cfg: dict) -> list[bool] | None:
    types = cfg.get("layer_types")
    if types is None:
        return None
    return [t == "linear_attention" for t in types] + [False] * _n_mtp(cfg)


def _rope_dim(cfg: dict) -> int:
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return int(hd * rope_parameters(cfg).get("partial_rotary_factor", 0.25))


def _rows(mrope: bool) -> list:
    base = _with_sections(list(_MOE_ROWS)) if mrope else list(_MOE_ROWS)
    rows = [
        *replace_rows(
            base,
            block_count=m(
                "block_count",
                "num_hidden_layers",
                value=lambda c: c["num_hidden_layers"] + _n_mtp(c),
            ),
        ),
        m("nextn_predict_layers", "_nextn", value=lambda c: _n_mtp(c) or None),
        m("ssm.conv_kernel", "linear_conv_kernel_dim"),
        m("ssm.state_size", "linear_key_head_dim"),
        m("ssm.group_count", "linear_num_key_heads"),
        m("ssm.time_step_rank", "linear_num_value_heads"),
        m(
            "ssm.inner_size",
            "_ssm_inner",
            value=lambda c: c["linear_value_head_dim"] * c["linear_num_value_heads"],
        ),
        m("attention.recurrent_layers", "_recurrent", t=VT.BOOL, value=_recurrent),
        m("full_attention_interval", "full_attention_interval", value=lambda c: c["_interval"]),
        m("rope.dimension_count", "_rope_dimension_count", value=_rope_dim),
    ]
    if mrope:  # Qwen3.5 always has sections: its default when the config gives none
        rows.append(
            m(
                "rope.dimension_sections",
                "_mrope_default",
                t=VT.INT32,
                value=lambda c: None if "mrope_section" in rope_parameters(c) else [11, 11, 10, 0],
            )
        )
    return rows


# the config class defaults AutoConfig fills in (Qwen3NextConfig, Qwen3_5TextConfig)
_DEFAULTS: dict[str, Any] = {
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "rms_norm_eps": 1e-6,
    "_interval": _interval,
    "layer_types": _layer_types,
}


def _hf_config(mrope: bool):
    def build(cfg: dict, names: set[str]) -> dict[str, Any]:
        nextn = cfg.get("_nextn", 0)
        n = cfg["num_hidden_layers"] - nextn
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.get("rope_theta")}
        rope["partial_rotary_factor"] = cfg.get("_rope_dimension_count", hd // 4) / hd
        out: dict[str, Any] = {
            "hidden_act": "silu",
            "num_hidden_layers": n,
            "head_dim": hd,
            "attention_bias": any(x.endswith("attn_q.bias") for x in names),
            "linear_value_head_dim": cfg["_ssm_inner"] // cfg["linear_num_value_heads"],
            "rope_parameters": rope,
        }
        rec = cfg.get("_recurrent")
        if rec is not None:
            out["layer_types"] = [
                "linear_attention" if bool(r) else "full_attention" for r in list(rec)[:n]
            ]
        if mrope:
            sec = [int(s) for s in cfg.get("_mrope_section", [11, 11, 10, 0])]
            rope["mrope_section"] = sec[:3]
            rope["mrope_interleaved"] = True
            out["mtp_num_hidden_layers"] = nextn
        if "blk.0.ffn_gate_inp.weight" in names:
            out.update(decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
            if mrope:  # not Qwen3.5-MoE config fields
                for k in ("decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"):
                    del out[k]
        return out

    return build


# --------------------------------------------------------------------------- entries

_NAMES = [
    *BASE_NAMES,
    *QK_NORM,
    *layer_rules(
        [
            ("post_attention_layernorm", "post_attention_norm"),
            (_LA + "conv1d", "ssm_conv1d"),
            (_LA + "in_proj_a", "ssm_alpha"),
            (_LA + "in_proj_b", "ssm_beta"),
            (_LA + "in_proj_ba", "ssm_ba"),
            (_LA + "in_proj_qkv", "attn_qkv"),
            (_LA + "in_proj_z", "attn_gate"),
            (_LA + "norm", "ssm_norm"),
            (_LA + "out_proj", "ssm_out"),
            # the MTP block after the trunk
            ("eh_proj", "nextn.eh_proj"),
            ("enorm", "nextn.enorm"),
            ("hnorm", "nextn.hnorm"),
            ("shared_head.norm", "nextn.shared_head_norm"),
        ]
    ),
    NameRule(LAYER + _LA + "A_log", BLK + "ssm_a"),
    NameRule(LAYER + _LA + "dt_bias", BLK + "ssm_dt.bias"),
    *_MOE_NAMES,
]
_QKVZ = Split(
    LAYER + _LA + "in_proj_qkvz.weight",
    (BLK + "attn_qkv.weight", BLK + "attn_gate.weight"),
    fn=_qkvz_split,
    shapes=_qkvz_shapes,
    join=_qkvz_join,
)
_REQUIRED = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")


#: _QwenMtpMixin's ``--no-mtp`` / ``--mtp``: the ``mtp.*`` tensors; without them the count
#: read off the checkpoint is 0 and the config's is dropped; the draft keeps the shared
#: tensors under either prefix
_MTP = Mtp(
    lambda name, cfg: name.startswith(("mtp.", "model.mtp.")),
    drop=lambda c: {k: v for k, v in c.items() if k != "mtp_num_hidden_layers"},
    keep=("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
          "embed_tokens.weight", "norm.weight"),
)  # fmt: skip


def _entry(hf_archs: tuple[str, ...], gguf_arch: str, model_type: str, mrope: bool) -> Arch:
    return Arch(
        hf_archs=hf_archs,
        gguf_arch=gguf_arch,
        meta=_rows(mrope),
        names=_NAMES,
        transforms=[*(V_REORDER if mrope else []), *DELTANET],
        stacks=_MOE_STACKS,
        # Qwen3-Next's fused in_proj_qkvz (its inverse would claim Qwen3.5's attn_qkv)
        splits=[*_MOE_SPLITS] if mrope else [*_MOE_SPLITS, _QKVZ],
        defaults=_DEFAULTS,
        required=_REQUIRED,
        tokenizer={"vocab": "gpt2"},
        model_types={hf_archs[0]: model_type},
        hf_config=_hf_config(mrope),
        rename=(_mtp_to_trunk, _trunk_to_mtp),
        from_tensors=_mtp_count,
        mtp=_MTP,
    )


QWEN35 = _entry(
    ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"), "qwen35", "qwen3_5_text", True
)
QWEN35MOE = _entry(
    ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
    "qwen35moe",
    "qwen3_5_moe_text",
    True,
)
QWEN3NEXT = _entry(("Qwen3NextForCausalLM",), "qwen3next", "qwen3_next", False)
