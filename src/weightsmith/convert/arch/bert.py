"""BERT: the bidirectional text encoders of embedding models (all-MiniLM, bge, ...).

llama.cpp's ``BertModel`` class (conversion/bert.py): TextModel's rows, then
``attention.causal = false`` and the sentence-transformers pooling type
(:mod:`weightsmith.convert._pooling`).  The ``bert.`` prefix of the task models and
old checkpoints' LayerNorm ``gamma`` / ``beta`` are renamed away; the pooler and the
masked-LM / next-sentence heads are not converted (llama.cpp computes embeddings).
The vocabulary is WordPiece in llama.cpp's phantom-space form (tokenizer route
``bert``, :mod:`weightsmith.convert.tokenizer._wordpiece`).

XLM-RoBERTa is written as ``bert`` too (``XLMRobertaModel``): the ``roberta.`` prefix
goes, the position table loses its first ``pad_token_id + 1`` rows (RoBERTa's positions
start after the padding id; llama.cpp counts from 0) and the context length as much;
its vocabulary is the Unigram ``sentencepiece.bpe.model`` in fairseq's id order
(route ``xlmroberta``).  Both share ``general.architecture = bert``: GGUF -> HF
rebuilds an XLM-RoBERTa when the vocabulary is Unigram (``tokenizer.ggml.model = t5``),
else a BERT.  RoBERTa (``RobertaModel``) cuts its positions the same way, with a
byte-level BPE vocabulary (``tokenizer.ggml.model = gpt2``, which GGUF -> HF maps back
to RoBERTa).  DistilBERT is BERT's graph under other tensor names, without token types.
CamemBERT (``CamembertModel``) is BERT itself here, as in the reference: no position cut
(llama.cpp then counts its positions from 0, not from ``pad_token_id + 1``) and the
WordPiece route, which refuses its SentencePiece tokenizer for want of a fingerprint.

nomic-bert (``NomicBertModel``, remote code: dense SwiGLU with a fused ``Wqkv`` and
RoPE) and ModernBERT (``modern-bert``: fused ``Wqkv``, GeGLU, alternating local and
global attention) are entries of their own.  nomic-bert's MoE variant
(nomic-embed-text-v2-moe, ``nomic-bert-moe``): every ``moe_every_n_layers``-th layer has
experts -- a router, ``experts.mlp.w1`` ``[n_expert * n_inner, n_embd]`` cut into
``[n_expert, n_inner, n_embd]`` and ``w2`` (same layout) cut and transposed to
``[n_expert, n_embd, n_inner]``; the experts' shared output bias is dropped, as the
reference does (llama.cpp has no slot for it) --, the other layers a GELU ``fc1`` /
``fc2`` with biases; Q/K/V and output biases; an XLM-RoBERTa Unigram vocabulary.
"""

from __future__ import annotations

import numpy as np

from ... import errors as E
from ._common import BASE_NAMES, COMMON, FFN_NORM
from ._model import VT, Arch, NameRule, Transform, first, m

_L = "encoder.layer.{bid}."
_B = "blk.{bid}."


def _wb(hf: str, gguf: str) -> list[NameRule]:
    return [NameRule(hf + s, gguf + s) for s in (".weight", ".bias")]


BERT_NAMES = [
    NameRule("embeddings.word_embeddings.weight", "token_embd.weight"),
    NameRule("embeddings.position_embeddings.weight", "position_embd.weight"),
    NameRule("embeddings.token_type_embeddings.weight", "token_types.weight"),
    *_wb("embeddings.LayerNorm", "token_embd_norm"),
    *_wb(_L + "attention.self.query", _B + "attn_q"),
    *_wb(_L + "attention.self.key", _B + "attn_k"),
    *_wb(_L + "attention.self.value", _B + "attn_v"),
    *_wb(_L + "attention.output.dense", _B + "attn_output"),
    *_wb(_L + "attention.output.LayerNorm", _B + "attn_output_norm"),
    *_wb(_L + "intermediate.dense", _B + "ffn_up"),
    *_wb(_L + "output.dense", _B + "ffn_down"),
    *_wb(_L + "output.LayerNorm", _B + "layer_output_norm"),
]


