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
bounded; a JSON object; no duplicate keys at any level (even identical);
``__metadata__`` at most once and str -> str; tensor entries have exactly
the three fields; dtype is a known, case-sensitive code; shape entries are
integers in [0, 2**64); offsets are two integers in [0, 2**64) with
begin <= end; shape x bits computed without overflow, a whole number of
bytes, equal to end - begin; sorted by offset the tensors tile the data
section from 0 with no hole or overlap and end exactly at the end of file.

These functions take bytes, never a path to open: the remote reader runs
them on ranges fetched over HTTP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .. import errors as E
from ..dtypes import SAFETENSORS, DType

__all__ = [
    "MAX_DEPTH",
    "MAX_HEADER_SIZE",
    "Header",
    "TensorInfo",
    "parse_header",
    "read_header_size",
]

MAX_HEADER_SIZE = 100_000_000
# serde_json (HF's parser) stops at 128 levels; a valid header needs only 3.
MAX_DEPTH = 128
_U64 = 1 << 64
_FIELDS = ("dtype", "shape", "data_offsets")


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
    tensors: dict[str, TensorInfo]
    header_size: int  # N, padding included

    @property
    def data_start(self) -> int:
        return 8 + self.header_size

    @property
    def data_size(self) -> int:
        return max((t.data_offsets[1] for t in self.tensors.values()), default=0)

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
        raise E.FileTooSmall(
            "file too small for a safetensors header",
            path=path,
            field="header size",
            offset=0,
            expected="at least 8 bytes",
            found=f"{file_size} bytes",
        )
    if len(prefix) < 8:
        raise E.NeedMoreData(8)
    n = int.from_bytes(prefix[:8], "little")
    if n > MAX_HEADER_SIZE:
        raise E.HeaderTooLarge(
            "header size too large",
            path=path,
            field="header size",
            offset=0,
            expected=f"at most {MAX_HEADER_SIZE}",
            found=n,
        )
    if 8 + n > file_size:
        raise E.HeaderOutOfBounds(
            "header runs past the end of the file",
            path=path,
            field="header size",
            offset=0,
            expected=f"8 + N <= file size {file_size}",
            found=f"8 + {n} = {8 + n}",
        )
    return n


# --------------------------------------------------------------------------- JSON


class _Obj(list):
    """A JSON object kept as its list of (key, value) pairs.

    Keeping pairs (instead of a dict) lets the validation pass see duplicate
    keys, with the tensor they belong to, and keeps the header order.
    """

    __slots__ = ()


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


def _check_depth(raw: bytes, path) -> None:
    """Reject nesting deeper than MAX_DEPTH before json's recursion sees it."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return  # cannot possibly be too deep: skip the scan
    if b'"' in raw:
        raw = _STRING.sub(b"", raw)
    brackets = raw.translate(None, _NOT_BRACKETS)
    if len(brackets) <= MAX_DEPTH:
        return
    depth = np.cumsum(_DEPTH_STEP[np.frombuffer(brackets, np.uint8)], dtype=np.int64)
    deepest = int(depth.max())
    if deepest > MAX_DEPTH:
        raise E.HeaderTooDeep(
            "header JSON nests too deeply",
            path=path,
            field="header",
            offset=8,
            expected=f"nesting depth <= {MAX_DEPTH}",
            found=f"depth {deepest}",
        )


_DECODER = json.JSONDecoder(object_pairs_hook=_Obj)


def _not_brace(raw: bytes, text: str, path) -> None:
    """The header does not open with '{': say whether it is some other JSON
    value (HeaderNotObject) or not even that (HeaderNotBrace)."""
    if text and not text.lstrip(" \t\r\n").startswith("{"):
        _check_depth(raw, path)
        try:
            value = json.loads(text.rstrip(" "))
        except ValueError:
            pass
        else:
            raise E.HeaderNotObject(
                "header is not a JSON object",
                path=path,
                field="header",
                offset=8,
                expected="a JSON object",
                found=_kind(value),
            )
    raise E.HeaderNotBrace(
        "header does not begin with '{'",
        path=path,
        field="header",
        offset=8,
        expected="'{'",
        found=repr(text[:1]) if text else "an empty header",
    )


def _decode(raw: bytes, path) -> _Obj:
    """Bytes -> JSON value, checking UTF-8, the opening brace and padding."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise E.HeaderNotUTF8(
            "header is not valid UTF-8",
            path=path,
            field="header",
            offset=8 + exc.start,
            expected="UTF-8",
            found=f"byte 0x{raw[exc.start]:02x}",
        ) from None
    if not text.startswith("{"):
        _not_brace(raw, text, path)
    _check_depth(raw, path)
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        raise E.InvalidHeaderJSON(
            f"header is not valid JSON ({exc.msg})",
            path=path,
            field="header",
            offset=8 + len(text[: exc.pos].encode()),
            expected="a JSON object",
            found=repr(text[exc.pos : exc.pos + 20]),
        ) from None
    except RecursionError:  # only reachable if the recursion limit is tiny
        raise E.HeaderTooDeep(
            "header JSON nests too deeply", path=path, field="header", offset=8
        ) from None
    if end != len(text) and text[end:].strip(" "):
        bad = end + next(i for i, c in enumerate(text[end:]) if c != " ")
        raise E.InvalidHeaderPadding(
            "header padding is not spaces only",
            path=path,
            field="header padding",
            offset=8 + len(text[:bad].encode()),
            expected="spaces (0x20)",
            found=repr(text[bad : bad + 10]),
        )
    return value


