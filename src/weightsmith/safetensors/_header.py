"""The safetensors header: byte layout and the one validation pass.

A safetensors file is laid out as::

    offset 0        8-byte little-endian unsigned integer N (header size)
    offset 8        N bytes of UTF-8 JSON, starting with "{", optionally
                    padded at the end with spaces (0x20) -- writers pad so
                    that 8 + N is a multiple of 8
    offset 8 + N    the data section: every tensor's bytes, back to back,
                    to the end of the file

The JSON is one object.  The optional key ``"__metadata__"`` maps strings to
strings.  Every other key is a tensor name whose value is an object with
exactly these three fields::

    {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}

``data_offsets`` are relative to the start of the data section.  Elements
are little-endian, in C (row-major) order.  Sub-byte types (F4, F6_*) are
packed: element ``i`` occupies bits ``[i*bits, (i+1)*bits)`` of the span,
least significant bit first, and a tensor must end on a byte boundary.

Rules enforced here, each with its own exception (see
:mod:`weightsmith.errors`): file >= 8 bytes; N <= 100,000,000; 8 + N within
the file; UTF-8; first byte ``{``; padding is spaces only; nesting depth
bounded; a JSON object; no duplicate keys in the top object, an entry or
``__metadata__`` (even identical);
``__metadata__`` at most once and str -> str; tensor entries have exactly
the three fields; dtype is a known, case-sensitive code; shape entries are
integers in [0, 2**64); offsets are two integers in [0, 2**64) with
begin <= end; shape x bits computed without overflow, a whole number of
bytes, equal to end - begin; sorted by offset the tensors tile the data
section from 0 with no hole or overlap and end exactly at the end of file.

The rules are checked in one linear pass by the compiled validator
(``csrc/st_header.c``, in the style of HF's ``tensor.rs``), which reports the
first broken rule in this order: invalid UTF-8 anywhere; nesting past
MAX_DEPTH anywhere; the first JSON syntax error (worded as Python's json);
padding; the entries' rules in JSON order; coverage.  It keeps per tensor its
name, dtype, dims and offsets in C arrays; this module turns its verdict into
the named error and serves the tables as a lazy mapping.

These functions take bytes or an open file, never a path to open: the remote
reader runs them on ranges fetched over HTTP.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .. import errors as E
from .._native import st_header as _c
from ..dtypes import SAFETENSORS, DType

__all__ = [
    "MAX_DEPTH",
    "MAX_HEADER_SIZE",
    "Header",
    "TensorInfo",
    "parse_header",
    "read_header",
    "read_header_size",
]

MAX_HEADER_SIZE = 100_000_000
# serde_json (HF's parser) stops at 128 levels; a valid header needs only 3.
MAX_DEPTH = 128  # also in csrc/st_header.c
_FIELDS = ("dtype", "shape", "data_offsets")
_CODES = tuple(SAFETENSORS)
_DTYPES = tuple(SAFETENSORS.values())
# name hashing is salted per process, so no file can aim at collisions
_c.configure(
    tuple(c.encode() for c in _CODES),
    tuple(d.bits for d in _DTYPES),
    int.from_bytes(os.urandom(8), "little"),
)


class TensorInfo:
    """Where one tensor lives: dtype, shape and offsets in the data section."""

    __slots__ = ("data_offsets", "dtype", "n_elements", "name", "shape")

    def __init__(
        self,
        name: str,
        dtype: DType,
        shape: tuple[int, ...],
        data_offsets: tuple[int, int],
        n_elements: int,
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.data_offsets = data_offsets
        self.n_elements = n_elements

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]

    def __repr__(self) -> str:
        return (
            f"TensorInfo({self.name!r}, {self.dtype.name}, shape={list(self.shape)}, "
            f"data_offsets={list(self.data_offsets)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorInfo):
            return NotImplemented
        return (self.name, self.dtype.name, self.shape, self.data_offsets) == (
            other.name,
            other.dtype.name,
            other.shape,
            other.data_offsets,
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass
class Header:
    """A validated header.  ``tensors`` keeps the order of the JSON."""

    metadata: dict[str, str] | None
    tensors: Mapping[str, TensorInfo]  # a lazy _Tensors
    header_size: int  # N, padding included

    @property
    def data_start(self) -> int:
        return 8 + self.header_size

    @property
    def data_size(self) -> int:
        return self.tensors.data_size  # type: ignore[attr-defined]

    @property
    def file_size(self) -> int:
        return self.data_start + self.data_size

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors.values())


def read_header_size(prefix: bytes, file_size: int, path=None) -> int:
    """Validate the first 8 bytes of a file of ``file_size`` bytes; return N.

    ``prefix`` may be the whole file or any prefix of at least 8 bytes.
    """
    where = dict(path=path, field="header size", offset=0)
    if file_size < 8:
        raise E.FileTooSmall("file too small for a safetensors header", **where,
                             expected="at least 8 bytes", found=f"{file_size} bytes")  # fmt: skip
    if len(prefix) < 8:
        raise E.NeedMoreData(8)
    n = int.from_bytes(prefix[:8], "little")
    if n > MAX_HEADER_SIZE:
        raise E.HeaderTooLarge("header size too large", **where,
                               expected=f"at most {MAX_HEADER_SIZE}", found=n)  # fmt: skip
    if 8 + n > file_size:
        raise E.HeaderOutOfBounds("header runs past the end of the file", **where,
                                  expected=f"8 + N <= file size {file_size}", found=f"8 + {n} = {8 + n}")  # fmt: skip
    return n


def parse_header(header: bytes | memoryview, file_size: int, path=None) -> Header:
    """Validate the N header bytes (after the 8-byte size) of a file.

    ``file_size`` is the size of the whole file; it is needed to check that
    the tensors cover the data section exactly.  Raises the named
    :mod:`weightsmith.errors` class of the first rule the header breaks.
    Never touches the filesystem (the remote reader calls it on bytes).
    """
    n = memoryview(header).nbytes
    got = _c.parse(header, -1, n, file_size, _max_digits(), 0)
    return _verdict(got, lambda a, e: bytes(header[a:e]), n, file_size, path)


def read_header(fd: int, n: int, file_size: int, path=None, *, window: int = 1 << 20) -> Header:
    """parse_header for the N header bytes of the open file ``fd``, read
    ``window`` bytes at a time: a big header is never held whole, so a
    broken one costs a window of memory, not its size."""
    got = _c.parse(None, fd, n, file_size, _max_digits(), window)
    return _verdict(got, lambda a, e: os.pread(fd, e - a, 8 + a), n, file_size, path)


def _max_digits() -> int:
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0


def _verdict(got: tuple, text, n: int, file_size: int, path) -> Header:
    if type(got[0]) is int:
        raise _error(got, text, n, file_size, path)
    table, metadata, count = got
    return Header(metadata, _Tensors(table, count, file_size - 8 - n), n)


class _Tensors(Mapping):
    """name -> TensorInfo over the validator's tables (JSON order); names
    and infos are made only when asked for."""

    def __init__(self, table, count: int, data_size: int) -> None:
        self._table = table
        self._count = count
        self.data_size = data_size
        self._names: list[str] | None = None
        self._plan: tuple | None = None
        self._made: dict[str, TensorInfo] = {}

    def __len__(self) -> int:
        return self._count

    def names(self) -> list[str]:
        """Every name, in JSON order."""
        if self._names is None:
            self._names = _c.plan(self._table, None)
        return self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _find(self, name: object) -> int:
        if type(name) is not str:
            return -1
        return _c.find(self._table, name.encode("utf-8", "surrogatepass"))

    def __contains__(self, name: object) -> bool:
        return name in self._made or self._find(name) >= 0

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._made.get(name)
        if info is None:
            i = self._find(name)
            if i < 0:
                raise KeyError(name)
            code, shape, begin, end, count = _c.info(self._table, i)
            info = self._made[name] = TensorInfo(name, _DTYPES[code], shape, (begin, end), count)
        return info

    def plan(self) -> tuple[list, list, list, list, list]:
        """Every tensor in data order: names, dtype codes, shape texts ("2,3",
        "" for a scalar), begins and ends (for readers that make all tensors)."""
        if self._plan is None:  # kept: a memoized header is loaded again and again
            self._plan = _c.plan(self._table, _CODES)
        return self._plan

    def __eq__(self, other: object) -> bool:
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:
        return f"<{len(self)} tensors>"


# --------------------------------------------------------------------------- errors
#
# The validator reports (code, name, key, a1, e1, a2, e2, x, y): code names a
# row of _RULES (the enum of csrc/st_header.c, in order), name and key are
# decoded, [a, e) spans of JSON values in the header (re-read here for the
# message), x and y offsets, counts or a dtype index.  Each row gives the
# class, what broke, and (field, offset, expected, found) from a report.

_JSON = dict(
    value="Expecting value",
    prop="Expecting property name enclosed in double quotes",
    colon="Expecting ':' delimiter",
    comma="Expecting ',' delimiter",
    unterminated="Unterminated string starting at",
    control="Invalid control character at",
    escape="Invalid \\escape",
    uescape="Invalid \\uXXXX escape",
)
# the kind of a top-level JSON value, by the validator's value type
_TOP_KIND = ("an object", "a list", "a string", "a int", "a int", "", "a float", "a boolean")
_TOP_KIND += ("a boolean", "null")
_BITS = "product of shape x {d.bits} bits"
_T, _SHAPE = "tensor {name!r}", "tensor {name!r}.shape"
_RULES = {
    "io": (E.TruncatedData, "file ended while reading (did it shrink?)",
           None, "{at}", "{more} more header bytes", "end of file"),
    "utf8": (E.HeaderNotUTF8, "header is not valid UTF-8", "header", "{at}", "UTF-8", "byte 0x{byte:02x}"),
    "not_brace": (E.HeaderNotBrace, "header does not begin with '{{'", "header", "8", "'{{'", "{first}"),
    "not_object": (E.HeaderNotObject, "header is not a JSON object",
                   "header", "8", "a JSON object", "{top_kind}"),
    "deep": (E.HeaderTooDeep, "header JSON nests too deeply", "header", "{at}",
             f"nesting depth <= {MAX_DEPTH}", "depth {y}"),
    **{k: (E.InvalidHeaderJSON, f"header is not valid JSON ({m})", "header", "{at}",
           "a JSON object", "{chars20!r}") for k, m in _JSON.items()},
    "padding": (E.InvalidHeaderPadding, "header padding is not spaces only", "header padding",
                "{at}", "spaces (0x20)", "{chars10!r}"),
    "dup_meta": (E.DuplicateMetadata, "__metadata__ appears more than once", "__metadata__",
                 None, "at most once", "twice"),
    "meta": (E.InvalidMetadata, "__metadata__ must map strings to strings", "__metadata__",
             None, "an object", "{kind1}"),
    "meta_key": (E.DuplicateMetadataKey, "duplicate key in __metadata__",
                 "__metadata__[{key!r}]", None, "unique keys", "{key!r} twice"),
    "meta_value": (E.InvalidMetadata, "__metadata__ values must be strings",
                   "__metadata__[{key!r}]", None, "a string", "{kind1}"),
    "dup_name": (E.DuplicateTensorName, "tensor name appears more than once", _T, None,
                 "unique tensor names", "{name!r} twice"),
    "entry": (E.InvalidTensorEntry, "tensor entry is not an object", _T, None,
              "an object with dtype, shape, data_offsets", "{kind1}"),
    "unknown_field": (E.UnknownTensorField, "unknown field in tensor entry", _T, None,
                      "only dtype, shape, data_offsets", "{key!r}"),
    "dup_field": (E.DuplicateTensorField, "duplicate field in tensor entry", _T, None,
                  "{key!r} once", "{key!r} twice"),
    "missing_field": (E.MissingTensorField, "tensor entry lacks a field", _T, None,
                      "a {field!r} field", "none"),
    "dtype": (E.UnknownDtype, "unknown dtype", _T + ".dtype", None,
              "one of " + ", ".join(_CODES), "{value1!r}"),
    "shape": (E.InvalidShape, "invalid shape", _SHAPE, None,
              "a list of integers in [0, 2**64)", "{dump1}"),
    "count_overflow": (E.SizeOverflow, "element count overflows u64", _SHAPE, None,
                       "product of shape < 2**64", "{value1}"),
    "offsets": (E.InvalidOffsets, "invalid data_offsets", _T + ".data_offsets", None,
                "[begin, end], integers in [0, 2**64), begin <= end", "{dump1}"),
    "bits_overflow": (E.SizeOverflow, "bit size overflows u64", _SHAPE, None,
                      _BITS + " < 2**64", "{value1}"),
    "misaligned": (E.MisalignedSubByte, "sub-byte tensor does not end on a byte boundary", _SHAPE,
                   None, "{count} x {d.bits} bits to be a multiple of 8", "{bits} bits"),
    "size": (E.TensorSizeMismatch, "byte span does not match dtype and shape", _T, None,
             "{nbytes} bytes ({d.name} x {value1})",
             "{span} bytes (data_offsets [{begin}, {end}])"),
    "hole": (E.DataHole, "gap before tensor", _T, "{data_at}", "data_offsets begin {y}", "{x}"),
    "overlap": (E.DataOverlap, "tensor overlaps the previous one", _T, "{data_at}",
                "data_offsets begin {y}", "{x}"),
    "trailing": (E.TrailingBytes, "bytes after the last tensor", "data section", "{data_at}",
                 "file size {data_at}", "file size {file_size}"),
    "truncated": (E.TruncatedData, "file ends before the last tensor", _T, "{file_size}",
                  "file size {data_start_x}", "file size {file_size}"),
}  # fmt: skip
_ORDER = [
    *[
        "ok",
        "io",
        "utf8",
        "not_brace",
        "not_object",
        "deep",
        "value",
        "prop",
        "colon",
        "comma",
        "unterminated",
        "control",
        "escape",
    ],
    *[
        "uescape",
        "padding",
        "dup_meta",
        "meta",
        "meta_key",
        "meta_value",
        "dup_name",
        "entry",
        "unknown_field",
    ],
    *[
        "dup_field",
        "missing_field",
        "dtype",
        "shape",
        "count_overflow",
        "offsets",
        "bits_overflow",
        "misaligned",
    ],
    *["size", "hole", "overlap", "trailing", "truncated"],
]


def _chars(r, k: int) -> str:
    """k characters of the (valid UTF-8) header from offset x."""
    return r["text"](r["x"], min(r["n"], r["x"] + 4 * k)).decode("utf-8", "ignore")[:k]


def _value(r, a: str, e: str):
    """The JSON value at span [a, e) of a report, as json reads it."""
    return json.loads(r["text"](r[a], r[e]), parse_int=_int_or_huge)


# what a message may name, derived from a report on first use
_DERIVED = {
    "name": lambda r: r["name_b"].decode("utf-8", "surrogatepass"),
    "key": lambda r: r["key_b"].decode("utf-8", "surrogatepass"),
    "at": lambda r: 8 + r["x"],
    "more": lambda r: r["n"] - r["x"],
    "byte": lambda r: r["text"](r["x"], r["x"] + 1)[0],
    "first": lambda r: (
        repr(r["text"](0, 4).decode("utf-8", "ignore")[:1]) if r["n"] else "an empty header"
    ),
    "top_kind": lambda r: _TOP_KIND[r["x"]],
    "chars20": lambda r: _chars(r, 20),
    "chars10": lambda r: _chars(r, 10),
    "value1": lambda r: _value(r, "a1", "e1"),
    "kind1": lambda r: _kind(r["value1"]),
    "dump1": lambda r: _dump(r["value1"]),
    "field": lambda r: _FIELDS[r["x"]],
    "d": lambda r: _DTYPES[r["x"]],
    "count": lambda r: math.prod(r["value1"]),
    "bits": lambda r: r["count"] * r["d"].bits,
    "nbytes": lambda r: r["bits"] >> 3,
    "begin": lambda r: _value(r, "a2", "e2")[0],
    "end": lambda r: _value(r, "a2", "e2")[1],
    "span": lambda r: r["end"] - r["begin"],
    "data_at": lambda r: 8 + r["n"] + r["x"],
    "data_start_x": lambda r: 8 + r["n"] + r["x"],
}


class _Report(dict):
    """A report's fields by name; derived ones are computed when a message asks."""

    def __missing__(self, k: str):
        v = self[k] = _DERIVED[k](self)
        return v


