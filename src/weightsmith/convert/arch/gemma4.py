"""Gemma 4 text: conversion/gemma.py ``Gemma4Model`` (GGUF ``gemma4``).

Gemma 3's rows, then per-layer facts as arrays and Gemma 4's own keys:

* ``layer_types`` -> ``attention.sliding_window_pattern`` (one BOOL per layer, true
  for a sliding-window layer);
* two head sizes: full-attention layers use ``global_head_dim`` (the Hub's spelling;
  transformers 5 saves it as ``per_layer_config[i].head_dim`` of the full layers),
  written as ``attention.key_length`` / ``value_length`` and ``rope.dimension_count``;
  sliding layers ``head_dim`` (``*_swa``), with
  ``rope.dimension_count_swa``;
* where the full layers have their own KV head count (``num_global_key_value_heads``
  with ``attention_k_eq_v``, or ``per_layer_config[i].num_key_value_heads``),
  ``attention.head_count_kv`` becomes a per-layer INT32 array;
* ``use_double_wide_mlp``: the KV-shared layers' MLP is twice as wide, so
  ``feed_forward_length`` becomes a per-layer INT32 array;
* shared-KV layers (``num_kv_shared_layers``, the last ones): they have no K/V
  projections or K norm, and the file simply has none -- llama.cpp reads the count;
* per-layer embeddings (``hidden_size_per_layer_input``, 0 for none):
  ``embed_tokens_per_layer`` (not cut to the tokenizer, unlike ``embed_tokens``),
  ``per_layer_model_projection``, ``per_layer_projection_norm`` and per layer
  ``per_layer_input_gate``, ``per_layer_projection``, ``post_per_layer_input_norm``.

Norm weights are stored as they are (Gemma 4's RMS norm multiplies by ``w``, not
``1 + w``).  ``rope_freqs.weight`` is computed from the config: the full layers'
"proportional" RoPE rotates only ``partial_rotary_factor`` of the head, which ggml's
NeoX RoPE expresses as frequency factors 1 for the rotated pairs and 1e30 for the rest.

The text half of ``Gemma4ForConditionalGeneration`` (the Hub's form) converts the same
way: ``text_config`` is read and ``model.language_model.`` is stripped to ``model.``;
the vision and audio towers are left out.

The MoE layout (``enable_moe_block``, 26B-A4B) adds beside each dense MLP a router
(``router.proj`` -> ``ffn_gate_inp``; its ``scale`` and ``per_expert_scale`` as
``ffn_gate_inp.scale`` and ``ffn_down_exps.scale``), the experts kept fused
(``experts.gate_up_proj`` -> ``ffn_gate_up_exps``, ``experts.down_proj`` ->
``ffn_down_exps``, both as stored) and three more norms.

The tokenizer (``{"vocab": "gemma4"}``) is llama.cpp's ``LlamaHfVocab`` over
``tokenizer.json`` (a byte-fallback BPE) with ``tokenizer.ggml.model = gemma4``
and the BPE merges.

GGUF -> HF writes ``Gemma4ForCausalLM`` (``gemma4_text``): ``layer_types``,
``head_dim`` / ``global_head_dim``, the KV heads and the MLP width back from the
arrays.  ``partial_rotary_factor`` of the full layers is not in the metadata
(only in ``rope_freqs``' values); every Gemma 4 uses 0.25, which is written.

Two variants reuse these rows (:data:`GEMMA4_UNIFIED`, :data:`GEMMA4_ASSISTANT`): the
text half of Gemma 4 Unified (no per-layer embeddings, ``suppress_tokens`` from
``generation_config.json``) and the MTP drafter (GGUF ``gemma4-assistant``: every
layer reads the target's KV; projections from and to the target's hidden size).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ._common import BLK, GEMMA_EMBED_ROWS, LAYER, layer_rules, replace_rows
from ._model import VT, Arch, MetaKey, NameRule, first, m, rope_parameters
from .gemma import GEMMA3, GEMMA_PLE_NAMES

_SLIDING = "sliding_attention"
_FULL = "full_attention"


def _full_layer_value(cfg: dict, key: str) -> Any:
    """``per_layer_config``'s ``key`` for the first full-attention layer that sets it."""
    types = cfg.get("layer_types") or []
    for idx, layer in (cfg.get("per_layer_config") or {}).items():
        i = int(idx)
        if i < len(types) and types[i] == _FULL and isinstance(layer, dict) and key in layer:
            return layer[key]
    return None


# AutoConfig (which the reference reads) turns the Hub's ``global_head_dim`` (default
# 512) and ``num_global_key_value_heads`` (kept only with ``attention_k_eq_v``) into
# ``per_layer_config``, and ignores both when ``per_layer_config`` is given


