"""EXAONE 4.0, the text half of EXAONE 4.5 (GGUF ``exaone4``) and K-EXAONE (GGUF
``exaone-moe``): conversion/exaone.py.

EXAONE 4.0 (``Exaone4ForCausalLM``) is OLMo 2's layer: Q/K RMS norms over each head, an
RMS norm after the attention and one after the MLP, no pre-norms; RoPE is NeoX-style (no
Q/K permutation).  TextModel's rows, then ``vocab_size``, and with a sliding window
(the 32B; the 1.2B has ``sliding_window: null``) ``attention.sliding_window`` and the
per-layer ``attention.sliding_window_pattern`` (one BOOL per layer, true for a
sliding-window layer, from ``layer_types``, else from ``sliding_window_pattern`` as a
string ``"LLLG"`` or an int ``n``: every n-th layer full).  ``rope_type: llama3`` adds
``rope_freqs.weight`` (with the class's default factor 16, not Llama's 8).

transformers' Exaone4Config fills ``sliding_window`` (4096) and ``layer_types`` (from
``sliding_window_pattern``, 4) when config.json leaves them out, and the reference reads
that view (:data:`EXAONE4`'s ``defaults``).  The global layers of a sliding-window model
use no RoPE; llama.cpp knows that from the pattern (it runs the hybrid attention only for
the 32B's 64 layers, a fact of its runtime and not of the file).

EXAONE 4.5 (``Exaone4_5_ForConditionalGeneration``) keeps this text model under
``model.language_model.`` (stripped) beside a Qwen2-VL-style vision tower
(``model.visual.``, the projector's: :mod:`.mmproj`).  With ``num_nextn_predict_layers``
the reference counts the MTP blocks in ``block_count`` and writes ``nextn_predict_layers``
(both rows here); the MTP weights themselves (``mtp.*``, numbered after the trunk, which
llama.cpp loads but does not run) are not converted: they are refused by name
(:class:`~weightsmith.errors.UnmappedTensor`) before any output.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    FFN_NORM,
    LAYER,
    QK_NORM,
    expert_stacks,
    layer_rules,
    llama3_rope_freqs,
    replace_rows,
)
from ._model import VT, Arch, NameRule, first, m

_SLIDING, _FULL = "sliding_attention", "full_attention"


def _swa_pattern(cfg: dict) -> list[bool] | None:
    """Exaone4Model.set_gguf_parameters' pattern (None: not written)."""
    if cfg.get("sliding_window") is None:
        return None
    if "layer_types" in cfg:
        return [t == _SLIDING for t in cfg["layer_types"]]
    pat, n = cfg.get("sliding_window_pattern"), cfg["num_hidden_layers"]
    if isinstance(pat, str):
        out = [pat[i % len(pat)] == "L" for i in range(n)]
    elif isinstance(pat, int) and not isinstance(pat, bool):
        out = [(i + 1) % pat != 0 for i in range(n)]
    else:
        return None
    return out if len(out) == n else None


def _layer_types(cfg: dict) -> list[str] | None:
    """Exaone4Config's ``layer_types`` when config.json has none (a pattern of 0 with no
    sliding window: transformers divides by it and fails, so nothing is filled)."""
    pat = cfg.get("sliding_window_pattern", 4)
    n = cfg.get("num_hidden_layers")
    if cfg.get("sliding_window", 4096) is None or not isinstance(n, int):
        return None
    if isinstance(pat, int) and not isinstance(pat, bool) and pat > 0:
        return [_SLIDING if (i + 1) % pat else _FULL for i in range(n)]
    return None


def _llama3_freqs(cfg: dict) -> Any:
    # Exaone4Model's own default factor is 16 (LlamaModel's is 8)
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rp = rp.get(_FULL, rp)
    if str(rp.get("rope_type", "")).lower() == "llama3" and "factor" not in rp:
        cfg = {**cfg, "rope_parameters": {**rp, "factor": 16.0}}
    return llama3_rope_freqs(cfg)


def _hf_config(cfg: dict, names: set[str]) -> dict:
    n = cfg["num_hidden_layers"]
    swa = cfg.get("_swa_pattern")
    return {
        "hidden_act": "silu",
        "sliding_window": cfg.get("sliding_window"),
        "layer_types": [_SLIDING if s else _FULL for s in swa] if swa else [_FULL] * n,
    }


EXAONE4 = Arch(
    hf_archs=("Exaone4ForCausalLM",),
    gguf_arch="exaone4",
    meta=[
        *COMMON,
        m("vocab_size", "vocab_size"),
        m("attention.sliding_window", "sliding_window"),
        m("attention.sliding_window_pattern", "_swa_pattern", t=VT.BOOL, value=_swa_pattern),
    ],
    names=[
        *BASE_NAMES,
        *QK_NORM,
        *layer_rules(
            [
                ("post_attention_layernorm", "post_attention_norm"),
                ("post_feedforward_layernorm", "post_ffw_norm"),
            ]
        ),
    ],
    extra={"rope_freqs.weight": _llama3_freqs},
    defaults={"sliding_window": 4096, "sliding_window_pattern": 4, "layer_types": _layer_types},
    tokenizer={"vocab": "gpt2"},
    model_types={"Exaone4ForCausalLM": "exaone4"},
    hf_config=_hf_config,
)


