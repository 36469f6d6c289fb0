"""Quantization benchmarks: weightsmith.quant against gguf-py and ggml's C reference.

One harness for every codec family, driven by the type lists below (add a
type to a list to benchmark it).  Everything goes through the public API
``weightsmith.quant.quantize`` / ``dequantize``, single worker unless stated.

Sections (``--section``, repeatable; default: all)

  dequant  dequantize vs gguf-py's numpy ``gguf.quants.dequantize``,
           every type both implement                        target >= 3x
  quant    quantize vs gguf-py's ``gguf.quants.quantize``,
           every type both implement                  target >= 2x (legacy)
  ggml     quantize vs ggml's ``ggml_quantize_chunk`` (single thread, through
           tests/support/ggml_ref.py), without and with an imatrix
                                                  target >= 1x (K, IQ4)
  workers  workers=1 vs workers=N threads, wall clock, quantize and dequantize
           1024x4096 per type, and quantize_file of a small llama-shaped
           GGUF (Q4_K_M, many tensors); one "RATIO" line each  target >= 1.8x
  memory   peak extra memory (tracemalloc) while quantizing / dequantizing a
           large tensor, output excluded                 target <= 64 MiB
  floor    for BF16, F16 and Q8_0: gguf-py's dequantize against the numpy
           passes any decoder must make (allocate the float32 output, widen
           the codes into it, and for Q8_0 scale each 32-block); gguf-py's
           time over that bound is the largest ratio a numpy decoder can reach

Method: both sides run on the same matrix in one process, interleaved
(ours, theirs, ours, ...), and the median of ``--repeat`` runs is reported.
Single-thread comparisons use CPU time (``time.process_time``) because the
benchmark machine is shared and wall clock there measures the neighbours;
the workers section must use wall clock.  Every result is checked
bit-identical with ggml before it is timed.

    python benchmarks/bench_quant.py [--rows 256] [--cols 4096] [--repeat 7]
        [--section dequant --section quant ...] [--types Q4_0,Q4_K] [--markdown]
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import gc
import mmap
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

import weightsmith.quant as Q
from support import ggml_ref

# --------------------------------------------------------------------------- type lists
LEGACY = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
KQUANTS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
IQ4 = ["IQ4_NL", "IQ4_XS"]
IQ_LOW = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S"]
OTHER = ["TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0"]
PLAIN = ["F16", "BF16"]

#: dequantize vs gguf-py (types gguf-py lacks are listed as n/a)
DEQUANT_TYPES = PLAIN + LEGACY + KQUANTS + IQ4 + IQ_LOW + OTHER
#: quantize vs gguf-py (types gguf-py lacks are listed as n/a)
QUANT_GGUF_TYPES = PLAIN + LEGACY + ["TQ1_0", "TQ2_0", "MXFP4"]
#: quantize vs ggml C, single thread
QUANT_GGML_TYPES = KQUANTS + IQ4 + LEGACY + OTHER + IQ_LOW
#: workers speedup
WORKER_TYPES = ["Q4_0", "Q4_K", "Q6_K", "IQ4_XS"]
#: peak memory
MEMORY_TYPES = LEGACY + KQUANTS + IQ4 + OTHER + PLAIN + IQ_LOW

TARGETS = {
    "dequant": {t: 3.0 for t in DEQUANT_TYPES},
    "quant": {t: 2.0 for t in LEGACY},
    "ggml": {t: 1.0 for t in KQUANTS + IQ4},
}


# --------------------------------------------------------------------------- timing


def _interleaved(fa: Callable[[], object], fb: Callable[[], object], repeat: int, clock):
    """Median seconds of fa and fb, run alternately ``repeat`` times each."""
    ta, tb = [], []
    for _ in range(repeat):
        for fn, acc in ((fa, ta), (fb, tb)):
            t0 = clock()
            fn()
            acc.append(clock() - t0)
    return statistics.median(ta), statistics.median(tb)


def _median(fn: Callable[[], object], repeat: int, clock) -> float:
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def _gguf_has(name: str, kind: str) -> bool:
    try:
        q = GGMLQuantizationType[name]
    except KeyError:
        return False
    x = np.zeros((1, 256), np.float32)
    try:
        if kind == "quant":
            gguf_quantize(x, q)
        else:
            gguf_dequantize(ggml_ref.quantize(x, name, np.ones(256, np.float32)), q)
    except NotImplementedError:
        return False
    return True


class Report:
    """Collects result rows per section; prints them as text or markdown."""

    def __init__(self, markdown: bool) -> None:
        self.markdown = markdown

    def header(self, title: str, cols: list[str]) -> None:
        if self.markdown:
            print(f"\n### {title}\n")
            print("| " + " | ".join(cols) + " |")
            print("|" + "|".join("---" for _ in cols) + "|")
        else:
            print(f"\n== {title}")
            print("  ".join(f"{c:>14}" for c in cols))

    def row(self, cells: list[object]) -> None:
        txt = [c if isinstance(c, str) else f"{c:.2f}" for c in cells]
        if self.markdown:
            print("| " + " | ".join(txt) + " |")
        else:
            print("  ".join(f"{c:>14}" for c in txt), flush=True)


def _verdict(ratio: float, target: float | None) -> str:
    if target is None:
        return "-"
    return "ok" if ratio >= target else f"below {target:g}x"


# --------------------------------------------------------------------------- sections


def _reference_bytes(x: np.ndarray, name: str, im: np.ndarray) -> np.ndarray:
    """ggml's own bytes (imatrix for the types that need one) as dequantize input."""
    return ggml_ref.quantize(x, name, im if Q.info(name).requires_imatrix else None)


