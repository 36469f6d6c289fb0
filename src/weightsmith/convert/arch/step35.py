"""Step 3.5 (``Step3p5ForCausalLM``): conversion/step3.py ``Step35Model`` (GGUF ``step35``).

The layer: Q/K RMS norms per head, a head-wise attention gate (``self_attn.g_proj``: one
sigmoid per head -> ``attn_gate``), full-attention layers with RoPE over half of each
head and sliding-window layers over all of it, with their own query-head count
(``attention_other_setting``); leading dense layers (``moe_layers_enum``), then experts
already stacked per layer in the checkpoint (``moe.{gate,up,down}_proj.weight``, 3-D)
with a sigmoid router (``moe.gate`` -> ``ffn_gate_inp``), its selection bias
(``moe.router_bias`` -> ``exp_probs_b.bias``) and a shared expert (``share_expert.*``);
SwiGLU clamps per layer for the routed and the shared experts.  Every RMS norm is
Gemma-style (``1 + w``: the reference adds the 1).

The rows are TextModel's, then the class's after ``general.file_type``: per-layer head
counts (``head_count`` overwritten in place with the array, ``head_count_kv``), the
sliding window and its per-layer pattern, ``value_length`` and the RMS epsilon again (in
place), the expert sizes, ``expert_weights_scale`` / ``_norm``, the leading dense count,
``moe_every_n_layers`` and the clamps (``0`` for no clamp).  ``rope_theta`` as a list
gives ``rope.freq_base`` (its first entry) and ``rope.freq_base_swa`` (its second), as the
reference reads it.  They read the Hub's field names (``num_attention_groups``,
``moe_num_experts``, ``moe_top_k``, ``share_expert_dim``, ``attention_other_setting``,
``partial_rotary_factors``), which transformers 5's ``Step3p7TextConfig`` renames or
drops: only the Hub's config.json converts.

The reference asserts RoPE over all of a sliding layer's head and half of a full one's
(``partial_rotary_factors`` 1.0 / 0.5): another config is refused by name.  MTP blocks
(``num_nextn_predict_layers``, appended as ``model.layers.{n + i}``) count in
``block_count`` and the per-layer rows (padded: full attention, no clamp), their shared
head loses its ``transformer.`` infix (``shared_head.output`` -> ``nextn.shared_head_head``)
and ``nextn_predict_layers`` is written last, as the reference does.  ``rope_type: llama3``
(the reference then adds ``rope_freqs.weight``) is refused: not done, see
docs/convert-architectures.md.
"""

from __future__ import annotations

from typing import Any

from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    FFN_NORM,
    GEMMA_NORM,
    LAYER,
    NEXTN_NAMES,
    QK_NORM,
    layer_rules,
    replace_rows,
)
from ._model import APPENDED_MTP, FILE_TYPE, VT, Arch, NameRule, m, past_trunk

_SLIDING = "sliding_attention"


def _mtp_names(name: str, cfg: dict) -> str:
    """An MTP block's shared head is nested under ``transformer.`` and its output is named
    ``output``: the reference strips the one and renames the other (to the gguf-py map's
    ``shared_head.head``)."""
    if not past_trunk(name, cfg):
        return name
    return name.replace(".transformer.", ".").replace("shared_head.output", "shared_head.head")


def _mtp_names_back(name: str, cfg: dict) -> str:
    if not past_trunk(name, cfg):
        return name
    name = name.replace("shared_head.head", "shared_head.output")
    return name.replace(".shared_head.", ".transformer.shared_head.")


def _theta(i: int):
    """``rope_theta``: a list's entry ``i`` (the reference reads the first as the base, the
    second as the sliding layers'); a number is the base (no sliding row)."""

    def get(cfg: dict) -> Any:
        t = cfg.get("rope_theta")
        if isinstance(t, list):
            return float(t[i])
        return t if i == 0 else None

    return get


def _blocks(cfg: dict) -> int:
    """The GGUF block count: the trunk, then the MTP blocks appended after it."""
    return cfg["num_hidden_layers"] + int(cfg.get("num_nextn_predict_layers") or 0)


def _layer_types(cfg: dict) -> list[str]:
    """``layer_types`` per block (MTP ones included), padded with full attention (the
    reference's padding)."""
    n = _blocks(cfg)
    lt = list(cfg.get("layer_types") or [])[:n]
    return lt + ["full_attention"] * (n - len(lt))


def _rope_widths(cfg: dict) -> tuple[str, Any, Any] | None:
    """The reference's assertion on ``partial_rotary_factors`` (padded with 0.5): 1.0 on
    sliding layers, 0.5 on full ones; and no llama3 RoPE (not done);
    ``(field, expected, found)`` when the config fails."""
    lt = _layer_types(cfg)
    prf = list(cfg.get("partial_rotary_factors") or [])[: len(lt)]
    prf += [0.5] * (len(lt) - len(prf))
    want = [1.0 if t == _SLIDING else 0.5 for t in lt]
    if prf != want:
        return ("partial_rotary_factors", want, prf)
    # llama3 RoPE makes the reference write rope_freqs.weight: not done here
    for key in ("rope_scaling", "rope_parameters"):
        rp = cfg.get(key) or {}
        kind = (rp.get("full_attention", rp) or {}).get("rope_type") or ""
        if isinstance(kind, str) and kind.lower() == "llama3":
            return (key, "no llama3 RoPE (its rope_freqs.weight is not done)", rp)
    return None


