"""Remote byte sources: HTTP Range requests (manual redirects, retries, request
accounting) and fsspec files.

Each source has two read paths:

* ``prefix(n)`` -- the first ``n`` bytes, grown request by request (headers:
  the byte-source protocol of :mod:`weightsmith.inspection`);
* ``fetch(start, stop)`` -- exactly the bytes ``[start, stop)`` (tensor data),
  checked against the file as first seen: an HTTP answer must be a ``206`` for
  exactly that range (``Content-Range``), of the same total size and the same
  ``ETag``, with a body of exactly ``stop - start`` bytes.  A body that comes
  up short is retried; a different size, ETag or a ``412``/``416`` means the
  file changed under the read: :class:`~weightsmith.errors.RemoteFileChanged`,
  never bytes of two versions.
"""

from __future__ import annotations

import contextlib
import email.utils
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from .._lazy import require
from ..errors import (
    RemoteAuthError,
    RemoteConnectionError,
    RemoteError,
    RemoteFileChanged,
    RemoteHTTPError,
    RemoteNotFound,
    RemoteShortRead,
    TooManyRedirects,
)

_sleep = time.sleep  # the pause between retries (one name, so tests can record it)
MAX_REDIRECTS = 10
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
RETRY_DELAY = 0.5  # seconds before the first retry; doubles each time
MAX_RETRY_DELAY = 8.0
ERROR_BODY_LIMIT = 64 * 1024
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


