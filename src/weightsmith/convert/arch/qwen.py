"""Qwen2, Qwen3 and their MoE variants: conversion/qwen.py.

The reference's Qwen2 / Qwen3 classes read the sentence-transformers pooling
(``TextModel._try_set_pooling_type``) for every class they convert, so a folder with
``modules.json`` gets ``<arch>.pooling_type`` after ``general.file_type``.  Their bare
``Qwen2Model`` / ``Qwen3Model`` (gte-Qwen2, Qwen3-Embedding: no ``lm_head``, names
without ``model.``) are entries of their own, so that GGUF -> HF writes the bare class
back for a file with a pooling type (:data:`GGUF_VARIANTS`).  ``Qwen2Model`` puts
``model.`` before every name, as the reference does (a name already prefixed is then
unmapped, as there); Qwen3's names are read with or without the prefix (gguf-py's
tensor map has both).

Qwen3 rerankers (Qwen3-Reranker: a ``Qwen3ForCausalLM`` scored by the probability of
``yes`` against ``no`` after the last token) are variants of :data:`QWEN3` (the converter
marks a folder the reference calls a reranker with ``_rerank`` = the two token ids,
:func:`weightsmith.convert._pooling.is_qwen3_reranker`): pooling type RANK (4) where the
pooling row goes, the labels ``yes``, ``no``, a named chat template ``rerank`` (the
reference's prompt), and ``cls.output`` ``[2, n_embd]``, the head's ``yes`` and ``no`` rows
in that order, written where the head is read: from ``lm_head`` (which is then not
written: no ``output.weight``) or, with tied embeddings, from the embedding, written
before ``token_embd``.  llama.cpp's RANK pooling takes the last token's hidden state
through ``cls.output`` and a softmax: ``[p(yes), p(no)]``.  GGUF -> HF rebuilds such a
file as ``Qwen3ForSequenceClassification`` (``score`` = ``cls.output``, labels yes / no),
which computes the same two logits (the full vocabulary head is not in the file).

Qwen2-MoE and Qwen3-MoE experts come per expert (the Hub layout: llama.cpp stacks a
layer's ``down``, ``gate``, ``up`` when the last of them is read) or already fused
(``mlp.experts.gate_up_proj`` ``[n_expert, 2 * n_ff, n_embd]``, split in two halves,
and ``mlp.experts.down_proj``).
"""

from __future__ import annotations

from dataclasses import replace

from ._common import BASE_NAMES, BLK, COMMON, FFN_NORM, LAYER, QK_NORM, expert_stacks
from ._model import VT, Arch, MetaKey, NameRule, Split, first, m

#: TextModel._try_set_pooling_type, after general.file_type
_POOLING = m("pooling_type", "_pooling_type", value=lambda c: c.get("_pooling_type"))


def _n_experts(cfg: dict) -> int:
    return first(cfg, ("num_local_experts", "num_experts"))


_EXP = LAYER + "mlp.experts."
_MOE_NAMES = [
    NameRule(LAYER + "mlp.gate.weight", BLK + "ffn_gate_inp.weight"),
    NameRule(LAYER + "mlp.shared_expert_gate.weight", BLK + "ffn_gate_inp_shexp.weight"),
    NameRule(LAYER + "mlp.shared_expert.gate_proj.weight", BLK + "ffn_gate_shexp.weight"),
    NameRule(LAYER + "mlp.shared_expert.up_proj.weight", BLK + "ffn_up_shexp.weight"),
    NameRule(LAYER + "mlp.shared_expert.down_proj.weight", BLK + "ffn_down_shexp.weight"),
    NameRule(_EXP + "down_proj", BLK + "ffn_down_exps.weight"),  # fused checkpoints
]
_MOE_STACKS = expert_stacks(_n_experts)
_MOE_SPLITS = [
    Split(_EXP + "gate_up_proj", (BLK + "ffn_gate_exps.weight", BLK + "ffn_up_exps.weight"), -2)
]
# Qwen2MoeModel.set_gguf_parameters
_MOE_ROWS = [
    *COMMON,
    # the same key again, in place: GGUF -> HF writes the Qwen-MoE config field
    m("expert_count", "num_experts", value=_n_experts),
    m("expert_feed_forward_length", "moe_intermediate_size"),
    m("expert_shared_feed_forward_length", "shared_expert_intermediate_size"),
]
_SILU = {"hidden_act": "silu"}

QWEN2 = Arch(
    # the text halves of Qwen2-Audio and Audio Flamingo 3 (their audio towers are the
    # projector's: whisper_audio.py)
    hf_archs=(
        "Qwen2ForCausalLM",
        "Qwen2AudioForConditionalGeneration",
        "AudioFlamingo3ForConditionalGeneration",
        # dots.ocr (remote code): Qwen2ForCausalLM plus a vision tower (mmproj.py)
        "DotsOCRForCausalLM",
    ),
    gguf_arch="qwen2",
    meta=[*COMMON, _POOLING],
    names=[*BASE_NAMES, *FFN_NORM],
    pooling=True,
    tokenizer={"vocab": "spm_or_gpt2"},
    model_types={"Qwen2ForCausalLM": "qwen2"},
    hf_config=lambda cfg, names: _SILU,
)
QWEN3 = Arch(
    hf_archs=("Qwen3ForCausalLM",),
    gguf_arch="qwen3",
    meta=[*COMMON, _POOLING],
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM],
    # Qwen3-Embedding's checkpoints have no model. prefix
    renames=((r"^(embed_tokens|layers|norm)\.", r"model.\1."),),
    pooling=True,
    rerank=True,
    tokenizer={"vocab": "spm_or_gpt2"},
    model_types={"Qwen3ForCausalLM": "qwen3"},
    hf_config=lambda cfg, names: _SILU,
)
# the bare models (embedding models): Qwen2Model maps every name to Qwen2ForCausalLM's
QWEN2_EMBED = replace(
    QWEN2,
    hf_archs=("Qwen2Model",),
    renames=((r"^", "model."),),
    model_types={"Qwen2Model": "qwen2"},
)
QWEN3_EMBED = replace(QWEN3, hf_archs=("Qwen3Model",), model_types={"Qwen3Model": "qwen3"})


