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

Rules enforced here, each with its own exception (see :mod:`weightsmith.errors`):
file >= 8 bytes; N <= 100,000,000; 8 + N within the file; UTF-8; first byte ``{``;
padding is spaces only; nesting depth bounded; a JSON object; no duplicate keys in
the top object, an entry or ``__metadata__`` (even identical); ``__metadata__`` at
most once and str -> str; tensor entries have exactly the three fields; dtype is a
known, case-sensitive code; shape entries are integers in [0, 2**64); offsets are
two integers in [0, 2**64) with begin <= end; shape x bits computed without
overflow, a whole number of bytes, equal to end - begin; sorted by offset the
tensors tile the data section from 0 with no hole or overlap and end exactly at
the end of file.

The validator (``csrc/st_header.c``, in the style of HF's ``tensor.rs``) reports
the first broken rule in this order: invalid UTF-8 anywhere; the first JSON syntax
error (worded as Python's json) or nesting past MAX_DEPTH, whichever comes first
(as serde_json); padding; duplicate names and the entries' rules in JSON order;
coverage.  This module turns its verdict into the named error (one table,
``_TABLE``) and serves its tables as a lazy mapping.  It takes bytes or an open
file, never a path: the remote reader runs it on ranges fetched over HTTP.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .. import errors as E
from .._native import st_header as _c
from ..dtypes import SAFETENSORS, DType

MAX_HEADER_SIZE = 100_000_000
# serde_json (HF's parser) stops at 128 levels; a valid header needs only 3.
MAX_DEPTH = 128  # also in csrc/st_header.c
_CODES = tuple(SAFETENSORS)
_DTYPES = tuple(SAFETENSORS.values())
# the dtype registry as the validator takes it: codes NUL-padded to 16 bytes, their bits
_REGISTRY = b"".join(c.encode().ljust(16, b"\0") for c in _CODES), bytes(d.bits for d in _DTYPES)


@dataclass(slots=True, repr=False)
class TensorInfo:
    """Where one tensor lives: dtype, shape and offsets in the data section."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]
    n_elements: int

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]

    def __repr__(self) -> str:
        return (
            f"TensorInfo({self.name!r}, {self.dtype.name}, shape={list(self.shape)}, "
            f"data_offsets={list(self.data_offsets)})"
        )


@dataclass
class Header:
    """A validated header.  ``tensors`` keeps the order of the JSON."""

    metadata: dict[str, str] | None
    tensors: Mapping[str, TensorInfo]  # a lazy _Tensors
    header_size: int  # N, padding included
    data_size: int

    @property
    def data_start(self) -> int:
        return 8 + self.header_size

    @property
    def file_size(self) -> int:
        return self.data_start + self.data_size

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors.values())


def read_header_size(prefix: bytes, file_size: int, path=None) -> int:
    """Validate the first 8 bytes of a file of ``file_size`` bytes; return N.

    ``prefix`` may be the whole file or any prefix of at least 8 bytes.
    """
    if file_size < 8:
        raise _error(-3, path, file_size=file_size)
    if len(prefix) < 8:
        raise E.NeedMoreData(8)
    n = int.from_bytes(prefix[:8], "little")
    if n > MAX_HEADER_SIZE or 8 + n > file_size:
        raise _error(-2 if n > MAX_HEADER_SIZE else -1, path, n=n, file_size=file_size)
    return n


def parse_header(header: bytes | memoryview, file_size: int, path=None) -> Header:
    """Validate the N header bytes (after the 8-byte size) of a file.

    ``file_size`` is the size of the whole file; it is needed to check that
    the tensors cover the data section exactly.  Raises the named
    :mod:`weightsmith.errors` class of the first rule the header breaks.
    Never touches the filesystem (the remote reader calls it on bytes).
    """
    n = memoryview(header).nbytes
    got = _c.parse(header, -1, n, file_size, 0, *_REGISTRY)
    return _verdict(got, lambda a, e: bytes(header[a:e]), n, file_size, path)


def read_header(fd: int, n: int, file_size: int, path=None, *, window: int = 1 << 20) -> Header:
    """parse_header for the N header bytes of the open file ``fd``, read
    ``window`` bytes at a time: a big header is never held whole, so a
    broken one costs a window of memory, not its size."""
    got = _c.parse(None, fd, n, file_size, window, *_REGISTRY)
    return _verdict(got, lambda a, e: os.pread(fd, min(e, n) - a, 8 + a), n, file_size, path)


def _verdict(got: tuple, text, n: int, file_size: int, path) -> Header:
    if type(got[0]) is int:
        fields = ("name_b", "key_b", "a1", "e1", "a2", "e2", "x", "y")
        report = dict(zip(fields, got[1:]), text=text, n=n, file_size=file_size)
        raise _error(got[0] - 1, path, **report)
    table, metadata, count = got
    return Header(metadata, _Tensors(table, count), n, file_size - 8 - n)


class _Tensors(Mapping):
    """name -> TensorInfo over the validator's tables (JSON order, found by
    bisection); names, the plan and infos are made only when asked for, then
    kept (a memoized header is loaded again and again)."""

    def __init__(self, table, count: int) -> None:
        self._table, self._count = table, count
        self._names: list[str] | None = None
        self._plan: list | None = None
        self._made: dict[str, TensorInfo] = {}

    def __len__(self) -> int:
        return self._count

    def plan(self) -> list:
        """Every tensor in data order, five items each: name, dtype code, shape,
        begin, end (one flat list: for readers that make all tensors)."""
        if self._plan is None:
            self._plan = _c.rows(self._table, _CODES)
        return self._plan

    def __iter__(self) -> Iterator[str]:
        if self._names is None:
            self._names = _c.rows(self._table, None)
        return iter(self._names)

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._made.get(name)
        if info is None:
            found = type(name) is str and _c.find(
                self._table, name.encode("utf-8", "surrogatepass"), _DTYPES
            )
            if not found:
                raise KeyError(name)
            info = self._made[name] = TensorInfo(*found[:3], tuple(found[3:]), math.prod(found[2]))
        return info

    def __repr__(self) -> str:
        return f"<{len(self)} tensors>"


# --------------------------------------------------------------------------- errors
#
# One row per error: class|what|field|offset|expected|found, where a line indented
# by 4 spaces goes on with the row above.  Row i - 1 is code i of csrc/st_header.c's
# enum (E_IO = 1, ...), the last three are the 8-byte size's.  The fields of a
# report (name, key, [a1, e1), [a2, e2), x, y: see there) and the names of _DERIVED
# fill the {} of a row ({T}: "tensor 'name'").  A found of one bare {field} keeps its type.
_TABLE = r"""
TruncatedData|file ended while reading (did it shrink?)||{at}|{more} more header bytes|end of file
HeaderNotUTF8|header is not valid UTF-8|header|{at}|UTF-8|byte 0x{byte:02x}
HeaderNotBrace|header does not begin with '{{'|header|8|'{{'|{first}
HeaderNotObject|header is not a JSON object|header|8|a JSON object|{top_kind}
HeaderTooDeep|header JSON nests too deeply|header|{at}|nesting depth <= {max_depth}|depth {y}
InvalidHeaderJSON|header is not valid JSON ({json})|header|{at}|a JSON object|{chars20!r}
InvalidHeaderPadding|header padding is not spaces only|header padding|{at}|spaces (0x20)
    |{chars10!r}
DuplicateMetadata|__metadata__ appears more than once|__metadata__||at most once|twice
InvalidMetadata|__metadata__ must map strings to strings|__metadata__||an object|{kind1}
DuplicateMetadataKey|duplicate key in __metadata__|__metadata__[{key!r}]||unique keys
    |{key!r} twice
InvalidMetadata|__metadata__ values must be strings|__metadata__[{key!r}]||a string|{kind1}
DuplicateTensorName|tensor name appears more than once|{T}||unique tensor names|{name!r} twice
InvalidTensorEntry|tensor entry is not an object|{T}||an object with dtype, shape, data_offsets
    |{kind1}
UnknownTensorField|unknown field in tensor entry|{T}||only dtype, shape, data_offsets|{key!r}
DuplicateTensorField|duplicate field in tensor entry|{T}||{key!r} once|{key!r} twice
MissingTensorField|tensor entry lacks a field|{T}||a {field!r} field|none
UnknownDtype|unknown dtype|{T}.dtype||one of {codes}|{value1!r}
InvalidShape|invalid shape|{T}.shape||a list of integers in [0, 2**64)|{dump1}
SizeOverflow|element count overflows u64|{T}.shape||product of shape < 2**64|{value1}
InvalidOffsets|invalid data_offsets|{T}.data_offsets|
    |[begin, end], integers in [0, 2**64), begin <= end|{dump1}
SizeOverflow|bit size overflows u64|{T}.shape||product of shape x {d.bits} bits < 2**64
    |{value1}
MisalignedSubByte|sub-byte tensor does not end on a byte boundary|{T}.shape|
    |{count} x {d.bits} bits to be a multiple of 8|{bits} bits
TensorSizeMismatch|byte span does not match dtype and shape|{T}|
    |{nbytes} bytes ({d.name} x {value1})|{span} bytes (data_offsets [{offs[0]}, {offs[1]}])
DataHole|gap before tensor|{T}|{data_at}|data_offsets begin {y}|{x}
DataOverlap|tensor overlaps the previous one|{T}|{data_at}|data_offsets begin {y}|{x}
TrailingBytes|bytes after the last tensor|data section|{data_at}|file size {data_at}
    |file size {file_size}
TruncatedData|file ends before the last tensor|{T}|{file_size}|file size {data_at}
    |file size {file_size}
FileTooSmall|file too small for a safetensors header|header size|0|at least 8 bytes
    |{file_size} bytes
HeaderTooLarge|header size too large|header size|0|at most {max_size}|{n}
HeaderOutOfBounds|header runs past the end of the file|header size|0
    |8 + N <= file size {file_size}|8 + {n} = {data_start}
"""
# the classes of the rows, by name: a row naming another class fails at import
_C = (E.TruncatedData, E.HeaderNotUTF8, E.HeaderNotBrace, E.HeaderNotObject, E.HeaderTooDeep)
_C += (E.InvalidHeaderJSON, E.InvalidHeaderPadding, E.DuplicateMetadata, E.InvalidMetadata)
_C += (E.DuplicateMetadataKey, E.DuplicateTensorName, E.InvalidTensorEntry, E.UnknownTensorField)
_C += (E.DuplicateTensorField, E.MissingTensorField, E.UnknownDtype, E.InvalidShape, E.SizeOverflow)
_C += (E.InvalidOffsets, E.MisalignedSubByte, E.TensorSizeMismatch, E.DataHole, E.DataOverlap)
_C += (E.TrailingBytes, E.FileTooSmall, E.HeaderTooLarge, E.HeaderOutOfBounds)
_CLASSES = {c.__name__: c for c in _C}
_RULES = [
    (_CLASSES[r[0]], *r[1:])
    for r in (s.split("|") for s in _TABLE.replace("\n    ", "").split("\n")[1:-1])
]
# CPython json's words for the syntax errors, indexed by the report's y (J_VALUE ... in the C)
_JSON = "Expecting value|Expecting property name enclosed in double quotes|Expecting ':' delimiter"
_JSON += "|Expecting ',' delimiter|Unterminated string starting at|Invalid control character at"
_JSON += r"|Invalid \escape|Invalid \uXXXX escape"


# what a message may name, derived from a report on first use (text(a, e): the header's
# valid UTF-8 bytes [a, e), cut at its end; value1 / offs: JSON values as json reads them)
_DERIVED = {
    "name": lambda r: r["name_b"].decode("utf-8", "surrogatepass"),
    "key": lambda r: r["key_b"].decode("utf-8", "surrogatepass"),
    "at": lambda r: 8 + r["x"],
    "more": lambda r: r["n"] - r["x"],
    "byte": lambda r: r["text"](r["x"], r["x"] + 1)[0],
    "first": lambda r: (
        repr(r["text"](0, 4).decode("utf-8", "ignore")[:1]) if r["n"] else "an empty header"
    ),
    "T": lambda r: f"tensor {r['name']!r}",
    "top_kind": lambda r: _kind(({}, [], "", 0, 0, 0.0, True, None)[r["x"]]),  # by V_OBJ ...
    "json": lambda r: _JSON.split("|")[r["y"]],
    "chars20": lambda r: r["text"](r["x"], r["x"] + 80).decode("utf-8", "ignore")[:20],
    "chars10": lambda r: r["text"](r["x"], r["x"] + 40).decode("utf-8", "ignore")[:10],
    "value1": lambda r: json.loads(r["text"](r["a1"], r["e1"]), parse_int=_int_or_huge),
    "kind1": lambda r: _kind(r["value1"]),
    "dump1": lambda r: "an object" if r["kind1"] == "an object" else json.dumps(r["value1"]),
    "field": lambda r: ("dtype", "shape", "data_offsets")[r["x"]],
    "d": lambda r: _DTYPES[r["x"]],
    "count": lambda r: math.prod(r["value1"]),
    "bits": lambda r: r["count"] * r["d"].bits,
    "nbytes": lambda r: r["bits"] >> 3,
    "offs": lambda r: json.loads(r["text"](r["a2"], r["e2"]), parse_int=_int_or_huge),
    "span": lambda r: r["offs"][1] - r["offs"][0],
    "data_start": lambda r: 8 + r["n"],
    "data_at": lambda r: 8 + r["n"] + r["x"],
}


class _Report(dict):
    """A report's fields by name; derived ones are computed when a message asks."""

    def __missing__(self, k: str):
        v = self[k] = _DERIVED[k](self)
        return v


def _error(code: int, path, **report) -> E.WeightsmithError:
    """The named error of row ``code`` of _TABLE for a report (``text(a, e)``
    returns the header's bytes [a, e))."""
    cls, what, field, offset, expected, found = _RULES[code]
    r = _Report(report, max_depth=MAX_DEPTH, max_size=MAX_HEADER_SIZE, codes=", ".join(_CODES))
    bare = found[1:-1] if found[:1] == "{" and found.find("}") == len(found) - 1 else None
    return cls(
        what.format_map(r),
        path=path,
        field=field.format_map(r) or None,
        offset=int(offset.format_map(r)) if offset else None,
        expected=expected.format_map(r),
        found=r[bare] if bare and bare.isidentifier() else found.format_map(r),
    )


class _Huge(str):
    """An integer literal past Python's int() digit limit (4300), as it stands in messages."""

    __repr__ = str.__str__


def _int_or_huge(text: str):
    try:
        return int(text)
    except ValueError:
        return _Huge(f"<a {len(text.lstrip('-'))}-digit integer>")


def _kind(v) -> str:
    kinds = {dict: "an object", list: "a list", bool: "a boolean", str: "a string", _Huge: str(v)}
    return "null" if v is None else kinds.get(type(v)) or f"a {type(v).__name__}"
