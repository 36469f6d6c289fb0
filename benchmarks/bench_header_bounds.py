"""Peak memory of opening big (~95 MB) safetensors headers of tiny tensors.

``PYTHONPATH=src python benchmarks/bench_header_bounds.py [--n 1250000]``
``PYTHONPATH=src python benchmarks/bench_header_bounds.py --cost [--n 300000]``

Each file is opened by tests/support/reliability_child.py (safe_open, then every
tensor) with a 4 GiB budget; one line per case: error, time, peak address
space over the child's baseline, and the ratio to the file's size.
``--cost``: what validating a *valid* big header costs, in CPU time, read
from the file a window at a time (``read_header``, what safe_open does for
a header over 4 MiB) and in memory (``parse_header``), median of 3: one
line per form.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = Path(__file__).resolve().parents[1] / "tests" / "support" / "reliability_child.py"


def header(n: int, style: str, shuffle: bool) -> bytes:
    if style == "spaced":
        fmt = '"t{i:07d}": {{"dtype": "U8", "shape": [1], "data_offsets": [{i}, {j}]}}'
    elif style == "escaped":
        fmt = '"\\u0041{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}'
    else:
        fmt = '"t{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}'
    items = [fmt.format(i=i, j=i + 1) for i in range(n)]
    if shuffle:
        random.Random(0).shuffle(items)
    return ("{" + ("," if style != "spaced" else ", ").join(items) + "}").encode()


def cost(n: int) -> None:
    import os
    import time

    from weightsmith.safetensors import parse_header, read_header

    for style, shuffle in (
        ("compact", False),
        ("spaced", False),
        ("escaped", False),
        ("compact", True),
    ):
        h = header(n, style, shuffle)
        size = 8 + len(h) + n
        with tempfile.TemporaryFile() as f:
            f.write(len(h).to_bytes(8, "little") + h)
            f.flush()
            streamed, whole = [], []
            for _ in range(3):
                t = time.process_time()
                read_header(f.fileno(), len(h), size)
                streamed.append(time.process_time() - t)
                t = time.process_time()
                parse_header(h, size)
                whole.append(time.process_time() - t)
        a, b = sorted(streamed)[1], sorted(whole)[1]
        label = style + (", names shuffled" if shuffle else "")
        print(
            f"{label}, valid, {n} tensors ({len(h) >> 20} MiB): read_header {a:.3f} s / "
            f"parse_header {b:.3f} s CPU ({len(h) / b / 1e6:.0f} MB/s), cpus {os.cpu_count()}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--cost", action="store_true")
    args = ap.parse_args()
    if args.cost:
        cost(args.n or 300_000)
        return
    n = args.n or 1_250_000
    cases = [
        ("compact, data 5 bytes short", "compact", False, 5),
        ("compact, names shuffled, data 5 bytes short", "compact", True, 5),
        ("spaced (json.dumps), data 5 bytes short", "spaced", False, 5),
        ("escaped names, data 5 bytes short", "escaped", False, 5),
        ("spaced, valid", "spaced", False, 0),
        ("escaped names, valid", "escaped", False, 0),
    ]
    with tempfile.TemporaryDirectory() as d:
        for label, style, shuffle, short in cases:
            h = header(n, style, shuffle)
            p = Path(d) / "case.safetensors"
            p.write_bytes(len(h).to_bytes(8, "little") + h + bytes(n - short))
            del h
            size = p.stat().st_size
            out = subprocess.run(
                [sys.executable, str(CHILD), str(4 << 30), "120", "safetensors", str(p)],
                capture_output=True,
                text=True,
            )
            r = json.loads(out.stdout.splitlines()[-1])
            print(
                f"{label}: {r['error']} in {r['seconds']:.2f} s, peak +{r['peak_extra'] >> 20} MiB,"
                f" file {size >> 20} MiB, ratio {r['peak_extra'] / size:.2f}"
            )


if __name__ == "__main__":
    main()
