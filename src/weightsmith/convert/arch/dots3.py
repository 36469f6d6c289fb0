"""Dots3 Note's text: conversion/dots3.py ``Dots3NoteModel`` (GGUF ``dots3note``), the
text of ``Dots3NoteForConditionalGeneration`` (and its text-only classes).

DeepSeek-V2's MLA and sigmoid-routed MoE (:mod:`.deepseek`) with layers of two kinds
(``layer_types``): full-attention layers with a DSA indexer (``self_attn.indexer.*``:
``wq_b`` / ``wk`` / ``k_norm`` / ``weights_proj``) and sliding-window layers with their
own MLA geometry and head count (the Hub's ``swa_*`` fields).  Every layer has a per-head
sigmoid gate (``g_proj`` -> ``attn_gate``) and an RMS norm on the rotary key part
(``k_rope_only_layernorm`` -> ``attn_k_norm``).  ``kv_b_proj`` is split as DeepSeek-V2's
with the geometry of its layer's kind (told from its shape: ``[n_head * (nope + v),
kv_lora_rank]``).  With ``apply_mla_qkv_lora_rescale`` the latent rescale
``sqrt(hidden_size / rank)`` is folded into ``q_a_layernorm`` / ``kv_a_layernorm`` (the
rank is the norm's length), computed as the reference computes it (torch, on the tensor's
own type).

Metadata: TextModel's rows with ``attention.head_count`` a per-layer array (the sliding
layers' count on sliding layers), MQA's ``head_count_kv`` 1 and no ``head_dim`` lengths
(the reference pops ``head_dim``), DeepSeek-V2's rows, then the sliding window, its layer
pattern, the sliding layers' MLA lengths and the indexer rows (``indexer.types`` true on
the full-attention layers).  The reference reads the Hub's flat config: transformers
5.24's normalised ``config.json`` (text under ``text_config``, no ``swa_*`` fields) lacks
the ``swa_*`` fields and is refused by name before any output.

The MTP block: the Hub keeps it as the layer after the trunk (``model.layers.{n}.*``: a
sliding-attention MLA layer with a dense MLP, no indexer, plus ``eh_proj`` / ``enorm`` /
``hnorm`` / ``shared_head.norm``) and its token embedding as
``model.mtp.embed_tokens.weight``; the config names no count, so the reference counts one
block when that embedding is present (:func:`_nextn_from_tensors`).  The embedding is
renamed into the block (``blk.{n}.nextn.embed_tokens``), ``block_count`` and the per-layer
head counts include the block (the sliding layers' count), the sliding pattern and the
indexer types do not, and ``nextn_predict_layers`` follows the sliding MLA lengths.
llama.cpp 0.3.36 loads the block's tensors and skips them (no dots3note MTP graph).  GGUF
-> HF: transformers 5.24 has no
text-only class, so the text alone is refused; with its projector it comes back as the
``Dots3NoteForConditionalGeneration`` folder (:mod:`.._mmproj_to_hf`), its text fields
from :func:`_hf_config`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._common import (
    BLK,
    COMMON,
    DSA_INDEXER_NAMES,
    LAYER,
    NEXTN_NAMES,
    past_blocks,
    reference_math,
    replace_rows,
)
from ._model import VT, Arch, Mtp, NameRule, PlanError, Split, Transform, m, past_trunk
from .deepseek import DEEPSEEK2

_ATT = LAYER + "self_attn."


def _is_swa(cfg: dict) -> list[bool]:
    return [t == "sliding_attention" for t in cfg["layer_types"][: cfg["num_hidden_layers"]]]


#: the MTP block's token embedding, the one MTP tensor the Hub keeps outside the layers
_MTP_EMBED = "model.mtp.embed_tokens.weight"


def _nextn_from_tensors(cfg: dict, names: list[str]) -> dict[str, Any]:
    """The MTP block count, as the reference tells it: one when the checkpoint holds the
    block's embedding (the config has no such field)."""
    return {"_nextn": 1 if _MTP_EMBED in names else 0}


def _n_nextn(cfg: dict) -> int:
    return cfg.get("_nextn", 0)


def _head_counts(cfg: dict) -> list[int]:
    """Per block, the MTP block's too (it is a sliding-attention layer)."""
    full, swa = cfg["num_attention_heads"], cfg["swa_num_attention_heads"]
    return [swa if s else full for s in _is_swa(cfg)] + [swa] * _n_nextn(cfg)


