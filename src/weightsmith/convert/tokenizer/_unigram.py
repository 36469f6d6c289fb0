"""Unigram SentencePiece vocabularies: routes ``t5`` (llama.cpp's ``T5Model.set_vocab``)
and ``xlmroberta`` (its ``_xlmroberta_set_vocab``, :func:`set_xlmroberta`).

The model file is ``tokenizer.model``, else ``spiece.model`` (older T5 folders).  A
BPE SentencePiece model (Pile-T5) takes the ``llama`` path instead (only under the
name ``tokenizer.model``, as the reference asserts).  For a Unigram model: ids up to
config ``vocab_size`` start as ``[PAD<i>]`` (score -10000, UNUSED); the pieces fill
their ids with their score and type (UNKNOWN, CONTROL, UNUSED, BYTE or NORMAL);
``added_tokens.json`` entries below ``vocab_size`` become USER_DEFINED (score -1000).
Keys, in the reference's order::

    tokenizer.ggml.model                    str    "t5"
    tokenizer.ggml.pre                      str    "default"
    tokenizer.ggml.tokens / scores / token_type
    tokenizer.ggml.add_space_prefix         bool   normalizer_spec.add_dummy_prefix
    tokenizer.ggml.remove_extra_whitespaces bool   normalizer_spec.remove_extra_whitespaces
    tokenizer.ggml.precompiled_charsmap     [u8]   normalizer_spec.precompiled_charsmap
                                                   (left out when empty)
    ... SpecialVocab

The three normalizer fields and the model type are read from the ``ModelProto``
bytes directly (protobuf wire format: a varint key ``field << 3 | wire type``, then
a varint, 8 or 4 bytes, or a varint length and that many bytes):
``ModelProto.trainer_spec`` is field 2 (``TrainerSpec.model_type`` its field 3,
1 = UNIGRAM, 2 = BPE), ``ModelProto.normalizer_spec`` field 3
(``precompiled_charsmap`` 2, ``add_dummy_prefix`` 3, ``remove_extra_whitespaces``
4, both true when absent).
"""

from __future__ import annotations

import base64
from pathlib import Path

from ... import errors as E
from ..arch.pockettts import extra_tokens
from ._to_gguf import (
    MORE_ROUTES,
    VT,
    T,
    _Entries,
    _json_if,
    _load_spm,
    _missing,
    _set_spm,
    _SpecialVocab,
    _spm_pieces,
    _spm_vocab,
    _too_large,
    _vocab_size,
)

UNIGRAM, BPE = 1, 2


def _varint(buf: bytes, pos: int, path: Path) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise E.TokenizerInconsistent(
                "truncated or overlong protobuf varint", path=path, offset=pos,
                expected="a SentencePiece ModelProto", found=f"{len(buf)} bytes",
            )  # fmt: skip
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def proto_fields(buf: bytes, path: Path) -> dict[int, list[int | bytes]]:
    """Field number -> values (varints as int, length-delimited as bytes) of one message."""
    out: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, path)
        field, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos, path)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 2:
            n, pos = _varint(buf, pos, path)
            value, pos = buf[pos : pos + n], pos + n
        else:
            value = b""
            pos = len(buf) + 1
        if pos > len(buf):
            raise E.TokenizerInconsistent(
                f"protobuf field {field} runs past the end", path=path, offset=pos,
                expected="a SentencePiece ModelProto", found=f"{len(buf)} bytes",
            )  # fmt: skip
        out.setdefault(field, []).append(value)
    return out


def _last(fields: dict, n: int, default):
    v = fields.get(n)
    return v[-1] if v else default


def spm_settings(path: Path) -> tuple[int, bool, bool, bytes]:
    """(model type, add_dummy_prefix, remove_extra_whitespaces, precompiled_charsmap)."""
    data = path.read_bytes()
    top = proto_fields(data, path)
    trainer = proto_fields(_last(top, 2, b""), path)
    norm = proto_fields(_last(top, 3, b""), path)
    return (
        int(_last(trainer, 3, UNIGRAM)),
        bool(_last(norm, 3, 1)),
        bool(_last(norm, 4, 1)),
        bytes(_last(norm, 2, b"")),
    )


def _unigram_settings(path: Path) -> tuple[bool, bool, bytes]:
    model_type, add_prefix, remove_ws, charsmap = spm_settings(path)
    if model_type != UNIGRAM:
        raise E.TokenizerInconsistent(
            "not a Unigram SentencePiece model",
            path=path, field="trainer_spec.model_type", expected="1 (UNIGRAM)", found=model_type,
        )  # fmt: skip
    return add_prefix, remove_ws, charsmap


#: XLMRobertaTokenizer's special tokens where tokenizer_config.json does not name them
_XLMR_SPECIALS = {
    "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
    "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
}  # fmt: skip


