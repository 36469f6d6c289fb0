"""Reading safetensors files: ``safe_open``, slices, ``load_file``.

The header is read with two ``pread`` calls and validated in full by
:func:`parse_header` before any tensor is handed out (a header bigger than
4 MiB is validated from the file a window at a time by :func:`read_header`,
so a broken file fails before its header is held whole).  Tensor data then
comes from one of two sources:

* ``backend="mmap"`` (default): one mapping of the whole file.  numpy
  arrays are zero-copy, read-only views on it (``PROT_READ``).  Other
  frameworks have no read-only tensors, so for them the mapping is private
  copy-on-write: tensors are zero-copy where the framework can wrap foreign
  memory (see :mod:`weightsmith.frameworks`), and writing to one never
  reaches the file.
* ``backend="pread"``: ``os.preadv`` straight into freshly allocated arrays,
  for filesystems where mmap fails or is slow (some network mounts).
  ``mmap=False`` is the older spelling of the same thing.

``framework`` takes HF's names: ``np``/``numpy``, ``pt``/``torch``/``pytorch``,
``flax``/``jax``, ``tf``/``tensorflow``, ``mlx`` and ``paddle``.  numpy and
torch are handled here; the others get the numpy array and hand it to the
adapter of :func:`weightsmith.frameworks.adapter`.

Slicing (``get_slice(name)[key]``) follows numpy basic indexing exactly.  On
the mmap path the result is a numpy view of the mapping (only the pages the
caller touches are read).  On the pread path, and for packed sub-byte types,
a small cost model picks which byte runs to read: whole rows of the inner
dimensions, one read per selected index of the outer dimensions.

Remote files: ``filename`` may be ``hf://ORG/REPO[@REV]/PATH``, an
``http(s)://`` URL or any fsspec URL (options in ``remote=``, a
:class:`weightsmith.byteio.RemoteOptions`).  The header is read with one
ranged request of :data:`SPECULATIVE` bytes (a second one only when the
header is larger); tensor bytes are fetched when asked for, through
:class:`weightsmith.byteio.RemoteFile` (parallel ranges in a bounded window,
optional block cache, retries, changed-file checks).  A slice fetches only the
byte runs it needs: the cost model above runs without a per-read penalty, and
runs that touch are merged into one request.  ``get_tensors`` fetches every
tensor in one batch of parallel requests.

Closing is deterministic (``close()`` / ``with``).  Arrays already handed
out stay valid: the mapping is unmapped when the last of them goes away.
Using the handle or a slice object after close raises ClosedFileError.
"""

from __future__ import annotations

import contextlib
import mmap as _mmap
import operator
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import errors as E
from ..byteio import RemoteFile, RemoteOptions, is_url, open_remote
from ..dtypes import SAFETENSORS, DType
from ..frameworks import torch as tg
from . import _subbyte
from ._header import Header, TensorInfo, parse_header, read_header, read_header_size

__all__ = ["BACKENDS", "SPECULATIVE", "SafeSlice", "load", "load_file", "safe_open", "use_mmap"]

#: bytes of the first (speculative) read of a remote file: the 8-byte length and,
#: for most files, the whole JSON header, in one request
SPECULATIVE = 100 * 1024

_FRAMEWORKS = {
    "np": "np",
    "numpy": "np",
    "pt": "pt",
    "torch": "pt",
    "pytorch": "pt",
    "flax": "flax",
    "jax": "flax",
    "tf": "tf",
    "tensorflow": "tf",
    "mlx": "mlx",
    "paddle": "paddle",
}
# frameworks whose tensors may live on another device than the CPU
_DEVICE_FRAMEWORKS = ("pt", "paddle")
BACKENDS = ("mmap", "pread")
_MADV_POPULATE_READ = 22  # Linux >= 5.14; absent from the mmap module's names
# One pread per selected index costs about as much as reading this many
# extra bytes in one go (syscall + Python loop vs memcpy from page cache).
_READ_PENALTY = 16 * 1024
_LITTLE = sys.byteorder == "little"


def _framework(fw: str) -> str:
    try:
        return _FRAMEWORKS[fw]
    except (KeyError, TypeError):
        raise E.UnsupportedFramework(
            f"framework {fw!r} is invalid: expected one of {', '.join(_FRAMEWORKS)}"
        ) from None


