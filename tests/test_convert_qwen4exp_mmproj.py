"""Qwen4-Exp (``Qwen4ExpForConditionalGeneration``) with ``--mmproj`` against llama.cpp's
converter and runtime.

The tiny model (tests/support/vlm_models.py ``qwen4exp_vl``): the Qwen3-VL tower without
deepstack over the Qwen4-Exp text model of tests/test_convert_archs.py (whose harness
covers the text: ``qwen4exp``).  Checked here:

* the projector GGUF (the reference's ``Qwen4ExpVisionModel``: Qwen3-VL's, projector
  type ``qwen3vl_merger``) is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at
  f32, f16, bf16 and q8_0, and the text GGUF (``qwen4exp``) written beside it to the
  reference's at f16;
* the CLI's ``convert MODEL_DIR out.gguf --mmproj`` writes the same two files;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text model and encodes an
  image into transformers' ``get_image_features``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_mmproj import TYPES, _image, _mtmd_embeddings, _same, convert_both

# mtmd's image embeddings vs transformers' features, as a fraction of their scale
TOL = 1e-3


@pytest.fixture(scope="module")
def q4(tmp_path_factory):
    """The model folder; the reference's text f16 and projectors; ours."""
    root = tmp_path_factory.mktemp("qwen4exp")
    src = build("qwen4exp_vl", root / "model")
    convert_both(src, root)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(q4, t):
    _same(q4 / f"ours-mmproj-{t}.gguf", q4 / f"ref-mmproj-{t}.gguf")


def test_text_same_as_reference(q4):
    _same(q4 / "ours-text-f16.gguf", q4 / "ref-text-f16.gguf")


def test_projector_contents(q4):
    """Qwen3-VL's projector type and tower, no deepstack; the text file is qwen4exp with
    the hyper-connection and indexer tensors."""
    from weightsmith.gguf import read

    with read(q4 / "ours-mmproj-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["clip.projector_type"] == "qwen3vl_merger"
    assert md["clip.vision.block_count"] == 4
    assert not any(".deepstack" in n for n in names)
    assert {"v.patch_embd.weight", "v.patch_embd.weight.1", "mm.0.weight"} <= names
    with read(q4 / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "qwen4exp"
    assert md["qwen4exp.hyper_connection.count"] == 2
    assert {
        "output_hc_up.weight",
        "blk.1.indexer.q_proj.weight",
        "blk.0.hc_ffn_inject.weight",
    } <= names


def test_cli_writes_both(q4, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "model.gguf"
    src = q4 / "model"
    assert main(["convert", str(src), str(dst), "--type", "f16", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-model.gguf").read_bytes() == (
        q4 / "ours-mmproj-f16.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (q4 / "ours-text-f16.gguf").read_bytes()


def _hf_image_features(folder, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (its image processor, unresized: flattened
    patches and their grid)."""
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    out = AutoImageProcessor.from_pretrained(folder)(
        images=[img], return_tensors="pt", do_resize=False
    )
    with torch.no_grad():
        f = m.get_image_features(pixel_values=out["pixel_values"],
                                 image_grid_thw=out["image_grid_thw"])  # fmt: skip
    f = getattr(f, "pooler_output", f)
    if isinstance(f, (list, tuple)):
        f = torch.cat(list(f), 0)
    return f.reshape(-1, f.shape[-1]).float().numpy()


def test_llama_cpp_encodes_image(q4):
    img = _image(64)
    got = _mtmd_embeddings(q4 / "ours-text-f32.gguf", q4 / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(q4 / "model", img)
    assert got.shape == want.shape == (16, 64)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()
    cfg = json.loads((q4 / "model" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen4ExpForConditionalGeneration"]
