"""A real Ray cluster for the tests and benchmarks, shut in a network namespace.

Ray binds to every interface and advertises the machine's address, so it never
runs in the test process itself: :func:`run_isolated` starts a Python script
under ``unshare --net --pid --fork --mount-proc``.  In that namespace only the
loopback interface exists (brought up first), so no packet can leave
127.0.0.1; the script is process 1 of its own PID namespace, so when it ends
the kernel ends every process it started, whatever Ray left behind.

Inside, :class:`Cluster` starts a head node and worker nodes with ``ray start``
on 127.0.0.1 (one CPU each) and stops them by process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import weightsmith

#: The checkout under test: Ray's worker processes must import this weightsmith.
SRC = str(Path(weightsmith.__file__).resolve().parents[1])
TESTS = str(Path(__file__).resolve().parents[1])
PORT = 6390


def can_isolate() -> bool:
    """Whether this machine lets us make a network + PID namespace (root, util-linux)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    r = subprocess.run(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
    )
    return r.returncode == 0


def env() -> dict[str, str]:
    """Environment of every process in the namespace: this checkout first on the path,
    Ray's phone-home and dashboard off."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC, TESTS, e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e["RAY_USAGE_STATS_ENABLED"] = "0"
    e["RAY_DISABLE_DOCKER_CPU_WARNING"] = "1"
    e["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    return e


def run_isolated(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python ARGS`` as process 1 of a new network + PID namespace with only loopback."""
    script = 'ip link set lo up && exec "$0" "$@"'
    cmd = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c"]
    return subprocess.run(
        [*cmd, script, sys.executable, *args],
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Cluster:
    """``ray start`` head + workers on 127.0.0.1 (call only inside :func:`run_isolated`)."""

    def __init__(self, root: Path, nodes: int = 2, object_store: int = 100 << 20) -> None:
        self.address = f"127.0.0.1:{PORT}"
        self.temp = root / "ray"  # Ray's sockets and logs: short path (AF_UNIX limit)
        common = [
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            f"--object-store-memory={object_store}",
            "--disable-usage-stats",
        ]
        ray = str(Path(sys.executable).with_name("ray"))
        head = [ray, "start", "--head", f"--port={PORT}", "--include-dashboard=false"]
        self._run([*head, f"--temp-dir={self.temp}", *common])
        for i in range(1, nodes):
            ports = [
                f"--node-manager-port={PORT + 10 * i}",
                f"--object-manager-port={PORT + 10 * i + 1}",
            ]
            self._run([ray, "start", f"--address={self.address}", *ports, *common])
        self._wait_for(nodes)

    def _run(self, cmd: list[str]) -> None:
        r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=180)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")

    def _wait_for(self, nodes: int) -> None:
        import ray  # only inside the namespace, where the cluster is

        ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
        deadline = time.monotonic() + 120
        while sum(n["Alive"] for n in ray.nodes()) < nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {ray.nodes()} of {nodes} nodes came up")
            time.sleep(0.2)

    @staticmethod
    def stop() -> None:
        """Kill every other process of this PID namespace by its pid: all were started here."""
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGKILL)


def workers_running(task: str) -> list[int]:
    """Pids of Ray worker processes now running ``task`` (Ray sets their title)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(f"ray::{task}".encode()):
            pids.append(int(entry))
    return pids


def report(path: Path, results: dict) -> None:
    path.write_text(json.dumps(results))
