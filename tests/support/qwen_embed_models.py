"""Tiny Qwen embedding models for tests/test_convert_qwen_embed.py: the bare ``Qwen3Model``
(Qwen3-Embedding) and ``Qwen2Model`` (gte-Qwen2) as the Hub ships them.

``save_pretrained`` of the bare classes writes the names without ``model.``
(``embed_tokens``, ``layers.N.``, ``norm``) and no ``lm_head``.  Beside them: llama.cpp's
Qwen2 vocabulary as ``tokenizer.json`` (padding on the left, as Qwen3-Embedding's
``tokenizer_config.json``), and the sentence-transformers modules Qwen3-Embedding has:
Transformer, Pooling (``pooling_mode_lasttoken``), Normalize.
"""

from __future__ import annotations

import json
from pathlib import Path

from .hf_models import _qwen_tokenizer, _random_init, _save

_ST = "sentence_transformers.models."


def last_token_pooling(folder: Path, dim: int) -> None:
    """modules.json, 1_Pooling/config.json (last token) and 2_Normalize, as Qwen3-Embedding."""
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": _ST + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": _ST + "Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": _ST + "Normalize"},
    ]))  # fmt: skip
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": dim, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": True, "include_prompt": True,
    }))  # fmt: skip
    (folder / "2_Normalize").mkdir()


def _tokenizer(folder: Path) -> int:
    vocab = _qwen_tokenizer(folder)
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tc, "padding_side": "left"}))
    return vocab


def qwen3_embedding(folder: Path, *, seed: int = 61) -> Path:
    """A tiny Qwen3-Embedding: ``Qwen3Model`` (tied embeddings, as the 0.6B), f32."""
    from transformers import Qwen3Config, Qwen3Model

    vocab = _tokenizer(folder)
    cfg = Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=151643,
        eos_token_id=151643,
    )  # fmt: skip
    model = Qwen3Model(cfg)
    _random_init(model, seed)
    _save(model, folder, "float32")
    last_token_pooling(folder, 64)
    return folder


def qwen2_embedding(folder: Path, *, seed: int = 62) -> Path:
    """A tiny gte-Qwen2: ``Qwen2Model`` (Q/K/V biases), last-token pooling, f32."""
    from transformers import Qwen2Config, Qwen2Model

    vocab = _tokenizer(folder)
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151643,
    )  # fmt: skip
    model = Qwen2Model(cfg)
    _random_init(model, seed)
    _save(model, folder, "float32")
    last_token_pooling(folder, 64)
    return folder
