"""Mistral's original layout with experts: conversion/mistral.py's ``MistralMoeModel``
(``convert_hf_to_gguf.py --mistral-format`` on a params.json with a ``moe`` section:
Mistral Large 3, Mistral Small 4 as Mistral publishes them), a ``DeepseekV2Model``
writing GGUF ``deepseek2``.

The config is params.json remapped to DeepSeek-V2's field names (:func:`moe_config`,
the reference's own table); the tensors keep Mistral's names, renamed here to
DeepSeek-V2's so that the ``deepseek2`` entry's rules (MLA ``kv_b`` split, experts
stacked per layer as ``down``, ``gate``, ``up``) apply as they do for the reference
(which renames ``wkv_b`` and the experts and maps the rest through gguf-py's
``mistral-large`` / ``llama-pth`` names).  After DeepSeek-V2's rows come
``MistralModel.set_mistral_config``'s (params.json's ``yarn`` block; the Llama 4
``attention.temperature_scale`` from ``llama_4_scaling.beta``), then
``attention.temperature_length`` = ``yarn.original_max_position_embeddings`` and the
YaRN log multiplier 0.1 written over the earlier value in place (the reference's
DeepSeek-V2 legacy ``0.1 x mscale_all_dim`` with ``mscale_all_dim`` 1, whatever
``apply_scale`` says).

GGUF -> HF (:data:`MISTRAL_MOE_BACK`, a ``GGUF_VARIANTS`` entry picked by the
temperature-length row only this class writes) gives transformers'
``Mistral4ForCausalLM``, which holds the same model.
"""

from __future__ import annotations

from dataclasses import replace

from ._common import BLK, LAYER
from ._model import VT, MetaKey, Split, m
from .deepseek import DEEPSEEK2
from .llama import MISTRAL_NATIVE
from .mistral4 import MISTRAL4

#: params.json -> DeepSeek-V2 fields (MistralMoeModel.__init__): top level ...
_TOP = {"dim": "hidden_size", "norm_eps": "rms_norm_eps", "n_kv_heads": "num_key_value_heads",
        "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
        "hidden_dim": "intermediate_size"}  # fmt: skip
#: ... fields with a default: HF name -> (params.json name, default) ...
_DEFAULTS = {"model_type": ("model_type", "transformer"), "hidden_act": ("activation", "silu"),
             "tie_word_embeddings": ("tied_embeddings", False)}  # fmt: skip
#: ... and the ``moe`` section's
_MOE = {"route_every_n": "moe_layer_freq", "first_k_dense_replace": "first_k_dense_replace",
        "num_experts_per_tok": "num_experts_per_tok", "num_experts": "n_routed_experts",
        "expert_hidden_dim": "moe_intermediate_size", "routed_scale": "routed_scaling_factor",
        "num_shared_experts": "n_shared_experts", "num_expert_groups": "n_group",
        "num_expert_groups_per_tok": "topk_group"}  # fmt: skip


def moe_config(params: dict) -> dict:
    """params.json with DeepSeek-V2's fields added, as MistralMoeModel remaps it."""
    cfg = dict(params)
    for key, new in _TOP.items():
        if key in cfg:
            cfg[new] = cfg[key]
    for new, (key, default) in _DEFAULTS.items():
        cfg[new] = cfg.get(key, default)
    ctx = cfg.get("max_position_embeddings", 128_000)
    cfg["max_seq_len"] = cfg.get("max_seq_len", ctx)
    cfg["max_position_embeddings"] = ctx
    for key, new in _MOE.items():
        if key in cfg["moe"]:
            cfg[new] = cfg["moe"][key]
    cfg.update(topk_method=None, norm_topk_prob=True, scoring_func="softmax")
    return cfg