# Qwen3Model.set_gguf_parameters for a reranker: RANK overwrites the pooling row in place
_RANK = 4
_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
    'Query and the Instruct provided. Note that the answer can only be "yes" or '
    '"no".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve '
    "relevant passages that answer the query\n<Query>: {query}\n<Document>: {document}"
    "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
_RERANK_ROWS = [
    *COMMON,
    m("pooling_type", "_pooling_type", value=lambda c: _RANK),
    m("classifier.output_labels", "_output_labels", t=VT.STRING, value=lambda c: ["yes", "no"]),
    MetaKey("tokenizer.chat_template.rerank", ("_rerank_template",), VT.STRING,
            lambda c: _RERANK_TEMPLATE, absolute=True),
    MetaKey("tokenizer.chat_templates", ("_chat_templates",), VT.STRING,
            lambda c: ["rerank"], absolute=True),
]  # fmt: skip


def _label_rows(x, cfg: dict) -> list:
    """The head's ``yes`` and ``no`` rows (``cfg["_rerank"]``), in that order."""
    return [x[list(cfg["_rerank"])]]


def _label_shape(shape: tuple[int, ...], cfg: dict) -> list[tuple[int, ...]]:
    return [(2, shape[1])]


def is_rerank(cfg: dict) -> bool:
    """A folder the reference converts as a Qwen3 reranker (marked by the converter)."""
    return cfg.get("_rerank") is not None


def is_tied_rerank(cfg: dict) -> bool:
    return is_rerank(cfg) and bool(cfg.get("tie_word_embeddings", False))


#: a Qwen3 reranker with its own head: ``lm_head`` gives ``cls.output`` only
QWEN3_RERANK = replace(
    QWEN3,
    hf_archs=("Qwen3ForCausalLM", "Qwen3Model"),
    meta=_RERANK_ROWS,
    splits=[
        Split("lm_head.weight", ("cls.output.weight",), fn=_label_rows, shapes=_label_shape),
    ],
)
#: ... with tied embeddings: the embedding gives ``cls.output``, then ``token_embd``
QWEN3_RERANK_TIED = replace(
    QWEN3_RERANK,
    splits=[
        Split(
            "model.embed_tokens.weight",
            ("cls.output.weight", "token_embd.weight"),
            fn=lambda x, cfg: [*_label_rows(x, cfg), x],
            shapes=lambda shape, cfg: [*_label_shape(shape, cfg), shape],
        ),
    ],
)
#: GGUF -> HF of a reranker's file: the sequence classifier over the same trunk
QWEN3_SEQCLS = replace(
    QWEN3,
    hf_archs=("Qwen3ForSequenceClassification",),
    meta=_RERANK_ROWS,
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM, NameRule("score.weight", "cls.output.weight")],
    model_types={"Qwen3ForSequenceClassification": "qwen3"},
    hf_config=lambda cfg, names: {
        **_SILU,
        "id2label": dict(enumerate(cfg.get("_output_labels") or [])),
        "label2id": {v: i for i, v in enumerate(cfg.get("_output_labels") or [])},
        # the head is the classifier's own (score), not the embedding's
        "tie_word_embeddings": False,
    },
)


def is_rerank_file(metadata) -> bool:
    """A qwen3 file of a reranker: RANK pooling with a classifier head's labels."""
    return (
        metadata.get("qwen3.pooling_type") == _RANK and "qwen3.classifier.output_labels" in metadata
    )


def has_pooling(metadata) -> bool:
    """A qwen2 / qwen3 file of an embedding model: it has a pooling type."""
    arch = metadata.get("general.architecture")
    return f"{arch}.pooling_type" in metadata


QWEN2MOE = Arch(
    hf_archs=("Qwen2MoeForCausalLM",),
    gguf_arch="qwen2moe",
    meta=_MOE_ROWS,
    names=[*BASE_NAMES, *FFN_NORM, *_MOE_NAMES],
    stacks=_MOE_STACKS,
    splits=_MOE_SPLITS,
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"Qwen2MoeForCausalLM": "qwen2_moe"},
    hf_config=lambda cfg, names: {
        **_SILU,
        "qkv_bias": "blk.0.attn_q.bias" in names,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
)
QWEN3MOE = Arch(
    hf_archs=("Qwen3MoeForCausalLM",),
    gguf_arch="qwen3moe",
    meta=_MOE_ROWS,
    names=[*BASE_NAMES, *QK_NORM, *FFN_NORM, *_MOE_NAMES],
    stacks=_MOE_STACKS,
    splits=_MOE_SPLITS,
    required=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"Qwen3MoeForCausalLM": "qwen3_moe"},
    hf_config=lambda cfg, names: {
        **_SILU,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    },
)
