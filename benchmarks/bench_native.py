"""The compiled kernel core against ggml's C reference, in one process, same data.

For the plain, legacy, ternary and FP4 types (the families of csrc/plain.c,
legacy.c, ternary.c, fp4.c), on one 4096 x 512 float32 matrix of weight-like
values:

  quant    ``weightsmith.quant.quantize`` vs ``ggml_quantize_chunk`` (one thread,
           through tests/support/ggml_ref.py), without and, where ggml has an imatrix
           path, with an importance matrix                      target >= 2x
  dequant  ``weightsmith.quant.dequantize`` vs the type's ``to_float``
                                                                target >= 1x
  copy     F16, BF16, Q8_0 dequantize vs ``np.copyto`` of the same float32
           output (a plain copy of the output bytes)         target <= 1.5x
  threads  workers=2 vs workers=1, wall clock, quantize and dequantize
                                                              target >= 1.8x
           beside each: the same pool copying the same float32 matrix, 1 vs 2
           threads (the bandwidth ceiling of that moment), and the machine's
           ceiling for the op itself: two independent one-thread calls at once
           against one alone (no pool involved)

Method: ours and theirs interleaved, median of ``--repeat`` runs.  One-thread
comparisons use the thread's CPU time (``time.thread_time``): the machine is
shared, and wall clock there measures the neighbours.  The threads section
must use wall clock; it also prints the share of the time some task waited
for a CPU (Linux PSI), which on a busy machine bounds what two threads can
gain; ``--isolate`` runs it under SCHED_FIFO (root), so that its threads
pre-empt the neighbours as on an idle machine.  Every result is checked
bit-identical with ggml before it is timed.

    python benchmarks/bench_native.py [--repeat 11] [--section quant ...] [--types Q4_0,F16]
        [--isolate]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import weightsmith.quant as Q
from support import ggml_ref

TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "Q1_0", "Q2_0",
         "MXFP4", "NVFP4"]  # fmt: skip
#: types whose ggml quantizer uses the importance matrix (the others ignore it)
IMATRIX_TYPES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1"}
COPY_TYPES = ["F16", "BF16", "Q8_0"]
SHAPE = (4096, 512)


def _weights(shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(0.02)
    x *= np.exp(rng.standard_normal((shape[0], 1)).astype(np.float32))  # per-row scale
    return x


def _race(fns: dict[str, Callable[[], object]], repeat: int, clock) -> dict[str, float]:
    """Median seconds of each fn on ``clock``, run interleaved."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = clock()
            fn()
            times[k].append(clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _cpu_waiting() -> float | None:
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return None


def _row(cells: list[object]) -> None:
    print("| " + " | ".join(f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells) + " |")


def _header(title: str, cols: list[str]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))


def _ok(ratio: float, target: float, higher: bool = True) -> str:
    return "yes" if (ratio >= target if higher else ratio <= target) else "NO"


def bench_quant(x: np.ndarray, im: np.ndarray, types: list[str], repeat: int) -> None:
    _header("quantize vs ggml_quantize_chunk, one thread (CPU ms, median)",
            ["type", "imatrix", "ours", "ggml", "ratio", ">= 2x"])  # fmt: skip
    for name in types:
        for w in (None, im) if name in IMATRIX_TYPES else (None,):
            assert np.array_equal(Q.quantize(x, name, w), ggml_ref.quantize(x, name, w)), name
            med = _race(
                {
                    "ours": lambda: Q.quantize(x, name, w),  # noqa: B023
                    "ggml": lambda: ggml_ref.quantize(x, name, w),  # noqa: B023
                },
                repeat,
                time.thread_time,
            )
            ratio = med["ggml"] / med["ours"]
            _row([name, "yes" if w is not None else "no", med["ours"] * 1e3, med["ggml"] * 1e3,
                  ratio, _ok(ratio, 2)])  # fmt: skip


def bench_dequant(x: np.ndarray, types: list[str], repeat: int) -> None:
    _header("dequantize vs to_float, one thread (CPU ms, median)",
            ["type", "ours", "to_float", "ratio", ">= 1x"])  # fmt: skip
    for name in types:
        raw = ggml_ref.quantize(x, name)
        want = ggml_ref.dequantize(raw, name, x.size)
        got = Q.dequantize(raw, name, x.shape)
        assert np.array_equal(got.reshape(-1).view(np.uint32), want.view(np.uint32)), name
        med = _race(
            {
                "ours": lambda: Q.dequantize(raw, name, x.shape),  # noqa: B023
                "ggml": lambda: ggml_ref.dequantize(raw, name, x.size),  # noqa: B023
            },
            repeat,
            time.thread_time,
        )
        ratio = med["ggml"] / med["ours"]
        _row([name, med["ours"] * 1e3, med["ggml"] * 1e3, ratio, _ok(ratio, 1)])