def _output_labels(cfg: dict) -> list[str] | None:
    """A classifier's labels in id order, as BertModel writes them: none for the two
    ``LABEL_0`` / ``LABEL_1`` placeholders AutoConfig invents."""
    labels = cfg.get("id2label")
    if not isinstance(labels, dict) or not labels:
        return None
    labels = {int(k): v for k, v in labels.items()}
    if len(labels) == 2 and labels.get(0) == "LABEL_0":
        return None
    return [v for _, v in sorted(labels.items())]


#: a reranker's (``*ForSequenceClassification``) labels, after the pooling type
CLASSIFIER_LABELS = m(
    "classifier.output_labels", "_output_labels", t=VT.STRING, value=_output_labels
)

#: RoBERTa's classification head (``classifier.dense`` then ``classifier.out_proj``),
#: llama.cpp's ``cls`` / ``cls.output`` (its RANK pooling applies them, with a tanh)
ROBERTA_HEAD = [*_wb("classifier.dense", "cls"), *_wb("classifier.out_proj", "cls.output")]

#: after TextModel's rows: BertModel.set_gguf_parameters
ENCODER_ROWS = [
    m("attention.causal", "is_causal", t=VT.BOOL, value=lambda c: False),
    m("pooling_type", "_pooling_type", value=lambda c: c.get("_pooling_type")),
]


def _bert_head(name: str, cfg: dict) -> str:
    """BertForSequenceClassification's one ``classifier`` layer: the output projection
    (``cls.output``) when the config names labels, else llama.cpp's ``cls``, as the
    reference decides (it drops the pooler either way)."""
    if name.startswith("classifier.") and _output_labels(cfg):
        return "classifier.out_proj." + name.removeprefix("classifier.")
    return name


BERT = Arch(
    hf_archs=(
        "BertModel",
        "BertForMaskedLM",
        "BertForSequenceClassification",
        # the reference converts CamemBERT as BERT: tensors, WordPiece route, no position cut
        "CamembertModel",
    ),
    gguf_arch="bert",
    meta=[*COMMON, *ENCODER_ROWS, CLASSIFIER_LABELS],
    names=[
        *BERT_NAMES,
        *_wb("classifier", "cls"),
        *_wb("classifier.out_proj", "cls.output"),
    ],
    rename=(_bert_head, lambda name, cfg: name),
    skip=(
        r"^embeddings\.position_ids$",
        r"^pooler\.dense\.",
        r"^cls\.(predictions|seq_relationship)",
        r"rotary_emb\.inv_freq$",
        r"\.attention\.masked_bias$",
        r"\.attention\.bias$",
    ),
    renames=((r"^bert\.", ""), (r"\.gamma$", ".weight"), (r"\.beta$", ".bias")),
    # BertConfig's defaults (AutoConfig fills them in before llama.cpp reads the config)
    defaults={
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
    },
    pooling=True,
    tokenizer={"vocab": "bert"},
    model_types={"BertModel": "bert", "BertForMaskedLM": "bert"},
    hf_config=lambda cfg, names: {"hidden_act": "gelu", "position_embedding_type": "absolute"},
)


def _position_offset(cfg: dict) -> int:
    """RoBERTa's positions start after the padding id: llama.cpp drops those first rows."""
    pad = cfg.get("pad_token_id")
    return 0 if pad is None else 1 + pad


