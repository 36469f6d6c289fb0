"""A tiny seeded Gemma3nForConditionalGeneration (MobileNetV5 vision, conformer audio,
the ``gemma3n`` text of tests/support/hf_models.py) and transformers' image features.

transformers 5.24 builds Gemma 3n's vision tower only through timm, and timm imports
torchvision; neither may enter the shared environment (``pip install timm`` there pulls
a CUDA torch over the pinned CPU one).  scripts/test.sh installs both, without
dependencies, into a folder of their own (the timm oracle); only the subprocesses of
support/gemma3n_timm_oracle.py put it on their path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

TIMM_VERSION = "1.0.31"
_SCRIPT = Path(__file__).with_name("gemma3n_timm_oracle.py")
#: the image side transformers and mtmd are given (mtmd pools MobileNetV5's features to
#: 16 x 16 = 256 tokens; the reference's patch size is image_size // 256)
IMAGE_SIZE = 512


def timm_site() -> Path:
    root = (
        os.environ.get("WEIGHTSMITH_TIMM_ORACLE") or Path.home() / ".cache/weightsmith/timm-oracle"
    )
    return Path(root) / TIMM_VERSION / "site"


def timm_env() -> dict[str, str]:
    """The environment of a subprocess that imports timm (and torchvision)."""
    site = os.pathsep.join([str(timm_site()), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": site, "HF_HUB_OFFLINE": "1"}


#: the sub-sampler's group-norm scales, which the pinned reference cannot name
SSCP_NORMS = tuple(f"model.audio_tower.subsample_conv_projection.conv_{i}.norm.weight"
                   for i in (0, 1))  # fmt: skip


def image(seed: int = 0) -> np.ndarray:
    """A seeded HWC uint8 image of IMAGE_SIZE."""
    return np.random.default_rng(seed).integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)


def _preprocessor(folder: Path) -> None:
    pre = {"image_processor_type": "SiglipImageProcessor", "do_resize": True,
           "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": False, "image_mean": [0.5] * 3,
           "image_std": [0.5] * 3, "image_seq_length": 256}  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))


def build_gemma3n_vlm(root: Path, *, seed: int = 61) -> dict:
    """Two Gemma3nForConditionalGeneration folders sharing seeded towers (a MobileNetV5 of
    the 300M encoder's block kinds, a 2-layer conformer), without the sub-sampler's norm
    scales (SSCP_NORMS, kept aside in ``sscp_norms``):

    * ``hub`` -- the Hub's layout: ``model.language_model.*`` (the ``gemma3n`` text
      builder's, 64 wide, with the KV-shared layers' K/V the runtime needs) beside
      ``model.vision_tower.timm_model.*``, ``model.audio_tower.*`` and the embedders
      (their output projections re-drawn at the text width);
    * ``wide`` -- the towers alone under a text config 2048 wide (MobileNetV5's width:
      mtmd 0.3.36 runs only such a projector), with ``features``: transformers'
      ``get_image_features`` of :func:`image` (pixels / 255: MobileNetV5 takes [0, 1]).
    """
    from safetensors.numpy import load_file, save_file

    from support.hf_models import BUILDERS

    if not (timm_site() / "timm").is_dir():
        raise RuntimeError(
            f"the timm oracle is not installed in {timm_site()}: run scripts/test.sh"
        )
    text = BUILDERS["gemma3n"](root / "text", dtype="float32")
    text_cfg = json.loads((text / "config.json").read_text())
    text_cfg.pop("architectures", None)
    wide_cfg = root / "wide-text-config.json"
    wide_cfg.write_text(json.dumps({**text_cfg, "hidden_size": 2048}))
    towers, pixels, feats = root / "towers", root / "pixels.npy", root / "features.npy"
    np.save(pixels, (image().astype(np.float32) / 255.0).transpose(2, 0, 1)[None])
    args = [str(wide_cfg), str(towers), str(seed), str(pixels), str(feats)]
    proc = subprocess.run([sys.executable, str(_SCRIPT), *args], capture_output=True,
                          text=True, env=timm_env(), timeout=600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"timm oracle failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    tw = load_file(towers / "towers.safetensors")
    norms = {k: tw.pop(k) for k in SSCP_NORMS}
    wide = root / "wide"
    wide.mkdir()
    save_file(tw, wide / "model.safetensors", metadata={"format": "pt"})
    shutil.copy(towers / "config.json", wide / "config.json")
    _preprocessor(wide)

    hub = root / "hub"
    hub.mkdir()
    rng = np.random.default_rng(seed + 1)
    width = text_cfg["hidden_size"]
    for k in ("model.embed_vision.embedding_projection.weight",
              "model.embed_audio.embedding_projection.weight"):  # fmt: skip
        tw[k] = (rng.standard_normal((width, tw[k].shape[1])) * 0.05).astype(np.float32)
    sd = {"model.language_model." + k.removeprefix("model."): v
          for k, v in load_file(text / "model.safetensors").items()}  # fmt: skip
    save_file({**sd, **tw}, hub / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((towers / "config.json").read_text())
    cfg["text_config"] = {**cfg["text_config"], **text_cfg}
    (hub / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in text.iterdir():
        if f.name.startswith("tokenizer") or f.name == "generation_config.json":
            shutil.copy(f, hub / f.name)
    _preprocessor(hub)
    out = {"hub": hub, "wide": wide, "features": np.load(feats), "sscp_norms": norms}
    for d in (text, towers):
        shutil.rmtree(d)
    return out


def wide_text(folder: Path, width: int = 2048) -> Path:
    """A one-layer Llama of ``width`` (heads of 32): the text model mtmd 0.3.36 pairs
    with a Gemma 3n projector, which it accepts only beside a text as wide as the
    projector's *vision* width (it compares the text width with ``mm.input_projection``'s
    first dimension, 2048 in every MobileNetV5 tower); mtmd reads only the width and the
    vocabulary from it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from support.hf_models import _random_init, _save, train_spm

    vocab = train_spm(folder)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=32, max_position_embeddings=256, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    _random_init(model, 62)
    return _save(model, folder, "float16")
