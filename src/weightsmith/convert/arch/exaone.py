"""EXAONE 4.0 and the text half of EXAONE 4.5: conversion/exaone.py (GGUF ``exaone4``).

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

from ._common import BASE_NAMES, COMMON, QK_NORM, layer_rules, llama3_rope_freqs, replace_rows
from ._model import VT, Arch, m

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


EXAONE4_5_TEXT = replace(
    EXAONE4,
    hf_archs=("Exaone4_5_ForConditionalGeneration",),
    meta=[
        *replace_rows(
            EXAONE4.meta,
            block_count=m(
                "block_count",
                "num_hidden_layers",
                value=lambda c: c["num_hidden_layers"] + _n_nextn(c),
            ),
        ),
        m("nextn_predict_layers", "num_nextn_predict_layers", value=lambda c: _n_nextn(c) or None),
    ],
    model_types={},
)
