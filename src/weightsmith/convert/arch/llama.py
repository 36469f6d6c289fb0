"""Llama, Mistral and Mixtral: llama.cpp's ``LlamaModel`` (conversion/llama.py).

Mixtral is the same GGUF architecture (``llama``) with the experts of each layer
stacked: llama.cpp buffers the ``3 x num_local_experts`` expert tensors of a layer
and emits ``w1``, ``w2``, ``w3`` (gate, down, up) when the last one is read.
"""

from __future__ import annotations

from dataclasses import replace

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
from ._model import VT, Arch, NameRule, Stack, head_dim, m


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

# Mistral3Model (conversion/mistral3.py): the text half of Mistral3ForConditionalGeneration
# (Mistral Small 3.1) is LlamaModel under its own GGUF name; the vision tower is the
# projector's (.mmproj).  A "ministral3" text (YaRN + llama_4_scaling rows) and a
# "mistral4" one (DeepseekV2) are other classes there, not this entry.  No HF class is the
# text half alone: GGUF -> HF refuses it, as for qwen2vl.
MISTRAL3 = replace(
    LLAMA,
    hf_archs=("Mistral3ForConditionalGeneration",),
    gguf_arch="mistral3",
    stacks=[],
    names=[*BASE_NAMES, *FFN_NORM],
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
