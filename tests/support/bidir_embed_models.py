"""Tiny LFM2 retrieval encoders in the Hub's layouts (tests/test_convert_bidir_embed.py).

* :func:`lfm2_colbert` -- LFM2-ColBERT (``LiquidAI/LFM2-ColBERT-350M``): an ``Lfm2Model``
  saved without the ``model.`` prefix, then PyLate's ``1_Dense`` projection (hidden ->
  ColBERT width, no bias, identity) and no pooling module (late interaction: one vector
  per token);
* :func:`lfm2_bidirectional` -- LFM2.5-Embedding (``Lfm2BidirectionalModel``): the same
  trunk run bidirectionally (non-causal attention, centred short convolutions; the Hub's
  remote code, which transformers 5.24 does not ship), mean pooling and ``Normalize``.
"""

from __future__ import annotations

import json
from pathlib import Path

from .encoder_models import _dense
from .hf_models import _bpe_tokenizer, _mean_pooling, _random_init, _save


def _lfm2_trunk(folder: Path, seed: int, arch: str) -> Path:
    from transformers import Lfm2Config, Lfm2Model

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = Lfm2Config(vocab_size=vocab, hidden_size=64, intermediate_size=192,
                     num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=256, conv_L_cache=3,
                     layer_types=["conv", "full_attention", "conv", "full_attention"],
                     bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                     tie_word_embeddings=True)  # fmt: skip
    model = Lfm2Model(cfg)
    _random_init(model, seed)
    _save(model, folder, "float32")
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    saved["architectures"] = [arch]
    path.write_text(json.dumps(saved, indent=2))
    return folder


def lfm2_colbert(folder: Path, *, seed: int = 61) -> Path:
    """LFM2-ColBERT: ``Lfm2Model`` + PyLate's ``1_Dense`` (64 -> 32), no pooling."""
    _lfm2_trunk(folder, seed, "Lfm2Model")
    _dense(folder, "1_Dense", 64, 32, seed + 1)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ]))  # fmt: skip
    return folder


def lfm2_bidirectional(folder: Path, *, seed: int = 63) -> Path:
    """LFM2.5-Embedding: ``Lfm2BidirectionalModel``, mean pooling, ``Normalize``."""
    _lfm2_trunk(folder, seed, "Lfm2BidirectionalModel")
    _mean_pooling(folder, 64)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]))  # fmt: skip
    return folder


def llama_bidirectional(folder: Path, *, seed: int = 65) -> Path:
    """llama-embed-nemotron (``nvidia/llama-embed-nemotron-8b``): a Llama trunk saved as
    ``LlamaModel`` (no ``model.`` prefix) under the Hub's remote-code class name
    ``LlamaBidirectionalModel`` / model type ``llama_bidirec``, Llama 3's BPE vocabulary,
    mean pooling and ``Normalize``."""
    from transformers import LlamaConfig, LlamaModel

    vocab = _bpe_tokenizer(folder, "llama-bpe")
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, rms_norm_eps=1e-5,
                      bos_token_id=128000, eos_token_id=128001,
                      tie_word_embeddings=False)  # fmt: skip
    model = LlamaModel(cfg)
    _random_init(model, seed)
    _save(model, folder, "float32")
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    saved |= {"architectures": ["LlamaBidirectionalModel"], "model_type": "llama_bidirec",
              "pooling": "avg"}  # fmt: skip
    path.write_text(json.dumps(saved, indent=2))
    _mean_pooling(folder, 64)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]))  # fmt: skip
    return folder
