"""The Gemma 4 Unified projector (``gemma4uv`` / ``gemma4ua``) in the ``--mmproj`` file.

A tiny seeded ``Gemma4UnifiedForConditionalGeneration`` (transformers 5's
``gemma4_unified``: no vision or audio encoder, an image is model patches of
2 x 3 = 6 px projected to width 32, audio raw 640-sample frames; both through
``embedding_projection`` into the text width 256).  mtmd hard-codes the pooling of 3 and
the 640-sample frame, so the fixture uses those:

* our projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32, f16,
  bf16 and q8_0, from the API and from ``weightsmith convert DIR out.gguf --mmproj``;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36, which has both graphs)
  loads ours and encodes an image and a waveform into transformers' own
  ``get_image_features`` / ``get_audio_features`` for the same pixels and samples, and
  into exactly what it computes from the reference's file;
* a config without ``audio_config`` is refused with a named error, nothing written (the
  reference asserts one: there is no file to match).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.hf_models import gemma4unified
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

P = 6  # model patch: patch_size 2 x pooling_kernel_size 3 (mtmd's fixed merge)
FRAME = 640  # audio samples per token (mtmd's fixed frame)


@pytest.fixture(scope="module")
def g4u(tmp_path_factory) -> Path:
    """The tiny Unified model; the reference's projector at each type and ours
    (``ref-*`` / ``ours-*`` beside the model folder)."""
    root = tmp_path_factory.mktemp("gemma4-unified-mmproj")
    src = gemma4unified(
        root / "model",
        seed=36,
        vision={"pooling_kernel_size": 3, "mm_posemb_size": 64, "output_proj_dims": 32},
        audio={"audio_embed_dim": FRAME},
    )
    (src / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma4UnifiedImageProcessor", "patch_size": 2,
        "pooling_kernel_size": 3, "max_soft_tokens": 280,
        "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0]}))  # fmt: skip
    convert_both(src, root, text_types=())
    return src


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(g4u, t):
    root = g4u.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")


def test_cli_writes_both(g4u, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj`` (UnknownArchitecture before): the
    reference's projector and our API's text file."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(g4u), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    ref = (g4u.parent / "ref-mmproj-q8_0.gguf").read_bytes()
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == ref
    assert dst.read_bytes() == (g4u.parent / "ours-text-q8_0.gguf").read_bytes()


def test_projector_contents(g4u):
    """Guard against a vacuous pass: both embedders are in the file with the sizes,
    types and layouts the reference's rules give."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(g4u.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.vision.projector_type"] == "gemma4uv"
    assert md["clip.audio.projector_type"] == "gemma4ua"
    assert md["clip.vision.embedding_length"] == 32 and md["clip.vision.patch_size"] == 2
    assert md["clip.vision.block_count"] == 0 and md["clip.vision.feed_forward_length"] == 0
    assert md["clip.audio.embedding_length"] == FRAME and md["clip.audio.block_count"] == 0
    assert md["clip.audio.projection_dim"] == 256 and md["clip.vision.projection_dim"] == 256
    assert types["v.patch_embd.weight"] == ("F32", (32, 3 * P * P))
    assert types["v.position_embd.weight"] == ("F32", (2, 64, 32))
    assert types["v.patch_norm.3.weight"] == ("F32", (32,))
    assert types["mm.input_projection.weight"] == ("Q8_0", (256, 32))
    assert types["mm.a.input_projection.weight"] == ("Q8_0", (256, FRAME))
    assert len(types) == 11

    # the columns (and patch_ln1) reordered channel-last -> channel-first; the positions
    # [posemb, 2, dim] -> [2, posemb, dim]
    hf = {k: v.astype(np.float32) for k, v in load_file(g4u / "model.safetensors").items()
          if not k.startswith("model.language_model.")}  # fmt: skip
    with read(g4u.parent / "ours-mmproj-f32.gguf") as f:
        w = np.array(f.numpy("v.patch_embd.weight"))
        ln1 = np.array(f.numpy("v.patch_norm.1.weight"))
        pe = np.array(f.numpy("v.position_embd.weight"))
    dense = hf["model.vision_embedder.patch_dense.weight"]
    chw = dense.reshape(32, P, P, 3).transpose(0, 3, 1, 2).reshape(32, -1)
    np.testing.assert_array_equal(w, chw)
    assert not np.array_equal(w, dense)
    ln = hf["model.vision_embedder.patch_ln1.weight"]
    np.testing.assert_array_equal(ln1, ln.reshape(P, P, 3).transpose(2, 0, 1).reshape(-1))
    np.testing.assert_array_equal(pe, hf["model.vision_embedder.pos_embedding"].transpose(1, 0, 2))


