"""The one GGUF header parser: magic, version, counts, KVs and tensor infos.

The byte layout is stated in :mod:`weightsmith.gguf._spec`.  :func:`parse`
works on any buffer: a whole file (an mmap) or only a *prefix* of it (bytes
fetched over HTTP).  When it needs bytes past the end of a prefix of a longer
file it raises :class:`~weightsmith.errors.NeedMoreData`; when the file itself
is too short it raises the named :class:`~weightsmith.errors.GGUFError` of the
field that runs past the end.

Large arrays are never turned into Python objects while parsing: numeric
arrays become numpy views of the buffer, and a string array becomes one array
of offsets (where each string's length prefix sits), found by one linear pass
in C (``csrc/gguf_meta.c``) that checks every length against the bytes left.
Values turn into Python objects on first access through :class:`Metadata`
(a whole string array by one C decode).
Every count is checked against the bytes left in the file before anything is
allocated for it, so no input can make the parser allocate more than the file
size justifies, and every loop advances through the file, so none can hang.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import errors as E
from .._native import gguf_meta as _c
from ..dtypes import GGML_BY_ID, GGMLType
from ._spec import (
    DEFAULT_ALIGNMENT,
    INT64_MAX,
    KEY_ALIGNMENT,
    MAGIC,
    MAX_DIMS,
    MAX_NAME,
    MAX_NESTING,
    NUMPY,
    SHORT_NAME,
    SIZE,
    STRUCT_CODE,
    VT,
    GGUFValueType,
    MetaType,
    pad,
)

__all__ = ["GGUFHeader", "Metadata", "StringArray", "TensorInfo", "parse"]

_N_TYPES = len(GGUFValueType)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor of a GGUF file.

    ``shape`` is numpy order (outermost first), ``dims`` ggml order as stored;
    ``offset`` is absolute in the file that holds the tensor (``shard`` is
    that file's index in a split set, 0 otherwise), ``rel_offset`` is the
    stored offset relative to the data section.
    """

    name: str
    ggml_type: GGMLType
    shape: tuple[int, ...]
    dims: tuple[int, ...]
    offset: int
    nbytes: int
    n_elements: int
    rel_offset: int
    shard: int = 0

    @property
    def type_name(self) -> str:
        return self.ggml_type.name


class StringArray(Sequence):
    """A GGUF string array decoded lazily: one ``str`` per access, or all at once by :meth:`tolist`.

    Holds the buffer and, per string, where its length prefix sits (relative
    to the array's first byte; one more entry for the end), as found by the
    parser.  Strings are decoded as UTF-8 with ``surrogateescape`` so that
    arbitrary bytes survive a read / write round trip.
    """

    __slots__ = ("_base", "_buf", "_cache", "_offsets", "_width")

    def __init__(self, buf: memoryview, base: int, offsets: np.ndarray, width: int) -> None:
        self._buf = buf
        self._base = base
        self._offsets = offsets
        self._width = width
        self._cache: list[str] | None = None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def raw(self, i: int) -> bytes:
        """String ``i``'s bytes as stored."""
        n = len(self)
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"string index {i} out of range ({n} strings)")
        s = self._base + int(self._offsets[k]) + self._width
        return bytes(self._buf[s : self._base + int(self._offsets[k + 1])])

    def __getitem__(self, i):  # type: ignore[override]
        if self._cache is not None:
            return self._cache[i]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw(i).decode("utf-8", "surrogateescape")

    def tolist(self) -> list[str]:
        """Every string, decoded once (in C) and cached."""
        if self._cache is None:
            self._cache = _c.decode(self._buf, self._base, self._offsets, self._width)
        return self._cache

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __repr__(self) -> str:
        return f"StringArray(len={len(self)})"


@dataclass(slots=True)
class KV:
    """One metadata entry as parsed: type, raw value and byte span."""

    key: str
    type: MetaType
    raw: Any  # Python scalar/str, numpy view, StringArray, or list (nested arrays)
    start: int  # offset of the key's length prefix
    end: int  # offset just past the value

    @property
    def count(self) -> int | None:
        return len(self.raw) if self.type.type is VT.ARRAY else None


