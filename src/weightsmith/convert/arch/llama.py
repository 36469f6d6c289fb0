"""Llama, Mistral and Mixtral: llama.cpp's ``LlamaModel`` (conversion/llama.py).

Mixtral is the same GGUF architecture (``llama``) with the experts of each layer
stacked: llama.cpp buffers the ``3 x num_local_experts`` expert tensors of a layer
and emits ``w1``, ``w2``, ``w3`` (gate, down, up) when the last one is read.
"""

from __future__ import annotations

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
from ._model import Arch, NameRule, Stack, head_dim, m


def _n_local(cfg: dict) -> int:
    return cfg["num_local_experts"]


_MOE = LAYER + "block_sparse_moe."

LLAMA = Arch(
    hf_archs=("LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"),
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
