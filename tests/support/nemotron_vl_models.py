"""Hand-built Nemotron Nano VL (``NemotronH_Nano_VL_V2``) projector folders.

The checkpoint is remote code on the Hub (nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16):
a RADIO v2.5-h vision tower (``vision_model.radio_model.model.*``: a ``patch_generator``
with a linear ``embedder``, a ``pos_embed`` table without ``.weight`` and the register
tokens ``cls_token.token``; ``blocks.{i}`` with ``norm1``, ``attn.qkv``, ``attn.proj``,
``norm2``, ``mlp.fc1``, ``mlp.fc2``), the ``mlp1`` projector (``mlp1.0`` RMSNorm over the
2x2 pixel-shuffled width, ``mlp1.1`` and ``mlp1.3`` linear without bias) and the
NemotronH text under ``language_model.``.  The tensor names are those the reference's
``NemotronNanoV2VLModel`` and gguf-py's tensor map read and mtmd's ``nemotron_v2_vl``
loader asks for.  The config spells the tower the Hub's way: ``vision_config`` names a
timm model (``args.model``) and a patch size, not a width or a depth -- which is why
the reference writes ViT-H's sizes whatever the tensors are.

The text half is a tiny NemotronH folder (tests/support/hf_models.py ``nemotronh``)
moved under ``language_model.`` with its config as ``llm_config``, the tokenizer beside
it.  These folders exist to show that a tiny tower cannot give a consistent projector
file (tests/test_convert_nemotron_vl.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: the image side (config.json's force_image_size) and patch size: a 4x4 grid
IMAGE, PATCH = 64, 16
N_REGISTERS = 8


def nemotron_vl(
    dst: Path, text: Path, *, width: int, layers: int, ffn: int, seed: int = 24
) -> Path:
    """A ``NemotronH_Nano_VL_V2`` folder in ``dst``: the NemotronH folder ``text`` under
    ``language_model.`` and a RADIO tower of ``width``, ``layers`` blocks and an MLP of
    ``ffn``, ``mlp1`` mapping its 2x2-merged width to the text width.  float16, seeded."""
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(seed)

    def rand(*shape: int, base: float = 0.0) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02 + base).astype(np.float16)

    llm = json.loads((text / "config.json").read_text())
    h_text, grid = llm["hidden_size"], IMAGE // PATCH
    pre = "vision_model.radio_model.model."
    sd = {"language_model." + k: v for k, v in load_file(str(text / "model.safetensors")).items()}
    sd |= {
        pre + "patch_generator.embedder.weight": rand(width, 3 * PATCH * PATCH),
        pre + "patch_generator.pos_embed": rand(1, grid * grid, width),
        pre + "patch_generator.cls_token.token": rand(N_REGISTERS, width),
        "mlp1.0.weight": rand(4 * width, base=1.0),
        "mlp1.1.weight": rand(2 * h_text, 4 * width),
        "mlp1.3.weight": rand(h_text, 2 * h_text),
    }
    for i in range(layers):
        b = f"{pre}blocks.{i}."
        sd |= {
            b + "norm1.weight": rand(width, base=1.0), b + "norm1.bias": rand(width),
            b + "attn.qkv.weight": rand(3 * width, width), b + "attn.qkv.bias": rand(3 * width),
            b + "attn.proj.weight": rand(width, width), b + "attn.proj.bias": rand(width),
            b + "norm2.weight": rand(width, base=1.0), b + "norm2.bias": rand(width),
            b + "mlp.fc1.weight": rand(ffn, width), b + "mlp.fc1.bias": rand(ffn),
            b + "mlp.fc2.weight": rand(width, ffn), b + "mlp.fc2.bias": rand(width),
        }  # fmt: skip
    dst.mkdir(parents=True)
    for f in text.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            (dst / f.name).symlink_to(f.resolve())
    save_file(sd, str(dst / "model.safetensors"))
    vision = dict(
        architectures=["RADIOModel"], model_type="radio", patch_size=PATCH,
        max_resolution=2048, preferred_resolution=[IMAGE, IMAGE], version="radio_v2.5-h",
        args=dict(model="vit_huge_patch16_224", register_multiple=N_REGISTERS),
    )  # fmt: skip
    cfg = dict(
        architectures=["NemotronH_Nano_VL_V2"], model_type="NemotronH_Nano_VL_V2",
        downsample_ratio=0.5, force_image_size=IMAGE, patch_size=PATCH,
        projector_hidden_size=2 * h_text, vit_hidden_size=width, ps_version="v2",
        llm_config=llm, vision_config=vision,
    )  # fmt: skip
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst
