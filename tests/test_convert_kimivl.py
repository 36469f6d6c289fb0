"""Kimi-VL (``KimiVLForConditionalGeneration``, projector type ``kimivl``): a tiny
checkpoint in the Hub's layout assembled from the Kimi-K2.5 test model's weights
(a single-frame MoonViT3d is Kimi-VL's MoonViT: tests/support/remote_layouts.py).

Ours is the reference's projector byte for byte at f32/f16/bf16/q8_0, the text too.
mtmd 0.3.36's ``kimivl`` graph does not compute Kimi-VL's features: it rotates the
stored (interleaved) Q/K pairs as split halves and resizes the position table
bilinearly (Kimi: bicubic).  Pinned: on an image of the table's own size (512 x 512,
no resize) the file as written misses transformers' features by several times the
tolerance the ``kimik25`` graph meets, and the same file with the Q/K rows reordered
the way Kimi-K2.5's converter does meets it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.remote_layouts import kimivl
from support.vlm_models import kimik25
from test_convert_kimik25 import TOL, _hf_image_features
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def kvl(tmp_path_factory):
    """``kimi`` (the Kimi-K2.5 folder transformers loads), ``kimivl`` (the same weights
    as Kimi-VL's), the reference's and our files (``ref-*`` / ``ours-*``)."""
    root = tmp_path_factory.mktemp("kimivl")
    src = kimivl(kimik25(root / "kimi"), root / "kimivl")
    convert_both(src, root)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_kimivl_same_as_reference(kvl, t):
    _same(kvl / f"ours-mmproj-{t}.gguf", kvl / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(kvl / "ours-text-f16.gguf", kvl / "ref-text-f16.gguf")


def test_kimivl_contents(kvl):
    """Guard against a vacuous pass: Q/K/V split, the table flattened, Kimi-VL's names."""
    from weightsmith.gguf import read

    with read(kvl / "ours-mmproj-f32.gguf") as f:
        md = f.metadata
        types = {t.name: t.shape for t in f.tensors}
    assert md["clip.projector_type"] == "kimivl"
    assert types["v.position_embd.weight"] == (64 * 64, 64)
    assert types["v.blk.0.attn_q.weight"] == (64, 64) and "v.blk.0.attn_qkv.weight" not in types
    assert types["mm.1.weight"] == (256, 256)
    cfg = json.loads((kvl / "kimivl" / "config.json").read_text())
    assert cfg["architectures"] == ["KimiVLForConditionalGeneration"]


def _split_rope_copy(src, dst):
    """``src``'s Kimi-VL folder with the Q/K thirds of each ``wqkv`` reordered per head
    from interleaved to split 2-D RoPE (Kimi-K2.5's converter's reorder)."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from weightsmith.convert.arch.kimik25 import split_rope

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    sd = load_file(src / "model.safetensors")
    v = {"num_attention_heads": 2}
    sd = {k: split_rope(x, v, {}) if ".wqkv." in k else x for k, x in sd.items()}
    save_file(sd, dst / "model.safetensors", metadata={"format": "pt"})


def test_kimivl_mtmd_rope_order(kvl, tmp_path):
    """512 x 512 (the 64 x 64 table, no resize): mtmd on the file as written misses
    transformers' features by > 2x the tolerance (measured 2.5e-3 of scale); with the
    Q/K rows reordered it is within it (measured 4.2e-4)."""
    img = np.random.default_rng(7).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    want = _hf_image_features(kvl / "kimi", img)
    scale = max(float(np.abs(want).max()), 1.0)
    got = _mtmd_embeddings(kvl / "ours-text-f32.gguf", kvl / "ours-mmproj-f32.gguf", img)
    assert got.shape == want.shape == (32 * 32, 256)
    assert np.abs(got - want).max() > 2 * TOL * scale
    _split_rope_copy(kvl / "kimivl", tmp_path / "split")
    hf_to_gguf(tmp_path / "split", tmp_path / "t.gguf", "f32", mmproj=tmp_path / "p.gguf")
    got = _mtmd_embeddings(kvl / "ours-text-f32.gguf", tmp_path / "p.gguf", img)
    assert np.abs(got - want).max() <= TOL * scale
