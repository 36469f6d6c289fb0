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
scales, dequantized on read); ``vlm`` is Gemma 3's vision-language layout (SigLIP tower of 6
layers, width 768, 224 px images; text 6 layers, hidden 768, FFN 3072; ~100M parameters,
bf16) converted with its projector: ours is one ``hf_to_gguf(..., mmproj=)`` call, the
reference two converter runs (text, then ``--mmproj``; the projector at f16, as both write it
beside a llama-quantize type) plus llama_model_quantize; ``hybrid`` is Granite 4.0-H's layout
(Mamba 2 and attention layers with the shared MLP, 8 layers, hidden 1024, ~130M parameters,
bf16).  For each type, both sides run in a fresh child process (so
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

from support.hf_models import _random_init, big_llama, big_mla, big_moe, gemma3_270m, train_spm
from support.llama_sdist import llama_cpp_root
from support.vlm_models import gemma3_vlm

REF_CHILD = r"""
import ctypes, os, runpy, sys, json
script, src, dst, typ, inter, threads, mmproj = sys.argv[1:8]
sys.path.insert(0, os.path.dirname(script))
outtype = typ if typ in ("f32", "f16", "bf16", "q8_0") else inter
tmp = dst if outtype == typ else dst + "." + inter
sys.argv = [script, src, "--outfile", tmp, "--outtype", outtype]
runpy.run_path(script, run_name="__main__")
if mmproj:  # the converter writes the projector in a run of its own
    sys.argv = [script, src, "--outfile", mmproj, "--outtype", outtype if outtype == typ
                else "f16", "--mmproj"]
    runpy.run_path(script, run_name="__main__")
if tmp != dst:
    import llama_cpp
    from weightsmith.quant.recipes import file_type
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = int(threads)
    p.ftype = file_type(typ).id
    assert llama_cpp.llama_model_quantize(tmp.encode(), dst.encode(), ctypes.byref(p)) == 0
    os.unlink(tmp)
# VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"peak": hwm * 1024}))
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
OURS_CHILD = r"""
import json, sys
from weightsmith.convert import hf_to_gguf
src, dst, typ, workers, mmproj = sys.argv[1:6]
hf_to_gguf(src, dst, typ, workers=int(workers), mmproj=mmproj or None)
# VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"peak": hwm * 1024}))
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


def _child(args: list[str]) -> tuple[float, float, int]:
    """Wall s, CPU s and peak RSS of one fresh child process."""
    dt, cpu, r = _timed(lambda: subprocess.run(args, capture_output=True, text=True, check=True))
    return dt, cpu, json.loads(r.stdout.strip().splitlines()[-1])["peak"]


def run_ref(
    src: Path, dst: Path, typ: str, inter: str, threads: int, mmproj: str = ""
) -> tuple[float, float, int]:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return _child([sys.executable, "-c", REF_CHILD, script, str(src), str(dst), typ, inter,
                   str(threads), mmproj])  # fmt: skip


def run_ours(
    src: Path, dst: Path, typ: str, workers: int, mmproj: str = ""
) -> tuple[float, float, int]:
    return _child([sys.executable, "-c", OURS_CHILD, str(src), str(dst), typ, str(workers), mmproj])


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


def big_vlm(folder: Path) -> tuple[Path, int]:
    """Gemma 3's vision-language layout (tests/support/vlm_models.gemma3_vlm, larger)."""
    text = dict(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=4096,
        sliding_window=512,
        query_pre_attn_scalar=128,
    )
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=6,
                  num_attention_heads=12, image_size=224, patch_size=14)  # fmt: skip
    gemma3_vlm(folder, seed=40, text=text, vision=vision, tokens=64)
    return folder, 3072 * 768


