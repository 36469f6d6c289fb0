"""quantize_file on a 2-node Ray cluster vs here, and batch-quantize vs separate runs.

    python benchmarks/bench_cluster.py [--layers 12] [--repeat 3]

The cluster is real (``ray start`` head + one more node, one CPU each, on
127.0.0.1) and runs, with this whole script, inside a network namespace that
has only loopback (tests/support/ray_cluster.py).  Printed: median wall time
of each way over ``--repeat`` runs, and the ratios.  Also the per-core
quantize throughput that docs/scale.md projects from.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.ray_cluster import Cluster, run_isolated
from test_cluster import write_source
from weightsmith import gguf
from weightsmith.quant.file import quantize_file, quantize_files

TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS"]


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def inside(work: Path, repeat: int) -> None:
    src = work / "model-f16.gguf"
    f = gguf.read(src)
    elements = sum(t.n_elements for t in f.tensors)
    f.close()
    print(f"model: {elements / 1e6:.1f} M parameters, F16, {src.stat().st_size / 2**20:.0f} MiB")
    cluster = Cluster(work, nodes=2)
    try:
        one = median_time(lambda: quantize_file(src, work / "a.gguf", "Q4_K_M"), repeat)
        two = median_time(lambda: quantize_file(src, work / "b.gguf", "Q4_K_M", workers=2), repeat)
        ray = median_time(
            lambda: quantize_file(src, work / "c.gguf", "Q4_K_M", ray=cluster.address), repeat
        )
        same = (work / "a.gguf").read_bytes() == (work / "c.gguf").read_bytes()
        print(f"q4_k_m, 1 thread here:      {one:6.2f} s  ({elements / one / 1e6:.0f} M params/s)")
        print(f"q4_k_m, 2 threads here:     {two:6.2f} s  ({one / two:.2f}x one thread)")
        print(f"q4_k_m, Ray 2 nodes x 1 CPU: {ray:6.2f} s  ({one / ray:.2f}x one thread, "
              f"{two / ray:.2f}x two threads); byte-identical: {same}")  # fmt: skip
        outs = {t: work / f"batch-{t}.gguf" for t in TYPES}
        batch = median_time(lambda: quantize_files(src, outs, workers=2), repeat)

        def separate() -> None:
            for t in TYPES:
                quantize_file(src, work / f"sep-{t}.gguf", t, workers=2)

        sep = median_time(separate, repeat)
        print(f"{len(TYPES)} types, one read:  {batch:6.2f} s; separate runs {sep:6.2f} s "
              f"({sep / batch:.2f}x)")  # fmt: skip
    finally:
        Cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--inside", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inside:
        inside(Path(a.inside), a.repeat)
        return
    with tempfile.TemporaryDirectory() as tmp:
        write_source(Path(tmp) / "model-f16.gguf", layers=a.layers)
        r = run_isolated([__file__, "--inside", tmp, "--repeat", str(a.repeat)], timeout=3600)
        print(r.stdout, end="")
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            raise SystemExit(r.returncode)


if __name__ == "__main__":
    main()
