"""Meta original checkpoint -> HF folder: weightsmith's meta_to_hf vs transformers' own
convert_llama_weights_to_hf.py (4.47.1, which torch.loads every shard), side by side;
with ``--gguf``, -> GGUF f16: weightsmith's one-pass meta_to_gguf vs llama.cpp's legacy
examples/convert_legacy_llama.py (the pinned sdist's converter for this layout).

A Llama-2-shaped checkpoint (``--dim``, ``--layers``, vocab 32000) is written once in
Meta's layout, split ``--shards`` ways, under --workdir.  Each side then runs in a fresh
subprocess (so peak RSS is its own), alternating, ``--runs`` times; the script prints
medians of wall time, CPU time and peak RSS, the ratios, and our peak against the issue's
bound: 3 x the largest merged tensor in float32 + 256 MiB.  The import of each side's
libraries is part of its time (a user runs the command once).

    python benchmarks/bench_meta.py [--dim 2048] [--layers 4] [--shards 2] [--runs 3] [--gguf]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

MEASURE = """
import json, resource, sys, time
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
t0, c0 = time.perf_counter(), time.process_time()
{body}
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"seconds": time.perf_counter() - t0, "cpu": r.ru_utime + r.ru_stime,
                  "peak_rss": peak()}}))
"""

OURS = MEASURE.format(
    body="""
from weightsmith.convert import meta_to_hf
meta_to_hf(sys.argv[1], sys.argv[2], tokenizer=False)
"""
)

OURS_GGUF = MEASURE.format(
    body="""
from weightsmith.convert import meta_to_gguf
meta_to_gguf(sys.argv[1], sys.argv[2] + ".gguf", "f16")
"""
)

LEGACY = MEASURE.format(
    body="""
sys.argv = [sys.argv[3], sys.argv[1], "--outtype", "f16", "--outfile", sys.argv[2] + ".gguf"]
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""
)

ORACLE = MEASURE.format(
    body="""
sys.argv = [sys.argv[3], "--input_dir", sys.argv[1], "--output_dir", sys.argv[2],
            "--num_shards", sys.argv[4], "--llama_version", "2", "--model_size", "7B"]
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""
)


def pad_spm(folder: Path, have: int, want: int) -> None:
    """Pad the trained SentencePiece model to ``want`` pieces: the oracle sizes the
    embeddings from the tokenizer, so it must match Llama 2's 32000 rows."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    path = folder / "tokenizer.model"
    m = pb.ModelProto()
    m.ParseFromString(path.read_bytes())
    for i in range(have, want):
        p = m.pieces.add()
        p.piece, p.score, p.type = f"<pad{i}>", -1e4, pb.ModelProto.SentencePiece.USER_DEFINED
    path.write_bytes(m.SerializeToString())


def build(folder: Path, dim: int, layers: int, shards: int) -> int:
    """Write the checkpoint; return the largest merged tensor's element count."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.meta_fixtures import train_spm

    folder.mkdir(parents=True, exist_ok=True)
    vocab, heads, kv_heads, multiple_of = 32000, dim // 128, dim // 128, 256
    pad_spm(folder, train_spm(folder), vocab)
    ffn = multiple_of * ((int(8 * dim / 3) + multiple_of - 1) // multiple_of)
    g = torch.Generator().manual_seed(0)
    full = {"tok_embeddings.weight": (vocab, dim, 1), "norm.weight": (dim, None),
            "output.weight": (vocab, dim, 0)}  # fmt: skip
    for i in range(layers):
        for name, shape, axis in [
            ("attention.wq.weight", (dim, dim), 0), ("attention.wk.weight", (dim, dim), 0),
            ("attention.wv.weight", (dim, dim), 0), ("attention.wo.weight", (dim, dim), 1),
            ("feed_forward.w1.weight", (ffn, dim), 0), ("feed_forward.w2.weight", (dim, ffn), 1),
            ("feed_forward.w3.weight", (ffn, dim), 0), ("attention_norm.weight", (dim,), None),
            ("ffn_norm.weight", (dim,), None),
        ]:  # fmt: skip
            full[f"layers.{i}.{name}"] = (*shape, axis)
    parts: list[dict] = [{} for _ in range(shards)]
    for name, spec in full.items():
        *shape, axis = spec
        t = (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)
        for rank in range(shards):
            parts[rank][name] = (
                t.clone() if axis is None else t.chunk(shards, dim=axis)[rank].clone()
            )
    for rank, part in enumerate(parts):
        torch.save(part, folder / f"consolidated.{rank:02d}.pth")
    params = {"dim": dim, "multiple_of": multiple_of, "n_heads": heads, "n_kv_heads": kv_heads,
              "n_layers": layers, "norm_eps": 1e-5, "vocab_size": -1}  # fmt: skip
    (folder / "params.json").write_text(json.dumps(params))
    return max(vocab * dim, ffn * dim)


def run(code: str, *args: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/weightsmith-bench-meta")
    ap.add_argument("--gguf", action="store_true", help="-> GGUF f16 against the legacy script")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import os

    from support.meta_oracle import oracle_script

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    src = work / "original"
    largest = build(src, args.dim, args.layers, args.shards)
    size = sum(p.stat().st_size for p in src.glob("*.pth"))
    script = oracle_script()
    site = str(script.parent / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]),
           "USE_TF": "0", "USE_FLAX": "0", "USE_JAX": "0", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    if args.gguf:
        from support.llama_sdist import llama_cpp_root

        root = llama_cpp_root()
        script = root / "examples" / "convert_legacy_llama.py"
        env = {**os.environ, "PYTHONPATH": str(root / "gguf-py")}
    ours, oracle = [], []
    for i in range(args.runs):
        for name, sink in (("ours", ours), ("oracle", oracle)):
            dst = work / f"{name}{i}"
            if name == "ours":
                sink.append(run(OURS_GGUF if args.gguf else OURS, str(src), str(dst)))
            elif args.gguf:
                sink.append(run(LEGACY, str(src), str(dst), str(script), env=env))
            else:
                sink.append(run(ORACLE, str(src), str(dst), str(script), str(args.shards), env=env))
            shutil.rmtree(dst, ignore_errors=True)
            Path(str(dst) + ".gguf").unlink(missing_ok=True)

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    bound = 3 * largest * 4 + (256 << 20)
    what = "-> GGUF f16, oracle = convert_legacy_llama.py" if args.gguf else "-> HF folder"
    print(what)
    print(f"checkpoint: {size / 2**20:.0f} MiB in {args.shards} shards, dim {args.dim}, "
          f"{args.layers} layers; largest merged tensor {largest * 4 / 2**20:.0f} MiB as f32")  # fmt: skip
    for key, unit, scale in (("seconds", "s", 1), ("cpu", "s", 1), ("peak_rss", "MiB", 2**-20)):
        a, b = med(ours, key), med(oracle, key)
        print(f"{key:>8}: ours {a * scale:8.2f} {unit}  oracle {b * scale:8.2f} {unit}  "
              f"oracle/ours {b / a:5.2f}x")  # fmt: skip
    print(f"peak bound (3 x largest f32 + 256 MiB): {bound / 2**20:.0f} MiB; "
          f"ours {med(ours, 'peak_rss') / 2**20:.0f} MiB -> "
          f"{'holds' if med(ours, 'peak_rss') <= bound else 'BROKEN'}")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
