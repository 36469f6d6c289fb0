"""Nemotron-H (dense): conversion/nemotron.py's ``NemotronHModel`` (GGUF ``nemotron_h``).

A ``GraniteHybridModel`` subclass: every layer is one mixer under ``backbone.layers.N.
mixer.`` -- a Mamba 2 block (``M``), attention (``*``, NoPE; Q/K still get llama.cpp's
RoPE row permutation, as every Granite-family attention layer) or a dense ReLU^2 MLP
(``-``: ``up_proj`` / ``down_proj``) -- behind one RMS norm.  The layer kinds come from
the Hub's ``hybrid_override_pattern`` string or from the ``layers_block_type`` list that
transformers 5 writes (``linear_attention`` / ``full_attention`` / ``mlp``, or ``mamba``
/ ``attention``); both give the same file.

Rows: Granite's (the Llama rows without ``head_dim``, so ``rope.dimension_count`` is
``hidden_size / heads``), then the ``ssm.*`` sizes (the inner size is
``mamba_num_heads * mamba_head_dim``), and per layer ``head_count_kv`` (0 off attention)
and ``feed_forward_length`` (0 off the MLPs), both INT32 arrays put in the scalar rows'
places, the 2**20 NoPE context, ``rope.scaling.finetuned = false``, and the attention
head size as ``key_length`` / ``value_length`` last.

The pinned converter reads a config saved by transformers 5 wrongly: it takes the
always-present ``num_experts_per_tok`` for a MoE model (``nemotron_h_moe``) and counts no
``mlp`` layer (zero feed-forward widths).  This entry ignores the MoE fields of a dense
model; MoE layers (``E`` / ``moe``) are not converted (their expert tensors are
unmapped).  The vocabulary is the reference's ``get_vocab_base`` form (``gpt2``); the
reference pads its token list to a multiple of 8 of ``vocab_size``, which every
published Nemotron-H already is (an unpadded size would give it a token list longer
than the embedding, a file llama.cpp refuses), so no padding is done here.
"""

from __future__ import annotations

from ._common import PERMUTE_K, PERMUTE_Q
from ._model import VT, Arch, NameRule, first, m
from .granite import GRANITE_ROWS
from .mamba import MAMBA2

#: layer kinds: pattern characters, and the list spellings of transformers 5 and the Hub
_KIND = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}


