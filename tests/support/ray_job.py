"""The Ray side of tests/test_cluster.py, run as process 1 of its own network + PID
namespace (:func:`support.ray_cluster.run_isolated`).

``python -m support.ray_job WORK``: starts a 2-node cluster on 127.0.0.1, runs the
jobs below on the GGUF files the test left in WORK, writes what happened to
WORK/results.json, and stops the cluster.  The test compares the files.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from support.nginx_fixture import Nginx
from support.ray_cluster import Cluster, env, report, workers_running
from weightsmith.convert import hf_to_gguf
from weightsmith.quant import file as qfile
from weightsmith.quant.file import quantize_file


def kill_one_worker(task: str, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first Ray worker seen running ``task``, mid-task."""
    import os
    import signal

    while not stop.is_set() and not killed:
        for pid in workers_running(task):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.002)


def main(work: Path) -> None:
    results: dict = {}
    cluster = Cluster(work, nodes=2)
    try:
        import ray

        results["nodes"] = sum(n["Alive"] for n in ray.nodes())
        results["node_ips"] = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
        src = work / "src.gguf"
        out = work / "out"
        out.mkdir()

        quantize_file(src, out / "q4_k_m.gguf", "Q4_K_M", ray=cluster.address)

        # a worker killed mid-task: Ray runs the task again, the file is the same
        qfile.CLUSTER_TASK_ELEMENTS = 1 << 24  # long tasks, so one is caught running
        killed: list[int] = []
        stop = threading.Event()
        killer = threading.Thread(target=kill_one_worker, args=("cluster_task", killed, stop))
        killer.start()
        try:
            quantize_file(src, out / "q4_k_m.killed.gguf", "Q4_K_M", ray=cluster.address)
        finally:
            stop.set()
            killer.join()
        results["killed"] = killed

        # a source behind HTTP: every node fetches the rows it quantizes, with Range
        # requests, from nginx (inside this namespace too); each byte once
        web = Nginx(work / "nginx", work, work / "out").start()
        try:
            url = f"{web.url}/src.gguf"
            quantize_file(url, out / "q4_k_m.url.gguf", "Q4_K_M", ray=cluster.address)
            log = [line for line in web.log() if line.path == "/src.gguf"]
            results["url_requests"] = [[line.status, line.range, line.bytes] for line in log]
        finally:
            web.stop()

        # an error raised in a task reaches the driver as itself; nothing is written
        try:
            quantize_file(work / "nan.gguf", out / "nan.gguf", "Q4_K_M", ray=cluster.address)
            results["nan"] = None
        except Exception as e:
            results["nan"] = [type(e).__name__, str(e)]
        results["nan_written"] = sorted(p.name for p in out.iterdir() if "nan" in p.name)

        # HF folder -> GGUF: the nodes plan the conversion themselves and encode slabs
        model = work / "mixtral"
        hf_to_gguf(model, out / "mixtral-q4_k_m.gguf", "q4_k_m", ray=cluster.address)

        # the command line: one file, and several types from one read of the source
        cli = [str(Path(sys.executable).with_name("weightsmith")), "--quiet"]
        addr = ["--ray", cluster.address]
        q8 = [*cli, "quantize", str(src), str(out / "q8_0.gguf"), "--type", "q8_0", *addr]
        batch = [*cli, "batch-quantize", str(src), "--types", "q4_k_m,q8_0,iq4_xs"]
        batch += ["--out", str(out / "batch"), *addr]
        conv = [*cli, "convert", str(model), str(out / "mixtral-f16.gguf"), "--type", "f16", *addr]
        for name, cmd in (("cli_quantize", q8), ("cli_batch", batch), ("cli_convert", conv)):
            r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)
            results[name] = [r.returncode, r.stdout[-2000:], r.stderr[-2000:]]
    except Exception:
        results["error"] = traceback.format_exc()
    finally:
        report(work / "results.json", results)
        Cluster.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
