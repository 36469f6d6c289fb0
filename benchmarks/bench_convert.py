"""HF -> GGUF: weightsmith.convert.hf_to_gguf vs llama.cpp's convert_hf_to_gguf.py (+ llama-quantize);
with ``--quantize-threads``, also GGUF f16 -> q4_k_m: quantize_file vs llama_model_quantize.

Models (``--family``): ``dense`` is tests/support/hf_models.big_llama (6 layers, hidden
512, FFN 8192, bf16; 144 MiB on disk, largest tensor 16 MiB in f32); ``moe`` is
tests/support/hf_models.big_moe (Mixtral layout, 2 layers, 32 experts of 512 x 1024, bf16;
each stacked expert tensor is 32x the largest source tensor); ``gemma3-270m`` is
tests/support/hf_models.gemma3_270m (Gemma 3 270M's shapes and config, 268M parameters,
random bf16 weights, 512 MiB); ``mla`` is tests/support/hf_models.big_mla (DeepSeek-V3
layout: MLA attention, a dense first layer, 2 MoE layers of 16 experts of 512 x 1024 and a
shared expert, GPT-2's vocabulary, bf16, ~230 MiB); ``mla-fp8`` the same stored as
DeepSeek-V3's FP8 checkpoints (decoder linear weights float8_e4m3fn with 128 x 128 block
scales, dequantized on read).  For each type, both sides run in a fresh child process (so
both pay their imports; the reference also imports torch), alternating, median of
``--runs``; the child also reports its peak RSS, and the CPU time of the children
(``RUSAGE_CHILDREN``) is reported beside the wall clock, the figure to read on a shared box.
For the llama-quantize file types the reference is convert (``--ref-outtype``, f32 by
default) + llama_model_quantize with ``--workers`` threads.

``--quantize-threads 1,2``: the end-to-end quantize target.  The source is the reference
converter's f16 GGUF of the model (a real-shaped f16 file); ``weightsmith quantize``'s
library call (quantize_file, ``workers=n``) vs llama_model_quantize (``nthread=n``) to
q4_k_m, each in a fresh child, same thread count.

    python benchmarks/bench_convert.py [--runs 3] [--types f16,q8_0,q4_k_m] [--family moe]
    python benchmarks/bench_convert.py --family gemma3-270m --types q4_k_m --ref-outtype f16 \\
        --quantize-threads 1,2
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.hf_models import big_llama, big_mla, big_moe, gemma3_270m, peak_rss
from support.llama_sdist import llama_cpp_root

REF_CHILD = r"""
import ctypes, os, resource, runpy, sys, json
script, src, dst, typ, inter, threads = sys.argv[1:7]
sys.path.insert(0, os.path.dirname(script))
outtype = typ if typ in ("f32", "f16", "bf16", "q8_0") else inter
tmp = dst if outtype == typ else dst + "." + inter
sys.argv = [script, src, "--outfile", tmp, "--outtype", outtype]
runpy.run_path(script, run_name="__main__")
if tmp != dst:
    import llama_cpp
    from weightsmith.quant.recipes import file_type
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = int(threads)
    p.ftype = file_type(typ).id
    assert llama_cpp.llama_model_quantize(tmp.encode(), dst.encode(), ctypes.byref(p)) == 0
    os.unlink(tmp)
print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


QUANT_REF_CHILD = r"""
import ctypes, sys, llama_cpp
from weightsmith.quant.recipes import file_type
src, dst, typ, threads = sys.argv[1:5]
p = llama_cpp.llama_model_quantize_default_params()
p.nthread = int(threads)
p.ftype = file_type(typ).id
assert llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0
"""
QUANT_OURS_CHILD = r"""
import sys
from weightsmith.quant.file import quantize_file
src, dst, typ, threads = sys.argv[1:5]
quantize_file(src, dst, typ, workers=int(threads))
"""