def _bad_json(path: Path, field: str, expected: str, found) -> E.TokenizerInconsistent:
    return E.TokenizerInconsistent(
        "tokenizer.json is not an XLM-RoBERTa Unigram tokenizer llama.cpp's converter reads",
        path=path, field=field, expected=expected, found=found,
    )  # fmt: skip


def _xlmr_from_json(d: Path, config: dict):
    """The tokenizer.json-only path of ``_xlmroberta_set_vocab`` (jina-embeddings-v3 and
    others without ``sentencepiece.bpe.model``), which the reference takes through
    transformers' tokenizer object: its ``add_prefix_space`` (default true) and
    ``clean_up_tokenization_spaces`` (default false; written as
    ``remove_extra_whitespaces``), the model's pieces and scores at their HF ids (no
    realignment), UNKNOWN / CONTROL (special tokens) / USER_DEFINED (other added tokens).
    A normalizer other than a bare ``Precompiled`` fails in the reference (it reads
    ``normalizer.precompiled_charsmap``): refused here."""
    path = d / "tokenizer.json"
    tj = _json_if(path) or {}
    tc = _json_if(d / "tokenizer_config.json") or {}
    model, norm = tj.get("model"), tj.get("normalizer")
    if not isinstance(model, dict) or model.get("type") != "Unigram":
        raise _bad_json(
            path, "model.type", "Unigram", model.get("type") if isinstance(model, dict) else model
        )
    if not isinstance(norm, dict) or not isinstance(norm.get("precompiled_charsmap"), str):
        kind = norm.get("type") if isinstance(norm, dict) else norm
        raise _bad_json(path, "normalizer", "a Precompiled normalizer", kind)
    try:
        charsmap = base64.b64decode(norm["precompiled_charsmap"], validate=True)
    except ValueError:
        raise _bad_json(path, "normalizer.precompiled_charsmap", "base64", "not base64") from None
    pieces = model.get("vocab")
    if not isinstance(pieces, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
        and isinstance(p[1], (int, float)) and not isinstance(p[1], bool) for p in pieces
    ):  # fmt: skip
        raise _bad_json(path, "model.vocab", "[[piece, score], ...]", "another shape")
    added = {a["content"]: a["id"] for a in tj.get("added_tokens") or []
             if isinstance(a, dict) and isinstance(a.get("content"), str)
             and isinstance(a.get("id"), int)}  # fmt: skip
    by_id = {i: t for t, i in added.items()}
    n_model = len(pieces)
    vocab_size = max(_vocab_size(config, ("vocab_size",)) or 0, n_model)
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [int(T.UNUSED)] * vocab_size
    specials = {**_XLMR_SPECIALS, **{k: tc[k] for k in _XLMR_SPECIALS if k in tc}}
    names = [v for v in specials.values() if isinstance(v, str)]
    names += [v for k in ("extra_special_tokens", "additional_special_tokens")
              for v in tc.get(k) or [] if isinstance(v, str)]  # fmt: skip
    special_ids = {added.get(n, _piece_id(pieces, n)) for n in names} - {None}
    unk = tc.get("unk_token")
    unk_id = added.get(unk, model.get("unk_id", 3)) if isinstance(unk, str) or unk is None else None
    for i in range(n_model):
        tokens[i], scores[i] = by_id.get(i, pieces[i][0]), float(pieces[i][1])
        if i == unk_id:
            types[i] = int(T.UNKNOWN)
        elif i in special_ids:
            types[i] = int(T.CONTROL)
        elif i in added.values():
            types[i] = int(T.USER_DEFINED)
        else:
            types[i] = int(T.NORMAL)
    add_prefix = bool(tc.get("add_prefix_space", True))
    remove_ws = bool(tc.get("clean_up_tokenization_spaces", False))
    return tokens, scores, types, add_prefix, remove_ws, charsmap


