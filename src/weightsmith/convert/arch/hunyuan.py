"""HunYuan dense (``HunYuanDenseV1ForCausalLM``): llama.cpp's ``HunYuanModel``
(conversion/hunyuan.py), GGUF architecture ``hunyuan-dense``.

Llama's layers with per-head Q/K RMS norms (``query_layernorm`` / ``key_layernorm``,
llama.cpp's ``attn_q_norm`` / ``attn_k_norm``) and no Q/K permutation.  RoPE of type
``dynamic`` (or ``xdrope``) with an ``alpha`` is HunYuan's fixed NTK stretch of the base:
the reference writes ``rope.freq_base = theta * alpha ** (d / (d - 2))`` in TextModel's
place, then ``rope.scaling.type = none`` and factor 1; for ``dynamic`` also a 256k
original and actual context (overwriting ``context_length`` in place), asserting theta
10000 and a config context of 32k or 256k.  GGUF -> HF writes the stretched base as a
plain ``rope_theta`` (the same frequencies as transformers' ``ntk_alpha``).
"""

from __future__ import annotations

from typing import Any

from ... import errors as E
from ._common import BASE_NAMES, COMMON, FFN_NORM, layer_rules, replace_rows
from ._model import VT, Arch, full_rope, m

_NTK = ("dynamic", "xdrope")
_CTX_256K = 256 * 1024


def _rope_type(cfg: dict) -> Any:
    rp = full_rope(cfg)
    return rp.get("rope_type", rp.get("type"))


def _ntk(cfg: dict) -> bool:
    return _rope_type(cfg) in _NTK


def _check_dynamic(cfg: dict) -> None:
    """The reference's assertion on the dynamic layout it knows."""
    base = full_rope(cfg).get("rope_theta", 10000.0)
    ctx = cfg.get("max_position_embeddings")
    if base != 10000.0 or ctx not in (32 * 1024, _CTX_256K):
        raise E.InvalidModelConfig(
            "HunYuan dynamic RoPE outside the layout llama.cpp's converter assumes",
            field="rope_parameters / max_position_embeddings",
            expected="rope_theta 10000 and a context of 32768 or 262144",
            found=f"rope_theta {base}, context {ctx}",
        )


def _freq_base(cfg: dict) -> Any:
    rp = full_rope(cfg)
    if not _ntk(cfg):
        return rp.get("rope_theta")
    if _rope_type(cfg) == "dynamic":
        _check_dynamic(cfg)
    alpha, base, dim = rp.get("alpha", 50), rp.get("rope_theta", 10000.0), cfg["head_dim"]
    return base * alpha ** (dim / (dim - 2))


def _context(cfg: dict) -> Any:
    return _CTX_256K if _rope_type(cfg) == "dynamic" else cfg.get("max_position_embeddings")


HUNYUAN_DENSE = Arch(
    hf_archs=("HunYuanDenseV1ForCausalLM",),
    gguf_arch="hunyuan-dense",
    meta=[
        *replace_rows(
            COMMON,
            context_length=m("context_length", "max_position_embeddings", value=_context),
            rope__freq_base=m("rope.freq_base", "rope_theta", t=VT.FLOAT32, value=_freq_base),
        ),
        m(
            "rope.scaling.type",
            "_ntk_type",
            t=VT.STRING,
            value=lambda c: "none" if _ntk(c) else None,
        ),
        m(
            "rope.scaling.factor",
            "_ntk_factor",
            t=VT.FLOAT32,
            value=lambda c: 1 if _ntk(c) else None,
        ),
        m(
            "rope.scaling.original_context_length",
            "_ntk_orig",
            value=lambda c: _CTX_256K if _rope_type(c) == "dynamic" else None,
        ),
    ],
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        *layer_rules(
            [
                ("self_attn.query_layernorm", "attn_q_norm"),
                ("self_attn.key_layernorm", "attn_k_norm"),
            ]
        ),
    ],
    tokenizer={"vocab": "hunyuan"},
    model_types={"HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense"},
    # TextModel's scaling rows read back as ``rope_scaling`` type none: the stretched base
    # alone is the RoPE (transformers' default type)
    hf_config=lambda cfg, names: {"hidden_act": "silu", "rope_scaling": None},
)