def use_mmap(backend: str) -> bool:
    """True for ``backend="mmap"``, False for ``"pread"``; UnsupportedBackend otherwise."""
    if backend not in BACKENDS:
        raise E.UnsupportedBackend(
            f"backend {backend!r} is invalid: expected one of {', '.join(BACKENDS)}"
        )
    return backend == "mmap"


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise E.SafetensorsFileNotFound(exc.errno, exc.strerror, path) from None


def _pread_into(fd: int, buf, offset: int, path) -> None:
    """Fill ``buf`` (writable buffer) from ``offset``; TruncatedData if short."""
    mv = memoryview(buf).cast("B")
    while len(mv):
        n = os.preadv(fd, [mv], offset)
        if n <= 0:
            raise E.TruncatedData(
                "file ended while reading (did it shrink?)",
                path=path,
                offset=offset,
                expected=f"{len(mv)} more bytes",
                found="end of file",
            )
        mv = mv[n:]
        offset += n


def _pread_bytes(fd: int, n: int, offset: int, path) -> bytes:
    """``n`` bytes at ``offset`` as one bytes object (the header: parsed
    and kept without a copy); TruncatedData if the file is shorter."""
    raw = os.pread(fd, n, offset)
    if len(raw) < n:  # a short read: rare, finish it in a buffer
        buf = bytearray(raw) + bytearray(n - len(raw))
        _pread_into(fd, memoryview(buf)[len(raw) :], offset + len(raw), path)
        raw = bytes(buf)
    return raw


# Validated headers of recently opened files.  parse_header is a pure
# function of (header bytes, file size), so a hit needs those exact bytes
# again -- they are re-read and compared on every open -- and the file is
# still fully validated; only the JSON work is skipped.  Reopening a file
# (transformers opens each shard more than once) then costs two preads.
_CACHE: dict[tuple[int, int], tuple[int, bytes, Header]] = {}
_CACHE_MAX_FILES = 64
_CACHE_MAX_HEADER = 4 * 1024 * 1024


def _parse_cached(key: tuple[int, int], raw: bytes, size: int, path) -> Header:
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == size and hit[1] == raw:
        return hit[2]
    header = parse_header(raw, size, path)
    if len(raw) <= _CACHE_MAX_HEADER:
        if len(_CACHE) >= _CACHE_MAX_FILES:
            # another thread may be evicting too: losing that race is harmless
            with contextlib.suppress(RuntimeError, StopIteration):
                _CACHE.pop(next(iter(_CACHE)), None)
        _CACHE[key] = (size, raw, header)
    return header