def _race_dequant(raw: np.ndarray, name: str, shape, repeat: int) -> tuple[float, float]:
    """CPU seconds (median, interleaved) of our dequantize and gguf-py's on ``raw``."""
    qt = GGMLQuantizationType[name]
    return _interleaved(
        lambda: Q.dequantize(raw, name, shape),
        lambda: gguf_dequantize(raw, qt),
        repeat,
        time.process_time,
    )


def bench_dequant(x, im, types, repeat, rep: Report) -> None:
    n = x.size
    rep.header(
        f"dequantize {x.shape[0]}x{x.shape[1]} vs gguf-py (Melem/s, CPU time)",
        ["type", "weightsmith", "gguf-py", "ratio", "target"],
    )
    for name in types:
        raw = _reference_bytes(x, name, im)
        ours = Q.dequantize(raw, name, x.shape)
        want = ggml_ref.dequantize(raw, name, n).reshape(x.shape)
        assert np.array_equal(ours.view(np.uint32), want.view(np.uint32)), name
        if not _gguf_has(name, "dequant"):
            t = _median(lambda: Q.dequantize(raw, name, x.shape), repeat, time.process_time)  # noqa: B023
            rep.row([name, n / t / 1e6, "n/a", "n/a", "-"])
            continue
        a, b = _race_dequant(raw, name, x.shape, repeat)
        rep.row(
            [name, n / a / 1e6, n / b / 1e6, b / a, _verdict(b / a, TARGETS["dequant"].get(name))]
        )


def bench_quant(x, types, repeat, rep: Report) -> None:
    n = x.size
    rep.header(
        f"quantize {x.shape[0]}x{x.shape[1]} vs gguf-py (Melem/s, CPU time)",
        ["type", "weightsmith", "gguf-py", "ratio", "target"],
    )
    for name in types:
        if not Q.info(name).can_quantize:
            continue
        assert np.array_equal(Q.quantize(x, name), ggml_ref.quantize(x, name)), name
        if not _gguf_has(name, "quant"):
            t = _median(lambda: Q.quantize(x, name), repeat, time.process_time)  # noqa: B023
            rep.row([name, n / t / 1e6, "n/a", "n/a", "-"])
            continue
        qt = GGMLQuantizationType[name]
        a, b = _interleaved(
            lambda: Q.quantize(x, name),  # noqa: B023
            lambda: gguf_quantize(x, qt),  # noqa: B023
            repeat,
            time.process_time,
        )
        rep.row(
            [name, n / a / 1e6, n / b / 1e6, b / a, _verdict(b / a, TARGETS["quant"].get(name))]
        )