def _block_embed(cfg: dict) -> str:
    return f"model.layers.{cfg['num_hidden_layers']}.embed_tokens.weight"


def _mtp_embed_in(name: str, cfg: dict) -> str:
    """The reference's modify_tensors: the MTP embedding as a tensor of the block.  A layer
    past ``block_count`` (an MTP block without that embedding: the reference counts none)
    is refused as unmapped, as the reference refuses it."""
    if name == _MTP_EMBED:
        return _block_embed(cfg)
    return past_blocks(name, cfg["num_hidden_layers"] + _n_nextn(cfg))


def _mtp_embed_out(name: str, cfg: dict) -> str:
    return _MTP_EMBED if name == _block_embed(cfg) else name


def _geometry(shape: tuple[int, ...], cfg: dict) -> tuple[int, int, int]:
    """``(n_head, nope, v)`` of a ``kv_b_proj`` of ``shape``: the layer kind whose
    ``[n_head * (nope + v), kv_lora_rank]`` it is."""
    kinds = {
        (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"],
         cfg["kv_lora_rank"]),
        (cfg["swa_num_attention_heads"], cfg["swa_qk_nope_head_dim"], cfg["swa_v_head_dim"],
         cfg["swa_kv_lora_rank"]),
    }  # fmt: skip
    fits = {(n, nope, v) for n, nope, v, r in kinds if tuple(shape) == (n * (nope + v), r)}
    if len(fits) != 1:
        raise PlanError("kv_b_proj shape fits no single layer kind", "kv_b_proj", str(shape))
    return fits.pop()


def _kv_b(x: np.ndarray, cfg: dict) -> list[np.ndarray]:
    n, nope, v = _geometry(x.shape, cfg)
    kv = x.reshape(n, nope + v, x.shape[-1])
    return [kv[:, :nope, :].transpose(0, 2, 1), kv[:, nope:, :]]