def _image() -> np.ndarray:
    """A seeded 60 x 48 image: 10 x 8 model patches, inside mtmd's token limits (70..1120)
    and a multiple of the patch, so mtmd does not resize it."""
    return np.random.default_rng(5).integers(0, 256, (60, 48, 3), dtype=np.uint8)


def _pcm() -> np.ndarray:
    """Five and a bit frames of seeded noise (the last frame zero-padded)."""
    return (0.3 * np.random.default_rng(6).standard_normal(5 * FRAME + 100)).astype(np.float32)


def _hf_features(folder: Path, img: np.ndarray, pcm: np.ndarray) -> tuple[np.ndarray, ...]:
    """transformers' image and audio features.  The image processor needs torchvision
    (not installed), so the model patches are cut here as it cuts them: each 6 x 6 patch
    flattened row, column, channel (channel-last), patches in raster order, pixels / 255
    (mean 0, std 1), positions (column, row)."""
    import torch
    from transformers import AutoModelForImageTextToText

    h, w, _ = img.shape
    patches = img.reshape(h // P, P, w // P, P, 3).transpose(0, 2, 1, 3, 4).reshape(-1, P * P * 3)
    row, col = np.divmod(np.arange(patches.shape[0]), w // P)
    pos = np.stack([col, row], -1)
    n = -(-pcm.size // FRAME)
    frames = np.zeros(n * FRAME, np.float32)
    frames[: pcm.size] = pcm
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        pix = torch.from_numpy(patches.astype(np.float32) / 255)[None]
        vis = m.model.get_image_features(pix, torch.from_numpy(pos)[None]).pooler_output[0]
        aud = m.model.get_audio_features(torch.from_numpy(frames.reshape(1, n, FRAME)))
    return vis.numpy(), aud.pooler_output[0].numpy()


def test_llama_cpp_encodes_image_and_audio(g4u):
    """mtmd loads our f32 projector beside our text model and encodes a 60 x 48 image
    (80 tokens) and 3300 samples (6 tokens) into transformers' features: measured within
    3.5e-7 of their scale (with the patch columns left channel-last the image's are
    0.76 of it off); and into exactly what the reference's file gives."""
    root = g4u.parent
    img, pcm = _image(), _pcm()
    text = root / "ours-text-f32.gguf"
    got_v = _mtmd_embeddings(text, root / "ours-mmproj-f32.gguf", img)
    got_a = _mtmd_embeddings(text, root / "ours-mmproj-f32.gguf", None, pcm)
    want_v, want_a = _hf_features(g4u, img, pcm)
    assert got_v.shape == want_v.shape == (80, 256), (got_v.shape, want_v.shape)
    assert got_a.shape == want_a.shape == (6, 256), (got_a.shape, want_a.shape)
    for got, want in ((got_v, want_v), (got_a, want_a)):
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < 1e-5, err
    ref = root / "ref-mmproj-f32.gguf"
    np.testing.assert_array_equal(_mtmd_embeddings(text, ref, img), got_v)
    np.testing.assert_array_equal(_mtmd_embeddings(text, ref, None, pcm), got_a)


def test_without_audio_config_refused(g4u, tmp_path):
    """``audio_config: null``: the reference's class asserts an audio config, so ours
    names the field before writing anything."""
    src = tmp_path / "model"
    shutil.copytree(g4u, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["audio_config"] = None
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=r"audio_config\.audio_embed_dim"):
        hf_to_gguf(src, tmp_path / "out" / "t.gguf", "f16", mmproj=tmp_path / "out" / "m.gguf")
    assert not (tmp_path / "out").exists()
