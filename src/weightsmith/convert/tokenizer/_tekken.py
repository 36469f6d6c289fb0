"""Mistral's ``tekken.json`` -> ``tokenizer.ggml.*`` metadata, as llama.cpp's
``convert_hf_to_gguf.py --mistral-format`` writes it, read without mistral_common.

The reference goes through gguf-py's ``MistralVocab`` over mistral_common's
``Tekkenizer``; the file is plain JSON, so we read it ourselves::

    {"config": {"pattern": "<regex>", "default_vocab_size": V,
                "default_num_special_tokens": S, "version": "v3" | "v7" | "v11" | ...},
     "vocab": [{"rank": r, "token_bytes": "<base64>", "token_str": "..." | null}, ...],
     "special_tokens": [{"rank": i, "token_str": "<s>", "is_control": true}, ...]}

Token ids: the ``S`` special tokens first (``special_tokens``, or for files of
version v7 and older without that list mistral_common's fixed 20 ``<unk>``, ``<s>``,
``</s>``, ``[INST]``, ...; ids past the list are ``<SPECIAL_i>``), then the first
``V - S`` vocabulary entries (rank ``r`` is id ``S + r``; ranks 0..255 are the 256
single bytes).  The BPE merges are implied by the ranks, as in tiktoken (see
:func:`~weightsmith.convert.tokenizer._meta.tiktoken_merges`).

What the reference writes, in its order: ``model`` ``gpt2``, ``pre`` ``tekken``, the
merges, the ids of ``<s>``, ``</s>``, ``<unk>`` and ``<pad>``, the tokens (specials as
CONTROL, the rest NORMAL, byte-level characters as GPT-2 maps them), scores (all 0,
an INT32 array as gguf-py types them),
token types, ``<arch>.vocab_size`` = V, ``add_bos_token`` true, ``add_eos_token``
false, and a chat template: the folder's ``chat_template.jinja`` if present, else
llama.cpp's name for the tokenizer version (``mistral-v1``, ``mistral-v3-tekken``,
``mistral-v7-tekken``).  For v11 and v13 the reference embeds a template file that
ships with llama.cpp; we do not ship third-party templates, so those files get no
template unless the folder has ``chat_template.jinja``.

Older releases carry a SentencePiece model instead (:func:`mistral_vocab_metadata`
picks the file as mistral_common does: ``tekken.json`` first, else the last by name of
``*.model.v<N>[m<M>]`` / ``*.model``, its version from the suffix, ``.model`` = v1).
The reference writes it as gguf-py's ``MistralVocab`` reads it: ``model`` ``llama``, the
model's bos / eos / unk ids and pad (eos when the model has none), every piece with its
score and type (unknown, control, unused, byte, else normal: no added tokens), the
vocabulary size, add_bos true / add_eos false, and the chat template:
``chat_template.jinja``, else ``mistral-v1`` / ``mistral-v3`` / ``mistral-v7``.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any

from ... import errors as E
from ..._json import read_json
from ...gguf import GGUFValueType
from ._from_gguf import CONTROL, NORMAL
from ._meta import _byte_chars, tiktoken_merges
from ._to_gguf import _load_spm, _spm_pieces

__all__ = ["mistral_tokenizer_file", "mistral_vocab_metadata", "tekken_metadata"]

VT = GGUFValueType

#: mistral_common's TokenizerVersion values
VERSIONS = ("v1", "v2", "v3", "v7", "v11", "v13", "v15")
#: the special tokens of tekken files (v7 and older) that do not list them
_DEFAULT_SPECIALS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)  # fmt: skip
# llama.cpp's built-in template names by tokenizer version (MistralModel)
_TEMPLATE_NAMES = {"v1": "mistral-v1", "v3": "mistral-v3-tekken", "v7": "mistral-v7-tekken"}


def _bad(path: Path, what: str, field: str, expected: str, found: Any) -> E.TokenizerInconsistent:
    return E.TokenizerInconsistent(what, path=path, field=field, expected=expected, found=found)


def _int(d: dict, key: str, path: Path, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _bad(path, "tekken.json field is not a count", f"{where}.{key}", "an integer >= 0", v)
    return v


def _specials(tj: dict, version: str, n_special: int, path: Path) -> list[str]:
    given = tj.get("special_tokens")
    if given is None:
        if VERSIONS.index(version) > VERSIONS.index("v7"):
            raise _bad(path, "tekken.json lists no special tokens", "special_tokens",
                       f"a list (required from {version})", "nothing")  # fmt: skip
        names = list(_DEFAULT_SPECIALS)
    else:
        if not isinstance(given, list):
            raise _bad(path, "special_tokens is not a list", "special_tokens", "a list",
                       type(given).__name__)  # fmt: skip
        names = []
        for i, t in enumerate(given):
            ok = isinstance(t, dict) and isinstance(t.get("token_str"), str)
            if not ok or t.get("rank") != i:
                raise _bad(path, "special token out of order or malformed",
                           f"special_tokens[{i}]", f"{{rank: {i}, token_str: ...}}", repr(t)[:80])  # fmt: skip
            names.append(t["token_str"])
    if len(set(names)) != len(names) or len(names) > n_special:
        raise _bad(path, "special tokens repeat or exceed default_num_special_tokens",
                   "special_tokens", f"at most {n_special} distinct tokens", len(names))  # fmt: skip
    return names + [f"<SPECIAL_{i}>" for i in range(len(names), n_special)]


def _vocab(tj: dict, n_inner: int, path: Path) -> list[bytes]:
    vocab = tj.get("vocab")
    if not isinstance(vocab, list) or len(vocab) < n_inner:
        found = len(vocab) if isinstance(vocab, list) else type(vocab).__name__
        raise _bad(path, "tekken.json vocab is shorter than the vocabulary it declares",
                   "vocab", f">= {n_inner} entries (default_vocab_size - specials)", found)  # fmt: skip
    out: list[bytes] = []
    seen: set[bytes] = set()
    for i, x in enumerate(vocab[:n_inner]):
        try:
            ok = isinstance(x, dict) and x.get("rank") == i
            token = base64.b64decode(x["token_bytes"], validate=True) if ok else None
        except (KeyError, TypeError, binascii.Error, ValueError):
            token = None
        if token is None or token in seen or (i < 256 and token != bytes([i])):
            raise _bad(path, "tekken.json vocab entry is malformed", f"vocab[{i}]",
                       f"rank {i}, distinct base64 token_bytes" + (f" = byte {i}" if i < 256 else ""),
                       repr(x)[:80])  # fmt: skip
        seen.add(token)
        out.append(token)
    return out


def tekken_metadata(folder: Path, arch: str = "llama") -> list[tuple[str, Any, GGUFValueType]]:
    """The ``tokenizer.*`` rows (and ``<arch>.vocab_size``) for ``folder/tekken.json``.

    Raises TokenizerFilesMissing or TokenizerInconsistent (named, before anything is
    written) where mistral_common would fail an assertion or llama.cpp a lookup.
    """
    path = folder / "tekken.json"
    if not path.is_file():
        raise E.TokenizerFilesMissing(
            "no tekken.json in Mistral's original folder (or pass tokenizer=False)",
            path=path, expected="tekken.json",
            found=", ".join(sorted(p.name for p in folder.iterdir() if "token" in p.name))
            or "no tokenizer file",
        )  # fmt: skip
    tj = read_json(path, E.TokenizerInconsistent, "tekken.json")
    cfg = tj.get("config") if isinstance(tj, dict) else None
    if not isinstance(cfg, dict):
        raise _bad(path, "tekken.json has no config", "config", "an object", "nothing")
    version = cfg.get("version")
    if version not in VERSIONS:
        raise _bad(path, "unknown tekken tokenizer version", "config.version",
                   "one of " + ", ".join(VERSIONS), repr(version))  # fmt: skip
    n_vocab = _int(cfg, "default_vocab_size", path, "config")
    n_special = _int(cfg, "default_num_special_tokens", path, "config")
    if n_special > n_vocab:
        raise _bad(path, "more special tokens than tokens", "config.default_num_special_tokens",
                   f"<= default_vocab_size={n_vocab}", n_special)  # fmt: skip
    specials = _specials(tj, version, n_special, path)
    ids = {}
    for name in ("<s>", "</s>", "<unk>", "<pad>"):
        if name not in specials:
            raise _bad(path, "tekken.json lacks a special token llama.cpp needs",
                       "special_tokens", name, "absent")  # fmt: skip
        ids[name] = specials.index(name)
    ranks = _vocab(tj, n_vocab - n_special, path)
    chars = _byte_chars()
    tokens = ["".join(chars[b] for b in t) for t in ranks]
    merges = tiktoken_merges(tokens)
    known = set(tokens)
    for i, t in enumerate(tokens[256:], 256):  # gguf-py raises on such a token
        if not any(t[:k] in known and t[k:] in known for k in range(1, len(t))):
            raise _bad(path, "a token is not the merge of two tokens", f"vocab[{i}]",
                       "two lower-ranked tokens that join into it", repr(ranks[i])[:40])  # fmt: skip
    template = _chat_template(folder, _TEMPLATE_NAMES.get(version))
    rows: list[tuple[str, Any, GGUFValueType]] = [
        ("tokenizer.ggml.model", "gpt2", VT.STRING),
        ("tokenizer.ggml.pre", "tekken", VT.STRING),
        ("tokenizer.ggml.merges", merges, VT.STRING),
        ("tokenizer.ggml.bos_token_id", ids["<s>"], VT.UINT32),
        ("tokenizer.ggml.eos_token_id", ids["</s>"], VT.UINT32),
        ("tokenizer.ggml.unknown_token_id", ids["<unk>"], VT.UINT32),
        ("tokenizer.ggml.padding_token_id", ids["<pad>"], VT.UINT32),
        ("tokenizer.ggml.tokens", specials + tokens, VT.STRING),
        # gguf-py types the reference's int 0 scores as an INT32 array (llama.cpp reads
        # the array's bits as float: 0 is 0.0 either way)
        ("tokenizer.ggml.scores", [0] * n_vocab, VT.INT32),
        ("tokenizer.ggml.token_type", [CONTROL] * n_special + [NORMAL] * len(tokens), VT.INT32),
        (f"{arch}.vocab_size", n_vocab, VT.UINT32),
        ("tokenizer.ggml.add_bos_token", True, VT.BOOL),
        ("tokenizer.ggml.add_eos_token", False, VT.BOOL),
    ]
    if template is not None:
        rows.append(("tokenizer.chat_template", template, VT.STRING))
    return rows


def _chat_template(folder: Path, builtin: str | None) -> str | None:
    """The folder's chat_template.jinja, else the name of llama.cpp's built-in template for
    the tokenizer's version (None: no template), as MistralModel picks it."""
    path = folder / "chat_template.jinja"
    return path.read_text(encoding="utf-8") if path.is_file() else builtin


