"""GGUF -> HF folder: peak memory (and time) of weightsmith.convert.gguf_to_hf.

The file (written once into /tmp/gguf_to_hf-bench/) is a Llama-shaped Q8_0 GGUF
(TinyLlama widths: n_embd 2048, n_ff 5632, 32 heads, 4 KV heads, 32000 tokens,
``--layers`` blocks, random values; norms F32).  Its largest tensor, the
embedding, is 32000 x 2048 = 250 MiB in float32.

Each conversion runs in a fresh subprocess, which reports its peak resident set
(``VmHWM`` of /proc/self/status) after imports and at the end; the bound of the issue is
``3 x largest tensor in f32 + 256 MiB`` on the whole process.  The anchor is
transformers' own GGUF loading (``from_pretrained(gguf_file=...)``, which
dequantizes the whole model in RAM through gguf-py) followed by
writing its tensors with ``safetensors.torch.save_model`` (``save_pretrained`` refuses
GGUF-loaded models), on the same file and dtype.  Runs alternate; medians.

Run: python benchmarks/bench_gguf_to_hf.py [--runs N] [--layers N] [--no-anchor]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

BENCH_DIR = Path("/tmp/gguf_to_hf-bench")
N_EMBD, N_FF, N_HEAD, N_KV, N_VOCAB = 2048, 5632, 32, 4, 32000


def make_file(path: Path, layers: int) -> None:
    from weightsmith import quant
    from weightsmith.gguf import Writer

    rng = np.random.default_rng(0)
    hd = N_EMBD // N_HEAD
    shapes = {"token_embd.weight": (N_VOCAB, N_EMBD), "output_norm.weight": (N_EMBD,)}
    shapes["output.weight"] = (N_VOCAB, N_EMBD)
    for b in range(layers):
        p = f"blk.{b}."
        shapes |= {
            p + "attn_norm.weight": (N_EMBD,),
            p + "attn_q.weight": (N_EMBD, N_EMBD),
            p + "attn_k.weight": (N_KV * hd, N_EMBD),
            p + "attn_v.weight": (N_KV * hd, N_EMBD),
            p + "attn_output.weight": (N_EMBD, N_EMBD),
            p + "ffn_norm.weight": (N_EMBD,),
            p + "ffn_gate.weight": (N_FF, N_EMBD),
            p + "ffn_up.weight": (N_FF, N_EMBD),
            p + "ffn_down.weight": (N_EMBD, N_FF),
        }
    md = {
        "llama.block_count": (layers, "u32"),
        "llama.context_length": (2048, "u32"),
        "llama.embedding_length": (N_EMBD, "u32"),
        "llama.feed_forward_length": (N_FF, "u32"),
        "llama.attention.head_count": (N_HEAD, "u32"),
        "llama.attention.head_count_kv": (N_KV, "u32"),
        "llama.rope.freq_base": (10000.0, "f32"),
        "llama.attention.layer_norm_rms_epsilon": (1e-5, "f32"),
        "general.file_type": (7, "u32"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with Writer(path, arch="llama") as w:
        for k, (v, t) in md.items():
            w.add(k, v, t)
        for name, shp in shapes.items():
            w.add_tensor_info(name, "F32" if len(shp) == 1 else "Q8_0", shp)
        for name, shp in shapes.items():
            x = (rng.standard_normal(shp, dtype=np.float32) * 0.02).astype(np.float32)
            w.write_tensor(name, x if len(shp) == 1 else quant.quantize(x, "Q8_0"))


_CHILD = r"""
import json, sys, time
mode, src, dst, dtype = sys.argv[1:5]

def hwm_kib():
    # VmHWM belongs to this process image; ru_maxrss would carry the parent's peak over exec
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

import numpy, ml_dtypes
if mode == "ours":
    from weightsmith.convert import gguf_to_hf
else:
    import torch, transformers
rss0 = hwm_kib()
t = time.perf_counter()
if mode == "ours":
    gguf_to_hf(src, dst, dtype=dtype, tokenizer=False)
else:
    import os
    d = os.path.dirname(src)
    torch_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    m = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=os.path.basename(src), dtype=torch_dtype)
    # save_pretrained refuses models loaded from GGUF; write the same tensors directly
    from safetensors.torch import save_model
    os.makedirs(dst, exist_ok=True)
    save_model(m, os.path.join(dst, 'model.safetensors'))
    m.config.save_pretrained(dst)
dt = time.perf_counter() - t
rss1 = hwm_kib()
print(json.dumps({"seconds": dt, "rss_imports_kib": rss0, "rss_peak_kib": rss1}))
"""


def run(mode: str, src: Path, dst: Path, dtype: str) -> dict:
    shutil.rmtree(dst, ignore_errors=True)
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(src), str(dst), dtype],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--no-anchor", action="store_true")
    args = ap.parse_args()
    src = BENCH_DIR / f"llama-{args.layers}l-q8_0.gguf"
    if not src.exists():
        make_file(src, args.layers)
    from weightsmith.gguf import read

    with read(src) as f:
        largest = max(t.n_elements for t in f.tensors) * 4
        n_params = sum(t.n_elements for t in f.tensors)
    bound = 3 * largest + 256 * 2**20
    modes = ["ours"] + ([] if args.no_anchor else ["transformers"])
    res: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.runs):
        for m in modes:
            res[m].append(run(m, src, BENCH_DIR / f"out-{m}", args.dtype))
    mib = 2**20
    print(
        f"file {src.name}: {src.stat().st_size / mib:.0f} MiB, {n_params / 1e6:.0f}M params, "
        f"largest tensor {largest / mib:.0f} MiB in f32, bound {bound / mib:.0f} MiB; "
        f"dtype {args.dtype}, {args.runs} runs, medians"
    )
    for m in modes:
        peak = statistics.median(r["rss_peak_kib"] for r in res[m]) * 1024
        base = statistics.median(r["rss_imports_kib"] for r in res[m]) * 1024
        sec = statistics.median(r["seconds"] for r in res[m])
        print(
            f"  {m:12s} peak RSS {peak / mib:7.0f} MiB (after imports {base / mib:4.0f} MiB, "
            f"{peak / bound:.2f}x the bound, {(peak - base) / largest:.2f}x largest f32)  "
            f"{sec:6.2f} s"
        )
    if len(modes) == 2:
        a = statistics.median(r["rss_peak_kib"] for r in res["ours"])
        b = statistics.median(r["rss_peak_kib"] for r in res["transformers"])
        ta = statistics.median(r["seconds"] for r in res["ours"])
        tb = statistics.median(r["seconds"] for r in res["transformers"])
        print(f"  ratio transformers/ours: memory {b / a:.2f}x, time {tb / ta:.2f}x")


if __name__ == "__main__":
    main()