# --------------------------------------------------------------------------- validation


def _kind(v) -> str:
    if isinstance(v, _Obj):
        return "an object"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    return f"a {type(v).__name__}"


def _metadata(value, path) -> dict[str, str] | None:
    if value is None:  # HF accepts null and treats it as absent
        return None
    if not isinstance(value, _Obj):
        raise E.InvalidMetadata(
            "__metadata__ must map strings to strings",
            path=path,
            field="__metadata__",
            expected="an object",
            found=_kind(value),
        )
    out: dict[str, str] = {}
    for k, v in value:
        if k in out:
            raise E.DuplicateMetadataKey(
                "duplicate key in __metadata__",
                path=path,
                field=f"__metadata__[{k!r}]",
                expected="unique keys",
                found=f"{k!r} twice",
            )
        if not isinstance(v, str):
            raise E.InvalidMetadata(
                "__metadata__ values must be strings",
                path=path,
                field=f"__metadata__[{k!r}]",
                expected="a string",
                found=_kind(v),
            )
        out[k] = v
    return out


def _fields(name: str, entry, path) -> tuple:
    if not isinstance(entry, _Obj):
        raise E.InvalidTensorEntry(
            "tensor entry is not an object",
            path=path,
            field=f"tensor {name!r}",
            expected="an object with dtype, shape, data_offsets",
            found=_kind(entry),
        )
    dtype = shape = offsets = _MISSING
    for k, v in entry:
        if k == "dtype":
            if dtype is not _MISSING:
                _dup_field(name, k, path)
            dtype = v
        elif k == "shape":
            if shape is not _MISSING:
                _dup_field(name, k, path)
            shape = v
        elif k == "data_offsets":
            if offsets is not _MISSING:
                _dup_field(name, k, path)
            offsets = v
        else:
            raise E.UnknownTensorField(
                "unknown field in tensor entry",
                path=path,
                field=f"tensor {name!r}",
                expected="only dtype, shape, data_offsets",
                found=repr(k),
            )
    for f, v in zip(_FIELDS, (dtype, shape, offsets)):
        if v is _MISSING:
            raise E.MissingTensorField(
                "tensor entry lacks a field",
                path=path,
                field=f"tensor {name!r}",
                expected=f"a {f!r} field",
                found="none",
            )
    return dtype, shape, offsets


_MISSING = object()


def _dup_field(name: str, key: str, path):
    raise E.DuplicateTensorField(
        "duplicate field in tensor entry",
        path=path,
        field=f"tensor {name!r}",
        expected=f"{key!r} once",
        found=f"{key!r} twice",
    )


def _is_u64(v) -> bool:
    return type(v) is int and 0 <= v < _U64


