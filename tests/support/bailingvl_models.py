"""A tiny Ling-3.0 VL (``BailingMoeV3VLForConditionalGeneration``) assembled from two
transformers 5.24 families (remote code: transformers has no class of its own).

The reference's ``BailingMoeV3VLVisionModel`` reads a Qwen3-VL tower whose merger is
its per-patch LayerNorm alone (``disable_merger_proj``) and a top-level GELU MLP over
the 2 x 2-merged patches (``linear_proj.0`` / ``.2``): that is transformers' Qwen3-VL
merger (norm, ``linear_fc1``, GELU, ``linear_fc2``) with its two layers moved.  So:

* :func:`qwen3vl_tower` -- a Qwen3-VL (``Qwen3VLForConditionalGeneration``, the oracle
  transformers loads) with no deepstack mergers whose merger output is the Ling text's
  width (256 = 4 x the tower's 64: ``out_hidden_size`` is the merged width either way);
* :func:`ling3vl` -- the Hub layout: the tower under ``visual.`` with the merger's
  ``linear_fc1`` / ``linear_fc2`` as ``linear_proj.0`` / ``linear_proj.2``, the text of
  :func:`support.hf_models.bailingmoe3` (a BailingMoE V3 saved by ``bailing_hybrid``,
  Hub spellings) as it is (``model.*``, ``lm_head``), and a hand-written config.json:
  ``text_config`` the text's (without ``architectures``, so both converters take the
  text class from the top level) plus ``mrope_section``, ``vision_config`` Qwen3-VL's
  plus ``disable_merger_proj``; the model type is unknown to transformers, so the
  reference reads config.json as written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: the Qwen3-VL tower: 2 blocks of width 64, 8 px patches, 2 frames, 2 x 2 merge
TOWER = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=8,
             spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=256,
             num_position_embeddings=64, deepstack_visual_indexes=[],
             hidden_act="gelu_pytorch_tanh")  # fmt: skip
MROPE_SECTION = [2, 3, 3]  # 8 rope pairs: the text's qk_rope_head_dim 16


def qwen3vl_tower(folder: Path, *, dtype: str = "bfloat16", seed: int = 76) -> Path:
    """The oracle: a seeded Qwen3-VL with :data:`TOWER` and a one-layer text of width 256
    (only its tower is compared), saved as transformers writes it, with its image
    processor file."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from support.hf_models import _random_init
    from support.vlm_models import _qwen_vl_processor, _save

    text = dict(vocab_size=64, hidden_size=256, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                 "mrope_section": MROPE_SECTION, "mrope_interleaved": True},
                tie_word_embeddings=False)  # fmt: skip
    cfg = Qwen3VLConfig(text_config=text, vision_config=TOWER, image_token_id=60,
                        video_token_id=61, vision_start_token_id=62, vision_end_token_id=63,
                        tie_word_embeddings=False)  # fmt: skip
    model = Qwen3VLForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, {"image_mean": [0.5] * 3, "image_std": [0.5] * 3})
    return folder


#: the oracle's names -> Ling-3.0 VL's
_MOVED = (("model.visual.merger.linear_fc1.", "linear_proj.0."),
          ("model.visual.merger.linear_fc2.", "linear_proj.2."),
          ("model.visual.", "visual."))  # fmt: skip


def ling3vl(tower: Path, text: Path, folder: Path) -> Path:
    """A Ling-3.0 VL folder over the tower of ``tower`` (:func:`qwen3vl_tower`) and the
    BailingMoE V3 text of ``text``."""
    from safetensors.torch import load_file, save_file

    def moved(k: str) -> str:
        for a, b in _MOVED:
            if k.startswith(a):
                return b + k[len(a) :]
        return k

    folder.mkdir(parents=True)
    vis = {moved(k): v for k, v in load_file(tower / "model.safetensors").items()
           if k.startswith("model.visual.")}  # fmt: skip
    txt = load_file(text / "model.safetensors")
    save_file({**txt, **vis}, folder / "model.safetensors", metadata={"format": "pt"})
    for f in text.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "merges", "special_tokens", "generation")):
            shutil.copy(f, folder / f.name)
    shutil.copy(tower / "preprocessor_config.json", folder / "preprocessor_config.json")
    text_cfg = json.loads((text / "config.json").read_text())
    text_cfg.pop("architectures", None)
    text_cfg["mrope_section"] = MROPE_SECTION
    vision_cfg = json.loads((tower / "config.json").read_text())["vision_config"]
    vision_cfg["disable_merger_proj"] = True
    cfg = {
        "architectures": ["BailingMoeV3VLForConditionalGeneration"],
        "model_type": "bailing_moe_v3_vl",
        "text_config": text_cfg,
        "vision_config": vision_cfg,
        "image_token_id": 60,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder
