"""MiMo-V2 text (``MiMoV2FlashForCausalLM``, and MiMo-V2.5's ``MiMoV2ForCausalLM``):
conversion/mimo.py ``MimoV2Model`` (GGUF ``mimo2``).

The layer: Q/K heads ``head_dim`` wide and V heads ``v_head_dim`` wide, RoPE (NeoX) over
``int(head_dim * partial_rotary_factor)`` of each head, values scaled by
``attention_value_scale``; full-attention and sliding-window layers by
``hybrid_layer_pattern`` (1 = sliding), the sliding ones with their own KV head count
(``swa_num_key_value_heads``) and an attention sink per head
(``self_attn.attention_sink_bias``, no ``.weight``: the reference appends it ->
``attn_sinks.weight``); a dense MLP where the checkpoint has one, else per-expert
``mlp.experts.{x}.{gate,up,down}_proj`` stacked per layer in that order, a sigmoid router
(``mlp.gate`` -> ``ffn_gate_inp``) and its selection bias (``e_score_correction_bias`` ->
``exp_probs_b.bias``).  No Q/K permutation (the reference's class is a plain TextModel).

The reference always counts three MTP blocks (its ``_n_nextn``: the Hub's checkpoints
ship three, the config does not say so): ``block_count`` is the trunk + 3, the per-layer
rows are padded with sliding layers, ``nextn_predict_layers`` = 3, whether or not the
checkpoint holds them; their tensors (``model.mtp.layers.{i}.*``) are numbered after the
trunk (``blk.{n + i}``).  The rows are TextModel's with ``head_count_kv`` (per layer),
``value_length`` (``v_head_dim``) and ``expert_count`` overwritten in place, then the
class's after ``general.file_type``.

They read the Hub's field names (``hybrid_layer_pattern``, ``swa_*``, ``layernorm_epsilon``,
``topk_method``, a top-level ``partial_rotary_factor``), which transformers 5.24's
``MiMoV2FlashConfig`` replaces (``layer_types``, per-layer-type ``rope_parameters``): the
reference stops with a ``KeyError`` on such a config, and ours refuses it by name.  The
reference asserts the sliding layers' head widths and query heads equal the full ones'
and ``topk_method: noaux_tc``; others are refused by name.  FP8 checkpoints (its
tensor-parallel-aware dequantization of the fused ``qkv_proj``) and MXFP4 experts are not
done: any ``quantization_config`` is refused by name.

GGUF -> HF gives transformers 5.24's ``MiMoV2FlashForCausalLM`` config (``layer_types``,
``mlp_layer_types``, ``rope_parameters`` per layer type); that class has twice the full
layers' KV heads on sliding ones and sinks on exactly those, so a file that differs is
refused by name.  MTP blocks go back as ``model.mtp.layers.{i}.*`` (transformers skips
them on load).

MiMo-V2.5's text (``MiMoV2ForCausalLM``, remote code) is the same model with a fused
``self_attn.qkv_proj`` (rows ``[Q | K | V]``) -> ``attn_qkv`` as it is (llama.cpp splits
it by the head counts; its MTP graph needs it fused); its towers (``visual.``,
``audio_encoder.``, ``speech_embeddings.``) are the projector's.  No transformers class
holds a fused file: GGUF -> HF refuses it by name.
"""

from __future__ import annotations

import re
from typing import Any

from ...errors import UnknownArchitecture
from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    FFN_NORM,
    LAYER,
    NEXTN_NAMES,
    layer_rules,
    replace_rows,
)
from ._model import FILE_TYPE, VT, Arch, Mtp, NameRule, Stack, m, rope_parameters

#: the MTP blocks the reference always counts (MimoV2Model._n_nextn)
N_NEXTN = 3

_MTP = re.compile(r"^model\.mtp\.layers\.(\d+)\.")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _n_nextn(cfg: dict) -> int:
    """The MTP blocks counted: the reference's three, none without them (``mtp="drop"``)."""
    return cfg.get("_nextn", N_NEXTN)


