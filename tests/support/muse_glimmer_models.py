"""A tiny random Muse Glimmer (``MuseGlimmerForConditionalGeneration``) folder.

Built with transformers 5's own classes and saved as it saves them (that is the Hub's
layout: ``model.language_model.*``, ``model.vision_tower.*``, ``model.vision_adapter.*``,
``model.vision_projection.*``, ``lm_head.*``), with GPT-2's BPE (llama.cpp's
``ggml-vocab-gpt-2.gguf``) plus the ``<|eot|>`` token the reference reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.hf_models import _bpe_tokenizer, _random_init, _save


def _add_eot(folder: Path, vocab: int) -> int:
    """Append ``<|eot|>`` to tokenizer.json as a special added token; the new size."""
    path = folder / "tokenizer.json"
    tj = json.loads(path.read_text())
    tj.setdefault("added_tokens", []).append(
        {"id": vocab, "content": "<|eot|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
    )  # fmt: skip
    path.write_text(json.dumps(tj))
    return vocab + 1


def muse_glimmer(folder: Path, *, dtype: str = "bfloat16", seed: int = 70) -> Path:
    """4 text layers (3 sliding with RoPE, the last full and NoPE, as the config's
    default pattern), attention output gate, scaleless QK norm times ``qk_scale_factor``,
    logit softcap; a 2-layer vision tower of width 64 (8 px patches, 4 x 4 position
    table, 2 x 2 merge) and the 3-linear projector (its input the 2 x 2 merged tower width, 256)."""
    from transformers import MuseGlimmerConfig, MuseGlimmerForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    vocab = _add_eot(folder, _bpe_tokenizer(folder, "gpt-2"))
    cfg = MuseGlimmerConfig(
        text_config=dict(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=256, sliding_window=8,
                         bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=False),
        vision_config=dict(patch_size=8, pos_emb_height=4, pos_emb_width=4,
                           num_attention_heads=2, num_hidden_layers=2, hidden_size=64,
                           intermediate_size=128),
        out_hidden_size=256, projector_hidden_size=64, tie_word_embeddings=False,
    )  # fmt: skip
    model = MuseGlimmerForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    # MuseGlimmerImageProcessor's settings for this tower, written by hand: the class
    # needs torchvision, which is not a dependency here (the reference reads the mean/std)
    pre = {"image_processor_type": "MuseGlimmerImageProcessor", "image_mean": [0.5] * 3,
           "image_std": [0.5] * 3, "patch_size": 8, "temporal_patch_size": 2,
           "merge_size": 2, "max_image_tokens": 64}  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    return folder
