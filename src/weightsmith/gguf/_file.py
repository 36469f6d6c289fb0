"""GGUFFile: a memory-mapped GGUF file (or a whole split set) opened for reading.

The header is parsed by :func:`weightsmith.gguf._parse.parse` (layout in
:mod:`weightsmith.gguf._spec`); tensor data is never read until asked for,
and then handed out as zero-copy views of the mmap.

A URL (``hf://ORG/REPO[@REV]/PATH``, ``http(s)://``, fsspec; options in
``remote=``, a :class:`weightsmith.byteio.RemoteOptions`) is read the same way
without a mapping: the header from growing prefixes
(:func:`weightsmith.gguf.parse_gguf_prefix`, one request for most files), each
tensor's bytes with ranged requests when it is asked for (read-only arrays
over the fetched bytes).  Split sets work for URLs too (sibling URLs).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors as E
from ..byteio import RemoteFile, RemoteOptions, is_url, open_remote
from ._parse import GGUFHeader, Metadata, TensorInfo, parse
from ._prefix import GGUF_FIRST_CHUNK, parse_gguf_prefix
from ._spec import KEY_SPLIT_COUNT, KEY_SPLIT_NO, MetaType

__all__ = ["GGUFFile", "read", "shard_paths"]

_NATIVE = "<" if sys.byteorder == "little" else ">"
_SHARD_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def shard_paths(prefix: str | os.PathLike[str], count: int) -> list[Path]:
    """llama.cpp's split names: ``<prefix>-00001-of-00003.gguf`` ..."""
    p = os.fspath(prefix)
    return [Path(f"{p}-{i + 1:05d}-of-{count:05d}.gguf") for i in range(count)]


