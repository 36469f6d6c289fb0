"""HF tokenizer folder -> ``tokenizer.ggml.*`` metadata, as llama.cpp's converter writes it.

The reference is ``convert_hf_to_gguf.py`` (llama.cpp, as shipped in the
llama-cpp-python sdist).  Which vocabulary path it takes depends on the
architecture (``config["architectures"][0]``):

* Llama / Mistral: ``add_space_prefix`` from tokenizer_config.json's
  ``add_prefix_space`` first; then SentencePiece from ``tokenizer.model``; else a
  byte-fallback BPE ``tokenizer.json`` read as SentencePiece-like ("llama-hf");
  else a byte-level BPE ``tokenizer.json`` ("gpt2");
* Qwen2 / Qwen3: SentencePiece if ``tokenizer.model`` exists, else gpt2;
* Gemma3: SentencePiece then ``add_space_prefix = false``, else gpt2;
* Phi-3 (``phi3``): gpt2 when tokenizer_config.json names ``GPT2Tokenizer`` (Phi-4),
  else SentencePiece with Phi-3's added-token rules (:func:`_phi3_spm_vocab`);
* Gemma 4 (``gemma4``): the byte-fallback BPE ``tokenizer.json`` read as "llama-hf",
  written as ``tokenizer.ggml.model = gemma4`` with its merges (:func:`_set_gemma4`);
* GLM-4 MoE (``_set_vocab_glm``): gpt2, its special ids taken from the added tokens
  (bos ``[gMASK]``, eot ``<|user|>``, unk ``<|endoftext|>``, eom ``<|observation|>``);
  GLM-4 dense and GLM-4V (``glm4``, ``Glm4Model.set_vocab``): the same with eos, unk and
  bos ``<|endoftext|>``, eot ``<|user|>``;
* ERNIE 4.5 (``ernie``): SentencePiece from ``tokenizer.model``, then ``add_space_prefix``
  from tokenizer_config.json's ``add_prefix_space``;
* Jamba (``jamba``): SentencePiece from ``tokenizer.model``, else "llama-hf" with
  ``add_space_prefix = false`` (no gpt2 fallback: the reference stops there).

Then the special-token part (llama.cpp's ``SpecialVocab``): merges (BPE), token
ids from tokenizer_config.json's ``<type>_token`` looked up in tokenizer.json's
``added_tokens`` and then config.json's ``<type>_token_id``, ``add_bos/eos/sep``
from the post-processor and tokenizer_config.json, and the chat template (from
tokenizer_config.json, ``chat_template.jinja`` or ``chat_template.json``).

GGUF types are the reference's: strings, ``i32`` token types, ``f32`` scores,
``u32`` ids, ``bool`` flags.  Where the reference only warns and writes a
broken file (a vocabulary larger than ``vocab_size``) we raise a named error.
"""

from __future__ import annotations

import hashlib
import os
import re
import string
import zipfile
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from typing import Any

from ... import errors as E
from ..._json import read_json
from ..._lazy import require
from ...gguf import GGUFValueType
from ..arch import lookup
from ..arch.qwen3tts import codec_token_names
from ._pre_hashes import CHKTXT, PRE_BY_HASH

VT = GGUFValueType

# one metadata entry: key, value, GGUF type (the element type for arrays)
KV = tuple[str, Any, GGUFValueType | None]


class TokenType(IntEnum):
    """llama.cpp's token types (``tokenizer.ggml.token_type`` values)."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


T = TokenType
SPM_SPACE = "\u2581"

# the reference's vocabulary paths (``set_vocab`` of its model classes); the registry
# entry of each architecture names its route (``Arch.tokenizer["vocab"]``)
ROUTES = (
    "llama",
    "spm_or_gpt2",
    "gemma",
    "gemma4",
    "gpt2",
    "phi3",
    "glm",
    "glm4",
    "jamba",
    "gemma3n",
    "ernie",
)
#: routes kept in modules of their own (encoders: ``bert``, ``t5``), which add their builder
#: ``(entries, folder, config)`` here when imported (the package ``__init__`` imports them)
MORE_ROUTES: dict[str, Callable[[_Entries, Path, dict], None]] = {}

# SpecialVocab token type -> GGUF key suffix of its id
_ID_KEY = {
    "bos": "bos_token_id",
    "eos": "eos_token_id",
    "unk": "unknown_token_id",
    "sep": "seperator_token_id",  # sic: llama.cpp's spelling
    "pad": "padding_token_id",
    "mask": "mask_token_id",
    "eot": "eot_token_id",
    "eom": "eom_token_id",
}
_ADD_KEY = {"bos", "eos", "sep"}  # the only add_<type>_token keys llama.cpp's writer has


# --------------------------------------------------------------------------- entries


class _Entries:
    """Ordered key -> (value, type), overwriting in place like gguf-py's GGUFWriter."""

    def __init__(self) -> None:
        self.kv: dict[str, tuple[Any, GGUFValueType | None]] = {}

    def add(self, key: str, value: Any, vt: GGUFValueType) -> None:
        self.kv[f"tokenizer.{key}"] = (value, vt)

    def remove(self, key: str) -> None:
        self.kv.pop(f"tokenizer.{key}", None)

    def items(self) -> list[KV]:
        return [(k, v, t) for k, (v, t) in self.kv.items()]


# --------------------------------------------------------------------------- files


def _json_if(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when there is no such file."""
    if not path.is_file():
        return None
    value = read_json(path, E.TokenizerInconsistent, path.name)
    if not isinstance(value, dict):
        raise E.TokenizerInconsistent(
            "not a JSON object", path=path, expected="an object", found=type(value).__name__
        )
    return value


def does_token_look_special(token: str) -> bool:
    """llama.cpp's guess that an added token not flagged special is a control token."""
    if token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]"):
        return True
    if token.startswith("<|") and token.endswith("|>"):
        return True
    if token.startswith("<\uff5c") and token.endswith("\uff5c>"):
        return True
    return token.startswith("<unused") and token.endswith(">")


def _vocab_size(config: dict, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = config.get(k)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise E.TokenizerInconsistent(
                    "vocab_size is not a positive integer",
                    path="config.json",
                    field=k,
                    expected="int > 0",
                    found=repr(v),
                )
            return v
    return None


def _too_large(path: Path, token: str, tid: int, vocab_size: int) -> E.VocabSizeMismatch:
    return E.VocabSizeMismatch(
        f"token {token!r} has id {tid}, outside the model's embedding rows",
        path=path,
        field="config.json vocab_size",
        expected=f"ids < {vocab_size}",
        found=tid,
    )


# --------------------------------------------------------------------------- SentencePiece


def _load_spm(path: Path) -> Any:
    """A SentencePieceProcessor of the model file at ``path``, or a named error."""
    spm = require("sentencepiece", "reading a SentencePiece model")
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(path.read_bytes())
    except (RuntimeError, OSError) as exc:
        raise E.TokenizerInconsistent(
            "not a SentencePiece model", path=path, expected="a ModelProto", found=str(exc)
        ) from None
    return sp


def _spm_pieces(sp: Any, vocab_size: int) -> tuple[list[str], list[float], list[int]]:
    """``vocab_size`` ids: ``[PAD<i>]`` (-10000, UNUSED), then the model's pieces over them."""
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [int(T.UNUSED)] * vocab_size
    for i in range(sp.vocab_size()):
        tokens[i], scores[i] = sp.IdToPiece(i), sp.GetScore(i)
        if sp.IsUnknown(i):
            types[i] = T.UNKNOWN
        elif sp.IsControl(i):
            types[i] = T.CONTROL
        elif sp.IsUnused(i):
            types[i] = T.UNUSED
        elif sp.IsByte(i):
            types[i] = T.BYTE
        else:
            types[i] = T.NORMAL
    return tokens, scores, types


def _spm_vocab(d: Path, config: dict) -> tuple[list[str], list[float], list[int]]:
    """The reference's ``_create_vocab_sentencepiece``."""
    path = d / "tokenizer.model"
    sp = _load_spm(path)
    n_sp = sp.vocab_size()
    vocab_size = _vocab_size(config, ("vocab_size_per_layer_input", "vocab_size")) or n_sp
    if n_sp > vocab_size:
        raise _too_large(path, sp.IdToPiece(vocab_size), vocab_size, vocab_size)
    tokens, scores, types = _spm_pieces(sp, vocab_size)

    added_path = d / "added_tokens.json"
    for text, tid in (_json_if(added_path) or {}).items():
        tid = _token_id(tid, added_path, text)
        if tid >= vocab_size:
            raise _too_large(added_path, text, tid, vocab_size)
        tokens[tid], scores[tid], types[tid] = text, -1000.0, T.USER_DEFINED

    cfg_path = d / "tokenizer_config.json"
    cfg = _json_if(cfg_path) or {}
    decoder = cfg.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise E.TokenizerInconsistent(
            "added_tokens_decoder is not an object",
            path=cfg_path,
            field="added_tokens_decoder",
            expected="{id: token}",
            found=type(decoder).__name__,
        )
    for key, data in decoder.items():
        tid, text = _added_token(
            cfg_path,
            key,
            data,
            vocab_size,
            "added_tokens_decoder",
            f"added_tokens_decoder.{key}.content",
        )
        if data.get("special") or does_token_look_special(text):
            types[tid] = T.CONTROL
        else:
            text = text.replace(SPM_SPACE, " ")  # llama.cpp pre-normalizes user-defined spaces
            types[tid] = T.USER_DEFINED
        scores[tid] = -1000.0
        tokens[tid] = text
    return tokens, scores, [int(t) for t in types]


def _phi3_spm_vocab(d: Path, config: dict) -> tuple[list[str], list[float], list[int]]:
    """The reference's ``Phi3MiniModel.set_vocab`` SentencePiece path.

    Unlike :func:`_spm_vocab`: ids of ``added_tokens.json`` past ``vocab_size`` are
    skipped, the added tokens of tokenizer_config.json *and* tokenizer.json are taken
    as they are (USER_DEFINED, CONTROL only when flagged special, no space rewrite).
    """
    path = d / "tokenizer.model"
    sp = _load_spm(path)
    n_sp = sp.vocab_size()
    vocab_size = _vocab_size(config, ("vocab_size",)) or n_sp
    if n_sp > vocab_size:
        raise _too_large(path, sp.IdToPiece(vocab_size), vocab_size, vocab_size)
    tokens, scores, types = _spm_pieces(sp, vocab_size)
    added_path = d / "added_tokens.json"
    for text, tid in (_json_if(added_path) or {}).items():
        tid = _token_id(tid, added_path, text)
        if tid < vocab_size:  # the reference skips (logs) ids past the vocabulary
            tokens[tid], scores[tid], types[tid] = text, -1000.0, T.USER_DEFINED
    cfg_path, tj_path = d / "tokenizer_config.json", d / "tokenizer.json"
    decoder = (_json_if(cfg_path) or {}).get("added_tokens_decoder") or {}
    listed = [(cfg_path, k, v) for k, v in decoder.items()] if isinstance(decoder, dict) else []
    for tok in (_json_if(tj_path) or {}).get("added_tokens") or []:
        listed.append((tj_path, tok.get("id") if isinstance(tok, dict) else None, tok))
    for where, key, data in listed:
        tid, text = _added_token(where, key, data, vocab_size, "added tokens", f"added token {key}")
        tokens[tid], scores[tid] = text, -1000.0
        types[tid] = T.CONTROL if data.get("special") else T.USER_DEFINED
    return tokens, scores, [int(t) for t in types]


def _added_token(
    path: Path, key: Any, data: Any, vocab_size: int, id_field: str, content_field: str
) -> tuple[int, str]:
    """An added token's id and text, checked: an id below ``vocab_size``, a string content."""
    tid = _token_id(key, path, id_field)
    text = data.get("content") if isinstance(data, dict) else None
    if not isinstance(text, str):
        raise E.TokenizerInconsistent(
            "added token without content",
            path=path,
            field=content_field,
            expected="a string",
            found=repr(text),
        )
    if tid >= vocab_size:
        raise _too_large(path, text, tid, vocab_size)
    return tid, text


def _token_id(value: Any, path: Path, field: str) -> int:
    try:
        tid = int(value)
    except (TypeError, ValueError):
        tid = -1
    if tid < 0 or isinstance(value, bool):
        raise E.TokenizerInconsistent(
            "token id is not a non-negative integer",
            path=path,
            field=field,
            expected="int >= 0",
            found=repr(value),
        )
    return tid


# --------------------------------------------------------------------------- tokenizer.json


class _HFTokenizer:
    """What the reference asks transformers' fast tokenizer for, from tokenizers + the config files."""

    def __init__(self, d: Path) -> None:
        tk = require("tokenizers", "reading tokenizer.json")
        self.path = d / "tokenizer.json"
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise E.TokenizerInconsistent(
                "cannot read tokenizer.json", path=self.path, expected="a JSON file",
                found=str(exc),
            ) from None  # fmt: skip
        self.json = read_json(self.path, E.TokenizerInconsistent, "tokenizer.json", data=data)
        if not isinstance(self.json, dict) or not isinstance(self.json.get("model"), dict):
            raise E.TokenizerInconsistent(
                "tokenizer.json has no model",
                path=self.path,
                field="model",
                expected="an object",
                found="absent",
            )
        try:
            # the file's own text (valid UTF-8: read_json decoded it), as transformers reads
            # it; a 151k-token file is not serialized again
            self.tok = tk.Tokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # tokenizers raises a bare Exception on bad files
            raise E.TokenizerInconsistent(
                "the tokenizers library rejects tokenizer.json",
                path=self.path,
                expected="a valid tokenizer",
                found=str(exc),
            ) from None
        # transformers' encode ignores the file's truncation and padding (MiniLM's
        # tokenizer.json truncates at 128, which would change the chktxt fingerprint)
        self.tok.no_truncation()
        self.tok.no_padding()
        self.config = _json_if(d / "tokenizer_config.json") or {}
        self.special_map = _json_if(d / "special_tokens_map.json") or {}
        self.vocab = self.tok.get_vocab(with_added_tokens=True)
        self.base_size = self.tok.get_vocab_size(with_added_tokens=False)
        self.added = {i: t for i, t in self.tok.get_added_tokens_decoder().items()}
        self.added_vocab = {t.content: i for i, t in sorted(self.added.items())}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        text = self.tok.decode(ids, skip_special_tokens=False)
        if self.config.get("clean_up_tokenization_spaces"):
            text = _clean_up(text)
        return text

    def special_tokens(self) -> list[str]:
        """transformers' ``all_special_tokens``: named special tokens, then the extra ones."""
        names = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
        out: list[str] = []
        for n in names:
            v = self.special_map.get(f"{n}_token", self.config.get(f"{n}_token"))
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str) and v not in out:
                out.append(v)
        for key in ("additional_special_tokens", "extra_special_tokens"):
            extra = self.special_map.get(key, self.config.get(key)) or []
            for v in extra.values() if isinstance(extra, dict) else extra:
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str) and v not in out:
                    out.append(v)
        return out