# Mistral's tensor names -> DeepSeek-V2's (HF) names
_L = r"^layers\.(\d+)\."
_RENAMES = (
    (r"^tok_embeddings\.", "model.embed_tokens."),
    (r"^norm\.", "model.norm."),
    (r"^output\.", "lm_head."),
    *(
        (_L + a + r"\.", r"model.layers.\1." + b + ".")
        for a, b in (
            ("attention_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("attention\\.wq", "self_attn.q_proj"),
            ("attention\\.wq_a", "self_attn.q_a_proj"),
            ("attention\\.q_a_norm", "self_attn.q_a_layernorm"),
            ("attention\\.wq_b", "self_attn.q_b_proj"),
            ("attention\\.wkv_a_with_mqa", "self_attn.kv_a_proj_with_mqa"),
            ("attention\\.kv_a_norm", "self_attn.kv_a_layernorm"),
            ("attention\\.wkv_b", "self_attn.kv_b_proj"),
            ("attention\\.wo", "self_attn.o_proj"),
            ("feed_forward\\.w1", "mlp.gate_proj"),
            ("feed_forward\\.w2", "mlp.down_proj"),
            ("feed_forward\\.w3", "mlp.up_proj"),
            ("gate", "mlp.gate"),
            ("shared_experts\\.w1", "mlp.shared_experts.gate_proj"),
            ("shared_experts\\.w2", "mlp.shared_experts.down_proj"),
            ("shared_experts\\.w3", "mlp.shared_experts.up_proj"),
            ("experts\\.(\\d+)\\.w1", "mlp.experts.\\2.gate_proj"),
            ("experts\\.(\\d+)\\.w2", "mlp.experts.\\2.down_proj"),
            ("experts\\.(\\d+)\\.w3", "mlp.experts.\\2.up_proj"),
        )
    ),
)

# set_mistral_config's YaRN rows (the dense entry's), then MistralMoeModel's own
_YARN = MISTRAL_NATIVE.meta[-6:]
assert all(isinstance(r, MetaKey) and r.fields == ("yarn",) for r in _YARN)
_ROWS = [
    *DEEPSEEK2.meta,
    *_YARN,
    m("attention.temperature_scale", "llama_4_scaling", t=VT.FLOAT32,
      value=lambda c: (c.get("llama_4_scaling") or {}).get("beta")),
    m("attention.temperature_length", "yarn",
      value=lambda c: c["yarn"]["original_max_position_embeddings"]),
    m("rope.scaling.yarn_log_multiplier", "yarn", t=VT.FLOAT32, value=lambda c: 0.1),
]  # fmt: skip


def is_mistral_moe_file(md) -> bool:
    """A ``deepseek2`` file MistralMoeModel wrote: only it writes the temperature length."""
    return "deepseek2.attention.temperature_length" in md


#: the ``deepseek2`` entry under Mistral's names and params.json (outside the HF
#: registry); GGUF -> HF reads its files with :data:`MISTRAL_MOE_BACK`
MISTRAL_MOE_NATIVE = replace(
    DEEPSEEK2,
    hf_archs=(),
    meta=_ROWS,
    renames=_RENAMES,
    defaults={},
    model_types={},
    required=(
        "dim", "n_layers", "n_heads", "vocab_size", "hidden_dim", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim",
    ),
)  # fmt: skip


def _back(cfg: dict, names: set[str]) -> dict:
    """Mistral4Config's fields (the ``mistral4`` entry's) with the file's Llama 4 beta
    (llama.cpp steps it by ``temperature_length``, which the reference sets to YaRN's
    original context: transformers' one ``original_max_position_embeddings``)."""
    out = MISTRAL4.hf_config(cfg, names)
    beta = cfg.get("_llama_4_scaling_beta")
    out["rope_parameters"]["llama_4_scaling_beta"] = 0.0 if beta is None else float(beta)
    return out


#: GGUF -> HF of these files: transformers' ``Mistral4ForCausalLM`` holds the same model
#: (MLA, softmax-routed experts with a shared one, YaRN, the Llama 4 attention scaling);
#: its experts are fused, ``gate_up_proj`` [n_expert, 2 x n_ff, n_embd] (the stacked
#: gate and up parts joined) and ``down_proj``
MISTRAL_MOE_BACK = replace(
    MISTRAL4,
    gguf_arch="deepseek2",
    meta=[*MISTRAL4.meta, m("attention.temperature_scale", "_llama_4_scaling_beta", t=VT.FLOAT32)],
    names=[r for r in MISTRAL4.names if "gate_up" not in r.hf],
    splits=[
        *MISTRAL4.splits,
        Split(
            LAYER + "mlp.experts.gate_up_proj",
            (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"),
            axis=1,
        ),
    ],
    hf_config=_back,
)
