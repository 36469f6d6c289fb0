"""Lazy remote files: the header prefix, then tensor bytes by range, on demand.

:func:`open_remote` turns a remote target into a :class:`RemoteFile`:

* ``hf://ORG/REPO[@REV]/PATH`` -> the Hub's resolve URL (token rules in
  :mod:`weightsmith.byteio._hub`);
* ``http(s)://`` URLs (a Hub ``/blob/`` page URL is read at its ``/resolve/``);
* any other scheme through fsspec (``s3://``, ``gs://``, ``memory://`` ...).

Reading:

* ``prefix(n)`` grows the header prefix (one request for most safetensors
  headers); the bytes it holds also serve any data read they cover, so no byte
  of the file is fetched twice by one handle;
* ``read_many([(offset, buffer), ...])`` fills buffers: ranges that touch are
  merged, merged runs are cut into parts of at most ``part_size`` bytes, and the
  parts are fetched by a pool of ``window`` threads (the bound on requests in
  flight).  Without a cache the bytes fetched are exactly the bytes asked for;
* with a :class:`~weightsmith.byteio.BlockCache`, parts are widened to whole
  cache blocks, blocks found in the cache are not fetched, and fetched blocks
  are stored.

Retries, short reads and changed files are handled per request by the source
(:mod:`weightsmith.byteio._http`).  Counters: ``requests``, ``bytes_fetched``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import RemoteError, UnknownTargetError
from ._cache import DEFAULT_BLOCK, BlockCache
from ._http import FsspecSource, HTTPSource, Session
from ._hub import endpoint_url, hub_token, parse_hub_ref, resolve_url, url_token

__all__ = [
    "RemoteFile",
    "RemoteOptions",
    "blob_to_resolve",
    "fetch_whole",
    "open_remote",
    "source_for",
]

#: requests in flight per file, at most
DEFAULT_WINDOW = 8
#: one request fetches at most this many bytes: a tensor of a few MiB already goes out
#: as parallel requests (one connection is often capped well below the link)
DEFAULT_PART = 2 * 1024 * 1024


@dataclass
class RemoteOptions:
    """How remote targets are read (every field optional).

    ``token``: sent only to the origin of the URL given (``hf://``: to the Hub
    endpoint); ``HF_TOKEN`` is used for the Hub endpoint when no token is given.
    ``cache_dir`` / ``cache_max_bytes``: a local block cache (off unless a folder
    is given); nothing else is written anywhere.  ``window``: requests in flight
    per file.  ``retries``: per request, on 5xx / 429 / broken connections /
    short bodies, with doubling pauses (``Retry-After`` honoured).
    """

    token: str | None = None
    endpoint: str | None = None
    cache_dir: str | os.PathLike[str] | None = None
    cache_max_bytes: int = 1 << 30
    block_size: int = DEFAULT_BLOCK
    window: int = DEFAULT_WINDOW
    part_size: int = DEFAULT_PART
    retries: int = 3
    timeout: float = 30.0
    storage_options: dict[str, Any] = field(default_factory=dict)
    session: Any = None  # a Session to share between files (built from the fields when None)
    _cache: BlockCache | None = field(default=None, init=False, repr=False)
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        # shipped to cluster nodes: each builds its own session, lock and cache handle
        state = dict(self.__dict__)
        state.update(session=None, _cache=None)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def cache(self) -> BlockCache | None:
        """The block cache these options name (one per options object), or None."""
        if self.cache_dir is None:
            return None
        with self._lock:
            if self._cache is None:
                self._cache = BlockCache(self.cache_dir, self.cache_max_bytes, self.block_size)
            return self._cache


def blob_to_resolve(url: str, endpoint: str | None) -> str:
    """A Hub web page URL (``/ORG/REPO/blob/REV/PATH``) -> its ``resolve`` URL."""
    hub = urlsplit(endpoint_url(endpoint))
    u = urlsplit(url)
    parts = u.path.split("/")
    if u.netloc == hub.netloc and len(parts) > 5 and parts[3] == "blob":
        parts[3] = "resolve"
        return urlunsplit((u.scheme, u.netloc, "/".join(parts), u.query, ""))
    return url


class RemoteFile:
    """One remote file: ``name``, ``size``, ``prefix(n)``, ``read``/``readinto``/``read_many``."""

    def __init__(self, source: Any, options: RemoteOptions, first: int) -> None:
        self.source = source
        self.name: str = source.name
        self.options = options
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        source.prefix(first)
        self.size: int = int(source.size or 0)
        cache = options.cache()
        key = cache.key(source.name, self.size, source.etag) if cache is not None else None
        self._cache, self._key = (cache, key) if key is not None else (None, None)

    # -------------------------------------------------------------- counters
    @property
    def requests(self) -> int:
        return self.source.requests

    @property
    def bytes_fetched(self) -> int:
        return self.source.bytes_fetched

    # -------------------------------------------------------------- reading
    def prefix(self, n: int) -> bytes:
        """The first ``min(n, size)`` bytes (header reads)."""
        return self.source.prefix(n)

    def read(self, offset: int, n: int) -> bytearray:
        buf = bytearray(n)
        self.read_many([(offset, buf)])
        return buf

    def readinto(self, offset: int, buf: Any) -> None:
        self.read_many([(offset, buf)])

    def read_many(self, reads: Sequence[tuple[int, Any]]) -> None:
        """Fill each writable ``buffer`` with the file's bytes from ``offset``."""
        views = [(off, memoryview(b).cast("B")) for off, b in reads]
        views = [(off, v) for off, v in views if len(v)]
        if not views:
            return
        for off, v in views:
            if off < 0 or off + len(v) > self.size:
                raise ValueError(f"{self.name}: bytes {off}-{off + len(v)} past the file end")
        held = self.source._buf  # the header prefix: its bytes are not fetched again
        parts = []
        for start, stop, targets in _runs(sorted(views, key=lambda x: x[0])):
            if start < len(held):
                cut = min(stop, len(held))
                _copy(held[start:cut], start, targets)
                start = cut
            for p0 in range(start, stop, self.options.part_size):
                parts.append((p0, min(stop, p0 + self.options.part_size), targets))
        if len(parts) == 1:
            self._part(*parts[0])
            return
        for f in [self._executor().submit(self._part, *p) for p in parts]:
            f.result()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=max(1, self.options.window), thread_name_prefix="ws-fetch"
                )
            return self._pool

    def _part(self, start: int, stop: int, targets: list) -> None:
        _copy(self._fetch(start, stop), start, targets)

    def _fetch(self, start: int, stop: int) -> bytes:
        cache, key = self._cache, self._key
        if cache is None or key is None:
            return self.source.fetch(start, stop)
        bs = cache.block_size
        b0, b1 = start // bs, (stop - 1) // bs
        blocks: dict[int, bytes] = {}
        missing: list[int] = []
        for i in range(b0, b1 + 1):
            got = cache.get(key, i, min(bs, self.size - i * bs))
            if got is None:
                missing.append(i)
            else:
                blocks[i] = got
        # consecutive missing blocks: one request each run
        run: list[int] = []
        for i in [*missing, None]:
            if i is not None and (not run or i == run[-1] + 1):
                run.append(i)
                continue
            if run:
                lo, hi = run[0] * bs, min(self.size, (run[-1] + 1) * bs)
                data = self.source.fetch(lo, hi)
                for j in run:
                    blk = data[j * bs - lo : min(hi, (j + 1) * bs) - lo]
                    blocks[j] = blk
                    cache.put(key, j, blk)
            run = [i] if i is not None else []
        whole = b"".join(blocks[i] for i in range(b0, b1 + 1))
        return whole[start - b0 * bs : stop - b0 * bs]

    # -------------------------------------------------------------- life cycle
    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        session = getattr(self.source, "session", None)
        if session is not None and self.options.session is None:
            session.close()


