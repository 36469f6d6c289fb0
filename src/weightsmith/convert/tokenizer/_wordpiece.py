"""WordPiece vocabulary (tokenizer route ``bert``), as llama.cpp's ``BertModel.set_vocab``;
also ModernBERT's BPE route (``modernbert``, :func:`set_modernbert`).

The tokens are the ``tokenizer.json`` vocabulary read as for a BPE model
(``get_vocab_base``: ``[PAD<i>]`` for holes, added tokens CONTROL or USER_DEFINED,
the pre-tokenizer name from the chktxt fingerprint), then put in llama.cpp's
"phantom space" form: a word-initial piece gets a leading ``▁``, a continuation
piece loses its ``##``, control tokens stay as they are.  Keys, in the reference's
order::

    tokenizer.ggml.token_type_count   u32   config ``type_vocab_size`` (1 if absent)
    tokenizer.ggml.model              str   "bert"
    tokenizer.ggml.pre                str   from the chktxt hash
    tokenizer.ggml.tokens             [str]
    tokenizer.ggml.token_type         [i32]
    ... SpecialVocab: special ids ([CLS] as BOS, [SEP] as EOS/SEP), add_* flags,
        normalizer.lowercase / strip_accents (BertNormalizer)
"""

from __future__ import annotations

from pathlib import Path

from ._to_gguf import (
    MORE_ROUTES,
    SPM_SPACE,
    VT,
    T,
    _Entries,
    _gpt2_vocab,
    _json_if,
    _missing,
    _set_gpt2,
    _SpecialVocab,
)
from ._unigram import set_xlmroberta


def phantom(token: str, token_type: int) -> str:
    """llama.cpp's phantom-space form of one WordPiece token."""
    if token_type == T.CONTROL:
        return token
    if token.startswith("##"):
        return token[2:]
    return SPM_SPACE + token


def set_bert(out: _Entries, d: Path, config: dict) -> None:
    if not (d / "tokenizer.json").is_file():
        raise _missing(d, "tokenizer.json (a WordPiece tokenizer)")
    tokens, types, pre, _ = _gpt2_vocab(d, config)
    out.add("ggml.token_type_count", config.get("type_vocab_size", 1), VT.UINT32)
    out.add("ggml.model", "bert", VT.STRING)
    out.add("ggml.pre", pre, VT.STRING)
    out.add("ggml.tokens", [phantom(t, ty) for t, ty in zip(tokens, types)], VT.STRING)
    out.add("ggml.token_type", [int(t) for t in types], VT.INT32)
    _SpecialVocab(d, config, n_vocab=len(tokens)).add_to(out)


def set_modernbert(out: _Entries, d: Path, config: dict) -> None:
    """ModernBERT's byte-level BPE (route ``modernbert``): ``add_bos/eos/sep_token`` set
    true first (the special-token part may then change them in place), then ``gpt2``."""
    for typ in ("bos", "eos", "sep"):
        out.add(f"ggml.add_{typ}_token", True, VT.BOOL)
    _set_gpt2(out, d, config)


def set_roberta(out: _Entries, d: Path, config: dict) -> None:
    """RoBERTa (route ``roberta``): GPT-2's byte-level BPE from ``tokenizer.json``, then the
    token-type count, as the reference's ``RobertaModel.set_vocab``; WordPiece without it."""
    if not (d / "tokenizer.json").is_file():
        set_bert(out, d, config)
        return
    _set_gpt2(out, d, config)
    out.add("ggml.token_type_count", config.get("type_vocab_size", 1), VT.UINT32)


def set_eurobert(out: _Entries, d: Path, config: dict) -> None:
    """EuroBERT (route ``eurobert``): ``add_bos_token`` false first, then ``gpt2``."""
    out.add("ggml.add_bos_token", False, VT.BOOL)
    _set_gpt2(out, d, config)


def set_nomic(out: _Entries, d: Path, config: dict) -> None:
    """nomic-bert: WordPiece as BERT, or XLM-RoBERTa's Unigram vocabulary when
    tokenizer.json says Unigram (nomic-embed-text-v2-moe), as the reference decides."""
    tj = _json_if(d / "tokenizer.json") or {}
    kind = (tj.get("model") or {}).get("type") if isinstance(tj.get("model"), dict) else None
    if kind == "Unigram":
        set_xlmroberta(out, d, config, moe_mask=bool(config.get("moe_every_n_layers")))
        return
    set_bert(out, d, config)


MORE_ROUTES["bert"] = set_bert
MORE_ROUTES["nomic"] = set_nomic
MORE_ROUTES["modernbert"] = set_modernbert
MORE_ROUTES["roberta"] = set_roberta
MORE_ROUTES["eurobert"] = set_eurobert
