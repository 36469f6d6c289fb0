"""Nemotron-H, dense and MoE: conversion/nemotron.py's ``NemotronHModel`` (GGUF
``nemotron_h``, and ``nemotron_h_moe`` when the model has experts).

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
model.  The vocabulary is the reference's ``get_vocab_base`` form (``gpt2``); the
reference pads its token list to a multiple of 8 of ``vocab_size``, which every
published Nemotron-H already is (an unpadded size would give it a token list longer
than the embedding, a file llama.cpp refuses), so no padding is done here.

Nemotron-H MoE (Nemotron 3 Nano / Super: ``E`` / ``moe`` layers; :data:`NEMOTRON_H_MOE`,
picked by the registry's ``VARIANTS`` when a layer is a MoE one): each MoE mixer has a
sigmoid router (``gate.weight``, ``gate.e_score_correction_bias``), per-expert ReLU^2
``up_proj`` / ``down_proj`` (no gate), stacked per layer into ``ffn_down_exps`` then
``ffn_up_exps`` when the layer's last expert is read, one shared expert and, with
``moe_latent_size``, the latent projections ``fc1_latent_proj`` / ``fc2_latent_proj``
(the routed experts then work in the latent size).  The MTP block (``num_nextn_predict_
layers`` = 1: ``mtp.layers.0`` = ``enorm`` / ``hnorm`` / ``eh_proj`` and an attention
sub-layer, ``mtp.layers.1`` = a MoE sub-layer and the head's ``final_layernorm``) is
folded into one block after the trunk, as the reference does: ``block_count`` and the
per-layer arrays count it as attention and MoE at once.  Rows: the dense entry's, with
``feed_forward_length`` the experts' width at the MoE layers, then the MoE rows of
``NemotronHModel`` (``expert_used_count``, ``expert_count`` and ``expert_group_count``
again, in place), ``moe_latent_size`` and ``nextn_predict_layers``.  The MoE form is
read right by the pinned converter on transformers 5 (its MoE test is then true).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ... import errors as E
from ._common import PERMUTE_K, PERMUTE_Q, replace_rows
from ._model import VT, Arch, MetaKey, Mtp, NameRule, Stack, first, m
from .granite import GRANITE_ROWS, GRANITE_SHARED_FF
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


def _ssm_rows() -> list:
    """GraniteHybridModel's ``ssm.*`` rows and ``rope.dimension_count``."""
    return [
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
    ]


def _nope_rows(head_count_kv) -> list:
    """The per-layer KV head counts, then the NoPE rows (GraniteHybridModel)."""
    return [
        # in place of the scalar row
        m("attention.head_count_kv", "num_key_value_heads", t=VT.INT32, value=head_count_kv),
        m("rope.scaling.finetuned", "_rope_finetuned", t=VT.BOOL, value=_no_ssm),
        m(
            "context_length",
            "max_position_embeddings",
            value=lambda c: None if _no_ssm(c) else 2**20,
        ),
    ]


_KEY_VALUE_LENGTH = [
    m("attention.key_length", "_head_dim", value=_head_dim),
    m("attention.value_length", "_head_dim", value=_head_dim),
]