def bench_ggml(x, im, types, repeat, rep: Report) -> None:
    n = x.size
    rep.header(
        f"quantize {x.shape[0]}x{x.shape[1]} vs ggml C, 1 thread (Melem/s, CPU time)",
        ["type", "imatrix", "weightsmith", "ggml C", "ratio", "target"],
    )
    for name in types:
        info = Q.info(name)
        if not info.can_quantize:
            continue
        paths = [("yes", im)] if info.requires_imatrix else [("no", None), ("yes", im)]
        for label, imat in paths:
            assert np.array_equal(Q.quantize(x, name, imat), ggml_ref.quantize(x, name, imat)), name
            a, b = _interleaved(
                lambda: Q.quantize(x, name, imat),  # noqa: B023
                lambda: ggml_ref.quantize(x, name, imat),  # noqa: B023
                repeat,
                time.process_time,
            )
            target = TARGETS["ggml"].get(name)
            rep.row([name, label, n / a / 1e6, n / b / 1e6, b / a, _verdict(b / a, target)])


def _cpu_pressure() -> float | None:
    """Seconds (since boot) during which some task waited for a CPU (Linux PSI), if known."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return None


class _Isolation:
    """``--isolate``: emulate an idle machine on a shared one (Linux, root).

    This process runs SCHED_FIFO, so its threads pre-empt
    every normal job; while a 1-worker run is timed, spinner processes hold
    the other cores (a tight loop on one flag, nothing in memory), so no job
    shares the machine with it either.  The spinners exit with this process.
    """

    def __init__(self) -> None:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        self._buf = mmap.mmap(-1, 8)
        self._flag = ctypes.c_int64.from_buffer(self._buf)
        self._pids = []
        parent = os.getpid()
        for _ in range((os.cpu_count() or 1) - 1):
            pid = os.fork()
            if pid == 0:  # spin while the flag is 1, sleep while 0, leave on -1
                flag = self._flag
                while flag.value >= 0 and os.getppid() == parent:
                    if flag.value == 0:
                        time.sleep(0.0002)
                os._exit(0)
            self._pids.append(pid)
        atexit.register(self.close)

    def hold(self, on: bool) -> None:
        self._flag.value = 1 if on else 0
        time.sleep(0.002)  # let the spinners (and the jobs they displace) settle

    def close(self) -> None:
        self._flag.value = -1
        for pid in self._pids:
            os.waitpid(pid, 0)
        self._pids = []


_ISOLATION: _Isolation | None = None


def _waits(busy: float) -> str:
    return "isolated" if _ISOLATION is not None else f"{busy:.0%}"


def _paired(fns: dict[str, Callable[[], object]], repeat: int) -> tuple[dict[str, float], float]:
    """Median wall seconds of each fn, run interleaved; and the share of the time some
    task waited for a CPU meanwhile (0 on an idle machine; NaN if unknown).

    With ``--isolate`` the "one" entry (1 worker) runs with the other cores held.
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    p0, w0 = _cpu_pressure(), time.perf_counter()
    for _ in range(repeat):  # interleaved, so load changes hit every column alike
        for k, fn in fns.items():
            if _ISOLATION is not None:
                _ISOLATION.hold(k == "one")
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    if _ISOLATION is not None:
        _ISOLATION.hold(False)
        return {k: statistics.median(v) for k, v in times.items()}, float("nan")
    p1, w1 = _cpu_pressure(), time.perf_counter()
    busy = (p1 - p0) / (w1 - w0) if p0 is not None and p1 is not None else float("nan")
    return {k: statistics.median(v) for k, v in times.items()}, busy


