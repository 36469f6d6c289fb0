"""tokenizer.json written without the ``tokenizers`` library.

GGUF -> HF builds its tokenizer with the few parts of the ``tokenizers`` API
listed below; this module offers the same calls, and each object only records
its fields, so ``Tokenizer.to_str()`` gives the JSON that the library's own
``to_str()`` gives for the same calls (key order included).  The conversion
then needs no extra (``tokenizers`` is ~45 MB installed with its
huggingface_hub and hf-xet dependencies).  The library remains the oracle: the
tests build the same tokenizers with it and compare.

Serialized forms (tokenizers 0.19-0.23; tagged by ``"type"``)::

    model      {"type": "Unigram", "unk_id", "vocab": [[piece, score], ... in id order],
                "byte_fallback"}
               {"type": "BPE", "dropout": null, "unk_token", "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk", "byte_fallback", "ignore_merges",
                "vocab": {token: id, ... in id order}, "merges": [[a, b], ...]}
               {"type": "WordPiece", "unk_token", "continuing_subword_prefix",
                "max_input_chars_per_word", "vocab": {token: id, ... in id order}}
    top level  {"version": "1.0", "truncation": null, "padding": null,
                "added_tokens": [{id, content, single_word, lstrip, rstrip, normalized,
                special}, ... in id order], "normalizer", "pre_tokenizer",
                "post_processor", "decoder", "model"}
    parts      Precompiled {"precompiled_charsmap": base64 of the bytes};
               Metaspace {"replacement", "prepend_scheme", "split"} (pre-tokenizer, decoder)
    patterns   {"String": s} or {"Regex": r}
    template   [{"SpecialToken": {"id": tok, "type_id": n}} | {"Sequence": {"id": "A"|"B",
                "type_id": n}}], special_tokens {tok: {"id": tok, "ids": [id], "tokens": [tok]}}

Added tokens get ids as the library gives them: the token's id in the model
vocabulary if it is there, else one past the largest id handed out so far (the
model vocabulary's size, counted in distinct strings, at first).
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

__all__ = [
    "AddedToken",
    "Regex",
    "Tokenizer",
    "decoders",
    "models",
    "normalizers",
    "pre_tokenizers",
    "processors",
]


class _Part:
    """A pipeline part: its serialized dict."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.d = d


class Regex:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern


def _pattern(p: str | Regex) -> dict[str, str]:
    return {"Regex": p.pattern} if isinstance(p, Regex) else {"String": p}


def _dicts(parts: list[_Part]) -> list[dict[str, Any]]:
    return [p.d for p in parts]


# --------------------------------------------------------------------------- normalizers


def _nfc() -> _Part:
    return _Part({"type": "NFC"})


def _prepend(prepend: str) -> _Part:
    return _Part({"type": "Prepend", "prepend": prepend})


def _replace(pattern: str | Regex, content: str) -> _Part:
    return _Part({"type": "Replace", "pattern": _pattern(pattern), "content": content})


def _bert_normalizer(
    clean_text: bool = True,
    handle_chinese_chars: bool = True,
    strip_accents: bool | None = None,
    lowercase: bool = True,
) -> _Part:
    return _Part(
        {
            "type": "BertNormalizer",
            "clean_text": clean_text,
            "handle_chinese_chars": handle_chinese_chars,
            "strip_accents": strip_accents,
            "lowercase": lowercase,
        }
    )


def _precompiled(charsmap: bytes) -> _Part:
    return _Part(
        {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}
    )


def _metaspace(replacement: str = "\u2581", prepend_scheme: str = "always", split: bool = True):
    return _Part(
        {"type": "Metaspace", "replacement": replacement, "prepend_scheme": prepend_scheme,
         "split": split}
    )  # fmt: skip


normalizers = SimpleNamespace(
    BertNormalizer=_bert_normalizer,
    NFC=_nfc,
    Precompiled=_precompiled,
    Prepend=_prepend,
    Replace=_replace,
    Sequence=lambda parts: _Part({"type": "Sequence", "normalizers": _dicts(parts)}),
)

# --------------------------------------------------------------------------- pre-tokenizers


def _byte_level(
    add_prefix_space: bool = True, trim_offsets: bool = True, use_regex: bool = True
) -> _Part:
    return _Part(
        {
            "type": "ByteLevel",
            "add_prefix_space": add_prefix_space,
            "trim_offsets": trim_offsets,
            "use_regex": use_regex,
        }
    )


def _split(pattern: str | Regex, behavior: str, invert: bool = False) -> _Part:
    return _Part(
        {
            "type": "Split",
            "pattern": _pattern(pattern),
            "behavior": behavior.title().replace("_", ""),  # "isolated" -> "Isolated"
            "invert": invert,
        }
    )


pre_tokenizers = SimpleNamespace(
    BertPreTokenizer=lambda: _Part({"type": "BertPreTokenizer"}),
    ByteLevel=_byte_level,
    Metaspace=_metaspace,
    Split=_split,
    WhitespaceSplit=lambda: _Part({"type": "WhitespaceSplit"}),
    Digits=lambda individual_digits=False: _Part(
        {"type": "Digits", "individual_digits": individual_digits}
    ),
    Sequence=lambda parts: _Part({"type": "Sequence", "pretokenizers": _dicts(parts)}),
)

# --------------------------------------------------------------------------- decoders

