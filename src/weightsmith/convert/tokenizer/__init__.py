"""Tokenizers between Hugging Face folders and GGUF ``tokenizer.ggml.*`` metadata.

Two directions, both matched against llama.cpp:

* :func:`vocab_metadata` -- HF folder -> the ``tokenizer.ggml.*`` key/value list that
  llama.cpp's ``convert_hf_to_gguf.py`` writes for it (same keys, order, values and
  GGUF types), for the architectures of the HF -> GGUF registry;
* :func:`hf_tokenizer_files` / :func:`write_hf_tokenizer` -- GGUF metadata ->
  ``tokenizer.json`` (the ``tokenizers`` library's JSON, written without it), ``tokenizer_config.json``
  and ``special_tokens_map.json`` that transformers loads;
* :func:`meta_tokenizer_metadata` -- Meta's original ``tokenizer.model`` (SentencePiece or
  tiktoken ranks) as that same metadata, for the Meta -> HF converter;
* :func:`tekken_metadata` -- Mistral's ``tekken.json`` as that metadata, for the
  ``--mistral-format`` route (read without mistral_common); :func:`mistral_vocab_metadata`
  also reads the SentencePiece ``tokenizer.model.v*`` of older Mistral folders;
* :func:`tokenizer_json_from_vocab_gguf` -- the latter applied to a vocab-only GGUF
  (such as llama.cpp's ``models/ggml-vocab-*.gguf``), to give test models a real tokenizer;
* the encoder vocabularies of :func:`vocab_metadata`, routes in modules of their own
  (registered on import): WordPiece (``bert``, :mod:`._wordpiece`) and Unigram
  SentencePiece (``t5``, :mod:`._unigram`).

HF -> GGUF reads tokenizers with ``tokenizers`` and ``sentencepiece``, optional
extras imported on first use; GGUF -> HF needs neither.
"""

from __future__ import annotations

from ._from_gguf import hf_tokenizer_files, tokenizer_json_from_vocab_gguf, write_hf_tokenizer
from ._hunyuan import set_hunyuan as set_hunyuan  # registers the hunyuan route
from ._meta import meta_tokenizer_metadata
from ._tekken import mistral_tokenizer_file, mistral_vocab_metadata, tekken_metadata
from ._to_gguf import TokenType, vocab_metadata
from ._unigram import set_t5 as set_t5  # registers the t5 (Unigram) route
from ._wordpiece import set_bert as set_bert  # registers the bert (WordPiece) route

__all__ = [
    "TokenType",
    "hf_tokenizer_files",
    "meta_tokenizer_metadata",
    "mistral_tokenizer_file",
    "mistral_vocab_metadata",
    "tekken_metadata",
    "tokenizer_json_from_vocab_gguf",
    "vocab_metadata",
    "write_hf_tokenizer",
]