def bench_workers(x, types, repeat, workers, rep: Report) -> None:
    """workers=1 vs workers=N threads, wall clock, one ratio line per type and operation.

    "CPU waits" is the share of the time some task waited for a CPU (Linux
    PSI): above a few percent the machine was shared and the speedups are not
    the idle-core figures.
    """
    n = x.size
    rep.header(f"workers {x.shape[0]}x{x.shape[1]}: 1 vs {workers} threads (wall clock, median)",
               ["type", "op", "1 worker ms", f"{workers} workers ms", "speedup", "CPU waits",
                "target"])  # fmt: skip
    for name in types:
        raw = Q.quantize(x, name)
        for op, fn in (
            ("quantize", lambda w: Q.quantize(x, name, workers=w)),  # noqa: B023
            ("dequantize", lambda w: Q.dequantize(raw, name, x.shape, workers=w)),  # noqa: B023
        ):
            one = fn(1)
            assert np.array_equal(one, fn(workers)), (name, op)  # never depends on workers
            med, busy = _paired({"one": lambda: fn(1), "n": lambda: fn(workers)}, repeat)  # noqa: B023
            ratio = med["one"] / med["n"]
            rep.row([name, op, med["one"] * 1e3, med["n"] * 1e3, ratio, _waits(busy),
                     _verdict(ratio, 1.8)])  # fmt: skip
            print(f"RATIO workers {name} {op}: {ratio:.2f}x (workers={workers} vs 1, "
                  f"n={n}, CPU waits {_waits(busy)})", flush=True)  # fmt: skip


def bench_workers_file(repeat: int, workers: int, ftype: str, rep: Report) -> None:
    """``quantize_file`` of a small llama-shaped F32 GGUF (many tensors), workers=1 vs N."""
    import tempfile

    from support.recipe_models import ModelSpec, write_model
    from weightsmith.quant.file import quantize_file

    spec = ModelSpec("bench", "llama", 4, 512, 1536, 8, 8, n_vocab=1024)
    with tempfile.TemporaryDirectory() as d:
        src, a, b = Path(d) / "f32.gguf", Path(d) / "a.gguf", Path(d) / "b.gguf"
        write_model(spec, src)
        quantize_file(src, a, ftype, workers=1)
        quantize_file(src, b, ftype, workers=workers)
        assert a.read_bytes() == b.read_bytes()  # never depends on workers
        med, busy = _paired(
            {
                "one": lambda: quantize_file(src, a, ftype, workers=1),
                "n": lambda: quantize_file(src, b, ftype, workers=workers),
            },
            repeat,
        )
    ntensors = len(spec.tensors())
    rep.header(f"quantize_file {ftype}, {ntensors} tensors: 1 vs {workers} workers (wall clock)",
               ["file type", "1 worker ms", f"{workers} workers ms", "speedup", "CPU waits", "target"])  # fmt: skip
    ratio = med["one"] / med["n"]
    rep.row([ftype, med["one"] * 1e3, med["n"] * 1e3, ratio, _waits(busy), _verdict(ratio, 1.7)])
    print(f"RATIO workers quantize_file {ftype}: {ratio:.2f}x (workers={workers} vs 1, "
          f"{ntensors} tensors, CPU waits {_waits(busy)})", flush=True)  # fmt: skip


def bench_floor(x, repeat, rep: Report) -> None:
    """How far a numpy decoder can get ahead of gguf-py on the simplest types."""
    rep.header(
        f"dequantize {x.shape[0]}x{x.shape[1]}: gguf-py vs the unavoidable numpy passes (CPU time)",
        ["type", "gguf-py ms", "ours ms", "bound ms", "ours/gguf", "bound/gguf", "3x needs ms"],
    )
    for name in ("BF16", "F16", "Q8_0"):
        raw = Q.quantize(x, name)
        flat = raw.reshape(-1)
        if name == "Q8_0":
            blocks = flat.reshape(-1, 34)
            codes = np.ascontiguousarray(blocks[:, 2:]).view(np.int8)
            scale = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)

            def bound(codes=codes, scale=scale):
                out = np.empty((codes.shape[0], 32), np.float32)
                np.copyto(out, codes, casting="unsafe")  # widen
                out *= scale  # one scale per block
                return out
        else:
            h = flat.view("<u2")

            def bound(h=h):
                out = np.empty(h.size, np.float32)
                np.left_shift(h, 16, out=out.view(np.uint32), dtype=np.uint32)  # widen
                return out

        ours, theirs = _race_dequant(raw, name, x.shape, repeat)
        b = _median(bound, repeat, time.process_time)
        rep.row([name, theirs * 1e3, ours * 1e3, b * 1e3, theirs / ours, theirs / b, theirs / 3e-3])


