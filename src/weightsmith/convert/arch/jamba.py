"""Jamba: conversion/jamba.py's ``JambaModel`` (GGUF ``jamba``).

Every layer is a Mamba (1) mixer or, every ``attn_layer_period`` layers from
``attn_layer_offset``, NoPE attention (Q/K are not permuted: llama.cpp applies no RoPE);
then a feed-forward that is a softmax-routed MoE every ``expert_layer_period`` layers
from ``expert_layer_offset``, a dense SwiGLU MLP elsewhere.  The mixer is Mamba 1's
(``x_proj``, a full ``dt_proj``, ``A = -exp(A_log)`` kept ``[d_inner, d_state]``, the
conv weight squeezed to ``[d_inner, d_conv]``) plus RMS norms on dt, B and C
(``ssm_dt_norm`` / ``ssm_b_norm`` / ``ssm_c_norm``).

Rows: the class's own (no base rows, no RoPE): block count, context, width,
feed-forward length, heads, then ``head_count_kv`` per layer (an INT32 array, 0 on the
Mamba layers: how llama.cpp tells the layer kinds apart), the ``ssm.*`` sizes (inner
size ``mamba_expand * hidden_size``, time-step rank ``ceil(hidden_size / 16)`` when not
given), the RMS epsilon (``1e-6`` when not given) and the expert counts.  Experts are
stacked per layer as Qwen2-MoE's (down, gate, up, once the layer's last expert is read);
the router is ``ffn_gate_inp`` (F32).  Two Hub spellings are read as the reference reads
them: Mini-Jamba's ``.moe.`` for ``.feed_forward.`` (and its ``B_layernorm`` /
``C_layernorm`` / ``pre_moe_layernorm``), and a dense layer stored as ``experts.0``.
transformers 5 saves a layer's experts fused (``experts.gate_up_proj`` ``[n_expert,
2 * n_ff, n_embd]``, ``experts.down_proj``), a layout the reference cannot map: it is
split into the same ``ffn_{gate,up}_exps`` (and its tensors come in the same order), so
the file is the one the per-expert checkpoint gives.

GGUF -> HF: the attention and expert periods are read back off ``head_count_kv`` and
the layers holding a router (the smallest period and offset giving the same layers); a
layer pattern no period describes has no ``JambaConfig`` and is refused.  The
vocabulary: SentencePiece when ``tokenizer.model`` is there, else ``LlamaHfVocab``
(byte-fallback BPE ``tokenizer.json``) with ``add_space_prefix = false``.
"""

from __future__ import annotations

import numpy as np

from ... import errors as E
from ._common import BLK, LAYER, neg_exp
from ._model import FILE_TYPE, VT, Arch, NameRule, Split, Stack, Transform, first, m
from .mamba import _TRANSFORMS


def _d_model(cfg: dict) -> int:
    return first(cfg, ("hidden_size", "mamba_d_model"))


