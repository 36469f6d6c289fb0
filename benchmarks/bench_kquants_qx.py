"""Q3_K / Q6_K quantize and dequantize: weightsmith vs ggml's C reference (and gguf-py).

Same matrix, one process, single thread.  The contenders run interleaved
(ours, ggml, ours, ggml, ...) so load from other processes hits both alike;
prints the median of the runs and the ratio (>1 means weightsmith is faster).
ggml is called through tests/ggml_ref.py (``ggml_quantize_chunk`` and the
type's ``to_float``); gguf-py's numpy ``dequantize`` is the dequantize anchor.

    python benchmarks/bench_kquants_qx.py [--rows 256] [--cols 4096] [--repeat 7]
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
import ggml_ref
from weightsmith.quant import kquants_qx


def _interleaved(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Median wall time of each function, running them in turn ``repeat`` times.

    With ``--best`` the minimum is used instead (the least disturbed run,
    useful on a shared machine).
    """
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = _CLOCK()
            fn()
            times[i].append(_CLOCK() - t0)
    return [_STAT(t) for t in times]


_STAT = statistics.median
_CLOCK = time.perf_counter


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--types", default="Q6_K,Q3_K")
    ap.add_argument("--best", action="store_true", help="report the fastest run, not the median")
    ap.add_argument(
        "--cpu", action="store_true", help="time with process CPU time (fairer on a shared box)"
    )
    args = ap.parse_args()
    global _STAT, _CLOCK
    if args.best:
        _STAT = min
    if args.cpu:
        _CLOCK = time.process_time
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = rng.random(args.cols).astype(np.float32) + np.float32(0.1)
    n = x.size
    stat = "best" if args.best else "median"
    clock = "CPU" if args.cpu else "wall"
    print(
        f"matrix {args.rows}x{args.cols} f32, {stat} {clock} time of {args.repeat} interleaved runs,"
        " Melem/s"
    )
    print(f"{'type':6} {'op':14} {'weightsmith':>12} {'anchor':>16} {'ratio':>7}")
    for name in args.types.split(","):
        quantize = kquants_qx.QUANTIZE[name]
        for label, imat in (("quantize", None), ("quantize+imat", im)):
            assert np.array_equal(quantize(x, imat), ggml_ref.quantize(x, name, imat))
            ours, ref = _interleaved(
                [lambda: quantize(x, imat), lambda: ggml_ref.quantize(x, name, imat)],  # noqa: B023
                args.repeat,
            )
            print(
                f"{name:6} {label:14} {n / ours / 1e6:12.1f} {n / ref / 1e6:10.1f} ggml {ref / ours:7.2f}"
            )
        raw = ggml_ref.quantize(x, name)
        blocks = raw.reshape(-1, ggml_ref.row_size(name, 256))
        qtype = GGMLQuantizationType[name]
        ours, ref, gg = _interleaved(
            [
                lambda: kquants_qx.DEQUANTIZE[name](blocks),  # noqa: B023
                lambda: ggml_ref.dequantize(raw, name, n),  # noqa: B023
                lambda: gguf_dequantize(raw, qtype),  # noqa: B023
            ],
            args.repeat,
        )
        for anchor, t in (("ggml", ref), ("gguf-py", gg)):
            print(
                f"{name:6} {'dequantize':14} {n / ours / 1e6:12.1f} {n / t / 1e6:10.1f} {anchor:5} {t / ours:7.2f}"
            )


if __name__ == "__main__":
    main()
