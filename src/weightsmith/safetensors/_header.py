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

import gc
import json
import operator
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


_FAST = json.JSONDecoder()
_SLOW = json.JSONDecoder(object_pairs_hook=_Obj)


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
    try:
        value, end = _FAST.raw_decode(text)
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
            value = _SLOW.raw_decode(text)[0]
    return value


# --------------------------------------------------------------------------- validation


def _kind(v) -> str:
    if isinstance(v, _OBJECTS):
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


def _dump(v) -> str:
    if isinstance(v, _OBJECTS):
        return "an object"
    try:
        return json.dumps(v)
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


def _coverage(tensors: dict[str, TensorInfo], data_start: int, file_size: int, path) -> None:
    """Sorted by offset, the tensors must tile [0, file_size - data_start)."""
    infos = list(tensors.values())
    # Usually already in offset order, which makes this sort linear.
    infos.sort(key=_BY_OFFSETS)
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
    Never touches the filesystem (the remote reader calls it on bytes).
    """
    # The parse allocates a few objects per tensor and none of them form
    # cycles: pausing the cyclic GC spares full collections over a big heap
    # (torch imported) in the middle of it.
    enabled = gc.isenabled()
    gc.disable()
    try:
        raw = bytes(header)
        return _parse_fast(raw, file_size) or _parse(raw, file_size, path)
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
# whole open (~1 ms per 1,000 tensors), and building one TensorInfo per
# tensor about as much again.  So this path proves the header is exactly
# that form with C-level string operations (split on '"', set comparisons,
# translate) and checks every rule over numpy arrays of all tensors at
# once; TensorInfo objects are then made only for the tensors asked for.
#
# It only ever *accepts*: any header that is not in this form, or breaks any
# rule, returns None and goes through the general path above, which names
# the rule.  So both paths accept exactly the same files.

_MAX_DIGITS = 18  # < 2**63: int64 arithmetic is exact; longer numbers take the general path
_BITS = {code: d.bits for code, d in SAFETENSORS.items()}
_PIECES = ((1, ":{"), (2, "dtype"), (3, ":"), (5, ","), (6, "shape"), (8, "data_offsets"))


class _Tensors(Mapping):
    """name -> TensorInfo over arrays of every tensor; infos made on demand."""

    def __init__(self, names, codes, shapes, begins, ends, n_elements, data_size) -> None:
        self._names = names  # JSON order
        self._index = dict(zip(names, range(len(names))))
        self._codes = codes
        self._shapes = shapes  # the shape lists' text, e.g. "2,3" ("" for a scalar)
        self.begins, self.ends, self.n_elements = begins, ends, n_elements
        self.data_size = data_size
        self._made: dict[str, TensorInfo] = {}

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._made.get(name)
        if info is None:
            i = self._index[name]
            info = self._made[name] = TensorInfo(
                name,
                _DTYPES[self._codes[i]],
                self.shape(i),
                (int(self.begins[i]), int(self.ends[i])),
                int(self.n_elements[i]),
            )
        return info

    def shape(self, i: int) -> tuple[int, ...]:
        text = self._shapes[i]
        return tuple(map(int, text.split(","))) if text else ()

    def plan(self):
        """Every tensor in data order: names, dtype codes, shape texts and
        begin / end offsets as lists (for readers that make all tensors)."""
        order = np.lexsort((self.ends, self.begins))
        names, codes, shapes = self._names, self._codes, self._shapes
        o = order.tolist()
        return (
            [names[i] for i in o],
            [codes[i] for i in o],
            [shapes[i] for i in o],
            self.begins[order].tolist(),
            self.ends[order].tolist(),
        )

    def __eq__(self, other: object) -> bool:
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:
        return f"<{len(self)} tensors>"


def _numbers(items: list[str], pairs: bool):
    """The integers of ``items`` (each digits and commas), or None if any
    number is empty, has a leading zero or too many digits.  ``pairs``:
    every item must be exactly two numbers (data_offsets); otherwise an item
    may be empty (the shape of a scalar).  Returns (numbers, how many
    numbers each item holds)."""
    text = ";".join(items)
    if not text:
        return np.zeros(0, np.int64), np.zeros(len(items), np.int64)
    try:
        b = np.frombuffer(text.encode("ascii"), np.uint8)
    except UnicodeEncodeError:
        return None
    digit = (b >= 48) & (b <= 57)
    cut = np.flatnonzero(~digit)  # every separator
    kinds = b[cut]
    semis = kinds == 59
    if not (semis | (kinds == 44)).all() or np.count_nonzero(semis) != len(items) - 1:
        return None  # not only digits and commas, or a ';' inside an item
    if pairs and not (
        cut.size == 2 * len(items) - 1 and (kinds[0::2] == 44).all() and (kinds[1::2] == 59).all()
    ):
        return None
    # the numbers lie between separators; a ';' may only border an empty
    # item, never an empty number between commas
    edges = np.concatenate(([-1], cut, [b.size]))
    lengths = np.diff(edges) - 1
    comma_left = np.concatenate(([False], kinds == 44))
    comma_right = np.concatenate((kinds == 44, [False]))
    if ((lengths == 0) & (comma_left | comma_right)).any() or (lengths > _MAX_DIGITS).any():
        return None
    firsts = edges[:-1] + 1
    if ((b[np.minimum(firsts, b.size - 1)] == 48) & (lengths > 1)).any():
        return None  # a leading zero
    full = lengths > 0
    count = np.bincount(np.cumsum(np.concatenate(([0], semis)))[full], minlength=len(items))
    if pairs or full.all():
        fields = text.replace(";", ",")
    else:  # drop the empty items (scalars' shapes)
        fields = ",".join(f for f in text.replace(";", ",").split(",") if f)
    out = np.fromstring(fields, dtype=np.int64, sep=",") if fields else np.zeros(0, np.int64)
    return (out, count) if len(out) == int(full.sum()) else None


def _metadata_fast(parts: list[str]) -> tuple[dict[str, str] | None, int] | None:
    """(metadata, index of the first tensor name) from the '"'-split header."""
    if len(parts) < 3 or parts[1] != "__metadata__":
        return None, 1
    if parts[2] == ":{},":
        return {}, 3
    if parts[2] != ":{":
        return None
    md: dict[str, str] = {}
    j = 3
    while j + 3 < len(parts) and parts[j + 1] == ":" and parts[j] not in md:
        md[parts[j]] = parts[j + 2]
        sep = parts[j + 3]
        j += 4
        if sep == "},":
            return md, j
        if sep != ",":
            break
    return None


def _parse_fast(raw: bytes, file_size: int) -> Header | None:
    """A Header for a compact, well-formed header; None for anything else."""
    if raw[:1] != b"{" or b"\\" in raw or np.frombuffer(raw, np.uint8).min() < 32:
        return None
    try:
        body = raw.decode("utf-8").rstrip(" ")
    except UnicodeDecodeError:
        return None
    if len(body) < 2 or body[-1] != "}":
        return None
    data_size = file_size - 8 - len(raw)
    if body == "{}":
        return Header(None, {}, len(raw)) if data_size == 0 else None
    # Every '"' delimits a string (no backslash), so splitting on it gives
    # strings and the text between them alternately.  The closing '}' is
    # turned into ',' so every tensor entry ends alike, with '},'.
    parts = (body[:-1] + ",").split('"')
    if parts[0] != "{":
        return None
    meta = _metadata_fast(parts)
    if meta is None:
        return None
    metadata, first = meta
    rest = parts[first:]
    k, odd = divmod(len(rest), 10)
    if odd:
        return None
    for at, want in _PIECES:
        if rest[at::10] != [want] * k:
            return None
    names, codes = rest[0::10], rest[4::10]
    if "__metadata__" in names:
        return None
    # ':[' dims '],' and ':[' begin ',' end ']},', joined with '"' (which no
    # piece contains) so the splits below can only cut at piece boundaries.
    shp = '"'.join(rest[7::10])
    offs = '"'.join(rest[9::10])
    if k and not (shp[:2] == ":[" and shp[-2:] == "]," and offs[:2] == ":[" and offs[-3:] == "]},"):
        return None
    shapes = shp[2:-2].split('],":[') if k else []
    spans = offs[2:-3].split(']},":[') if k else []
    if len(shapes) != k or len(spans) != k:
        return None
    offsets = _numbers(spans, True)
    dims = _numbers(shapes, False)
    bits = list(map(_BITS.get, codes))
    if offsets is None or dims is None or None in bits:
        return None
    return _check_fast(names, codes, shapes, dims, offsets[0], bits, data_size, metadata, len(raw))


def _check_fast(names, codes, shapes, dims_ndim, offsets, bits, data_size, metadata, n):
    k = len(names)
    dims, ndim = dims_ndim
    n_el = np.ones(k, np.int64)
    has = ndim > 0
    if dims.size:
        starts = np.cumsum(ndim) - ndim
        # float64 products bound the exact ones: anything near 2**63 bits
        # takes the general path, whose arithmetic is unbounded.
        approx = np.multiply.reduceat(dims.astype(np.float64), starts[has])
        if (approx * 8).max() >= 2.0**62:
            return None
        n_el[has] = np.multiply.reduceat(dims, starts[has])
    nbits = n_el * np.array(bits, np.int64)
    begins, ends = offsets[0::2], offsets[1::2]
    if (nbits & 7).any() or not np.array_equal(ends - begins, nbits >> 3):
        return None
    if k:
        if (begins[1:] >= begins[:-1]).all() and (ends[1:] >= ends[:-1]).all():
            b, e = begins, ends
        else:
            order = np.lexsort((ends, begins))
            b, e = begins[order], ends[order]
        if b[0] != 0 or not np.array_equal(b[1:], e[:-1]) or e[-1] != data_size:
            return None
    elif data_size:
        return None
    tensors = _Tensors(names, codes, shapes, begins, ends, n_el, data_size)
    if len(tensors._index) != k:  # a repeated name
        return None
    return Header(metadata, tensors, n)
