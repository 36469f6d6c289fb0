"""Llama, Mistral and Mixtral: llama.cpp's ``LlamaModel`` (conversion/llama.py).

Mixtral is the same GGUF architecture (``llama``) with the experts of each layer
stacked: llama.cpp buffers the ``3 x num_local_experts`` expert tensors of a layer
and emits ``w1``, ``w2``, ``w3`` (gate, down, up) when the last one is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ... import errors as E
from ._common import (
    BASE_NAMES,
    BLK,
    COMMON,
    FFN_NORM,
    LAYER,
    PERMUTE_K,
    PERMUTE_Q,
    llama3_rope_freqs,
)
from ._model import VT, Arch, NameRule, Stack, full_rope, head_dim, m
from ._text_config import TOP_ARCHITECTURES


def _n_local(cfg: dict) -> int:
    return cfg["num_local_experts"]


_MOE = LAYER + "block_sparse_moe."


def _autoconfig_head_dim(cfg: dict) -> int | None:
    """LlamaConfig and MistralConfig fill ``head_dim`` (hidden / heads) when config.json
    has none, as Llama 2 and Mistral 7B's do, so llama.cpp writes key/value lengths;
    MixtralConfig leaves it None."""
    archs = cfg.get("architectures") or [""]
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if (
        archs[0] == "MixtralForCausalLM"
        or not isinstance(hidden, int)
        or not isinstance(heads, int)
        or heads <= 0
        or hidden % heads  # inconsistent: left to the config check's named error
    ):
        return None  # a bad config is named by the converter's checks
    return hidden // heads if heads > 0 else None


def _vllama3_heads(cfg: dict) -> int | None:
    """SmolVLM2's text config may leave the head count out: 32, as LlamaModel sets it."""
    return 32 if (cfg.get("architectures") or [""])[0] == "VLlama3ForCausalLM" else None


LLAMA = Arch(
    # LlavaForConditionalGeneration: the text half of a LLaVA (Pixtral) checkpoint
    hf_archs=(
        "LlamaForCausalLM",
        "LLaMAForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "LlavaForConditionalGeneration",
        # the text_config architecture of SmolVLM / Idefics3 (model.text_model.* names)
        "VLlama3ForCausalLM",
        # the text half of Voxtral (its audio tower is the projector's: whisper_audio.py)
        "VoxtralForConditionalGeneration",
    ),
    gguf_arch="llama",
    meta=[
        *COMMON,
        m("vocab_size", "vocab_size"),
        m("rope.dimension_count", "head_dim", value=head_dim),
    ],
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        NameRule(_MOE + "gate.weight", BLK + "ffn_gate_inp.weight"),
    ],
    stacks=[
        Stack(_MOE + "experts.{xid}.w1.weight", BLK + "ffn_gate_exps.weight", _n_local),
        Stack(_MOE + "experts.{xid}.w2.weight", BLK + "ffn_down_exps.weight", _n_local),
        Stack(_MOE + "experts.{xid}.w3.weight", BLK + "ffn_up_exps.weight", _n_local),
    ],
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    defaults={"head_dim": _autoconfig_head_dim, "num_attention_heads": _vllama3_heads},
    # LlamaModel.filter_tensors: SmolVLM's text model is under model.text_model.
    renames=((r"text_model\.", ""),),
    tokenizer={"vocab": "llama"},
    model_types={
        "LlamaForCausalLM": "llama",
        "LLaMAForCausalLM": "llama",
        "MistralForCausalLM": "mistral",
        "MixtralForCausalLM": "mixtral",
    },
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": False,
    },
)


def _ministral3_rope(key: str) -> Callable[[dict], Any]:
    """Ministral3Model's two rows after LlamaModel's (a ``ministral3`` text only): the
    YaRN ``mscale_all_dim`` (llama.cpp's ``yarn_log_multiplier``) and
    ``llama_4_scaling_beta`` (its ``attention.temperature_scale``: Q times
    ``1 + beta log(1 + floor(pos / original context))``).  The reference asserts YaRN and
    stops on a missing key: a named error here."""

    def get(cfg: dict) -> Any:
        if cfg.get("model_type") != "ministral3":
            return None
        rp = full_rope(cfg)
        if rp.get("rope_type") != "yarn" or rp.get(key) is None:
            raise E.InvalidModelConfig(
                "a ministral3 text needs YaRN rope_parameters with this key",
                field=f"rope_parameters.{key}",
                expected="rope_type 'yarn' and a number",
                found=f"rope_type {rp.get('rope_type')!r}, {key} {rp.get(key)!r}",
            )
        return rp[key]

    return get