def _kv_b_shapes(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    n, nope, v = _geometry(shape, cfg)
    return [(n, shape[-1], nope), (n, v, shape[-1])]


def _kv_b_join(parts: list[np.ndarray], cfg: dict) -> np.ndarray:
    k, v = parts
    kv = np.concatenate([k.transpose(0, 2, 1), v], axis=1)
    return kv.reshape(-1, kv.shape[-1])


def _rescale(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    """The latent rescale folded into a ``q_a`` / ``kv_a`` norm (its length is the rank)."""
    if not cfg.get("apply_mla_qkv_lora_rescale"):
        return x
    s = math.sqrt(cfg["hidden_size"] / x.shape[-1])
    y = reference_math(x, lambda torch, t: t * s, lambda a: a * np.float32(s))
    # torch multiplies a bfloat16 tensor in float and rounds back to bfloat16
    return y.astype(x.dtype) if x.dtype not in (np.float16, np.float32) else y


def _unscale(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    if not cfg.get("apply_mla_qkv_lora_rescale"):
        return x
    return (x / np.float32(math.sqrt(cfg["hidden_size"] / x.shape[-1]))).astype(x.dtype)


_ROWS = [
    *replace_rows(
        DEEPSEEK2.meta[: len(COMMON)],
        block_count=m(
            "block_count",
            "num_hidden_layers",
            value=lambda c: c["num_hidden_layers"] + _n_nextn(c),
        ),
        attention__head_count=m(
            "attention.head_count", "num_attention_heads", t=VT.INT32, value=_head_counts
        ),
        # the reference pops head_dim: no key/value length from it
        attention__key_length=m("attention.key_length", "head_dim", value=lambda c: None),
        attention__value_length=m("attention.value_length", "head_dim", value=lambda c: None),
    ),
    *DEEPSEEK2.meta[len(COMMON) :],
    m("attention.sliding_window", "sliding_window_size"),
    m("attention.sliding_window_pattern", "layer_types", t=VT.BOOL, value=_is_swa),
    m("attention.kv_lora_rank_swa", "swa_kv_lora_rank"),
    m(
        "attention.key_length_swa",
        "swa_kv_lora_rank",
        value=lambda c: c["swa_kv_lora_rank"] + c["swa_qk_rope_head_dim"],
    ),
    m("attention.value_length_swa", "swa_kv_lora_rank"),
    m(
        "attention.key_length_mla_swa",
        "swa_qk_head_dim",  # nope + rope (the inverse's field; hf_config splits it)
        value=lambda c: c["swa_qk_nope_head_dim"] + c["swa_qk_rope_head_dim"],
    ),
    m("attention.value_length_mla_swa", "swa_v_head_dim"),
    m("nextn_predict_layers", "num_nextn_predict_layers", value=lambda c: _n_nextn(c) or None),
    m("attention.indexer.head_count", "index_n_heads"),
    m("attention.indexer.key_length", "index_head_dim"),
    m("attention.indexer.top_k", "index_topk"),
    m(
        "attention.indexer.types",
        "layer_types",
        t=VT.BOOL,
        value=lambda c: [not s for s in _is_swa(c)],
    ),
]


#: Dots3NoteModel's asserts on fields it reads with a default (absent is fine)
_FIXED: dict[str, Any] = {
    "use_dsa": True, "normalization": "RMSNorm", "final_norm": "RMSNorm",
    "k_rope_only_layernorm": True, "topk_method": "noaux_tc", "n_group": 1,
    "topk_group": 1, "use_dynamic_rsf": False, "moe_gating_fp32": False,
    "attention_gate_type": "headwise", "swa_attention_gate_type": "headwise",
}  # fmt: skip


def _checks(cfg: dict) -> bool:
    """Dots3NoteModel's asserts on fields it reads with a default (absent is fine)."""
    want = _FIXED
    need = ("swa_qk_nope_head_dim", "swa_qk_rope_head_dim", "qk_rope_head_dim",
            "swa_q_lora_rank", "q_lora_rank", "num_hidden_layers")  # fmt: skip
    if any(not isinstance(cfg.get(k), int) for k in need) or not isinstance(
        cfg.get("layer_types"), list
    ):
        return True  # the required fields' own checks name what is missing
    return all(cfg.get(k, v) == v for k, v in want.items()) and (
        cfg["swa_qk_nope_head_dim"] + cfg["swa_qk_rope_head_dim"] == cfg.get("swa_head_dim", 256)
        and cfg["swa_qk_rope_head_dim"] == cfg["qk_rope_head_dim"]
        and cfg["swa_q_lora_rank"] == cfg["q_lora_rank"]
        and len(cfg["layer_types"]) >= cfg["num_hidden_layers"]
    )


def _hf_config(cfg: dict, names: set[str]) -> dict:
    """GGUF -> HF: the Hub's flat text fields from the rows (the per-layer head counts and
    sliding pattern, the MLA lengths as sums) and the values llama.cpp's graph hard-codes
    (the checked flags above).  ``head_dim`` (popped by the reference) is restored as
    nope + rope: transformers uses it only in ``partial_rotary_factor = rope / head_dim``,
    whose rotary width is the same for any value."""
    swa = [bool(s) for s in cfg["layer_types"]]
    heads = cfg["num_attention_heads"]
    heads = heads if isinstance(heads, list) else [heads] * len(swa)
    full_h = next((h for h, s in zip(heads, swa) if not s), heads[0])
    swa_h = next((h for h, s in zip(heads, swa) if s), full_h)
    rope = cfg["qk_rope_head_dim"]
    nope, swa_nope = cfg["qk_head_dim"] - rope, cfg["swa_qk_head_dim"] - rope
    shapes = cfg["_shapes"]
    shexp = next((shapes[n] for n in sorted(names) if n.endswith("ffn_gate_shexp.weight")), None)
    n_shared = cfg.get("n_shared_experts", 0)
    n_layers = cfg["num_hidden_layers"] - (cfg.get("num_nextn_predict_layers") or 0)
    return {
        # the trunk; the MTP block comes back as the Hub keeps it (layer n_layers and
        # model.mtp.embed_tokens), counted by its embedding as the Hub's config counts none
        "num_hidden_layers": n_layers, "num_nextn_predict_layers": None,
        "_mla_key_length": None, "_mla_value_length": None, "qk_head_dim": None,
        "swa_qk_head_dim": None, "num_local_experts": None, "rope_local_base_freq": None,
        "num_attention_heads": full_h, "num_key_value_heads": full_h,
        "swa_num_attention_heads": swa_h, "swa_num_key_value_heads": swa_h,
        "layer_types": ["sliding_attention" if s else "full_attention" for s in swa],
        "qk_nope_head_dim": nope, "head_dim": nope + rope, "swa_qk_nope_head_dim": swa_nope,
        "swa_qk_rope_head_dim": rope, "swa_head_dim": swa_nope + rope,
        "swa_q_lora_rank": cfg["q_lora_rank"], "swa_rope_theta": cfg["rope_local_base_freq"],
        **({"moe_shared_expert_intermediate_size": shexp[0] // n_shared}
           if shexp and n_shared else {}),
        "moe_layer_freq": 1, "hidden_act": "silu", "apply_mla_qkv_lora_rescale": True,
        # the token ids the GGUF keeps replace these; the class defaults are ids in its
        # own 151k vocabulary
        "pad_token_id": None, "bos_token_id": None, "eos_token_id": None,
        **_FIXED,
    }  # fmt: skip


#: the config check's field (the message names the fields it covers)
_CHECKED = (
    "use_dsa/normalization/k_rope_only_layernorm/topk_method/n_group/topk_group/"
    "attention_gate_type/swa_head_dim/swa_qk_rope_head_dim/swa_q_lora_rank/layer_types"
)

DOTS3NOTE = Arch(
    hf_archs=(
        "Dots3NoteForCausalLM",
        "Dots3NoteForConditionalGeneration",
        "Dots3NoteTextForCausalLM",
    ),
    gguf_arch="dots3note",
    meta=_ROWS,
    names=[
        *DEEPSEEK2.names,
        NameRule(_ATT + "g_proj.weight", BLK + "attn_gate.weight"),
        NameRule(_ATT + "k_rope_only_layernorm.weight", BLK + "attn_k_norm.weight"),
        *DSA_INDEXER_NAMES,
        # gguf-py's dots3note has no nextn.shared_head_head (the reference refuses it)
        *(r for r in NEXTN_NAMES if "shared_head_head" not in r.gguf),
    ],
    stacks=DEEPSEEK2.stacks,
    splits=[
        Split(
            _ATT + "kv_b_proj.weight",
            (BLK + "attn_k_b.weight", BLK + "attn_v_b.weight"),
            fn=_kv_b,
            shapes=_kv_b_shapes,
            join=_kv_b_join,
        ),
    ],
    transforms=[
        Transform(
            "mla_lora_rescale",
            r"self_attn\.(q_a|kv_a)_layernorm\.weight$",
            _rescale,
            _unscale,
            exact=False,
        ),
    ],
    skip=(*DEEPSEEK2.skip, r"^(vision_encoder|audio_encoder)\."),
    required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "q_lora_rank",
        "kv_lora_rank",
        "swa_num_attention_heads",
        "swa_q_lora_rank",
        "swa_kv_lora_rank",
        "swa_qk_nope_head_dim",
        "swa_qk_rope_head_dim",
        "swa_v_head_dim",
        "sliding_window_size",
        "index_n_heads",
        "index_head_dim",
        "index_topk",
    ),
    present=("layer_types",),
    rename=(_mtp_embed_in, _mtp_embed_out),
    from_tensors=_nextn_from_tensors,
    # the block is counted by its embedding (read off the names kept), not the config
    mtp=Mtp(lambda name, cfg: name.startswith("model.mtp.") or past_trunk(name, cfg)),
    defaults={_CHECKED: _checks},
    fixed={"scoring_func": "sigmoid", _CHECKED: True},
    tokenizer={"vocab": "dots3"},
    # no text-only class in transformers 5.24: back only with the projector, as the
    # ForConditionalGeneration folder (the Hub's layout: _mmproj_to_hf.DOTS3NOTE_BACK)
    hf_config=_hf_config,
    hf_required=(
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "qk_rope_head_dim",
        "qk_head_dim",
        "v_head_dim",
        "q_lora_rank",
        "kv_lora_rank",
        "swa_kv_lora_rank",
        "swa_qk_head_dim",
        "swa_v_head_dim",
        "sliding_window_size",
        "layer_types",
        "index_n_heads",
        "index_head_dim",
        "index_topk",
    ),
)
