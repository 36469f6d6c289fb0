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

HunyuanVL's text model (``HUNYUAN_VL``, GGUF ``hunyuan_vl``) is the same layout under
``model.language_model.``; under XD-RoPE its class re-sets the base to theta and adds
alpha, the config context and the sections (see the entry).  Its projector is not here.
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


def _xdrope(cfg: dict) -> bool:
    """HunyuanVL's XD-RoPE: ``xdrope``, or transformers 5's spelling of it (``dynamic``
    with an ``mrope_section``), which the reference renames back before reading."""
    rp = full_rope(cfg)
    return _rope_type(cfg) == "xdrope" or (_rope_type(cfg) == "dynamic" and "mrope_section" in rp)


def _vl_value(dense: Any, xd: Any) -> Any:
    """A row of the VL text model: ``xd(cfg)`` under XD-RoPE, else the dense model's."""
    return lambda cfg: xd(cfg) if _xdrope(cfg) else dense(cfg)


def _xd_sections(cfg: dict) -> list[int] | None:
    rp = full_rope(cfg)
    sec = rp.get("xdrope_section", rp.get("mrope_section"))
    return None if sec is None else [*sec, 0, 0, 0, 0][:4]


def _vl_rows() -> list:
    rows = replace_rows(
        COMMON,
        context_length=m(
            "context_length",
            "max_position_embeddings",
            value=_vl_value(_context, lambda c: c.get("max_position_embeddings")),
        ),
        rope__freq_base=m(
            "rope.freq_base",
            "rope_theta",
            t=VT.FLOAT32,
            value=_vl_value(_freq_base, lambda c: full_rope(c).get("rope_theta")),
        ),
    )
    # TextModel writes the sections (from mrope_section) just before the base; the VL
    # class re-sets them, in place, from xdrope_section
    at = next(i for i, r in enumerate(rows) if getattr(r, "key", None) == "rope.freq_base")
    rows.insert(at, m("rope.dimension_sections", "_xd_sections", t=VT.INT32, value=_xd_sections))
    return [
        *rows,
        m("rope.scaling.type", "_ntk_type", t=VT.STRING,
          value=lambda c: "none" if _ntk(c) or _xdrope(c) else None),
        m("rope.scaling.factor", "_ntk_factor", t=VT.FLOAT32,
          value=_vl_value(lambda c: 1 if _ntk(c) else None,
                          lambda c: float(full_rope(c).get("factor", 1)))),
        m("rope.scaling.alpha", "_xd_alpha", t=VT.FLOAT32,
          value=lambda c: float(full_rope(c)["alpha"]) if _xdrope(c) else None),
        m("rope.scaling.original_context_length", "_ntk_orig",
          value=_vl_value(lambda c: _CTX_256K if _rope_type(c) == "dynamic" else None,
                          lambda c: c.get("max_position_embeddings"))),
    ]  # fmt: skip


#: the text model of HunyuanVL (``HunYuanVLForConditionalGeneration``, llama.cpp's
#: ``HunyuanVLTextModel``, GGUF ``hunyuan_vl``): the dense entry's tensors under
#: ``model.language_model.``, the vision tower skipped; with XD-RoPE the base is
#: theta itself, then ``rope.scaling.alpha``, the config context as both context rows and
#: the sections as ``rope.dimension_sections``
HUNYUAN_VL = Arch(
    hf_archs=("HunYuanVLForConditionalGeneration",),
    gguf_arch="hunyuan_vl",
    meta=_vl_rows(),
    names=HUNYUAN_DENSE.names,
    tokenizer={"vocab": "hunyuan"},
)
