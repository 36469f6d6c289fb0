"""The GGUF byte layout (versions 1, 2 and 3) and its value types.

A GGUF file is, in order::

    magic        4 bytes  b"GGUF" (the same bytes in both byte orders)
    version      u32      1, 2 or 3
    n_tensors    u64      (u32 in v1)
    n_kv         u64      (u32 in v1)
    n_kv x KV:
        key      string
        type     u32      a GGUFValueType
        value    see below
    n_tensors x tensor info:
        name     string   (< 64 bytes; ggml's GGML_MAX_NAME)
        n_dims   u32      <= 4
        dims     n_dims x u64 (u32 in v1), innermost (row) first
        type     u32      a ggml type number (weightsmith.dtypes.GGML)
        offset   u64      relative to the data section, a multiple of the alignment
    padding      zeros up to a multiple of the alignment
    data         tensor bytes, each padded with zeros to the alignment

where ``string`` is a u64 byte length (u32 in v1) followed by that many UTF-8
bytes, no terminator, and a value is

* a scalar: u8 i8 u16 i16 u32 i32 f32 u64 i64 f64, or bool (one byte, 0/1);
* a string;
* an array: element type u32, count u64 (u32 in v1), then ``count``
  elements, each encoded like a value of that type *without* its own type
  tag (an element of type ARRAY is again ``type, count, elements``).

Every multi-byte number after the magic uses the file's byte order.  Version
3 added big-endian files; they are recognised because their version field,
read little-endian, has zero low 16 bits.  The alignment is 32 unless the KV
``general.alignment`` (a u32, power of two) says otherwise.  The data section
starts at the first multiple of the alignment at or after the end of the
tensor infos.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_NAME = 64  # GGML_MAX_NAME: a tensor name must be shorter
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NESTING = 8  # arrays of arrays deeper than this are refused
INT64_MAX = (1 << 63) - 1

KEY_ALIGNMENT = "general.alignment"
KEY_ARCHITECTURE = "general.architecture"
KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS = "split.tensors.count"


class GGUFValueType(IntEnum):
    """The 13 GGUF metadata value types (numbers as stored in the file)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


VT = GGUFValueType

# struct code (no byte-order prefix) of every fixed-size type
STRUCT_CODE: dict[GGUFValueType, str] = {
    VT.UINT8: "B",
    VT.INT8: "b",
    VT.UINT16: "H",
    VT.INT16: "h",
    VT.UINT32: "I",
    VT.INT32: "i",
    VT.FLOAT32: "f",
    VT.BOOL: "B",
    VT.UINT64: "Q",
    VT.INT64: "q",
    VT.FLOAT64: "d",
}
SIZE: dict[GGUFValueType, int] = {t: struct.calcsize(c) for t, c in STRUCT_CODE.items()}
NUMPY: dict[GGUFValueType, np.dtype] = {
    t: np.dtype(c if t is not VT.BOOL else "u1") for t, c in STRUCT_CODE.items()
}

# short names accepted wherever a type is given, and printed by summaries
SHORT_NAME: dict[GGUFValueType, str] = {
    VT.UINT8: "u8",
    VT.INT8: "i8",
    VT.UINT16: "u16",
    VT.INT16: "i16",
    VT.UINT32: "u32",
    VT.INT32: "i32",
    VT.FLOAT32: "f32",
    VT.BOOL: "bool",
    VT.STRING: "str",
    VT.ARRAY: "arr",
    VT.UINT64: "u64",
    VT.INT64: "i64",
    VT.FLOAT64: "f64",
}
_BY_NAME: dict[str, GGUFValueType] = {}
for _t, _s in SHORT_NAME.items():
    _BY_NAME[_s] = _t
    _BY_NAME[_t.name.lower()] = _t
_BY_NAME.update({"string": VT.STRING, "array": VT.ARRAY, "float": VT.FLOAT32, "double": VT.FLOAT64})

# numpy dtype kind+size -> GGUF type, for arrays and numpy scalars
FROM_NUMPY: dict[tuple[str, int], GGUFValueType] = {
    ("u", 1): VT.UINT8,
    ("i", 1): VT.INT8,
    ("u", 2): VT.UINT16,
    ("i", 2): VT.INT16,
    ("u", 4): VT.UINT32,
    ("i", 4): VT.INT32,
    ("f", 4): VT.FLOAT32,
    ("b", 1): VT.BOOL,
    ("u", 8): VT.UINT64,
    ("i", 8): VT.INT64,
    ("f", 8): VT.FLOAT64,
}


class MetaType(NamedTuple):
    """The GGUF type of a metadata value.

    ``type`` is the value's own type; for arrays ``element`` is the element
    type, itself a :class:`MetaType` when the elements are arrays (taken from
    the first inner array, as gguf-py does), else ``None``.
    """

    type: GGUFValueType
    element: MetaType | None = None

    def __str__(self) -> str:
        if self.type is VT.ARRAY:
            return f"arr[{self.element}]" if self.element is not None else "arr"
        return SHORT_NAME[self.type]


def value_type(t: GGUFValueType | int | str) -> GGUFValueType:
    """A GGUFValueType from itself, its number, or a name such as ``"u32"`` / ``"UINT32"``."""
    if isinstance(t, GGUFValueType):
        return t
    if isinstance(t, str):
        try:
            return _BY_NAME[t.lower()]
        except KeyError:
            raise ValueError(f"unknown GGUF value type name {t!r}") from None
    return GGUFValueType(int(t))


def ggml_n_dims(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The dims ggml stores for ``dims`` (ggml order): trailing 1s dropped, at least one.

    libllama writes tensor infos this way (``gguf_add_tensor`` keeps ``ggml_n_dims``
    dims), so files it rewrites (split, merge, quantize) lose the 1s a converter wrote.
    """
    d = list(dims) or [1]
    while len(d) > 1 and d[-1] == 1:
        d.pop()
    return tuple(d)


def pad(n: int, alignment: int) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return (n + alignment - 1) // alignment * alignment
