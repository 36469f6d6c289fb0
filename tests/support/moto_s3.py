"""A real S3-protocol server on 127.0.0.1: moto's standalone server mode (``moto[server]``).

Chosen because it is a separate process speaking the S3 REST protocol over HTTP (s3fs,
through aiobotocore, talks to it exactly as to AWS: signed requests, ranged GETs,
listings), it needs no credentials or network, and it installs from PyPI with the
test extra.  :class:`MotoS3` starts ``python -m moto.server -H 127.0.0.1 -p PORT``
and stops it by process id.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoS3:
    def __init__(self) -> None:
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict:
        """s3fs options: this endpoint, dummy keys (no credential lookup, no metadata service)."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.url, "region_name": "us-east-1"},
            "skip_instance_cache": True,
        }

    def start(self) -> MotoS3:
        env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("moto server exited")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto server did not listen") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
