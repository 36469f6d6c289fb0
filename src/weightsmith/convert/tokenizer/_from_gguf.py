"""``tokenizer.ggml.*`` metadata -> HF tokenizer files.

tokenizer.json is built through the ``tokenizers`` API as implemented by
:mod:`._json_api` (which only records what is asked and writes the library's
JSON), so GGUF -> HF needs no extra; :data:`TOKENIZERS_API` is the one place
that names it (the tests swap in the real library and compare).

What each GGUF key becomes:

* ``tokenizer.ggml.model = "gpt2"``: a byte-level BPE.  ``tokens`` of type NORMAL,
  UNUSED and BYTE fill the BPE vocabulary (id = position); ``merges`` ("a b") are
  the BPE merges; the pre-tokenizer (and the NFC normalizer where the original
  had one) is chosen by ``tokenizer.ggml.pre`` from :data:`BPE_PRE`.
* ``tokenizer.ggml.model = "llama"`` (SentencePiece): a byte-fallback BPE whose
  merges are derived from the pieces and their ``scores`` (the highest scoring
  merged piece first, as llama.cpp's SPM tokenizer merges), with the
  ``Prepend("▁") + Replace(" ", "▁")`` normalizer when ``add_space_prefix``
  (default true) and sentencepiece's decoder.
* ``tokenizer.ggml.model = "gemma4"``: a byte-fallback BPE over the file's ``merges``
  with transformers' GemmaTokenizer pipeline (spaces as ``▁``, no prefix).
* ``tokenizer.ggml.model = "bert"``: a WordPiece model with BERT's normalizer
  (``normalizer.lowercase`` / ``strip_accents``), pre-tokenizer, ``[CLS] A [SEP]``
  template and decoder; llama.cpp's phantom-space tokens are turned back into
  WordPiece's (``▁word`` -> ``word``, ``piece`` -> ``##piece``).
* ``tokenizer.ggml.model = "t5"`` (SentencePiece Unigram: T5, XLM-RoBERTa): a Unigram
  model over every token with its score, the ``precompiled_charsmap`` as a Precompiled
  normalizer, ``WhitespaceSplit`` (``remove_extra_whitespaces``) and a Metaspace
  pre-tokenizer prepending ``▁`` when ``add_space_prefix``, as transformers' own T5 /
  XLM-R conversion does; llama.cpp's defaults (no BOS, EOS added; EOS 1, UNK 2, PAD 0)
  where the GGUF has no keys.
* CONTROL and UNKNOWN tokens become special added tokens, USER_DEFINED tokens
  non-special added tokens, both matched on the raw text (``normalized=False``),
  which is how llama.cpp matches them; each keeps its GGUF id.
* ``bos/eos/unknown/padding/seperator..._token_id`` -> the special tokens of
  tokenizer_config.json and special_tokens_map.json; ``add_bos_token`` /
  ``add_eos_token`` -> a TemplateProcessing post-processor (and the config
  flags); ``tokenizer.chat_template`` (and named ``tokenizer.chat_template.<n>``)
  -> ``chat_template``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import errors as E
from ..._atomic import atomic_output
from ...gguf import read as read_gguf
from . import _json_api

#: the ``tokenizers``-compatible API the tokenizer is built with
TOKENIZERS_API: Any = _json_api

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

K_MODEL = "tokenizer.ggml.model"
K_PRE = "tokenizer.ggml.pre"
K_TOKENS = "tokenizer.ggml.tokens"
K_TYPES = "tokenizer.ggml.token_type"
K_SCORES = "tokenizer.ggml.scores"
K_MERGES = "tokenizer.ggml.merges"
K_TEMPLATE = "tokenizer.chat_template"

# GGUF id key suffix -> HF special-token attribute
SPECIAL_KEYS = {
    "bos": "bos_token",
    "eos": "eos_token",
    "unknown": "unk_token",
    "padding": "pad_token",
    "seperator": "sep_token",  # sic: llama.cpp's key spelling
    "cls": "cls_token",
    "mask": "mask_token",
}

# llama.cpp's defaults when the GGUF does not say: SentencePiece special ids, and the
# BPE pre-tokenizers whose models add a BOS token (llama-vocab.cpp)
SPM_DEFAULT_IDS = {"bos": 1, "eos": 2, "unknown": 0}
UGM_DEFAULT_IDS = {"eos": 1, "unknown": 2, "padding": 0}
ADD_BOS_PRE = frozenset(
    {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}
    | {"jina-v5-nano", "tekken", "chameleon"}
)

# the regexes of the original HF tokenizers (tokenizer.json) llama.cpp fingerprints
_LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3.5's: letters with their combining marks
_QWEN35_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# tokenizer.ggml.pre -> (pre-tokenizer recipe, NFC normalizer, BPE ignore_merges)
#   recipe: "bytelevel" = ByteLevel with GPT-2's own regex,
#           ("split", regex) = Split(regex, isolated) then ByteLevel without regex,
#           "digits+bytelevel" = Digits(individual) then ByteLevel with GPT-2's regex
BPE_PRE: dict[str, tuple[Any, bool, bool]] = {
    "gpt-2": ("bytelevel", False, False),
    "phi-2": ("bytelevel", False, False),
    "mpt": ("bytelevel", True, False),
    "olmo": ("bytelevel", True, False),
    "gpt-neox": ("bytelevel", True, False),
    "llama-bpe": (("split", _LLAMA3_RE), False, True),
    "llama3": (("split", _LLAMA3_RE), False, True),
    "llama-v3": (("split", _LLAMA3_RE), False, True),
    "qwen2": (("split", _QWEN2_RE), True, False),
    "deepseek-r1-qwen": (("split", _QWEN2_RE), True, False),
    "qwen35": (("split", _QWEN35_RE), True, False),
    "starcoder": ("digits+bytelevel", False, False),
    "refact": ("digits+bytelevel", False, False),
    "smollm": ("digits+bytelevel", False, False),
}


def _required(md: Mapping[str, Any], key: str, where: str | None) -> Any:
    if key not in md:
        raise E.TokenizerFilesMissing(
            "GGUF has no tokenizer metadata key",
            path=where,
            field=key,
            expected="present",
            found="absent",
        )
    return md[key]


def _vocab_arrays(
    md: Mapping[str, Any], where: str | None
) -> tuple[list[str], list[int], list[float] | None]:
    tokens = _required(md, K_TOKENS, where)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise E.TokenizerInconsistent(
            "token list is not an array of strings",
            path=where,
            field=K_TOKENS,
            expected="arr[str]",
            found=type(tokens).__name__,
        )
    n = len(tokens)
    types = list(md[K_TYPES]) if K_TYPES in md else [NORMAL] * n
    scores = list(md[K_SCORES]) if K_SCORES in md else None
    for key, arr in ((K_TYPES, types), (K_SCORES, scores)):
        if arr is not None and len(arr) != n:
            raise E.TokenizerInconsistent(
                "array length differs from the token list",
                path=where,
                field=key,
                expected=n,
                found=len(arr),
            )
    return tokens, [int(t) for t in types], scores


def _added_entry(i: int, content: str, special: bool) -> dict[str, Any]:
    return {
        "id": i,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _split_vocab(
    tokens: list[str], types: list[int]
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Model vocabulary and added tokens.

    The model vocabulary is every id below the last NORMAL/UNUSED/BYTE/UNKNOWN
    token, so it has no holes (llama.cpp's converter reads a byte-fallback BPE
    vocabulary as contiguous ids); the special and user-defined tokens after it
    exist only as added tokens, as in the original HF files.  A repeated string
    keeps its first id in the model vocabulary.
    """
    base = 1 + max(
        (i for i, t in enumerate(types) if t in (NORMAL, UNUSED, BYTE, UNKNOWN)), default=-1
    )
    vocab: dict[str, int] = {}
    for i in range(base):
        vocab.setdefault(tokens[i], i)
    added = [
        _added_entry(i, tok, typ != USER_DEFINED)
        for i, (tok, typ) in enumerate(zip(tokens, types))
        if typ in (CONTROL, UNKNOWN, USER_DEFINED)
    ]
    return vocab, added


