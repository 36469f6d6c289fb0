"""Qwen4-Exp (Qwen3.8-Flash-Next): conversion/qwen4exp.py ``Qwen4ExpTextModel`` (GGUF
``qwen4exp``), for ``Qwen4ExpForCausalLM`` and the text half of
``Qwen4ExpForConditionalGeneration``.

Qwen3.5-MoE's layers (gated DeltaNet + gated attention, interleaved MRoPE, the V-head
reorder, ``A = -exp(A_log)``, norms stored as ``1 + w``: :mod:`.qwen35`) with three
additions:

* hyper-connections in place of the layer norms: per layer, for attention and for the
  MLP, ``hc_norm`` (``1 + w`` as every norm), ``input_mix_weight_down`` / ``_up`` and
  ``block_inject_weight`` (``hc_{attn,ffn}_{norm,down,up,inject}``); the final mixer
  ``model.hyper_connection_mixer.*`` is ``output_hc_*``; rows
  ``hyper_connection.count`` / ``.low_rank``;
* QSA sparse attention on the full-attention layers: the indexer's one
  ``index_qk_proj`` split into ``indexer.q_proj`` (the first ``indexer_n_heads *
  indexer_head_dim`` rows) and ``indexer.k_proj``, its Q/K norms (``1 + w``) as
  ``indexer.q_norm`` / ``k_norm``; rows ``attention.indexer.head_count`` / ``key_length``
  / ``top_k`` (``indexer_budget``) and ``attention.compress_ratios`` (per layer: the
  ratio where the layer type is ``full_attention``, else 0).  The reference reads the
  config through transformers' AutoConfig, whose Qwen4-Exp config renames every
  ``full_attention`` layer to ``indexed_attention``: the ratios it writes are all 0,
  and so are ours;
* PLE n-gram hash embeddings (``ple_layer_ids``): int64 hash constants as metadata and a
  sharded n-gram table.  Not converted: its tensors (``ple.*``) have no rule, so such a
  checkpoint is refused (``UnmappedTensor``) before any output.

The gated DeltaNet's output gate activation (``output_gate_type``, else ``hidden_act``
in transformers) has no row: the pinned llama.cpp's ``qwen4exp`` graph always runs
sigmoid.  A checkpoint with a silu gate converts (the reference converts it, to the same
bytes) but llama.cpp runs it with sigmoid; GGUF -> HF writes ``output_gate_type:
sigmoid``, the gate the file runs with.

The reference class drops the MTP block (``no_mtp``): ``mtp.*`` is skipped, the block
count is the trunk's, no ``nextn_predict_layers`` row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ._common import BLK, LAYER, layer_rules
from ._model import VT, MetaKey, NameRule, Split, m
from .qwen35 import QWEN35MOE

_HC_PARTS = [
    ("hc_norm", "norm"),
    ("input_mix_weight_down", "down"),
    ("input_mix_weight_up", "up"),
    ("block_inject_weight", "inject"),
]
_HC_NAMES = [
    *layer_rules([(f"attn_hyper_connection.{h}", f"hc_attn_{g}") for h, g in _HC_PARTS]),
    *layer_rules([(f"mlp_hyper_connection.{h}", f"hc_ffn_{g}") for h, g in _HC_PARTS]),
    *[
        NameRule(f"model.hyper_connection_mixer.{h}.weight", f"output_hc_{g}.weight")
        for h, g in _HC_PARTS[:3]
    ],
    *layer_rules(
        [
            ("self_attn.indexer.q_layernorm", "indexer.q_norm"),
            ("self_attn.indexer.k_layernorm", "indexer.k_norm"),
        ]
    ),
]


def _n_q(cfg: dict) -> int:
    return cfg["indexer_n_heads"] * cfg["indexer_head_dim"]


_INDEXER_QK = Split(
    LAYER + "self_attn.indexer.index_qk_proj.weight",
    (BLK + "indexer.q_proj.weight", BLK + "indexer.k_proj.weight"),
    fn=lambda x, cfg: [x[: _n_q(cfg)], x[_n_q(cfg) :]],
    shapes=lambda s, cfg: [(_n_q(cfg), *s[1:]), (s[0] - _n_q(cfg), *s[1:])],
    join=lambda parts, cfg: np.concatenate(parts),
)


def _autoconfig_types(cfg: dict) -> list[str]:
    """``layer_types`` as Qwen4ExpTextConfig leaves them (``full_attention`` renamed)."""
    return ["indexed_attention" if t == "full_attention" else t for t in cfg["layer_types"]]


def _compress_ratios(cfg: dict) -> list[int]:
    ratio = cfg["indexer_compress_ratio"]
    return [ratio if t == "full_attention" else 0 for t in _autoconfig_types(cfg)]


_ROWS: list[MetaKey | str] = [
    *QWEN35MOE.meta,
    m("hyper_connection.count", "hc_count"),
    m("hyper_connection.low_rank", "hc_lowrank"),
    m("attention.indexer.head_count", "indexer_n_heads"),
    m("attention.indexer.key_length", "indexer_head_dim"),
    m("attention.indexer.top_k", "indexer_budget"),
    m(
        "attention.compress_ratios",
        "indexer_compress_ratio",
        t=VT.INT32,
        value=_compress_ratios,
    ),
]


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    out = QWEN35MOE.hf_config(cfg, names)
    out.pop("mtp_num_hidden_layers", None)
    out["layer_types"] = [
        "indexed_attention" if t == "full_attention" else t for t in out.get("layer_types", [])
    ] or None
    ratios = [int(r) for r in cfg.get("indexer_compress_ratio") or [] if int(r)]
    # the reference writes every ratio as 0 (module docstring): the ratio is then not in
    # the file; the budget itself is a valid ratio (it must divide the budget)
    # the gated DeltaNet's output gate is not in the file: llama.cpp's qwen4exp graph always
    # runs sigmoid, so that is what the GGUF means (transformers would take ``hidden_act``)
    out.update(
        indexer_kv_heads=1,
        indexer_compress_ratio=ratios[0] if ratios else cfg["indexer_budget"],
        ple_layer_ids=[],
        output_gate_type="sigmoid",
    )
    return out


# the Qwen4ExpTextConfig defaults AutoConfig fills in beyond Qwen3.5's
_DEFAULTS = {**QWEN35MOE.defaults, "hc_count": 4, "hc_lowrank": 320}

QWEN4EXP = replace(
    QWEN35MOE,
    hf_archs=("Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration"),
    gguf_arch="qwen4exp",
    meta=_ROWS,
    names=[*(r for r in QWEN35MOE.names if "layernorm" not in r.hf), *_HC_NAMES],
    splits=[*QWEN35MOE.splits, _INDEXER_QK],
    skip=(*QWEN35MOE.skip, r"^(model\.)?mtp\."),
    defaults=_DEFAULTS,
    required=(
        *QWEN35MOE.required,
        "indexer_n_heads",
        "indexer_head_dim",
        "indexer_budget",
        "indexer_compress_ratio",
    ),
    ignored=("mtp_num_hidden_layers",),
    model_types={"Qwen4ExpForCausalLM": "qwen4_exp_text"},
    hf_config=_hf_config,
    rename=None,
    from_tensors=None,
)
