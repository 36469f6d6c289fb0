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

import codecs
import gc
import json
import operator
import os
import re
from array import array
from collections.abc import Iterator, Mapping
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
    tensors: Mapping[str, TensorInfo]  # a dict, or a lazy _Tensors
    header_size: int  # N, padding included

    @property
    def data_start(self) -> int:
        return 8 + self.header_size

    @property
    def data_size(self) -> int:
        known = getattr(self.tensors, "data_size", None)  # _Tensors knows it
        if known is not None:
            return known
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
#
# The fast path parses with plain dicts (json's C decoder at full speed) and
# proves there were no duplicate keys by counting: every key/value pair of
# the top object and of its member objects has exactly one ':' outside
# strings, at bracket depth 1 or 2.  If the counts differ, the header is
# parsed again keeping every (key, value) pair, and the same validation
# names the duplicate and where it is.  The bracket scan that finds those
# colons also bounds the nesting depth before json's recursion can see it.


class _Obj(list):
    """A JSON object kept as its list of (key, value) pairs (slow path)."""

    __slots__ = ()


_OBJECTS = (dict, _Obj)
_QUOTE, _BACKSLASH, _COLON = ord('"'), ord("\\"), ord(":")
_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


def _pairs(obj):
    return obj.items() if type(obj) is dict else obj


def _real_quotes(b: np.ndarray) -> np.ndarray:
    """Positions of the '"' that open or close strings (not escaped ones)."""
    q = np.flatnonzero(b == _QUOTE)
    maybe = q[(q > 0) & (b[np.maximum(q - 1, 0)] == _BACKSLASH)]
    if maybe.size == 0:
        return q
    escaped = []
    for i in maybe.tolist():  # rare: count the run of backslashes before it
        j = i - 1
        while j >= 0 and b[j] == _BACKSLASH:
            j -= 1
        if (i - 1 - j) % 2:
            escaped.append(i)
    return np.setdiff1d(q, np.array(escaped, np.int64), assume_unique=True)


def _scan(raw: bytes, path) -> int:
    """Check the nesting depth; return the number of ':' at depth 1 or 2."""
    b = np.frombuffer(raw, np.uint8)
    quotes = _real_quotes(b)
    steps = _STEP[b]
    brackets = np.flatnonzero(steps)
    brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]  # outside strings
    depth = np.cumsum(steps[brackets], dtype=np.int64)
    deepest = int(depth.max()) if depth.size else 0
    if deepest > MAX_DEPTH:
        raise E.HeaderTooDeep(
            "header JSON nests too deeply",
            path=path,
            field="header",
            offset=8 + int(brackets[int(np.argmax(depth > MAX_DEPTH))]),
            expected=f"nesting depth <= {MAX_DEPTH}",
            found=f"depth {deepest}",
        )
    colons = np.flatnonzero(b == _COLON)
    colons = colons[np.searchsorted(quotes, colons) % 2 == 0]
    at = np.searchsorted(brackets, colons) - 1
    level = np.where(at >= 0, depth[np.maximum(at, 0)] if depth.size else 0, 0)
    return int(np.count_nonzero((level == 1) | (level == 2)))


class _Huge:
    """An integer literal longer than Python's int() digit limit (4300): it
    stands in for the number, so the rule that meets it names the error
    instead of json raising a bare ValueError."""

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


_FAST = json.JSONDecoder()
_SLOW = json.JSONDecoder(object_pairs_hook=_Obj)
# the same, for a header holding an integer too long for int() (rare: these
# call back into Python for every integer)
_FAST_HUGE = json.JSONDecoder(parse_int=_int_or_huge)
_SLOW_HUGE = json.JSONDecoder(object_pairs_hook=_Obj, parse_int=_int_or_huge)


def _not_object(value, path) -> E.HeaderNotObject:
    """The error for a header that is valid JSON but not an object.

    Raised from two places (before and after decoding) that must word it alike.
    """
    return E.HeaderNotObject(
        "header is not a JSON object",
        path=path,
        field="header",
        offset=8,
        expected="a JSON object",
        found=_kind(value),
    )


def _not_brace(raw: bytes, text: str, path) -> None:
    """The header does not open with '{': say whether it is some other JSON
    value (HeaderNotObject) or not even that (HeaderNotBrace)."""
    if text and not text.lstrip(" \t\r\n").startswith("{"):
        _scan(raw, path)
        try:
            value = json.loads(text.rstrip(" "))
        except ValueError:
            pass
        else:
            raise _not_object(value, path)
    raise E.HeaderNotBrace(
        "header does not begin with '{'",
        path=path,
        field="header",
        offset=8,
        expected="'{'",
        found=repr(text[:1]) if text else "an empty header",
    )


def _decode(raw: bytes, path):
    """Bytes -> the top JSON object (a dict, or an _Obj if keys repeat),
    checking UTF-8, the opening brace, depth and padding."""
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
    n_pairs = _scan(raw, path)
    fast, slow = _FAST, _SLOW
    try:
        try:
            value, end = fast.raw_decode(text)
        except json.JSONDecodeError:
            raise
        except ValueError:  # int()'s digit limit, not the JSON
            fast, slow = _FAST_HUGE, _SLOW_HUGE
            value, end = fast.raw_decode(text)
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
    if type(value) is dict:
        seen = len(value) + sum(len(v) for v in value.values() if type(v) is dict)
        if seen != n_pairs:  # some key repeats: keep every pair to report it
            value = slow.raw_decode(text)[0]
    return value


# --------------------------------------------------------------------------- validation


def _kind(v) -> str:
    if isinstance(v, _OBJECTS):
        return "an object"
    if isinstance(v, _Huge):
        return repr(v)
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    return f"a {type(v).__name__}"


def _dump(v) -> str:
    if isinstance(v, _OBJECTS):
        return "an object"
    try:
        return json.dumps(v, default=repr)  # repr: a _Huge stand-in
    except (TypeError, ValueError):
        return _kind(v)


def _metadata(value, path) -> dict[str, str] | None:
    if value is None:  # HF accepts null and treats it as absent
        return None
    if not isinstance(value, _OBJECTS):
        raise E.InvalidMetadata(
            "__metadata__ must map strings to strings",
            path=path,
            field="__metadata__",
            expected="an object",
            found=_kind(value),
        )
    out: dict[str, str] = {}
    for k, v in _pairs(value):
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


_MISSING = object()