def _bpe_pipeline(tk: Any, pre: str, where: str | None) -> tuple[Any, Any, bool]:
    """(normalizer or None, pre-tokenizer, ignore_merges) for a llama.cpp pre name."""
    if pre not in BPE_PRE:
        raise E.UnknownBPEPreTokenizer(
            "no HF pre-tokenizer known for this llama.cpp pre-tokenizer name",
            path=where,
            field=K_PRE,
            expected="one of " + ", ".join(sorted(BPE_PRE)),
            found=repr(pre),
        )
    recipe, nfc, ignore_merges = BPE_PRE[pre]
    pt = tk.pre_tokenizers
    if recipe == "bytelevel":
        pre_tok = pt.ByteLevel(add_prefix_space=False, use_regex=True)
    elif recipe == "digits+bytelevel":
        pre_tok = pt.Sequence(
            [
                pt.Digits(individual_digits=True),
                pt.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:
        pre_tok = pt.Sequence(
            [
                pt.Split(tk.Regex(recipe[1]), behavior="isolated", invert=False),
                pt.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    normalizer = tk.normalizers.NFC() if nfc else None
    return normalizer, pre_tok, ignore_merges


def _merges(md: Mapping[str, Any], where: str | None) -> list[tuple[str, str]]:
    merges_raw = list(_required(md, K_MERGES, where))
    merges = []
    for j, m in enumerate(merges_raw):
        # llama.cpp splits at the first space after the first character
        pos = m.find(" ", 1)
        parts = [m[:pos], m[pos + 1 :]] if pos > 0 else [m]
        if len(parts) != 2 or " " in parts[1]:
            raise E.TokenizerInconsistent(
                "a merge is not two tokens separated by one space",
                path=where,
                field=f"{K_MERGES}[{j}]",
                expected="'a b'",
                found=repr(m),
            )
        merges.append((parts[0], parts[1]))
    return merges


def _gpt2_tokenizer(tk: Any, md: Mapping[str, Any], where: str | None) -> tuple[Any, list]:
    tokens, types, _ = _vocab_arrays(md, where)
    merges = _merges(md, where)
    vocab, added = _split_vocab(tokens, types)
    normalizer, pre_tok, ignore_merges = _bpe_pipeline(tk, str(md.get(K_PRE, "default")), where)
    model = tk.models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges)
    tok = tk.Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tok
    tok.decoder = tk.decoders.ByteLevel()
    return tok, added


def _spm_merges(vocab: dict[str, int], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges equivalent to merging the highest-scoring piece first (llama.cpp's SPM).

    Every piece that splits into two pieces of the vocabulary gives a merge; a
    higher score of the merged piece ranks first, ties by the merged piece's id,
    then by the ids of its two halves.
    """
    ranked = []
    for piece, pid in vocab.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            lid, rid = vocab.get(left), vocab.get(right)
            if lid is not None and rid is not None:
                ranked.append((-scores[pid], pid, lid, rid, left, right))
    ranked.sort(key=lambda r: r[:4])
    return [(r[4], r[5]) for r in ranked]


def _spm_tokenizer(tk: Any, md: Mapping[str, Any], where: str | None) -> tuple[Any, list]:
    tokens, types, scores = _vocab_arrays(md, where)
    if scores is None:
        scores = [0.0] * len(tokens)
    vocab, added = _split_vocab(tokens, types)
    # only pieces the SPM tokenizer can produce take part in merges
    mergeable = {t: i for t, i in vocab.items() if types[i] in (NORMAL, UNUSED)}
    merges = _spm_merges(mergeable, scores)
    unk_id = md.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) else None
    if unk is None:
        unk = next((t for t, ty in zip(tokens, types) if ty == UNKNOWN), None)
    model = tk.models.BPE(
        vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True
    )
    tok = tk.Tokenizer(model)
    space_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", True))
    norms = [tk.normalizers.Replace(" ", "\u2581")]
    if space_prefix:
        norms.insert(0, tk.normalizers.Prepend("\u2581"))
    tok.normalizer = tk.normalizers.Sequence(norms)
    decs = [tk.decoders.Replace("\u2581", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
    if space_prefix:
        decs.append(tk.decoders.Strip(" ", 1, 0))
    tok.decoder = tk.decoders.Sequence(decs)
    return tok, added


def _gemma4_tokenizer(tk: Any, md: Mapping[str, Any], where: str | None) -> tuple[Any, list]:
    """transformers' GemmaTokenizer pipeline: a byte-fallback BPE over the file's merges,
    spaces written as ``▁`` (no prefix), sentencepiece's decoder."""
    tokens, types, _ = _vocab_arrays(md, where)
    vocab, added = _split_vocab(tokens, types)
    unk_id = md.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) else None
    model = tk.models.BPE(
        vocab=vocab, merges=_merges(md, where), unk_token=unk, fuse_unk=True, byte_fallback=True
    )
    tok = tk.Tokenizer(model)
    tok.normalizer = tk.normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = tk.pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = tk.decoders.Sequence(
        [tk.decoders.Replace("\u2581", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
    )
    return tok, added


def _unigram_tokenizer(tk: Any, md: Mapping[str, Any], where: str | None) -> tuple[Any, list]:
    """A Unigram tokenizer (llama.cpp's UGM): every token keeps its id and score."""
    tokens, types, scores = _vocab_arrays(md, where)
    if scores is None:
        scores = [0.0] * len(tokens)
    unk_id = md.get("tokenizer.ggml.unknown_token_id", UGM_DEFAULT_IDS["unknown"])
    if not isinstance(unk_id, int) or not 0 <= unk_id < len(tokens):
        unk_id = next((i for i, ty in enumerate(types) if ty == UNKNOWN), None)
    model = tk.models.Unigram(
        [(t, float(sc)) for t, sc in zip(tokens, scores)], unk_id=unk_id,
        byte_fallback=BYTE in types,
    )  # fmt: skip
    tok = tk.Tokenizer(model)
    charsmap = md.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap:
        tok.normalizer = tk.normalizers.Precompiled(bytes(bytearray(charsmap)))
    scheme = "always" if md.get("tokenizer.ggml.add_space_prefix", True) else "never"
    meta = tk.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=True)
    if md.get("tokenizer.ggml.remove_extra_whitespaces", True):
        meta = tk.pre_tokenizers.Sequence([tk.pre_tokenizers.WhitespaceSplit(), meta])
    tok.pre_tokenizer = meta
    tok.decoder = tk.decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=True)
    added = [
        _added_entry(i, t, ty != USER_DEFINED)
        for i, (t, ty) in enumerate(zip(tokens, types))
        if ty in (CONTROL, UNKNOWN, USER_DEFINED)
    ]
    return tok, added


def _wordpiece_tokenizer(tk: Any, md: Mapping[str, Any], where: str | None) -> tuple[Any, list]:
    """A BERT WordPiece tokenizer from llama.cpp's phantom-space tokens (``▁word`` is a
    word-initial piece, a bare piece a ``##`` continuation, control tokens as they are)."""
    tokens, types, _ = _vocab_arrays(md, where)
    vocab: dict[str, int] = {}
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (CONTROL, UNKNOWN, USER_DEFINED):
            added.append(_added_entry(i, t, ty != USER_DEFINED))
        elif t.startswith("\u2581"):
            t = t[1:]
        else:
            t = "##" + t
        vocab.setdefault(t, i)
    unk_id = md.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) else "[UNK]"
    tok = tk.Tokenizer(tk.models.WordPiece(vocab=vocab, unk_token=unk))
    lower = md.get("tokenizer.ggml.normalizer.lowercase")
    tok.normalizer = tk.normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=md.get("tokenizer.ggml.normalizer.strip_accents"),
        lowercase=bool(lower) if lower is not None else False,
    )
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tok.decoder = tk.decoders.WordPiece(prefix="##", cleanup=True)
    return tok, added


def _bert_post_processor(tk: Any, specials: dict[str, str], ids: dict) -> Any:
    """BERT's ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` (segment B of type 1)."""
    cls, sep = specials.get("cls_token"), specials.get("sep_token")
    if cls is None or sep is None:
        return None
    return tk.processors.TemplateProcessing(
        single=[cls, "$A:0", sep],
        pair=[cls, "$A:0", sep, "$B:1", f"{sep}:1"],
        special_tokens=[(cls, ids[cls]), (sep, ids[sep])],
    )


def _add_tokens(tk: Any, tok: Any, added: list[dict[str, Any]], where: str | None) -> None:
    """Add the special / user-defined tokens in id order, then prove each kept its GGUF id.

    The library gives an added token its vocabulary id when the string is in the
    model vocabulary, else the next free id; the added tokens after the model
    vocabulary are contiguous (see :func:`_split_vocab`), so in id order every
    token lands on its own id -- unless a string is repeated, which is refused.
    """
    flags = {k: False for k in ("single_word", "lstrip", "rstrip", "normalized")}
    tok.add_tokens([tk.AddedToken(a["content"], special=a["special"], **flags) for a in added])
    for a in added:
        got = tok.token_to_id(a["content"])
        if got != a["id"]:
            raise E.TokenizerInconsistent(
                "token string appears under two ids",
                path=where,
                field=f"{K_TOKENS}[{a['id']}]",
                expected=f"{a['content']!r} only at id {a['id']}",
                found=f"also at id {got}",
            )


def _special_tokens(
    md: Mapping[str, Any], tokens: list[str], types: list[int], kind: str, ids: dict[str, int]
) -> dict[str, str]:
    """HF attribute -> token string of each special id; ``ids`` gets string -> id."""
    out = {}
    for suffix, attr in SPECIAL_KEYS.items():
        tid = md.get(f"tokenizer.ggml.{suffix}_token_id")
        if tid is None and kind == "llama" and suffix == "unknown":
            tid = next((i for i, t in enumerate(types) if t == UNKNOWN), 0)
        elif tid is None and kind == "llama":
            tid = SPM_DEFAULT_IDS.get(suffix)  # llama.cpp's defaults for SentencePiece
        elif tid is None and kind == "t5":
            tid = UGM_DEFAULT_IDS.get(suffix)
        if isinstance(tid, int) and 0 <= tid < len(tokens):
            out[attr] = tokens[tid]
            ids.setdefault(tokens[tid], tid)
    return out


def _post_processor(
    tk: Any, specials: dict[str, str], add_bos: bool, add_eos: bool, ids: dict
) -> Any:
    """TemplateProcessing adding BOS/EOS as llama.cpp's add_bos/add_eos say, or None."""
    bos = specials.get("bos_token") if add_bos else None
    eos = specials.get("eos_token") if add_eos else None
    if bos is None and eos is None:
        return None
    head = [bos] if bos is not None else []
    tail = [eos] if eos is not None else []
    single = [*head, "$A:0", *tail]
    pair = [*head, "$A:0", *tail, *head, "$B:1", *tail]
    used = dict.fromkeys(t for t in (bos, eos) if t is not None)
    return tk.processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, ids[t]) for t in used]
    )


