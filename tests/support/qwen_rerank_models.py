"""Tiny Qwen3 rerankers for tests/test_convert_qwen_rerank.py.

Qwen3-Reranker is a ``Qwen3ForCausalLM`` (the Hub's config names that class) scored by
the probability of ``yes`` against ``no`` after its prompt.  The reference converter
tells one by a ``# Qwen3-Reranker`` heading in ``README.md`` or ``qwen3-reranker`` in the
folder's path; the builders give one of each: the head of its own (as Qwen3-Reranker-8B)
with a README, and tied embeddings (as the 0.6B) in a folder named for it.  The tokenizer
is llama.cpp's 151k-token Qwen2 vocabulary (it has ``yes`` and ``no``), which the
reference's fingerprint check accepts.
"""

from __future__ import annotations

from pathlib import Path

from .hf_models import _qwen_tokenizer, _random_init, _save

README = "---\nlicense: apache-2.0\n---\n# Qwen3-Reranker-0.6B (tiny, random)\n"


def _reranker(folder: Path, tied: bool, seed: int) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = _qwen_tokenizer(folder)
    cfg = Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=256, tie_word_embeddings=tied, bos_token_id=None,
        eos_token_id=151645, pad_token_id=151643,
    )  # fmt: skip
    model = Qwen3ForCausalLM(cfg)
    _random_init(model, seed)
    if tied:  # _random_init gave the tied head its own draw last: one tensor again
        model.tie_weights()
    return _save(model, folder, "float32")


def qwen3_reranker_readme(folder: Path, *, seed: int = 71) -> Path:
    """A reranker with its own ``lm_head`` (untied), told by its README."""
    _reranker(folder, tied=False, seed=seed)
    (folder / "README.md").write_text(README)
    return folder


def qwen3_reranker_tied(folder: Path, *, seed: int = 72) -> Path:
    """A reranker with tied embeddings, told by its folder name only (no README)."""
    return _reranker(folder, tied=True, seed=seed)


def qwen3_vl_reranker(folder: Path, *, seed: int = 73) -> Path:
    """Qwen3-VL-Reranker's layout: a tiny ``Qwen3VLForConditionalGeneration`` (its own
    head) with a ``# Qwen3-VL-Reranker`` README; the reference's Qwen3-VL text class is
    its Qwen3 class, reranker mode included."""
    from .vlm_models import qwen3vl

    qwen3vl(folder, dtype="float32", seed=seed)
    (folder / "README.md").write_text("# Qwen3-VL-Reranker-2B (tiny, random)\n")
    return folder