def _dt_rank(cfg: dict) -> int:
    r = cfg.get("mamba_dt_rank")
    # "auto" in a Hub config: JambaConfig resolves it before the reference reads it
    return r if isinstance(r, int) and r else -(_d_model(cfg) // -16)


def _is_attention(cfg: dict, i: int) -> bool:
    offset, period = cfg["attn_layer_offset"], cfg["attn_layer_period"]
    return i >= offset and (i - offset) % period == 0


def _is_moe(cfg: dict, bid: int) -> bool:
    offset, period = cfg["expert_layer_offset"], cfg["expert_layer_period"]
    return bid >= offset and (bid - offset) % period == 0


def _kv_per_layer(cfg: dict) -> list[int]:
    n_kv = cfg["num_key_value_heads"]
    return [n_kv if _is_attention(cfg, i) else 0 for i in range(cfg["num_hidden_layers"])]


def _n_experts(cfg: dict) -> int:
    return first(cfg, ("num_local_experts", "num_experts"))


def _dense_from_expert_0(name: str, cfg: dict) -> str:
    """The reference's rename: a dense layer stored as expert 0 is the layer's MLP."""
    parts = name.split(".")
    bid = next((int(p) for p in parts if p.isdecimal()), None)
    if bid is not None and not _is_moe(cfg, bid):
        name = name.replace(".experts.0.", ".")
    return name


def _period(layers: set[int], n: int, what: str) -> tuple[int, int]:
    """The smallest ``(period, offset)``, offset < period, whose layers ``i < n`` with
    ``i % period == offset`` are exactly ``layers`` (JambaConfig's only form)."""
    for period in range(1, n + 2):
        for offset in range(period):
            if {i for i in range(n) if i % period == offset} == layers:
                return period, offset
    raise E.InvalidModelConfig(
        f"the {what} layers follow no period: transformers' JambaConfig cannot hold them",
        field="jamba.attention.head_count_kv" if what == "attention" else "ffn_gate_inp",
        expected="the layers offset, offset + period, offset + 2 * period, ...",
        found=sorted(layers),
    )


def _jamba_hf(cfg: dict, names: set[str]) -> dict:
    kv = [int(x) for x in cfg["num_key_value_heads"]]
    n = cfg["num_hidden_layers"]
    attn_period, attn_offset = _period({i for i, k in enumerate(kv) if k}, n, "attention")
    moe = {i for i in range(n) if f"blk.{i}.ffn_gate_inp.weight" in names}
    moe_period, moe_offset = _period(moe, n, "expert")
    return {
        "num_key_value_heads": max(kv) or cfg["num_attention_heads"],
        "attn_layer_period": attn_period,
        "attn_layer_offset": attn_offset,
        "expert_layer_period": moe_period,
        "expert_layer_offset": moe_offset,
        "mamba_expand": cfg["_inner"] // cfg["hidden_size"],
        "mamba_conv_bias": any(x.endswith("ssm_conv1d.bias") for x in names),
        "mamba_proj_bias": any(x.endswith("ssm_in.bias") for x in names),
        "hidden_act": "silu",
    }


_M = LAYER + "mamba."
_FF = LAYER + "feed_forward."

JAMBA = Arch(
    hf_archs=("JambaForCausalLM",),
    gguf_arch="jamba",
    # JambaModel.set_gguf_parameters ("_" fields are not written back to config.json)
    meta=[
        m("block_count", "num_hidden_layers", "n_layers", "n_layer", "num_layers"),
        m("context_length", "max_position_embeddings", "n_ctx"),
        m("embedding_length", "hidden_size", "mamba_d_model"),
        m("feed_forward_length", "intermediate_size"),
        m("attention.head_count", "num_attention_heads"),
        m("attention.head_count_kv", "num_key_value_heads", t=VT.INT32, value=_kv_per_layer),
        m("ssm.conv_kernel", "mamba_d_conv", value=lambda c: c.get("mamba_d_conv") or 4),
        m("ssm.inner_size", "_inner", value=lambda c: c["mamba_expand"] * _d_model(c)),
        m("ssm.state_size", "mamba_d_state", value=lambda c: c.get("mamba_d_state") or 16),
        m("ssm.time_step_rank", "mamba_dt_rank", value=_dt_rank),
        m(
            "attention.layer_norm_rms_epsilon",
            "rms_norm_eps",
            t=VT.FLOAT32,
            value=lambda c: first(c, ("layer_norm_epsilon", "rms_norm_eps")) or 1e-6,
        ),
        m("expert_count", "num_experts", value=_n_experts),
        m(
            "expert_used_count",
            "num_experts_per_tok",
            value=lambda c: first(c, ("num_experts_per_tok", "num_experts_per_token")),
        ),
        FILE_TYPE,
    ],
    # the Hub's spellings first: the inverse writes the first rule that matches
    names=[
        NameRule("model.embed_tokens.weight", "token_embd.weight"),
        NameRule("model.final_layernorm.weight", "output_norm.weight"),
        NameRule("lm_head.weight", "output.weight"),
        NameRule(LAYER + "input_layernorm.weight", BLK + "attn_norm.weight"),
        *[
            NameRule(LAYER + f"self_attn.{h}_proj.weight", BLK + f"attn_{g}.weight")
            for h, g in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output"))
        ],
        NameRule(_M + "in_proj.weight", BLK + "ssm_in.weight"),
        NameRule(_M + "in_proj.bias", BLK + "ssm_in.bias"),
        NameRule(_M + "conv1d.weight", BLK + "ssm_conv1d.weight"),
        NameRule(_M + "conv1d.bias", BLK + "ssm_conv1d.bias"),
        NameRule(_M + "x_proj.weight", BLK + "ssm_x.weight"),
        NameRule(_M + "dt_proj.weight", BLK + "ssm_dt.weight"),
        NameRule(_M + "dt_proj.bias", BLK + "ssm_dt.bias"),
        NameRule(_M + "dt_layernorm.weight", BLK + "ssm_dt_norm.weight"),
        NameRule(_M + "A_log", BLK + "ssm_a"),
        NameRule(_M + "b_layernorm.weight", BLK + "ssm_b_norm.weight"),
        NameRule(_M + "c_layernorm.weight", BLK + "ssm_c_norm.weight"),
        NameRule(_M + "D", BLK + "ssm_d"),
        NameRule(_M + "out_proj.weight", BLK + "ssm_out.weight"),
        NameRule(_M + "out_proj.bias", BLK + "ssm_out.bias"),
        NameRule(LAYER + "pre_ff_layernorm.weight", BLK + "ffn_norm.weight"),
        NameRule(_FF + "router.weight", BLK + "ffn_gate_inp.weight"),
        NameRule(_FF + "gate_proj.weight", BLK + "ffn_gate.weight"),
        NameRule(_FF + "up_proj.weight", BLK + "ffn_up.weight"),
        NameRule(_FF + "down_proj.weight", BLK + "ffn_down.weight"),
        NameRule(_FF + "experts.down_proj", BLK + "ffn_down_exps.weight"),
        # Mini-Jamba's spellings (forward only: the inverse stops at the rules above)
        NameRule(_M + "B_layernorm.weight", BLK + "ssm_b_norm.weight"),
        NameRule(_M + "C_layernorm.weight", BLK + "ssm_c_norm.weight"),
        NameRule(LAYER + "pre_moe_layernorm.weight", BLK + "ffn_norm.weight"),
    ],
    # transformers 5's own save layout (fused per layer), which the reference cannot map:
    # read as the per-expert tensors, giving the file the Hub layout gives
    splits=[
        Split(
            _FF + "experts.gate_up_proj",
            (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"),
            axis=-2,
        )
    ],
    stacks=[
        Stack(_FF + f"experts.{{xid}}.{w}_proj.weight", BLK + f"ffn_{w}_exps.weight", _n_experts)
        for w in ("down", "gate", "up")
    ],
    transforms=[
        Transform(
            "ssm_a_neg_exp",
            r"mamba\.A_log$",
            neg_exp,
            lambda x, cfg, ctx: np.log(-x.astype(np.float32)),
            exact=False,
        ),
        _TRANSFORMS[2],  # conv squeeze
    ],
    renames=((r"\.moe\.", ".feed_forward."),),
    rename=(_dense_from_expert_0, lambda name, cfg: name),
    # JambaConfig's defaults, which AutoConfig fills in before the reference reads them
    defaults={
        "max_position_embeddings": 262144,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        # the field's default when absent; JambaConfig makes a null one the head count
        "num_key_value_heads": lambda c: (
            c.get("num_attention_heads", 32) if "num_key_value_heads" in c else 8
        ),
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "rms_norm_eps": 1e-6,
    },
    required=("hidden_size", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "jamba"},
    model_types={"JambaForCausalLM": "jamba"},
    hf_config=_jamba_hf,
)
