"""HF -> GGUF: weightsmith.convert.hf_to_gguf vs llama.cpp's convert_hf_to_gguf.py (+ llama-quantize).

Models (``--family``): ``dense`` is tests/support/hf_models.big_llama (6 layers, hidden
512, FFN 8192, bf16; 144 MiB on disk, largest tensor 16 MiB in f32); ``moe`` is
tests/support/hf_models.big_moe (Mixtral layout, 2 layers, 32 experts of 512 x 1024, bf16;
each stacked expert tensor is 32x the largest source tensor).  For each type, both sides run
in a fresh child
process (so both pay their imports; the reference also imports torch), alternating,
median of ``--runs``; the child also reports its peak RSS.  For the llama-quantize
file types the reference time is convert (f32) + llama_model_quantize.

    python benchmarks/bench_convert.py [--runs 3] [--types f16,q8_0,q4_k_m] [--family moe]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.hf_models import big_llama, big_moe, peak_rss
from support.llama_sdist import llama_cpp_root

REF_CHILD = r"""
import ctypes, os, resource, runpy, sys, json
script, src, dst, typ = sys.argv[1:5]
sys.path.insert(0, os.path.dirname(script))
outtype = typ if typ in ("f32", "f16", "bf16", "q8_0") else "f32"
tmp = dst if outtype == typ else dst + ".f32"
sys.argv = [script, src, "--outfile", tmp, "--outtype", outtype]
runpy.run_path(script, run_name="__main__")
if tmp != dst:
    import llama_cpp
    from weightsmith.quant.recipes import file_type
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = 2
    p.ftype = file_type(typ).id
    assert llama_cpp.llama_model_quantize(tmp.encode(), dst.encode(), ctypes.byref(p)) == 0
    os.unlink(tmp)
print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_ref(src: Path, dst: Path, typ: str) -> tuple[float, int]:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", REF_CHILD, script, str(src), str(dst), typ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    dt = time.perf_counter() - t
    return dt, json.loads(r.stdout.strip().splitlines()[-1])["peak"]


def run_ours(src: Path, dst: Path, typ: str, workers: int) -> tuple[float, int]:
    t = time.perf_counter()
    r = peak_rss(src, dst, typ, workers)
    return time.perf_counter() - t, r["peak"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--types", default="f16,q8_0,q4_k_m")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--family", choices=("dense", "moe"), default="dense")
    a = ap.parse_args()
    MiB = 2**20
    build = {"dense": big_llama, "moe": big_moe}[a.family]
    with tempfile.TemporaryDirectory(prefix="bench_convert_") as tmp:
        folder, largest = build(Path(tmp) / "m")
        print(f"model: largest tensor {4 * largest / MiB:.0f} MiB in f32; "
              f"bound 3x + 256 MiB = {(12 * largest) / MiB + 256:.0f} MiB")  # fmt: skip
        print(f"{'type':<8} {'ours s':>8} {'ref s':>8} {'ratio':>6} {'ours MiB':>9} {'ref MiB':>8}")
        for typ in a.types.split(","):
            ours_t, ref_t, ours_m, ref_m = [], [], [], []
            for _ in range(a.runs):
                t, m = run_ours(folder, Path(tmp) / "o.gguf", typ, a.workers)
                ours_t.append(t)
                ours_m.append(m)
                t, m = run_ref(folder, Path(tmp) / "r.gguf", typ)
                ref_t.append(t)
                ref_m.append(m)
            mo, mr = statistics.median(ours_t), statistics.median(ref_t)
            print(f"{typ:<8} {mo:8.2f} {mr:8.2f} {mr / mo:6.2f} {max(ours_m) / MiB:9.0f} "
                  f"{max(ref_m) / MiB:8.0f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
