"""Run as a script, in a subprocess whose PYTHONPATH starts with the timm oracle's site
folder (``gemma3n_vlm.timm_env``): builds the vision and audio towers of a tiny seeded
Gemma3nForConditionalGeneration with transformers 5 (its vision tower is timm's
MobileNetV5, which only timm builds) and computes transformers' image features.

    gemma3n_timm_oracle.py TEXT_CONFIG_JSON OUT_DIR SEED PIXELS_NPY FEATURES_NPY
        OUT_DIR/config.json (transformers' own), OUT_DIR/towers.safetensors (the
        towers and embedders, ``model.*`` as the Hub names them, float32), and
        ``get_image_features(pixels).pooler_output`` in FEATURES_NPY

Never imported by the test process: timm and torchvision stay out of it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def _torchvision_without_ops() -> None:
    """PyPI's torchvision 0.28 wheel is a CUDA build: its C ops library needs
    libtorch_cuda, so it does not load beside the CPU torch and torchvision falls back to
    Python (``extension._has_ops()`` False) -- except that its ``_meta_registrations``
    registers fake kernels for ``nms`` / ``qnms`` without checking.  Declaring those two
    schemas lets it import; nothing here calls them (timm imports torchvision for
    ``FrozenBatchNorm2d`` and FX helpers)."""
    for op in ("nms", "qnms"):
        torch.library.define(
            f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
        )


#: a MobileNetV5 of the 300M encoder's block kinds (edge residual; universal inverted
#: residual with both, one or no depthwise convolutions; multi-query attention with and
#: without the strided K/V), four stages, 8-16 channels; a stage ends with a residual
#: block (timm reads its feature info there)
ARCH_DEF = [
    ["er_r1_k3_s2_e4_c8", "er_r1_k3_s1_e4_c8"],
    ["uir_r1_a3_k5_s2_e6_c16", "uir_r1_a5_k0_s1_e4_c16"],
    ["uir_r1_a5_k5_s2_e4_c16", "mqa_r1_k3_h2_v2_s1_d8_c16", "uir_r1_a0_k0_s1_e1_c16"],
    ["uir_r1_a5_k5_s2_e4_c16", "mqa_r1_k3_h2_s1_d8_c16", "uir_r1_a0_k0_s1_e2_c16"],
]


def build(text_config: Path, out: Path, seed: int, pixels: Path, features: Path) -> None:
    """The towers and embedders as Gemma3nModel makes them (its text model is not built:
    only its width reaches the embedders), seeded; then ``get_image_features`` of
    ``pixels`` through transformers' own method."""
    import numpy as np
    from safetensors.torch import save_file
    from timm.models._efficientnet_builder import decode_arch_def
    from torch import nn
    from transformers import AutoModel, Gemma3nConfig
    from transformers.models.gemma3n.modeling_gemma3n import (
        Gemma3nModel,
        Gemma3nMultimodalEmbedder,
    )

    text = json.loads(text_config.read_text())
    blocks = json.loads(json.dumps(decode_arch_def(ARCH_DEF)))
    vision = {"model_type": "gemma3n_vision", "architecture": "mobilenetv5_300m_enc",
              "model_args": {"block_args": blocks, "stem_size": 8}}  # fmt: skip
    audio = {"model_type": "gemma3n_audio", "hidden_size": 32, "input_feat_size": 16,
             "conf_num_hidden_layers": 2, "conf_num_attention_heads": 2,
             "sscp_conv_channel_size": [8, 4], "conf_conv_kernel_size": 3}  # fmt: skip
    cfg = Gemma3nConfig(text_config=text, vision_config=json.loads(json.dumps(vision)),
                        audio_config=audio, architectures=["Gemma3nForConditionalGeneration"])  # fmt: skip
    torch.manual_seed(seed)
    holder = nn.Module()
    holder.config = cfg
    holder.vision_tower = AutoModel.from_config(cfg.vision_config)
    holder.audio_tower = AutoModel.from_config(cfg.audio_config)
    holder.embed_vision = Gemma3nMultimodalEmbedder(cfg.vision_config, cfg.text_config)
    holder.embed_audio = Gemma3nMultimodalEmbedder(cfg.audio_config, cfg.text_config)
    holder.eval()
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, p in holder.state_dict().items():
        if p.is_floating_point():
            # random everywhere (timm's 1e-5 layer scales would hide every block)
            p = torch.randn(p.shape, generator=g) * (0.5 if p.ndim > 1 else 0.2)
            if name.endswith("norm.weight") or ".bn" in name:
                p = p + 1.0
        sd["model." + name] = p.contiguous()
    holder.load_state_dict({k.removeprefix("model."): v for k, v in sd.items()})
    out.mkdir(parents=True, exist_ok=True)
    # timm's block builder adds callables to the block dicts it is given: save the originals
    cfg.vision_config.model_args = json.loads(json.dumps(vision["model_args"]))
    cfg.save_pretrained(out)
    save_file(sd, out / "towers.safetensors", metadata={"format": "pt"})
    x = torch.from_numpy(np.load(pixels))
    with torch.no_grad():
        feats = Gemma3nModel.get_image_features(holder, x).pooler_output
    np.save(features, feats[0].numpy())


if __name__ == "__main__":
    _torchvision_without_ops()
    build(
        Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
    )
