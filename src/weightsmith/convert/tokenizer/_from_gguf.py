"""``tokenizer.ggml.*`` metadata -> HF tokenizer files (tokenizer.json via the ``tokenizers`` library)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def hf_tokenizer_files(gguf_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """HF tokenizer files rebuilt from GGUF metadata (``GGUFFile.metadata`` or any mapping).

    Returns ``{"tokenizer.json": dict, "tokenizer_config.json": dict,
    "special_tokens_map.json": dict}`` (JSON-able dicts).  ``tokenizer.ggml.model``
    ``gpt2`` becomes a byte-level BPE with the pre-tokenizer of ``tokenizer.ggml.pre``;
    ``llama`` (SentencePiece) becomes a byte-fallback BPE with sentencepiece's
    normalizer and decoder.
    """
    raise NotImplementedError


def write_hf_tokenizer(gguf_metadata: Mapping[str, Any], folder: str | os.PathLike[str]) -> list[Path]:
    """Write :func:`hf_tokenizer_files` into ``folder`` (atomically, file by file); return the paths."""
    raise NotImplementedError


def tokenizer_json_from_vocab_gguf(
    path: str | os.PathLike[str], folder: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """:func:`hf_tokenizer_files` of the GGUF at ``path``; also written to ``folder`` when given."""
    raise NotImplementedError
