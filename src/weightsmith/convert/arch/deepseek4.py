"""DeepSeek-V4: conversion/deepseek.py ``DeepseekV4Model`` (GGUF ``deepseek4``).

The reference reads the checkpoint as DeepSeek publishes it, not as transformers 5
saves it: DeepSeek's names (``embed.weight``, ``layers.N.attn.wq_a.weight``, ...) and
the Hub's ``config.json`` (``compress_ratios``, ``num_hash_layers``, ``qk_rope_head_dim``,
which transformers' config folds into ``layer_types`` / ``mlp_layer_types``).

* Routed experts are MXFP4: per expert ``w1`` (gate), ``w2`` (down), ``w3`` (up) as
  ``.weight`` ``[out, in / 2]`` (two E2M1 codes a byte, element ``2i`` low) and
  ``.scale`` E8M0 ``[out, in / 32]``.  They are repacked into ggml MXFP4 without a float
  round trip (the byte layout is gpt-oss's, :func:`.gptoss.repack_mxfp4`) and stacked
  per layer, gate, down, up; they come first in the file, after the hash layers'
  routing tables ``ffn_gate_tid2eid`` (int32 ``[vocab, top_k]``).
* Other FP8 (e4m3) weights with an E8M0 ``.scale`` per 128 x 128 block are dequantized
  on read (:func:`weightsmith.convert._dequant.e8m0_dequantize_sources`) and written
  Q8_0 whatever the output type; float32 sources stay F32, bfloat16 matrices BF16 (the
  reference's ``tensor_force_quant`` by source dtype).  So every ``--outtype`` gives the
  same file, labelled ``MXFP4_MOE``.
* The hash layers' router bias ``ffn.gate.bias`` is not written (they route by
  ``tid2eid``); ``ffn.gate.bias_vl`` (image tokens) is.  The MTP block (``mtp.*``) and
  the vision tower are not part of the text file (``mtp="drop"``: the same file).
* ``mtp="only"`` (the reference's ``--mtp``) writes the MTP block as a draft: block
  ``mtp.{i}`` is layer ``num_hidden_layers + i`` (``block_count``, the SwiGLU clamp
  arrays and ``nextn_predict_layers`` count it), its ``enorm`` / ``hnorm`` / ``norm`` the
  ``nextn.*`` norms, ``e_proj`` and ``h_proj`` concatenated along the input into
  ``nextn.eh_proj`` (Q8_0 at every type, written right after the experts), its
  ``hc_head_*`` the root ``output_hc_*``; with the trunk's embedding, final norm and head.
* The reference puts llama.cpp's bundled DeepSeek-V4 chat template right after
  ``general.architecture``, overwritten there by the tokenizer's own: the key keeps
  that place, with the tokenizer's template (none is written without one).
"""

from __future__ import annotations

import re

import numpy as np

from ._common import COMMON, replace_rows
from ._model import VT, Arch, Compose, MetaKey, Mtp, NameRule, Packed, PlanError, Transform, m
from .gptoss import repack_mxfp4

_L = "layers.{bid}."
_B = "blk.{bid}."


