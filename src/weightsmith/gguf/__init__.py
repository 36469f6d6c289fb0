"""GGUF: lazy reader, streaming writer, metadata editing, llama.cpp-compatible split files.

The byte layout of GGUF v1-v3 is stated in :mod:`weightsmith.gguf._spec`.

* :func:`read` -> :class:`GGUFFile` (mmap, lazy metadata, zero-copy tensors; a URL:
  the header from growing prefixes, tensors fetched by range when asked for);
* :func:`parse` -> :class:`GGUFHeader` from a whole file or a prefix of one;
* :class:`Writer` -- streaming, atomic, byte-identical to gguf-py's GGUFWriter;
* :func:`edit`, :func:`split`, :func:`merge`.
"""

from __future__ import annotations

from ._edit import GGUFValue, edit, kv_types
from ._file import GGUFFile, read, shard_paths
from ._parse import GGUFHeader, Metadata, StringArray, TensorInfo, parse
from ._prefix import next_gguf_prefix, parse_gguf_prefix
from ._spec import DEFAULT_ALIGNMENT, GGUFValueType, MetaType, ggml_n_dims, value_type
from ._split import merge, split
from ._writer import Writer, encode_value, infer_type, resolve_type

__all__ = [
    "DEFAULT_ALIGNMENT",
    "GGUFFile",
    "GGUFHeader",
    "GGUFValue",
    "GGUFValueType",
    "MetaType",
    "Metadata",
    "StringArray",
    "TensorInfo",
    "Writer",
    "edit",
    "encode_value",
    "ggml_n_dims",
    "infer_type",
    "kv_types",
    "merge",
    "next_gguf_prefix",
    "parse",
    "parse_gguf_prefix",
    "read",
    "resolve_type",
    "shard_paths",
    "split",
    "value_type",
]
