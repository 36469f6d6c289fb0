"""The K-quants (Q2_K..Q6_K): weightsmith vs ggml's C reference (quantize) and gguf-py / ggml (dequantize).

Same matrix, one process, single thread.  The contenders run interleaved
(ours, anchor, ours, anchor, ...) so that load from other processes hits both
alike; the median (or, with ``--best``, the fastest) run is reported with the
ratio anchor_time / our_time (>1 means weightsmith is faster).  Quantize is
compared with ``ggml_quantize_chunk`` through tests/support/ggml_ref.py, with and
without an importance matrix; dequantize with gguf-py's numpy ``dequantize``
(the issue's anchor) and ggml's ``to_float``.

    python benchmarks/bench_kquants.py [--rows 256] [--cols 4096] [--repeat 7]
        [--types Q2_K,Q3_K,Q4_K,Q5_K,Q6_K] [--cpu] [--best]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import ggml_ref
from weightsmith.quant import kquants

_CLOCK: Callable[[], float] = time.perf_counter
_STAT: Callable[[list[float]], float] = statistics.median


def _interleaved(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Time each function ``repeat`` times, taking turns; one statistic each."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = _CLOCK()
            fn()
            times[i].append(_CLOCK() - t0)
    return [_STAT(t) for t in times]


def main() -> None:
    global _CLOCK, _STAT
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--types", default="Q2_K,Q3_K,Q4_K,Q5_K,Q6_K")
    ap.add_argument("--best", action="store_true", help="report the fastest run, not the median")
    ap.add_argument("--cpu", action="store_true", help="time with thread CPU time (shared box)")
    args = ap.parse_args()
    if args.best:
        _STAT = min
    if args.cpu:
        _CLOCK = time.thread_time
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = rng.random(args.cols).astype(np.float32) + np.float32(0.1)
    n = x.size
    print(
        f"matrix {args.rows}x{args.cols} f32, {'best' if args.best else 'median'} "
        f"{'CPU' if args.cpu else 'wall'} time of {args.repeat} interleaved runs, Melem/s"
    )
    print(f"{'type':6} {'op':14} {'weightsmith':>12} {'anchor':>18} {'ratio':>7}")
    for name in args.types.split(","):
        quantize = kquants.QUANTIZE[name]
        for label, imat in (("quantize", None), ("quantize+imat", im)):
            assert np.array_equal(quantize(x, imat), ggml_ref.quantize(x, name, imat))
            ours, ref = _interleaved(
                [lambda: quantize(x, imat), lambda: ggml_ref.quantize(x, name, imat)],  # noqa: B023
                args.repeat,
            )
            print(
                f"{name:6} {label:14} {n / ours / 1e6:12.1f} {n / ref / 1e6:10.1f} (ggml)   "
                f"{ref / ours:7.2f}"
            )
        raw = ggml_ref.quantize(x, name)
        blocks = raw.reshape(-1, ggml_ref.row_size(name, 256))
        qtype = GGMLQuantizationType[name]
        dequantize = kquants.DEQUANTIZE[name]
        assert np.array_equal(
            dequantize(blocks).reshape(-1), gguf_dequantize(raw, qtype).reshape(-1)
        )
        ours, gg, ref = _interleaved(
            [
                lambda: dequantize(blocks),  # noqa: B023
                lambda: gguf_dequantize(raw, qtype),  # noqa: B023
                lambda: ggml_ref.dequantize(raw, name, n),  # noqa: B023
            ],
            args.repeat,
        )
        for anchor, t in (("gguf-py", gg), ("ggml", ref)):
            print(
                f"{name:6} {'dequantize':14} {n / ours / 1e6:12.1f} {n / t / 1e6:10.1f} "
                f"({anchor}){' ' * (7 - len(anchor))}{t / ours:7.2f}"
            )


if __name__ == "__main__":
    main()