def _drop_rows(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return (shape[0] - _position_offset(cfg), *shape[1:])


ROBERTA_POSITIONS = Transform(
    "roberta_position_offset",
    r"^embeddings\.position_embeddings\.weight$",
    lambda x, cfg, ctx: x[_position_offset(cfg) :],
    # the dropped rows are never looked up (positions start after them): zeros restore them
    lambda x, cfg, ctx: np.concatenate(
        [np.zeros((_position_offset(cfg), *x.shape[1:]), x.dtype), x]
    ),
    shape=_drop_rows,
    exact=False,
    inverse_shape=lambda shape, cfg, ctx: (shape[0] + _position_offset(cfg), *shape[1:]),
)

_ROBERTA_CTX = m(
    "context_length",
    "max_position_embeddings",
    value=lambda c: c["max_position_embeddings"] - _position_offset(c),
)


def _xlmr_hf_config(cfg: dict, names: set[str]) -> dict:
    """BERT's fields, and the position table's size with the ``pad_token_id + 1`` rows the
    GGUF lost (XLMRobertaConfig's padding id 1; the rows come back as zeros)."""
    out = BERT.hf_config(cfg, names)
    if cfg.get("max_position_embeddings") is not None:
        out["max_position_embeddings"] = cfg["max_position_embeddings"] + 2
    return out


XLMROBERTA = Arch(
    hf_archs=("XLMRobertaModel", "XLMRobertaForSequenceClassification"),
    gguf_arch="bert",
    meta=[COMMON[0], _ROBERTA_CTX, *COMMON[2:], *ENCODER_ROWS, CLASSIFIER_LABELS],
    names=[*BERT_NAMES, *ROBERTA_HEAD],
    transforms=[ROBERTA_POSITIONS],
    skip=BERT.skip,
    renames=(
        (r"^roberta\.", ""),
        *BERT.renames,
        (r"\.parametrizations\.", "."),  # jina-embeddings-v3's LoRA-parametrized weights
        (r"\.original$", ""),
    ),
    # XLMRobertaConfig's defaults
    defaults={**BERT.defaults, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
    pooling=True,
    tokenizer={"vocab": "xlmroberta", "ggml": "t5"},
    model_types={"XLMRobertaModel": "xlm-roberta"},
    hf_config=_xlmr_hf_config,
)


#: RoBERTa (``RobertaModel``): XLM-RoBERTa's tensors and position cut, but the reference's
#: own class: a byte-level BPE ``tokenizer.json`` (route ``roberta``: GPT-2's vocabulary
#: and the token-type count), no LoRA renames
ROBERTA = Arch(
    hf_archs=("RobertaModel", "RobertaForSequenceClassification"),
    gguf_arch="bert",
    meta=XLMROBERTA.meta,
    names=XLMROBERTA.names,
    transforms=[ROBERTA_POSITIONS],
    skip=BERT.skip,
    renames=((r"^roberta\.", ""), *BERT.renames),
    # RobertaConfig's defaults
    defaults={**XLMROBERTA.defaults, "vocab_size": 50265},
    pooling=True,
    tokenizer={"vocab": "roberta", "ggml": "gpt2"},
    model_types={"RobertaModel": "roberta"},
    hf_config=_xlmr_hf_config,
)


_DL = "transformer.layer.{bid}."


def _distilbert_hf_config(cfg: dict, names: set[str]) -> dict:
    """A reranker's labels back as ``id2label`` / ``label2id`` (the GGUF keeps their names
    only; ids are their order)."""
    labels = cfg.get("_output_labels")
    if "cls.output.weight" not in names or not labels:
        return {}
    return {
        "id2label": {str(i): v for i, v in enumerate(labels)},
        "label2id": {v: i for i, v in enumerate(labels)},
    }


#: DistilBERT (``DistilBertModel`` / ``DistilBertForMaskedLM`` /
#: ``DistilBertForSequenceClassification``): BERT's graph under other names, no token
#: types; the reference writes ``layer_norm_epsilon`` 1e-12 first (the config has no such
#: field) and drops the ``distilbert.`` prefix and the MLM head (``vocab_*``).  A
#: reranker's ``pre_classifier`` is llama.cpp's ``cls`` and its ``classifier`` ``cls.output``
#: (with AutoConfig's placeholder labels it would be a second ``cls``: the reference fails
#: on the duplicate, ours names the unmapped tensor), as for BERT; llama.cpp applies a tanh
#: between them where DistilBERT has a ReLU (the reference writes no activation)
DISTILBERT = Arch(
    hf_archs=("DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification"),
    gguf_arch="bert",
    meta=[
        m("attention.layer_norm_epsilon", "_eps", t=VT.FLOAT32, value=lambda c: 1e-12),
        # TextModel's rows, under DistilBertConfig's names (GGUF -> HF writes these)
        m("block_count", "n_layers"),
        COMMON[1],
        m("embedding_length", "dim"),
        m("feed_forward_length", "hidden_dim"),
        m("attention.head_count", "n_heads"),
        *COMMON[5:],
        *ENCODER_ROWS,
        CLASSIFIER_LABELS,
    ],
    names=[
        *BERT_NAMES[:2],
        *_wb("embeddings.LayerNorm", "token_embd_norm"),
        *_wb(_DL + "attention.q_lin", _B + "attn_q"),
        *_wb(_DL + "attention.k_lin", _B + "attn_k"),
        *_wb(_DL + "attention.v_lin", _B + "attn_v"),
        *_wb(_DL + "attention.out_lin", _B + "attn_output"),
        *_wb(_DL + "sa_layer_norm", _B + "attn_output_norm"),
        *_wb(_DL + "ffn.lin1", _B + "ffn_up"),
        *_wb(_DL + "ffn.lin2", _B + "ffn_down"),
        *_wb(_DL + "output_layer_norm", _B + "layer_output_norm"),
        *_wb("pre_classifier", "cls"),
        *_wb("classifier.out_proj", "cls.output"),
    ],
    # GGUF -> HF: DistilBertForSequenceClassification's one ``classifier`` layer again
    rename=(_bert_head, lambda name, cfg: name.replace("classifier.out_proj.", "classifier.")),
    skip=(*BERT.skip, r"^vocab_"),
    renames=((r"^distilbert\.", ""), *BERT.renames),
    required=("dim", "n_layers", "n_heads", "hidden_dim", "vocab_size"),
    # DistilBertConfig's defaults
    defaults={
        "vocab_size": 30522,
        "dim": 768,
        "n_layers": 6,
        "n_heads": 12,
        "hidden_dim": 3072,
        "max_position_embeddings": 512,
        "pad_token_id": 0,
    },
    pooling=True,
    tokenizer={"vocab": "bert"},
    model_types={
        "DistilBertModel": "distilbert",
        "DistilBertForMaskedLM": "distilbert",
        "DistilBertForSequenceClassification": "distilbert",
    },
    hf_config=_distilbert_hf_config,
)


_CLASSIFIER_POOLING = {"mean": 1, "cls": 2}


def _classifier_pooling(cfg: dict) -> int | None:
    """The pooling before a classification head; the reference refuses any but cls / mean
    (EuroBERT's default ``late`` included)."""
    mode = cfg.get("classifier_pooling")
    if mode is None:
        return None
    if mode not in _CLASSIFIER_POOLING:
        raise E.InvalidModelConfig(
            "classifier pooling llama.cpp does not have",
            field="classifier_pooling",
            expected="cls or mean",
            found=repr(mode),
        )
    return _CLASSIFIER_POOLING[mode]


CLASSIFIER_POOLING = m(
    "classifier.pooling_type",
    "classifier_pooling",
    value=_classifier_pooling,
    inverse={v: k for k, v in _CLASSIFIER_POOLING.items()}.get,
)
_MB = "layers.{bid}."


def _modernbert_hf_config(cfg: dict, names: set[str]) -> dict:
    rope = {"full_attention": {"rope_type": "default", "rope_theta": cfg.get("rope_theta")}}
    if cfg.get("rope_local_base_freq") is not None:
        rope["sliding_attention"] = {
            "rope_type": "default",
            "rope_theta": cfg["rope_local_base_freq"],
        }
    bias = "blk.0.attn_qkv.bias" in names
    return {
        "rope_parameters": rope,
        "rope_scaling": None,  # the GGUF's "none" is llama.cpp's word for default RoPE
        "norm_eps": cfg.get("rms_norm_eps"),
        "attention_bias": bias,
        "mlp_bias": "blk.0.ffn_up.bias" in names,
        "norm_bias": "output_norm.bias" in names,
        # the prediction head (cls = head.dense); a GGUF never has a decoder bias (the
        # converter refuses one) and the decoder is the tied token embedding
        "classifier_bias": "cls.bias" in names,
        "decoder_bias": False,
    }


def _modernbert_to_hf(name: str, cfg: dict) -> str:
    """GGUF -> HF: ModernBertForMaskedLM keeps its body under ``model.`` (its head
    ``head.*`` beside it), as the Hub's checkpoints; the base model has no prefix."""
    if cfg.get("architectures") == ["ModernBertForMaskedLM"] and not name.startswith("head."):
        return "model." + name
    return name


MODERNBERT = Arch(
    # ModernBertForMaskedLM: its prediction head (head.dense / head.norm) is written as
    # the reranker's cls / cls.norm and the tied decoder is not in the checkpoint; a
    # decoder.bias (ModernBertConfig's default decoder_bias) has no GGUF name, so it is
    # refused (UnmappedTensor) before any output, as the reference refuses it
    hf_archs=("ModernBertModel", "ModernBertForSequenceClassification", "ModernBertForMaskedLM"),
    gguf_arch="modern-bert",
    meta=[
        *COMMON,
        *ENCODER_ROWS,
        CLASSIFIER_POOLING,
        CLASSIFIER_LABELS,
        m("attention.sliding_window", "local_attention"),
        m("attention.sliding_window_pattern", "global_attn_every_n_layers"),
        m("rope.scaling.type", "_rope_scaling", t=VT.STRING, value=lambda c: "none"),
        m("vocab_size", "vocab_size"),
        m("hidden_activation", "hidden_activation", t=VT.STRING),
    ],
    names=[
        NameRule("embeddings.tok_embeddings.weight", "token_embd.weight"),
        *_wb("embeddings.norm", "token_embd_norm"),
        *_wb("final_norm", "output_norm"),
        *_wb(_MB + "attn_norm", _B + "attn_norm"),
        *_wb(_MB + "attn.Wqkv", _B + "attn_qkv"),
        *_wb(_MB + "attn.Wo", _B + "attn_output"),
        *_wb(_MB + "mlp_norm", _B + "ffn_norm"),
        *_wb(_MB + "mlp.Wi", _B + "ffn_up"),
        *_wb(_MB + "mlp.Wo", _B + "ffn_down"),
        # ModernBertForSequenceClassification's head: dense, norm, then the classifier
        *_wb("head.dense", "cls"),
        *_wb("head.norm", "cls.norm"),
        *_wb("classifier.out_proj", "cls.output"),
    ],
    renames=((r"^model\.", ""),),
    rename=(_bert_head, _modernbert_to_hf),
    # ModernBertConfig's defaults (AutoConfig fills them in)
    defaults={
        "vocab_size": 50368,
        "hidden_size": 768,
        "intermediate_size": 1152,
        "num_hidden_layers": 22,
        "num_attention_heads": 12,
        "max_position_embeddings": 8192,
        "norm_eps": 1e-5,
        "local_attention": 128,
        "global_attn_every_n_layers": 3,
        "classifier_pooling": "cls",
        "hidden_activation": "gelu",
        "rope_parameters": {
            "full_attention": {"rope_theta": 160000.0, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
    },
    pooling=True,
    tokenizer={"vocab": "modernbert"},
    model_types={"ModernBertModel": "modernbert", "ModernBertForMaskedLM": "modernbert"},
    hf_config=_modernbert_hf_config,
)


def _nomic_context(cfg: dict) -> int:
    """nomic-embed's trained context, as the reference sets it (it refuses other sizes)."""
    npos, trained = cfg.get("n_positions"), cfg.get("max_trained_positions", 2048)
    if (npos, trained) == (8192, 2048):
        return 2048  # nomic-embed-text v1 / v1.5
    if (npos, trained) == (2048, 2048):
        return 512  # nomic-embed-text-v2-moe
    raise E.InvalidModelConfig(
        "nomic-bert context not recognised (llama.cpp's converter knows two)",
        field="n_positions, max_trained_positions",
        expected="8192 and 2048, or 2048 and 2048",
        found=f"{npos} and {trained}",
    )


_NL = "encoder.layers.{bid}."

NOMIC_BERT = Arch(
    hf_archs=("NomicBertModel",),
    gguf_arch="nomic-bert",
    meta=[
        COMMON[0],
        m("context_length", "n_positions", value=_nomic_context),
        *COMMON[2:],
        *ENCODER_ROWS,
    ],
    names=[
        NameRule("embeddings.word_embeddings.weight", "token_embd.weight"),
        NameRule("embeddings.token_type_embeddings.weight", "token_types.weight"),
        *_wb("emb_ln", "token_embd_norm"),
        *_wb(_NL + "attn.Wqkv", _B + "attn_qkv"),
        *_wb(_NL + "attn.out_proj", _B + "attn_output"),
        *_wb(_NL + "norm1", _B + "attn_output_norm"),
        *_wb(_NL + "mlp.fc11", _B + "ffn_up"),
        *_wb(_NL + "mlp.fc12", _B + "ffn_gate"),
        *_wb(_NL + "mlp.fc2", _B + "ffn_down"),
        *_wb(_NL + "norm2", _B + "layer_output_norm"),
    ],
    skip=BERT.skip,
    renames=BERT.renames,
    # remote code: AutoConfig cannot load it, so the reference reads config.json as is
    required=("n_embd", "n_head", "n_layer", "n_inner", "vocab_size"),
    pooling=True,
    tokenizer={"vocab": "nomic"},
    model_types={"NomicBertModel": "nomic_bert"},
)


def _n_expert(cfg: dict) -> int:
    return first(cfg, ("num_local_experts", "num_experts"))


def _experts_in(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return x.reshape(_n_expert(cfg), cfg["n_inner"], cfg["n_embd"])


def _experts_shape(shape, cfg, ctx, transpose: bool) -> tuple[int, ...]:
    e, f, h = _n_expert(cfg), cfg["n_inner"], cfg["n_embd"]
    return (e, h, f) if transpose else (e, f, h)


_EXPERTS_UP = Transform(
    "nomic_experts_split",
    r"mlp\.experts\.mlp\.w1$",
    _experts_in,
    lambda x, cfg, ctx: x.reshape(-1, x.shape[-1]),
    shape=lambda shape, cfg, ctx: _experts_shape(shape, cfg, ctx, False),
    inverse_shape=lambda shape, cfg, ctx: (shape[0] * shape[1], shape[2]),
)
_EXPERTS_DOWN = Transform(
    "nomic_experts_split_transposed",
    r"mlp\.experts\.mlp\.w2$",
    lambda x, cfg, ctx: np.ascontiguousarray(_experts_in(x, cfg, ctx).transpose(0, 2, 1)),
    lambda x, cfg, ctx: np.ascontiguousarray(x.transpose(0, 2, 1)).reshape(-1, x.shape[1]),
    shape=lambda shape, cfg, ctx: _experts_shape(shape, cfg, ctx, True),
    inverse_shape=lambda shape, cfg, ctx: (shape[0] * shape[2], shape[1]),
)

NOMIC_BERT_MOE = Arch(
    hf_archs=("NomicBertModel",),
    gguf_arch="nomic-bert-moe",
    meta=[
        *NOMIC_BERT.meta,
        m("moe_every_n_layers", "moe_every_n_layers"),
        m("expert_used_count", "moe_top_k"),
    ],
    names=[
        *[r for r in NOMIC_BERT.names if ".mlp." not in r.hf],
        *_wb(_NL + "attn.Wqkv", _B + "attn_qkv")[1:],
        *_wb(_NL + "attn.out_proj", _B + "attn_output")[1:],
        *_wb(_NL + "mlp.fc1", _B + "ffn_up"),
        *_wb(_NL + "mlp.fc2", _B + "ffn_down"),
        NameRule(_NL + "mlp.router.layer.weight", _B + "ffn_gate_inp.weight"),
        NameRule(_NL + "mlp.experts.mlp.w1", _B + "ffn_up_exps.weight"),
        NameRule(_NL + "mlp.experts.mlp.w2", _B + "ffn_down_exps.weight"),
    ],
    transforms=[_EXPERTS_UP, _EXPERTS_DOWN],
    skip=(*BERT.skip, r"mlp\.experts\.bias$"),
    renames=BERT.renames,
    required=(*NOMIC_BERT.required, "moe_every_n_layers", "moe_top_k"),
    pooling=True,
    tokenizer={"vocab": "nomic"},
    model_types={"NomicBertModel": "nomic_bert"},
)


#: EuroBERT (``EuroBertModel``): Llama's tensors (no Q/K permutation: llama.cpp's
#: ``eurobert`` graph rotates in NeoX order) without the ``model.`` prefix some
#: checkpoints lack, bidirectional, default RoPE written as ``none``, a GPT-2 BPE
#: vocabulary without BOS; the sentence-transformers pooling
EUROBERT = Arch(
    hf_archs=("EuroBertModel",),
    gguf_arch="eurobert",
    meta=[
        *COMMON,
        m("attention.causal", "is_causal", t=VT.BOOL, value=lambda c: False),
        m("rope.scaling.type", "_rope_scaling", t=VT.STRING, value=lambda c: "none"),
        ENCODER_ROWS[1],
        CLASSIFIER_POOLING,
    ],
    names=[*BASE_NAMES, *FFN_NORM],
    renames=((r"^(?!model\.)", "model."),),
    # EuroBertConfig's defaults
    defaults={
        "vocab_size": 128256,
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 12,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "head_dim": 64,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "classifier_pooling": "late",
    },
    pooling=True,
    tokenizer={"vocab": "eurobert"},
    model_types={"EuroBertModel": "eurobert"},
    # the GGUF's "none" is llama.cpp's word for default RoPE
    hf_config=lambda cfg, names: {
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.get("rope_theta")},
    },
)