def _runs(views: list[tuple[int, memoryview]]):
    """Sorted (offset, view) reads -> (start, stop, reads) runs of touching ranges."""
    start, stop, targets = views[0][0], views[0][0] + len(views[0][1]), [views[0]]
    for off, v in views[1:]:
        if off <= stop:
            stop = max(stop, off + len(v))
            targets.append((off, v))
        else:
            yield start, stop, targets
            start, stop, targets = off, off + len(v), [(off, v)]
    yield start, stop, targets


def _copy(data: bytes, at: int, targets: list[tuple[int, memoryview]]) -> None:
    """Copy the part of ``data`` (file bytes from ``at``) that each target covers."""
    end = at + len(data)
    for off, v in targets:
        lo, hi = max(off, at), min(off + len(v), end)
        if lo < hi:
            v[lo - off : hi - off] = data[lo - at : hi - at]


def _session(token: str | None, token_origin: str | None, options: RemoteOptions) -> Session:
    if options.session is not None:
        return options.session
    return Session(token, token_origin, timeout=options.timeout, retries=options.retries)


def source_for(url: str, options: RemoteOptions) -> Any:
    """The byte source of one remote URL (no request made yet for HTTP)."""
    ref = parse_hub_ref(url, bare=False)
    if ref is not None:
        if not ref.path:
            raise UnknownTargetError(f"{url}: name a file: hf://ORG/REPO[@REV]/PATH")
        tok, tok_origin = hub_token(options.token, options.endpoint)
        return HTTPSource(
            resolve_url(ref, ref.path, options.endpoint), _session(tok, tok_origin, options)
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        url = blob_to_resolve(url, options.endpoint)
        tok, tok_origin = url_token(url, options.token, options.endpoint)
        return HTTPSource(url, _session(tok, tok_origin, options))
    return FsspecSource(url, options.storage_options)


def open_remote(url: str, options: RemoteOptions | None = None, first: int = 0) -> RemoteFile:
    """Open a remote file, reading its first ``first`` bytes (at least one request)."""
    options = options or RemoteOptions()
    return RemoteFile(source_for(url, options), options, max(1, first))


def fetch_whole(url: str, options: RemoteOptions | None = None, limit: int = 64 << 20) -> bytes:
    """A small remote file (index, config, tokenizer) fetched whole, at most ``limit`` bytes
    (:class:`~weightsmith.errors.RemoteError` past it)."""
    f = open_remote(url, options, first=1 << 20)
    try:
        if f.size > limit:
            raise RemoteError(f"{url}: {f.size} bytes, more than the {limit} fetched whole")
        return f.prefix(f.size)
    finally:
        f.close()
