"""IQ family speed: the compiled codecs against ggml's C reference, one thread.

* quantize every IQ type, with and without an importance matrix (IQ2_XXS,
  IQ2_XS and IQ1_S only with one, as ggml), against ``ggml_quantize_chunk``
  (tests/support/ggml_ref.py).  IQ4_NL/IQ4_XS run on the full matrix, the grid-search
  types on its first ``--grid-rows`` rows (they are ~100x slower, in ggml too);
* dequantize every IQ type against ggml's ``to_float``, both writing into a
  preallocated float32 buffer.

Same data, one process, one thread.  Each run times ours and ggml's back to
back (CPU time, ``time.process_time``, so that other processes on a shared
machine count less); the ratio printed is the median over runs of ggml's
time / ours (> 1: weightsmith is faster).  Both outputs are checked to be
identical first.  The one-time set-up (our neighbour tables, ggml's
``ggml_quantize_init``) is done before timing; ours is printed.

    python benchmarks/bench_iquants.py [--rows 256] [--cols 4096] [--grid-rows 32] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import ggml_ref
from support.iq_blocks import random_iq_blocks
from weightsmith.dtypes import ggml_type
from weightsmith.quant import iquants

NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ1_S"}
FAST_TYPES = ("IQ4_NL", "IQ4_XS")
GRID_TYPES = ("IQ3_XXS", "IQ3_S", "IQ2_S", "IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M")
DEQ_TYPES = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS")


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _paired(ours, ref, repeat: int) -> tuple[float, float]:
    """(median seconds of ours, median over runs of ref time / our time)."""
    mine, ratios = [], []
    for _ in range(repeat):
        a, b = _cpu(ours), _cpu(ref)
        mine.append(a)
        ratios.append(b / a)
    return statistics.median(mine), statistics.median(ratios)


def bench_quantize(x: np.ndarray, im: np.ndarray, repeat: int, names: tuple[str, ...]) -> None:
    n = x.size
    for name in names:
        fn = iquants.QUANTIZE[name]
        t0 = time.perf_counter()
        first = fn(x[:1], im)  # builds our neighbour tables (once per process)
        setup = time.perf_counter() - t0
        del first
        paths = ((im, "imatrix"),) if name in NEEDS_IMATRIX else ((None, "plain"), (im, "imatrix"))
        for imat, label in paths:
            assert np.array_equal(fn(x, imat), ggml_ref.quantize(x, name, imat)), name

            def ours(fn=fn, imat=imat) -> None:
                fn(x, imat)

            def ref(name=name, imat=imat) -> None:
                ggml_ref.quantize(x, name, imat)

            ours_s, ratio = _paired(ours, ref, repeat)
            print(
                f"quantize   {name:8} {label:8} {n / ours_s / 1e6:9.2f} Melem/s  x{ratio:5.2f} ggml"
                f"   (first call incl. tables {setup * 1e3:.0f} ms)"
            )


def bench_dequantize(n: int, repeat: int) -> None:
    rng = np.random.default_rng(1)
    for name in DEQ_TYPES:
        t = ggml_type(name)
        raw = random_iq_blocks(name, n // t.block_size, rng, 0.01)
        ours_out = np.empty((n // t.block_size, t.block_size), dtype=np.float32)
        ref_out = np.empty(n, dtype=np.float32)
        to_float = ggml_ref._TO_FLOAT(ggml_ref.lib().ggml_get_type_traits(t.id).contents.to_float)
        fn = iquants.DEQUANTIZE[name]

        def ours(fn=fn, raw=raw, out=ours_out) -> None:
            fn(raw, out=out)

        def ref(tf=to_float, raw=raw, out=ref_out) -> None:
            tf(raw.ctypes.data, out.ctypes.data, n)

        ours()
        ref()
        assert np.array_equal(ours_out.reshape(-1).view(np.uint32), ref_out.view(np.uint32))
        sec, ratio = _paired(ours, ref, repeat)
        print(f"dequantize {name:8}          {n / sec / 1e6:9.0f} Melem/s  x{ratio:5.2f} to_float")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--grid-rows", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--skip-quantize", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    im = rng.random(args.cols).astype(np.float32) + np.float32(0.1)
    print(
        f"f32 matrix {args.rows}x{args.cols} (grid types: first {args.grid_rows} rows),"
        f" median over {args.repeat} paired runs, one thread, CPU time"
    )
    if not args.skip_quantize:
        bench_quantize(x, im, args.repeat, FAST_TYPES)
        bench_quantize(np.ascontiguousarray(x[: args.grid_rows]), im, args.repeat, GRID_TYPES)
    bench_dequantize(x.size, args.repeat)


if __name__ == "__main__":
    main()