NEMOTRON_H = Arch(
    hf_archs=("NemotronHForCausalLM",),
    gguf_arch="nemotron_h",
    # "_" fields are read by hf_config and not written to config.json
    meta=[
        *GRANITE_ROWS,
        GRANITE_SHARED_FF,
        *_ssm_rows(),
        *_nope_rows(_per_layer("*", ("num_key_value_heads", "n_head_kv"))),
        # in place of the scalar row
        m(
            "feed_forward_length",
            "intermediate_size",
            t=VT.INT32,
            value=_per_layer("-", ("intermediate_size", "n_inner", "hidden_dim")),
        ),
        *_KEY_VALUE_LENGTH,
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
    # the reference's class takes the flags; only the MoE form counts a block (below)
    mtp=Mtp(
        lambda name, cfg: name.startswith("mtp."),
        keep=("backbone.embeddings.weight", "backbone.norm_f.weight", "lm_head.weight"),
    ),
)


# --------------------------------------------------------------------------- MoE

# the MTP block's tensors the reference names one by one (the others keep their suffix)
_MTP_NAMED = {
    "mtp.layers.0.enorm.weight": "enorm.weight",
    "mtp.layers.0.hnorm.weight": "hnorm.weight",
    "mtp.layers.0.eh_proj.weight": "eh_proj.weight",
    "mtp.layers.1.norm.weight": "post_attention_layernorm.weight",
    "mtp.layers.1.final_layernorm.weight": "shared_head.norm.weight",
}
_MTP_BACK = {v: k for k, v in _MTP_NAMED.items()}
# the attention sub-layer's tensors (``mtp.layers.0``); the others are the MoE's (``.1``)
_MTP_ATTN = ("norm.weight", "mixer.q_proj.", "mixer.k_proj.", "mixer.v_proj.", "mixer.o_proj.")


def _n_mtp(cfg: dict) -> int:
    return cfg.get("num_nextn_predict_layers") or 0


def _one_mtp_block(cfg: dict, names: list[str]) -> dict:
    """The reference folds one MTP block (it asserts ``num_nextn_predict_layers`` is 1)."""
    if _n_mtp(cfg) > 1:
        raise E.InvalidModelConfig(
            "Nemotron-H MTP with more than one block (llama.cpp's converter folds one)",
            field="num_nextn_predict_layers",
            expected="0 or 1",
            found=cfg["num_nextn_predict_layers"],
        )
    return {}


def _trunk(cfg: dict) -> int:
    return len(layer_kinds(cfg)) or cfg["num_hidden_layers"]


def _mtp_to_trunk(name: str, cfg: dict) -> str:
    """``mtp.layers.{0,1}.*`` -> the one block after the trunk (the reference folds both
    sub-layers into it)."""
    if not _n_mtp(cfg) or not name.startswith(("mtp.layers.0.", "mtp.layers.1.")):
        return name
    rest = _MTP_NAMED.get(name) or name.split(".", 3)[3]
    return f"backbone.layers.{_trunk(cfg)}.{rest}"


def _trunk_to_mtp(name: str, cfg: dict) -> str:
    head = f"backbone.layers.{cfg['num_hidden_layers']}."
    if not _n_mtp(cfg) or not name.startswith(head):
        return name
    rest = name[len(head) :]
    if rest in _MTP_BACK:
        return _MTP_BACK[rest]
    return f"mtp.layers.{0 if rest.startswith(_MTP_ATTN) else 1}.{rest}"


def _with_mtp(kinds: str, keys: tuple[str, ...]):
    """A per-layer row: the value at the layers of ``kinds`` and at the MTP block (which
    is attention and MoE at once), 0 elsewhere."""

    def get(cfg: dict) -> list[int]:
        n = first(cfg, keys)
        return [n if k in kinds else 0 for k in layer_kinds(cfg)] + [n] * _n_mtp(cfg)

    return get


def _hf_moe(cfg: dict, names: set[str]) -> dict[str, Any]:
    nextn = int(cfg.get("num_nextn_predict_layers") or 0)
    kv, ff = list(cfg["num_key_value_heads"]), list(cfg["intermediate_size"])
    n = len(kv) - nextn
    pattern = "".join("*" if a else "E" if b else "M" for a, b in zip(kv[:n], ff[:n], strict=True))
    inner, heads = cfg["_ssm_inner"], cfg["mamba_num_heads"]
    return {
        "hybrid_override_pattern": pattern,
        "num_hidden_layers": n,
        "num_key_value_heads": max(int(x) for x in kv),
        # the width of "-" MLP layers, which a MoE file does not keep (it has none)
        "intermediate_size": cfg["moe_intermediate_size"],
        "head_dim": cfg["_head_dim"],
        "mamba_head_dim": inner // heads,
        "expand": max(1, inner // cfg["hidden_size"]),
        "layer_norm_epsilon": cfg["layer_norm_eps"],
        "use_conv_bias": any(x.endswith("ssm_conv1d.bias") for x in names),
        "use_bias": any(x.endswith("ssm_in.bias") for x in names),
        "mlp_bias": False,
        "attention_bias": False,
        "mlp_hidden_act": "relu2",
        "mamba_hidden_act": "silu",
        "num_nextn_predict_layers": nextn,
    }


def _n_experts(cfg: dict) -> int:
    return first(cfg, ("n_routed_experts", "num_local_experts", "num_experts"))


_NUM_EXPERTS_PER_TOK = m("expert_used_count", "num_experts_per_tok")

#: NemotronHConfig's defaults AutoConfig fills in, for the fields the MoE rows read
_MOE_DEFAULTS: dict[str, Any] = {
    "num_hidden_layers": _n_layers,
    "_head_dim": lambda c: first(c, ("head_dim", "attention_head_dim")) or 128,
    "intermediate_size": 21504,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 7688,
    "moe_shared_expert_intermediate_size": 7688,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "n_group": 1,
    "topk_group": 1,
    "num_nextn_predict_layers": 0,
}

NEMOTRON_H_MOE = Arch(
    hf_archs=("NemotronHForCausalLM",),
    gguf_arch="nemotron_h_moe",
    # NemotronHModel.set_gguf_parameters with experts: Granite's rows (block_count with the
    # MTP block), the ssm.* and NoPE rows, then the MoE rows (some again, in place)
    meta=[
        *replace_rows(
            GRANITE_ROWS,
            block_count=m(
                "block_count", "num_hidden_layers", value=lambda c: _trunk(c) + _n_mtp(c)
            ),
        ),
        # GraniteMoe's row (a NemotronH config has no such field; the MoE row below sets it)
        m(
            "expert_shared_feed_forward_length",
            "_granite_shared",
            value=lambda c: c.get("shared_intermediate_size") or None,
        ),
        *_ssm_rows(),
        *_nope_rows(_with_mtp("*", ("num_key_value_heads", "n_head_kv"))),
        *_KEY_VALUE_LENGTH,
        m(
            "feed_forward_length",
            "intermediate_size",
            t=VT.INT32,
            value=_with_mtp("E", ("moe_intermediate_size",)),
        ),
        _NUM_EXPERTS_PER_TOK,
        m("expert_feed_forward_length", "moe_intermediate_size"),
        m("expert_shared_feed_forward_length", "moe_shared_expert_intermediate_size"),
        m("expert_count", "n_routed_experts"),
        m("expert_shared_count", "n_shared_experts"),
        m("expert_weights_norm", "norm_topk_prob", t=VT.BOOL),
        m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
        m("expert_group_count", "n_group"),
        _NUM_EXPERTS_PER_TOK,
        m("moe_latent_size", "moe_latent_size"),
        m("nextn_predict_layers", "num_nextn_predict_layers", value=lambda c: _n_mtp(c) or None),
    ],
    names=[
        *NEMOTRON_H.names,
        NameRule(_L + "gate.weight", _B + "ffn_gate_inp.weight"),
        # transformers' spelling first (GGUF -> HF writes it), then the reference's own
        NameRule(_L + "gate.e_score_correction_bias", _B + "exp_probs_b.bias"),
        NameRule(_L + "gate.e_score_correction.bias", _B + "exp_probs_b.bias"),
        NameRule(_L + "shared_experts.up_proj.weight", _B + "ffn_up_shexp.weight"),
        NameRule(_L + "shared_experts.down_proj.weight", _B + "ffn_down_shexp.weight"),
        NameRule(_L + "fc1_latent_proj.weight", _B + "ffn_latent_down.weight"),
        NameRule(_L + "fc2_latent_proj.weight", _B + "ffn_latent_up.weight"),
        # the MTP block (after the trunk)
        NameRule("backbone.layers.{bid}.enorm.weight", _B + "nextn.enorm.weight"),
        NameRule("backbone.layers.{bid}.hnorm.weight", _B + "nextn.hnorm.weight"),
        NameRule("backbone.layers.{bid}.eh_proj.weight", _B + "nextn.eh_proj.weight"),
        NameRule(
            "backbone.layers.{bid}.post_attention_layernorm.weight",
            _B + "post_attention_norm.weight",
        ),
        NameRule(
            "backbone.layers.{bid}.shared_head.norm.weight", _B + "nextn.shared_head_norm.weight"
        ),
    ],
    # a layer's experts are emitted when its last one is read: down, then up
    stacks=[
        Stack(_L + "experts.{xid}.down_proj.weight", _B + "ffn_down_exps.weight", _n_experts),
        Stack(_L + "experts.{xid}.up_proj.weight", _B + "ffn_up_exps.weight", _n_experts),
    ],
    transforms=NEMOTRON_H.transforms,
    defaults=_MOE_DEFAULTS,
    ignored=("head_dim",),
    required=NEMOTRON_H.required,
    tokenizer={"vocab": "gpt2"},
    model_types={"NemotronHForCausalLM": "nemotron_h"},
    hf_config=_hf_moe,
    rename=(_mtp_to_trunk, _trunk_to_mtp),
    # the reference renames the MTP tensors in modify_tensors: its F32 rule misses the MTP
    # block's router (read as block 1), which gets the output type
    late_rename=True,
    from_tensors=_one_mtp_block,
    mtp=NEMOTRON_H.mtp,
)


def has_experts(cfg: dict) -> bool:
    """A Nemotron-H config with MoE layers (``E`` / ``moe``): the ``nemotron_h_moe`` entry."""
    return "E" in layer_kinds(cfg)


# ----------------------------------------------------------------------------- Puzzle

#: NemotronHPuzzleModel's per-block rows: arrays from ``block_configs`` (0 off MoE blocks)
_BLOCK_ROWS = {
    "feed_forward_length": "moe_intermediate_size",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_used_count": "num_experts_per_tok",
}


def _blocks(cfg: dict) -> dict:
    """The config as NemotronHPuzzleModel reads it: ``block_configs`` gives the layer count
    and kinds (the wrapper's ``layers_block_type`` is not sized to it), no MTP block (its
    head has another layout; the reference drops it)."""
    bcs = cfg.get("block_configs") or []
    out = {k: v for k, v in cfg.items() if k != "hybrid_override_pattern"}
    out.update(
        num_hidden_layers=len(bcs),
        layers_block_type=[bc.get("block_type") for bc in bcs],
        num_nextn_predict_layers=0,
    )
    return out


def _puzzle_row(row: Any) -> Any:
    if not isinstance(row, MetaKey):
        return row
    if row.key in _BLOCK_ROWS:
        f = _BLOCK_ROWS[row.key]
        return replace(
            row,
            type=VT.INT32,
            value=lambda c: [bc.get(f) or 0 for bc in c.get("block_configs") or []],
        )
    if row.key == "nextn_predict_layers":
        return replace(row, value=lambda c: None)
    return replace(row, value=lambda c, r=row: r.get(_blocks(c)))


def _uniform(cfg: dict, key: str) -> int:
    vals = {int(x) for x in cfg[key] if x}
    if len(vals) != 1:
        raise E.InvalidModelConfig(
            "per-block MoE shapes differ: no transformers class computes this model",
            field=key,
            expected="one value over the MoE blocks (NemotronHForCausalLM)",
            found=sorted(vals),
        )
    return vals.pop()


def _hf_puzzle(cfg: dict, names: set[str]) -> dict[str, Any]:
    """GGUF -> HF as NemotronHForCausalLM (transformers 5.24 has no Puzzle class): the same
    computation when every MoE block has the same width and top-k."""
    width = _uniform(cfg, "moe_intermediate_size")
    return {
        **_hf_moe({**cfg, "moe_intermediate_size": width}, names),
        "num_experts_per_tok": _uniform(cfg, "num_experts_per_tok"),
        "moe_intermediate_size": width,
    }


NEMOTRON_H_PUZZLE = Arch(
    hf_archs=("NemotronHForCausalLM",),
    gguf_arch="nemotron_h_moe",
    meta=[_puzzle_row(r) for r in NEMOTRON_H_MOE.meta],
    names=NEMOTRON_H_MOE.names,
    stacks=NEMOTRON_H_MOE.stacks,
    transforms=NEMOTRON_H_MOE.transforms,
    defaults=_MOE_DEFAULTS,
    ignored=("head_dim",),
    required=NEMOTRON_H.required,
    present=("block_configs",),
    # the official BF16 checkpoint's ``model.*`` trunk is the original ``backbone.*``
    renames=((r"^model\.", "backbone."),),
    skip=(*NEMOTRON_H_MOE.skip, r"^mtp\."),
    tokenizer={"vocab": "gpt2"},
    model_types={"NemotronHForCausalLM": "nemotron_h"},
    hf_config=_hf_puzzle,
)


def is_puzzle_file(md: Any) -> bool:
    """A ``nemotron_h_moe`` file with per-block top-k (an array) is a Puzzle's."""
    return isinstance(md.get("nemotron_h_moe.expert_used_count"), (list, tuple))
