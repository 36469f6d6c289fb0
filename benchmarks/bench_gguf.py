"""GGUF open benchmark: weightsmith.gguf.read vs gguf-py's GGUFReader, same file, one process.

The file (written once into /tmp/gguf-bench/) has a 262,144-token vocabulary
(tokenizer.ggml.tokens / scores / token_type) and 250 small tensors.

Timed, median of several runs:

* "infos": open, then visit every KV's key + type + length (or scalar value)
  and every tensor info (name, type, shape, offset).  For gguf-py that is
  the constructor plus walking ``fields`` / ``tensors``; for us ``read()``
  plus ``metadata_type`` / ``summary`` and ``tensors``.
* "values": the same, but also converting every value to Python objects
  (gguf-py ``ReaderField.contents()``, ours ``metadata[key]``): 262,144 str.

With ``--real``, the same two tasks on llama.cpp's own vocab files (Gemma 4:
262,144 tokens and 514,906 merges; Command R; Llama 3 BPE) from the
llama-cpp-python sdist that scripts/test.sh unpacks.  Each figure is the
median wall time and the median CPU time of the process (the figure to read
on a shared, loaded machine).

Run: python benchmarks/bench_gguf.py [--runs N] [--gguf-runs N] [--real] [--no-anchor]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from weightsmith.gguf import Writer, read

BENCH_DIR = Path("/tmp/gguf-bench")
PATH = BENCH_DIR / "vocab262k.gguf"
N_VOCAB = 262_144
N_TENSORS = 250
SDIST = Path(
    os.environ.get("WEIGHTSMITH_LLAMA_SDIST", Path.home() / ".cache/weightsmith/llama-sdist")
)
REAL = ("ggml-vocab-gemma-4.gguf", "ggml-vocab-command-r.gguf", "ggml-vocab-llama-bpe.gguf")


def make_file(path: Path = PATH) -> None:
    rng = np.random.default_rng(0)
    letters = "abcdefghijklmnopqrstuvwxyzéüñ▁Ġ"
    lens = rng.integers(1, 12, N_VOCAB)
    pool = rng.integers(0, len(letters), int(lens.sum()))
    tokens, k = [], 0
    for i, n in enumerate(lens.tolist()):
        tokens.append("".join(letters[j] for j in pool[k : k + n]) + str(i))
        k += n
    path.parent.mkdir(parents=True, exist_ok=True)
    with Writer(path, arch="llama") as w:
        w.add("general.name", "bench")
        w.add("llama.context_length", 8192, "u32")
        w.add("llama.embedding_length", 64, "u32")
        w.add("tokenizer.ggml.model", "llama")
        w.add("tokenizer.ggml.tokens", tokens)
        w.add("tokenizer.ggml.scores", rng.standard_normal(N_VOCAB).astype(np.float32))
        w.add("tokenizer.ggml.token_type", np.ones(N_VOCAB, np.int32))
        w.add("tokenizer.ggml.bos_token_id", 1, "u32")
        shape = (16, 32)
        for i in range(N_TENSORS):
            w.add_tensor_info(f"blk.{i}.weight", "F32", shape)
        for i in range(N_TENSORS):
            w.write_tensor(f"blk.{i}.weight", np.full(shape, i, np.float32))


def ours_infos(path: Path) -> int:
    n = 0
    with read(path) as f:
        for key in f.metadata:
            f.metadata_type(key)
            f.summary(key)
            n += 1
        for t in f.tensors:
            n += len(t.name) + len(t.shape) + (t.offset > 0) + t.ggml_type.id
    return n


def ours_values(path: Path) -> int:
    n = 0
    with read(path) as f:
        for key in f.metadata:
            v = f.metadata[key]
            f.metadata_type(key)
            n += len(v) if isinstance(v, list) else 1
        for t in f.tensors:
            n += len(t.name) + len(t.shape)
    return n


def gguf_infos(path: Path) -> int:
    from gguf import GGUFReader

    r = GGUFReader(path)
    n = 0
    for field in r.fields.values():
        n += len(field.types) + len(field.data)
    for t in r.tensors:
        n += len(t.name) + len(t.shape) + (t.data_offset > 0) + int(t.tensor_type)
    return n


def gguf_values(path: Path) -> int:
    from gguf import GGUFReader

    r = GGUFReader(path)
    n = 0
    for field in r.fields.values():
        v = field.contents()
        n += len(v) if isinstance(v, list) else 1
    for t in r.tensors:
        n += len(t.name) + len(t.shape)
    return n


def median_time(fn, path: Path, runs: int) -> tuple[float, float]:
    """Median wall and median CPU seconds of ``runs`` calls."""
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(path)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def real_files() -> list[Path]:
    models = sorted(SDIST.glob("llama_cpp_python-*/vendor/llama.cpp/models"))
    return [models[-1] / name for name in REAL if models and (models[-1] / name).exists()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--gguf-runs", type=int, default=3)
    ap.add_argument("--real", action="store_true", help="also llama.cpp's vocab files")
    ap.add_argument("--no-anchor", action="store_true", help="weightsmith only (before/after runs)")
    args = ap.parse_args()
    if not PATH.exists():
        make_file()
    files = [PATH] + (real_files() if args.real else [])
    if args.real and len(files) == 1:
        print(f"no llama.cpp vocab files under {SDIST} (scripts/test.sh unpacks them)")
    for path in files:
        size = path.stat().st_size / 1e6
        print(f"file: {path.name} ({size:.1f} MB)")
        for label, ours, theirs in [
            ("infos", ours_infos, gguf_infos),
            ("values", ours_values, gguf_values),
        ]:
            ours(path)  # warm the page cache
            a, ac = median_time(ours, path, args.runs)
            if args.no_anchor:
                print(f"  {label:7s} weightsmith {a * 1e3:8.1f} ms (cpu {ac * 1e3:7.1f})")
                continue
            b, bc = median_time(theirs, path, args.gguf_runs)
            print(
                f"  {label:7s} weightsmith {a * 1e3:8.1f} ms (cpu {ac * 1e3:7.1f})"
                f"   gguf-py {b * 1e3:9.1f} ms (cpu {bc * 1e3:9.1f})"
                f"   ratio {b / a:7.1f}x (cpu {bc / ac:7.1f}x)"
            )


if __name__ == "__main__":
    main()