def _retry_after(resp: Response, default: float) -> float:
    """Seconds to wait from ``Retry-After`` (delta-seconds or an HTTP date), else ``default``."""
    value = resp.headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if value:
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    return default


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with default ports made explicit."""
    u = urlsplit(url)
    port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    return (u.scheme.lower(), (u.hostname or "").lower(), port)


@dataclass
class Response:
    url: str  # final URL after redirects
    status: int
    headers: dict[str, str]
    body: bytes


_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()


def shared_client(timeout: float = 30.0) -> Any:
    """One process-wide httpx client (connection pool, TLS context built once).

    Building an ``httpx.Client`` loads the CA bundle, which costs more than a
    whole header read over a warm connection; reusing one also keeps
    connections alive across calls.  httpx clients are thread-safe.
    """
    with _shared_lock:
        client = _shared.get("client")
        if client is None:
            httpx = require("httpx", "remote inspection")
            client = _shared["client"] = httpx.Client(
                timeout=timeout,
                follow_redirects=False,
                limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
            )
        return client


class Session:
    """The shared httpx client, a token bound to one origin, and request counters.

    Thread-safe: shard headers are fetched from a thread pool.
    """

    def __init__(
        self,
        token: str | None = None,
        token_origin: str | None = None,
        timeout: float = 30.0,
        client: Any = None,
        retries: int = 2,
    ) -> None:
        self._httpx = require("httpx", "remote inspection")
        self.retries = retries
        self._own = client is None and timeout != 30.0
        if client is not None:
            self.client = client
        elif self._own:  # a non-default timeout gets a client of its own
            self.client = self._httpx.Client(timeout=timeout, follow_redirects=False)
        else:
            self.client = shared_client()
        self.token = token
        self.token_origin = origin(token_origin) if token_origin else None
        self.requests = 0
        self.bytes_fetched = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _count(self, requests: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.bytes_fetched += nbytes

    def _headers(self, url: str, rng: tuple[int, int] | None) -> dict[str, str]:
        h = {"Accept-Encoding": "identity", "User-Agent": "weightsmith"}
        if rng is not None:
            # HTTP ranges are inclusive at both ends: [start, stop) -> start-(stop-1)
            h["Range"] = f"bytes={rng[0]}-{rng[1] - 1}"
        if self.token and self.token_origin is not None and origin(url) == self.token_origin:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def get(
        self,
        url: str,
        rng: tuple[int, int] | None = None,
        max_bytes: int | None = None,
        stats: list[int] | None = None,
    ) -> Response:
        """GET ``url`` (optionally the byte range ``[start, stop)``), following redirects.

        At most ``max_bytes`` of the body are read; the stream is then closed,
        which matters when a server ignores Range and sends the whole file.
        ``stats`` (a two-item list) accumulates this call's requests and bytes.
        A broken connection or a 429/5xx answer is retried ``retries`` times
        with a growing pause (``Retry-After`` when the server gives one).
        """
        delay = RETRY_DELAY
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                resp = self._get_once(url, rng, max_bytes, stats)
            except RemoteConnectionError:
                if last:
                    raise
            else:
                if resp.status not in RETRY_STATUS or last:
                    return resp
                delay = _retry_after(resp, delay)
            _sleep(min(delay, MAX_RETRY_DELAY))
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _get_once(
        self, url: str, rng: tuple[int, int] | None, max_bytes: int | None, stats: list[int] | None
    ) -> Response:
        for _ in range(MAX_REDIRECTS + 1):
            try:
                with self.client.stream("GET", url, headers=self._headers(url, rng)) as r:
                    self._count(requests=1)
                    if stats is not None:
                        stats[0] += 1
                    if r.status_code in (301, 302, 303, 307, 308) and "location" in r.headers:
                        url = urljoin(url, r.headers["location"])
                        continue
                    body = bytearray()
                    if r.status_code == 206:
                        # bounded by the range: read it all, so the connection is reusable
                        for chunk in r.iter_bytes():
                            body += chunk
                    else:
                        # 200 may be the whole file (Range ignored), an error page may be
                        # long: stop once we have enough; leaving the stream closes it
                        limit = max_bytes if r.status_code == 200 else ERROR_BODY_LIMIT
                        for chunk in r.iter_bytes():
                            body += chunk
                            if limit is not None and len(body) >= limit:
                                break
                    if max_bytes is not None:
                        del body[max_bytes:]
                    self._count(nbytes=len(body))
                    if stats is not None:
                        stats[1] += len(body)
                    return Response(url, r.status_code, dict(r.headers), bytes(body))
            except self._httpx.TransportError as e:
                raise RemoteConnectionError(f"{url}: {type(e).__name__}: {e}") from None
            except self._httpx.HTTPError as e:
                raise RemoteError(f"{url}: {type(e).__name__}: {e}") from None
        raise TooManyRedirects(f"{url}: more than {MAX_REDIRECTS} redirects")


def raise_for_status(resp: Response, url: str) -> None:
    if resp.status in (200, 206):
        return
    if resp.status == 404:
        raise RemoteNotFound(url, 404, "not found")
    if resp.status in (401, 403):
        raise RemoteAuthError(
            url, resp.status, "a token is missing or not accepted (--token or HF_TOKEN)"
        )
    raise RemoteHTTPError(url, resp.status)


def _total_from(resp: Response) -> int | None:
    cr = resp.headers.get("content-range")
    if cr:
        m = _CONTENT_RANGE.match(cr.strip())
        if m and m.group(3) != "*":
            return int(m.group(3))
    return None


class HTTPSource:
    """A remote file as a byte source: ``prefix(n)`` fetches only missing bytes."""

    def __init__(self, url: str, session: Session) -> None:
        self.name = url
        self.url = url
        self.session = session
        self.size: int | None = None
        self.requests = 0
        self.bytes_fetched = 0
        self.etag: str | None = None  # of the first answer: later ones must agree
        # where the first answer came from after redirects (a Hub resolve URL -> its CDN
        # URL): data reads go there directly, one request each instead of two
        self.data_url: str | None = None
        self._buf = b""
        self._eof = False  # the whole file is in _buf
        self._lock = threading.Lock()  # fetch() runs in a thread pool

    def _get(
        self, rng: tuple[int, int] | None, max_bytes: int | None, url: str | None = None
    ) -> Response:
        stats = [0, 0]
        try:
            resp = self.session.get(url or self.url, rng, max_bytes, stats)
        finally:
            with self._lock:
                self.requests += stats[0]
                self.bytes_fetched += stats[1]
        if resp.status in (200, 206) and self.data_url is None:
            self.etag = resp.headers.get("etag")
            self.data_url = resp.url
        return resp

    def _get_data(self, start: int, stop: int) -> Response:
        url = self.data_url or self.url
        resp = self._get((start, stop), stop, url)
        if url != self.url and resp.status in (401, 403, 404, 410):
            # a signed redirect target that expired: resolve again from the URL given
            self.data_url = None
            resp = self._get((start, stop), stop)
        return resp

    def fetch(self, start: int, stop: int) -> bytes:
        """Exactly bytes ``[start, stop)`` of the file as first seen (module docstring).

        A short body is retried ``session.retries`` times, then
        :class:`~weightsmith.errors.RemoteShortRead`.
        """
        if self.size is None:
            self.prefix(0 if self._buf else 1)
        if stop <= start:
            return b""
        for attempt in range(self.session.retries + 1):
            resp = self._get_data(start, stop)
            if resp.status in (412, 416):
                raise RemoteFileChanged(
                    f"{self.url}: HTTP {resp.status} for bytes {start}-{stop - 1} of a "
                    f"{self.size}-byte file: it changed during the read"
                )
            raise_for_status(resp, self.url)
            self._check_same(resp, start, stop)
            body = resp.body if resp.status == 206 else resp.body[start:stop]
            if len(body) == stop - start:
                return body
            if attempt < self.session.retries:
                _sleep(min(RETRY_DELAY * 2**attempt, MAX_RETRY_DELAY))
        raise RemoteShortRead(
            f"{self.url}: asked for bytes {start}-{stop - 1} ({stop - start} bytes), "
            f"received {len(body)} after {self.session.retries + 1} tries"
        )

    def _check_same(self, resp: Response, start: int, stop: int) -> None:
        """The answer is for this file as first seen, and for the range asked."""
        etag = resp.headers.get("etag")
        if self.etag is not None and etag is not None and etag != self.etag:
            raise RemoteFileChanged(
                f"{self.url}: ETag changed during the read: expected {self.etag}, found {etag}"
            )
        if resp.status == 206:
            total = _total_from(resp)
            cr = _CONTENT_RANGE.match(resp.headers.get("content-range", "").strip())
            if total is not None and total != self.size:
                raise RemoteFileChanged(
                    f"{self.url}: size changed during the read: expected {self.size} bytes, "
                    f"found {total} (Content-Range)"
                )
            if cr is None or cr.group(1) is None:
                raise RemoteShortRead(
                    f"{self.url}: a 206 answer without a byte Content-Range for bytes "
                    f"{start}-{stop - 1}"
                )
            first, last = int(cr.group(1)), int(cr.group(2))
            if (first, last) != (start, stop - 1):
                raise RemoteShortRead(
                    f"{self.url}: asked for bytes {start}-{stop - 1}, server sent {first}-{last}"
                )
        else:  # 200: the server ignored Range and sends the file from byte 0
            length = resp.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) != self.size:
                raise RemoteFileChanged(
                    f"{self.url}: size changed during the read: expected {self.size} bytes, "
                    f"found {length} (Content-Length)"
                )

    def prefix(self, n: int) -> bytes:
        if (
            self._eof
            or n <= len(self._buf)
            or (self.size is not None and len(self._buf) >= self.size)
        ):
            return self._buf[:n]
        if self.size is not None:
            n = min(n, self.size)
        start = len(self._buf)
        resp = self._get((start, n), n)
        if resp.status == 416:
            # Nothing at `start`: the file is empty or shorter than we thought.
            total = _total_from(resp)
            if total == 0 or (total is not None and total <= start):
                self.size = total if total is not None else start
                self._eof = True
                return self._buf[:n]
            resp = self._get(None, n)  # a server that dislikes our range: plain GET
            raise_for_status(resp, self.url)
            return self._take_from_start(resp, n)
        raise_for_status(resp, self.url)
        if resp.status == 206:
            total = _total_from(resp)
            if total is not None:
                self.size = total
            cr = _CONTENT_RANGE.match(resp.headers.get("content-range", "").strip())
            first = int(cr.group(1)) if cr and cr.group(1) is not None else start
            if first != start:
                raise RemoteError(
                    f"{self.url}: asked for bytes from {start}, server sent from {first}"
                )
            self._buf += resp.body
            if (self.size is not None and len(self._buf) >= self.size) or (
                len(resp.body) < n - start and self.size is None
            ):
                self._eof = True
            return self._buf[:n]
        return self._take_from_start(resp, n)

    def _take_from_start(self, resp: Response, n: int) -> bytes:
        # 200: the server ignored Range and sent the file from byte 0.
        length = resp.headers.get("content-length")
        if length is not None and length.isdigit():
            self.size = int(length)
        if len(resp.body) < n:  # the stream ended first: that is the whole file
            self.size = len(resp.body)
            self._eof = True
        self._buf = resp.body
        return self._buf[:n]

    def read_all(self, limit: int = 64 * 1024 * 1024) -> bytes:
        """A small whole file (index JSON, repo listing), with a size cap."""
        resp = self._get(None, limit + 1)
        raise_for_status(resp, self.url)
        if len(resp.body) > limit:
            raise RemoteError(f"{self.url}: larger than {limit} bytes")
        self._buf, self.size, self._eof = resp.body, len(resp.body), True
        return resp.body


class CachedSource:
    """A byte source of known size that keeps the prefix read so far.

    ``prefix(n)`` reads only the bytes past what it holds, through
    :meth:`read_range`, and counts each read as a request.
    """

    name: str
    size: int | None

    def __init__(self, name: str, size: int, requests: int = 0) -> None:
        self.name = name
        self.size = size
        self.requests = requests
        self.bytes_fetched = 0
        self.etag: str | None = None
        self._buf = b""
        self._lock = threading.Lock()

    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the file."""
        raise NotImplementedError

    def prefix(self, n: int) -> bytes:
        assert self.size is not None
        n = min(n, self.size)
        if n > len(self._buf):
            more = self.read_range(len(self._buf), n)
            self.requests += 1
            self.bytes_fetched += len(more)
            self._buf += more
        return self._buf[:n]

    def fetch(self, start: int, stop: int) -> bytes:
        """Exactly bytes ``[start, stop)``; RemoteShortRead when fewer come back."""
        data = self.read_range(start, stop)
        with self._lock:
            self.requests += 1
            self.bytes_fetched += len(data)
        if len(data) != stop - start:
            raise RemoteShortRead(
                f"{self.name}: asked for bytes {start}-{stop - 1} ({stop - start} bytes), "
                f"received {len(data)}"
            )
        return data


class FsspecSource(CachedSource):
    """An fsspec URL (s3://, gs://, memory:// ...) as a byte source."""

    def __init__(self, url: str, storage_options: dict | None = None) -> None:
        fsspec = require("fsspec", "fsspec URLs")
        self.fs, self.path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        try:
            info = self.fs.info(self.path)
        except FileNotFoundError:
            raise RemoteNotFound(url, 404, "not found") from None
        super().__init__(url, int(info.get("size") or 0), requests=1)  # info() was one
        self.etag = info.get("ETag") or info.get("etag")

    def read_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start=start, end=end)

    def read_all(self, limit: int = 64 * 1024 * 1024) -> bytes:
        if self.size is not None and self.size > limit:
            raise RemoteError(f"{self.name}: larger than {limit} bytes")
        return self.prefix(self.size or 0)
