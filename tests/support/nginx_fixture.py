"""A real nginx on 127.0.0.1 for the remote tests (Debian's package, /usr/sbin/nginx).

:class:`Nginx` writes its own config into a temp prefix (pid, error and
access logs, temp folders all inside it), runs ``nginx -g 'daemon off;'`` as
a subprocess on two free ports, and stops it at teardown.  Two server blocks:

* ``main`` (port ``port``) serves ``root``.  Special locations:
  - ``/noranges/`` ignores Range (``max_ranges 0``: always 200 + whole file);
  - ``/range416/`` answers every Range request with 416, like servers that
    refuse ranges on tiny files (a plain GET works);
  - ``/flaky/`` always answers 503 (with ``Retry-After: 0``);
  - ``/api/models/`` serves static JSON repo listings;
  - ``/org/private/`` needs ``Authorization: Bearer secret`` and then
    302-redirects to the second port (another origin);
  - ``/org/redirected/`` 302-redirects to the second port, no token needed;
  - ``/org/privsame/`` needs the token and is served here;
  - ``/org/renamed/`` needs the token, then 302-redirects to ``/org/privsame/``
    on the same origin.
* ``cdn`` (port ``port2``) serves ``root2`` -- the redirect target.

Each server block writes its own access log with a format that records the
request line, the Range and the Authorization headers, so tests assert the
requests a client made (and the headers it sent) from nginx's side.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TOKEN = "secret"

_LINE = re.compile(
    r'^(?P<port>\d+) "(?P<method>\S+) (?P<path>\S+) [^"]*" status=(?P<status>\d+) '
    r'range="(?P<range>[^"]*)" auth="(?P<auth>[^"]*)" bytes=(?P<bytes>\d+)$'
)


@dataclass
class LogLine:
    port: int
    method: str
    path: str
    status: int
    range: str
    auth: str
    bytes: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    def __init__(self, prefix: Path, root: Path, root2: Path) -> None:
        self.prefix, self.root, self.root2 = prefix, root, root2
        self.port, self.port2 = _free_port(), _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url2(self) -> str:
        return f"http://127.0.0.1:{self.port2}"

    def config(self) -> str:
        p = self.prefix
        # as root, nginx would drop workers to `nobody`, who cannot read a 0700 tmp dir
        user = "user root;" if os.geteuid() == 0 else ""
        need_token = f'if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}'
        return f"""
{user}
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 256; }}
http {{
    default_type application/octet-stream;
    log_format ws '$server_port "$request" status=$status range="$http_range" auth="$http_authorization" bytes=$body_bytes_sent';
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    keepalive_timeout 5;
    server {{
        listen 127.0.0.1:{self.port};
        root {self.root};
        access_log {p}/access.log ws;
        location /noranges/ {{ max_ranges 0; }}
        location /range416/ {{ if ($http_range) {{ return 416; }} }}
        location /flaky/ {{ add_header Retry-After 0 always; return 503; }}
        location /api/models/ {{ default_type application/json; }}
        # like the Hub: a missing file is an EntryNotFound (huggingface_hub's file_exists needs it),
        # and hf_hub_download wants a commit id, as the Hub sends on every resolve
        location /org/ {{
            add_header X-Error-Code EntryNotFound always;
            add_header X-Repo-Commit 0123456789abcdef0123456789abcdef01234567 always;
        }}
        location /org/private/ {{
            {need_token}
            rewrite ^/org/private/resolve/main/(.*)$ {self.url2}/cdn/private/$1 redirect;
        }}
        location /org/redirected/ {{
            rewrite ^/org/redirected/resolve/main/(.*)$ {self.url2}/cdn/redirected/$1 redirect;
        }}
        location /org/privsame/ {{ {need_token} }}
        location /org/renamed/ {{
            {need_token}
            rewrite ^/org/renamed/(.*)$ /org/privsame/$1 redirect;
        }}
    }}
    server {{
        listen 127.0.0.1:{self.port2};
        root {self.root2};
        access_log {p}/access2.log ws;
    }}
}}
"""

    def start(self) -> Nginx:
        self.prefix.mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config())
        cmd = [
            NGINX,
            "-p",
            str(self.prefix),
            "-c",
            str(conf),
            "-e",
            str(self.prefix / "error.log"),
            "-g",
            "daemon off;",
        ]
        check = subprocess.run([*cmd, "-t"], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"nginx config test failed:\n{check.stderr}")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        for port in (self.port, self.port2):
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nginx exited: {self.proc.stderr.read().decode()}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nginx did not listen on {port}") from None
                    time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown of master and workers
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    # ------------------------------------------------------------------ access logs

    def _read(self, name: str) -> list[LogLine]:
        path = self.prefix / name
        if not path.exists():
            return []
        out = []
        for raw in path.read_text().splitlines():
            m = _LINE.match(raw)
            if not m:
                raise AssertionError(f"unexpected access log line: {raw!r}")
            d = m.groupdict()
            out.append(
                LogLine(
                    int(d["port"]),
                    d["method"],
                    d["path"],
                    int(d["status"]),
                    "" if d["range"] == "-" else d["range"],
                    "" if d["auth"] == "-" else d["auth"],
                    int(d["bytes"]),
                )
            )
        return out

    def log(self) -> list[LogLine]:
        """Requests to the main server block since the last :meth:`clear`."""
        return self._read("access.log")

    def log2(self) -> list[LogLine]:
        """Requests to the redirect target since the last :meth:`clear`."""
        return self._read("access2.log")

    def clear(self) -> None:
        """Empty both access logs (nginx keeps appending to the same inode)."""
        # nginx writes each line once the request completes; give a request that
        # just finished on the client side a moment to be logged before clearing
        time.sleep(0.05)
        for name in ("access.log", "access2.log"):
            path = self.prefix / name
            if path.exists():
                with open(path, "r+b") as f:
                    f.truncate(0)

    def wait_logged(self, n: int, which: str = "log", timeout: float = 5.0) -> list[LogLine]:
        """The log once it holds at least ``n`` lines (lines land after the response)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = getattr(self, which)()
            if len(lines) >= n or time.monotonic() > deadline:
                return lines
            time.sleep(0.02)


# ---------------------------------------------------------------------- pytest fixtures
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def remote_tree(tmp_path_factory):
    """Files written by the oracle libraries, laid out for nginx (see remote_data)."""
    from . import remote_data

    return remote_data.build(tmp_path_factory.mktemp("remote"))


@pytest.fixture(scope="session")
def nginx_server(remote_tree, tmp_path_factory):
    server = Nginx(tmp_path_factory.mktemp("nginx"), remote_tree.root, remote_tree.root2).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nginx(nginx_server):
    """The session's nginx with empty access logs."""
    nginx_server.clear()
    return nginx_server