# Exaone4_5_TextModel: the same file from the VLM's text half; no HF class is the text
# half alone, so GGUF -> HF refuses it (as for qwen2vl)
def _n_nextn(cfg: dict) -> int:
    return int(cfg.get("num_nextn_predict_layers") or 0)


#: EXAONE 4.0's rows with the MTP blocks counted in ``block_count`` (the 4.5 text and
#: the MoE classes set the reference's block count so)
_ROWS_WITH_MTP = replace_rows(
    EXAONE4.meta,
    block_count=m(
        "block_count",
        "num_hidden_layers",
        value=lambda c: c["num_hidden_layers"] + _n_nextn(c),
    ),
)

EXAONE4_5_TEXT = replace(
    EXAONE4,
    hf_archs=("Exaone4_5_ForConditionalGeneration",),
    meta=[
        *_ROWS_WITH_MTP,
        m("nextn_predict_layers", "num_nextn_predict_layers", value=lambda c: _n_nextn(c) or None),
    ],
    model_types={},
)


# ExaoneMoEModel (K-EXAONE, ``ExaoneMoeForCausalLM``): EXAONE 4.0's attention and rows with
# pre-norms (``input_layernorm`` -> ``attn_norm``, ``post_attention_layernorm`` ->
# ``ffn_norm``), dense lead layers, then sigmoid-routed experts (per expert, stacked
# ``down``, ``gate``, ``up`` when a layer's last one is read) with a correction bias and
# shared experts; its rows after the window ones, ``rope.scaling.type`` ``none`` last
_MOE = LAYER + "mlp."


def _lead_dense(cfg: dict) -> int:
    return int(first(cfg, ("first_k_dense_replace", "first_last_k_dense_replace")) or 0)


def _moe_hf_config(cfg: dict, names: set[str]) -> dict:
    n = cfg["num_hidden_layers"]
    lead = cfg.get("first_k_dense_replace", 0)
    return {
        **_hf_config(cfg, names),
        "mlp_layer_types": ["dense" if i < lead else "sparse" for i in range(n)],
        "rope_scaling": None,  # the GGUF's "none" is llama.cpp's word for default RoPE
    }


EXAONE_MOE = Arch(
    hf_archs=("ExaoneMoeForCausalLM", "ExaoneMoEForCausalLM"),
    gguf_arch="exaone-moe",
    meta=[
        *replace_rows(
            _ROWS_WITH_MTP,
            expert_count=m("expert_count", "num_experts", value=lambda c: c.get("num_experts")),
        ),
        m("expert_feed_forward_length", "moe_intermediate_size"),
        m("expert_shared_count", "num_shared_experts"),
        m(
            "expert_shared_feed_forward_length",
            "_shared_ff",
            value=lambda c: c["moe_intermediate_size"] * c["num_shared_experts"],
        ),
        m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
        m("expert_weights_norm", "norm_topk_prob", t=VT.BOOL),
        m("leading_dense_block_count", "first_k_dense_replace", value=_lead_dense),
        m("nextn_predict_layers", "num_nextn_predict_layers", value=_n_nextn),
        m("rope.scaling.type", "_rope_scaling", t=VT.STRING, value=lambda c: "none"),
    ],
    names=[
        *BASE_NAMES,
        *QK_NORM,
        *FFN_NORM,
        NameRule(_MOE + "gate.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(_MOE + "e_score_correction_bias", BLK + "exp_probs_b.bias"),
        NameRule(_MOE + "gate.e_score_correction_bias", BLK + "exp_probs_b.bias"),
        *(
            NameRule(_MOE + f"shared_experts.{w}_proj.weight", BLK + f"ffn_{w}_shexp.weight")
            for w in ("gate", "up", "down")
        ),
    ],
    stacks=expert_stacks(lambda c: c["num_experts"]),
    extra={"rope_freqs.weight": _llama3_freqs},
    # ExaoneMoeConfig's defaults, as AutoConfig fills them before the reference reads them
    defaults={
        "sliding_window": 4096,
        "sliding_window_pattern": 4,
        "layer_types": _layer_types,
        "first_k_dense_replace": 1,
        "moe_intermediate_size": 1024,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "num_shared_experts": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "n_group": 1,
        "topk_group": 1,
    },
    tokenizer={"vocab": "gpt2"},
    model_types={"ExaoneMoeForCausalLM": "exaone_moe"},
    hf_config=_moe_hf_config,
)
