"""Writing safetensors files: ``save``, ``save_file`` and ``StreamWriter``.

The layout written is the one of :mod:`._header`, byte for byte what HF's
``safetensors`` 0.8 writes for the same tensors when there are 0 or 1
metadata keys:

* tensors ordered by dtype alignment, descending -- the reverse of the
  order of :data:`weightsmith.dtypes.SAFETENSORS`, which is HF's ``Dtype``
  enum -- then by name (code point order == UTF-8 byte order, as in Rust);
* header JSON compact (no spaces), ``__metadata__`` first when given,
  fields in the order dtype, shape, data_offsets, non-ASCII kept as UTF-8
  and control characters escaped as serde_json does;
* header padded with spaces so that the data starts at a multiple of 8.

Metadata keys are written sorted (HF writes them in hash order), so output
is reproducible for any number of keys.

Data is streamed in bounded chunks: contiguous little-endian inputs are
written straight from their memory; non-contiguous, Fortran-ordered or
big-endian arrays are converted a slab at a time (at most ``CHUNK`` bytes),
so peak extra memory stays small whatever the tensor size.  Files are
written through :func:`weightsmith._atomic.atomic_output`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .. import errors as E
from .._atomic import atomic_output, libc_function, want_fsync
from ..dtypes import SAFETENSORS, DType, from_numpy
from ..frameworks import torch as tg
from . import _subbyte

__all__ = ["CHUNK", "StreamWriter", "build_header", "save", "save_file"]

CHUNK = 8 * 1024 * 1024  # bytes converted at a time (two may be alive at once)
_LITTLE = sys.byteorder == "little"


# --------------------------------------------------------------------------- writeback


class _Writeback:
    """Start the kernel's writeback of each range as soon as it is written.

    Used only for durable writes (``fsync=True``): atomic_output then fsyncs
    before the rename, and without this that fsync would wait for the whole
    file to reach the disk after the last write.  Kicking
    ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` (asynchronous) every few MiB
    overlaps the disk writes with our copying, so the final fsync finds
    little left to do.  A no-op where the call does not exist.
    """

    _fn: Any = None
    STEP = 8 * 1024 * 1024

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.done = 0
        if _Writeback._fn is None:
            _Writeback._fn = _sync_file_range()

    def kick(self, upto: int) -> None:
        fn = self._fn
        if fn is False or upto - self.done < self.STEP:
            return
        fn(self.fd, self.done, upto - self.done, 2)  # SYNC_FILE_RANGE_WRITE
        self.done = upto

    def kick_range(self, start: int, end: int) -> None:
        if self._fn is not False:
            self._fn(self.fd, start, end - start, 2)


def _sync_file_range():
    return libc_function(
        "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    )


# --------------------------------------------------------------------------- header


def _json_str(s: str) -> str:
    # ensure_ascii=False escapes exactly what serde_json escapes: '"', '\\'
    # and the C0 controls (\b \f \n \r \t short forms, others as \u00xx).
    return json.dumps(s, ensure_ascii=False)


def _check_metadata(metadata: Mapping[str, str] | None, path=None) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise E.InvalidMetadata(
            "metadata must be a mapping of strings to strings",
            path=path,
            field="__metadata__",
            expected="a dict",
            found=type(metadata).__name__,
        )
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise E.InvalidMetadata(
                "metadata must map strings to strings",
                path=path,
                field=f"__metadata__[{k!r}]",
                expected="str -> str",
                found=f"{type(k).__name__} -> {type(v).__name__}",
            )


def build_header(
    entries: Iterable[tuple[str, DType, tuple[int, ...]]],
    metadata: Mapping[str, str] | None = None,
) -> tuple[bytes, list[tuple[str, DType, tuple[int, ...], int, int]]]:
    """The 8-byte size + padded JSON header, and the tensors in file order
    with their ``(begin, end)`` data offsets."""
    ordered = sorted(entries, key=lambda e: (-e[1].order, e[0]))
    parts = []
    if metadata is not None:
        items = ",".join(f"{_json_str(k)}:{_json_str(metadata[k])}" for k in sorted(metadata))
        parts.append('"__metadata__":{' + items + "}")
    layout = []
    pos = 0
    for name, dtype, shape in ordered:
        n = 1
        for d in shape:
            n *= d
        bits = n * dtype.bits
        if bits % 8:
            raise E.MisalignedSubByte(
                "sub-byte tensor does not fill whole bytes",
                field=f"tensor {name!r}",
                expected=f"{n} x {dtype.bits} bits to be a multiple of 8",
                found=f"{bits} bits",
            )
        end = pos + bits // 8
        dims = ",".join(str(int(d)) for d in shape)
        parts.append(
            f'{_json_str(name)}:{{"dtype":"{dtype.name}","shape":[{dims}],'
            f'"data_offsets":[{pos},{end}]}}'
        )
        layout.append((name, dtype, tuple(shape), pos, end))
        pos = end
    text = ("{" + ",".join(parts) + "}").encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, layout


# --------------------------------------------------------------------------- sources


class _Tensor:
    """One input tensor: its safetensors dtype, logical shape and a way to
    produce its little-endian bytes chunk by chunk."""

    __slots__ = ("dtype", "name", "shape", "value")

    def __init__(self, name: str, value: Any) -> None:
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, not {type(name).__name__}")
        if name == "__metadata__":
            raise E.InvalidTensorEntry(
                "'__metadata__' is reserved for the metadata",
                field="tensor '__metadata__'",
                expected="another name",
                found="'__metadata__'",
            )
        self.name = name
        self.value = value

        if tg.is_tensor(value):
            if value.layout != tg.torch().strided:
                raise ValueError(
                    f"tensor {name!r}: sparse tensors cannot be saved; call .to_dense()"
                )
            self.dtype = tg.from_torch_dtype(value.dtype)
            self.shape = tg.logical_shape(value)
            return
        if not isinstance(value, np.ndarray):
            if hasattr(value, "__array__") or isinstance(value, (int, float, bool, complex)):
                value = self.value = np.asarray(value)
            else:
                raise TypeError(
                    f"tensor {name!r}: expected a numpy array or torch tensor, "
                    f"found {type(value).__name__}"
                )
        try:
            self.dtype = from_numpy(value.dtype)
        except TypeError as exc:
            raise E.UnsupportedDtype(f"tensor {name!r}: {exc}") from None
        self.shape = tuple(value.shape)

    def chunks(self, limit: int = CHUNK) -> Iterator[memoryview]:

        if tg.is_tensor(self.value):
            return _torch_chunks(self.value, limit)
        if self.dtype.packed:
            return _packed_chunks(self.value, self.dtype.bits, limit)
        return _np_chunks(self.value, limit)


def _swapped(a: np.ndarray) -> bool:
    bo = a.dtype.byteorder
    return bo == ">" or (bo == "=" and not _LITTLE)


def _as_bytes(a: np.ndarray) -> memoryview:
    """Bytes of a C-contiguous array, no copy (works for ml_dtypes too)."""
    return memoryview(a.reshape(-1).view(np.uint8))


def _np_chunks(a: np.ndarray, limit: int) -> Iterator[memoryview]:
    swap = _swapped(a)
    if a.flags.c_contiguous and not swap:
        if a.size:
            yield _as_bytes(a)
        return
    for slab in _slabs(a, limit):
        c = np.ascontiguousarray(slab)
        if swap:
            c = c.byteswap().view(c.dtype.newbyteorder("<"))
        yield _as_bytes(c)


def _slabs(a: np.ndarray, limit: int) -> Iterator[np.ndarray]:
    """Consecutive C-order pieces of ``a`` of at most ``limit`` bytes each
    (or one row of the innermost dimension, if that is larger)."""
    if a.size == 0:
        return
    if a.ndim <= 1 or a.nbytes <= limit:
        if a.ndim == 1 and a.nbytes > limit:
            step = max(1, limit // a.itemsize)
            for i in range(0, a.shape[0], step):
                yield a[i : i + step]
            return
        yield a
        return
    row = a[0].nbytes
    if row > limit:
        for i in range(a.shape[0]):
            yield from _slabs(a[i], limit)
        return
    step = max(1, limit // row)
    for i in range(0, a.shape[0], step):
        yield a[i : i + step]


def _packed_chunks(a: np.ndarray, bits: int, limit: int) -> Iterator[memoryview]:
    ge, _gb = _subbyte.group(bits)
    flat = a.reshape(-1) if a.flags.c_contiguous else None
    n = a.size
    if n % ge:
        raise E.MisalignedSubByte(
            "sub-byte tensor does not fill whole bytes",
            expected=f"a multiple of {ge} elements",
            found=f"{n} elements",
        )
    step = max(ge, (limit // ge) * ge)
    if flat is None:
        flat = np.ascontiguousarray(a).reshape(-1)  # packed inputs are rare and small
    for i in range(0, n, step):
        yield memoryview(_subbyte.pack(flat[i : i + step].view(np.uint8), bits))


def _torch_chunks(t, limit: int) -> Iterator[memoryview]:

    if t.device.type != "cpu":
        t = t.cpu()
    if t.numel() == 0:
        return
    if t.is_contiguous() and _LITTLE:
        yield tg.tensor_bytes(t)
        return
    if t.dim() <= 1 or t.numel() * t.element_size() <= limit:
        yield tg.tensor_bytes(_le(t.contiguous()))
        return
    row = t[0].numel() * t.element_size()
    if row > limit:
        for i in range(t.shape[0]):
            yield from _torch_chunks(t[i], limit)
        return
    step = max(1, limit // row)
    for i in range(0, t.shape[0], step):
        yield tg.tensor_bytes(_le(t[i : i + step].contiguous()))


def _le(t):
    # torch has no byte-swapped dtypes; only a big-endian host would need work here.
    return t


def _prepare(tensors: Mapping[str, Any]) -> list[_Tensor]:
    if not isinstance(tensors, Mapping):
        raise TypeError(f"expected a dict of name -> tensor, found {type(tensors).__name__}")
    items = [_Tensor(k, v) for k, v in tensors.items()]

    torch_values = {t.name: t.value for t in items if tg.is_tensor(t.value)}
    if len(torch_values) > 1:
        tg.check_shared(torch_values)
    return items


# --------------------------------------------------------------------------- save


def _plan(tensors: Mapping[str, Any], metadata, path=None):
    _check_metadata(metadata, path)
    items = _prepare(tensors)
    by_name = {t.name: t for t in items}
    header, layout = build_header(((t.name, t.dtype, t.shape) for t in items), metadata)
    return header, [by_name[name] for name, *_ in layout], _file_size(header, layout)


def _file_size(header: bytes, layout: list) -> int:
    """Bytes of the whole file: the header, then the data up to the last tensor's end."""
    return len(header) + (layout[-1][4] if layout else 0)


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors``."""
    header, ordered, _size = _plan(tensors, metadata)
    out = bytearray(header)
    for t in ordered:
        for chunk in t.chunks():
            out += chunk
    return bytes(out)


def save_file(
    tensors: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    *,
    fsync: bool | None = None,
) -> None:
    """Write ``tensors`` (numpy arrays and/or torch tensors) to ``filename``,
    atomically.  ``fsync=True`` also makes the file survive a power loss
    (default: ``$WEIGHTSMITH_FSYNC``, off; see :mod:`weightsmith._atomic`)."""
    header, ordered, size = _plan(tensors, metadata, filename)
    durable = want_fsync(fsync)
    with atomic_output(filename, fsync=durable, size=size) as f:
        wb = _Writeback(f.fileno()) if durable else None
        f.write(header)
        pos = len(header)
        for t in ordered:
            for chunk in t.chunks():
                f.write(chunk)
                pos += len(chunk)
                if wb is not None and pos - wb.done >= wb.STEP:
                    f.flush()
                    wb.kick(pos)
        if pos != size:  # the file was preallocated: a short write would read as zeros
            raise E.WriteError(f"{filename}: wrote {pos} bytes, planned {size}")


# --------------------------------------------------------------------------- streaming


class StreamWriter:
    """Write a safetensors file whose tensor list is known before its data.

    ``tensors`` lists ``(name, dtype, shape)``; ``dtype`` is a code such as
    ``"BF16"`` or a :class:`DType`.  The header goes out first; data then
    arrives per tensor with :meth:`write` or piece by piece with
    :meth:`write_chunk`, in any order (each tensor's place in the file is
    known, so pieces go straight to their offset with ``pwrite``).  Memory
    use does not depend on the file size.  The file appears at ``path`` only
    when :meth:`close` finds every tensor complete; on error, or
    :meth:`abort`, nothing is left behind.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        tensors: Iterable[tuple[str, str | DType, Iterable[int]]],
        metadata: Mapping[str, str] | None = None,
        *,
        fsync: bool | None = None,
    ) -> None:
        self._path = os.fspath(path)
        self._durable = want_fsync(fsync)
        _check_metadata(metadata, self._path)
        entries = []
        seen: set[str] = set()
        for name, dtype, shape in tensors:
            d = _dtype(dtype, name)
            shp = tuple(int(x) for x in shape)
            if name in seen:
                raise E.DuplicateTensorName(
                    "tensor listed twice",
                    path=self._path,
                    field=f"tensor {name!r}",
                    expected="unique names",
                    found=f"{name!r} twice",
                )
            if name == "__metadata__" or any(x < 0 for x in shp):
                raise E.InvalidTensorEntry(
                    "invalid tensor entry",
                    path=self._path,
                    field=f"tensor {name!r}",
                    expected="a name other than '__metadata__' and a non-negative shape",
                    found=list(shp),
                )
            seen.add(name)
            entries.append((name, d, shp))
        header, layout = build_header(entries, metadata)
        self._start = len(header)
        self._slots = {name: [d, shape, b, e, 0] for name, d, shape, b, e in layout}
        total = _file_size(header, layout)
        self._ctx = atomic_output(self._path, fsync=self._durable, size=total)
        self._f = self._ctx.__enter__()
        self._closed = False
        try:
            fd = self._f.fileno()
            os.ftruncate(fd, total)  # the size, where preallocation was not possible
            self._pwrite(header, 0)
        except BaseException as exc:
            self._fail(exc)
            raise

    @property
    def path(self) -> str:
        return self._path

    def names(self) -> list[str]:
        """Tensor names in file order."""
        return list(self._slots)

    def remaining(self, name: str) -> int:
        """Bytes of ``name`` still to be written."""
        _d, _shape, b, e, filled = self._slot(name)
        return e - b - filled

    def _slot(self, name: str) -> list:
        self._check()
        try:
            return self._slots[name]
        except KeyError:
            raise E.TensorNotFound(f"{self._path}: no tensor named {name!r} was declared") from None

    def _check(self) -> None:
        if self._closed:
            raise E.ClosedFileError(f"{self._path}: StreamWriter is closed")

    def _pwrite(self, data, offset: int) -> None:
        mv = memoryview(data).cast("B")
        fd = self._f.fileno()
        start = offset
        while len(mv):
            n = os.pwrite(fd, mv, offset)
            mv = mv[n:]
            offset += n
        if self._durable and offset - start >= _Writeback.STEP:
            _Writeback(fd).kick_range(start, offset)

    def write(self, name: str, data: Any) -> None:
        """Write the whole of tensor ``name`` at once."""
        slot = self._slot(name)
        if slot[4]:
            raise E.WriteError(f"{self._path}: tensor {name!r} was already partly written")
        self.write_chunk(name, data)
        if slot[4] != slot[3] - slot[2]:
            raise E.WriteError(
                f"{self._path}: tensor {name!r}: expected {slot[3] - slot[2]} bytes, "
                f"found {slot[4]}"
            )

    def write_chunk(self, name: str, data: Any) -> None:
        """Append the next piece of tensor ``name``: raw bytes, or an array /
        tensor of its dtype (any shape; its elements are taken in C order)."""
        slot = self._slot(name)
        d, _shape, begin, end, filled = slot
        try:
            for chunk in _chunks_for(d, data, name):
                n = len(chunk)
                if filled + n > end - begin:
                    raise E.WriteError(
                        f"{self._path}: tensor {name!r}: too much data, "
                        f"expected {end - begin} bytes in all, found at least {filled + n}"
                    )
                self._pwrite(chunk, self._start + begin + filled)
                filled += n
                slot[4] = filled
        except BaseException as exc:
            if not isinstance(exc, (E.WriteError, TypeError, E.UnsupportedDtype)):
                self._fail(exc)
            raise

    def close(self) -> None:
        """Check every tensor is complete, then publish the file atomically."""
        if self._closed:
            return
        missing = [n for n, (_d, _s, b, e, filled) in self._slots.items() if filled != e - b]
        if missing:
            exc = E.WriteError(
                f"{self._path}: incomplete tensors, nothing written: "
                + ", ".join(
                    f"{n!r} ({self._slots[n][4]} of {self._slots[n][3] - self._slots[n][2]} bytes)"
                    for n in missing[:10]
                )
            )
            self._fail(exc)
            raise exc
        self._closed = True
        self._ctx.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop the temp file; ``path`` is left as it was."""
        if not self._closed:
            self._fail(E.WriteError("aborted"))

    def _fail(self, exc: BaseException) -> None:
        if self._closed:
            return
        self._closed = True
        self._ctx.__exit__(type(exc), exc, exc.__traceback__)

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            self._fail(exc)
        else:
            self.close()

    def __del__(self) -> None:
        if getattr(self, "_closed", True) is False:
            self.abort()


def _dtype(dtype: str | DType, name: str) -> DType:
    if isinstance(dtype, DType):
        return dtype
    d = SAFETENSORS.get(dtype) if isinstance(dtype, str) else None
    if d is None:
        raise E.UnknownDtype(
            "unknown dtype",
            field=f"tensor {name!r}.dtype",
            expected="a safetensors dtype code",
            found=repr(dtype),
        )
    return d


def _chunks_for(d: DType, data: Any, name: str) -> Iterator[memoryview]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield memoryview(data).cast("B")
        return
    t = _Tensor(name, data)
    if t.dtype is not d:
        raise E.UnsupportedDtype(
            f"tensor {name!r} is declared {d.name}, but the data given is {t.dtype.name}"
        )
    if d.packed and isinstance(t.value, np.ndarray) and t.value.size % _subbyte.group(d.bits)[0]:
        raise E.WriteError(
            f"tensor {name!r}: pieces of a {d.name} tensor must hold a multiple of "
            f"{_subbyte.group(d.bits)[0]} elements, found {t.value.size}"
        )
    yield from t.chunks()