_MINISTRAL3_ROWS = [
    m(
        "rope.scaling.yarn_log_multiplier",
        "rope_scaling.mscale_all_dim",
        t=VT.FLOAT32,
        value=_ministral3_rope("mscale_all_dim"),
    ),
    m(
        "attention.temperature_scale",
        "rope_scaling.llama_4_scaling_beta",
        t=VT.FLOAT32,
        value=_ministral3_rope("llama_4_scaling_beta"),
    ),
]


# Mistral3Model (conversion/mistral3.py): the text half of Mistral3ForConditionalGeneration
# (Mistral Small 3.1, Ministral 3) is LlamaModel under its own GGUF name, plus the two
# Ministral 3 rows when the text's model_type is "ministral3"; the vision tower is the
# projector's (.mmproj).  A "mistral4" text (DeepseekV2) is another class there, not this
# entry (MISTRAL4, a VARIANTS entry).  No HF class is the text half alone of Mistral
# Small 3.1: GGUF -> HF refuses it, as for qwen2vl; a Ministral 3 text goes back as Ministral3ForCausalLM (MINISTRAL3).
MISTRAL3 = replace(
    LLAMA,
    hf_archs=("Mistral3ForConditionalGeneration",),
    gguf_arch="mistral3",
    meta=[*LLAMA.meta, *_MINISTRAL3_ROWS],
    stacks=[],
    names=[*BASE_NAMES, *FFN_NORM],
    model_types={},
)


def is_ministral3_file(md: Mapping[str, Any]) -> bool:
    """A ``mistral3`` GGUF of a Ministral 3 text (it has the Llama 4 scaling row)."""
    return "mistral3.attention.temperature_scale" in md


def _ministral3_back(cfg: dict, names: set[str]) -> dict:
    """Ministral3Config's ``rope_parameters`` from the file's YaRN rows; ``mscale`` 1, as
    llama.cpp assumes it (its attention factor is mscale(1) / mscale(mscale_all_dim))."""
    rs = dict(cfg.get("rope_scaling") or {})
    rs.pop("type", None)
    rope = {
        "rope_type": "yarn",
        "rope_theta": cfg.get("rope_theta"),
        **rs,
        "mscale": 1.0,
        "max_position_embeddings": cfg.get("max_position_embeddings"),
    }
    return {**LLAMA.hf_config(cfg, names), "rope_parameters": rope, "rope_scaling": None}


# Ministral3ForCausalLM (the text class alone, registered by the same reference class): the
# same file; GGUF -> HF gives it back from a mistral3 file with the Ministral 3 rows
MINISTRAL3 = replace(
    MISTRAL3,
    hf_archs=("Ministral3ForCausalLM",),
    model_types={"Ministral3ForCausalLM": "ministral3"},
    hf_config=_ministral3_back,
)

# Sarashina2VLTextModel (conversion/sarashina2.py), Sarashina2-VL's text half: LlamaModel
# over the ``llm.`` wrapper, the top-level ``norm.`` (the LayerNorm the remote model
# applies to the image features) not converted; the top-level class names it whatever
# ``text_config.architectures`` says.  No HF class is this checkpoint's text alone:
# GGUF -> HF refuses it, as for qwen2vl.
SARASHINA2_TEXT = replace(
    LLAMA,
    hf_archs=("Sarashina2VisionForCausalLM",),
    renames=((r"^llm\.", ""), *LLAMA.renames),
    skip=(*LLAMA.skip, r"^norm\."),
    model_types={},
)

# SmolLM3Model: LlamaModel under its own GGUF name (llama.cpp knows its NoPE layers)
SMOLLM3 = Arch(
    hf_archs=("SmolLM3ForCausalLM",),
    gguf_arch="smollm3",
    meta=LLAMA.meta,
    names=[*BASE_NAMES, *FFN_NORM],
    transforms=[PERMUTE_Q, PERMUTE_K],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    tokenizer={"vocab": "llama"},
    model_types={"SmolLM3ForCausalLM": "smollm3"},
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        # SmolLM3Config defaults pad_token_id to 128004; the GGUF's padding id, if any,
        # replaces this None
        "pad_token_id": None,
    },
)


def _yarn(kind: str):
    """MistralModel.set_mistral_config: params.json's ``yarn`` block as rope scaling rows."""

    def get(cfg: dict):
        y = cfg.get("yarn")
        if not isinstance(y, dict):
            return None
        if kind == "type":
            return "yarn"
        if kind == "log_mul":  # llama.cpp writes mscale_all_dim: 1 unless apply_scale
            return 0.0 if y.get("apply_scale") else 1.0
        return y[kind]

    return get


