"""A small fault-injecting HTTP proxy on 127.0.0.1, in front of the nginx fixture.

Each GET is forwarded to ``upstream`` (with its Range header) unless a fault is
queued: :meth:`FaultProxy.queue` takes a list of faults consumed one per request,
in order (requests beyond the list pass through).  Faults:

* ``500`` / ``503`` -- that status, empty body;
* ``429`` -- ``429 Too Many Requests`` with ``Retry-After: 1``;
* ``"truncate"`` -- the upstream status and headers (Content-Length of the whole
  answer), then half the body, then the connection is closed;
* ``"short"`` -- a self-consistent answer that is too short: the upstream's
  ``Content-Range``, but only half the body with a matching ``Content-Length``;
* ``"stall"`` -- no answer for ``stall_seconds``, then the connection is closed.

``seen`` records ``(fault or "pass", Range header)`` per request.
"""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class FaultProxy:
    def __init__(self, upstream: str, stall_seconds: float = 2.0) -> None:
        u = urlsplit(upstream)
        self.host, self.uport = u.hostname, u.port
        self.stall_seconds = stall_seconds
        self.faults: list = []
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                with proxy._lock:
                    fault = proxy.faults.pop(0) if proxy.faults else None
                    proxy.seen.append((str(fault or "pass"), self.headers.get("Range", "")))
                if fault in (500, 503, 429):
                    self.send_response(fault)
                    if fault == 429:
                        self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fault == "stall":
                    time.sleep(proxy.stall_seconds)
                    self.close_connection = True
                    return
                status, headers, body = proxy._upstream(self.path, self.headers.get("Range"))
                if fault == "short":
                    body = body[: len(body) // 2]
                    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                    headers.append(("Content-Length", str(len(body))))
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                        self.send_header(k, v)
                self.end_headers()
                if fault == "truncate":
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _upstream(self, path: str, rng: str | None):
        conn = http.client.HTTPConnection(self.host, self.uport, timeout=10)
        try:
            conn.request("GET", path, headers={"Range": rng} if rng else {})
            r = conn.getresponse()
            return r.status, r.getheaders(), r.read()
        finally:
            conn.close()

    def queue(self, faults: list) -> None:
        with self._lock:
            self.faults = list(faults)
            self.seen = []

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
