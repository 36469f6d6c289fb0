"""safetensors: read, validate, write, slice and shard.

The byte layout and the validation rules are described in
:mod:`weightsmith.safetensors._header`; writing in
:mod:`weightsmith.safetensors._writer`; sharded checkpoints in
:mod:`weightsmith.safetensors._sharded`.
"""

from __future__ import annotations

from ._header import (
    MAX_HEADER_SIZE,
    Header,
    TensorInfo,
    parse_header,
    read_header,
    read_header_size,
)
from ._reader import SPECULATIVE, SafeSlice, load, load_file, safe_open
from ._sharded import (
    INDEX_NAME,
    WEIGHTS_NAME,
    Checkpoint,
    open_checkpoint,
    parse_size,
    read_index,
    save_sharded,
    shard_names,
    split_shards,
    write_index,
)
from ._spec import TensorSpec, deserialize, serialize, serialize_file
from ._writer import StreamWriter, build_header, save, save_file

__all__ = [
    "INDEX_NAME",
    "MAX_HEADER_SIZE",
    "SPECULATIVE",
    "WEIGHTS_NAME",
    "Checkpoint",
    "Header",
    "SafeSlice",
    "StreamWriter",
    "TensorInfo",
    "TensorSpec",
    "build_header",
    "deserialize",
    "load",
    "load_file",
    "open_checkpoint",
    "parse_header",
    "parse_size",
    "read_header",
    "read_header_size",
    "read_index",
    "safe_open",
    "save",
    "save_file",
    "save_sharded",
    "serialize",
    "serialize_file",
    "shard_names",
    "split_shards",
    "write_index",
]
