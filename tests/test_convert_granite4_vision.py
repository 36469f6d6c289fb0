"""Granite 4 Vision (``granite4_vision`` projector, ``granite`` text) against llama.cpp.

A tiny seeded ``Granite4VisionForConditionalGeneration`` (tests/support/vlm_models.py:
a 6-layer SigLIP tower, two layerwise and four spatial Window Q-Former projectors, a
6-layer Granite text model):

* our projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32, f16,
  bf16 and q8_0 (the projectors renumbered into blocks by the text layer they feed),
  and the text file beside it too (with ``granite.deepstack_mapping``);
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36, which has the
  ``granite4_vision`` graph and anyres tiling) loads ours with our text file and encodes
  an image into what transformers' ``get_image_features`` gives, every projector's
  features side by side -- but for a deepstack pair with a vision layer counted from the
  start, which mtmd reads one layer later (see the test).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both


@pytest.fixture(scope="module")
def g4v(tmp_path_factory) -> Path:
    """The tiny Granite 4 Vision; the reference's projector at each type and text f16,
    and ours (``ref-*`` / ``ours-*`` beside the model folder)."""
    root = tmp_path_factory.mktemp("granite4-vision")
    src = build("granite4_vision", root / "model")
    convert_both(src, root)
    return src


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(g4v, t):
    root = g4v.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_cli_writes_both(g4v, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the same two files as the API."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(g4v), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    ref = (g4v.parent / "ref-mmproj-q8_0.gguf").read_bytes()
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == ref
    assert dst.read_bytes() == (g4v.parent / "ours-text-q8_0.gguf").read_bytes()


def test_projector_contents(g4v):
    """Guard against a vacuous pass: the projector blocks follow the text layers they
    feed, and the text file says which layer takes which."""
    from weightsmith.gguf import read

    root = g4v.parent
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["clip.projector_type"] == "granite4_vision"
    assert md["clip.vision.feature_layer"] == [5, 2, 5, 5, 5, 5]
    assert md["clip.vision.projector.spatial_offsets"] == [-1, -1, 0, 1, 2, 3]
    assert md["clip.vision.projector.query_side"] == 2
    assert md["clip.vision.projector.window_side"] == 4
    assert md["clip.vision.image_grid_pinpoints"] == [64, 64, 128, 64]
    assert {f"v.proj_blk.{i}.query" for i in range(6)} <= names and "v.image_newline" in names
    with read(root / "ours-text-f16.gguf") as f:
        assert f.metadata["granite.deepstack_mapping"] == [-1, 1, 2, 3, 4, 5]
        assert not any(t.name.startswith("v.") or "proj" in t.name for t in f.tensors)


def test_text_back_to_hf(g4v, tmp_path):
    """The ``granite`` text file (its ``deepstack_mapping`` row aside) converts back to a
    GraniteForCausalLM folder that transformers loads, with the text logits of the
    original model (no image: nothing injected) exactly."""
    import torch
    from transformers import AutoModelForCausalLM, Granite4VisionForConditionalGeneration

    from weightsmith.convert import gguf_to_hf

    gguf_to_hf(g4v.parent / "ours-text-f32.gguf", tmp_path / "hf")
    assert "deepstack_layer_map" not in (tmp_path / "hf" / "config.json").read_text()
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    orig = Granite4VisionForConditionalGeneration.from_pretrained(g4v, dtype=torch.float32)
    assert type(back).__name__ == "GraniteForCausalLM"
    ids = torch.tensor([[1, 5, 9, 30, 100, 7]])
    with torch.no_grad():
        a, b = back(ids).logits, orig.eval()(input_ids=ids).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def _hf_features(folder: Path, img: np.ndarray) -> np.ndarray:
    """transformers' projector features of a 64 x 64 image, concatenated in block order
    (by text layer) as mtmd lays them side by side: the base image and its one anyres
    tile (the 64 x 64 pinpoint: no resize), normalised by the processor's mean and std,
    each 4 x 4 token grid packed with an image_newline after each row of the tile's."""
    import torch
    from transformers import Granite4VisionForConditionalGeneration

    m = Granite4VisionForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    px = torch.from_numpy((img.astype(np.float32) / 255 - 0.5) / 0.5).permute(2, 0, 1)
    with torch.no_grad():
        out = m.model.get_image_features(torch.stack([px, px])[None], torch.tensor([[64, 64]]))
    feats = [f[0] for _, f in sorted(out.deepstack_features, key=lambda x: x[0])]
    return torch.cat(feats, -1).numpy()


def test_llama_cpp_encodes_image(g4v, tmp_path):
    """mtmd's 36 tokens (16 of the base image, 4 rows of 4 + image_newline of the tile)
    x 6 projectors (1536 = 6 x 256: the text input width) against transformers'.  Blocks
    0 and 2-5 read vision layer -1: equal within 2.0e-4 of the scale (3.0).  Block 1
    reads ``deepstack_layer_map`` vision layer 2: the reference writes 2 as it is and
    mtmd takes the output of the tower's layer 2 counted from 0, i.e. transformers'
    ``hidden_states[3]`` (whose 0 is the embeddings): that block is transformers' block
    on a config saying 3 (measured: 0.20 of the scale off with 2, 2.0e-4 with 3).  A negative vision
    layer (``-1``) means the same in both."""
    import json
    import shutil

    root = g4v.parent
    img = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    want = _hf_features(g4v, img)
    assert got.shape == want.shape == (36, 6 * 256), (got.shape, want.shape)
    scale = float(np.abs(want).max())
    blocks = [slice(b * 256, (b + 1) * 256) for b in range(6)]
    for b in (0, 2, 3, 4, 5):
        assert np.abs(got[:, blocks[b]] - want[:, blocks[b]]).max() < 1e-3 * scale, b
    assert np.abs(got[:, blocks[1]] - want[:, blocks[1]]).max() > 1e-2 * scale
    shifted = tmp_path / "model"
    shutil.copytree(g4v, shifted)
    cfg = json.loads((shifted / "config.json").read_text())
    assert cfg["deepstack_layer_map"][1] == [2, 1]
    cfg["deepstack_layer_map"][1] = [3, 1]
    (shifted / "config.json").write_text(json.dumps(cfg))
    want = _hf_features(shifted, img)
    assert np.abs(got - want).max() < 1e-3 * scale