class _Mapped:
    """One open file: its mmap and parsed header."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                self.mm: Any = b""
            else:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.size = size
        try:
            self.header = parse(self.mm, size, path)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.header = None  # type: ignore[assignment]
        if isinstance(self.mm, mmap.mmap):
            with contextlib.suppress(BufferError):
                # views handed out (tensor_bytes, arrays) keep the map alive
                # until they are gone; the OS unmaps when the last one dies.
                self.mm.close()
        self.mm = None


class _Remote:
    """One remote file: its header (from growing prefixes) and its ranged reader."""

    def __init__(self, url: str, options: RemoteOptions | None) -> None:
        self.path = url
        self.mm: Any = None
        self.src: RemoteFile | None = open_remote(url, options, first=GGUF_FIRST_CHUNK)
        self.size = self.src.size
        try:
            self.header, _ = parse_gguf_prefix(self.src)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.header = None  # type: ignore[assignment]
        src, self.src = self.src, None
        if src is not None:
            src.close()


class GGUFFile:
    """A GGUF file opened for reading; with ``split.count > 1`` the whole split set.

    Attributes: ``version``, ``byte_order`` (``"<"``/``">"``), ``metadata``
    (ordered mapping key -> Python value, arrays converted on first access),
    ``alignment``, ``tensors`` (list of :class:`TensorInfo`), ``header`` (the
    parsed header of the first file), ``paths`` (one per shard).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, remote: RemoteOptions | None = None
    ) -> None:
        self._url = is_url(path)
        self._remote = remote
        # a URL stays a string: Path would fold its "//"
        self.path: Any = str(path) if self._url else Path(path)
        self._files: list[Any] = []
        self._closed = False
        try:
            first = self._open_one(self.path)
            self._files.append(first)
            self._open_split(first)
        except BaseException:
            self.close()
            raise
        head = self._files[0].header
        self.header: GGUFHeader = head
        self.version: int = head.version
        self.byte_order: str = head.byte_order
        self.alignment: int = head.alignment
        self.metadata: Metadata = head.metadata
        self.tensors: list[TensorInfo] = []
        for i, f in enumerate(self._files):
            for t in f.header.tensors:
                self.tensors.append(t if i == 0 else _with_shard(t, i))
        self._by_name = {t.name: t for t in self.tensors}
        if len(self._by_name) != len(self.tensors):
            dup = next(n for n in self._by_name if sum(t.name == n for t in self.tensors) > 1)
            raise E.GGUFDuplicateTensor(
                "tensor appears in two shards",
                path=self.path,
                field=f"tensor {dup!r}",
                expected="unique tensor names",
                found=dup,
            )

    def _open_one(self, p: Any) -> Any:
        return _Remote(p, self._remote) if self._url else _Mapped(p)

    # -- split sets -----------------------------------------------------------

    def _open_split(self, first: _Mapped) -> None:
        md = first.header.metadata
        count = md.get(KEY_SPLIT_COUNT, 0)
        if not isinstance(count, int) or count <= 1:
            return
        m = _SHARD_RE.match(str(self.path))
        if m is None or int(m["count"]) != count:
            raise E.GGUFSplitError(
                "split file name does not follow <prefix>-NNNNN-of-NNNNN.gguf",
                path=self.path,
                field=KEY_SPLIT_COUNT,
                expected=f"a name ending -{md.get(KEY_SPLIT_NO, 0) + 1:05d}-of-{count:05d}.gguf",
                found=str(self.path).rsplit("/", 1)[-1],
            )
        paths: list[Any] = shard_paths(m["prefix"], count)
        if self._url:
            paths = [f"{m['prefix']}-{i + 1:05d}-of-{count:05d}.gguf" for i in range(count)]
        files: list[Any] = []
        for i, p in enumerate(paths):
            if p == self.path:
                f = first
            elif self._url:
                try:
                    f = self._open_one(p)
                except E.RemoteNotFound:
                    raise E.GGUFSplitError(
                        "shard is missing", path=p, field=KEY_SPLIT_NO,
                        expected=f"shard {i}", found="HTTP 404",
                    ) from None  # fmt: skip
                self._files.append(f)
            elif not p.exists():
                raise E.GGUFSplitError(
                    "shard is missing",
                    path=p,
                    field=KEY_SPLIT_NO,
                    expected=f"shard {i}",
                    found="no file",
                )
            else:
                f = _Mapped(p)
                self._files.append(f)
            no = f.header.metadata.get(KEY_SPLIT_NO)
            if no != i:
                raise E.GGUFSplitError(path=p, field=KEY_SPLIT_NO, expected=i, found=no)
            files.append(f)
        self._files = files

    @property
    def data_start(self) -> int:
        """Offset of the (first) file's data section."""
        return self.header.data_start

    @property
    def paths(self) -> list[Any]:
        """One path (or URL) per shard."""
        return [f.path for f in self._files]

    @property
    def remote(self) -> list[RemoteFile]:
        """The remote files read (requests, bytes fetched); empty for local files."""
        return [f.src for f in self._files if getattr(f, "src", None) is not None]

    # -- metadata -------------------------------------------------------------

    def metadata_type(self, key: str) -> MetaType:
        """The GGUF type of ``key``: ``MetaType(type, element)``; element set for arrays."""
        return self.header.metadata_type(key)

    def array(self, key: str) -> Any:
        """An array value unconverted: numpy view, lazy StringArray, or list (nested arrays)."""
        return self.header.array(key)

    def summary(self, key: str) -> str:
        return self.header.summary(key)

    # -- tensors --------------------------------------------------------------

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise E.TensorNotFound(f"{self.path}: no tensor named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def _mm(self, t: TensorInfo, start: int | None = None, nbytes: int | None = None) -> Any:
        """A buffer holding the tensor at ``t.offset``: the mapping, or (remote) a
        buffer of the file's size whose tensor bytes alone (or ``nbytes`` of them at
        ``start``) are fetched."""
        f = None if self._closed else self._files[t.shard]
        mm = None if f is None else f.mm
        if mm is None and f is not None and getattr(f, "src", None) is not None:
            start, nbytes = (t.offset, t.nbytes) if start is None else (start, nbytes)
            return _Fetched(f.src.read(start, nbytes), start)
        if mm is None:
            raise E.ClosedFileError(f"{self.path} is closed")
        return mm

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        # close() in another thread can unmap between the closed check and
        # the view: numpy then raises ValueError ("mmap closed"); name it.
        try:
            yield
        except (ValueError, TypeError):
            if self._closed:
                raise E.ClosedFileError(f"{self.path} is closed") from None
            raise

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only uint8 view on the mmap (no copy)."""
        t = self.tensor(name)
        with self._reading():
            return _view(self._mm(t), np.uint8, t.nbytes, t.offset)

    def numpy(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Typed values of an F32/F16/BF16/F64/I8..I64 tensor; ``rows=(lo, hi)``: rows
        lo..hi of it seen as ``[-1, n]`` (of a remote file, only their bytes are fetched)."""
        with self._reading():
            return self._numpy(name, rows)

    def _numpy(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Typed values (numpy shape) of an F32/F16/BF16/F64/I8..I64 tensor.

        A zero-copy view in the file's byte order, except BF16 in a file of the
        other byte order, which is returned as a native copy.
        """
        t = self.tensor(name)
        dt = t.ggml_type.numpy
        if dt is None:
            raise TypeError(
                f"{self.path}: tensor {name!r} is {t.ggml_type.name}, a block type; "
                "use tensor_bytes() or dequantize()"
            )
        count, offset, shape = t.n_elements, t.offset, t.shape
        if rows is not None:
            n = t.shape[-1] if t.shape else 1
            count, offset, shape = (
                (rows[1] - rows[0]) * n,
                offset + rows[0] * n * dt.itemsize,
                (-1, n),
            )
        buf = self._mm(t, offset, count * dt.itemsize)
        if dt.itemsize == 1 or self.byte_order == _NATIVE:
            return _view(buf, dt, count, offset).reshape(shape)
        if dt.kind in "iuf":
            dt = dt.newbyteorder(self.byte_order)
            return _view(buf, dt, count, offset).reshape(shape)
        # ml_dtypes types (bfloat16) have no byte-swapped form: swap into a native copy
        u = np.dtype(f"u{dt.itemsize}").newbyteorder(self.byte_order)
        raw = _view(buf, u, count, offset)
        return raw.astype(u.newbyteorder("=")).view(dt).reshape(shape)

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._closed = True

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.metadata)} keys, "
            f"{len(self.tensors)} tensors)"
        )


class _Fetched:
    """A tensor's fetched bytes, standing where they sit in the file (``base``)."""

    __slots__ = ("base", "data")

    def __init__(self, data: bytearray, base: int) -> None:
        self.data, self.base = data, base


def _view(buf: Any, dtype: Any, count: int, offset: int) -> np.ndarray:
    """``count`` items at file offset ``offset``: a view of the map, or of fetched bytes."""
    if isinstance(buf, _Fetched):
        a = np.frombuffer(buf.data, dtype, count, offset - buf.base)
        a.flags.writeable = False  # as the read-only mapping's views
        return a
    return np.frombuffer(buf, dtype, count, offset)


def _with_shard(t: TensorInfo, shard: int) -> TensorInfo:
    return TensorInfo(
        t.name, t.ggml_type, t.shape, t.dims, t.offset, t.nbytes, t.n_elements, t.rel_offset, shard
    )


def read(path: str | os.PathLike[str], *, remote: RemoteOptions | None = None) -> GGUFFile:
    """Open a GGUF file (any shard of a split set opens the whole set); also a URL."""
    return GGUFFile(path, remote=remote)