# Mistral's original layout (``--mistral-format``: conversion/mistral.py's MistralModel,
# a LlamaModel that keeps the checkpoint's interleaved Q/K rows): Meta-style names, the
# config is params.json itself, the tokenizer tekken.json.  Not in the HF registry (no
# HF class name); GGUF -> HF reads these files as ``llama``.
MISTRAL_NATIVE = Arch(
    hf_archs=(),
    gguf_arch="llama",
    meta=[
        *COMMON,
        m("rope.dimension_count", "head_dim", value=head_dim),
        m("rope.scaling.type", "yarn", t=VT.STRING, value=_yarn("type")),
        m("rope.scaling.factor", "yarn", t=VT.FLOAT32, value=_yarn("factor")),
        m("rope.scaling.yarn_beta_fast", "yarn", t=VT.FLOAT32, value=_yarn("beta")),
        m("rope.scaling.yarn_beta_slow", "yarn", t=VT.FLOAT32, value=_yarn("alpha")),
        m("rope.scaling.yarn_log_multiplier", "yarn", t=VT.FLOAT32, value=_yarn("log_mul")),
        m(
            "rope.scaling.original_context_length",
            "yarn",
            value=_yarn("original_max_position_embeddings"),
        ),
    ],
    names=[
        NameRule("tok_embeddings.weight", "token_embd.weight"),
        NameRule("norm.weight", "output_norm.weight"),
        NameRule("output.weight", "output.weight"),
        *(
            NameRule(f"layers.{{bid}}.{meta}.weight", f"{BLK}{gguf}.weight")
            for meta, gguf in (
                ("attention_norm", "attn_norm"),
                ("attention.wq", "attn_q"),
                ("attention.wk", "attn_k"),
                ("attention.wv", "attn_v"),
                ("attention.wo", "attn_output"),
                ("ffn_norm", "ffn_norm"),
                ("feed_forward.w1", "ffn_gate"),
                ("feed_forward.w2", "ffn_down"),
                ("feed_forward.w3", "ffn_up"),
            )
        ),
    ],
    extra={"rope_freqs.weight": llama3_rope_freqs},
    required=("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_dim", "vocab_size"),
)

# MistralModel with params.json's ``llama_4_scaling`` (Ministral 3, Devstral 2 in Mistral's
# layout): the same rows under llama.cpp's ``mistral3`` name, then set_mistral_config's
# Llama 4 attention scaling (``beta``; llama.cpp steps it by YaRN's original context).
# GGUF -> HF reads its files as Ministral3ForCausalLM (MINISTRAL3: the scaling row).
MISTRAL3_NATIVE = replace(
    MISTRAL_NATIVE,
    gguf_arch="mistral3",
    meta=[
        *MISTRAL_NATIVE.meta,
        m(
            "attention.temperature_scale",
            "llama_4_scaling",
            t=VT.FLOAT32,
            value=lambda c: (c.get("llama_4_scaling") or {}).get("beta"),
        ),
    ],
)

# JanusProModel (conversion/januspro.py): the text half of Janus-Pro is a LlamaModel file
# (``llama``); the vision tower and aligner are the projector's (.mmproj), and the
# image-generation half (VQ model, generation embeddings, aligner and head) is dropped.
# GGUF -> HF gives the file back as a LlamaForCausalLM (the ``llama`` entry).
JANUS = replace(
    LLAMA,
    hf_archs=("JanusForConditionalGeneration",),
    stacks=[],
    names=[*BASE_NAMES, *FFN_NORM],
    skip=(
        *LLAMA.skip,
        r"^model\.(aligner|vqmodel|generation_embeddings|generation_aligner|generation_head)\.",
    ),
    model_types={},
)

#: llama-embed-nemotron (conversion/llama.py's ``LlamaEmbedNemotronModel``: Llama's
#: conversion under GGUF arch ``llama-embed``).  The Hub's remote-code
#: ``LlamaBidirectionalModel`` saves the trunk without the ``model.`` prefix.  The
#: reference writes neither ``attention.causal`` nor a pooling type, and neither do we:
#: llama.cpp then attends causally unless the caller asks for non-causal attention
#: (``llama_set_causal_attn``), and pools as the caller asks.  GGUF -> HF is refused by
#: name: transformers 5.24 has no bidirectional Llama class.
LLAMA_EMBED = replace(
    LLAMA,
    hf_archs=("LlamaBidirectionalModel",),
    gguf_arch="llama-embed",
    renames=(*LLAMA.renames, (r"^(embed_tokens|layers|norm)\.", r"model.\1.")),
    model_types={},
)


def is_glmasr(cfg: dict) -> bool:
    """The text half of GLM-ASR's custom-code layout (``GlmasrModel``, text in ``lm_config``)."""
    return (cfg.get(TOP_ARCHITECTURES) or [""])[0] == "GlmasrModel"


# GLM-ASR's text half (``lm_config`` names LlamaForCausalLM): LlamaModel, whose set_vocab
# takes GLM Edge's vocabulary for a GlmasrModel checkpoint (the ``glm4`` route); its
# ``audio_encoder.*`` tensors are the projector's
GLMASR_TEXT = replace(LLAMA, hf_archs=("LlamaForCausalLM",), tokenizer={"vocab": "glm4"})
