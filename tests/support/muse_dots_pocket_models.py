"""Tiny random Muse Glimmer, Dots3 Note and PocketTTS folders (transformers 5.24's classes).

Built with transformers 5's own classes and saved as it saves them.  Muse Glimmer's is
the Hub's layout (``model.language_model.*``, ``model.vision_tower.*``,
``model.vision_adapter.*``, ``model.vision_projection.*``, ``lm_head.*``), with GPT-2's
BPE (llama.cpp's ``ggml-vocab-gpt-2.gguf``) plus the ``<|eot|>`` token the reference
reads; Dots3 Note's and PocketTTS's serve the refusal tests (no tokenizer).
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


def dots3_note(folder: Path, *, seed: int = 71) -> Path:
    """A tiny Dots3NoteForConditionalGeneration as transformers 5.24 saves it (no
    tokenizer: for the refusal tests only): 4 text layers (2 indexed, 2 sliding with
    their own head count), a 2-block vision tower (the second with 4 routed experts), a
    2-layer audio encoder."""
    from transformers import Dots3NoteConfig, Dots3NoteForConditionalGeneration

    text = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2, kv_lora_rank=32,
                q_lora_rank=32, qk_rope_head_dim=16, v_head_dim=16, qk_nope_head_dim=16,
                max_position_embeddings=256, index_topk=8, index_head_dim=16, index_n_heads=2,
                head_dim=32, shared_experts_intermediate_size=32, swa_num_attention_heads=2,
                swa_num_key_value_heads=2, swa_q_lora_rank=32, swa_kv_lora_rank=32,
                swa_head_dim=32, swa_qk_nope_head_dim=16, swa_v_head_dim=16,
                sliding_window_size=8, pad_token_id=None, bos_token_id=None, eos_token_id=1)  # fmt: skip
    vision = dict(pyramid_num_routed=[-1, 4], hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=2, patch_size=8,
                  moe_intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                  adapter_in_dim=32, adapter_out_dim=64)  # fmt: skip
    audio = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 downsample_hidden_size=16, adapter_input_size=32, adapter_out_dim=64)  # fmt: skip
    cfg = Dots3NoteConfig(text_config=text, vision_config=vision, audio_config=audio)
    model = Dots3NoteForConditionalGeneration(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def pocket_tts(folder: Path, *, seed: int = 72) -> Path:
    """A tiny PocketTTSForConditionalGeneration as transformers 5.24 saves it (the flow
    LM and flow head; the Mimi codec is another transformers model): for the refusal
    tests only."""
    from transformers import PocketTTSConfig, PocketTTSForConditionalGeneration

    cfg = PocketTTSConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=1, intermediate_size=128, audio_prompt_token_id=60,
                          audio_latent_token_id=61, audio_prompt_bos_token_id=62,
                          audio_bos_token_id=63, pad_token_id=3,
                          flow_head_config=dict(hidden_size=32, num_hidden_layers=2,
                                                condition_dim=64, frequency_embedding_size=32))  # fmt: skip
    model = PocketTTSForConditionalGeneration(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")