def _head_dim_full(cfg: dict) -> int:
    if cfg.get("per_layer_config") is not None:
        return _full_layer_value(cfg, "head_dim")
    hd = cfg.get("global_head_dim")
    return 512 if hd is None else hd


def _kv_full(cfg: dict) -> Any:
    if cfg.get("per_layer_config") is not None:
        return _full_layer_value(cfg, "num_key_value_heads")
    return cfg.get("num_global_key_value_heads") if cfg.get("attention_k_eq_v") else None


def _swa_pattern(cfg: dict) -> list[bool]:
    return [t == _SLIDING for t in cfg["layer_types"]]


def _kv_array(cfg: dict) -> list[int] | None:
    full, swa = _kv_full(cfg), cfg.get("num_key_value_heads")
    if full is None or swa is None:
        return None
    return [swa if s else full for s in _swa_pattern(cfg)]


def _ffn_array(cfg: dict) -> list[int] | None:
    if not cfg.get("use_double_wide_mlp"):
        return None
    n, ff = cfg["num_hidden_layers"], cfg["intermediate_size"]
    first_shared = n - cfg["num_kv_shared_layers"]
    return [ff if i < first_shared else 2 * ff for i in range(n)]


def _n_rot_swa(cfg: dict) -> int:
    # the reference reads the factor from the top level of rope_parameters (1.0 when the
    # settings are per layer type): the sliding layers rotate their whole head
    return int(cfg["head_dim"] * rope_parameters(cfg).get("partial_rotary_factor", 1.0))


def _rope_freqs(cfg: dict) -> np.ndarray:
    full = rope_parameters(cfg)["full_attention"]
    hd = _head_dim_full(cfg)
    n_rot = int(hd * full["partial_rotary_factor"] / 2)
    return np.array([1.0] * n_rot + [1e30] * (hd // 2 - n_rot), dtype=np.float32)


def _layer_types(cfg: dict) -> list[str]:
    """Gemma4TextConfig's default: every 6th layer full, the last one always full."""
    n = cfg.get("num_hidden_layers", 30)
    types = [_SLIDING if (i + 1) % 6 else _FULL for i in range(n)]
    return [*types[:-1], _FULL] if types else types


_ROWS: list[Any] = [
    *GEMMA3.meta,
    m("attention.shared_kv_layers", "num_kv_shared_layers"),
    m(
        "embedding_length_per_layer_input",
        "hidden_size_per_layer_input",
        value=lambda cfg: cfg.get("hidden_size_per_layer_input") or 0,
    ),
    m("attention.sliding_window_pattern", "_swa_pattern", t=VT.BOOL, value=_swa_pattern),
    m("attention.key_length", "global_head_dim", value=_head_dim_full),
    m("attention.value_length", "global_head_dim", value=_head_dim_full),
    m("attention.key_length_swa", "_head_dim_swa", value=lambda cfg: cfg["head_dim"]),
    m("attention.value_length_swa", "_head_dim_swa", value=lambda cfg: cfg["head_dim"]),
    m(
        "expert_feed_forward_length",
        "moe_intermediate_size",
        value=lambda cfg: first(cfg, ("expert_intermediate_size", "moe_intermediate_size")),
    ),
    m("feed_forward_length", "_ffn_per_layer", t=VT.INT32, value=_ffn_array),
    m("attention.head_count_kv", "_kv_per_layer", t=VT.INT32, value=_kv_array),
    m("rope.dimension_count", "_n_rot", value=_head_dim_full),
    m("rope.dimension_count_swa", "_n_rot_swa", value=_n_rot_swa),
]


def _hf_config(cfg: dict, names: set[str]) -> dict:
    swa = [bool(x) for x in cfg["_swa_pattern"]]
    n = len(swa)
    out: dict[str, Any] = {
        "hidden_activation": "gelu_pytorch_tanh",
        "layer_types": [_SLIDING if s else _FULL for s in swa],
        "head_dim": cfg["_head_dim_swa"],
        "global_head_dim": cfg["global_head_dim"],
        "num_kv_shared_layers": cfg.get("num_kv_shared_layers", 0),
        "rope_parameters": {
            _FULL: {
                "rope_type": "proportional",
                "partial_rotary_factor": 0.25,
                "rope_theta": cfg.get("rope_theta", 1_000_000.0),
            },
            _SLIDING: {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq")},
        },
        # GGUF keeps the tokenizer-sized embedding; the per-layer one has as many rows
        "vocab_size_per_layer_input": cfg["vocab_size"],
        "enable_moe_block": any(n.endswith("ffn_gate_inp.weight") for n in names),
        "num_experts": cfg.get("num_local_experts"),
        "top_k_experts": cfg.get("num_experts_per_tok"),
        "attention_k_eq_v": False,
        "use_double_wide_mlp": False,
    }
    ffn = cfg.get("_ffn_per_layer")
    if isinstance(ffn, (list, tuple)) or hasattr(ffn, "tolist"):
        ffn = [int(x) for x in ffn]
        out["intermediate_size"] = ffn[0]
        out["use_double_wide_mlp"] = any(x != ffn[0] for x in ffn)
    kv = cfg.get("_kv_per_layer")
    if isinstance(kv, (list, tuple)) or hasattr(kv, "tolist"):
        kv = [int(x) for x in kv]
        out["num_key_value_heads"] = next((k for k, s in zip(kv, swa) if s), kv[0])
        out["num_global_key_value_heads"] = next((k for k, s in zip(kv, swa) if not s), kv[0])
        # the full layers share one projection for K and V (no attn_v): transformers
        # applies the full layers' own KV head count only then
        first_shared = n - out["num_kv_shared_layers"]
        out["attention_k_eq_v"] = any(
            not s and f"blk.{i}.attn_v.weight" not in names
            for i, s in enumerate(swa[:first_shared])
        )
    if _unified_text(out, names):
        out.update(architectures=["Gemma4UnifiedForCausalLM"], model_type="gemma4_unified_text")
    return out


def _unified_text(out: dict, names: set[str]) -> bool:
    """The Unified text layout (no per-layer embeddings, no experts) with KV-shared layers:
    transformers 5's Gemma4ForCausalLM cannot run it (its KV-shared path slices the absent
    per-layer inputs), Gemma4UnifiedForCausalLM, the same computation, can."""
    return (
        out["num_kv_shared_layers"] > 0
        and "per_layer_token_embd.weight" not in names
        and not out["enable_moe_block"]
    )


_NAMES = [
    *GEMMA_PLE_NAMES,
    NameRule(LAYER + "layer_scalar", BLK + "layer_output_scale.weight"),
    # the MoE block beside the dense MLP: experts kept fused, router scales as ``.scale``
    *layer_rules(
        [
            ("pre_feedforward_layernorm_2", "pre_ffw_norm_2"),
            ("post_feedforward_layernorm_1", "post_ffw_norm_1"),
            ("post_feedforward_layernorm_2", "post_ffw_norm_2"),
            ("router.proj", "ffn_gate_inp"),
        ]
    ),
    NameRule(LAYER + "experts.gate_up_proj", BLK + "ffn_gate_up_exps.weight"),
    NameRule(LAYER + "experts.down_proj", BLK + "ffn_down_exps.weight"),
    NameRule(LAYER + "router.scale", BLK + "ffn_gate_inp.scale"),
    NameRule(LAYER + "router.per_expert_scale", BLK + "ffn_down_exps.scale"),
    NameRule("model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"),
    NameRule("model.per_layer_model_projection.weight", "per_layer_model_proj.weight"),
    NameRule("model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"),
]

# Gemma4TextConfig's defaults, as AutoConfig fills them before llama.cpp reads them
_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_144,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6,
    "sliding_window": 512,
    "hidden_size_per_layer_input": 256,
    "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False,
    "attention_k_eq_v": False,
    "layer_types": _layer_types,
    "rope_parameters": lambda cfg: {
        _SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        _FULL: {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 1_000_000.0,
        },
    },
}

GEMMA4 = Arch(
    hf_archs=("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"),
    gguf_arch="gemma4",
    meta=_ROWS,
    names=_NAMES,
    transforms=[GEMMA_EMBED_ROWS],
    vocab_rows=True,
    extra={"rope_freqs.weight": _rope_freqs},
    required=("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"),
    defaults=_DEFAULTS,
    tokenizer={"vocab": "gemma4"},
    model_types={"Gemma4ForCausalLM": "gemma4_text"},
    hf_config=_hf_config,
)


# --------------------------------------------------------------------------- Gemma 4 Unified


def _suppress_tokens(cfg: dict) -> list[int] | None:
    # gguf-py refuses an empty array (the reference then fails); we write no key
    return cfg.get("_suppress_tokens") or None


_SUPPRESS = MetaKey(
    "tokenizer.ggml.suppress_tokens", ("_suppress_tokens",), VT.INT32, _suppress_tokens,
    absolute=True,
)  # fmt: skip

# Gemma4UnifiedTextConfig: no per-layer embeddings or MoE fields at all, a longer context
# and window than Gemma4TextConfig's
_UNIFIED_DEFAULTS = {
    **{k: v for k, v in _DEFAULTS.items() if k != "hidden_size_per_layer_input"},
    "max_position_embeddings": 262_144,
    "sliding_window": 1024,
}

#: ``Gemma4UnifiedForConditionalGeneration`` (conversion/gemma.py ``Gemma4UnifiedModel``):
#: the text half is Gemma 4 text without per-layer embeddings; ``generation_config.json``'s
#: ``suppress_tokens`` are written last among the hyperparameters.  Its GGUF is ``gemma4``:
#: GGUF -> HF gives ``Gemma4UnifiedForCausalLM`` where the layout needs it (KV-shared
#: layers, see ``_unified_text``), else ``Gemma4ForCausalLM``; the text class converts
#: too (the reference registers the composite class alone).
GEMMA4_UNIFIED = replace(
    GEMMA4,
    hf_archs=("Gemma4UnifiedForConditionalGeneration", "Gemma4UnifiedForCausalLM"),
    meta=[*_ROWS, _SUPPRESS],
    defaults=_UNIFIED_DEFAULTS,
    suppress_tokens=True,
    model_types={},
)


# --------------------------------------------------------------------------- assistant (MTP)


def _for_unified(gemma4: Any, unified: Any):
    """A default that depends on the assistant's class (its text config's class)."""

    def get(cfg: dict) -> Any:
        archs = cfg.get("architectures") or [""]
        return unified if "Unified" in str(archs[0]) else gemma4

    return get


_ASSISTANT_DEFAULTS = {
    **{k: v for k, v in _DEFAULTS.items() if k != "num_kv_shared_layers"},
    # transformers refuses an assistant with per-layer embeddings; the Unified text config
    # has no such field, which the reference reads as 0
    "hidden_size_per_layer_input": 0,
    "max_position_embeddings": _for_unified(131_072, 262_144),
    "sliding_window": _for_unified(512, 1024),
    "backbone_hidden_size": _for_unified(1536, 3840),
    # the assistant's config class shares every layer's KV (0 or missing: all layers)
    "num_kv_shared_layers": lambda cfg: cfg.get("num_hidden_layers", 30),
}

_ASSISTANT_ROWS = [
    *replace_rows(
        _ROWS,
        attention__shared_kv_layers=m(
            "attention.shared_kv_layers",
            "num_kv_shared_layers",
            value=lambda cfg: cfg.get("num_kv_shared_layers") or cfg["num_hidden_layers"],
        ),
    ),
    m("embedding_length_out", "backbone_hidden_size"),
    m("nextn_predict_layers", "_nextn_predict_layers", value=lambda cfg: cfg["num_hidden_layers"]),
]

#: config.json fields of the assistant class itself; the rest is its ``text_config``
_ASSISTANT_TOP = (
    "architectures", "model_type", "backbone_hidden_size", "tie_word_embeddings", "dtype",
    "torch_dtype",
)  # fmt: skip


def _assistant_hf_config(cfg: dict, names: set[str]) -> dict:
    out = {**_hf_config(cfg, names), "vocab_size_per_layer_input": 0}
    # its text model is run one draft token at a time, which Gemma4TextModel runs
    out.pop("architectures", None)
    out.pop("model_type", None)
    return out


def _assistant_nest(cfg: dict) -> dict:
    text = {k: v for k, v in cfg.items() if k not in _ASSISTANT_TOP}
    text["model_type"] = "gemma4_text"
    text["tie_word_embeddings"] = cfg.get("tie_word_embeddings", True)
    top = {k: cfg[k] for k in _ASSISTANT_TOP if k in cfg}
    # the reference drops the ordered-embedding tensors: the plain LM head is what is left
    return {**top, "use_ordered_embeddings": False, "text_config": text}


#: ``Gemma4AssistantForCausalLM`` / ``Gemma4UnifiedAssistantForCausalLM``, the MTP drafter
#: (conversion/gemma.py ``Gemma4AssistantModel``, GGUF ``gemma4-assistant``): Gemma 4 text
#: layers whose KV all come from the target model (no K/V projections), with
#: ``pre_projection`` / ``post_projection`` to and from the target's hidden size
#: (``embedding_length_out``) and every layer counted as a nextn layer.  The ordered
#: embedding (``masked_embedding.*``) is not converted, as the reference skips it.
GEMMA4_ASSISTANT = replace(
    GEMMA4,
    hf_archs=("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"),
    gguf_arch="gemma4-assistant",
    meta=_ASSISTANT_ROWS,
    names=[
        *_NAMES,
        NameRule("pre_projection.weight", "nextn.pre_projection.weight"),
        NameRule("post_projection.weight", "nextn.post_projection.weight"),
    ],
    skip=(*GEMMA4.skip, r"masked_embedding"),
    defaults=_ASSISTANT_DEFAULTS,
    model_types={
        "Gemma4AssistantForCausalLM": "gemma4_assistant",
        "Gemma4UnifiedAssistantForCausalLM": "gemma4_unified_assistant",
    },
    hf_config=_assistant_hf_config,
    hf_wrap=_assistant_nest,
)
