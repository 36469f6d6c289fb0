"""HTTP byte sources: Range requests, manual redirects, request accounting."""

from __future__ import annotations

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
    RemoteHTTPError,
    RemoteNotFound,
    TooManyRedirects,
)
from ..inspection import CachedSource

MAX_REDIRECTS = 10
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
RETRY_DELAY = 0.5  # seconds before the first retry; doubles each time
MAX_RETRY_DELAY = 8.0
ERROR_BODY_LIMIT = 64 * 1024
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


def _retry_after(resp: Response, default: float) -> float:
    value = resp.headers.get("retry-after", "")
    return float(value) if value.strip().isdigit() else default


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
            time.sleep(min(delay, MAX_RETRY_DELAY))
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
        self._buf = b""
        self._eof = False  # the whole file is in _buf

    def _get(self, rng: tuple[int, int] | None, max_bytes: int | None) -> Response:
        stats = [0, 0]
        try:
            return self.session.get(self.url, rng, max_bytes, stats)
        finally:
            self.requests += stats[0]
            self.bytes_fetched += stats[1]

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


class FsspecSource(CachedSource):
    """An fsspec URL (s3://, gs://, memory:// ...) as a byte source."""

    def __init__(self, url: str, storage_options: dict | None = None) -> None:
        fsspec = require("fsspec", "fsspec URLs")
        self.fs, self.path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        info = self.fs.info(self.path)
        super().__init__(url, int(info.get("size") or 0), requests=1)  # info() was one

    def read_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start=start, end=end)

    def read_all(self, limit: int = 64 * 1024 * 1024) -> bytes:
        if self.size is not None and self.size > limit:
            raise RemoteError(f"{self.name}: larger than {limit} bytes")
        return self.prefix(self.size or 0)