def _tensor(name: str, entry, path) -> TensorInfo:
    dtype_s, shape_v, offs_v = _fields(name, entry, path)
    dtype = SAFETENSORS.get(dtype_s) if isinstance(dtype_s, str) else None
    if dtype is None:
        raise E.UnknownDtype(
            "unknown dtype",
            path=path,
            field=f"tensor {name!r}.dtype",
            expected="one of " + ", ".join(SAFETENSORS),
            found=repr(dtype_s),
        )
    if type(shape_v) is not list or not all(_is_u64(d) for d in shape_v):
        raise E.InvalidShape(
            "invalid shape",
            path=path,
            field=f"tensor {name!r}.shape",
            expected="a list of integers in [0, 2**64)",
            found=json.dumps(shape_v) if not isinstance(shape_v, _Obj) else "an object",
        )
    if (
        type(offs_v) is not list
        or len(offs_v) != 2
        or not (_is_u64(offs_v[0]) and _is_u64(offs_v[1]))
        or offs_v[0] > offs_v[1]
    ):
        raise E.InvalidOffsets(
            "invalid data_offsets",
            path=path,
            field=f"tensor {name!r}.data_offsets",
            expected="[begin, end], integers in [0, 2**64), begin <= end",
            found=json.dumps(offs_v) if not isinstance(offs_v, _Obj) else "an object",
        )
    n = 1
    for d in shape_v:
        n *= d
        if n >= _U64:
            raise E.SizeOverflow(
                "element count overflows u64",
                path=path,
                field=f"tensor {name!r}.shape",
                expected="product of shape < 2**64",
                found=shape_v,
            )
    bits = n * dtype.bits
    if bits >= _U64:
        raise E.SizeOverflow(
            "bit size overflows u64",
            path=path,
            field=f"tensor {name!r}.shape",
            expected=f"product of shape x {dtype.bits} bits < 2**64",
            found=shape_v,
        )
    if bits % 8:
        raise E.MisalignedSubByte(
            "sub-byte tensor does not end on a byte boundary",
            path=path,
            field=f"tensor {name!r}.shape",
            expected=f"{n} x {dtype.bits} bits to be a multiple of 8",
            found=f"{bits} bits",
        )
    begin, end = offs_v
    if bits // 8 != end - begin:
        raise E.TensorSizeMismatch(
            "byte span does not match dtype and shape",
            path=path,
            field=f"tensor {name!r}",
            expected=f"{bits // 8} bytes ({dtype.name} x {shape_v})",
            found=f"{end - begin} bytes (data_offsets [{begin}, {end}])",
        )
    return TensorInfo(name, dtype, tuple(shape_v), (begin, end), n)


def _coverage(tensors: dict[str, TensorInfo], data_start: int, file_size: int, path) -> None:
    """Sorted by offset, the tensors must tile [0, file_size - data_start)."""
    infos = list(tensors.values())
    # Usually already in offset order, which makes this sort linear.
    infos.sort(key=lambda t: t.data_offsets)
    pos = 0
    for t in infos:
        begin, end = t.data_offsets
        if begin != pos:
            cls, what = (
                (E.DataHole, "gap before tensor")
                if begin > pos
                else (E.DataOverlap, "tensor overlaps the previous one")
            )
            raise cls(
                what,
                path=path,
                field=f"tensor {t.name!r}",
                offset=data_start + begin,
                expected=f"data_offsets begin {pos}",
                found=begin,
            )
        pos = end
    data_size = file_size - data_start
    if pos < data_size:
        raise E.TrailingBytes(
            "bytes after the last tensor",
            path=path,
            field="data section",
            offset=data_start + pos,
            expected=f"file size {data_start + pos}",
            found=f"file size {file_size}",
        )
    if pos > data_size:
        last = infos[-1].name
        raise E.TruncatedData(
            "file ends before the last tensor",
            path=path,
            field=f"tensor {last!r}",
            offset=file_size,
            expected=f"file size {data_start + pos}",
            found=f"file size {file_size}",
        )


def parse_header(header: bytes | memoryview, file_size: int, path=None) -> Header:
    """Validate the N header bytes (after the 8-byte size) of a file.

    ``file_size`` is the size of the whole file; it is needed to check that
    the tensors cover the data section exactly.  Raises the named
    :mod:`weightsmith.errors` class of the first rule the header breaks.
    """
    raw = bytes(header)
    n = len(raw)
    top = _decode(raw, path)
    if not isinstance(top, _Obj):
        raise E.HeaderNotObject(
            "header is not a JSON object",
            path=path,
            field="header",
            offset=8,
            expected="a JSON object",
            found=_kind(top),
        )
    metadata = None
    seen_meta = False
    tensors: dict[str, TensorInfo] = {}
    for name, entry in top:
        if name == "__metadata__":
            if seen_meta:
                raise E.DuplicateMetadata(
                    "__metadata__ appears more than once",
                    path=path,
                    field="__metadata__",
                    expected="at most once",
                    found="twice",
                )
            seen_meta = True
            metadata = _metadata(entry, path)
            continue
        if name in tensors:
            raise E.DuplicateTensorName(
                "tensor name appears more than once",
                path=path,
                field=f"tensor {name!r}",
                expected="unique tensor names",
                found=f"{name!r} twice",
            )
        tensors[name] = _tensor(name, entry, path)
    _coverage(tensors, 8 + n, file_size, path)
    return Header(metadata, tensors, n)