def _materialize(raw: Any, mtype: MetaType) -> Any:
    if mtype.type is not VT.ARRAY:
        return raw
    if isinstance(raw, StringArray):
        return list(raw.tolist())
    if isinstance(raw, np.ndarray):
        if mtype.element is not None and mtype.element.type is VT.BOOL:
            return (raw != 0).tolist()
        return raw.tolist()
    return [_materialize(r, t) for r, t in raw]


class Metadata(Mapping):
    """Ordered mapping key -> Python value; arrays are converted on first access."""

    def __init__(self, kvs: dict[str, KV]) -> None:
        self._kvs = kvs
        self._cache: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._cache[key]
        except KeyError:
            pass
        kv = self._kvs[key]
        value = _materialize(kv.raw, kv.type)
        self._cache[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._kvs)

    def __len__(self) -> int:
        return len(self._kvs)

    def __contains__(self, key: object) -> bool:
        return key in self._kvs

    def type(self, key: str) -> MetaType:
        return self._kvs[key].type

    def kv(self, key: str) -> KV:
        return self._kvs[key]

    def __repr__(self) -> str:
        return f"Metadata({len(self)} keys)"


@dataclass
class GGUFHeader:
    """Everything before the tensor data: version, byte order, metadata, tensor infos."""

    version: int
    byte_order: str  # "<" or ">"
    alignment: int
    metadata: Metadata
    tensors: list[TensorInfo]
    data_start: int
    header_end: int  # end of the tensor infos (before padding)
    kv_start: int
    kv_end: int
    file_size: int
    path: str | None = None
    kvs: dict[str, KV] = field(default_factory=dict, repr=False)

    def metadata_type(self, key: str) -> MetaType:
        """The GGUF type of ``key`` (and the element type for arrays)."""
        return self.kvs[key].type

    def array(self, key: str) -> Any:
        """An array value without converting it: a numpy view, a StringArray, or a list (nested)."""
        kv = self.kvs[key]
        if kv.type.type is VT.ARRAY and isinstance(kv.raw, np.ndarray):
            if kv.type.element is not None and kv.type.element.type is VT.BOOL:
                return kv.raw != 0
            return kv.raw
        if kv.type.type is VT.ARRAY and not isinstance(kv.raw, StringArray):
            return [r for r, _ in kv.raw]
        return kv.raw

    def summary(self, key: str) -> str:
        """A cheap one-line description: the value for scalars, ``arr[str] x 262144`` for arrays."""
        kv = self.kvs[key]
        if kv.type.type is VT.ARRAY:
            return f"{kv.type} x {len(kv.raw)}"
        return f"{SHORT_NAME[kv.type.type]} {kv.raw!r}"


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, buf: Any, file_size: int | None, path: Any) -> None:
        mv = memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        self.mv = mv
        self.file_size = len(mv) if file_size is None else int(file_size)
        self.n = min(len(mv), self.file_size)
        self.path = os.fspath(path) if path is not None else None
        self.remaining_kv = 0
        self.remaining_tensors = 0

    # -- bounds ---------------------------------------------------------------

    def err(self, cls: type[E.GGUFError], what: str = "", **kw: Any) -> E.GGUFError:
        return cls(what, path=self.path, **kw)

    def more(self, end: int) -> E.NeedMoreData:
        """NeedMoreData with a guess at the whole header: ``end`` plus the items still to come."""
        guess = end + 96 * self.remaining_kv + 160 * self.remaining_tensors + 4096
        return E.NeedMoreData(min(self.file_size, max(guess, end)))

    def need(
        self, end: int, cls: type[E.GGUFError], field: str, offset: int, expected: Any
    ) -> None:
        """Make sure bytes up to ``end`` are here: NeedMoreData on a prefix, ``cls`` past the file end."""
        if end <= self.n:
            return
        if end > self.file_size:
            raise self.err(
                cls,
                "runs past the end of the file",
                field=field,
                offset=offset,
                expected=expected,
                found=f"{self.file_size - offset} bytes left",
            )
        raise self.more(end)

    def _fixed(self, fmt: struct.Struct, pos: int, field: str) -> Any:
        self.need(pos + fmt.size, E.GGUFTruncated, field, pos, f"{fmt.size} bytes")
        return fmt.unpack_from(self.mv, pos)[0]

    # -- header ---------------------------------------------------------------

    def parse(self) -> GGUFHeader:
        if self.n < 4 and self.file_size > self.n:
            raise E.NeedMoreData(min(self.file_size, 4096))
        magic = bytes(self.mv[:4])
        if magic != MAGIC:
            raise self.err(E.GGUFInvalidMagic, field="magic", offset=0, expected=MAGIC, found=magic)
        raw = self._fixed(struct.Struct("<I"), 4, "version")
        order = "<"
        if raw & 0xFFFF == 0 and raw != 0:
            order = ">"
            raw = struct.unpack(">I", struct.pack("<I", raw))[0]
        if raw not in (1, 2, 3):
            raise self.err(
                E.GGUFUnsupportedVersion, field="version", offset=4, expected="1, 2 or 3", found=raw
            )
        self.version = raw
        self.order = order
        self.s = {t: struct.Struct(order + c) for t, c in STRUCT_CODE.items()}
        self.u32 = self.s[VT.UINT32]
        self.u64 = self.s[VT.UINT64]
        self.len_s = self.u32 if raw == 1 else self.u64  # counts and lengths
        lw = self.len_s.size
        n_tensors = self._fixed(self.len_s, 8, "n_tensors")
        n_kv = self._fixed(self.len_s, 8 + lw, "n_kv")
        pos = 8 + 2 * lw
        self._check_counts(n_tensors, n_kv, pos)

        kvs, pos = self._kvs(pos, n_kv)
        kv_end = pos
        alignment = self._alignment(kvs)
        tensors, pos = self._tensor_infos(pos, n_tensors, alignment)
        header_end = pos
        data_start = pad(header_end, alignment)
        if tensors and data_start > self.file_size:
            raise self.err(
                E.GGUFDataPastEOF,
                "data section starts past the end of the file",
                field="data section",
                offset=data_start,
                expected=f"<= {self.file_size}",
                found=data_start,
            )
        tensors = self._place(tensors, data_start, alignment)
        return GGUFHeader(
            version=self.version,
            byte_order=order,
            alignment=alignment,
            metadata=Metadata(kvs),
            tensors=tensors,
            data_start=data_start,
            header_end=header_end,
            kv_start=8 + 2 * lw,
            kv_end=kv_end,
            file_size=self.file_size,
            path=self.path,
            kvs=kvs,
        )

    def _check_counts(self, n_tensors: int, n_kv: int, pos: int) -> None:
        # smallest possible KV: key length + 1 byte key + type + 1 byte value;
        # smallest tensor info: name length + n_dims + type + offset (0 dims).
        lw = self.len_s.size
        min_kv, min_ti = lw + 1 + 4 + 1, lw + 4 + 4 + 8
        left = self.file_size - pos
        if n_kv * min_kv > left:
            raise self.err(
                E.GGUFCountTooLarge,
                "KV count cannot fit in the file",
                field="n_kv",
                offset=pos - lw,
                expected=f"<= {left // min_kv}",
                found=n_kv,
            )
        if n_kv * min_kv + n_tensors * min_ti > left:
            raise self.err(
                E.GGUFCountTooLarge,
                "tensor count cannot fit in the file",
                field="n_tensors",
                offset=pos - 2 * lw,
                expected=f"<= {(left - n_kv * min_kv) // min_ti}",
                found=n_tensors,
            )

    # -- strings --------------------------------------------------------------

    def _string_span(self, pos: int, field: str) -> tuple[int, int]:
        """(start, end) of the string whose length prefix is at ``pos``."""
        n = self._fixed(self.len_s, pos, f"{field} length")
        start = pos + self.len_s.size
        if n > self.file_size - start:
            raise self.err(
                E.GGUFStringTooLong,
                "string runs past the end of the file",
                field=field,
                offset=pos,
                expected=f"length <= {self.file_size - start}",
                found=n,
            )
        if start + n > self.n:
            raise self.more(start + n)
        return start, start + n

    def _name(self, pos: int, field: str) -> tuple[str, int, int]:
        start, end = self._string_span(pos, field)
        try:
            name = str(self.mv[start:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise self.err(
                E.GGUFInvalidUTF8, field=field, offset=start, expected="UTF-8", found=str(exc)
            ) from None
        return name, start, end

    # -- KVs ------------------------------------------------------------------

    def _kvs(self, pos: int, n_kv: int) -> tuple[dict[str, KV], int]:
        kvs: dict[str, KV] = {}
        self.remaining_kv = n_kv
        for i in range(n_kv):
            self.remaining_kv = n_kv - i
            start = pos
            key, _, pos = self._name(pos, f"key {i}")
            if not key:
                raise self.err(
                    E.GGUFEmptyKey, field=f"key {i}", offset=start, expected="a key", found="''"
                )
            if key in kvs:
                raise self.err(
                    E.GGUFDuplicateKey,
                    field=f"key {key!r}",
                    offset=start,
                    expected="unique keys",
                    found=f"{key!r} again (first at offset {kvs[key].start})",
                )
            vt = self._vtype(pos, f"{key!r} type")
            raw, mtype, pos = self._value(vt, pos + 4, key, 0)
            kvs[key] = KV(key, mtype, raw, start, pos)
        self.remaining_kv = 0
        return kvs, pos

    def _vtype(self, pos: int, field: str) -> GGUFValueType:
        t = self._fixed(self.u32, pos, field)
        if t >= _N_TYPES:
            raise self.err(
                E.GGUFUnknownValueType, field=field, offset=pos, expected="0..12", found=t
            )
        return GGUFValueType(t)

    def _value(
        self, vt: GGUFValueType, pos: int, key: str, depth: int
    ) -> tuple[Any, MetaType, int]:
        if vt is VT.STRING:
            start, end = self._string_span(pos, f"{key!r} value")
            return str(self.mv[start:end], "utf-8", "surrogateescape"), MetaType(vt), end
        if vt is VT.ARRAY:
            return self._array(pos, key, depth + 1)
        s = self.s[vt]
        v = self._fixed(s, pos, f"{key!r} value")
        if vt is VT.BOOL:
            v = v != 0
        return v, MetaType(vt), pos + s.size

    def _array(self, pos: int, key: str, depth: int) -> tuple[Any, MetaType, int]:
        field = f"{key!r} array"
        if depth > MAX_NESTING:
            raise self.err(
                E.GGUFNestingTooDeep,
                field=field,
                offset=pos,
                expected=f"<= {MAX_NESTING} levels",
                found=depth,
            )
        et = self._vtype(pos, f"{field} element type")
        count = self._fixed(self.len_s, pos + 4, f"{field} count")
        pos += 4 + self.len_s.size
        lw = self.len_s.size
        elsize = SIZE.get(et) or (lw if et is VT.STRING else 4 + lw)
        left = self.file_size - pos
        if count * elsize > left:
            raise self.err(
                E.GGUFArrayTooLong,
                "array runs past the end of the file",
                field=field,
                offset=pos - lw,
                expected=f"count <= {left // elsize} ({SHORT_NAME[et]})",
                found=count,
            )
        if et is VT.STRING:
            arr, end = self._scan_strings(pos, count, field)
            return arr, MetaType(VT.ARRAY, MetaType(et)), end
        if et is VT.ARRAY:
            items: list[tuple[Any, MetaType]] = []
            inner: MetaType | None = None
            for _ in range(count):
                raw, mt, pos = self._array(pos, key, depth + 1)
                items.append((raw, mt))
                inner = inner or mt
            return items, MetaType(VT.ARRAY, inner or MetaType(VT.ARRAY)), pos
        end = pos + count * elsize
        if end > self.n:
            raise self.more(end)
        view = np.frombuffer(self.mv, NUMPY[et].newbyteorder(self.order), count, pos)
        return view, MetaType(VT.ARRAY, MetaType(et)), end

    def _scan_strings(self, pos: int, count: int, field: str) -> tuple[StringArray, int]:
        """The ``count`` consecutive strings from ``pos`` and their end, found by a C pass.

        The pass stops at the first string that is not all in the buffer or
        runs past the end of the file; that string is then read again here by
        :meth:`_string_span`, whose checks name the error (or ask for more of
        a prefix).  Only when every string is there are their offsets stored,
        by a second pass: uint32 unless the strings span 4 GiB, so never more
        bytes than their own length prefixes (bar a v1 array of over 4 GiB).
        """
        lw = self.len_s.size
        big = self.order == ">"
        got, at = _c.scan(self.mv, self.n, pos, count, self.file_size, lw, big, None)
        if got == count:
            offsets = np.empty(count + 1, np.uint32 if at - pos <= 0xFFFF_FFFF else np.uint64)
            _c.scan(self.mv, self.n, pos, count, self.file_size, lw, big, offsets)
            return StringArray(self.mv, pos, offsets, lw), at
        try:
            self._string_span(at, f"{field}[{got}]")
        except E.NeedMoreData as e:
            # a prefix ended inside the array: ask for the rest of it too, guessing
            # the strings still to come are as long as those actually scanned (what
            # the rest of the header needs beyond them is in e.needed's margin)
            per = max((at - pos) / got if got else 0.0, lw + 1)
            margin = max(e.needed - max(at, self.n), 0)
            guess = int(at + (count - got) * per) + margin
            raise E.NeedMoreData(min(self.file_size, max(guess, e.needed))) from None
        raise AssertionError(f"string scan stopped at a valid string ({field}[{got}])")

    # -- alignment ------------------------------------------------------------

    def _alignment(self, kvs: dict[str, KV]) -> int:
        kv = kvs.get(KEY_ALIGNMENT)
        if kv is None:
            return DEFAULT_ALIGNMENT
        if kv.type != MetaType(VT.UINT32):
            raise self.err(
                E.GGUFInvalidAlignment,
                field=KEY_ALIGNMENT,
                offset=kv.start,
                expected="type u32",
                found=f"type {kv.type}",
            )
        a = kv.raw
        if a == 0 or a & (a - 1):
            raise self.err(
                E.GGUFInvalidAlignment,
                field=KEY_ALIGNMENT,
                offset=kv.start,
                expected="a power of two",
                found=a,
            )
        return a

    # -- tensor infos ---------------------------------------------------------

    def _tensor_infos(self, pos: int, n_tensors: int, alignment: int) -> tuple[list, int]:
        out: list[tuple] = []
        seen: dict[str, int] = {}
        dim_s = self.len_s
        dw = dim_s.size
        u32, u64 = self.u32, self.u64
        for i in range(n_tensors):
            self.remaining_tensors = n_tensors - i
            start = pos
            name, s, pos = self._name(pos, f"tensor {i} name")
            if pos - s >= MAX_NAME:
                raise self.err(
                    E.GGUFTensorNameTooLong,
                    field=f"tensor {name!r} name",
                    offset=start,
                    expected=f"< {MAX_NAME} bytes",
                    found=pos - s,
                )
            if name in seen:
                raise self.err(
                    E.GGUFDuplicateTensor,
                    field=f"tensor {name!r}",
                    offset=start,
                    expected="unique tensor names",
                    found=f"{name!r} again (tensor {seen[name]})",
                )
            seen[name] = i
            tf = f"tensor {name!r}"
            n_dims = self._fixed(u32, pos, f"{tf} n_dims")
            if n_dims > MAX_DIMS:
                raise self.err(
                    E.GGUFTooManyDims,
                    field=f"{tf} n_dims",
                    offset=pos,
                    expected=f"<= {MAX_DIMS}",
                    found=n_dims,
                )
            pos += 4
            self.need(
                pos + n_dims * dw + 12, E.GGUFTruncated, f"{tf} dims", pos, "dims, type and offset"
            )
            dims = struct.unpack_from(self.order + dim_s.format[-1] * n_dims, self.mv, pos)
            n_el = 1
            for d, v in enumerate(dims):
                if v == 0 or v > INT64_MAX:
                    raise self.err(
                        E.GGUFInvalidDim,
                        field=f"{tf} dims[{d}]",
                        offset=pos + d * dw,
                        expected="1 .. 2**63-1",
                        found=v if v <= INT64_MAX else v - (1 << 64),
                    )
                n_el *= v
            if n_el > INT64_MAX:
                raise self.err(
                    E.GGUFSizeOverflow,
                    "element count overflows int64",
                    field=f"{tf} dims",
                    offset=pos,
                    expected="<= 2**63-1",
                    found=n_el,
                )
            pos += n_dims * dw
            tid = u32.unpack_from(self.mv, pos)[0]
            gt = GGML_BY_ID.get(tid)
            if gt is None:
                raise self.err(
                    E.GGUFUnknownGGMLType,
                    field=f"{tf} type",
                    offset=pos,
                    expected="a ggml type number",
                    found=tid,
                )
            if (dims[0] if dims else 1) % gt.block_size:
                raise self.err(
                    E.GGUFRowNotBlockMultiple,
                    field=f"{tf} dims[0]",
                    offset=pos - n_dims * dw,
                    expected=f"a multiple of {gt.block_size} ({gt.name})",
                    found=dims[0] if dims else 1,
                )
            nbytes = gt.nbytes(n_el)
            if nbytes > INT64_MAX:
                raise self.err(
                    E.GGUFSizeOverflow,
                    "byte count overflows int64",
                    field=tf,
                    offset=start,
                    expected="<= 2**63-1",
                    found=nbytes,
                )
            rel = u64.unpack_from(self.mv, pos + 4)[0]
            out.append((name, gt, dims, n_el, nbytes, rel, pos + 4))
            pos += 12
        self.remaining_tensors = 0
        return out, pos

    def _place(self, infos: list[tuple], data_start: int, alignment: int) -> list[TensorInfo]:
        tensors: list[TensorInfo] = []
        prev_off, prev_end, prev_name = -1, 0, ""
        for name, gt, dims, n_el, nbytes, rel, at in infos:
            tf = f"tensor {name!r} offset"
            if rel % alignment:
                raise self.err(
                    E.GGUFUnalignedOffset,
                    field=tf,
                    offset=at,
                    expected=f"a multiple of {alignment}",
                    found=rel,
                )
            if rel < prev_off:
                raise self.err(
                    E.GGUFTensorOutOfOrder,
                    field=tf,
                    offset=at,
                    expected=f">= {prev_off} (offset of {prev_name!r})",
                    found=rel,
                )
            if rel < prev_end:
                raise self.err(
                    E.GGUFTensorOverlap,
                    field=tf,
                    offset=at,
                    expected=f">= {prev_end} (end of {prev_name!r})",
                    found=rel,
                )
            end = data_start + rel + nbytes
            if end > self.file_size:
                raise self.err(
                    E.GGUFDataPastEOF,
                    "tensor data runs past the end of the file",
                    field=f"tensor {name!r}",
                    offset=at,
                    expected=f"end <= {self.file_size}",
                    found=end,
                )
            tensors.append(
                TensorInfo(
                    name,
                    gt,
                    tuple(reversed(dims)),
                    tuple(dims),
                    data_start + rel,
                    nbytes,
                    n_el,
                    rel,
                )
            )
            prev_off, prev_end, prev_name = rel, rel + nbytes, name
        return tensors


def parse(buf: Any, file_size: int | None = None, path: Any = None) -> GGUFHeader:
    """Parse the GGUF header in ``buf`` (the whole file, or a prefix of a ``file_size``-byte file).

    Raises :class:`~weightsmith.errors.NeedMoreData` when ``buf`` is a prefix
    that ends too early, and a named :class:`~weightsmith.errors.GGUFError`
    when the file breaks a rule.
    """
    return _Parser(buf, file_size, path).parse()
