"""BailingMoE V3 (Ling-3.0): conversion/bailingmoe3.py ``BailingMoeV3Model`` (GGUF
``bailingmoe3``), read from the Hub's checkpoint layout (``model.word_embeddings``,
``attention.*``, ``attention.dense``, per-expert MLPs, ``mlp.gate.expert_bias``), which
transformers 5.24's ``bailing_hybrid`` also saves.

Layers of two kinds: every ``layer_group_size``-th layer (and the tail after the last
whole group) is MLA as DeepSeek-V2's (``kv_b_proj`` split into ``attn_k_b`` /
``attn_v_b``) with a head-wise output gate ``g_proj`` (``attn_gate``); the others are KDA
linear attention: ``q/k/v_proj``, the short convolutions ``{q,k,v}_conv1d`` reshaped
``[C, 1, K]`` -> ``[1, C, 1, K]``, the forget gate's ``f_proj`` (``ssm_f_a``), the output
gate ``g_proj`` (``ssm_g_a``), ``b_proj`` (``ssm_beta``), ``A_log`` -> ``exp`` as a
column (``ssm_a`` ``[H, 1]``), ``dt_bias`` (``ssm_dt.bias``) and ``o_norm``
(``ssm_norm``).  The MLP is dense for the first ``first_k_dense_replace`` layers, then a
sigmoid-routed MoE with shared experts.

Metadata: TextModel's rows with ``attention.head_count_kv`` as a per-layer array (0 on
KDA layers, 1 on MLA ones) and ``attention.key_length`` the MLA's ``kv_lora_rank +
qk_rope_head_dim`` in TextModel's place (``value_length`` stays ``head_dim``), then the
KDA, MLA and MoE rows.  The reference reads the Hub config's spellings
(``num_experts_per_tok``, ``norm_topk_prob``, ``score_function``,
``moe_shared_expert_intermediate_size``, ``no_kda_lora``,
``gated_attention_proj_granularity_type``) and ``head_dim`` as the KDA head width
(transformers' saved ``head_dim`` is the rope width): both refuse a config without them.
The checkpoint's ``num_nextn_predict_layers`` multi-token-prediction blocks follow the
trunk as ``model.layers.{n}.*`` (an MLA layer with the MoE, plus ``eh_proj``, ``enorm``,
``hnorm`` and its output norm ``final_layernorm``): counted in ``block_count`` and the
per-layer KV heads, written as ``blk.{n}.*`` (``nextn.eh_proj`` / ``nextn.enorm`` /
``nextn.hnorm``, ``layer_output_norm``) with ``nextn_predict_layers`` last, as the
reference does by default (``mtp="drop"`` / ``"only"``: :data:`APPENDED_MTP` with this
file's embedding name).  A layer past the trunk the config does not count is refused as
unmapped before any output.  Not converted (none in the test models): the per-layer
SwiGLU clamp lists (``expert_swiglu_limit_list``).

The text of Ling-3.0 VL (``BailingMoeV3VLForConditionalGeneration``: the reference's
``BailingMoeV3VLModel``, :data:`BAILINGMOE3_VL`) is this file from ``text_config``
(merged up), without the vision tower and the top-level ``linear_proj.*`` projector
(the projector file's, :mod:`.mmproj`), plus ``rope.dimension_sections`` last: the
config's top-level ``mrope_section`` (after the merge: ``text_config.mrope_section``)
``[t, h, w]`` padded with a 0, refused unless it is there and its three sections sum
to ``qk_rope_head_dim / 2`` (the reference's checks).  llama.cpp runs such a file with
M-RoPE (NeoX pairs) where the text-only file has plain RoPE on adjacent pairs: no
transformers class computes it, so GGUF -> HF refuses it alone (the sections say which
it is) and its projector too.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np

from ._common import (
    BLK,
    FFN_NORM,
    LAYER,
    MLA_ROWS,
    kda_conv_4d,
    kda_mla_rows,
    layer_rules,
    past_blocks,
    reference_math,
    replace_rows,
)
from ._model import APPENDED_MTP, VT, Arch, NameRule, Transform, m
from .deepseek import DEEPSEEK2

_ATT = LAYER + "attention."


def _full(cfg: dict, bid: int) -> bool:
    n, g = cfg["num_hidden_layers"], cfg["layer_group_size"]
    return bid >= n or (bid + 1) % g == 0 or bid >= n // g * g


def _n_nextn(cfg: dict) -> int:
    return cfg.get("num_nextn_predict_layers") or 0


def _blocks(cfg: dict) -> int:
    """The trunk and its MTP blocks (the reference's ``block_count``)."""
    return cfg["num_hidden_layers"] + _n_nextn(cfg)


def _kv_heads(cfg: dict) -> list[int]:
    return [1 if _full(cfg, i) else 0 for i in range(_blocks(cfg))]


_ROWS = [
    *replace_rows(
        kda_mla_rows(_kv_heads),
        block_count=m("block_count", "num_hidden_layers", value=_blocks),
    ),
    m("vocab_size", "vocab_size"),
    m("ssm.conv_kernel", "short_conv_kernel_size"),
    m("kda.head_dim", "head_dim"),
    m("kda.safe_gate", "kda_safe_gate", t=VT.BOOL),
    m("kda.gate_lower_bound", "kda_lower_bound", t=VT.FLOAT32),
    *MLA_ROWS,
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_feed_forward_length", "moe_shared_expert_intermediate_size"),
    m("expert_shared_count", "num_shared_experts", value=lambda c: c.get("num_shared_experts", 1)),
    m("leading_dense_block_count", "first_k_dense_replace"),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
    m("expert_weights_norm", "norm_topk_prob", t=VT.BOOL),
    m("nextn_predict_layers", "num_nextn_predict_layers", value=lambda c: _n_nextn(c) or None),
]


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    """What GGUF keeps only implied, for transformers' BailingHybridConfig: the layer kinds
    (from the per-layer KV heads), the MLA's nope width, the MLA head count for its
    KV heads, and the Hub spellings the rows name back under transformers' own."""
    # block_count counts the MTP blocks after the trunk; the Hub's config does not
    n = cfg["num_hidden_layers"] - _n_nextn(cfg)
    kinds = ["full_attention" if k else "linear_attention" for k in cfg["_kv_heads"][:n]]
    dense = cfg.get("first_k_dense_replace", 0)
    return {
        "num_hidden_layers": n,
        "layer_types": kinds,
        "layer_group_size": kinds.index("full_attention") + 1,
        "mlp_layer_types": ["dense"] * dense + ["sparse"] * (n - dense),
        "qk_nope_head_dim": cfg["qk_head_dim"] - cfg["qk_rope_head_dim"],
        "num_key_value_heads": cfg["num_attention_heads"],
        "num_experts": cfg["num_local_experts"],
        "num_mtp_layers": _n_nextn(cfg),
        # transformers' own spellings of three Hub fields (its attribute_map does not
        # reach them when config.json is read)
        "num_expert_group": cfg.get("n_group"),
        "num_experts_per_token": cfg.get("num_experts_per_tok"),
        "moe_renormalize": cfg.get("norm_topk_prob"),
        # the reference's switches (it converts nothing else), for GGUF -> HF -> GGUF
        "no_kda_lora": True,
        "gated_attention_proj_granularity_type": "head_wise",
        "pad_token_id": None,
    }


_GATE_FULL = re.compile(r"^(model\.layers\.(\d+)\.attention\.)g_proj(\.weight)$")


def _rename(name: str, cfg: dict) -> str:
    """The output gate's GGUF name depends on the layer kind: MLA layers' is spelled
    ``g_proj_full`` here so one name rule each fits.  A layer past the trunk and its
    counted MTP blocks is refused (the reference cannot map it)."""
    name = past_blocks(name, _blocks(cfg))
    mt = _GATE_FULL.match(name)
    if mt and _full(cfg, int(mt.group(2))):
        return f"{mt.group(1)}g_proj_full{mt.group(3)}"
    return name


def _unrename(name: str, cfg: dict) -> str:
    return name.replace(".g_proj_full.", ".g_proj.")


def _att(pairs: list[tuple[str, str]]) -> list[NameRule]:
    return layer_rules([("attention." + h, g) for h, g in pairs])


_NAMES = [
    NameRule("model.word_embeddings.weight", "token_embd.weight"),
    NameRule("model.norm.weight", "output_norm.weight"),
    NameRule("lm_head.weight", "output.weight"),
    *layer_rules([("input_layernorm", "attn_norm")]),
    *FFN_NORM,
    *_att(
        [
            ("q_proj", "attn_q"),
            ("k_proj", "attn_k"),
            ("v_proj", "attn_v"),
            ("dense", "attn_output"),
            ("q_conv1d", "ssm_conv1d_q"),
            ("k_conv1d", "ssm_conv1d_k"),
            ("v_conv1d", "ssm_conv1d_v"),
            ("f_proj", "ssm_f_a"),
            ("g_proj", "ssm_g_a"),
            ("g_proj_full", "attn_gate"),
            ("b_proj", "ssm_beta"),
            ("o_norm", "ssm_norm"),
            ("q_a_proj", "attn_q_a"),
            ("q_a_layernorm", "attn_q_a_norm"),
            ("q_b_proj", "attn_q_b"),
            ("kv_a_proj_with_mqa", "attn_kv_a_mqa"),
            ("kv_a_layernorm", "attn_kv_a_norm"),
        ]
    ),
    NameRule(_ATT + "A_log", BLK + "ssm_a"),
    NameRule(_ATT + "dt_bias", BLK + "ssm_dt.bias"),
    *layer_rules(
        [
            ("mlp.gate_proj", "ffn_gate"),
            ("mlp.up_proj", "ffn_up"),
            ("mlp.down_proj", "ffn_down"),
            ("mlp.gate", "ffn_gate_inp"),
            ("mlp.shared_experts.gate_proj", "ffn_gate_shexp"),
            ("mlp.shared_experts.up_proj", "ffn_up_shexp"),
            ("mlp.shared_experts.down_proj", "ffn_down_shexp"),
        ]
    ),
    NameRule(LAYER + "mlp.gate.expert_bias", BLK + "exp_probs_b.bias"),
    # the MTP block's own tensors (gguf-py maps these three nextn names for bailingmoe3,
    # and BailingMoE V2's final_layernorm as the block's output norm)
    *layer_rules(
        [
            ("eh_proj", "nextn.eh_proj"),
            ("enorm", "nextn.enorm"),
            ("hnorm", "nextn.hnorm"),
            ("final_layernorm", "layer_output_norm"),
        ]
    ),
]


def _exp_column(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return reference_math(x, lambda torch, t: torch.exp(t), np.exp).reshape(-1, 1)


_TRANSFORMS = [
    kda_conv_4d(r"attention\."),
    Transform(
        "kda_a_exp",
        r"attention\.A_log$",
        _exp_column,
        lambda x, cfg, ctx: np.log(x.astype(np.float32)).reshape(-1),
        shape=lambda s, cfg, ctx: (int(np.prod(s)), 1),
        inverse_shape=lambda s, cfg, ctx: (int(np.prod(s)),),
        exact=False,
    ),
]


def _mla_heads(cfg: dict) -> dict:
    # the reference splits kv_b_proj per attention head (its MQA rewrite sets the KV heads to 1)
    return {**cfg, "num_key_value_heads": cfg["num_attention_heads"]}


_KV_B = DEEPSEEK2.splits[0]

BAILINGMOE3 = Arch(
    hf_archs=("BailingMoeV3ForCausalLM",),
    gguf_arch="bailingmoe3",
    meta=_ROWS,
    names=_NAMES,
    transforms=_TRANSFORMS,
    stacks=[replace(s, count=lambda c: c["num_experts"]) for s in DEEPSEEK2.stacks],
    splits=[
        replace(
            _KV_B,
            hf=_ATT + "kv_b_proj.weight",
            fn=lambda x, cfg: _KV_B.fn(x, _mla_heads(cfg)),
            shapes=lambda sh, cfg: _KV_B.shapes(sh, _mla_heads(cfg)),
            join=lambda parts, cfg: _KV_B.join(parts, _mla_heads(cfg)),
        )
    ],
    rename=(_rename, _unrename),
    fixed={
        "no_kda_lora": True,
        "kda_safe_gate": True,
        "gated_attention_proj_granularity_type": "head_wise",
    },
    # read by the reference, named back by no GGUF row (hf_config derives them)
    present=("layer_group_size", "qk_nope_head_dim", "num_experts"),
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "head_dim",
        "short_conv_kernel_size",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "v_head_dim",
        "moe_intermediate_size",
        "moe_shared_expert_intermediate_size",
    ),
    tokenizer={"vocab": "gpt2"},
    model_types={"BailingMoeV3ForCausalLM": "bailing_hybrid"},
    hf_config=_hf_config,
    mtp=replace(
        APPENDED_MTP, keep=("model.word_embeddings.weight", "model.norm.weight", "lm_head.weight")
    ),
)


def _vl_sections(cfg: dict) -> list[int]:
    return [*cfg["mrope_section"][:3], 0]


def _vl_check(cfg: dict) -> tuple[str, Any, Any] | None:
    """BailingMoeV3VLModel's checks: the sections are there and count rope pairs."""
    sec = cfg.get("mrope_section")
    want = cfg["qk_rope_head_dim"] // 2
    ok = isinstance(sec, list) and len(sec) >= 3 and all(isinstance(x, int) for x in sec[:3])
    if not ok or sum(sec[:3]) * 2 != cfg["qk_rope_head_dim"]:
        return "mrope_section", f"[t, h, w] summing to qk_rope_head_dim / 2 = {want}", sec
    return None


# BailingMoeV3VLModel: the text from text_config, its rows plus the M-RoPE sections, the
# tower (skipped as every text model's) and the top-level ``linear_proj`` MLP left to the
# projector; no HF class (model_types empty: GGUF -> HF refuses the file alone)
BAILINGMOE3_VL = replace(
    BAILINGMOE3,
    hf_archs=("BailingMoeV3VLForConditionalGeneration",),
    meta=[
        *_ROWS,
        m("rope.dimension_sections", "mrope_section", t=VT.INT32, value=_vl_sections),
    ],
    skip=(*BAILINGMOE3.skip, r"^linear_proj\."),
    check=_vl_check,
    model_types={},
)
