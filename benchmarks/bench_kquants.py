"""Native core, K-quants: weightsmith's C kernels vs ggml's C reference, one thread.

Same matrix, one process.  Quantize (Q2_K..Q6_K, with and without an
importance matrix) is compared with ``ggml_quantize_chunk``, dequantize with
the type's ``to_float``, both from llama-cpp-python's libggml-base (see
tests/support/ggml_ref.py).  Both sides write into preallocated outputs where they can;
ours go through the public registry entries (``kquants.QUANTIZE[name]``
allocates its result, ``DEQUANTIZE[name](blocks, out=...)`` fills one).
Every pair is checked byte-for-byte before it is timed.

The contenders run interleaved (ours, ggml, ours, ggml, ...) so that load from
other processes hits both alike; the median of ``--repeat`` runs is reported
with the ratio ggml_time / our_time (>1 means weightsmith is faster).  The
machine is shared: repeat the whole script and take medians of the ratios.

    python benchmarks/bench_kquants.py [--rows 256] [--cols 4096] [--repeat 7]
        [--types Q2_K,Q3_K,Q4_K,Q5_K,Q6_K] [--cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import ggml_ref
from weightsmith.dtypes import ggml_type
from weightsmith.quant import kquants

_CLOCK: Callable[[], float] = time.perf_counter


def _interleaved(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Time each function ``repeat`` times, taking turns; the median of each."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = _CLOCK()
            fn()
            times[i].append(_CLOCK() - t0)
    return [statistics.median(t) for t in times]


def _ggml_quantizer(name: str, x: np.ndarray, im: np.ndarray | None) -> Callable[[], np.ndarray]:
    """ggml_quantize_chunk over all rows of ``x`` into one preallocated buffer."""
    lib = ggml_ref.lib()
    tid = ggml_type(name).id
    lib.ggml_quantize_init(tid)
    nrows, n = x.shape
    out = np.empty((nrows, ggml_ref.row_size(name, n)), dtype=np.uint8)
    args = (
        tid,
        x.ctypes.data,
        out.ctypes.data,
        0,
        nrows,
        n,
        None if im is None else im.ctypes.data,
    )

    def run() -> np.ndarray:
        lib.ggml_quantize_chunk(*args)
        return out

    return run


def _ggml_to_float(name: str, raw: np.ndarray, n: int) -> Callable[[], np.ndarray]:
    """The type's to_float into one preallocated float32 buffer."""
    traits = ggml_ref.lib().ggml_get_type_traits(ggml_type(name).id).contents
    to_float = ggml_ref._TO_FLOAT(traits.to_float)
    out = np.empty(n, dtype=np.float32)

    def run() -> np.ndarray:
        to_float(raw.ctypes.data, out.ctypes.data, n)
        return out

    return run


def main() -> None:
    global _CLOCK
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--types", default="Q2_K,Q3_K,Q4_K,Q5_K,Q6_K")
    ap.add_argument("--cpu", action="store_true", help="time with thread CPU time (shared box)")
    args = ap.parse_args()
    if args.cpu:
        _CLOCK = time.thread_time
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = rng.random(args.cols).astype(np.float32) + np.float32(0.1)
    n = x.size
    print(
        f"matrix {args.rows}x{args.cols} f32, one thread, median "
        f"{'CPU' if args.cpu else 'wall'} time of {args.repeat} interleaved runs, Melem/s"
    )
    print(f"{'type':6} {'op':14} {'weightsmith':>12} {'ggml':>10} {'ratio':>7}")
    for name in args.types.split(","):
        quantize = kquants.QUANTIZE[name]
        for label, imat in (("quantize", None), ("quantize+imat", im)):
            ref = _ggml_quantizer(name, x, imat)
            assert np.array_equal(quantize(x, imat), ref()), f"{name} {label} differs from ggml"
            ours, theirs = _interleaved([lambda: quantize(x, imat), ref], args.repeat)  # noqa: B023
            print(
                f"{name:6} {label:14} {n / ours / 1e6:12.1f} {n / theirs / 1e6:10.1f} "
                f"{theirs / ours:7.2f}"
            )
        raw = _ggml_quantizer(name, x, None)().copy()
        blocks = raw.reshape(-1, ggml_type(name).type_size)
        dequantize = kquants.DEQUANTIZE[name]
        buf = np.empty((blocks.shape[0], 256), dtype=np.float32)
        ref = _ggml_to_float(name, raw, n)
        got = dequantize(blocks, out=buf).reshape(-1)
        assert np.array_equal(got.view(np.uint32), ref().view(np.uint32)), f"{name} decode differs"
        ours, theirs = _interleaved([lambda: dequantize(blocks, out=buf), ref], args.repeat)  # noqa: B023
        print(
            f"{name:6} {'dequantize':14} {n / ours / 1e6:12.1f} {n / theirs / 1e6:10.1f} "
            f"{theirs / ours:7.2f}"
        )


if __name__ == "__main__":
    main()
