"""A tiny Phi-4 reasoning-vision checkpoint (``Phi4ForCausalLMV``) in the Hub's layout.

transformers 5.24 has no class of its own for it (the Hub's is remote code,
``model_type`` ``phi4-siglip``), so the folder is assembled from transformers' parts,
as the Hub's modeling code builds the model:

* the text: a ``Phi3ForCausalLM`` (Phi-4 style: GPT-2 byte-level BPE named
  ``GPT2Tokenizer``, plain RoPE, no sliding window) under ``model.`` / ``lm_head.``;
* the tower: a ``Siglip2VisionModel`` (NaFlex: linear patch embedding over channel-last
  patch pixels, a learned 8 x 8 position table resized to each image's grid) under
  ``model.vision_tower.vision_tower.``, with its last layer, post-norm and pooling head
  present (the model reads ``hidden_states[-2]``; the converter drops them);
* the projector: ``mlp2x_gelu`` (Linear, GELU, Linear) as ``model.mm_projector.0`` /
  ``.2``;
* a hand-written ``config.json`` (the Phi-3 text fields at the top level,
  ``vision_config`` without ``patch_size``, ``min_num_patches`` / ``max_num_patches``)
  and ``preprocessor_config.json`` as the Hub's.

:func:`oracle` rebuilds the tower, projector and text model from the folder in torch.
"""

from __future__ import annotations

import json
from pathlib import Path

from .hf_models import _bpe_tokenizer

PATCH = 16
MIN_PATCHES, MAX_PATCHES = 16, 256
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=2,
              num_patches=64, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")  # fmt: skip
TOWER = "model.vision_tower.vision_tower.vision_model."
MLP = "model.mm_projector."


def phi4v(folder: Path, *, seed: int = 41) -> Path:
    """The folder (bf16 weights, one safetensors file)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Phi3Config, Phi3ForCausalLM, Siglip2VisionConfig, Siglip2VisionModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab = _bpe_tokenizer(folder, "gpt-2")
    tc_path = folder / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text()) if tc_path.is_file() else {}
    tc_path.write_text(json.dumps({**tc, "tokenizer_class": "GPT2Tokenizer"}))
    text_cfg = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                    original_max_position_embeddings=512, rope_theta=250000.0, rms_norm_eps=1e-5,
                    sliding_window=None, tie_word_embeddings=False, bos_token_id=50256,
                    eos_token_id=50256, pad_token_id=None, hidden_act="silu")  # fmt: skip
    text = Phi3ForCausalLM(Phi3Config(**text_cfg))
    tower = Siglip2VisionModel(Siglip2VisionConfig(**VISION, patch_size=PATCH))
    mlp = torch.nn.Sequential(
        torch.nn.Linear(VISION["hidden_size"], text_cfg["hidden_size"]),
        torch.nn.GELU(),
        torch.nn.Linear(text_cfg["hidden_size"], text_cfg["hidden_size"]),
    )
    g = torch.Generator().manual_seed(seed)
    sd: dict = {}
    for prefix, mod in (("", text), (TOWER, tower), (MLP, mlp)):
        for name, p in sorted(mod.state_dict().items()):
            base = 1.0 if p.ndim == 1 and "norm" in name and name.endswith("weight") else 0.0
            sd[prefix + name] = (torch.randn(p.shape, generator=g) * 0.05 + base).to(torch.bfloat16)
    # a larger spread where a tiny model would otherwise hide mistakes: the position
    # table (resized per image) and the projector (its GELU's curvature)
    for k in (TOWER + "embeddings.position_embedding.weight", MLP + "0.weight"):
        sd[k] = (sd[k].float() * 8).to(torch.bfloat16)
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["Phi4ForCausalLMV"],
        "model_type": "phi4-siglip",
        **text_cfg,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "embd_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "initializer_range": 0.02,
        "rope_scaling": None,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "mm_hidden_size": VISION["hidden_size"],
        "mm_projector_type": "mlp2x_gelu",
        "mm_vision_tower": "google/siglip2-so400m-patch16-naflex",
        "image_aspect_ratio": "square",
        "min_num_patches": MIN_PATCHES,
        "max_num_patches": MAX_PATCHES,
        "vision_config": {
            **VISION,
            "model_type": "siglip2_vision_model",
            "num_channels": 3,
            "attention_dropout": 0.0,
        },
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "Siglip2ImageProcessorNoUpscale",
                "patch_size": PATCH,
                "min_num_patches": MIN_PATCHES,
                "max_num_patches": MAX_PATCHES,
                "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5],
                "do_normalize": True,
                "do_rescale": True,
                "do_resize": True,
                "resample": 2,
                "rescale_factor": 1 / 255,
            },
            indent=2,
        )
    )
    return folder


def oracle(folder: Path):
    """``(tower, mlp, text)`` in float32 from the folder: transformers'
    ``Siglip2VisionModel`` and ``Phi3ForCausalLM``, the projector in torch."""
    import torch
    from safetensors.torch import load_file
    from transformers import Phi3Config, Phi3ForCausalLM, Siglip2VisionConfig, Siglip2VisionModel

    cfg = json.loads((folder / "config.json").read_text())
    sd = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}
    vc = {k: v for k, v in cfg["vision_config"].items() if k != "model_type"}
    tower = Siglip2VisionModel(Siglip2VisionConfig(**vc, patch_size=PATCH))
    tower.load_state_dict({k[len(TOWER) :]: v for k, v in sd.items() if k.startswith(TOWER)})
    width = cfg["hidden_size"]
    mlp = torch.nn.Sequential(torch.nn.Linear(cfg["mm_hidden_size"], width), torch.nn.GELU(),
                              torch.nn.Linear(width, width))  # fmt: skip
    mlp.load_state_dict({k[len(MLP) :]: v for k, v in sd.items() if k.startswith(MLP)})
    skip = ("vision_config", "architectures", "model_type", "mm_hidden_size", "mm_projector_type",
            "mm_vision_tower", "image_aspect_ratio", "min_num_patches", "max_num_patches")  # fmt: skip
    text = Phi3ForCausalLM(Phi3Config(**{k: v for k, v in cfg.items() if k not in skip}))
    text.load_state_dict({k: v for k, v in sd.items() if not k.startswith((TOWER, MLP))})
    return tower.float().eval(), mlp.float().eval(), text.float().eval()
