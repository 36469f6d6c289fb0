"""BERT: the bidirectional text encoders of embedding models (all-MiniLM, bge, ...).

llama.cpp's ``BertModel`` class (conversion/bert.py): TextModel's rows, then
``attention.causal = false`` and the sentence-transformers pooling type
(:mod:`weightsmith.convert._pooling`).  The ``bert.`` prefix of the task models and
old checkpoints' LayerNorm ``gamma`` / ``beta`` are renamed away; the pooler and the
masked-LM / next-sentence heads are not converted (llama.cpp computes embeddings).
The vocabulary is WordPiece in llama.cpp's phantom-space form (tokenizer route
``bert``, :mod:`weightsmith.convert.tokenizer._wordpiece`).
"""

from __future__ import annotations

from ._common import COMMON
from ._model import VT, Arch, NameRule, m

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

#: after TextModel's rows: BertModel.set_gguf_parameters
ENCODER_ROWS = [
    m("attention.causal", "is_causal", t=VT.BOOL, value=lambda c: False),
    m("pooling_type", "_pooling_type", value=lambda c: c.get("_pooling_type")),
]

BERT = Arch(
    hf_archs=("BertModel", "BertForMaskedLM"),
    gguf_arch="bert",
    meta=[*COMMON, *ENCODER_ROWS],
    names=BERT_NAMES,
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