# llama.cpp's built-in template names for SentencePiece tokenizers (MistralModel)
_SPM_TEMPLATE_NAMES = {"v1": "mistral-v1", "v3": "mistral-v3", "v7": "mistral-v7"}
# mistral_common's valid names: all the suffixes are ".model" or ".model.v<N>[m<M>]"
_SPM_FILE = re.compile(r"[^.]+\.model(\.(v\d+)(m\d+)?)?")


def _spm_file(folder: Path) -> tuple[Path, str] | None:
    """mistral_common's pick among SentencePiece files (the last by name) and its version."""
    found = []
    for p in folder.iterdir():
        mt = _SPM_FILE.fullmatch(p.name)
        if mt and p.is_file() and (mt.group(2) or "v1") in VERSIONS:
            found.append((p.name, p, mt.group(2) or "v1"))
    return max(found)[1:] if found else None


def mistral_tokenizer_file(folder: Path) -> Path:
    """The tokenizer file of Mistral's folder as mistral_common picks it: tekken.json,
    else a SentencePiece model; TokenizerFilesMissing (naming tekken.json) if none.
    Nothing is parsed."""
    tekken = folder / "tekken.json"
    spm = None if tekken.is_file() else _spm_file(folder)
    if spm is not None:
        return spm[0]
    if not tekken.is_file():
        tekken_metadata(folder)  # raises the named error for a folder without a tokenizer
    return tekken


