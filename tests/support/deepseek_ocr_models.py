"""Tiny random DeepSeek-OCR-2 folders, built with transformers 5.24's own classes.

transformers saves ``DeepseekOcr2ForConditionalGeneration`` with the Hub checkpoint's
tensor names already (its conversion mapping reversed on save: ``model.sam_model.*``,
``model.qwen2_model.*``, ``model.projector.layers.*``, ``model.view_seperator``,
``model.layers.*`` with per-expert tensors), but with its own ``config.json``
(``deepseek_ocr2``, ``text_config``, ``vision_config.{sam,encoder}_config``), which
llama.cpp's converter cannot read.  :func:`deepseek_ocr2` writes two folders over the
same weights:

* ``hf`` -- as transformers saved it (transformers loads it: the oracle's side);
* ``hub`` -- the Hub's ``deepseek-ai/DeepSeek-OCR-2`` layout: ``architectures``
  ``DeepseekOCR2ForCausalLM``, ``model_type`` ``deepseek_vl_v2``, the text under
  ``language_config`` (also at the top level, as the Hub's), the towers under
  ``vision_config.width`` (``sam_vit_b``, ``qwen2-0-5b``), the image processor in
  ``processor_config.json``.  The Hub's vision config gives no layer count, width or
  head count for the Qwen2 encoder (its code fixes 24 / 4864 / 14, which llama.cpp's
  converter assumes when absent): the tiny one states its own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from support.hf_models import _bpe_tokenizer, _random_init

#: the tiny towers (widths multiples of 32 where a weight is quantized); mtmd fixes SAM's
#: global-attention layers at 2, 5, 8, 11 and needs one: 3 layers
SAM = dict(hidden_size=32, output_channels=16, num_hidden_layers=3, num_attention_heads=2,
           downsample_channels=[32, 64], mlp_dim=64)  # fmt: skip
# llama.cpp's deepseekocr2 graph: RoPE theta 1e6 and 2 KV heads are fixed there; the
# reference names the SAM neck's four parts as blocks of the encoder's count: 4 at least
ENCODER = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=8,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})  # fmt: skip
TEXT = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, mlp_layer_types=["dense", "sparse"],
            max_position_embeddings=256)  # fmt: skip
MEAN_STD = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


def hub_config(hf_cfg: dict) -> dict:
    """transformers' DeepSeek-OCR-2 config.json -> the Hub's."""
    t, sam, enc = hf_cfg["text_config"], hf_cfg["vision_config"]["sam_config"], hf_cfg[
        "vision_config"]["encoder_config"]  # fmt: skip
    n_dense = t["mlp_layer_types"].count("dense")
    lang = {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "vocab_size": t["vocab_size"],
        "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "moe_intermediate_size": t["moe_intermediate_size"],
        "num_hidden_layers": t["num_hidden_layers"],
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "n_routed_experts": t["n_routed_experts"],
        "n_shared_experts": t["n_shared_experts"],
        "num_experts_per_tok": t["num_experts_per_tok"],
        "first_k_dense_replace": n_dense,
        "moe_layer_freq": 1,
        "topk_method": "greedy",
        # no MLA: plain multi-head attention, the latent sizes zero or null as the Hub's
        "use_mla": False,
        "q_lora_rank": None,
        "kv_lora_rank": None,
        "qk_nope_head_dim": 0,
        "qk_rope_head_dim": 0,
        "v_head_dim": 0,
        "max_position_embeddings": t["max_position_embeddings"],
        "rms_norm_eps": t["rms_norm_eps"],
        "bos_token_id": t["bos_token_id"],
        "eos_token_id": t["eos_token_id"],
    }
    vision = {
        "image_size": sam["image_size"],
        "mlp_ratio": 3.7362,
        "model_name": "deepencoderv2",
        "model_type": "vision",
        # the encoder's shape, which the Hub's config leaves to the code's defaults
        "layers": enc["num_hidden_layers"],
        "intermediate_size": enc["intermediate_size"],
        "num_attention_heads": enc["num_attention_heads"],
        "width": {
            "sam_vit_b": {
                "width": sam["hidden_size"],
                "layers": sam["num_hidden_layers"],
                "heads": sam["num_attention_heads"],
                "global_attn_indexes": sam["global_attn_indexes"],
                "downsample_channels": sam["downsample_channels"],
            },
            "qwen2-0-5b": {"dim": enc["hidden_size"]},
        },
    }
    return {
        "architectures": ["DeepseekOCR2ForCausalLM"],
        "model_type": "deepseek_vl_v2",
        "candidate_resolutions": [[1024, 1024]],
        "global_view_pos": "head",
        "tile_tag": "2D",
        "language_config": lang,
        "vision_config": vision,
        "projector_config": {
            "input_dim": enc["hidden_size"],
            "n_embed": t["hidden_size"],
            "projector_type": "linear",
            "model_type": "mlp_projector",
        },
        **{k: v for k, v in lang.items() if k not in ("architectures", "model_type")},
        "torch_dtype": "bfloat16",
    }


def deepseek_ocr2(folder: Path, *, dtype: str = "bfloat16", seed: int = 71) -> Path:
    """``folder/hf`` (transformers' files) and ``folder/hub`` (the Hub's config over the
    same weights); returns the ``hub`` folder."""
    import torch
    from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration

    hf, hub = folder / "hf", folder / "hub"
    hub.mkdir(parents=True)
    vocab = _bpe_tokenizer(hub, "gpt-2")
    cfg = DeepseekOcr2Config(
        vision_config={"sam_config": SAM, "encoder_config": ENCODER},
        text_config={**TEXT, "vocab_size": vocab, "bos_token_id": 50256, "eos_token_id": 50256},
        image_token_id=vocab - 1,
    )
    model = DeepseekOcr2ForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(hf, safe_serialization=True)
    for f in hub.iterdir():  # the tokenizer, for both
        shutil.copy(f, hf / f.name)
    (hf / "preprocessor_config.json").write_text(json.dumps(MEAN_STD))
    shutil.copy(hf / "model.safetensors", hub / "model.safetensors")
    hf_cfg = json.loads((hf / "config.json").read_text())
    (hub / "config.json").write_text(json.dumps(hub_config(hf_cfg), indent=2))
    (hub / "processor_config.json").write_text(json.dumps(
        {"processor_class": "DeepseekVLV2Processor", "patch_size": 16, "downsample_ratio": 4,
         "normalize": True, **MEAN_STD}))  # fmt: skip
    return hub


# Unlimited-OCR: DeepSeek-OCR's SAM + CLIP-L towers; CLIP reads SAM's 16 x 16 features as
# its patches (position table 16 x 16 + 1), 4 layers at least (the neck, as above); the
# projector reads both concatenated (CLIP width + SAM's last channels)
U_SAM = {**SAM, "downsample_channels": [32, 32]}
U_CLIP = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
              image_size=224, patch_size=14)  # fmt: skip
U_TEXT = {k: v for k, v in TEXT.items() if k != "mlp_layer_types"}


def unlimited_hub_config(hf_cfg: dict) -> dict:
    """transformers' Unlimited-OCR config.json -> the Hub's (DeepSeek-OCR's layout: the
    CLIP-L under ``width.clip-l-14-224``, the text window ``sliding_window_size``)."""
    t = hf_cfg["text_config"]
    mlp_types = ["dense"] + ["sparse"] * (t["num_hidden_layers"] - 1)  # first_k_dense_replace 1
    no_encoder = dict.fromkeys(("num_hidden_layers", "intermediate_size", "num_attention_heads",
                                "hidden_size"), 0)  # fmt: skip
    out = hub_config({
        **hf_cfg,
        "text_config": {**t, "mlp_layer_types": mlp_types},
        "vision_config": {**hf_cfg["vision_config"], "encoder_config": no_encoder},
    })  # fmt: skip
    clip = hf_cfg["vision_config"]["encoder_config"]
    out["architectures"] = ["UnlimitedOCRForCausalLM"]
    v = out["vision_config"]
    for k in ("layers", "intermediate_size", "num_attention_heads"):
        del v[k]
    v["model_name"] = "deeplip_b_l"
    del v["width"]["qwen2-0-5b"]
    v["width"]["clip-l-14-224"] = {
        "heads": clip["num_attention_heads"],
        "image_size": clip["image_size"],
        "layers": clip["num_hidden_layers"],
        "patch_size": clip["patch_size"],
        "width": clip["hidden_size"],
    }
    out["projector_config"]["input_dim"] = clip["hidden_size"] + (
        hf_cfg["vision_config"]["sam_config"]["downsample_channels"][-1])  # fmt: skip
    out["language_config"]["sliding_window_size"] = hf_cfg["text_config"]["sliding_window"]
    return out


def unlimited_ocr(folder: Path, *, dtype: str = "bfloat16", seed: int = 72) -> Path:
    """As :func:`deepseek_ocr2`, for ``UnlimitedOcrForConditionalGeneration``."""
    return _unlimited_like(folder, dtype, seed, {}, unlimited_hub_config)


def _unlimited_like(
    folder: Path, dtype: str, seed: int, text: dict, to_hub: Callable[[dict], dict]
) -> Path:
    """An ``UnlimitedOcrForConditionalGeneration`` (``text``: text config overrides) in
    ``folder/hf`` and ``folder/hub`` with ``to_hub`` of its config.json."""
    import torch
    from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

    hf, hub = folder / "hf", folder / "hub"
    hub.mkdir(parents=True)
    vocab = _bpe_tokenizer(hub, "gpt-2")
    cfg = UnlimitedOcrConfig(
        vision_config={"sam_config": U_SAM, "encoder_config": U_CLIP},
        text_config={
            **U_TEXT,
            "vocab_size": vocab,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
            "sliding_window": 128,
            **text,
        },
        image_token_id=vocab - 1,
    )
    model = UnlimitedOcrForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(hf, safe_serialization=True)
    for f in hub.iterdir():
        shutil.copy(f, hf / f.name)
    (hf / "preprocessor_config.json").write_text(json.dumps(MEAN_STD))
    shutil.copy(hf / "model.safetensors", hub / "model.safetensors")
    hf_cfg = json.loads((hf / "config.json").read_text())
    (hub / "config.json").write_text(json.dumps(to_hub(hf_cfg), indent=2))
    (hub / "processor_config.json").write_text(json.dumps(
        {"processor_class": "DeepseekVLV2Processor", "patch_size": 16, "downsample_ratio": 4,
         "normalize": True, **MEAN_STD}))  # fmt: skip
    return hub


# DeepSeek-OCR (1): the Hub's remote code is Unlimited-OCR's computation (the same SAM +
# CLIP-L towers, projector, newline and separator rows) with a full-attention text and
# at most 9 tiles; transformers 5.24 has no class of its own, so the tiny checkpoint is an
# Unlimited-OCR model with every text layer ``full_attention`` (its sliding window then
# unused) and given DeepSeek-OCR's Hub config.


def deepseek_ocr1_hub_config(hf_cfg: dict) -> dict:
    """transformers' (full-attention) Unlimited-OCR config.json -> DeepSeek-OCR's Hub
    config (``deepseek-ai/DeepSeek-OCR``): ``DeepseekOCRForCausalLM``, the text under
    ``language_config`` naming ``DeepseekV2ForCausalLM``, no sliding window."""
    out = unlimited_hub_config(hf_cfg)
    out["architectures"] = ["DeepseekOCRForCausalLM"]
    del out["language_config"]["sliding_window_size"]
    return out


def deepseek_ocr1(folder: Path, *, dtype: str = "bfloat16", seed: int = 73) -> Path:
    """As :func:`unlimited_ocr`, with DeepSeek-OCR (1)'s text attention and Hub config."""
    layers = U_TEXT["num_hidden_layers"]
    text = {"layer_types": ["full_attention"] * layers}
    return _unlimited_like(folder, dtype, seed, text, deepseek_ocr1_hub_config)