def _fields(name: str, entry, path) -> tuple:
    """dtype, shape, data_offsets of an entry, or the named error."""
    if not isinstance(entry, _OBJECTS):
        raise E.InvalidTensorEntry(
            "tensor entry is not an object",
            path=path,
            field=f"tensor {name!r}",
            expected="an object with dtype, shape, data_offsets",
            found=_kind(entry),
        )
    found: dict[str, object] = {}
    for k, v in _pairs(entry):
        if k not in _FIELDS:
            raise E.UnknownTensorField(
                "unknown field in tensor entry",
                path=path,
                field=f"tensor {name!r}",
                expected="only dtype, shape, data_offsets",
                found=repr(k),
            )
        if k in found:
            raise E.DuplicateTensorField(
                "duplicate field in tensor entry",
                path=path,
                field=f"tensor {name!r}",
                expected=f"{k!r} once",
                found=f"{k!r} twice",
            )
        found[k] = v
    for f in _FIELDS:
        if f not in found:
            raise E.MissingTensorField(
                "tensor entry lacks a field",
                path=path,
                field=f"tensor {name!r}",
                expected=f"a {f!r} field",
                found="none",
            )
    return found["dtype"], found["shape"], found["data_offsets"]


def _bad_shape(name: str, shape_v, path):
    return E.InvalidShape(
        "invalid shape",
        path=path,
        field=f"tensor {name!r}.shape",
        expected="a list of integers in [0, 2**64)",
        found=_dump(shape_v),
    )