def mistral_vocab_metadata(folder: Path, arch: str = "llama") -> list[tuple[str, Any, VT]]:
    """The ``tokenizer.*`` rows (and ``<arch>.vocab_size``) of Mistral's folder: its
    ``tekken.json`` (:func:`tekken_metadata`) or, without one, its SentencePiece model."""
    spm = None if (folder / "tekken.json").is_file() else _spm_file(folder)
    if spm is None:
        return tekken_metadata(folder, arch)  # or the named error for no tokenizer
    path, version = spm
    sp = _load_spm(path)
    n = sp.vocab_size()
    tokens, scores, types = _spm_pieces(sp, n)
    template = _chat_template(folder, _SPM_TEMPLATE_NAMES.get(version))
    rows: list[tuple[str, Any, VT]] = [
        ("tokenizer.ggml.model", "llama", VT.STRING),
        ("tokenizer.ggml.bos_token_id", sp.bos_id(), VT.UINT32),
        ("tokenizer.ggml.eos_token_id", sp.eos_id(), VT.UINT32),
        ("tokenizer.ggml.unknown_token_id", sp.unk_id(), VT.UINT32),
        ("tokenizer.ggml.padding_token_id", sp.eos_id() if sp.pad_id() < 0 else sp.pad_id(),
         VT.UINT32),
        ("tokenizer.ggml.tokens", tokens, VT.STRING),
        ("tokenizer.ggml.scores", scores, VT.FLOAT32),
        ("tokenizer.ggml.token_type", [int(t) for t in types], VT.INT32),
        (f"{arch}.vocab_size", n, VT.UINT32),
        ("tokenizer.ggml.add_bos_token", True, VT.BOOL),
        ("tokenizer.ggml.add_eos_token", False, VT.BOOL),
    ]  # fmt: skip
    if template is not None:
        rows.append(("tokenizer.chat_template", template, VT.STRING))
    return rows