def layer_kinds(cfg: dict) -> list[str]:
    """One pattern character per layer (``M``, ``*``, ``-``, ``E``)."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return list(pattern)
    types = cfg.get("layers_block_type")
    if isinstance(types, list):
        return [_KIND.get(t, "?") for t in types]
    return []


def _n_layers(cfg: dict) -> int | None:
    return len(layer_kinds(cfg)) or None


def _per_layer(kind: str, keys: tuple[str, ...]):
    def get(cfg: dict) -> list[int]:
        n = first(cfg, keys)
        return [n if k == kind else 0 for k in layer_kinds(cfg)]

    return get


def _no_ssm(cfg: dict) -> bool:
    return "M" not in layer_kinds(cfg)


def _inner(cfg: dict) -> int:
    return first(cfg, ("num_heads", "mamba_num_heads")) * first(
        cfg, ("mamba_head_dim", "hidden_size", "d_model")
    )


def _head_dim(cfg: dict) -> int | None:
    return first(cfg, ("_head_dim",))


def _hf(cfg: dict, names: set[str]) -> dict:
    kv, ff = cfg["num_key_value_heads"], cfg["intermediate_size"]
    pattern = "".join("*" if a else "-" if b else "M" for a, b in zip(kv, ff, strict=True))
    inner, heads = cfg["_ssm_inner"], cfg["mamba_num_heads"]
    return {
        "hybrid_override_pattern": pattern,
        "num_hidden_layers": len(pattern),
        "num_key_value_heads": max(int(x) for x in kv),
        "intermediate_size": max(int(x) for x in ff),
        "head_dim": cfg["_head_dim"],
        "mamba_head_dim": inner // heads,
        "expand": max(1, inner // cfg["hidden_size"]),
        "layer_norm_epsilon": cfg["layer_norm_eps"],
        "use_conv_bias": any(n.endswith("ssm_conv1d.bias") for n in names),
        "use_bias": any(n.endswith("ssm_in.bias") for n in names),
        "mlp_bias": any(n.endswith("ffn_up.bias") for n in names),
        "attention_bias": False,
        "mlp_hidden_act": "relu2",
        "mamba_hidden_act": "silu",
    }


_L = "backbone.layers.{bid}.mixer."
_B = "blk.{bid}."

NEMOTRON_H = Arch(
    hf_archs=("NemotronHForCausalLM",),
    gguf_arch="nemotron_h",
    # "_" fields are read by hf_config and not written to config.json
    meta=[
        *GRANITE_ROWS,
        m(
            "expert_shared_feed_forward_length",
            "shared_intermediate_size",
            value=lambda c: c.get("shared_intermediate_size") or None,
        ),
        m("ssm.conv_kernel", "conv_kernel", value=lambda c: first(c, ("conv_kernel", "d_conv"))),
        m(
            "ssm.state_size",
            "ssm_state_size",
            value=lambda c: first(c, ("state_size", "d_state", "state_dim", "ssm_state_size")),
        ),
        m("ssm.group_count", "n_groups", value=lambda c: first(c, ("n_groups", "num_groups"))),
        m("ssm.inner_size", "_ssm_inner", value=_inner),
        m(
            "ssm.time_step_rank",
            "mamba_num_heads",
            value=lambda c: first(c, ("n_heads", "num_heads", "mamba_n_heads", "mamba_num_heads")),
        ),
        m("rope.dimension_count", "_rotary", value=lambda c: c.get("attn_rotary_emb")),
        # in place of the scalar rows
        m(
            "attention.head_count_kv",
            "num_key_value_heads",
            t=VT.INT32,
            value=_per_layer("*", ("num_key_value_heads", "n_head_kv")),
        ),
        m("rope.scaling.finetuned", "_rope_finetuned", t=VT.BOOL, value=_no_ssm),
        m(
            "context_length",
            "max_position_embeddings",
            value=lambda c: None if _no_ssm(c) else 2**20,
        ),
        m(
            "feed_forward_length",
            "intermediate_size",
            t=VT.INT32,
            value=_per_layer("-", ("intermediate_size", "n_inner", "hidden_dim")),
        ),
        m("attention.key_length", "_head_dim", value=_head_dim),
        m("attention.value_length", "_head_dim", value=_head_dim),
    ],
    names=[
        *MAMBA2.names,
        NameRule(_L + "q_proj.weight", _B + "attn_q.weight"),
        NameRule(_L + "k_proj.weight", _B + "attn_k.weight"),
        NameRule(_L + "v_proj.weight", _B + "attn_v.weight"),
        NameRule(_L + "o_proj.weight", _B + "attn_output.weight"),
        NameRule(_L + "up_proj.weight", _B + "ffn_up.weight"),
        NameRule(_L + "up_proj.bias", _B + "ffn_up.bias"),
        NameRule(_L + "down_proj.weight", _B + "ffn_down.weight"),
        NameRule(_L + "down_proj.bias", _B + "ffn_down.bias"),
    ],
    transforms=[PERMUTE_Q, PERMUTE_K, *MAMBA2.transforms],
    # GraniteModel drops head_dim (its value goes to the last two rows); a dense model's
    # MoE fields (transformers 5 writes them for every NemotronHConfig) are not read
    defaults={
        "num_hidden_layers": _n_layers,
        "_head_dim": lambda c: first(c, ("head_dim", "attention_head_dim")),
    },
    ignored=(
        "head_dim",
        "num_local_experts",
        "num_experts",
        "n_routed_experts",
        "num_experts_per_tok",
        "num_experts_per_token",
        "n_group",
        "topk_group",
    ),
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"NemotronHForCausalLM": "nemotron_h"},
    hf_config=_hf,
)
