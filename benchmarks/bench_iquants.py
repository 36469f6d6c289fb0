"""IQ family speed: weightsmith vs ggml's C reference and gguf-py.

* quantize IQ4_NL / IQ4_XS (with and without an imatrix) against ggml's
  ``ggml_quantize_chunk`` (single thread, through tests/support/ggml_ref.py), and the
  grid-search quantizers (IQ3_*, IQ2_*, IQ1_*) on a smaller matrix
  (``--grid-rows``; ggml's one-time table set-up is done before timing);
* dequantize every IQ type against gguf-py's numpy ``gguf.quants.dequantize``
  (the acceptance anchor) and, for reference, ggml's ``to_float``.

Same data, one process; medians of several runs; ratio > 1 means weightsmith
is faster.  Dequantization runs on random blocks with finite scales (speed
does not depend on the content).

    python benchmarks/bench_iquants.py [--rows 512] [--cols 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from support import ggml_ref
from support.iq_blocks import random_iq_blocks
from weightsmith.dtypes import ggml_type
from weightsmith.quant import iquants

NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ1_S"}
GRID_TYPES = ("IQ3_XXS", "IQ3_S", "IQ2_S", "IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M")
DEQ_TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS"]


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_quantize(x: np.ndarray, im: np.ndarray, repeat: int, names: tuple[str, ...]) -> None:
    n = x.size
    print(f"{'type':8} {'op':14} {'weightsmith':>12} {'ggml C':>10} {'ratio':>7}")
    for name in names:
        paths = (("quantize", None), ("quantize+imat", im))
        if name in NEEDS_IMATRIX:
            paths = paths[1:]
        for label, imat in paths:
            fn = iquants.QUANTIZE[name]
            assert np.array_equal(fn(x, imat), ggml_ref.quantize(x, name, imat))
            ours = _median_time(lambda: fn(x, imat), repeat)  # noqa: B023
            ref = _median_time(lambda: ggml_ref.quantize(x, name, imat), repeat)  # noqa: B023
            print(
                f"{name:8} {label:14} {n / ours / 1e6:12.1f} {n / ref / 1e6:10.1f} {ref / ours:7.2f}"
            )


def bench_dequantize(n: int, repeat: int) -> None:
    rng = np.random.default_rng(1)
    print(
        f"{'type':8} {'weightsmith':>12} {'gguf-py':>10} {'ratio':>7} {'ggml C':>10} {'ratio':>7}"
    )
    for name in DEQ_TYPES:
        bs = ggml_type(name).block_size
        raw = random_iq_blocks(name, n // bs, rng, 0.01)
        fn = iquants.DEQUANTIZE[name]
        qt = GGMLQuantizationType[name]
        ours_y = fn(raw).reshape(-1)
        assert np.array_equal(
            ours_y.view(np.uint32), gguf_dequantize(raw, qt).reshape(-1).view(np.uint32)
        )
        ours = _median_time(lambda: fn(raw), repeat)  # noqa: B023
        gg = _median_time(lambda: gguf_dequantize(raw, qt), repeat)  # noqa: B023
        c = _median_time(lambda: ggml_ref.dequantize(raw, name, n), repeat)  # noqa: B023
        print(
            f"{name:8} {n / ours / 1e6:12.1f} {n / gg / 1e6:10.1f} {gg / ours:7.2f}"
            f" {n / c / 1e6:10.1f} {c / ours:7.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--grid-rows", type=int, default=32)
    ap.add_argument("--skip-quantize", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = rng.random(args.cols).astype(np.float32) + np.float32(0.1)
    print(
        f"matrix {args.rows}x{args.cols} f32, median of {args.repeat} runs, Melem/s, single thread"
    )
    if not args.skip_quantize:
        bench_quantize(x, im, args.repeat, ("IQ4_NL", "IQ4_XS"))
        xg = x[: args.grid_rows]
        print(f"grid-search types on {xg.shape[0]}x{xg.shape[1]}:")
        bench_quantize(xg, im, max(1, args.repeat // 2), GRID_TYPES)
    bench_dequantize(x.size, args.repeat)


if __name__ == "__main__":
    main()