def bench_copy(x: np.ndarray, types: list[str], repeat: int) -> None:
    """Dequantize into a fresh array, against np.copyto of the same float32 array into a
    fresh array (both allocate their output, as a caller gets it)."""
    _header("dequantize vs np.copyto of the float32 output, one thread (CPU ms, median)",
            ["type", "ours", "copyto", "ours / copy", "<= 1.5x"])  # fmt: skip
    for name in types:
        raw = ggml_ref.quantize(x, name)
        y = Q.dequantize(raw, name, x.shape)

        def copy(y=y) -> np.ndarray:
            out = np.empty_like(y)
            np.copyto(out, y)
            return out

        med = _race(
            {"ours": lambda: Q.dequantize(raw, name, x.shape), "copy": copy},  # noqa: B023
            repeat,
            time.thread_time,
        )
        ratio = med["ours"] / med["copy"]
        _row([name, med["ours"] * 1e3, med["copy"] * 1e3, ratio, _ok(ratio, 1.5, False)])


class _Pair:
    """Runs a callable on the calling thread and on one other Python thread at the
    same time (each call releases the GIL inside the kernel), for the machine's
    two-core ceiling of that callable with no pool involved."""

    def __init__(self) -> None:
        self._start, self._end = threading.Barrier(2), threading.Barrier(2)
        self._fn: Callable[[], object] | None = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._start.wait()
            self._fn()
            self._end.wait()

    def __call__(self, fn: Callable[[], object]) -> None:
        self._fn = fn
        self._start.wait()
        fn()
        self._end.wait()


def bench_threads(x: np.ndarray, types: list[str], repeat: int) -> None:
    """Each row races 1 and 2 threads of the op and, interleaved with them, two
    ceilings of that moment:

    * "copy 2/1": the same pool copying the same float32 matrix (``dequantize`` of
      F32, 8 MiB into a fresh array, same API and threads), 1 vs 2 threads;
    * "pair 2/1": the op on one thread, k times in a row, against two Python
      threads each doing the same k calls at once (2 x the work; k makes a side
      last >= ~4 ms, so the threads' start skew is noise): the throughput two
      cores give this kernel with no pool and no splitting.  An op whose speed-up
      reaches its pair ratio loses nothing to the pool."""
    _header(f"two threads vs one on {x.shape[0]}x{x.shape[1]} (wall ms, median)",
            ["type", "op", "1 thread", "2 threads", "speedup", "copy 2/1", "pair 2/1",
             "CPU waits", ">= 1.8x"])  # fmt: skip
    xb = x.view(np.uint8)
    pair = _Pair()

    def copy(w: int) -> np.ndarray:
        return Q.dequantize(xb, "F32", x.shape, workers=w)

    assert np.array_equal(copy(2), x)
    for name in types:
        raw = Q.quantize(x, name)
        for op, fn in (
            ("quantize", lambda w: Q.quantize(x, name, workers=w)),  # noqa: B023
            ("dequantize", lambda w: Q.dequantize(raw, name, x.shape, workers=w)),  # noqa: B023
        ):
            assert np.array_equal(fn(1), fn(2)), (name, op)  # never depends on the threads
            t = time.perf_counter()
            fn(1)
            k = max(1, round(0.004 / (time.perf_counter() - t)))

            def serial(fn=fn, k=k) -> None:
                for _ in range(k):
                    fn(1)

            p0, t0 = _cpu_waiting(), time.perf_counter()
            med = _race(
                {
                    "one": lambda: fn(1),  # noqa: B023
                    "two": lambda: fn(2),  # noqa: B023
                    "copy1": lambda: copy(1),
                    "copy2": lambda: copy(2),
                    "serial": serial,
                    "pair": lambda: pair(serial),
                },
                repeat,
                time.perf_counter,
            )
            p1, t1 = _cpu_waiting(), time.perf_counter()
            waits = "n/a" if p0 is None or p1 is None else f"{(p1 - p0) / (t1 - t0):.0%}"
            ratio = med["one"] / med["two"]
            ceiling = med["copy1"] / med["copy2"]
            machine = 2 * med["serial"] / med["pair"]
            _row([name, op, med["one"] * 1e3, med["two"] * 1e3, ratio, ceiling, machine, waits,
                  _ok(ratio, 1.8)])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--section", action="append", choices=["quant", "dequant", "copy", "threads"])
    ap.add_argument("--types", help="comma-separated subset of the types")
    ap.add_argument(
        "--isolate",
        action="store_true",
        help="threads section under SCHED_FIFO (Linux, root): its threads pre-empt the other "
        "jobs of a shared machine, emulating an idle one",
    )
    args = ap.parse_args()
    types = args.types.split(",") if args.types else TYPES
    sections = args.section or ["quant", "dequant", "copy", "threads"]
    x = _weights(SHAPE)
    im = np.random.default_rng(1).random(SHAPE[1], dtype=np.float32) ** 2 + np.float32(1e-3)
    if "quant" in sections:
        bench_quant(x, im, types, args.repeat)
    if "dequant" in sections:
        bench_dequant(x, types, args.repeat)
    if "copy" in sections:
        bench_copy(x, [t for t in types if t in COPY_TYPES], args.repeat)
    if "threads" in sections:
        if args.isolate:  # before the pool's threads exist: they inherit the policy
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        bench_threads(x, types, args.repeat)


if __name__ == "__main__":
    main()
