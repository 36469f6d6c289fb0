"""Janus-Pro and InternVL projectors (``--mmproj``) against llama.cpp's converter and
runtime, as tests/test_convert_mmproj.py does for the others:

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32,
  f16, bf16 and q8_0, and the text GGUF beside it to ``convert_hf_to_gguf.py``;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text file and encodes an
  image into the features transformers computes for the same pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_mmproj import TYPES, _image, _mtmd_embeddings, _same
from test_convert_mmproj import convert_both as _convert_both

ARCHS = ["janus"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Per arch: the model folder, with the reference's files and ours beside it."""
    out = {}
    for arch in ARCHS:
        root = tmp_path_factory.mktemp(arch)
        out[arch] = build(arch, root / "model")
        _convert_both(out[arch], root)
    return out


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_projector_same_as_reference(folders, arch, t):
    root = folders[arch].parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("arch", ARCHS)
def test_text_same_as_reference(folders, arch):
    root = folders[arch].parent
    _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_janus_contents(folders):
    """Guard against a vacuous pass: the aligner is mm.0 / mm.1, the MLP width derived
    from mlp_ratio, no generation or text tensor in the projector."""
    from weightsmith.gguf import read

    root = folders["janus"].parent
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "janus_pro" and md["clip.use_gelu"] is True
    assert md["clip.vision.feed_forward_length"] == 128  # 64 x mlp_ratio 2.0
    assert types["mm.0.weight"] == ("Q8_0", (256, 64)) and types["mm.1.weight"][0] == "Q8_0"
    assert types["v.blk.1.attn_out.weight"][0] == "Q8_0"
    assert all(n.startswith(("v.", "mm.")) for n in types)
    with read(root / "ours-text-f16.gguf") as f:
        assert f.metadata["general.architecture"] == "llama"
        names = {t.name for t in f.tensors}
    assert "output.weight" in names and len(names) == 21  # no vision/generation tensor


def _hf_image_features(folder: Path, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (HWC uint8, already the tower's size): the
    pixels normalised as the image processor does, then ``get_image_features``."""
    import json

    import torch
    from transformers import AutoModelForImageTextToText

    pre = json.loads((folder / "preprocessor_config.json").read_text())
    x = (img.astype(np.float32) / 255.0 - np.float32(pre["image_mean"])) / np.float32(
        pre["image_std"]
    )
    pixels = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)[None]))
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        # Janus keeps it on the inner model (JanusModel), not the generation class
        f = m.model.get_image_features(pixel_values=pixels)
    f = getattr(f, "pooler_output", f)
    return f.reshape(-1, f.shape[-1]).float().numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_encodes_image(folders, arch):
    root = folders[arch].parent
    img = _image(64)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(folders[arch], img)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()
