"""Tiny checkpoints in Meta's original layout, built here: torch.save of Meta-named
tensors split as fairscale's model-parallel layers split them, a params.json, and a
tokenizer.model that is either a SentencePiece model trained here (Llama 1/2) or a
tiktoken ranks file derived from a byte-level BPE trained here (Llama 3.x)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

TEXT = [
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "Llamas are members of the camelid family; they live in the Andes.",
    "def main():\n    print('hello world')\n\treturn 42\n",
    "Tokenizers split text into pieces:   spaces,\ttabs and\nnewlines.",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 🦙🔥✨ and accents: café, naïve, Ångström.",
] * 20

DIM, HEADS, KV_HEADS, LAYERS, MULTIPLE_OF = 64, 4, 2, 2, 32
FFN = MULTIPLE_OF * ((int(8 * DIM / 3) + MULTIPLE_OF - 1) // MULTIPLE_OF)

# axis along which fairscale splits each per-layer weight (None: replicated)
_LAYER_AXES = {
    "attention.wq.weight": 0,
    "attention.wk.weight": 0,
    "attention.wv.weight": 0,
    "attention.wo.weight": 1,
    "feed_forward.w1.weight": 0,
    "feed_forward.w2.weight": 1,
    "feed_forward.w3.weight": 0,
    "attention_norm.weight": None,
    "ffn_norm.weight": None,
}


def train_spm(folder: Path) -> int:
    """A Llama-2-style SentencePiece BPE (byte fallback, <unk> <s> </s> at 0 1 2)."""
    import sentencepiece as spm

    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(TEXT), encoding="utf-8")
    prefix = folder / "spm"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=400, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, split_digits=True,
        allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", minloglevel=2,
    )  # fmt: skip
    (folder / "tokenizer.model").write_bytes(prefix.with_suffix(".model").read_bytes())
    for p in (corpus, prefix.with_suffix(".model"), prefix.with_suffix(".vocab")):
        p.unlink()
    return 400


LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def write_tiktoken(folder: Path) -> int:
    """A tiktoken ranks file: the 256 bytes, then the merges of a byte-level BPE trained here."""
    ranks = bpe_ranks(LLAMA3_PATTERN)
    lines = [f"{base64.b64encode(t).decode()} {i}" for i, t in enumerate(ranks)]
    (folder / "tokenizer.model").write_text("\n".join(lines) + "\n")
    return len(ranks) + 256


def bpe_ranks(pattern: str, vocab_size: int = 600) -> list[bytes]:
    """tiktoken-style ranks: the 256 bytes, then the merges of a byte-level BPE trained
    here on TEXT, split by ``pattern`` first."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(TEXT, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    # byte-level characters -> bytes
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {chr(b): b for b in keep}
    extra = 0
    for b in range(256):
        if b not in keep:
            table[chr(256 + extra)] = b
            extra += 1
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for m in merges:
        a, b = m if isinstance(m, list) else m.split(" ")
        token = bytes(table[c] for c in a + b)
        if token not in seen:
            seen.add(token)
            ranks.append(token)
    return ranks


def make_meta_checkpoint(
    folder: Path,
    generation: str,
    shards: int = 1,
    *,
    seed: int = 0,
    params_extra: dict | None = None,
) -> Path:
    """Write a tiny original checkpoint of ``generation`` split ``shards`` ways."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    llama3 = generation.startswith("3")
    vocab = write_tiktoken(folder) if llama3 else train_spm(folder)
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16)

    kv = DIM // HEADS * (HEADS if generation == "1" else KV_HEADS)  # Llama 1 had no GQA
    full = {"tok_embeddings.weight": rnd(vocab, DIM), "norm.weight": 1 + rnd(DIM),
            "output.weight": rnd(vocab, DIM)}  # fmt: skip
    for i in range(LAYERS):
        shapes = {
            "attention.wq.weight": (DIM, DIM),
            "attention.wk.weight": (kv, DIM),
            "attention.wv.weight": (kv, DIM),
            "attention.wo.weight": (DIM, DIM),
            "feed_forward.w1.weight": (FFN, DIM),
            "feed_forward.w2.weight": (DIM, FFN),
            "feed_forward.w3.weight": (FFN, DIM),
            "attention_norm.weight": (DIM,),
            "ffn_norm.weight": (DIM,),
        }
        for name, shape in shapes.items():
            t = rnd(*shape)
            full[f"layers.{i}.{name}"] = 1 + t if name.endswith("norm.weight") else t
    axes = {"tok_embeddings.weight": 0 if llama3 else 1, "norm.weight": None,
            "output.weight": 0}  # fmt: skip
    for name in full:
        if name.startswith("layers."):
            axes[name] = _LAYER_AXES[name.split(".", 2)[2]]
    for rank in range(shards):
        part = {}
        for name, t in full.items():
            axis = axes[name]
            part[name] = t.clone() if axis is None else t.chunk(shards, dim=axis)[rank].clone()
        torch.save(part, folder / f"consolidated.{rank:02d}.pth")
    params = {"dim": DIM, "multiple_of": MULTIPLE_OF, "n_heads": HEADS, "n_layers": LAYERS,
              "norm_eps": 1e-6 if generation == "1" else 1e-5, "vocab_size": -1}  # fmt: skip
    if generation != "1":
        params["n_kv_heads"] = KV_HEADS
    if llama3:
        params.update(vocab_size=vocab, rope_theta=500000.0)
        if generation != "3":
            params["use_scaled_rope"] = True
        if generation == "3.2":
            params["rope_scaling_factor"] = 32.0
    params.update(params_extra or {})
    (folder / "params.json").write_text(json.dumps(params))
    return folder


def sample_texts() -> list[str]:
    rng = random.Random(0)
    base = [
        "Hello world",
        "  two  spaces",
        "tabs\tand\nnewlines\n\n  indented",
        "digits 1234567890 and 3.14159",
        "中文文本和日本語のテキスト",
        "emoji 🦙🔥 mixed with text",
        " leading space",
        "trailing space ",
    ]
    words = " ".join(TEXT[:6]).split()
    base += [" ".join(rng.choice(words) for _ in range(12)) for _ in range(3)]
    return base


def ranks_file_encoder(folder: Path):
    """A tiktoken Encoding over the ranks file, the Llama 3 pattern and its specials."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(folder / "tokenizer.model"))
    return tiktoken.Encoding(
        name="meta-test", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
