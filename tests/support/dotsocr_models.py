"""A tiny dots.ocr (``DotsOCRForCausalLM``) folder in the Hub's layout, built by hand.

dots.ocr is remote code (``modeling_dots_ocr.py`` / ``modeling_dots_vision.py`` on the
Hub; transformers 5.24 has no ``dots_ocr`` model type), so no transformers class builds
it.  Its text half *is* transformers' ``Qwen2ForCausalLM`` (the remote class subclasses
it and adds ``vision_tower``), so the text is built and saved by transformers; the vision
tower is seeded tensors under the Hub checkpoint's names (learned from llama.cpp's tensor
map and mtmd's loader, and published ports of the remote code):

* ``vision_tower.patch_embed.patchifier.proj`` (Conv2d, with bias) and ``.norm`` (RMS);
* ``vision_tower.blocks.N.{norm1,norm2}`` (RMS), ``attn.qkv`` / ``attn.proj`` (no bias:
  ``use_bias`` false), ``mlp.fc1`` / ``fc3`` / ``fc2`` (SwiGLU gate / up / down);
* ``vision_tower.post_trunk_norm`` (RMS), ``vision_tower.merger.ln_q`` (LayerNorm) and
  ``merger.mlp.0`` / ``mlp.2`` (the 2 x 2 merged patches through GELU to the text width).

``config.json`` is the Hub's (its top-level Qwen2 fields, ``vision_config`` with
``embed_dim`` = ``hidden_size``, as on the Hub: 1536 both), ``preprocessor_config.json``
the Hub's Qwen2-VL image processor settings but the pixel bounds (32 x 32 to 64 x 64 px,
8 px patches).  The tokenizer is GPT-2's BPE (llama.cpp's ``ggml-vocab-gpt-2.gguf``; the
Hub's is Qwen2's, 151k tokens: a third of the size keeps the files small).
"""

from __future__ import annotations

import json
from pathlib import Path

from support.hf_models import _bpe_tokenizer, _random_init

#: the tiny tower: width 64 (= the text width, as the Hub's 1536 = 1536), 4 heads of 16,
#: 3 blocks (the reference numbers ``merger.mlp.{bid}`` only below the block count: with 2
#: it cannot map ``merger.mlp.2``)
VISION = {
    "embed_dim": 64, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_channels": 3, "patch_size": 8, "post_norm": True,
    "rms_norm_eps": 1e-5, "spatial_merge_size": 2, "temporal_patch_size": 1,
    "use_bias": False, "attn_implementation": "flash_attention_2", "init_merger_std": 0.02,
    "initializer_range": 0.02, "is_causal": False,
}  # fmt: skip
#: the Hub's image processor (Qwen2VLImageProcessor, CLIP's mean / std), tiny bounds
PREPROCESSOR = {
    "min_pixels": 32 * 32, "max_pixels": 64 * 64, "patch_size": 8, "temporal_patch_size": 1,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "DotsVLProcessor",
}  # fmt: skip


def hub_config(vocab: int) -> dict:
    """The Hub's config.json, tiny: a 2-layer Qwen2 text (QKV bias, 4 heads, 2 KV heads,
    untied head) and :data:`VISION`."""
    return {
        "architectures": ["DotsOCRForCausalLM"], "model_type": "dots_ocr",
        "auto_map": {"AutoConfig": "configuration_dots.DotsOCRConfig",
                     "AutoModelForCausalLM": "modeling_dots_ocr.DotsOCRForCausalLM"},
        "attention_bias": True, "attention_dropout": 0.0, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
        "max_position_embeddings": 256, "max_window_layers": 2, "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 256,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": vocab, "image_token_id": 50254, "video_token_id": 50255,
        "bos_token_id": 50256, "eos_token_id": 50256,
        "vision_config": dict(VISION),
    }  # fmt: skip


def vision_tensors(seed: int) -> dict:
    """The tower's tensors under the Hub's names (torch, float32), seeded: weights about
    N(0, 0.05), norms about 1, biases about 0."""
    import torch

    g = torch.Generator().manual_seed(seed)
    e, f, p = VISION["embed_dim"], VISION["intermediate_size"], VISION["patch_size"]
    m = e * VISION["spatial_merge_size"] ** 2
    shapes = {
        "patch_embed.patchifier.proj.weight": (e, 3, p, p),
        "patch_embed.patchifier.proj.bias": (e,),
        "patch_embed.patchifier.norm.weight": (e,),
    }
    for b in range(VISION["num_hidden_layers"]):
        shapes |= {
            f"blocks.{b}.norm1.weight": (e,), f"blocks.{b}.attn.qkv.weight": (3 * e, e),
            f"blocks.{b}.attn.proj.weight": (e, e), f"blocks.{b}.norm2.weight": (e,),
            f"blocks.{b}.mlp.fc1.weight": (f, e), f"blocks.{b}.mlp.fc3.weight": (f, e),
            f"blocks.{b}.mlp.fc2.weight": (e, f),
        }  # fmt: skip
    shapes |= {
        "post_trunk_norm.weight": (e,), "merger.ln_q.weight": (e,), "merger.ln_q.bias": (e,),
        "merger.mlp.0.weight": (m, m), "merger.mlp.0.bias": (m,),
        "merger.mlp.2.weight": (VISION["hidden_size"], m),
        "merger.mlp.2.bias": (VISION["hidden_size"],),
    }  # fmt: skip
    out = {}
    for name, shape in shapes.items():
        x = torch.randn(shape, generator=g) * 0.05
        if name.endswith("norm.weight") or ".norm1." in name or ".norm2." in name:
            x = x + 1.0
        if name == "merger.ln_q.weight":
            x = x + 1.0
        out["vision_tower." + name] = x
    return out


def dots_ocr(folder: Path, *, seed: int = 74) -> Path:
    """The tiny model in bfloat16 (the Hub's dtype), one ``model.safetensors``."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    hub = hub_config(vocab)
    text = {k: v for k, v in hub.items() if k not in ("vision_config", "auto_map")}
    model = Qwen2ForCausalLM(Qwen2Config(**{**text, "model_type": "qwen2"}))
    _random_init(model, seed)
    tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}
    tensors |= vision_tensors(seed + 1)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in sorted(tensors.items())}
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hub, indent=2))
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 50256, "eos_token_id": 50256, "transformers_version": "4.51.0"})
    )
    (folder / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    return folder
