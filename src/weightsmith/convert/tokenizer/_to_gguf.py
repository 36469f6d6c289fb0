"""HF tokenizer folder -> ``tokenizer.ggml.*`` metadata, as llama.cpp's converter writes it."""

from __future__ import annotations

import os
from enum import IntEnum
from typing import Any

from ...gguf import GGUFValueType

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


def vocab_metadata(model_dir: str | os.PathLike[str], config: dict) -> list[KV]:
    """The ``tokenizer.ggml.*`` entries llama.cpp's ``convert_hf_to_gguf.py`` writes for ``model_dir``.

    ``config`` is the parsed ``config.json`` (its ``architectures[0]`` picks the
    vocabulary path the reference takes for that architecture, its ``vocab_size``
    pads the vocabulary).  The list is in the order the reference adds the keys;
    each entry is ``(key, value, type)`` where ``type`` is the scalar type, or the
    element type of an array, ready for ``gguf.Writer.add(key, value, type)``.

    Raises TokenizerFilesMissing, TokenizerInconsistent, VocabLargerThanConfig,
    UnknownBPEPreTokenizer (all from :mod:`weightsmith.errors`).
    """
    raise NotImplementedError