def _tensor(name: str, entry, path) -> TensorInfo:
    try:  # the common case, at the cost of three dict lookups
        if type(entry) is not dict or len(entry) != 3:
            raise KeyError
        dtype_s, shape_v, offs_v = entry["dtype"], entry["shape"], entry["data_offsets"]
    except KeyError:
        dtype_s, shape_v, offs_v = _fields(name, entry, path)
    dtype = _DTYPES.get(dtype_s) if type(dtype_s) is str else None
    if dtype is None:
        raise E.UnknownDtype(
            "unknown dtype",
            path=path,
            field=f"tensor {name!r}.dtype",
            expected="one of " + ", ".join(SAFETENSORS),
            found=repr(dtype_s),
        )
    if type(shape_v) is not list:
        raise _bad_shape(name, shape_v, path)
    n = 1
    for d in shape_v:
        if type(d) is not int or d < 0 or d >= _U64:
            raise _bad_shape(name, shape_v, path)
        n *= d
        if n >= _U64:  # checked at each step, as HF's checked_mul does
            raise E.SizeOverflow(
                "element count overflows u64",
                path=path,
                field=f"tensor {name!r}.shape",
                expected="product of shape < 2**64",
                found=shape_v,
            )
    if type(offs_v) is not list or len(offs_v) != 2:
        begin = end = None
    else:
        begin, end = offs_v
    if not (type(begin) is int and type(end) is int and 0 <= begin <= end < _U64):
        raise E.InvalidOffsets(
            "invalid data_offsets",
            path=path,
            field=f"tensor {name!r}.data_offsets",
            expected="[begin, end], integers in [0, 2**64), begin <= end",
            found=_dump(offs_v),
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
    if bits & 7:
        raise E.MisalignedSubByte(
            "sub-byte tensor does not end on a byte boundary",
            path=path,
            field=f"tensor {name!r}.shape",
            expected=f"{n} x {dtype.bits} bits to be a multiple of 8",
            found=f"{bits} bits",
        )
    if bits >> 3 != end - begin:
        raise E.TensorSizeMismatch(
            "byte span does not match dtype and shape",
            path=path,
            field=f"tensor {name!r}",
            expected=f"{bits >> 3} bytes ({dtype.name} x {shape_v})",
            found=f"{end - begin} bytes (data_offsets [{begin}, {end}])",
        )
    return TensorInfo(name, dtype, tuple(shape_v), (begin, end), n)


_BY_OFFSETS = operator.attrgetter("data_offsets")
_DTYPES = dict(SAFETENSORS)


def _gap(name: str, begin: int, pos: int, data_start: int, path) -> E.WeightsmithError:
    """DataHole / DataOverlap for the tensor at ``begin`` when ``pos`` was due."""
    cls, what = (
        (E.DataHole, "gap before tensor")
        if begin > pos
        else (E.DataOverlap, "tensor overlaps the previous one")
    )
    return cls(
        what,
        path=path,
        field=f"tensor {name!r}",
        offset=data_start + begin,
        expected=f"data_offsets begin {pos}",
        found=begin,
    )


def _end(last: str, pos: int, data_start: int, file_size: int, path) -> None:
    """The tiled data ends at ``pos``: TrailingBytes / TruncatedData unless
    that is the end of the file (``last``: the last tensor by offset)."""
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
        raise E.TruncatedData(
            "file ends before the last tensor",
            path=path,
            field=f"tensor {last!r}",
            offset=file_size,
            expected=f"file size {data_start + pos}",
            found=f"file size {file_size}",
        )


def _coverage(tensors: dict[str, TensorInfo], data_start: int, file_size: int, path) -> None:
    """Sorted by offset, the tensors must tile [0, file_size - data_start)."""
    infos = list(tensors.values())
    # Usually already in offset order, which makes this sort linear.
    infos.sort(key=_BY_OFFSETS)
    pos = 0
    for t in infos:
        begin, end = t.data_offsets
        if begin != pos:
            raise _gap(t.name, begin, pos, data_start, path)
        pos = end
    _end(infos[-1].name if infos else "", pos, data_start, file_size, path)


def parse_header(header: bytes | memoryview, file_size: int, path=None) -> Header:
    """Validate the N header bytes (after the 8-byte size) of a file.

    ``file_size`` is the size of the whole file; it is needed to check that
    the tensors cover the data section exactly.  Raises the named
    :mod:`weightsmith.errors` class of the first rule the header breaks.
    Never touches the filesystem (the remote reader calls it on bytes).
    """
    # The parse allocates a few objects per tensor and none of them form
    # cycles: pausing the cyclic GC spares full collections over a big heap
    # (torch imported) in the middle of it.
    enabled = gc.isenabled()
    gc.disable()
    try:
        raw = header if type(header) is bytes else bytes(header)  # no copy of a big header
        return (
            _parse_fast(raw, file_size, path)
            or _parse_squeezed(raw, file_size, path)
            or _parse(raw, file_size, path)
        )
    finally:
        if enabled:
            gc.enable()


def _parse(raw: bytes, file_size: int, path) -> Header:
    n = len(raw)
    top = _decode(raw, path)
    if not isinstance(top, _OBJECTS):
        raise _not_object(top, path)
    metadata = None
    seen_meta = False
    tensors: dict[str, TensorInfo] = {}
    for name, entry in _pairs(top):
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


# --------------------------------------------------------------------------- fast path
#
# Nearly every file is written by HF's library (or ours) in one compact
# form: ``{"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},...}``,
# optionally opening with ``"__metadata__":{"k":"v",...}``, no whitespace,
# no backslash.  For such headers json.loads alone costs more than HF's
# whole open (~1 ms per 1,000 tensors), and one Python object per tensor
# costs ~1 KB (16x a 60-byte entry).  So this path never makes a Python
# object per tensor: it tokenizes the raw bytes with numpy (every '"' is a
# string delimiter when there is no backslash, so each tensor is exactly 10
# quotes), checks the fixed text between them as 8-byte words, parses the
# numbers vectorised and checks every rule over arrays of all tensors.
# Names, shapes and TensorInfo objects are made only for tensors asked for.
#
# It accepts, or raises the named error of a rule that can only be judged
# once every entry is known valid (duplicate names, coverage), exactly as
# the general path would at that point.  Any other departure from the
# form, or any other broken rule, returns None and the general path names
# it.  tests/test_safetensors_fastpath.py holds the two paths to that.
# Two helpers extend it: _parse_squeezed (whitespace between tokens taken
# out first) and precheck (a header over one window judged from the file a
# window at a time, before it is read whole).

_MAX_DIGITS = 18  # < 2**63: int64 arithmetic is exact; longer numbers take the general path
_WINDOW = 1 << 20  # header bytes tokenized at once: bounds the temporaries
_CHUNK = 1 << 16  # names compared or hashed at once: bounds theirs
_CODES = list(SAFETENSORS)
_W64 = np.uint64  # a word of 8 header bytes
_WORD_MASK = np.array([(1 << 8 * i) - 1 for i in range(9)], _W64)
_POW10 = 10 ** np.arange(_MAX_DIGITS + 1, dtype=np.int64)


def _word(text: bytes) -> np.uint64:
    """Up to 8 bytes as the little-endian word a stride-1 uint64 view reads."""
    return _W64(int.from_bytes(text.ljust(8, b"\0"), "little"))


def _code_table():
    rows = sorted(
        (int(_word(c.encode()[:8])), int(_word(c.encode()[8:16])), len(c), i)
        for i, c in enumerate(_CODES)
    )
    k0, k1, n, idx = zip(*rows)
    bits = np.array([SAFETENSORS[c].bits for c in _CODES], np.int64)  # by code index
    return np.array(k0, _W64), np.array(k1, _W64), np.array(n), np.array(idx, np.uint8), bits


_CODE_K0, _CODE_K1, _CODE_LEN, _CODE_IDX, _CODE_BITS = _code_table()
_MAX_CODE = max(map(len, _CODES))
# the fixed text of an entry, around its quotes 1, 5 and 8 (0-based)
_A = b'":{"dtype":"'  # at quote 1; the dtype code follows
_B = b'","shape":['  # at quote 5; the dims follow
_C = b'],"data_offsets":['  # 2 bytes before quote 8; the offsets follow
_A0, _A1 = _word(_A[:8]), _word(_A[4:])
_B0, _B1 = _word(_B[:8]), _word(_B[3:])
_C0, _C1, _C2 = _word(_C[:8]), _word(_C[8:16]), _word(_C[10:])
# the words that hold them: which of quotes 1, 5, 8 and how far from it
_SPOTS = np.array([1, 5, 8])
# (and the end of each entry, ']},"' from 3 bytes before the next '"')
_TEXT_Q = np.array([0, 0, 1, 1, 2, 2, 2, 3])
_TEXT_AT = np.array([0, 4, 0, 3, -2, 6, 8, -3])
_TEXT = np.array([_A0, _A1, _B0, _B1, _C0, _C1, _C2, _word(b']},"')], _W64)
_GAPS = np.array([13, 13, 19])  # least room from quote 1 to 5, 5 to 8, 8 to the end
_REGION_Q = np.array([1, 2, 2, 3])  # dims: quote 5 + 11 to quote 8 - 2;
_REGION_AT = np.array([11, -2, 16, -3])  # offsets: quote 8 + 16 to the end - 3
_META = b"__metadata__"
_META0, _META1 = _word(_META[:8]), _word(_META[4:])
# name hashing: random per process, so no file can aim at collisions
# (which are resolved exactly anyway, only slower)
_SALT = np.frombuffer(os.urandom(32), _W64) | _W64(1)


class _Tensors(Mapping):
    """name -> TensorInfo over arrays of every tensor (JSON order); names,
    shapes and infos are made from the header bytes on demand."""

    def __init__(
        self, raw: bytes, cols: dict[str, np.ndarray], data_size: int, ordered: bool = False
    ) -> None:
        self._raw = raw
        self._ordered = ordered  # names strictly increasing: lookups bisect
        self._name_a, self._name_e = cols["name_a"], cols["name_e"]
        self._dims_a, self._dims_e = cols["dims_a"], cols["dims_e"]
        self._codes = cols["code"]
        self.begins, self.ends, self.n_elements = cols["begin"], cols["end"], cols["n_el"]
        self.data_size = data_size
        self._names: list[str] | None = None
        self._index: dict[str, int] | None = None
        self._finds = 0
        self._made: dict[str, TensorInfo] = {}

    def __len__(self) -> int:
        return len(self._name_a)

    def names(self) -> list[str]:
        """Every name, in JSON order."""
        if self._names is None:
            raw = self._raw
            a, e = self._name_a.tolist(), self._name_e.tolist()
            self._names = [raw[i:j].decode() for i, j in zip(a, e)]
        return self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _find(self, name: object) -> int:
        """Index of ``name``, or -1.  Names in order are bisected; otherwise
        the first few lookups search the bytes for '"name":{' (in a compact
        header only a key can match, and the hit is checked against the name
        spans); later ones build a dict."""
        if self._index is None and self._finds >= 8:
            self._index = dict(zip(self.names(), range(len(self))))
        if self._index is not None:
            return self._index.get(name, -1)  # type: ignore[arg-type]
        if type(name) is not str:
            return -1
        self._finds += 1
        try:
            key = name.encode()
        except UnicodeEncodeError:
            return -1
        raw, starts = self._raw, self._name_a
        if self._ordered:
            lo, hi = 0, len(starts)
            while lo < hi:
                mid = (lo + hi) // 2
                if raw[starts[mid] : self._name_e[mid]] < key:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < len(starts) and raw[starts[lo] : self._name_e[lo]] == key:
                return lo
            return -1
        at = raw.find(b'"' + key + b'":{')
        while at >= 0:
            i = int(np.searchsorted(starts, at + 1))
            if i < len(starts) and starts[i] == at + 1 and self._name_e[i] == at + 1 + len(key):
                return i
            at = raw.find(b'"' + key + b'":{', at + 1)
        return -1

    def __contains__(self, name: object) -> bool:
        return name in self._made or self._find(name) >= 0

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._made.get(name)
        if info is None:
            i = self._find(name)
            if i < 0:
                raise KeyError(name)
            info = self._made[name] = TensorInfo(
                name,
                _DTYPES[_CODES[self._codes[i]]],
                self.shape(i),
                (int(self.begins[i]), int(self.ends[i])),
                int(self.n_elements[i]),
            )
        return info

    def shape_text(self, i: int) -> str:
        """The dims of tensor ``i`` as written, e.g. "2,3" ("" for a scalar)."""
        return self._raw[int(self._dims_a[i]) : int(self._dims_e[i])].decode("ascii")

    def shape(self, i: int) -> tuple[int, ...]:
        text = self.shape_text(i)
        return tuple(map(int, text.split(","))) if text else ()

    def plan(self):
        """Every tensor in data order: names, dtype codes, shape texts and
        begin / end offsets as lists (for readers that make all tensors)."""
        order = np.lexsort((self.ends, self.begins))
        names, raw = self.names(), self._raw
        o = order.tolist()
        dims_a, dims_e = self._dims_a[order].tolist(), self._dims_e[order].tolist()
        return (
            [names[i] for i in o],
            [_CODES[c] for c in self._codes[order].tolist()],
            [raw[a:e].decode("ascii") for a, e in zip(dims_a, dims_e)],
            self.begins[order].tolist(),
            self.ends[order].tolist(),
        )

    def __eq__(self, other: object) -> bool:
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:
        return f"<{len(self)} tensors>"


def _body_end(raw: bytes, b: np.ndarray) -> int:
    """Length of the header without its trailing spaces (no copy of it)."""
    end = len(raw)
    chunk = 64
    while end and raw[end - 1] == 0x20:
        chunk = min(end, chunk * 4)
        tail = np.flatnonzero(b[end - chunk : end] != 0x20)
        end = end - chunk + (int(tail[-1]) + 1 if tail.size else 0)
    return end


def _utf8(raw: bytes, b: np.ndarray) -> bool:
    """Is the header valid UTF-8?  Checked a window at a time (no str of it)."""
    if int(b.max()) < 0x80:
        return True
    dec = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    try:
        for i in range(0, len(raw), _WINDOW):
            dec.decode(view[i : i + _WINDOW])
        dec.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _metadata_compact(raw: bytes, b: np.ndarray, end: int):
    """(metadata, where the first tensor's '"' is) for a header opening with
    '{"__metadata__":{'; None if that part is not in the compact form."""
    close = raw.find(b"}", 17)  # the first '}' outside a string ends it
    quotes = raw.count(b'"', 17, close) if close >= 0 else 0
    while close >= 0 and quotes % 2:
        nxt = raw.find(b"}", close + 1)
        if nxt >= 0:
            quotes += raw.count(b'"', close, nxt)
        close = nxt
    if close < 0:
        return None
    q = np.flatnonzero(b[17:close] == 0x22) + 17
    m = len(q)
    if m:
        keys_end, vals_a = q[1::4], q[2::4]
        if not (
            m % 4 == 0
            and q[0] == 17
            and q[-1] == close - 1
            and np.array_equal(vals_a, keys_end + 2)
            and (b[keys_end + 1] == 0x3A).all()
            and np.array_equal(q[4::4], q[3:-1:4] + 2)
            and (b[q[3:-1:4] + 1] == 0x2C).all()
        ):
            return None
    ka, ke, va, ve = (x.tolist() for x in (q[0::4] + 1, q[1::4], q[2::4] + 1, q[3::4]))
    md = {raw[i:j].decode(): raw[v:w].decode() for i, j, v, w in zip(ka, ke, va, ve)}
    if len(md) != m // 4:
        return None  # a repeated key: the general path names it
    if close + 1 == end - 1:
        return md, end  # no tensors
    if raw[close + 1 : close + 3] != b',"':
        return None
    return md, close + 2


def _numbers(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, comma_at: np.ndarray):
    """Parse the regions ``b[starts[i]:ends[i]]``, each digits and commas;
    ``b[comma_at[i]]`` is a ',' (put after region i).  Returns (every number
    in order, how many each region holds), or None if a region holds
    anything else, an empty number, a leading zero or a number of more than
    18 digits."""
    # gather the non-empty regions, each with a ',' after it (~16 bytes a
    # tensor, not the whole window), then check with boolean ops only
    spans = ends - starts
    spans += spans > 0
    at = np.cumsum(spans) - spans
    total = int(at[-1] + spans[-1]) if len(spans) else 0
    if not total:
        return np.zeros(0, np.int64), np.zeros(len(spans), np.int64)
    where = np.arange(total) + np.repeat(starts - at, spans)
    full = spans > 0
    where[(at + spans - 1)[full]] = comma_at[full]
    t = b[where]
    digit = (t - np.uint8(0x30)) < 10
    comma = t == 0x2C
    if (
        np.count_nonzero(digit) + np.count_nonzero(comma) != total  # something else
        or comma[0]  # an empty number: a ',' not between two digits
        or (comma[1:-1] & ~(digit[:-2] & digit[2:])).any()
        or (t[0] == 0x30 and digit[1])  # a leading zero
        or ((t[1:-1] == 0x30) & digit[2:] & ~digit[:-2]).any()
    ):
        return None
    # a region holds as many numbers as it has commas, its own one included
    counts = np.diff(np.searchsorted(np.flatnonzero(comma), np.append(at, total)))
    values = np.fromstring(t.tobytes(), np.int64, sep=",")  # "2,3,0,24,..."
    # with no leading zero, more than 18 digits is >= 10**18 (and a number
    # past int64 reads as its largest value)
    if len(values) != counts.sum() or (values >= 10**_MAX_DIGITS).any():
        return None
    return values, counts


def _entries(b: np.ndarray, words: np.ndarray, q: np.ndarray, nxt: np.ndarray, final: bool):
    """Columns of the tensors whose quotes are ``q`` (10 per tensor) and whose
    text ends where ``nxt`` says (the next tensor's '"', or the body end for
    the ``final`` one); None if any entry is not in
    the compact form or breaks a rule.  ``words[i]`` is the little-endian
    uint64 of ``b[i:i+8]``."""
    q = q.reshape(-1, 10)
    k = len(q)
    q0, q1, q5 = q[:, 0], q[:, 1], q[:, 5]
    spots = np.empty((k, 4), np.int64)
    spots[:, :3], spots[:, 3] = q[:, _SPOTS], nxt  # quotes 1, 5, 8; the end
    # room for the fixed text, so every 8-byte word read stays in the entry
    gaps = spots[:, 1:] - spots[:, :-1]
    if not ((gaps >= _GAPS).all() and (gaps[:, 0] <= 12 + _MAX_CODE).all()):
        return None
    at = spots[:, _TEXT_Q] + _TEXT_AT
    if final:  # the last entry ends the body with ']}}': its word would overrun
        end = int(nxt[-1])
        if bytes(b[end - 3 : end]) != b"]}}":
            return None
        at[-1, 7] = at[-1, 0]
    text = words[at]
    text[:, 7] &= _W64(0xFFFFFFFF)  # ']},' and the next entry's '"'
    if final:
        text[-1, 7] = _TEXT[7]
    if not (text == _TEXT).all():
        return None
    # dtype codes: the bytes between quotes 4 and 5, looked up as two words
    c0 = q1 + 12
    n = q5 - c0
    key0 = words[c0] & _WORD_MASK[np.minimum(n, 8)]
    key1 = 0
    if (n > 8).any():  # F8_E4M3FNUZ, F8_E5M2FNUZ
        key1 = words[c0 + 8] & _WORD_MASK[np.clip(n - 8, 0, 8)]
    at = np.minimum(np.searchsorted(_CODE_K0, key0), len(_CODE_K0) - 1)
    if not ((_CODE_K0[at] == key0) & (_CODE_K1[at] == key1) & (_CODE_LEN[at] == n)).all():
        return None
    code = _CODE_IDX[at]
    # a tensor named __metadata__ is metadata to the general path
    twelve = q0[q1 - q0 == 13]
    if twelve.size and ((words[twelve + 1] == _META0) & (words[twelve + 5] == _META1)).any():
        return None
    # [dims start, dims end, offsets start, offsets end] of each entry
    regions = spots[:, _REGION_Q] + _REGION_AT
    flat = regions.reshape(-1)
    # the ',' of _C (quote 8 - 1) ends each region in the parse
    parsed = _numbers(b, flat[0::2], flat[1::2], np.repeat(regions[:, 1] + 1, 2))
    if parsed is None:
        return None
    values, counts = parsed
    ndim = counts[0::2]
    if not (counts[1::2] == 2).all():
        return None
    # per tensor: its dims, then its two offsets
    stop = np.cumsum(ndim + 2)
    begin, end = values[stop - 2], values[stop - 1]
    bits = _CODE_BITS[code]
    n_el = np.ones(k, np.int64)
    has = ndim > 0
    if has.any():
        # product over [start, start + ndim): reduceat on (start, stop) pairs
        cuts = np.empty(2 * k, np.int64)
        cuts[0::2], cuts[1::2] = stop - ndim - 2, stop - 2
        # every partial product is at most the product of max(d, 1), which
        # is at most max(values) ** ndim: near 2**63 bits, the general path
        # (whose arithmetic is exact) decides
        most = int(ndim.max())
        if most > 8 or int(values.max()) ** most * 64 >= 2**62:
            bound = np.multiply.reduceat(np.maximum(values, 1).astype(np.float64), cuts)[0::2]
            if (bound[has] * bits[has]).max() >= 2.0**62:
                return None
        n_el = np.multiply.reduceat(values, cuts)[0::2]
        if not has.all():
            n_el[~has] = 1
    nbits = n_el * bits
    if (nbits & 7).any() or not np.array_equal(end - begin, nbits >> 3):
        return None
    i32 = np.int32  # positions in a header of at most 100 MB
    return {
        "name_a": (q0 + 1).astype(i32),
        "name_e": q1.astype(i32),
        "code": code,
        "dims_a": regions[:, 0].astype(i32),
        "dims_e": regions[:, 1].astype(i32),
        "begin": begin,
        "end": end,
        "n_el": n_el,
    }


def _increasing(words: np.ndarray, a: np.ndarray, e: np.ndarray) -> bool:
    """Are the names ``raw[a:e]`` strictly increasing bytewise (so unique)?"""
    # chunks overlap by one name, so every neighbouring pair is compared
    return all(
        _increasing_run(words, a[i : i + _CHUNK + 1], e[i : i + _CHUNK + 1])
        for i in range(0, max(len(a) - 1, 1), _CHUNK)
    )


def _increasing_run(words: np.ndarray, a: np.ndarray, e: np.ndarray) -> bool:
    n = e - a
    width = int(n.max()) + 8 >> 3  # words per name, a 0 word at least after the end
    if width > 16:
        return False  # long names: the hash does it
    # each name as a fixed-width numpy bytes string, 0-padded: numpy
    # compares those bytewise, and 0 sorts first and is in no name
    # (control characters are refused), so "ab" < "abc" as for the bytes
    j = np.arange(0, 8 * width, 8)
    at = a[:, None] + j
    if int(a.max()) + 8 * width > len(words):
        np.minimum(at, len(words) - 1, out=at)  # (masked to 0 past the end)
    left = n[:, None] - j  # bytes of the name from each word on
    np.maximum(left, 0, out=left)
    names = (words[at] & _WORD_MASK[np.minimum(left, 8, out=left)]).view(f"S{8 * width}")
    return bool((names[1:] > names[:-1]).all())


def _hash(words: np.ndarray, a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """A salted 64-bit hash of each name ``raw[a:e]``, a word at a time."""
    n = e - a
    words_per = (n + 7) >> 3
    first = np.cumsum(words_per) - words_per
    total = int(first[-1] + words_per[-1])
    h = n.astype(_W64) * _SALT[3]
    if total:
        j = np.arange(total) - np.repeat(first, words_per)
        at = np.repeat(a, words_per) + 8 * j
        left = np.minimum(np.repeat(e, words_per) - at, 8)
        x = (words[at] & _WORD_MASK[left]) ^ (j.astype(_W64) * _SALT[0])
        x *= _SALT[1]
        x ^= x >> _W64(29)
        x *= _SALT[2]
        x ^= x >> _W64(32)
        some = words_per > 0
        h[some] += np.add.reduceat(x, first[some])
    return h


def _duplicate(raw: bytes, words: np.ndarray, a: np.ndarray, e: np.ndarray) -> int:
    """Index (JSON order) of the first tensor whose name appeared before, or -1.

    Names are hashed a word at a time (no string per name); equal hashes
    are then compared as bytes, so a collision costs time, never a verdict."""
    k = len(a)
    if k < 2:
        return -1
    h = np.empty(k, _W64)
    for i in range(0, k, _CHUNK):
        h[i : i + _CHUNK] = _hash(words, a[i : i + _CHUNK], e[i : i + _CHUNK])
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same = np.flatnonzero(hs[1:] == hs[:-1])
    if not same.size:
        return -1
    suspects = np.unique(np.concatenate((order[same], order[same + 1]))).tolist()
    seen: set[bytes] = set()
    for i in suspects:  # ascending: the first repeat in JSON order
        name = bytes(raw[int(a[i]) : int(e[i])])
        if name in seen:
            return i
        seen.add(name)
    return -1


def _tile(cols: dict[str, np.ndarray], names, data_start: int, file_size: int, path) -> None:
    """_coverage over the arrays: the same order, the same errors."""
    begins, ends = cols["begin"], cols["end"]
    k = len(begins)
    if k and begins[0] == 0 and np.array_equal(begins[1:], ends[:-1]):
        # tiled in JSON order (which, as end >= begin, is offset order)
        _end(names(k - 1), int(ends[-1]), data_start, file_size, path)
        return
    order = None
    if k and not (
        (begins[1:] >= begins[:-1]).all() and (ends[1:] >= ends[:-1]).all()
    ):  # not already in offset order (then a stable sort keeps this order)
        order = np.lexsort((ends, begins))
        begins, ends = begins[order], ends[order]
    pos = 0
    if k:
        due = np.concatenate(([0], ends[:-1]))
        bad = np.flatnonzero(begins != due)
        if bad.size:
            j = int(bad[0])
            i = j if order is None else int(order[j])
            raise _gap(names(i), int(begins[j]), int(due[j]), data_start, path)
        pos = int(ends[-1])
    last = (k - 1 if order is None else int(order[-1])) if k else -1
    _end(names(last) if k else "", pos, data_start, file_size, path)


def _parse_fast(raw: bytes, file_size: int, path=None, size: int | None = None) -> Header | None:
    """A Header for a compact, well-formed header; None for anything else
    (or the named error of a duplicate name or a coverage rule).  ``size``:
    the header's size in the file, if ``raw`` is its whitespace squeezed out."""
    n_raw = len(raw)
    size = n_raw if size is None else size
    if raw[:1] != b"{" or b"\\" in raw:
        return None
    b = np.frombuffer(raw, np.uint8)
    if int(b.min()) < 0x20 or not _utf8(raw, b):
        return None
    end = _body_end(raw, b)
    if end < 2 or raw[end - 1] != 0x7D:
        return None
    data_start = 8 + size
    metadata = None
    if end == 2:  # {}
        start = end
    elif raw.startswith(b'{"__metadata__":{'):
        meta = _metadata_compact(raw, b, end)
        if meta is None:
            return None
        metadata, start = meta
    elif raw[1] == 0x22:
        start = 1
    else:
        return None
    if start == end:  # no tensors
        if file_size != data_start:
            _end("", 0, data_start, file_size, path)
        return Header(metadata, {}, size)
    # stride-1 uint64 view: words[i] is raw[i:i+8] (every read stays inside
    # an entry, which _entries checks from the quote positions first)
    words = np.ndarray((n_raw - 7,), _W64, raw, 0, (1,)) if n_raw >= 8 else None
    if words is None:
        return None
    parts: list[dict[str, np.ndarray]] = []
    filled, total = 0, 0
    if end - start > _WINDOW:  # several windows: one table, sized by the quotes
        total = raw.count(b'"', start, end) // 10
    lo, window = start, _WINDOW
    while lo < end:
        hi = min(lo + window, end)
        q = np.flatnonzero(b[lo:hi] == 0x22) + lo
        if hi == end:
            if len(q) % 10:
                return None
            k = len(q) // 10
            nxt = np.append(q[10::10], end)
        else:
            # entries whose end (the next '"') is in view, with the 8-byte
            # word read from 3 bytes before it
            k = int(np.searchsorted(q[10::10], hi - 5, "right"))
            nxt = q[10 : 10 * k + 1 : 10]
        if k == 0:
            if hi == end:
                return None
            window *= 2  # one entry longer than the window
            continue
        if q[0] != lo:
            return None
        cols = _entries(b, words, q[: 10 * k], nxt, hi == end)
        if cols is None:
            return None
        if total and filled + k > total:
            return None
        if total:  # several windows: fill one table, no copies to join
            if not parts:
                parts.append({c: np.empty(total, v.dtype) for c, v in cols.items()})
            for c, v in cols.items():
                parts[0][c][filled : filled + k] = v
        else:
            parts.append(cols)
        filled += k
        lo = int(nxt[-1])
        if lo == end:
            break
    if total and filled != total:
        return None
    cols = parts[0]
    del parts

    def name(i: int) -> str:
        return raw[int(cols["name_a"][i]) : int(cols["name_e"][i])].decode()

    ordered = _increasing(words, cols["name_a"], cols["name_e"])
    dup = -1 if ordered else _duplicate(raw, words, cols["name_a"], cols["name_e"])
    if dup >= 0:
        raise E.DuplicateTensorName(
            "tensor name appears more than once",
            path=path,
            field=f"tensor {name(dup)!r}",
            expected="unique tensor names",
            found=f"{name(dup)!r} twice",
        )
    _tile(cols, name, data_start, file_size, path)
    return Header(metadata, _Tensors(raw, cols, file_size - data_start, ordered), size)


def precheck(read, n_raw: int, file_size: int, path=None) -> None:
    """Judge a header of ``n_raw`` bytes, too big for one window, a window at
    a time, before it is read whole: ``read(offset, size)`` returns header
    bytes.  For the compact form with names and offsets in order (what
    writers produce), this raises the named error of a coverage rule with
    every other rule checked, holding one window and no table of tensors --
    so a header just under the cap whose data is missing costs a window of
    memory, not the header and its tables.  Any other header gets the
    streaming _guard (~28 bytes per tensor, see below).  A header that
    passes, or that neither can judge, returns, and parse_header judges it
    as usual.
    """
    if n_raw <= _WINDOW:
        return
    if not _precheck_compact(read, n_raw, file_size, path) and not _tiles(read, n_raw, file_size):
        _guard(read, n_raw, file_size, path)


def _precheck_compact(read, n_raw: int, file_size: int, path) -> bool:
    """precheck for the compact form: True if it judged the header (and it
    passed), False if the header is not in that form (nothing judged)."""
    if n_raw <= _WINDOW:
        return False
    tail_at = max(0, n_raw - _WINDOW)
    tail = read(tail_at, n_raw - tail_at)
    solid = np.flatnonzero(np.frombuffer(tail, np.uint8) != 0x20)
    if not solid.size:
        return False
    end = tail_at + int(solid[-1]) + 1  # the body, without its padding
    head = read(0, min(_WINDOW, end))
    hb = np.frombuffer(head, np.uint8)
    if tail[end - tail_at - 1] != 0x7D or head[:2] not in (b'{"', b"{}"):
        return False
    if head.startswith(b'{"__metadata__":{'):
        meta = _metadata_compact(head, hb, end)
        if meta is None:
            return False
        start = meta[1]
    else:
        start = 1
    if start == end or b"\\" in head[:start] or int(hb[:start].min()) < 0x20:
        return False
    try:
        head[:start].decode()
    except UnicodeDecodeError:
        return False
    data_start = 8 + n_raw
    utf8 = codecs.getincrementaldecoder("utf-8")()
    pos, gap, last_name, last_begin, last_end = 0, None, None, -1, -1
    lo, window = start, _WINDOW
    while lo < end:
        hi = min(lo + window, end)
        chunk = read(lo, hi - lo)
        b = np.frombuffer(chunk, np.uint8)
        if len(chunk) < 8 or b"\\" in chunk or int(b.min()) < 0x20:
            return False
        q = np.flatnonzero(b == 0x22)
        if hi == end:
            k = len(q) // 10 if len(q) % 10 == 0 else 0
            nxt = np.append(q[10::10], hi - lo)
        else:
            k = int(np.searchsorted(q[10::10], hi - lo - 5, "right"))  # as in _parse_fast
            nxt = q[10 : 10 * k + 1 : 10]
        if k == 0:
            if hi == end:
                return False
            window *= 2
            continue
        words = np.ndarray((len(chunk) - 7,), _W64, chunk, 0, (1,))
        cols = _entries(b, words, q[: 10 * k], nxt, hi == end) if q[0] == 0 else None
        if cols is None:
            return False
        used = int(nxt[-1])
        try:
            if int(b[:used].max()) >= 0x80:
                utf8.decode(chunk[:used])
        except UnicodeDecodeError:
            return False
        a, e, begins, ends = cols["name_a"], cols["name_e"], cols["begin"], cols["end"]
        first = chunk[int(a[0]) : int(e[0])]
        if (last_name is not None and not last_name < first) or not _increasing(words, a, e):
            return False  # names not in order: uniqueness needs the whole table
        if not (
            begins[0] >= last_begin
            and ends[0] >= last_end
            and (begins[1:] >= begins[:-1]).all()
            and (ends[1:] >= ends[:-1]).all()
        ):
            return False  # not in offset order: coverage needs a sort
        if gap is None:
            due = np.concatenate(([pos], ends[:-1]))
            bad = np.flatnonzero(begins != due)
            if bad.size:
                j = int(bad[0])
                gap = (chunk[int(a[j]) : int(e[j])].decode(), int(begins[j]), int(due[j]))
        last_name = chunk[int(a[-1]) : int(e[-1])]
        last_begin, last_end = int(begins[-1]), int(ends[-1])
        pos = last_end
        lo, window = lo + used, _WINDOW
    try:
        utf8.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    if gap is not None:
        raise _gap(*gap, data_start, path)
    _end((last_name or b"").decode(), pos, data_start, file_size, path)
    return True


# --------------------------------------------------------------------------- guard
#
# A big header the compact precheck cannot judge (spaced, names out of
# order, escapes, fields in another order) would be parsed whole: a few
# times the file by the numpy paths, ~1 KB per tensor by json.loads.  When
# only its data section is broken, _guard names the coverage error first,
# from the file a window at a time, keeping per tensor its offsets, where
# it is and a hash of its name (~28 bytes).
#
# It raises only when every other rule is known to hold, so the error is
# the one parse_header would raise: the header must be matched entry by
# entry by the patterns below (JSON's own grammar for strings, numbers and
# whitespace, the three fields in any order, keys spelled without escapes),
# be UTF-8, and every entry must pass the checks of _tensor; names must
# hash apart (a repeat -- or a collision -- is left to parse_header).
# Anything else returns, and parse_header judges the header as usual.

_WS = rb"[ \t\n\r]*"
_STR = rb'"((?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)"'
_INT = rb"(0|[1-9][0-9]*)"
_FIELD = (
    rb'(?:"dtype"' + _WS + rb":" + _WS + rb'"([A-Z0-9_]*)"'
    rb'|"shape"' + _WS + rb":" + _WS + rb"\[([0-9 \t\n\r,]*)\]"
    rb'|"data_offsets"'
    + _WS
    + rb":"
    + _WS
    + rb"\["
    + _WS
    + _INT
    + _WS
    + rb","
    + _WS
    + _INT
    + _WS
    + rb"\])"
)
_SEP = _WS + rb"," + _WS
_ENTRY_TEXT = (
    _STR + _WS + rb":" + _WS + rb"\{" + _WS + _FIELD + _SEP + _FIELD + _SEP + _FIELD + _WS + rb"\}"
)
_PAIR = _STR + _WS + rb":" + _WS + _STR
_META_TEXT = (
    rb'"__metadata__"'
    + _WS
    + rb":"
    + _WS
    + rb"(?:null|\{"
    + _WS
    + rb"(?:"
    + _PAIR
    + rb"(?:"
    + _SEP
    + _PAIR
    + rb")*)?"
    + _WS
    + rb"\})"
)
# [after '{', after an entry]: an entry with what comes before it
_ENTRY = [re.compile(_WS + _ENTRY_TEXT), re.compile(_SEP + _ENTRY_TEXT)]
_META_ENTRY = [re.compile(_WS + _META_TEXT), re.compile(_SEP + _META_TEXT)]
_NAME = re.compile(_STR)
_CLOSE = re.compile(_WS + rb"\} *\Z")


def _entry_name(text: bytes) -> str | None:
    """A JSON string's text (quotes stripped) as json.loads reads it."""
    try:
        return json.loads(b'"' + text + b'"') if b"\\" in text else text.decode()
    except ValueError:
        return None


def _entry_check(m: re.Match) -> tuple[str, int, int] | None:
    """(name, begin, end) of a matched entry if _tensor would accept it."""
    g = m.groups()
    fields: dict[str, object] = {}
    for i in (1, 5, 9):  # each field's groups: dtype, shape, begin, end
        if g[i] is not None:
            key, value = "dtype", g[i].decode()
        elif g[i + 1] is not None:
            key, value = "shape", _dims(g[i + 1])
        else:
            key, value = "data_offsets", _ints((g[i + 2], g[i + 3]))
        if key in fields or value is None:
            return None
        fields[key] = value
    name = _entry_name(g[0])
    if name is None or name == "__metadata__":
        return None
    try:  # the one set of per-entry rules
        info = _tensor(name, fields, None)
    except E.WeightsmithError:
        return None
    begin, end = info.data_offsets
    return (name, begin, end) if end < 1 << 63 else None  # the guard keeps int64s


def _dims(text: bytes) -> list[int] | None:
    """The integers of a shape's text between its brackets, as JSON reads them."""
    if not text.strip(b" \t\n\r"):
        return []
    digits = [d.strip(b" \t\n\r") for d in text.split(b",")]
    if not all(d.isdigit() and (len(d) == 1 or d[0] != 0x30) for d in digits):
        return None
    return _ints(digits)


def _ints(digits) -> list[int] | None:
    """Decimal digit strings as ints; None past 20 digits (>= 2**64, which
    parse_header names), before int() meets Python's digit limit."""
    if any(len(d) > 20 for d in digits):
        return None
    return [int(d) for d in digits]


def _unique_pairs(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("repeated key")
    return dict(pairs)


def _name_at(read, at: int, n_raw: int) -> str:
    """The name of the tensor whose key opens at ``at`` (for a message)."""
    m = _NAME.match(read(at, min(n_raw - at, 8 * _WINDOW)))
    name = _entry_name(m.group(1)) if m else None
    return name if name is not None else f"<the entry at byte {8 + at}>"


_OFFSETS = re.compile(
    rb'"data_offsets"[ \t\n\r]*:[ \t\n\r]*\[[ \t\n\r]*([0-9]+)[ \t\n\r]*,[ \t\n\r]*([0-9]+)[ \t\n\r]*\]'
)


def _tiles(read, n_raw: int, file_size: int) -> bool:
    """Do the offsets written after '"data_offsets"' tile the data section?
    A quick look (regex, no validation) that spares a sound header the
    guard's Python work per entry: in valid JSON that text is only ever a
    key with its value, so for a valid header this sees every tensor's
    offsets (unless a key is spelled with escapes: then the guard runs, and
    only costs time).  True means "nothing for the guard to find"."""
    spans = array("q")
    carry = b""
    for lo in range(0, n_raw, _WINDOW):
        piece = carry + read(lo, min(_WINDOW, n_raw - lo))
        # cut before the last key: every match lies whole in one piece
        cut = len(piece) if lo + _WINDOW >= n_raw else piece.rfind(b'"data_offsets"')
        if cut < 0:
            cut = 0
        pairs = _OFFSETS.findall(piece, 0, cut)
        if pairs:
            text = b",".join([x for pair in pairs for x in pair])
            if max(map(len, text.split(b","))) > _MAX_DIGITS:
                return False
            spans.extend(np.fromstring(text, np.int64, sep=","))
        carry = piece[cut:]
        if len(carry) > 4 * _WINDOW:
            return False
    se = np.frombuffer(spans, np.int64).reshape(-1, 2)
    if not len(se):
        return False
    bg, en = se[:, 0], se[:, 1]
    if (bg > en).any():
        return False
    order = np.lexsort((en, bg))
    bg, en = bg[order], en[order]
    return bool(bg[0] == 0 and (bg[1:] == en[:-1]).all() and en[-1] == file_size - 8 - n_raw)


def _guard(read, n_raw: int, file_size: int, path) -> None:
    """Raise the coverage error of a header whose only broken rule is
    coverage, holding a few windows and ~28 bytes per tensor; else return."""
    begins, ends, where, hashes = array("q"), array("q"), array("i"), array("q")
    buf = read(0, min(_WINDOW, n_raw))
    if buf[:1] != b"{":
        return
    at, pos, meta = 0, 1, False  # buf holds the header from byte ``at``
    while True:
        after = 1 if begins or meta else 0
        m = _ENTRY[after].match(buf, pos)
        if m is not None:
            got = _entry_check(m)
            if got is None:
                return
            name, begin, end = got
            begins.append(begin)
            ends.append(end)
            where.append(at + m.start(1) - 1)
            hashes.append(hash(name))
            pos = m.end()
            continue
        mm = _META_ENTRY[after].match(buf, pos)
        if mm is not None:
            text = mm.group(0).lstrip(b", \t\n\r")
            try:  # str -> str or null, as the pattern says; no repeated key
                json.loads(b"{" + text + b"}", object_pairs_hook=_unique_pairs)
            except ValueError:
                return
            if meta:
                return  # twice: parse_header names it
            meta, pos = True, mm.end()
            continue
        if at + len(buf) == n_raw:
            if _CLOSE.match(buf, pos):
                break
            return
        # an entry may run past the buffer: read on (one longer than a few
        # windows is left to parse_header)
        if len(buf) - pos > 4 * _WINDOW:
            return
        more = read(at + len(buf), min(_WINDOW, n_raw - at - len(buf)))
        buf, at, pos = buf[pos:] + more, at + pos, 0
    del buf
    k = len(begins)
    if not k:
        return
    h = np.sort(np.frombuffer(hashes, np.int64))
    if (h[1:] == h[:-1]).any():
        return  # a repeated name (or a collision): parse_header decides
    del h, hashes
    bg, en = np.frombuffer(begins, np.int64), np.frombuffer(ends, np.int64)
    data_start = 8 + n_raw

    def name(i: int) -> str:
        return _name_at(read, where[i], n_raw)

    order = None
    if not ((bg[1:] >= bg[:-1]).all() and (en[1:] >= en[:-1]).all()):
        order = np.lexsort((en, bg))  # stable: as _coverage's sort
        bg, en = bg[order], en[order]
    if bg[0] != 0:
        j = 0
    else:
        bad = np.flatnonzero(bg[1:] != en[:-1])
        j = int(bad[0]) + 1 if bad.size else -1
    if j >= 0:
        i = j if order is None else int(order[j])
        raise _gap(name(i), int(bg[j]), int(en[j - 1]) if j else 0, data_start, path)
    pos = int(en[-1])
    if pos != file_size - data_start:
        _end(name(k - 1 if order is None else int(order[-1])), pos, data_start, file_size, path)


_BLANK = np.zeros(256, np.bool_)
_BLANK[[0x20, 0x09, 0x0A, 0x0D]] = True  # JSON whitespace
_DIGIT = np.zeros(256, np.bool_)
_DIGIT[0x30:0x3A] = True


def _parse_squeezed(raw: bytes, file_size: int, path) -> Header | None:
    """The fast path for a header that is compact but for whitespace between
    tokens (``json.dumps``' ", " and ": ", indentation): the same JSON with
    that whitespace taken out, judged by the fast path.  None if there is
    none to take out, or if taking it out would join two numbers ("1 2")."""
    if raw[:1] != b"{" or b"\\" in raw:
        return None
    b = np.frombuffer(raw, np.uint8)
    end = _body_end(raw, b)
    if end < 2 or raw[end - 1] != 0x7D or not _BLANK[b[:end]].any():
        return None
    out = bytearray(end)
    filled, odd, last_at, last_digit = 0, 0, -2, False
    for lo in range(0, end, _WINDOW):
        s = b[lo : min(lo + _WINDOW, end)]
        quotes = np.cumsum(s == 0x22, dtype=np.uint8)  # its parity: inside a string
        keep = ~_BLANK[s] | ((quotes + odd) & 1).view(np.bool_)
        odd = (odd + int(quotes[-1])) & 1
        at = np.flatnonzero(keep)
        kept = s[at]
        if not at.size:
            continue
        digit = _DIGIT[kept]
        # a digit after whitespace taken out right after another digit
        after_gap = np.diff(at, prepend=last_at - lo) > 1
        before = np.concatenate(([last_digit], digit[:-1]))
        if (after_gap & digit & before).any():
            return None
        out[filled : filled + len(at)] = kept.tobytes()
        filled += len(at)
        last_at, last_digit = lo + int(at[-1]), bool(digit[-1])
    del out[filled:]
    return _parse_fast(out, file_size, path, size=len(raw))