def _chat_template(md: Mapping[str, Any]) -> Any:
    default = md.get(K_TEMPLATE)
    named = [k for k in md if k.startswith(K_TEMPLATE + ".")]
    if not named:
        return default
    out = [{"name": "default", "template": default}] if default is not None else []
    out += [{"name": k[len(K_TEMPLATE) + 1 :], "template": md[k]} for k in named]
    return out


def hf_tokenizer_files(
    gguf_metadata: Mapping[str, Any], *, where: str | None = None
) -> dict[str, Any]:
    """HF tokenizer files rebuilt from GGUF metadata (``GGUFFile.metadata`` or any mapping).

    Returns ``{"tokenizer.json": dict, "tokenizer_config.json": dict,
    "special_tokens_map.json": dict}`` (JSON-able dicts).  ``tokenizer.ggml.model``
    ``gpt2`` becomes a byte-level BPE with the pre-tokenizer of ``tokenizer.ggml.pre``;
    ``llama`` (SentencePiece) becomes a byte-fallback BPE with sentencepiece's
    normalizer and decoder; ``bert`` a WordPiece; ``t5`` a Unigram model with the
    precompiled charsmap.  ``where`` (a file name) only labels errors.
    """
    tk = TOKENIZERS_API
    md = gguf_metadata
    kind = _required(md, K_MODEL, where)
    if kind == "gpt2":
        tok, added = _gpt2_tokenizer(tk, md, where)
        default_bos = False
    elif kind == "llama":
        tok, added = _spm_tokenizer(tk, md, where)
        default_bos = True
    elif kind == "bert":
        tok, added = _wordpiece_tokenizer(tk, md, where)
        default_bos = True
    elif kind == "gemma4":
        tok, added = _gemma4_tokenizer(tk, md, where)
        default_bos = True
    elif kind == "t5":
        tok, added = _unigram_tokenizer(tk, md, where)
        default_bos = False
    else:
        raise E.TokenizerInconsistent(
            "tokenizer model not supported",
            path=where,
            field=K_MODEL,
            expected="'gpt2', 'llama', 'gemma4', 'bert' or 't5'",
            found=repr(kind),
        )
    tokens = list(md[K_TOKENS])
    ids: dict[str, int] = {}
    types = [int(t) for t in md.get(K_TYPES, [])]
    specials = _special_tokens(md, tokens, types, kind, ids)
    if kind == "gpt2":
        default_bos = str(md.get(K_PRE, "")) in ADD_BOS_PRE
    add_bos = bool(md.get("tokenizer.ggml.add_bos_token", default_bos))
    add_eos = bool(md.get("tokenizer.ggml.add_eos_token", kind == "t5"))
    if kind == "bert":  # llama.cpp's BERT BOS is the [CLS] token
        if "bos_token" in specials:
            specials.setdefault("cls_token", specials["bos_token"])
        post = _bert_post_processor(tk, specials, ids) if add_bos else None
    else:
        post = _post_processor(tk, specials, add_bos, add_eos, ids)
    if kind == "gpt2":
        byte_post = tk.processors.ByteLevel(trim_offsets=False)
        post = byte_post if post is None else tk.processors.Sequence([byte_post, post])
    if post is not None:
        tok.post_processor = post
    _add_tokens(tk, tok, added, where)
    tok_json = json.loads(tok.to_str())

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": _context_length(md),
        **specials,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in a if k != "id"} for a in added},
    }
    if kind == "bert":  # segment ids go to the model too
        config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    if kind == "gemma4":
        # the other control tokens (chat markers): special to transformers, so that
        # llama.cpp's converter (LlamaHfVocab) reads them back as CONTROL
        named = set(specials.values())
        extra = [a["content"] for a in added if a["special"] and a["content"] not in named]
        if extra:
            config["extra_special_tokens"] = extra
    if kind == "llama":
        # tokenizer.json's own pipeline (Prepend + Replace, as sentencepiece and llama.cpp
        # normalize) is used as is: transformers' LlamaTokenizer would rebuild a Metaspace
        # pipeline that prepends no "▁" to a text already starting with a space, dropping
        # one on "  two  spaces" where sentencepiece and llama.cpp keep it
        config["add_prefix_space"] = bool(md.get("tokenizer.ggml.add_space_prefix", True))
    template = _chat_template(md)
    if template is not None:
        config["chat_template"] = template
    return {
        "tokenizer.json": tok_json,
        "tokenizer_config.json": config,
        "special_tokens_map.json": dict(specials),
    }


def _context_length(md: Mapping[str, Any]) -> int:
    arch = md.get("general.architecture")
    n = md.get(f"{arch}.context_length") if arch else None
    return int(n) if isinstance(n, int) and n > 0 else 1 << 30


def write_hf_tokenizer(
    gguf_metadata: Mapping[str, Any], folder: str | os.PathLike[str], *, where: str | None = None
) -> list[Path]:
    """Write :func:`hf_tokenizer_files` into ``folder`` (atomically, file by file); return the paths."""
    files = hf_tokenizer_files(gguf_metadata, where=where)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in files.items():
        path = folder / name
        data = content if isinstance(content, bytes) else _json_bytes(content)
        with atomic_output(path) as f:
            f.write(data)
        paths.append(path)
    return paths


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def tokenizer_json_from_vocab_gguf(
    path: str | os.PathLike[str], folder: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """:func:`hf_tokenizer_files` of the GGUF at ``path``; also written to ``folder`` when given."""
    with read_gguf(path) as f:
        files = hf_tokenizer_files(f.metadata, where=os.fspath(path))
    if folder is not None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            with atomic_output(folder / name) as out:
                out.write(_json_bytes(content))
    return files