def _clean_up(text: str) -> str:
    # transformers' clean_up_tokenization
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't")):
        text = text.replace(a, b)
    for a, b in ((" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


def vocab_base_pre(hf: _HFTokenizer) -> str:
    """llama.cpp's ``get_vocab_base_pre``: the pre-tokenizer name from the chktxt fingerprint."""
    digest = hashlib.sha256(str(hf.encode(CHKTXT)).encode()).hexdigest()
    name = PRE_BY_HASH.get(digest)
    if name is None:
        raise E.UnknownBPEPreTokenizer(
            f"llama.cpp does not recognise this BPE pre-tokenizer (chktxt sha256 {digest}); "
            f"known: {', '.join(sorted(set(PRE_BY_HASH.values())))}",
            path=hf.path,
            field="pre_tokenizer",
            expected="a pre-tokenizer in llama.cpp's table",
            found=digest,
        )
    return name


def _gpt2_vocab(
    d: Path, config: dict, pre: str | None = None
) -> tuple[list[str], list[int], str, _HFTokenizer]:
    """The reference's ``get_vocab_base`` (``pre``: the pre-tokenizer, when known)."""
    hf = _HFTokenizer(d)
    vocab_size = _vocab_size(config, ("vocab_size",)) or len(hf.vocab)
    if hf.vocab:
        tok, top = max(hf.vocab.items(), key=lambda kv: kv[1])
        if top >= vocab_size:
            raise _too_large(hf.path, tok, top, vocab_size)
    if pre is None:
        pre = vocab_base_pre(hf)
    reverse = {i: t for t, i in hf.vocab.items()}
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(T.UNUSED)
            continue
        token = reverse[i]
        if token in hf.added_vocab:
            added = hf.added[i]
            if not added.normalized:
                token = hf.decode(hf.encode(token, add_special_tokens=False))
            if added.special or does_token_look_special(token):
                types.append(T.CONTROL)
            else:
                token = token.replace(SPM_SPACE, " ")
                types.append(T.USER_DEFINED)
        else:
            types.append(T.NORMAL)
        tokens.append(token)
    return tokens, [int(t) for t in types], pre, hf


_BYTE_RE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _llama_hf_applies(d: Path) -> bool:
    """The reference's LlamaHfVocab pre-check: a byte-fallback BPE with a Sequence decoder."""
    path = d / "tokenizer.json"
    if not path.is_file():
        return False
    tj = read_json(path, E.TokenizerInconsistent, "tokenizer.json")
    model = tj.get("model") if isinstance(tj, dict) else None
    if not isinstance(model, dict):
        return False
    if (
        model.get("type") == "BPE"
        and model.get("ignore_merges", False)
        and not model.get("byte_fallback", True)
    ):
        return False  # Llama 3: converted as gpt2
    decoder = tj.get("decoder") or {}
    return (
        model.get("type") == "BPE"
        and bool(model.get("byte_fallback", False))
        and isinstance(decoder, dict)
        and decoder.get("type") == "Sequence"
    )


def _llama_hf_vocab(d: Path) -> tuple[list[str], list[float], list[int]]:
    """The reference's ``LlamaHfVocab.all_tokens`` (every score -1000)."""
    hf = _HFTokenizer(d)
    added_ids = sorted(i for i in hf.added if i >= hf.base_size)
    specials = {t: hf.vocab[t] for t in hf.special_tokens() if t in hf.vocab}
    special_ids = set(specials.values())
    reverse = {i: t for t, i in hf.vocab.items()}
    tokens: list[str] = []
    types: list[int] = []
    for i in range(hf.base_size):
        if i not in reverse:
            raise E.TokenizerInconsistent(
                "vocabulary has a hole",
                path=hf.path,
                field="model.vocab",
                expected=f"token id {i}",
                found="none",
            )
        text = reverse[i]
        if _BYTE_RE.fullmatch(text):
            types.append(T.BYTE)
        else:
            types.append(T.CONTROL if i in special_ids else T.NORMAL)
        tokens.append(text)
    for i in added_ids:
        text = hf.added[i].content
        tokens.append(text)
        types.append(T.CONTROL if text in specials else T.USER_DEFINED)
    return tokens, [-1000.0] * len(tokens), [int(t) for t in types]


# --------------------------------------------------------------------------- SpecialVocab


#: a space inside a merge part, as the string format writes it (byte-level U+0120)
_MERGE_SPACE = chr(ord(" ") + 256)


def _merges_from_tokenizer_json(tj: dict, path: Path) -> list[str]:
    merges = (tj.get("model") or {}).get("merges")
    if not isinstance(merges, list) or not merges:
        return []
    if isinstance(merges[0], str):
        return merges
    if isinstance(merges[0], list) and len(merges[0]) == 2 and isinstance(merges[0][0], str):
        # the pair format (transformers >= 4.45); a space inside a part is written as U+0120
        try:
            return [
                f"{a.replace(' ', _MERGE_SPACE)} {b.replace(' ', _MERGE_SPACE)}" for a, b in merges
            ]
        except (ValueError, TypeError, AttributeError):  # a pair not of two strings
            raise E.TokenizerInconsistent(
                "a merge pair is not two strings", path=path, field="model.merges",
                expected="pairs of strings", found=next(
                    repr(p) for p in merges
                    if not (isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p))
                ),
            ) from None  # fmt: skip
    raise E.TokenizerInconsistent(
        "unknown merges format",
        path=path,
        field="model.merges",
        expected="strings or pairs",
        found=repr(merges[0]),
    )


def _merges_txt(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0].strip().startswith("#"):
        lines = lines[1:]
    out = []
    for line in lines:
        parts = line.strip().split(None, 3)
        if len(parts) == 2:
            out.append(f"{parts[0]} {parts[1]}")
    return out


class _SpecialVocab:
    """llama.cpp's ``gguf.SpecialVocab``: merges, special ids, add_* flags, chat template."""

    def __init__(
        self,
        d: Path,
        config: dict,
        load_merges: bool = False,
        n_vocab: int | None = None,
        types: tuple[str, ...] = ("bos", "eos", "unk", "sep", "pad", "cls", "mask"),
        tj: dict | None = None,
    ) -> None:
        self.d = d
        self._tj = tj  # tokenizer.json already read (a 151k-token file is parsed once)
        self.n_vocab = n_vocab
        self.types = types
        self.merges: list[str] = []
        self.ids: dict[str, int] = {}
        self.add: dict[str, bool] = {}
        self.chat_template: Any = None
        self.lowercase: bool | None = None
        self.strip_accents: bool | None = None
        self._from_tokenizer_json(load_merges)
        self._from_config(config)
        if load_merges and not self.merges and (d / "merges.txt").is_file():
            self.merges = _merges_txt(d / "merges.txt")

    def set_id(self, typ: str, tid: Any) -> None:
        if not isinstance(tid, int) or isinstance(tid, bool):
            return
        if tid < 0:
            raise E.TokenizerInconsistent(
                "negative special token id",
                path=self.d,
                field=f"{typ}_token",
                expected=">= 0",
                found=tid,
            )
        if (self.n_vocab is None or tid < self.n_vocab) and typ not in self.ids:
            self.ids[typ] = tid

    def _normalizer(self, norm: dict) -> None:
        kind = norm.get("type")
        if kind == "Lowercase":
            self.lowercase = True
        elif kind == "StripAccents":
            self.strip_accents = True
        elif kind == "BertNormalizer":
            if "lowercase" in norm:
                self.lowercase = norm["lowercase"]
            if "strip_accents" in norm:
                self.strip_accents = norm["strip_accents"]
        elif kind == "Sequence":
            for n in norm.get("normalizers", []):
                self._normalizer(n)

    def _from_tokenizer_json(self, load_merges: bool) -> None:
        tj_path = self.d / "tokenizer.json"
        tj = self._tj if self._tj is not None else _json_if(tj_path)
        added: list = []
        if tj is not None:
            if load_merges:
                self.merges = _merges_from_tokenizer_json(tj, tj_path)
            if norm := tj.get("normalizer"):
                self._normalizer(norm)
            added = tj.get("added_tokens", [])
            if not isinstance(added, list) or not all(isinstance(a, dict) for a in added):
                raise E.TokenizerInconsistent(
                    "added_tokens is not a list of objects",
                    path=tj_path,
                    field="added_tokens",
                    expected="a list of objects",
                    found=type(added).__name__,
                )
        cfg = _json_if(self.d / "tokenizer_config.json")
        if tj:
            self._post_processor(tj, cfg)
        if not cfg:
            return
        self._chat_template(cfg)
        for typ in self.types:
            flag = cfg.get(f"add_{typ}_token")
            if isinstance(flag, bool) and typ not in self.add:
                self.add[typ] = flag
            entry = cfg.get(f"{typ}_token")
            if isinstance(entry, dict):
                entry = entry.get("content")
            if not isinstance(entry, str):
                continue
            tid = next((a.get("id") for a in added if a.get("content") == entry), None)
            self.set_id(typ, tid)

    def _post_processor(self, tj: dict, cfg: dict | None) -> None:
        """The reference's reading of ByteLevel / RobertaProcessing / simple TemplateProcessing."""
        post = tj.get("post_processor")
        if not post:
            return
        c = cfg if cfg is not None else {}
        bos, cls = c.get("bos_token"), c.get("cls_token")
        eos, sep = c.get("eos_token"), c.get("sep_token")
        if not bos and cls and cfg:
            cfg["bos_token"] = bos = cls
        if not eos and sep and cfg:
            cfg["eos_token"] = eos = sep
        for proc in post.get("processors", [post]):
            kind = proc.get("type")
            if kind == "ByteLevel":
                self.add.setdefault("bos", False)
                self.add.setdefault("eos", False)
            elif kind == "RobertaProcessing":
                self.add.update(bos=True, eos=True, sep=True)
                if not cls and cfg:
                    cfg["cls_token"] = cls = proc.get("cls", [bos])[0]
                if not sep and cfg:
                    cfg["sep_token"] = sep = proc.get("sep", [eos])[0]
            elif kind == "TemplateProcessing":
                bos, cls, eos, sep = self._template(proc, cfg, bos, cls, eos, sep)

    def _template(
        self, proc: dict, cfg: dict | None, bos: Any, cls: Any, eos: Any, sep: Any
    ) -> tuple:
        single, pair = proc.get("single", []), proc.get("pair", [])
        first = last = None
        if len(single) > 1:
            if first := single[0].get("SpecialToken", {}).get("id"):
                if not cfg:
                    bos = first
                elif first not in (bos, cls):
                    if not bos:
                        cfg["bos_token"] = bos = first
                    if not cls:
                        cfg["cls_token"] = cls = first
                self.add["bos"] = first in (bos, cls)
            if last := single[-1].get("SpecialToken", {}).get("id"):
                if not cfg:
                    eos = last
                elif last != eos:
                    if "eot" not in self.types:
                        self.types = (*self.types, "eot")
                        cfg["eot_token"] = eos
                    elif "eom" not in self.types:
                        self.types = (*self.types, "eom")
                        cfg["eom_token"] = eos
                    cfg["eos_token"] = eos = last
                self.add["eos"] = last == eos
        if pair:
            start = 1 if first and pair[0].get("SpecialToken", {}).get("id") == first else 0
            stop = -1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else None
            middle = pair[slice(start, stop)]
            if middle:
                a = middle[0].get("Sequence", {}).get("id")
                b = middle[-1].get("Sequence", {}).get("id")
                if a == "A" and b == "B" and (middle := middle[1:-1]):
                    first_mid = middle[0].get("SpecialToken", {}).get("id")
                    add_sep = bool(first_mid) and first_mid in (sep, eos) and not last
                    second_mid = (
                        middle[1].get("SpecialToken", {}).get("id") if len(middle) == 2 else None
                    )
                    add_sep = add_sep or (bool(second_mid) and second_mid in (sep, eos))
                    self.add["sep"] = add_sep
                    if add_sep and not sep and cfg:
                        cfg["sep_token"] = eos
        return bos, cls, eos, sep

    def _chat_template(self, cfg: dict) -> None:
        alt: Any = None
        jinja, js = self.d / "chat_template.jinja", self.d / "chat_template.json"
        if jinja.is_file():
            alt = jinja.read_text(encoding="utf-8")
            extra = sorted((self.d / "additional_chat_templates").glob("*.jinja"))
            if extra:
                alt = [{"name": "default", "template": alt}]
                alt += [{"name": p.stem, "template": p.read_text(encoding="utf-8")} for p in extra]
        elif js.is_file():
            alt = (read_json(js, E.TokenizerInconsistent, "chat_template.json") or {}).get(
                "chat_template"
            )
        template = cfg.get("chat_template", alt)
        if template is None or isinstance(template, (str, list)):
            self.chat_template = template

    def _from_config(self, config: dict) -> None:
        for typ in self.types:
            tid = config.get(f"{typ}_token_id")
            if tid is None and isinstance(config.get("text_config"), dict):
                tid = config["text_config"].get(f"{typ}_token_id")
            self.set_id(typ, tid)

    def add_to(self, out: _Entries) -> None:
        """The reference's ``add_to_gguf``, key for key."""
        if self.merges:
            out.add("ggml.merges", self.merges, VT.STRING)
        for typ, tid in self.ids.items():
            if typ in _ID_KEY:  # cls has no writer method in the reference: skipped there too
                out.add(f"ggml.{_ID_KEY[typ]}", tid, VT.UINT32)
        for typ, flag in self.add.items():
            if typ in _ADD_KEY:
                out.add(f"ggml.add_{typ}_token", flag, VT.BOOL)
        if self.chat_template is not None:
            _add_chat_template(out, self.chat_template)
        if self.lowercase is not None:
            out.add("ggml.normalizer.lowercase", self.lowercase, VT.BOOL)
        if self.strip_accents is not None:
            out.add("ggml.normalizer.strip_accents", self.strip_accents, VT.BOOL)


def _add_chat_template(out: _Entries, value: Any) -> None:
    if isinstance(value, str):
        out.add("chat_template", value, VT.STRING)
        return
    default = None
    names: list[str] = []
    for choice in value:
        if not isinstance(choice, dict):
            continue
        name = "".join(
            c if c in string.ascii_letters + string.digits else "_" for c in choice.get("name", "")
        )
        template = choice.get("template")
        if name and template is not None:
            if name == "default":
                default = template
            else:
                if name not in names:
                    names.append(name)
                out.add(f"chat_template.{name}", template, VT.STRING)
    if names:
        # the reference collects the names in a set; its order is not reproducible, so sort
        out.add("chat_templates", sorted(names), VT.STRING)
    if default is not None:
        out.add("chat_template", default, VT.STRING)


# --------------------------------------------------------------------------- paths


def _set_spm(out: _Entries, d: Path, config: dict, phi3: bool = False) -> None:
    tokens, scores, types = (_phi3_spm_vocab if phi3 else _spm_vocab)(d, config)
    out.add("ggml.model", "llama", VT.STRING)
    out.add("ggml.pre", "default", VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.scores", scores, VT.FLOAT32)
    out.add("ggml.token_type", types, VT.INT32)
    _SpecialVocab(d, config, n_vocab=len(tokens)).add_to(out)


def _set_gpt2(out: _Entries, d: Path, config: dict, pre: str | None = None) -> None:
    tokens, types, pre, hf = _gpt2_vocab(d, config, pre)
    out.add("ggml.model", "gpt2", VT.STRING)
    out.add("ggml.pre", pre, VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.token_type", types, VT.INT32)
    _SpecialVocab(d, config, load_merges=True, tj=hf.json).add_to(out)


# _set_vocab_glm: special token type -> the added token whose id it takes
_GLM_SPECIALS = (
    ("bos", "[gMASK]"),
    ("eot", "<|user|>"),
    ("unk", "<|endoftext|>"),
    ("eom", "<|observation|>"),
)
#: Glm4Model.set_vocab's (GLM Edge's) special tokens, in its order
_GLM4_SPECIALS = (
    ("eos", "<|endoftext|>"),
    ("eot", "<|user|>"),
    ("unk", "<|endoftext|>"),
    ("bos", "<|endoftext|>"),
)


def _set_glm(
    out: _Entries,
    d: Path,
    config: dict,
    pre: str | None = None,
    specials: tuple[tuple[str, str], ...] = _GLM_SPECIALS,
) -> None:
    tokens, types, pre, hf = _gpt2_vocab(d, config, pre)
    out.add("ggml.model", "gpt2", VT.STRING)
    out.add("ggml.pre", pre, VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.token_type", types, VT.INT32)
    special = _SpecialVocab(d, config, load_merges=True)
    for typ, text in specials:
        if text not in hf.added_vocab:
            raise E.TokenizerInconsistent(
                f"GLM tokenizer without its {typ} token",
                path=hf.path,
                field="added_tokens",
                expected=repr(text),
                found="no such added token",
            )
        special.set_id(typ, hf.added_vocab[text])
    special.add_to(out)


def _set_llama_hf(out: _Entries, d: Path, config: dict) -> None:
    tokens, scores, types = _llama_hf_vocab(d)
    vocab_size = _vocab_size(config, ("vocab_size",))
    if vocab_size is not None and len(tokens) > vocab_size:
        raise _too_large(d / "tokenizer.json", tokens[vocab_size], vocab_size, vocab_size)
    out.add("ggml.model", "llama", VT.STRING)
    out.add("ggml.pre", "default", VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.scores", scores, VT.FLOAT32)
    out.add("ggml.token_type", types, VT.INT32)
    _SpecialVocab(d, config, n_vocab=len(tokens)).add_to(out)


#: Gemma4Model.set_vocab: tokens always rendered (USER_DEFINED) so chat parsers see them
_GEMMA4_VISIBLE = frozenset(
    ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
     "<tool_response|>", '<|"|>')
)  # fmt: skip


def _set_gemma4(out: _Entries, d: Path, config: dict) -> None:
    """The reference's ``Gemma4Model.set_vocab``: LlamaHfVocab's tokens, the visible
    tokens made USER_DEFINED, the BPE merges; no pre-tokenizer name, BOS always added."""
    if not _llama_hf_applies(d):
        raise E.TokenizerInconsistent(
            "Gemma 4 needs a byte-fallback BPE tokenizer.json",
            path=d / "tokenizer.json",
            field="model",
            expected="BPE with byte_fallback and a Sequence decoder",
            found="another tokenizer",
        )
    tokens, scores, types = _llama_hf_vocab(d)
    vocab_size = _vocab_size(config, ("vocab_size",))
    if vocab_size is not None and len(tokens) > vocab_size:
        raise _too_large(d / "tokenizer.json", tokens[vocab_size], vocab_size, vocab_size)
    types = [int(T.USER_DEFINED) if t in _GEMMA4_VISIBLE else ty for t, ty in zip(tokens, types)]
    out.add("ggml.model", "gemma4", VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.scores", scores, VT.FLOAT32)
    out.add("ggml.token_type", types, VT.INT32)
    _SpecialVocab(d, config, load_merges=True).add_to(out)
    out.add("ggml.add_space_prefix", False, VT.BOOL)
    out.add("ggml.add_bos_token", True, VT.BOOL)


def _missing(d: Path, wanted: str) -> E.TokenizerFilesMissing:
    present = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    return E.TokenizerFilesMissing(
        "no tokenizer for this model",
        path=d,
        field="tokenizer files",
        expected=wanted,
        found=", ".join(present) or "nothing",
    )


def vocab_metadata(
    model_dir: str | os.PathLike[str] | zipfile.Path,
    config: dict,
    route: str | None = None,
    pre: str | None = None,
) -> list[KV]:
    """The ``tokenizer.ggml.*`` entries llama.cpp's ``convert_hf_to_gguf.py`` writes for ``model_dir``.

    ``config`` is the parsed ``config.json`` (its ``vocab_size`` pads the vocabulary);
    ``route`` is the vocabulary path the reference takes (one of :data:`ROUTES`), by
    default the registry entry's for ``architectures[0]`` (``gpt2`` when none).  The list is in the order the reference adds the keys;
    each entry is ``(key, value, type)`` where ``type`` is the scalar type, or the
    element type of an array, ready for ``gguf.Writer.add(key, value, type)``.

    ``model_dir`` may be a :class:`zipfile.Path` over files held in memory.  ``pre``
    names the BPE pre-tokenizer when the caller knows it (Meta's Llama 3 tokenizer is
    ``llama-bpe`` by its generation) instead of fingerprinting it.

    Raises TokenizerFilesMissing, TokenizerInconsistent, VocabSizeMismatch,
    UnknownBPEPreTokenizer (all from :mod:`weightsmith.errors`).
    """
    d = model_dir if isinstance(model_dir, zipfile.Path) else Path(model_dir)
    if route is None:
        archs = config.get("architectures") or [""]
        entry = lookup(archs[0]) if isinstance(archs, list) and archs else None
        route = entry.tokenizer.get("vocab", "gpt2") if entry is not None else "gpt2"
    if route not in ROUTES and route not in MORE_ROUTES:  # an entry naming no known path
        raise ValueError(f"unknown vocabulary route {route!r}; known: {', '.join(ROUTES)}")
    has_spm = (d / "tokenizer.model").is_file()
    has_json = (d / "tokenizer.json").is_file()
    out = _Entries()
    if route in MORE_ROUTES:
        MORE_ROUTES[route](out, d, config)
        return out.items()
    if route == "llama":
        cfg = _json_if(d / "tokenizer_config.json") or {}
        if (prefix := cfg.get("add_prefix_space")) is not None:
            out.add("ggml.add_space_prefix", prefix, VT.BOOL)
        if has_spm:
            _set_spm(out, d, config)
        elif _llama_hf_applies(d):
            _set_llama_hf(out, d, config)
        elif has_json:
            _set_gpt2(out, d, config, pre)
        else:
            raise _missing(d, "tokenizer.model or tokenizer.json")
        if config.get("vocab_size") == 32016:
            # CodeLlama, as the reference does: a second pass for the infill tokens, of
            # which only EOT has a GGUF key (prefix/suffix/middle are skipped there too)
            infill = _SpecialVocab(d, config, types=("prefix", "suffix", "middle", "eot"))
            for typ, tid in (
                ("prefix", 32007),
                ("suffix", 32008),
                ("middle", 32009),
                ("eot", 32010),
            ):
                infill.set_id(typ, tid)
            infill.add_to(out)
        if config.get("vocab_size") == 49152:  # granite small models, as the reference does
            out.add("ggml.add_bos_token", False, VT.BOOL)
    elif route == "phi3":
        tok_cfg = _json_if(d / "tokenizer_config.json") or {}
        if tok_cfg.get("tokenizer_class") == "GPT2Tokenizer":  # Phi-4
            _set_gpt2(out, d, config, pre)
        elif has_spm:
            _set_spm(out, d, config, phi3=True)
        else:
            raise _missing(d, "tokenizer.model (or a GPT2Tokenizer tokenizer.json)")
    elif route in ("glm", "glm4"):
        if not has_json:
            raise _missing(d, "tokenizer.json")
        _set_glm(out, d, config, pre, _GLM_SPECIALS if route == "glm" else _GLM4_SPECIALS)
    elif route == "gemma4":
        if not has_json:
            raise _missing(d, "tokenizer.json")
        _set_gemma4(out, d, config)
    elif route == "jamba":
        # JambaModel.set_vocab: SentencePiece, else LlamaHfVocab without a space prefix
        if has_spm:
            _set_spm(out, d, config)
        elif _llama_hf_applies(d):
            _set_llama_hf(out, d, config)
            out.add("ggml.add_space_prefix", False, VT.BOOL)
        elif has_json:
            raise E.TokenizerInconsistent(
                "Jamba without tokenizer.model needs a byte-fallback BPE tokenizer.json",
                path=d / "tokenizer.json",
                field="model",
                expected="BPE with byte_fallback and a Sequence decoder",
                found="another tokenizer",
            )
        else:
            raise _missing(d, "tokenizer.model or tokenizer.json")
    elif route == "ernie":
        # Ernie4_5Model.set_vocab: SentencePiece only, then the space-prefix flag (after it)
        if not has_spm:
            raise _missing(d, "tokenizer.model")
        _set_spm(out, d, config)
        cfg = _json_if(d / "tokenizer_config.json") or {}
        if (prefix := cfg.get("add_prefix_space")) is not None:
            out.add("ggml.add_space_prefix", prefix, VT.BOOL)
    elif route in ("gemma", "gemma3n"):
        if route == "gemma3n":
            # Gemma3NModel.set_vocab hides vocab_size_per_layer_input (the per-layer table's
            # rows) so that the vocabulary is padded to vocab_size
            config = {k: v for k, v in config.items() if k != "vocab_size_per_layer_input"}
        if has_spm:
            _set_spm(out, d, config)
            out.add("ggml.add_space_prefix", False, VT.BOOL)
        elif has_json:
            _set_gpt2(out, d, config, pre)
        else:
            raise _missing(d, "tokenizer.model or tokenizer.json")
    else:
        # spm_or_gpt2 (Qwen2/Qwen3): SentencePiece when present; gpt2: byte-level BPE
        if has_spm and route == "spm_or_gpt2":
            _set_spm(out, d, config)
        elif has_json:
            _set_gpt2(out, d, config, pre)
        else:
            raise _missing(
                d,
                "tokenizer.json" if route != "spm_or_gpt2" else "tokenizer.model or tokenizer.json",
            )
    return out.items()


def _set_qwen3_omni(out: _Entries, d: Path, config: dict) -> None:
    """Qwen3OmniMoeTextModel.set_vocab: the GPT-2 vocabulary, then BOS and EOS both the
    ``<|im_end|>`` id of ``tokenizer_config.json``'s ``added_tokens_decoder`` (in place)."""
    _set_gpt2(out, d, config)
    _im_end_bos_eos(out, d)


def _im_end_bos_eos(out: _Entries, d: Path) -> None:
    """BOS and EOS both the ``<|im_end|>`` id of ``tokenizer_config.json``'s
    ``added_tokens_decoder`` (in place)."""
    tok_cfg = _json_if(d / "tokenizer_config.json") or {}
    for tid, tok in (tok_cfg.get("added_tokens_decoder") or {}).items():
        if isinstance(tok, dict) and tok.get("content") == "<|im_end|>" and str(tid).isdecimal():
            out.add("ggml.bos_token_id", int(tid), VT.UINT32)
            out.add("ggml.eos_token_id", int(tid), VT.UINT32)
            break


MORE_ROUTES["qwen3omni"] = _set_qwen3_omni

#: Qwen3ASRTextModel's chat template (plain ChatML), written over the folder's
QWEN3_ASR_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _set_qwen3_asr(out: _Entries, d: Path, config: dict) -> None:
    """Qwen3ASRTextModel.set_vocab: the GPT-2 vocabulary, the ChatML template above (in
    place of the folder's), then BOS and EOS as Qwen3-Omni's (``<|im_end|>``)."""
    _set_gpt2(out, d, config)
    out.add("chat_template", QWEN3_ASR_CHAT_TEMPLATE, VT.STRING)
    _im_end_bos_eos(out, d)


MORE_ROUTES["qwen3asr"] = _set_qwen3_asr


def _set_muse_glimmer(out: _Entries, d: Path, config: dict) -> None:
    """MuseGlimmerModel.set_vocab: the GPT-2 vocabulary, then EOT the id transformers'
    ``convert_tokens_to_ids("<|eot|>")`` gives: the token's, else the unknown token's
    (transformers 5 takes it from tokenizer_config.json, not special_tokens_map.json;
    none when it names none in the vocabulary)."""
    _set_gpt2(out, d, config)
    hf = _HFTokenizer(d)
    tid = hf.vocab.get("<|eot|>")
    if tid is None:
        unk = hf.config.get("unk_token")
        unk = unk.get("content") if isinstance(unk, dict) else unk
        tid = hf.vocab.get(unk) if isinstance(unk, str) else None
    if tid is not None:
        out.add("ggml.eot_token_id", tid, VT.UINT32)


MORE_ROUTES["muse_glimmer"] = _set_muse_glimmer


def _set_dots3(out: _Entries, d: Path, config: dict) -> None:
    """Dots3NoteModel.set_vocab: the GPT-2 vocabulary, then EOT the added token
    ``<|endofassistant|>`` (set before the special vocabulary's own ids are written; the
    reference stops with a KeyError without it, so does this route, by name)."""
    tokens, types, pre, hf = _gpt2_vocab(d, config, None)
    out.add("ggml.model", "gpt2", VT.STRING)
    out.add("ggml.pre", pre, VT.STRING)
    out.add("ggml.tokens", tokens, VT.STRING)
    out.add("ggml.token_type", types, VT.INT32)
    special = _SpecialVocab(d, config, load_merges=True)
    added = hf.added_vocab
    if "<|endofassistant|>" not in added:
        raise E.TokenizerInconsistent(
            "the end-of-assistant token is not an added token",
            path=d / "tokenizer.json", field="added_tokens",
            expected="<|endofassistant|>", found="no such token",
        )  # fmt: skip
    special.set_id("eot", added["<|endofassistant|>"])
    special.add_to(out)


MORE_ROUTES["dots3"] = _set_dots3


def _set_qwen3tts(out: _Entries, d: Path, config: dict) -> None:
    """Qwen3TTSTalkerModel.set_vocab (its GPT-2 path): the text vocabulary with the codec
    rows appended as CONTROL tokens (:func:`~..arch.qwen3tts.codec_token_names`), the
    special vocabulary unbounded (its ids may name codec rows), and no chat template (the
    reference removes the folder's: chat is off for a TTS talker)."""
    tokens, types, pre, _ = _gpt2_vocab(d, config, None)
    codec = codec_token_names(config)
    out.add("ggml.model", "gpt2", VT.STRING)
    out.add("ggml.pre", pre, VT.STRING)
    out.add("ggml.tokens", tokens + codec, VT.STRING)
    out.add("ggml.token_type", types + [int(T.CONTROL)] * len(codec), VT.INT32)
    _SpecialVocab(d, config, load_merges=True).add_to(out)
    out.remove("chat_template")


MORE_ROUTES["qwen3tts"] = _set_qwen3tts
