"""PyTorch checkpoint -> safetensors: weightsmith vs torch.load + HF save_file.

Each side runs in a fresh subprocess (so peak RSS is its own), alternating,
several times; the script prints medians and the ratios.  The checkpoint is
written once by torch.save under --workdir and everything is deleted at the end.

    python benchmarks/bench_torchfile.py [--gib 1.0] [--runs 3] [--workdir /tmp/torchfile/bench]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

OURS = """
import json, sys, time
def peak():
    # VmHWM: this process image's own peak (ru_maxrss would inherit the parent's across fork+exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
t0 = time.perf_counter()
from weightsmith.convert import torch_to_safetensors
torch_to_safetensors(sys.argv[1], sys.argv[2])
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss": peak()}))
"""

ANCHOR = """
import json, sys, time
def peak():
    # VmHWM: this process image's own peak (ru_maxrss would inherit the parent's across fork+exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
t0 = time.perf_counter()
import torch
from safetensors.torch import save_file
sd = torch.load(sys.argv[1], weights_only=True)
save_file(sd, sys.argv[2])
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss": peak()}))
"""

BASELINE = """
import json
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
import weightsmith.convert._torch, weightsmith.safetensors, weightsmith.torchfile
print(json.dumps({"seconds": 0, "peak_rss": peak()}))
"""


def make_checkpoint(path: Path, gib: float) -> int:
    """About `gib` GiB: 2/3 in float32 64 MiB matrices, 1/3 in bfloat16 128 MiB ones."""
    import torch

    g = torch.Generator().manual_seed(0)
    total = int(gib * 2**30)
    sd, used, k = {}, 0, 0
    while used < total:
        if k % 3 == 2:
            t = torch.randn(8192, 8192, generator=g).to(torch.bfloat16)
        else:
            t = torch.randn(4096, 4096, generator=g)
        sd[f"layers.{k}.weight"] = t
        used += t.numel() * t.element_size()
        k += 1
    torch.save(sd, path)
    return max(t.numel() * t.element_size() for t in sd.values())


def run(code: str, src: Path, dst: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, str(src), str(dst)], capture_output=True, text=True, check=True
    )
    dst.unlink(missing_ok=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/torchfile/bench")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src, dst = work / "model.pth", work / "model.safetensors"
    try:
        # in a child, so that this process never holds torch or the tensors
        code = (
            f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_torchfile as b; "
            f"from pathlib import Path; print(b.make_checkpoint(Path({str(src)!r}), {args.gib}))"
        )
        largest = int(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
        size = src.stat().st_size
        base = run(BASELINE, src, dst)["peak_rss"]
        results: dict[str, list[dict]] = {"weightsmith": [], "torch.load+save_file": []}
        run(OURS, src, dst)  # warm the page cache for both sides
        for _ in range(args.runs):
            results["weightsmith"].append(run(OURS, src, dst))
            results["torch.load+save_file"].append(run(ANCHOR, src, dst))
        mib = 2**20
        print(f"checkpoint {size / mib:.0f} MiB, largest tensor {largest / mib:.0f} MiB, "
              f"budget {largest / mib + 128:.0f} MiB, our import baseline {base / mib:.0f} MiB RSS")  # fmt: skip
        med = {}
        for side, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            rss = statistics.median(r["peak_rss"] for r in rs)
            med[side] = (secs, rss)
            each = ", ".join(f"{r['seconds']:.2f}" for r in rs)
            print(f"{side:<22} median {secs:6.2f} s  peak RSS {rss / mib:7.0f} MiB  (runs: {each})")
        ours, anchor = med["weightsmith"], med["torch.load+save_file"]
        print(f"time ratio ours/anchor {ours[0] / anchor[0]:.2f}, RSS ratio {ours[1] / anchor[1]:.2f}, "
              f"ours within budget: {ours[1] <= largest + 128 * mib}")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
