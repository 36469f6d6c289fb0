"""GGUF -> HF tokenizer: weightsmith vs transformers' own GGUF tokenizer loading.

For each of llama.cpp's vocab-only GGUFs (llama-spm, llama-bpe, qwen2, phi-3, gpt-2):

* time to a usable tokenizer: ``tokenizer_json_from_vocab_gguf`` + ``tokenizers.Tokenizer``
  vs ``AutoTokenizer.from_pretrained(folder, gguf_file=...)`` (transformers reads the
  GGUF with gguf-py and converts the vocabulary itself);
* how many of llama.cpp's ``.inp`` texts each encodes to the ``.out`` ids.

Both in one process, same files; the median of ``--runs`` runs.  Usage::

    python benchmarks/bench_convert_tokenizer.py [--runs 3] [names...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import tokenizers
from transformers import AutoTokenizer

from support.llama_sdist import llama_cpp_root
from weightsmith.convert.tokenizer import tokenizer_json_from_vocab_gguf

SEP = "\n__ggml_vocab_test__\n"


def _cases(base: Path) -> list[tuple[str, list[int]]]:
    texts = Path(f"{base}.inp").read_text(encoding="utf-8").split(SEP)[:-1]
    lines = Path(f"{base}.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, lines)]


def _ours(path: Path):
    files = tokenizer_json_from_vocab_gguf(path)
    tok = tokenizers.Tokenizer.from_str(json.dumps(files["tokenizer.json"]))
    return lambda s: tok.encode(s, add_special_tokens=False).ids


def _theirs(path: Path):
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return lambda s: tok(s, add_special_tokens=False)["input_ids"]


def _timed(build, path: Path, runs: int):
    times, enc = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        enc = build(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), enc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "names", nargs="*", default=["llama-spm", "llama-bpe", "qwen2", "phi-3", "gpt-2"]
    )
    args = ap.parse_args()
    models = llama_cpp_root() / "models"
    print(
        f"{'vocab':10} {'ours s':>8} {'transformers s':>15} {'speed-up':>9} {'ours ok':>8} {'theirs ok':>10}"
    )
    for name in args.names:
        path = models / f"ggml-vocab-{name}.gguf"
        cases = _cases(path)
        t_ours, ours = _timed(_ours, path, args.runs)
        try:
            t_theirs, theirs = _timed(_theirs, path, args.runs)
            ok_theirs = f"{sum(theirs(t) == ids for t, ids in cases)}/{len(cases)}"
            ratio = f"{t_theirs / t_ours:.1f}x"
        except Exception as exc:  # transformers refuses some GGUF tokenizers
            t_theirs, ok_theirs, ratio = float("nan"), f"error: {type(exc).__name__}", "-"
        ok_ours = f"{sum(ours(t) == ids for t, ids in cases)}/{len(cases)}"
        print(f"{name:10} {t_ours:8.2f} {t_theirs:15.2f} {ratio:>9} {ok_ours:>8} {ok_theirs:>10}")


if __name__ == "__main__":
    main()