def repack_mxfp4_rows(packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """DeepSeek's MXFP4 ``packed [rows, cols / 2]`` + ``scale [rows, cols / 32]`` -> ggml
    bytes ``[rows, cols / 32 * 17]`` (gpt-oss's layout with the blocks as one row)."""
    p = np.ascontiguousarray(packed).view(np.uint8)
    s = np.ascontiguousarray(scale).view(np.uint8)
    return repack_mxfp4(p.reshape(*p.shape[:-1], -1, 16), s)


def _n_layers(cfg: dict) -> int:
    """The blocks written: the trunk, and the MTP blocks in a draft (``mtp="only"``)."""
    return cfg["num_hidden_layers"] + (_n_nextn(cfg) if cfg.get("_mtp_only") else 0)


def _n_nextn(cfg: dict) -> int:
    return cfg.get("num_nextn_predict_layers") or 0


def _clamp(cfg: dict) -> list[float]:
    return [float(cfg["swiglu_limit"])] * _n_layers(cfg)


_ROWS = [
    *replace_rows(COMMON, block_count=m("block_count", "num_hidden_layers", value=_n_layers)),
    m("rope.dimension_count", "qk_rope_head_dim"),
    m("attention.q_lora_rank", "q_lora_rank"),
    m("attention.sliding_window", "sliding_window"),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_count", "n_shared_experts"),
    m("expert_weights_scale", "routed_scaling_factor", t=VT.FLOAT32),
    m("expert_weights_norm", "norm_topk_prob", t=VT.BOOL),
    m("swiglu_clamp_exp", "swiglu_limit", t=VT.FLOAT32, value=_clamp),
    m("swiglu_clamp_shexp", "swiglu_limit", t=VT.FLOAT32, value=_clamp),
    m("attention.indexer.head_count", "index_n_heads"),
    m("attention.indexer.key_length", "index_head_dim"),
    m("attention.indexer.top_k", "index_topk"),
    m("attention.output_group_count", "o_groups"),
    m("attention.output_lora_rank", "o_lora_rank"),
    m("attention.compress_ratios", "compress_ratios", t=VT.INT32),
    m("attention.compress_rope_freq_base", "compress_rope_theta", t=VT.FLOAT32),
    m("hyper_connection.count", "hc_mult"),
    m("hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters"),
    m("hyper_connection.epsilon", "hc_eps", t=VT.FLOAT32),
    m("hash_layer_count", "num_hash_layers"),
    m("embedding_length_out", "hc_mult", value=lambda c: c["hidden_size"] * c["hc_mult"]),
    m(
        "nextn_predict_layers",
        "num_nextn_predict_layers",
        value=lambda c: _n_nextn(c) if c.get("_mtp_only") and _n_nextn(c) > 0 else None,
    ),
]

_PAIRS = [
    ("hc_attn_fn", "hc_attn_fn.weight"),
    ("hc_attn_base", "hc_attn_base.weight"),
    ("hc_attn_scale", "hc_attn_scale.weight"),
    ("hc_ffn_fn", "hc_ffn_fn.weight"),
    ("hc_ffn_base", "hc_ffn_base.weight"),
    ("hc_ffn_scale", "hc_ffn_scale.weight"),
    ("attn.attn_sink", "attn_sinks.weight"),
    ("attn.wq_a.weight", "attn_q_a.weight"),
    ("attn.wq_b.weight", "attn_q_b.weight"),
    ("attn.q_norm.weight", "attn_q_a_norm.weight"),
    ("attn.wkv.weight", "attn_kv.weight"),
    ("attn.kv_norm.weight", "attn_kv_a_norm.weight"),
    ("attn.wo_a.weight", "attn_output_a.weight"),
    ("attn.wo_b.weight", "attn_output_b.weight"),
    ("attn.compressor.ape", "attn_compressor_ape.weight"),
    ("attn.compressor.wkv.weight", "attn_compressor_kv.weight"),
    ("attn.compressor.wgate.weight", "attn_compressor_gate.weight"),
    ("attn.compressor.norm.weight", "attn_compressor_norm.weight"),
    ("attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"),
    ("attn.indexer.weights_proj.weight", "indexer.proj.weight"),
    ("attn.indexer.compressor.ape", "indexer_compressor_ape.weight"),
    ("attn.indexer.compressor.wkv.weight", "indexer_compressor_kv.weight"),
    ("attn.indexer.compressor.wgate.weight", "indexer_compressor_gate.weight"),
    ("attn.indexer.compressor.norm.weight", "indexer_compressor_norm.weight"),
    ("attn_norm.weight", "attn_norm.weight"),
    ("ffn_norm.weight", "ffn_norm.weight"),
    ("ffn.gate.weight", "ffn_gate_inp.weight"),
    ("ffn.gate.bias", "exp_probs_b.bias"),
    ("ffn.gate.bias_vl", "exp_probs_b_vl.bias"),
    ("ffn.gate.tid2eid", "ffn_gate_tid2eid.weight"),
    ("ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"),
    ("ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"),
    ("ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"),
    # the MTP block's own (a draft's layer past the trunk: _mtp_layer)
    ("nextn.eh_proj.weight", "nextn.eh_proj.weight"),
    ("nextn.enorm.weight", "nextn.enorm.weight"),
    ("nextn.hnorm.weight", "nextn.hnorm.weight"),
    ("nextn.shared_head_norm.weight", "nextn.shared_head_norm.weight"),
]


def _hash_bias(cfg: dict) -> tuple[str, ...]:
    return tuple(f"layers.{b}.ffn.gate.bias" for b in range(cfg.get("num_hash_layers", 0)))


def source_type(name: str, dtype: str, ndim: int) -> str | None:
    """The reference's ``tensor_force_quant``: the type a source of ``dtype`` is written in
    whatever the output type (None: the usual rules)."""
    if name.endswith(".nextn.eh_proj.weight"):
        return "Q8_0"
    if dtype.startswith("F8_E4M3") or dtype.startswith("F8_E5M2"):
        return "Q8_0" if ndim >= 2 else None
    if name.endswith("ffn_gate_tid2eid.weight"):
        return "I32"
    if dtype == "F32":
        return "F32"
    if dtype == "BF16" and ndim >= 2:
        return "BF16"
    return None


_EXP = _L + "ffn.experts.{xid}."

_MTP = re.compile(r"^mtp\.(\d+)\.(.+)$")
#: an MTP block's own tensors -> their name as a layer's (the rest keep the layer's names)
_MTP_OWN = {
    "e_proj.weight": "nextn.eh_proj.weight",  # with h_proj concatenated (_EH_PROJ)
    "enorm.weight": "nextn.enorm.weight",
    "hnorm.weight": "nextn.hnorm.weight",
    "norm.weight": "nextn.shared_head_norm.weight",
}


def _mtp_layer(name: str, cfg: dict) -> str:
    """In a draft, ``mtp.{i}.*`` read as layer ``num_hidden_layers + i`` (its
    ``hc_head_*`` as the root's; ``h_proj`` is in ``e_proj``'s composed values and stays
    skipped); otherwise the name as it is (skipped).  A draft's block past
    ``num_nextn_predict_layers`` is unmapped (the reference refuses it too)."""
    mt = _MTP.match(name)
    if mt is None or not cfg.get("_mtp_only"):
        return name
    if int(mt[1]) >= _n_nextn(cfg):
        return "past_nextn_count." + name  # no rule maps it: refused by name
    rest = mt[2]
    if rest in ("hc_head_fn", "hc_head_base", "hc_head_scale"):
        return rest
    if rest.startswith("h_proj."):
        return name
    return f"layers.{cfg['num_hidden_layers'] + int(mt[1])}.{_MTP_OWN.get(rest, rest)}"


def _cat_inputs(values: dict) -> np.ndarray:
    e, h = values["mtp.0.e_proj.weight"], values["mtp.0.h_proj.weight"]
    return np.concatenate([e, h], axis=1)


def _eh_shape(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    """``eh_proj`` takes the embedding and the hidden state side by side: an ``e_proj``
    without its ``h_proj`` is refused before any output (the reference stops on it)."""
    if len(shape) != 2 or shape[1] != 2 * cfg["hidden_size"]:
        raise PlanError("MTP e_proj without h_proj", "mtp.0.e_proj.weight", f"{list(shape)}")
    return shape


_EH_CHECK = Transform(
    "dsv4_eh_proj", r"\.nextn\.eh_proj\.weight$", lambda x, c, t: x, lambda x, c, t: x, _eh_shape
)

# the reference concatenates e_proj and h_proj along the input (its MTP graph reads the
# embedding and hidden state side by side); DeepSeek-V4 has one MTP block
_EH_PROJ = Compose(
    "mtp.0.e_proj.weight",
    ("mtp.0.h_proj.weight",),
    _cat_inputs,
    lambda s: (s["mtp.0.e_proj.weight"][0], sum(v[1] for v in s.values())),
)

DEEPSEEK4 = Arch(
    hf_archs=("DeepseekV4ForCausalLM",),
    gguf_arch="deepseek4",
    meta=_ROWS,
    early_meta=[MetaKey("tokenizer.chat_template", (), VT.STRING, absolute=True, slot=True)],
    names=[
        NameRule("embed.weight", "token_embd.weight"),
        NameRule("norm.weight", "output_norm.weight"),
        NameRule("head.weight", "output.weight"),
        NameRule("hc_head_fn", "output_hc_fn.weight"),
        NameRule("hc_head_base", "output_hc_base.weight"),
        NameRule("hc_head_scale", "output_hc_scale.weight"),
        *[NameRule(_L + h, _B + g) for h, g in _PAIRS],
    ],
    packed=[
        Packed(
            _EXP + f"{w}",
            (_B + f"ffn_{g}_exps.weight",),
            repack_mxfp4_rows,
            suffixes=(".weight", ".scale"),
            count=lambda c: c["n_routed_experts"],
        )
        for w, g in (("w1", "gate"), ("w2", "down"), ("w3", "up"))
    ],
    skip=(r"^mtp\.", r"^(vision|aligner|image_)"),
    skip_cfg=_hash_bias,
    front=(r"ffn_gate_tid2eid", r"_exps\.", r"\.nextn\.eh_proj\."),
    rename=(_mtp_layer, lambda name, cfg: name),
    compose=(_EH_PROJ,),
    transforms=[_EH_CHECK],
    # the reference leaves the block out by default: ``drop`` is the default file
    mtp=Mtp(
        lambda name, cfg: name.startswith("mtp."),
        drop=lambda c: c,
        only=lambda c: {**c, "_mtp_only": True},
        keep=("embed.weight", "norm.weight", "head.weight", "head.scale"),
    ),
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "n_routed_experts",
        "hc_mult",
        "qk_rope_head_dim",
    ),
    # the Hub config's legacy fields, which transformers 5 folds away (no default)
    present=("compress_ratios", "num_hash_layers"),
    hf_back=False,
    # DeepseekV4Config's defaults, which the reference reads through AutoConfig
    defaults={
        "max_position_embeddings": 1048576,
        "num_key_value_heads": 1,
        "head_dim": 512,
        "q_lora_rank": 1024,
        "num_experts_per_tok": 6,
        "n_shared_experts": 1,
        "scoring_func": "sqrtsoftplus",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1.0e-6,
        "swiglu_limit": 10.0,
        "sliding_window": 128,
        "o_groups": 8,
        "o_lora_rank": 1024,
        "index_n_heads": 64,
        "index_head_dim": 128,
        "index_topk": 512,
        "rms_norm_eps": 1.0e-6,
    },
    source_type=source_type,
    e8m0_scales=True,
    file_type="MXFP4_MOE",
    tokenizer={"vocab": "gpt2"},
)