def _pattern(cfg: dict) -> list[int]:
    """``hybrid_layer_pattern`` with the MTP blocks as sliding layers (the reference's
    padding)."""
    return [int(x) for x in cfg["hybrid_layer_pattern"]] + [1] * _n_nextn(cfg)


def _kv_heads(cfg: dict) -> list[int]:
    full, swa = cfg["num_key_value_heads"], cfg["swa_num_key_value_heads"]
    return [swa if p == 1 else full for p in _pattern(cfg)]


def _rope_dim(cfg: dict) -> int:
    return int(cfg["head_dim"] * rope_parameters(cfg)["partial_rotary_factor"])


def _check(cfg: dict) -> tuple[str, Any, Any] | None:
    """The reference's assertions, its ``KeyError`` on a config without a top-level
    partial rotary factor, and what is not done here (quantized checkpoints)."""
    for swa, full in (
        ("swa_head_dim", "head_dim"),
        ("swa_num_attention_heads", "num_attention_heads"),
        ("swa_v_head_dim", "v_head_dim"),
    ):
        if cfg.get(swa) != cfg.get(full):
            return (swa, f"{full} = {cfg.get(full)!r}", cfg.get(swa))
    if cfg.get("topk_method") != "noaux_tc":
        return ("topk_method", "noaux_tc", cfg.get("topk_method"))
    if "partial_rotary_factor" not in rope_parameters(cfg):
        return (
            "partial_rotary_factor",
            "the Hub's top-level field (no per-layer-type rope_parameters)",
            "no such field",
        )
    if cfg.get("quantization_config") is not None:
        return ("quantization_config", "none (FP8 / MXFP4 MiMo is not done)", "present")
    return None


def _mtp_forward(name: str, cfg: dict) -> str:
    mt = _MTP.match(name)
    if mt is None:
        return name
    bid = cfg["num_hidden_layers"] + int(mt[1])
    return f"model.layers.{bid}." + name[mt.end() :]


def _mtp_back(name: str, cfg: dict) -> str:
    mt = _LAYER.match(name)
    n = cfg["num_hidden_layers"]
    if mt is None or int(mt[1]) < n:
        return name
    return f"model.mtp.layers.{int(mt[1]) - n}." + name[mt.end() :]


