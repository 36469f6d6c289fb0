"""A size-limited local cache of remote file blocks, in a folder the user names.

Layout: ``<folder>/<key>/<index>.blk``, one file per block of ``block_size``
bytes (the last block of a file may be shorter).  ``key`` is the SHA-256 of
the file's URL, size and ETag, so a changed file never hits old blocks; a
file without an ETag is not cached (nothing would tell its versions apart).

Rules:

* nothing is written outside ``folder``: a block is written to a temp file in
  ``folder`` and renamed into place (readers in other processes see a whole
  block or none);
* a block file of the wrong length is ignored and replaced;
* after each store the total size is kept at or under ``max_bytes`` by
  deleting the least recently used blocks (mtime, refreshed on every hit).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["DEFAULT_BLOCK", "BlockCache"]

DEFAULT_BLOCK = 4 * 1024 * 1024


class BlockCache:
    """Blocks of remote files on local disk, at most ``max_bytes`` of them."""

    def __init__(
        self, folder: str | os.PathLike[str], max_bytes: int, block_size: int = DEFAULT_BLOCK
    ) -> None:
        if max_bytes <= 0 or block_size <= 0:
            raise ValueError("cache max_bytes and block_size must be positive")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.block_size = block_size
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._total = sum(p.stat().st_size for p in self._blocks())

    def _blocks(self) -> list[Path]:
        return [p for p in self.folder.glob("*/*.blk") if p.is_file()]

    @staticmethod
    def key(url: str, size: int, etag: str | None) -> str | None:
        """The cache key of one version of a file, or None (no ETag: not cacheable)."""
        if not etag:
            return None
        return hashlib.sha256(f"{url}\0{size}\0{etag}".encode()).hexdigest()[:40]

    def _path(self, key: str, index: int) -> Path:
        return self.folder / key / f"{index}.blk"

    def get(self, key: str, index: int, length: int) -> bytes | None:
        """Block ``index`` if it is cached whole (``length`` bytes), else None."""
        p = self._path(key, index)
        try:
            data = p.read_bytes()
        except OSError:
            with self._lock:
                self.misses += 1
            return None
        if len(data) != length:
            with self._lock:
                self.misses += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(p)  # most recently used
        with self._lock:
            self.hits += 1
        return data

    def put(self, key: str, index: int, data: bytes) -> None:
        """Store one block (atomically), then evict down to ``max_bytes``."""
        if len(data) > self.max_bytes:
            return
        d = self.folder / key
        d.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            dst = self._path(key, index)
            old = dst.stat().st_size if dst.exists() else 0
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._lock:
            self._total += len(data) - old
            if self._total > self.max_bytes:
                self._evict()

    def _evict(self) -> None:
        by_age = []
        for p in self._blocks():
            with contextlib.suppress(OSError):
                st = p.stat()
                by_age.append((st.st_mtime_ns, p, st.st_size))
        by_age.sort(key=lambda x: x[0])
        total = sum(x[2] for x in by_age)
        for _, p, size in by_age:
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                total -= size
        self._total = total

    @property
    def nbytes(self) -> int:
        """Bytes held in the cache folder now."""
        return self._total