decoders = SimpleNamespace(
    ByteLevel=lambda: _byte_level(),
    Replace=_replace,
    ByteFallback=lambda: _Part({"type": "ByteFallback"}),
    Fuse=lambda: _Part({"type": "Fuse"}),
    Metaspace=_metaspace,
    Strip=lambda content=" ", left=0, right=0: _Part(
        {"type": "Strip", "content": content, "start": left, "stop": right}
    ),
    Sequence=lambda parts: _Part({"type": "Sequence", "decoders": _dicts(parts)}),
    WordPiece=lambda prefix="##", cleanup=True: _Part(
        {"type": "WordPiece", "prefix": prefix, "cleanup": cleanup}
    ),
)

# --------------------------------------------------------------------------- post-processors


def _template_piece(item: str, special: set[str]) -> dict[str, Any]:
    name, _, type_id = item.partition(":")
    tid = int(type_id) if type_id else 0
    if name in ("$A", "$B") or (name.startswith("$") and name not in special):
        return {"Sequence": {"id": name[1:] or "A", "type_id": tid}}
    return {"SpecialToken": {"id": name, "type_id": tid}}


def _template(single: list[str], pair: list[str], special_tokens: list[tuple[str, int]]) -> _Part:
    names = {t for t, _ in special_tokens}
    return _Part(
        {
            "type": "TemplateProcessing",
            "single": [_template_piece(x, names) for x in single],
            "pair": [_template_piece(x, names) for x in pair],
            "special_tokens": {
                t: {"id": t, "ids": [i], "tokens": [t]} for t, i in sorted(special_tokens)
            },
        }
    )


processors = SimpleNamespace(
    ByteLevel=lambda trim_offsets=True: _byte_level(trim_offsets=trim_offsets),
    TemplateProcessing=_template,
    Sequence=lambda parts: _Part({"type": "Sequence", "processors": _dicts(parts)}),
)

# --------------------------------------------------------------------------- model and tokenizer


def _bpe(
    vocab: dict[str, int],
    merges: list[tuple[str, str]],
    unk_token: str | None = None,
    fuse_unk: bool = False,
    byte_fallback: bool = False,
    ignore_merges: bool = False,
) -> _Part:
    part = _Part(
        {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk_token,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": fuse_unk,
            "byte_fallback": byte_fallback,
            "ignore_merges": ignore_merges,
            "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
            "merges": [[a, b] for a, b in merges],
        }
    )
    return part


def _wordpiece(
    vocab: dict[str, int],
    unk_token: str = "[UNK]",
    max_input_chars_per_word: int = 100,
    continuing_subword_prefix: str = "##",
) -> _Part:
    return _Part(
        {
            "type": "WordPiece",
            "unk_token": unk_token,
            "continuing_subword_prefix": continuing_subword_prefix,
            "max_input_chars_per_word": max_input_chars_per_word,
            "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
        }
    )


def _unigram(
    vocab: list[tuple[str, float]], unk_id: int | None = None, byte_fallback: bool = False
) -> _Part:
    return _Part(
        {"type": "Unigram", "unk_id": unk_id, "vocab": [[t, s] for t, s in vocab],
         "byte_fallback": byte_fallback}
    )  # fmt: skip


models = SimpleNamespace(BPE=_bpe, Unigram=_unigram, WordPiece=_wordpiece)


class AddedToken:
    def __init__(
        self,
        content: str,
        single_word: bool = False,
        lstrip: bool = False,
        rstrip: bool = False,
        normalized: bool = True,
        special: bool = False,
    ) -> None:
        self.content, self.special = content, special
        self.single_word, self.lstrip, self.rstrip, self.normalized = (
            single_word,
            lstrip,
            rstrip,
            normalized,
        )


class Tokenizer:
    """The ``tokenizers.Tokenizer`` calls GGUF -> HF makes: parts, added tokens, to_str."""

    def __init__(self, model: _Part) -> None:
        self.model = model
        self.normalizer: _Part | None = None
        self.pre_tokenizer: _Part | None = None
        self.post_processor: _Part | None = None
        self.decoder: _Part | None = None
        self._added: dict[str, dict[str, Any]] = {}

    def _vocab(self) -> dict[str, int]:
        v = self.model.d["vocab"]
        if isinstance(v, list):  # Unigram: [piece, score] in id order, first id of a piece
            return {t: i for i, (t, _) in reversed(list(enumerate(v)))}
        return v

    def token_to_id(self, token: str) -> int | None:
        if token in self._added:
            return self._added[token]["id"]
        return self._vocab().get(token)

    def add_tokens(self, tokens: list[AddedToken]) -> int:
        vocab = self._vocab()
        added = 0
        for t in tokens:
            if t.content in self._added:
                continue
            tid = vocab.get(t.content)
            if tid is None:
                ids = [a["id"] for a in self._added.values()]
                top = max(ids, default=None)
                tid = len(vocab) if top is None or (top < len(vocab) and vocab) else top + 1
                added += 1
            self._added[t.content] = {
                "id": tid,
                "content": t.content,
                "single_word": t.single_word,
                "lstrip": t.lstrip,
                "rstrip": t.rstrip,
                "normalized": t.normalized,
                "special": t.special,
            }
        return added

    def to_dict(self) -> dict[str, Any]:
        def d(part: _Part | None) -> dict[str, Any] | None:
            return None if part is None else part.d

        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": sorted(self._added.values(), key=lambda a: a["id"]),
            "normalizer": d(self.normalizer),
            "pre_tokenizer": d(self.pre_tokenizer),
            "post_processor": d(self.post_processor),
            "decoder": d(self.decoder),
            "model": self.model.d,
        }

    def to_str(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))