def _heads(field: str):
    def get(cfg: dict) -> list[int]:
        other = cfg.get("attention_other_setting") or {}
        base = cfg[field]
        swa = other.get(field, base)
        return [swa if t == _SLIDING else base for t in _layer_types(cfg)]

    return get


def _leading_dense(cfg: dict) -> int:
    enum = cfg.get("moe_layers_enum")
    if isinstance(enum, str) and enum.strip():
        layers = sorted(int(i) for i in enum.strip().split(","))
        return max(0, layers[0])
    return 0


def _clamps(field: str):
    def get(cfg: dict) -> list[float] | None:
        v = cfg.get(field)
        if v is None:
            return None
        n = _blocks(cfg)
        out = [0.0 if x is None else float(x) for x in v][:n]
        return out + [0.0] * (n - len(out))

    return get


_ROWS: list = [
    *replace_rows(
        COMMON,
        block_count=m("block_count", "num_hidden_layers", value=_blocks),
        rope__freq_base=m("rope.freq_base", "rope_theta", t=VT.FLOAT32, value=_theta(0)),
        rope__freq_base_swa=m("rope.freq_base_swa", "rope_theta", t=VT.FLOAT32, value=_theta(1)),
    ),
    # gguf-py writes a list of Python ints as an INT32 array
    m("attention.head_count", "num_attention_heads", t=VT.INT32,
      value=_heads("num_attention_heads")),
    m("attention.head_count_kv", "num_attention_groups", t=VT.INT32,
      value=_heads("num_attention_groups")),
    m("attention.sliding_window", "sliding_window"),
    m("attention.sliding_window_pattern", "layer_types", t=VT.BOOL,
      value=lambda c: [t == _SLIDING for t in _layer_types(c)]),
    m("attention.value_length", "head_dim"),
    m("expert_count", "moe_num_experts"),
    m("expert_used_count", "moe_top_k"),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_feed_forward_length", "share_expert_dim"),
    m("expert_weights_scale", "moe_router_scaling_factor", t=VT.FLOAT32),
    m("expert_weights_norm", "norm_expert_weight", t=VT.BOOL),
    m("leading_dense_block_count", "moe_layers_enum", value=_leading_dense),
    m("moe_every_n_layers", "moe_every_n_layer", value=lambda c: int(c.get("moe_every_n_layer", 1))),
    m("attention.layer_norm_rms_epsilon", "rms_norm_eps", t=VT.FLOAT32,
      value=lambda c: c.get("rms_norm_eps", 1e-5)),
    m("swiglu_clamp_exp", "swiglu_limits", t=VT.FLOAT32, value=_clamps("swiglu_limits")),
    m("swiglu_clamp_shexp", "swiglu_limits_shared", t=VT.FLOAT32,
      value=_clamps("swiglu_limits_shared")),
    m("nextn_predict_layers", "num_nextn_predict_layers",
      value=lambda c: c.get("num_nextn_predict_layers") or None),
]  # fmt: skip
assert FILE_TYPE in _ROWS

STEP35 = Arch(
    hf_archs=("Step3p5ForCausalLM",),
    gguf_arch="step35",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *QK_NORM,
        *FFN_NORM,
        *layer_rules(
            [
                ("self_attn.g_proj", "attn_gate"),
                ("moe.gate", "ffn_gate_inp"),
                ("moe.gate_proj", "ffn_gate_exps"),
                ("moe.up_proj", "ffn_up_exps"),
                ("moe.down_proj", "ffn_down_exps"),
                ("share_expert.gate_proj", "ffn_gate_shexp"),
                ("share_expert.up_proj", "ffn_up_shexp"),
                ("share_expert.down_proj", "ffn_down_shexp"),
            ]
        ),
        NameRule(LAYER + "moe.router_bias", BLK + "exp_probs_b.bias"),
        *NEXTN_NAMES,  # the MTP blocks' own tensors
    ],
    rename=(_mtp_names, _mtp_names_back),
    mtp=APPENDED_MTP,
    transforms=[GEMMA_NORM],
    check=_rope_widths,
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_attention_groups",
        "num_hidden_layers",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "sliding_window",
        "moe_num_experts",
        "moe_top_k",
        "moe_intermediate_size",
        "share_expert_dim",
    ),
    # no transformers class reads this layout alone (Step3p7ForConditionalGeneration
    # wants a vision tower beside it): no way back
    hf_back=False,
    tokenizer={"vocab": "gpt2"},
)