def _peak_extra(fn: Callable[[], np.ndarray]) -> tuple[int, int]:
    """(peak bytes traced during fn beyond what was live before it, output bytes)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, out.nbytes


def bench_memory(shapes, types, rep: Report) -> None:
    rep.header(
        "peak extra memory beyond input and output (tracemalloc, MiB)",
        [
            "type",
            "op",
            "elements",
            "input MiB",
            "output MiB",
            "extra MiB",
            "first-call MiB",
            "target",
        ],
    )
    mib = 1024 * 1024
    rng = np.random.default_rng(1)
    for rows, cols in shapes:
        x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)
        for name in types:
            if not Q.info(name).can_quantize:
                continue
            im = np.ones(cols, np.float32) if Q.info(name).requires_imatrix else None
            # a first call may build lookup tables the codec then keeps (IQ grids);
            # that one-time cost is shown apart from the per-call figure
            tables, _ = _peak_extra(lambda: Q.quantize(x[:1], name, im))  # noqa: B023
            peak, outb = _peak_extra(lambda: Q.quantize(x, name, im))  # noqa: B023
            extra = (peak - outb) / mib
            rep.row([name, "quantize", f"{x.size:,}", x.nbytes / mib, outb / mib, extra,
                     tables / mib, "ok" if extra <= 64 else "over 64"])  # fmt: skip
            raw = Q.quantize(x, name, im)
            peak, outb = _peak_extra(lambda: Q.dequantize(raw, name, x.shape))  # noqa: B023
            extra = (peak - outb) / mib
            rep.row([name, "dequantize", f"{x.size:,}", raw.nbytes / mib, outb / mib, extra,
                     "-", "ok" if extra <= 64 else "over 64"])  # fmt: skip


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--section",
        action="append",
        choices=["dequant", "quant", "ggml", "workers", "memory", "floor"],
    )
    ap.add_argument("--types", help="comma-separated subset of the types to run")
    ap.add_argument("--memory-shapes", default="2048x4096,8192x4096")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument(
        "--isolate",
        action="store_true",
        help="workers section on a shared Linux machine (root): SCHED_FIFO, other cores held "
        "during 1-worker runs",
    )
    args = ap.parse_args()
    sections = args.section or ["dequant", "quant", "ggml", "workers", "memory"]
    keep = set(args.types.upper().split(",")) if args.types else None

    def pick(types: list[str]) -> list[str]:
        return [t for t in types if keep is None or t in keep]

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = (rng.random(args.cols) + 0.1).astype(np.float32)
    rep = Report(args.markdown)
    print(f"numpy {np.__version__}; median of {args.repeat} interleaved runs")
    if "dequant" in sections:
        bench_dequant(x, im, pick(DEQUANT_TYPES), args.repeat, rep)
    if "quant" in sections:
        bench_quant(x, pick(QUANT_GGUF_TYPES), args.repeat, rep)
    if "ggml" in sections:
        bench_ggml(x, im, pick(QUANT_GGML_TYPES), args.repeat, rep)
    if "workers" in sections:
        if args.isolate:
            global _ISOLATION
            _ISOLATION = _Isolation()
        xw = np.repeat(x, max(1, 1024 // args.rows), axis=0)
        # --types picks any quantizable types here (e.g. all five legacy ones)
        wtypes = args.types.upper().split(",") if args.types else WORKER_TYPES
        bench_workers(xw, wtypes, args.repeat, args.workers, rep)
        if keep is None:
            bench_workers_file(max(3, args.repeat // 2), args.workers, "Q4_K_M", rep)
    if "floor" in sections:
        bench_floor(x, args.repeat, rep)
    if "memory" in sections:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.memory_shapes.split(",")]
        bench_memory(shapes, pick(MEMORY_TYPES), rep)


if __name__ == "__main__":
    main()