def _add_ugm(out: _Entries, tokens: list, scores: list, types: list, settings: tuple,
             type_count: int | None = None) -> None:  # fmt: skip
    """The reference's UGM (``t5``) vocabulary rows in its order; ``settings`` is
    ``(add_space_prefix, remove_extra_whitespaces, precompiled_charsmap)``, and a BERT-style
    ``type_count`` goes after the space prefix (XLM-RoBERTa's)."""
    add_prefix, remove_ws, charsmap = settings
    out.add("ggml.model", "t5", VT.STRING)
    out.add("ggml.pre", "default", VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.scores", scores, VT.FLOAT32)
    out.add("ggml.token_type", [int(t) for t in types], VT.INT32)
    out.add("ggml.add_space_prefix", add_prefix, VT.BOOL)
    if type_count is not None:
        out.add("ggml.token_type_count", type_count, VT.UINT32)
    out.add("ggml.remove_extra_whitespaces", remove_ws, VT.BOOL)
    if charsmap:
        out.add("ggml.precompiled_charsmap", list(charsmap), VT.UINT8)


def _piece_id(pieces: list, text: str) -> int | None:
    return next((i for i, (t, _) in enumerate(pieces) if t == text), None)


#: nomic-bert-moe's ``<mask>`` id, which its ``sentencepiece.bpe.model`` lacks
NOMIC_MOE_MASK = 250001


def set_xlmroberta(out: _Entries, d: Path, config: dict, moe_mask: bool = False) -> None:
    """XLM-RoBERTa's ``sentencepiece.bpe.model`` (``_xlmroberta_set_vocab``): the pieces
    realigned to fairseq's ids (``<s> <pad> </s> <unk>`` first, every piece one up, the
    last id dropped), ``token_type_count`` after ``add_space_prefix``; without it,
    ``tokenizer.json`` (:func:`_xlmr_from_json`).  ``moe_mask``: nomic-bert-moe's
    ``<mask>`` at id :data:`NOMIC_MOE_MASK`."""
    path = d / "sentencepiece.bpe.model"
    if path.is_file():
        add_prefix, remove_ws, charsmap = _unigram_settings(path)
        sp = _load_spm(path)
        vocab_size = max(_vocab_size(config, ("vocab_size",)) or 0, sp.vocab_size())
        tokens, scores, types = _spm_pieces(sp, vocab_size)
        tokens = ["<s>", "<pad>", "</s>", "<unk>", *tokens[3:-1]]
        scores = [0.0] * 4 + scores[3:-1]
        types = [int(T.CONTROL)] * 3 + [int(T.UNKNOWN)] + types[3:-1]
        if moe_mask:  # the reference sets it at its fixed id (an IndexError when fewer)
            if len(tokens) <= NOMIC_MOE_MASK:
                raise _too_large(path, "<mask>", NOMIC_MOE_MASK, len(tokens))
            tokens[NOMIC_MOE_MASK], scores[NOMIC_MOE_MASK] = "<mask>", 0.0
            types[NOMIC_MOE_MASK] = int(T.CONTROL)
    elif (d / "tokenizer.json").is_file():
        tokens, scores, types, add_prefix, remove_ws, charsmap = _xlmr_from_json(d, config)
    else:
        raise _missing(d, "sentencepiece.bpe.model or tokenizer.json")
    _add_ugm(out, tokens, scores, types, (add_prefix, remove_ws, charsmap),
             type_count=config.get("type_vocab_size", 1))  # fmt: skip
    _SpecialVocab(d, config, n_vocab=len(tokens)).add_to(out)


def set_t5(out: _Entries, d: Path, config: dict) -> None:
    path = d / "tokenizer.model"
    if not path.is_file():
        path = d / "spiece.model"
    if not path.is_file():
        raise _missing(d, "tokenizer.model or spiece.model (a SentencePiece model)")
    if spm_settings(path)[0] == BPE and path.name == "tokenizer.model":
        _set_spm(out, d, config)
        return
    add_prefix, remove_ws, charsmap = _unigram_settings(path)
    sp = _load_spm(path)
    n_sp = sp.vocab_size()
    vocab_size = _vocab_size(config, ("vocab_size",)) or n_sp
    if n_sp > vocab_size:  # the reference fails with an IndexError here
        raise _too_large(path, sp.IdToPiece(vocab_size), vocab_size, vocab_size)
    tokens, scores, types = _spm_pieces(sp, vocab_size)
    added_path = d / "added_tokens.json"
    for text, tid in (_json_if(added_path) or {}).items():
        if isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < vocab_size:
            tokens[tid], scores[tid], types[tid] = text, -1000.0, T.USER_DEFINED
        # ids past vocab_size are ignored (with a warning) by the reference
    _add_ugm(out, tokens, scores, types, (add_prefix, remove_ws, charsmap))
    _SpecialVocab(d, config, n_vocab=len(tokens)).add_to(out)


def set_pockettts(out: _Entries, d: Path, config: dict) -> None:
    """PocketTTS (``PocketTTSModel.set_vocab``): the SentencePiece vocabulary padded to
    the embedding's rows, the last of them renamed (its learned input vectors, CONTROL,
    -1000), written as a UGM (``t5``) vocabulary without special-token ids, adding no
    BOS / EOS."""
    path = d / "tokenizer.model"
    if not path.is_file():
        raise _missing(d, "tokenizer.model (a Unigram SentencePiece model)")
    add_prefix, remove_ws, charsmap = _unigram_settings(path)
    tokens, scores, types = _spm_vocab(d, config)
    extra = extra_tokens(config)
    for i, name in enumerate(extra, len(tokens) - len(extra)):
        tokens[i], scores[i], types[i] = name, -1000.0, int(T.CONTROL)
    _add_ugm(out, tokens, scores, types, (add_prefix, remove_ws, charsmap))
    out.add("ggml.add_bos_token", False, VT.BOOL)
    out.add("ggml.add_eos_token", False, VT.BOOL)


MORE_ROUTES["t5"] = set_t5
MORE_ROUTES["pockettts"] = set_pockettts
MORE_ROUTES["xlmroberta"] = set_xlmroberta