def _timed(fn) -> tuple[float, float, object]:
    """Wall and CPU seconds (this process's children) of ``fn()``, and its result."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = fn()
    dt = time.perf_counter() - t
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, r


def run_ref(src: Path, dst: Path, typ: str, inter: str, threads: int) -> tuple[float, float, int]:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    args = [sys.executable, "-c", REF_CHILD, script, str(src), str(dst), typ, inter, str(threads)]
    dt, cpu, r = _timed(lambda: subprocess.run(args, capture_output=True, text=True, check=True))
    return dt, cpu, json.loads(r.stdout.strip().splitlines()[-1])["peak"]


def run_ours(src: Path, dst: Path, typ: str, workers: int) -> tuple[float, float, int]:
    dt, cpu, r = _timed(lambda: peak_rss(src, dst, typ, workers))
    return dt, cpu, r["peak"]


def run_quantize(child: str, src: Path, dst: Path, threads: int) -> tuple[float, float]:
    args = [sys.executable, "-c", child, str(src), str(dst), "q4_k_m", str(threads)]
    dt, cpu, _ = _timed(lambda: subprocess.run(args, capture_output=True, text=True, check=True))
    return dt, cpu


def bench_quantize(folder: Path, tmp: Path, threads: list[int], runs: int) -> None:
    """f16 GGUF -> q4_k_m, ours vs llama_model_quantize, same thread count."""
    src = tmp / "f16.gguf"
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    subprocess.run([sys.executable, script, str(folder), "--outfile", str(src), "--outtype",
                    "f16"], capture_output=True, check=True)  # fmt: skip
    print(f"\nquantize {src.stat().st_size / 2**20:.0f} MiB f16 GGUF -> q4_k_m "
          "(wall s / CPU s, medians)")  # fmt: skip
    print(f"{'threads':<8} {'ours':>13} {'llama':>13} {'ratio wall':>10} {'ratio CPU':>10}")
    for n in threads:
        ours, ref = [], []
        for _ in range(runs):
            ours.append(run_quantize(QUANT_OURS_CHILD, src, tmp / "qo.gguf", n))
            ref.append(run_quantize(QUANT_REF_CHILD, src, tmp / "qr.gguf", n))
        same = (tmp / "qo.gguf").read_bytes() == (tmp / "qr.gguf").read_bytes()
        ow, oc = (statistics.median(x[k] for x in ours) for k in (0, 1))
        rw, rc = (statistics.median(x[k] for x in ref) for k in (0, 1))
        print(f"{n:<8} {ow:6.2f} /{oc:6.2f} {rw:6.2f} /{rc:6.2f} {rw / ow:10.2f} {rc / oc:10.2f}"
              f"  byte-identical: {same}; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--types", default="f16,q8_0,q4_k_m")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--family", choices=("dense", "moe", "gemma3-270m", "mla", "mla-fp8"), default="dense"
    )
    ap.add_argument("--ref-outtype", choices=("f32", "f16"), default="f32")
    ap.add_argument("--quantize-threads", default="", help="e.g. 1,2: the quantize race too")
    a = ap.parse_args()
    MiB = 2**20
    build = {"dense": big_llama, "moe": big_moe, "gemma3-270m": gemma3_270m, "mla": big_mla,
             "mla-fp8": functools.partial(big_mla, fp8=True)}[a.family]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_convert_") as tmp:
        folder, largest = build(Path(tmp) / "m")
        print(f"model: largest tensor {4 * largest / MiB:.0f} MiB in f32; "
              f"bound 3x + 256 MiB = {(12 * largest) / MiB + 256:.0f} MiB")  # fmt: skip
        print(f"{'type':<8} {'ours s':>13} {'ref s':>13} {'ratio':>6} {'CPU ratio':>9} "
              f"{'ours MiB':>9} {'ref MiB':>8}   (s: wall / CPU, medians)")  # fmt: skip
        for typ in filter(None, a.types.split(",")):
            ours, ref = [], []
            for _ in range(a.runs):
                ours.append(run_ours(folder, Path(tmp) / "o.gguf", typ, a.workers))
                ref.append(run_ref(folder, Path(tmp) / "r.gguf", typ, a.ref_outtype, a.workers))
            ow, oc, rw, rc = (
                statistics.median(x[k] for x in xs) for xs in (ours, ref) for k in (0, 1)
            )
            same = (Path(tmp) / "o.gguf").read_bytes() == (Path(tmp) / "r.gguf").read_bytes()
            print(f"load average {os.getloadavg()[0]:.1f}; files byte-identical: {same}")
            print(f"{typ:<8} {ow:6.2f} /{oc:6.2f} {rw:6.2f} /{rc:6.2f} {rw / ow:6.2f} {rc / oc:9.2f} "
                  f"{max(x[2] for x in ours) / MiB:9.0f} {max(x[2] for x in ref) / MiB:8.0f}",
                  flush=True)  # fmt: skip
        if a.quantize_threads:
            threads = [int(n) for n in a.quantize_threads.split(",")]
            bench_quantize(folder, Path(tmp), threads, a.runs)


if __name__ == "__main__":
    main()