def _error(got: tuple, text, n: int, file_size: int, path) -> E.WeightsmithError:
    """The named error of the validator's report ``got``; ``text(a, e)``
    returns the header's bytes [a, e)."""
    cls, what, field, offset, expected, found = _RULES[_ORDER[got[0]]]
    fields = ("code", "name_b", "key_b", "a1", "e1", "a2", "e2", "x", "y")
    r = _Report(zip(fields, got), text=text, n=n, file_size=file_size)
    return cls(
        what.format_map(r),
        path=path,
        field=field and field.format_map(r),
        offset=offset and int(offset.format_map(r)),
        expected=expected.format_map(r),
        # a bare field keeps its type (an offset stays an int, a shape a list)
        found=r[found[1:-1]] if found in ("{x}", "{value1}") else found.format_map(r),
    )


class _Huge:
    """An integer literal longer than Python's int() digit limit (4300): it
    stands in for the number in messages."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"<a {self.digits}-digit integer>"


def _int_or_huge(text: str):
    try:
        return int(text)
    except ValueError:
        return _Huge(text)


def _kind(v) -> str:
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (_Huge, list)):
        return repr(v) if isinstance(v, _Huge) else "a list"
    if v is None or isinstance(v, (bool, str)):
        return "null" if v is None else "a boolean" if isinstance(v, bool) else "a string"
    return f"a {type(v).__name__}"


def _dump(v) -> str:
    if isinstance(v, dict):
        return "an object"
    try:
        return json.dumps(v, default=repr)  # repr: a _Huge stand-in
    except (TypeError, ValueError):
        return _kind(v)
