"""Q2_K / Q4_K / Q5_K quantize and dequantize: weightsmith vs ggml's C reference.

Same matrix, one process, single thread; prints the median of several runs
and the ratio (>1 means weightsmith is faster).  ggml is called through
tests/ggml_ref.py (``ggml_quantize_chunk`` and the type's ``to_float``).

    python benchmarks/bench_kquants.py [--rows 1024] [--cols 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import ggml_ref
from weightsmith.quant import kquants


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--types", default="Q4_K,Q5_K,Q2_K")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = rng.random(args.cols).astype(np.float32) + np.float32(0.1)
    n = x.size
    print(f"matrix {args.rows}x{args.cols} f32, median of {args.repeat} runs, Melem/s")
    print(f"{'type':6} {'op':14} {'weightsmith':>12} {'ggml C':>10} {'ratio':>7}")
    for name in args.types.split(","):
        for label, imat in (("quantize", None), ("quantize+imat", im)):
            ours = _median_time(lambda: kquants.QUANTIZE[name](x, imat), args.repeat)  # noqa: B023
            ref = _median_time(lambda: ggml_ref.quantize(x, name, imat), args.repeat)  # noqa: B023
            assert np.array_equal(kquants.QUANTIZE[name](x, imat), ggml_ref.quantize(x, name, imat))
            print(
                f"{name:6} {label:14} {n / ours / 1e6:12.1f} {n / ref / 1e6:10.1f} {ref / ours:7.2f}"
            )
        raw = ggml_ref.quantize(x, name)
        blocks = raw.reshape(-1, ggml_ref.row_size(name, 256))
        ours = _median_time(lambda: kquants.DEQUANTIZE[name](blocks), args.repeat)  # noqa: B023
        ref = _median_time(lambda: ggml_ref.dequantize(raw, name, n), args.repeat)  # noqa: B023
        print(
            f"{name:6} {'dequantize':14} {n / ours / 1e6:12.1f} {n / ref / 1e6:10.1f} {ref / ours:7.2f}"
        )


if __name__ == "__main__":
    main()