_ROWS: list = [
    *replace_rows(
        COMMON,
        block_count=m("block_count", "num_hidden_layers",
                      value=lambda c: c["num_hidden_layers"] + _n_nextn(c)),
        # gguf-py writes a list of Python ints as an INT32 array
        attention__head_count_kv=m("attention.head_count_kv", "_kv_heads", t=VT.INT32,
                                   value=_kv_heads),
        attention__value_length=m("attention.value_length", "v_head_dim",
                                  value=lambda c: c["v_head_dim"]),
        expert_count=m("expert_count", "n_routed_experts"),
    ),
    m("attention.sliding_window", "sliding_window"),
    m("attention.sliding_window_pattern", "_pattern", t=VT.INT32, value=_pattern),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("rope.dimension_count", "_rope_dim", value=_rope_dim),
    m("attention.layer_norm_rms_epsilon", "layernorm_epsilon", t=VT.FLOAT32,
      value=lambda c: c.get("layernorm_epsilon", 1e-5)),
    m("attention.value_scale", "attention_value_scale", t=VT.FLOAT32),
    m("nextn_predict_layers", "_nextn", value=lambda c: _n_nextn(c) or None),
]  # fmt: skip
assert FILE_TYPE in _ROWS


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    """transformers 5.24's MiMoV2FlashConfig fields from the file's rows and tensors."""
    nextn = int(cfg.get("_nextn") or 0)
    n = cfg["num_hidden_layers"] - nextn
    pattern = [int(p) for p in cfg["_pattern"]][:n]
    kv = [int(h) for h in cfg["_kv_heads"]][:n]
    full = [h for h, p in zip(kv, pattern) if p == 0]
    swa = [h for h, p in zip(kv, pattern) if p == 1]
    n_kv = full[0] if full else swa[0] // 2
    if any(x.endswith("attn_qkv.weight") for x in names):
        raise UnknownArchitecture(
            "no transformers class holds MiMo-V2.5's fused qkv_proj (MiMoV2ForCausalLM is "
            "remote code; MiMoV2FlashForCausalLM has q/k/v_proj)",
            field="tensor 'blk.N.attn_qkv.weight'",
            expected="attn_q / attn_k / attn_v",
            found="attn_qkv",
        )
    sinks = [f"blk.{i}.attn_sinks.weight" in names for i in range(n)]
    # transformers' class: 2 x the full layers' KV heads and sinks on every sliding layer
    # and on no full one
    if (
        any(h != n_kv for h in full)
        or any(h != 2 * n_kv for h in swa)
        or sinks != [p == 1 for p in pattern]
    ):
        raise UnknownArchitecture(
            "transformers' MiMoV2FlashForCausalLM cannot hold this file: it has twice the "
            "full layers' KV heads and attention sinks on exactly the sliding layers",
            field="mimo2.attention.head_count_kv",
            expected=f"full {n_kv}, sliding {2 * n_kv}, sinks on sliding layers",
            found=f"{kv}, sinks {sinks}",
        )
    hd = int(cfg["head_dim"])
    # int(head_dim * factor) must give the rotary width back
    prf = (int(cfg["_rope_dim"]) + 0.5) / hd
    rope = {
        "full_attention": {"rope_type": "default", "rope_theta": cfg.get("rope_theta"),
                           "partial_rotary_factor": prf},
        "sliding_attention": {"rope_type": "default",
                              "rope_theta": cfg.get("rope_local_base_freq"),
                              "partial_rotary_factor": prf},
    }  # fmt: skip
    return {
        "num_hidden_layers": n,
        "num_key_value_heads": n_kv,
        "layer_types": ["sliding_attention" if p == 1 else "full_attention" for p in pattern],
        "mlp_layer_types": [
            "sparse" if f"blk.{i}.ffn_gate_inp.weight" in names else "dense" for i in range(n)
        ],
        "rope_parameters": rope,
        "rms_norm_eps": cfg.get("layernorm_epsilon", 1e-5),
        # absent: llama.cpp scales nothing (transformers' default would be 0.707)
        "attention_value_scale": cfg.get("attention_value_scale"),
        "hidden_act": "silu",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.0,
        "attention_bias": False,
    }


MIMO2 = Arch(
    hf_archs=("MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM"),
    gguf_arch="mimo2",
    meta=_ROWS,
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        *layer_rules(
            [
                ("self_attn.qkv_proj", "attn_qkv"),
                ("mlp.gate", "ffn_gate_inp"),
                ("final_layernorm", "layer_output_norm"),
            ]
        ),
        *NEXTN_NAMES,  # the MTP blocks' own tensors
        NameRule(LAYER + "self_attn.attention_sink_bias", BLK + "attn_sinks.weight"),
        NameRule(LAYER + "mlp.gate.e_score_correction_bias", BLK + "exp_probs_b.bias"),
    ],
    # the reference stacks a layer's experts gate, up, down
    stacks=[
        Stack(
            LAYER + f"mlp.experts.{{xid}}.{w}_proj.weight",
            BLK + f"ffn_{w}_exps.weight",
            lambda c: c["n_routed_experts"],
        )
        for w in ("gate", "up", "down")
    ],
    rename=(_mtp_forward, _mtp_back),
    # without the blocks the reference counts none (``_nextn`` 0 here)
    mtp=Mtp(lambda name, cfg: _MTP.match(name) is not None, drop=lambda c: {**c, "_nextn": 0}),
    check=_check,
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "v_head_dim",
        "swa_num_key_value_heads",
        "sliding_window",
        "n_routed_experts",
        "moe_intermediate_size",
    ),
    present=("hybrid_layer_pattern",),
    # GGUF -> HF: the rows the config is rebuilt from (missing: refused by name)
    hf_required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "head_dim",
        "v_head_dim",
        "_kv_heads",
        "_pattern",
        "_rope_dim",
        "sliding_window",
        "n_routed_experts",
        "moe_intermediate_size",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"MiMoV2FlashForCausalLM": "mimo_v2_flash"},
    hf_config=_hf_config,
)
