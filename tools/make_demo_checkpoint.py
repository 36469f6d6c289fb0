"""Regenerate the demo's built-in checkpoint: a tiny Llama 3 in Meta's original layout.

The demo starts where a user starts after a download from Meta -- ``consolidated.00.pth``
(written by ``torch.save``), ``params.json`` and ``tokenizer.model`` (tiktoken ranks) --
and must run without torch; so the files are made once here, with real torch and the
``tokenizers`` library, and shipped as package data.  Run from the repository root:
``python tools/make_demo_checkpoint.py``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

OUT = Path(__file__).resolve().parents[1] / "src" / "weightsmith" / "cli" / "data"

# Llama 3's layout, scaled down: rows of 256 so the K-quants apply; GQA 4:2 heads
PARAMS = {
    "dim": 256, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 768,
    "multiple_of": 256, "ffn_dim_multiplier": 0.75, "norm_eps": 1e-05, "rope_theta": 500000.0,
    "use_scaled_rope": True,
}  # fmt: skip
RANKS = PARAMS["vocab_size"] - 256  # the 256 special tokens follow the BPE ranks

TEXT = [
    "Llamas are members of the camelid family; they live in the Andes mountains of South",
    "America, where people have kept them for thousands of years as pack animals and for",
    "their wool. The quick brown fox jumps over the lazy dog. 0123456789 9876543210",
    "Model weights are stored in safetensors and GGUF files, quantized to save memory;",
    "a converter reads the original checkpoint, renames and permutes every tensor, then",
    "writes a folder that transformers loads, or a single file that llama.cpp runs.",
    "def main():\n    print('hello world')\n    return 42\n",
    "Tokenizers split text into pieces: words, numbers, punctuation and whitespace.",
    "Quantization maps each block of weights to a few bits and one or two scales.",
] * 50
PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_table() -> dict[str, int]:
    """GPT-2's printable character -> byte."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table, extra = {chr(b): b for b in keep}, 0
    for b in range(256):
        if b not in keep:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def tiktoken_ranks() -> list[bytes]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    trainer = trainers.BpeTrainer(
        vocab_size=RANKS + 64, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(TEXT, trainer)
    table = byte_table()
    ranks = [bytes([b]) for b in range(256)]
    for m in json.loads(tok.to_str())["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        token = bytes(table[c] for c in a + b)
        if token not in ranks:
            ranks.append(token)
        if len(ranks) == RANKS:
            return ranks
    raise SystemExit(f"the corpus gave only {len(ranks)} ranks, {RANKS} wanted")


def main() -> None:
    g = torch.Generator().manual_seed(0)
    dim, vocab = PARAMS["dim"], PARAMS["vocab_size"]
    hidden = int(PARAMS["ffn_dim_multiplier"] * int(8 * dim / 3))
    ffn = PARAMS["multiple_of"] * -(-hidden // PARAMS["multiple_of"])
    kv = dim // PARAMS["n_heads"] * PARAMS["n_kv_heads"]

    def mat(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=g) * cols**-0.5).to(torch.bfloat16)

    def norm() -> torch.Tensor:
        return (1 + 0.1 * torch.randn(dim, generator=g)).to(torch.bfloat16)

    state = {"tok_embeddings.weight": mat(vocab, dim)}
    for i in range(PARAMS["n_layers"]):
        p = f"layers.{i}"
        state[f"{p}.attention.wq.weight"] = mat(dim, dim)
        state[f"{p}.attention.wk.weight"] = mat(kv, dim)
        state[f"{p}.attention.wv.weight"] = mat(kv, dim)
        state[f"{p}.attention.wo.weight"] = mat(dim, dim)
        state[f"{p}.feed_forward.w1.weight"] = mat(ffn, dim)
        state[f"{p}.feed_forward.w2.weight"] = mat(dim, ffn)
        state[f"{p}.feed_forward.w3.weight"] = mat(ffn, dim)
        state[f"{p}.attention_norm.weight"] = norm()
        state[f"{p}.ffn_norm.weight"] = norm()
    state["norm.weight"] = norm()
    state["output.weight"] = mat(vocab, dim)
    OUT.mkdir(parents=True, exist_ok=True)
    torch.save(state, OUT / "consolidated.00.pth")
    (OUT / "params.json").write_text(json.dumps(PARAMS, indent=2) + "\n")
    lines = [f"{base64.b64encode(t).decode()} {i}" for i, t in enumerate(tiktoken_ranks())]
    (OUT / "tokenizer.model").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