class safe_open:
    """Open a safetensors file lazily: ``with safe_open(path) as f: f.get_tensor(name)``.

    ``framework`` is one of HF's names (module docstring); ``device``
    applies to torch and paddle.  ``backend="pread"`` (or ``mmap=False``)
    reads with pread instead of mapping the file.  ``populate=True``
    pre-faults the whole mapping (used by ``load_file``, which touches
    everything anyway).
    """

    def __init__(
        self,
        filename: str | os.PathLike[str],
        framework: str = "np",
        device: str | int = "cpu",
        *,
        backend: str = "mmap",
        mmap: bool = True,
        populate: bool = False,
        remote: RemoteOptions | None = None,
    ) -> None:
        self._fw = _framework(framework)
        mmap = use_mmap(backend) and mmap
        if device != "cpu" and self._fw not in _DEVICE_FRAMEWORKS:
            raise E.UnsupportedFramework(
                f"device {device!r} is not supported for framework {framework!r} (only 'cpu')"
            )
        self._device = device
        self._path = os.fspath(filename)
        self._mm: _mmap.mmap | None = None
        self._base: np.ndarray | None = None
        self._closed = False
        # reads in flight; close() frees the map and fd only when none is
        # (a read racing close() gets its data or ClosedFileError, never a
        # closed or reused fd -- found by the reliability concurrency tests)
        self._users = 0
        self._lock = threading.Lock()
        self._src: RemoteFile | None = None
        self._penalty = _READ_PENALTY
        if is_url(self._path):
            self._open_remote(remote)
            return
        fd = _open(self._path)
        try:
            st = os.fstat(fd)
            size = st.st_size
            n = read_header_size(os.pread(fd, 8, 0), size, self._path)
            if n > _CACHE_MAX_HEADER:
                # validated from the file a window at a time: a broken big
                # header fails without being held whole
                self._header = read_header(fd, n, size, self._path)
            else:
                raw = _pread_bytes(fd, n, 8, self._path)
                self._header = _parse_cached((st.st_dev, st.st_ino), raw, size, self._path)
            if mmap and self._header.data_size:
                self._mm = self._map(fd, size, populate)
                # torch tensors are made from slices of this array, so each
                # holds a buffer export and the mapping outlives close().
                self._base = np.frombuffer(self._mm, np.uint8)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._start = self._header.data_start

    def _open_remote(self, options: RemoteOptions | None) -> None:
        # header only: one request for most files, a second for a big header
        src = open_remote(self._path, options, first=SPECULATIVE)
        try:
            n = read_header_size(src.prefix(8), src.size, self._path)
            raw = memoryview(src.prefix(8 + n))[8 : 8 + n]
            self._header = parse_header(raw, src.size, self._path)
        except BaseException:
            src.close()
            raise
        self._src, self._fd, self._penalty = src, None, 0
        self._start = self._header.data_start

    @property
    def remote(self) -> RemoteFile | None:
        """The remote file read (requests, bytes fetched), or None for a local file."""
        return self._src

    def _read_into(self, buf, off: int) -> None:
        """Fill ``buf`` from file offset ``off`` (pread, or ranged requests)."""
        if self._src is not None:
            self._src.readinto(off, buf)
        else:
            _pread_into(self._fd, buf, off, self._path)

    def _map(self, fd: int, size: int, populate: bool) -> _mmap.mmap:
        if self._fw == "np":
            flags = _mmap.MAP_SHARED
            if populate and hasattr(_mmap, "MAP_POPULATE"):
                flags |= _mmap.MAP_POPULATE
            return _mmap.mmap(fd, size, flags=flags, prot=_mmap.PROT_READ)
        mm = _mmap.mmap(fd, size, access=_mmap.ACCESS_COPY)
        if populate:
            # MAP_POPULATE on a private writable mapping would copy every page;
            # MADV_POPULATE_READ maps the page-cache pages without copying.
            try:
                mm.madvise(_MADV_POPULATE_READ)
            except (OSError, ValueError, AttributeError):
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    mm.madvise(_mmap.MADV_WILLNEED)
        return mm

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the file.  Arrays already returned stay valid; reads in
        progress in other threads finish first."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._users:
                return  # the last read in flight releases
        self._release()

    @contextlib.contextmanager
    def _use(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise E.SafetensorsClosed(f"{self._path}: safetensors file is closed")
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                last = self._closed and not self._users
            if last:
                self._release()

    def _release(self) -> None:
        mm, self._mm = self._mm, None
        self._base = None
        if mm is not None:
            # Views still exported: the mapping is freed with the last view.
            with contextlib.suppress(BufferError):
                mm.close()
        if self._src is not None:
            self._src.close()
        else:
            os.close(self._fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed:
                self.close()

    def _check(self) -> None:
        if self._closed:
            raise E.SafetensorsClosed(f"{self._path}: safetensors file is closed")

    # ------------------------------------------------------------------ header
    @property
    def header(self) -> Header:
        self._check()
        return self._header

    @property
    def path(self) -> str:
        return self._path

    def keys(self) -> list[str]:
        """Tensor names, sorted (like HF's ``safe_open.keys``)."""
        self._check()
        return sorted(self._header.tensors)

    def offset_keys(self) -> list[str]:
        """Tensor names in the order of their data in the file."""
        self._check()
        infos = sorted(self._header.tensors.values(), key=lambda t: t.data_offsets)
        return [t.name for t in infos]

    def metadata(self) -> dict[str, str] | None:
        self._check()
        md = self._header.metadata
        return dict(md) if md is not None else None

    def __contains__(self, name: object) -> bool:
        self._check()
        return name in self._header.tensors

    def __len__(self) -> int:
        self._check()
        return len(self._header.tensors)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def info(self, name: str) -> TensorInfo:
        self._check()
        try:
            return self._header.tensors[name]
        except KeyError:
            raise E.TensorNotFound(f"{self._path}: no tensor named {name!r}") from None

    # ------------------------------------------------------------------ tensors
    def get_tensor(self, name: str) -> Any:
        """The whole tensor as a numpy array or torch tensor."""
        with self._use():
            return self._tensor(self.info(name))

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, in file order."""
        with self._use():
            return self._get_tensors()

    def _get_tensors(self) -> dict[str, Any]:
        tensors = self._header.tensors
        fw = self._fw
        if fw not in ("np", "pt"):
            return self._adapt_all()
        if self._src is not None and _LITTLE:
            return self._fetch_all()
        if self._mm is not None and _LITTLE and hasattr(tensors, "plan"):
            if fw == "np":
                return self._np_views_plan(tensors.plan())
            if self._device == "cpu":
                return self._pt_views_plan(tensors.plan())
        infos = sorted(tensors.values(), key=lambda t: t.data_offsets)
        if self._mm is not None and _LITTLE:
            if fw == "np":
                return self._np_views(infos)
            if self._device == "cpu":
                return self._pt_views(infos)
        return {t.name: self._tensor(t) for t in infos}

    def _fetch_all(self) -> dict[str, Any]:
        # every tensor's buffer first, then one read_many: the data section goes out
        # as parallel parts instead of one request per tensor
        infos = sorted(self._header.tensors.values(), key=lambda t: t.data_offsets)
        out: dict[str, Any] = {}
        reads = []
        for t in infos:
            d = t.dtype
            if d.packed or not t.nbytes:
                continue
            if self._fw == "pt":
                torch = tg.torch()
                x = torch.empty(tg.storage_shape(d, t.shape), dtype=tg.to_torch_dtype(d))
                buf = tg.tensor_bytes(x)
            else:
                x = np.empty(t.shape, d.numpy)
                buf = x.reshape(-1).view(np.uint8)
            out[t.name] = x
            reads.append((self._start + t.data_offsets[0], buf))
        self._src.read_many(reads)
        res: dict[str, Any] = {}
        for t in infos:
            x = out.get(t.name)
            if x is None:
                res[t.name] = self._tensor(t)
            elif self._fw == "pt" and self._device != "cpu":
                res[t.name] = x.to(self._device)
            else:
                res[t.name] = x
        return res

    def _adapt_all(self) -> dict[str, Any]:
        # The numpy arrays (views of the copy-on-write mapping, or read),
        # then each handed to the framework's adapter.
        infos = sorted(self._header.tensors.values(), key=lambda t: t.data_offsets)
        if self._mm is not None and _LITTLE:
            arrays = self._np_views(infos)
        else:
            arrays = {t.name: self._array(t) for t in infos}
        adapter = self._adapter()
        return {t.name: adapter.from_numpy(arrays[t.name], t.dtype, self._device) for t in infos}

    def _adapter(self):
        from .. import frameworks

        return frameworks.adapter(self._fw)

    def get_slice(self, name: str) -> SafeSlice:
        return SafeSlice(self, self.info(name))

    def _np_views(self, infos: list[TensorInfo]) -> dict[str, np.ndarray]:
        # The hot path of load_file: slicing one uint8 array over the mapping
        # is several times cheaper than a frombuffer call per tensor.
        base, start, out = self._base, self._start, {}
        for t in infos:
            d = t.dtype
            if d.packed or not _LITTLE:
                out[t.name] = self._array(t)
                continue
            b, e = t.data_offsets
            a = base[start + b : start + e].view(d.numpy)
            out[t.name] = a.reshape(t.shape) if len(t.shape) != 1 else a
        return out

    def _np_views_plan(self, plan) -> dict[str, np.ndarray]:
        # Header from the validator's rows: no TensorInfo objects at all.  Each run
        # of tensors of one dtype is viewed as that dtype once; a tensor is
        # then one slice of it (plus a reshape if it is not 1-D).
        names, codes, shapes, begins, ends = (plan[k::5] for k in range(5))
        base, start, out = self._base, self._start, []
        i, k = 0, len(names)
        while i < k:
            code = codes[i]
            d = SAFETENSORS[code]
            j = i + 1
            while j < k and codes[j] == code:
                j += 1
            if d.packed:
                hdr = self._header.tensors
                out.extend(self._tensor(hdr[names[m]]) for m in range(i, j))
                i = j
                continue
            size = d.itemsize
            b0 = begins[i]
            typed = base[start + b0 : start + ends[j - 1]].view(d.numpy)
            for m in range(i, j):
                a = typed[(begins[m] - b0) // size : (ends[m] - b0) // size]
                out.append(a if len(shapes[m]) == 1 else a.reshape(shapes[m]))
            i = j
        return dict(zip(names, out))

    def _pt_views_plan(self, plan) -> dict[str, Any]:
        # As _pt_views, from the validator's rows.  Each tensor gets its own
        # from_numpy (so its own storage, exactly its bytes: torch.save of
        # one tensor writes that tensor, not its neighbours).

        from_numpy = tg.torch().from_numpy
        plans = tg.view_plans()
        base, start, out, names = self._base, self._start, [], plan[::5]
        hdr = self._header.tensors
        it = iter(plan)
        for name, code, shape, b, e in zip(it, it, it, it, it):
            p = plans.get(code)
            off = start + b
            if p is None or b == e or off % p[2]:
                out.append(self._tensor(hdr[name]))
                continue
            x = from_numpy(base[off : start + e].view(p[0]))
            if p[1] is not None:
                x = x.view(p[1])
            out.append(x if len(shape) == 1 else x.reshape(shape))
        return dict(zip(names, out))

    def _pt_views(self, infos: list[TensorInfo]) -> dict[str, Any]:
        # Same for torch: numpy slice -> torch.from_numpy, with dtype work
        # done once per dtype rather than once per tensor.

        from_numpy = tg.torch().from_numpy
        plans = tg.view_plans()
        base, start, out = self._base, self._start, {}
        for t in infos:
            plan = plans.get(t.dtype.name)
            b, e = t.data_offsets
            off = start + b
            if plan is None or b == e or off % plan[2]:
                out[t.name] = self._tensor(t)
                continue
            np_dtype, td, _align = plan
            x = from_numpy(base[off : start + e].view(np_dtype))
            if td is not None:
                x = x.view(td)
            out[t.name] = x.reshape(t.shape) if len(t.shape) != 1 else x
        return out

    def _tensor(self, t: TensorInfo) -> Any:
        self._check()
        if self._fw == "pt":
            return self._torch_tensor(t, self._start + t.data_offsets[0])
        a = self._array(t)
        if self._fw != "np":
            return self._adapter().from_numpy(a, t.dtype, self._device)
        return a

    def _array(self, t: TensorInfo) -> np.ndarray:
        """The tensor as a numpy array: a view of the mapping, or read."""
        d = t.dtype
        off = self._start + t.data_offsets[0]
        if d.packed:
            codes = _subbyte.unpack(self._raw(off, t.nbytes), d.bits, t.n_elements)
            return codes.view(d.numpy).reshape(t.shape)
        if self._mm is not None:
            a = self._base[off : off + t.nbytes].view(d.numpy).reshape(t.shape)
        else:
            a = np.empty(t.shape, d.numpy)
            self._read_into(a.reshape(-1).view(np.uint8), off)
        if not _LITTLE:
            a = a.byteswap().view(a.dtype)
        return a

    def _torch_tensor(self, t: TensorInfo, off: int) -> Any:

        d = t.dtype
        if self._mm is not None:
            out = tg.from_buffer(self._base, off, d, t.shape)
        else:
            torch = tg.torch()
            out = torch.empty(tg.storage_shape(d, t.shape), dtype=tg.to_torch_dtype(d))
            if t.nbytes:
                self._read_into(tg.tensor_bytes(out), off)
        if self._device != "cpu":
            out = out.to(self._device)
        return out

    def _raw(self, off: int, n: int):
        """``n`` bytes at file offset ``off`` (a view on the mapping, or read)."""
        if self._mm is not None:
            return memoryview(self._mm)[off : off + n]
        buf = bytearray(n)
        self._read_into(buf, off)
        return buf


# --------------------------------------------------------------------------- slicing


class _Sel:
    """One tensor dimension of an index: ascending ``lo, lo+step, ...`` (count
    of them), reversed when ``flip``; ``drop`` for an integer index."""

    __slots__ = ("count", "drop", "flip", "lo", "step")

    def __init__(self, lo: int, step: int, count: int, flip: bool, drop: bool) -> None:
        self.lo, self.step, self.count, self.flip, self.drop = lo, step, count, flip, drop

    @property
    def hi(self) -> int:
        return self.lo + (self.count - 1) * self.step

    def as_slice(self, lo: int) -> slice | int:
        """Index into a buffer dimension whose position 0 is ``lo``."""
        first = self.lo - lo
        if self.drop:
            return first
        if not self.flip:
            return slice(first, first + (self.count - 1) * self.step + 1, self.step)
        last = first + (self.count - 1) * self.step
        return slice(last, first - 1 if first > 0 else None, -self.step)


def _as_tuple(key: Any) -> tuple:
    """The index as a tuple, an empty list standing for ``slice(0, 0)``
    (HF takes it; numpy and torch give an empty first dimension)."""
    if not isinstance(key, tuple):
        key = (key,)
    return tuple(slice(0, 0) if isinstance(k, list) and not k else k for k in key)


def _n_indexed(key: tuple, shape: tuple[int, ...]) -> int:
    """How many tensor dims ``key`` indexes; SliceIndexError for two
    ellipses or more indices than dims."""
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise E.SliceIndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > len(shape):
        raise E.SliceIndexError(
            f"too many indices for tensor: tensor is {len(shape)}-dimensional, "
            f"but {n_real} were indexed"
        )
    return n_real


def _normalize(key: Any, shape: tuple[int, ...]) -> tuple[list[_Sel], list[int | None]]:
    """numpy basic indexing -> one _Sel per tensor dim, and the index layout:
    for each position of the expanded key, the tensor dim it indexes (an
    integer index drops that dim from the output), or None for a new axis."""
    key = _as_tuple(key)
    n_ell = sum(1 for k in key if k is Ellipsis)
    n_real = _n_indexed(key, shape)
    expanded: list[Any] = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - n_real))
        else:
            expanded.append(k)
    if n_ell == 0:
        expanded.extend([slice(None)] * (len(shape) - n_real))
    sels: list[_Sel] = []
    layout: list[int | None] = []
    for k in expanded:
        if k is None:
            layout.append(None)
            continue
        d = len(sels)
        n = shape[d]
        if isinstance(k, slice):
            r = range(*k.indices(n))
            cnt = len(r)
            if r.step > 0 or cnt == 0:
                sels.append(_Sel(r.start if cnt else 0, abs(r.step), cnt, r.step < 0, False))
            else:
                sels.append(_Sel(r[-1], -r.step, cnt, True, False))
            layout.append(d)
            continue
        if isinstance(k, (bool, np.bool_)):
            raise E.SliceIndexError(
                "boolean indices are advanced indexing, which slices do not support"
            )
        try:
            i = operator.index(k)
        except TypeError:
            raise E.SliceIndexError(
                "only integers, slices (`:`), ellipsis (`...`) and None are valid "
                f"indices, not {type(k).__name__}"
            ) from None
        if not -n <= i < n:
            raise E.SliceIndexError(f"index {i} is out of bounds for axis {d} with size {n}")
        sels.append(_Sel(i % n, 1, 1, False, True))
        layout.append(d)
    return sels, layout


def _bounding_box(key: tuple, shape: tuple[int, ...]) -> tuple[tuple, tuple]:
    """For a key with integer lists (numpy advanced indexing): a basic key
    reading the box that holds every selected element, and the key that
    picks them from that box with numpy's own rules (ints become 0, lists
    are shifted, slices already applied become ``:``)."""
    n_real = _n_indexed(key, shape)
    bound: list[Any] = []
    local: list[Any] = []
    d = 0
    for k in key:
        if k is Ellipsis:
            bound.append(Ellipsis)
            local.append(Ellipsis)
            d += len(shape) - n_real
            continue
        if k is None:
            local.append(None)
            continue
        n = shape[d]
        if isinstance(k, slice):
            bound.append(k)
            local.append(slice(None))
        else:
            idx = np.asarray(k)
            if idx.dtype.kind not in "iu" or idx.ndim > 1:
                raise E.SliceIndexError(
                    f"only integers, slices, ellipsis, None and lists of integers are valid "
                    f"indices, found {k!r}"
                )
            bad = idx[(idx < -n) | (idx >= n)]
            if bad.size:
                raise E.SliceIndexError(
                    f"index {int(bad[0])} is out of bounds for axis {d} with size {n}"
                )
            idx = idx % n if n else idx
            lo = int(idx.min()) if idx.size else 0
            hi = int(idx.max()) + 1 if idx.size else 0
            bound.append(slice(lo, hi))
            local.append(int(idx - lo) if idx.ndim == 0 else (idx - lo).tolist())
        d += 1
    return tuple(bound), tuple(local)


class SafeSlice:
    """A lazily read tensor: ``get_shape()``, ``get_dtype()``, ``[key]``."""

    def __init__(self, handle: safe_open, info: TensorInfo) -> None:
        self._h = handle
        self._info = info

    def get_shape(self) -> list[int]:
        self._h._check()
        return list(self._info.shape)

    def get_dtype(self) -> str:
        self._h._check()
        return self._info.dtype.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self._info.shape

    @property
    def dtype(self) -> DType:
        return self._info.dtype

    def __len__(self) -> int:
        if not self._info.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._info.shape[0]

    def __getitem__(self, key: Any) -> Any:
        with self._h._use():
            return self._getitem(key)

    def _getitem(self, key: Any) -> Any:
        h, t = self._h, self._info
        key = _as_tuple(key)
        if any(isinstance(k, list) for k in key):
            # advanced indexing: read the bounding box, numpy picks from it
            bound, local = _bounding_box(key, t.shape)
            arr = np.asarray(self._basic(bound)[local], order="C")
        else:
            arr = self._basic(key)
        if h._fw == "np":
            return arr
        if h._fw == "pt":
            return self._to_torch(arr)
        if h._fw != "np":
            return h._adapter().from_numpy(arr, t.dtype, h._device)
        return arr

    def _basic(self, key: tuple) -> np.ndarray:
        """numpy basic indexing of the tensor, as a numpy array."""
        h, t = self._h, self._info
        sels, layout = _normalize(key, t.shape)
        if h._fw == "np" and h._mm is not None and not t.dtype.packed and _LITTLE:
            return h._array(t)[key]  # a view of the mapping: numpy does the rest
        return self._read(sels, layout)

    def _to_torch(self, arr: np.ndarray) -> Any:

        d = self._info.dtype
        if d.packed:
            if d.name != "F4":
                raise E.UnsupportedDtype(f"torch has no dtype for safetensors {d.name}")
            shape = arr.shape
            raw = _subbyte.pack(arr.view(np.uint8), 4)
            out = tg.from_buffer(raw, 0, d, shape)
        else:
            arr = np.asarray(arr)
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)
            out = tg.from_numpy(arr, d)
        if self._h._device != "cpu":
            out = out.to(self._h._device)
        return out

    def _read(self, sels: list[_Sel], layout: list[int | None]) -> np.ndarray:
        t = self._info
        shape, d = t.shape, t.dtype
        out_shape = tuple(
            1 if s is None else sels[s].count for s in layout if s is None or not sels[s].drop
        )
        if not shape or any(s.count == 0 for s in sels):
            if not shape:  # a scalar: read its few bytes
                whole = self._rows(np.zeros(1, np.int64), 1, (1,)).reshape(())
                return whole[tuple(None if s is None else 0 for s in layout)]
            return np.empty(out_shape, d.numpy)
        ndim = len(shape)
        inner = [1] * (ndim + 1)
        for i in range(ndim - 1, -1, -1):
            inner[i] = inner[i + 1] * shape[i + 1] if i + 1 < ndim else 1
        # Pick the first "row" dim j: one read per selected outer index.
        best = None
        n_reads = 1
        for j in range(ndim):
            span = sels[j].hi - sels[j].lo + 1
            row = span * inner[j]
            cost = n_reads * row * max(1, d.itemsize) + n_reads * self._h._penalty
            if best is None or cost < best[0]:
                best = (cost, j, n_reads, row)
            n_reads *= sels[j].count
        _, j, n_reads, row = best
        # Element offsets of each row start (outer dims vary, row dim at lo).
        idx = np.zeros(1, np.int64)
        for k in range(j):
            s = sels[k]
            steps = (s.lo + s.step * np.arange(s.count, dtype=np.int64)) * inner[k]
            idx = (idx[:, None] + steps[None, :]).reshape(-1)
        starts = idx + sels[j].lo * inner[j]
        buf_shape = (
            *(sels[k].count for k in range(j)),
            sels[j].hi - sels[j].lo + 1,
            *shape[j + 1 :],
        )
        buf = self._rows(starts, row, buf_shape)
        index: list[Any] = []
        for s in layout:
            if s is None:
                index.append(None)
                continue
            sel = sels[s]
            if s < j:
                index.append(0 if sel.drop else slice(None, None, -1 if sel.flip else 1))
            elif s == j:
                index.append(sel.as_slice(sel.lo))
            else:
                index.append(sel.as_slice(0))
        res = buf[tuple(index)]
        if isinstance(res, np.ndarray) and res.ndim and not res.flags.c_contiguous:
            res = np.ascontiguousarray(res)
        return res

    def _rows(self, starts: np.ndarray, row: int, buf_shape: tuple[int, ...]) -> np.ndarray:
        """Read ``row`` elements at each element offset in ``starts``."""
        t, h = self._info, self._h
        d = t.dtype
        base = h._start + t.data_offsets[0]
        if d.packed:
            ge, gb = _subbyte.group(d.bits)
            out = np.empty((len(starts), row), np.uint8)
            for i, s in enumerate(starts.tolist()):
                g0 = s // ge
                g1 = -(-(s + row) // ge)
                raw = h._raw(base + g0 * gb, (g1 - g0) * gb)
                out[i] = _subbyte.unpack(raw, d.bits, row, s - g0 * ge)
            return out.view(d.numpy).reshape(buf_shape)
        size = d.itemsize
        out = np.empty((len(starts), row), d.numpy)
        flat = out.view(np.uint8).reshape(len(starts), row * size)
        fd, path, mm = h._fd, h._path, h._mm
        if h._src is not None:  # every row's range at once: merged, fetched in parallel
            offs = (base + starts * size).tolist()
            h._src.read_many([(o, flat[i]) for i, o in enumerate(offs)])
            starts = starts[:0]
        for i, s in enumerate(starts.tolist()):
            off = base + s * size
            if mm is not None:
                flat[i] = np.frombuffer(mm, np.uint8, row * size, off)
            else:
                _pread_into(fd, flat[i], off, path)
        if not _LITTLE:
            out = out.byteswap().view(out.dtype)
        return out.reshape(buf_shape)


# --------------------------------------------------------------------------- whole file


def load_file(
    filename: str | os.PathLike[str],
    framework: str = "np",
    device: str | int = "cpu",
    *,
    backend: str = "mmap",
    mmap: bool = True,
) -> dict[str, Any]:
    """Every tensor of a file.  With mmap, arrays are zero-copy views of a
    pre-faulted mapping that lives as long as they do."""
    with safe_open(filename, framework, device, backend=backend, mmap=mmap, populate=True) as f:
        return f.get_tensors()


def load(
    data: bytes | bytearray | memoryview, framework: str = "np", device: str = "cpu"
) -> dict[str, Any]:
    """Every tensor of a safetensors file held in memory (copied out)."""
    fw = _framework(framework)
    mv = memoryview(data).cast("B")
    n = read_header_size(mv[:8], len(mv))
    header = parse_header(mv[8 : 8 + n], len(mv))
    start = header.data_start
    out: dict[str, Any] = {}
    for t in sorted(header.tensors.values(), key=lambda t: t.data_offsets):
        raw = mv[start + t.data_offsets[0] : start + t.data_offsets[1]]
        out[t.name] = _from_bytes(raw, t, fw)
    if fw not in ("np", "pt"):
        from .. import frameworks

        adapter = frameworks.adapter(fw)
        out = {k: adapter.from_numpy(v, header.tensors[k].dtype, device) for k, v in out.items()}
    return out


def _from_bytes(raw, t: TensorInfo, fw: str) -> Any:
    d = t.dtype
    if fw == "pt":
        if d.packed and d.name != "F4":
            raise E.UnsupportedDtype(f"torch has no dtype for safetensors {d.name}")
        return tg.from_buffer(np.frombuffer(raw, np.uint8).copy(), 0, d, t.shape)
    if d.packed:
        return _subbyte.unpack(raw, d.bits, t.n_elements).view(d.numpy).reshape(t.shape)
    a = np.frombuffer(bytes(raw), d.numpy).reshape(t.shape)
    if not _LITTLE:
        a = a.byteswap().view(a.dtype)
    return a