def big_hybrid(folder: Path) -> tuple[Path, int]:
    """Granite 4.0-H's layout (as tests/support/hf_models.granitehybrid, larger)."""
    import torch
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    vocab = train_spm(folder)
    hidden, ff, layers = 1024, 4096, 8
    cfg = GraniteMoeHybridConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=ff, shared_intermediate_size=ff,
        num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
        layer_types=["mamba", "mamba", "mamba", "attention"] * (layers // 4),
        num_local_experts=0, num_experts_per_tok=0, mamba_n_heads=32, mamba_d_head=64,
        mamba_n_groups=1, mamba_d_state=128, mamba_d_conv=4, mamba_expand=2,
        position_embedding_type="nope", max_position_embeddings=4096,
        attention_multiplier=0.0625, embedding_multiplier=12.0, residual_multiplier=0.22,
        logits_scaling=8.0, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        tie_word_embeddings=True,
    )  # fmt: skip
    model = GraniteMoeHybridForCausalLM(cfg)
    _random_init(model, 41)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    c = json.loads((folder / "config.json").read_text())
    # the Hub's (and the reference converter's) spelling, as in the tests' granitehybrid
    c["layer_types"] = ["mamba" if t == "linear_attention" else "attention"
                        for t in c["layer_types"]]  # fmt: skip
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder, 2 * ff * hidden


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--types", default="f16,q8_0,q4_k_m")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--family",
        choices=("dense", "moe", "gemma3-270m", "mla", "mla-fp8", "vlm", "hybrid"),
        default="dense",
    )
    ap.add_argument("--ref-outtype", choices=("f32", "f16"), default="f32")
    ap.add_argument("--quantize-threads", default="", help="e.g. 1,2: the quantize race too")
    a = ap.parse_args()
    MiB = 2**20
    build = {"dense": big_llama, "moe": big_moe, "gemma3-270m": gemma3_270m, "mla": big_mla,
             "mla-fp8": functools.partial(big_mla, fp8=True), "vlm": big_vlm,
             "hybrid": big_hybrid}[a.family]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_convert_") as tmp:
        folder, largest = build(Path(tmp) / "m")
        print(f"model: largest tensor {4 * largest / MiB:.0f} MiB in f32; "
              f"bound 3x + 256 MiB = {(12 * largest) / MiB + 256:.0f} MiB")  # fmt: skip
        print(f"{'type':<8} {'ours s':>13} {'ref s':>13} {'ratio':>6} {'CPU ratio':>9} "
              f"{'ours MiB':>9} {'ref MiB':>8}   (s: wall / CPU, medians)")  # fmt: skip
        for typ in filter(None, a.types.split(",")):
            ours, ref = [], []
            vlm = a.family == "vlm"
            om, rm = (str(Path(tmp) / f"{k}-mmproj.gguf") if vlm else "" for k in "or")
            for _ in range(a.runs):
                ours.append(run_ours(folder, Path(tmp) / "o.gguf", typ, a.workers, om))
                ref.append(run_ref(folder, Path(tmp) / "r.gguf", typ, a.ref_outtype, a.workers, rm))
            ow, oc, rw, rc = (
                statistics.median(x[k] for x in xs) for xs in (ours, ref) for k in (0, 1)
            )
            same = all(Path(o).read_bytes() == Path(r).read_bytes()
                       for o, r in [(Path(tmp) / "o.gguf", Path(tmp) / "r.gguf")]
                       + ([(om, rm)] if vlm else []))  # fmt: skip
            print(f"load average {os.getloadavg()[0]:.1f}; files byte-identical: {same}")
            print(f"{typ:<8} {ow:6.2f} /{oc:6.2f} {rw:6.2f} /{rc:6.2f} {rw / ow:6.2f} {rc / oc:9.2f} "
                  f"{max(x[2] for x in ours) / MiB:9.0f} {max(x[2] for x in ref) / MiB:8.0f}",
                  flush=True)  # fmt: skip
        if a.quantize_threads:
            threads = [int(n) for n in a.quantize_threads.split(",")]
            bench_quantize(folder, Path(tmp), threads, a.runs)


if __name__ == "__main__":
    main()
