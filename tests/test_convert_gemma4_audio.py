"""Gemma 4's audio encoder (``gemma4a``) in the ``--mmproj`` file.

A tiny seeded ``Gemma4ForConditionalGeneration`` with both towers (transformers 5's
``Gemma4AudioConfig``: a 2-layer conformer of width 64 behind the two sub-sampling
convs; finite, seeded bounds on its clippable linears so they clamp):

* our projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32, f16,
  bf16 and q8_0 (vision and audio tensors interleaved in the source's order, the audio
  KVs between the vision ones as the reference writes them), and the text file beside
  it too;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36, which has a
  ``gemma4a`` graph and mel front end) loads it and encodes a waveform into the
  embeddings transformers' ``get_audio_features`` gives for the same samples through
  Gemma 4's own feature extractor;
* a Gemma 4 without a vision tower (audio only) is refused with a named error, nothing
  written: the pinned reference converts none (it fails on the missing vision config).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.llama_sdist import llama_cpp_root
from support.vlm_models import build
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

#: Gemma4AudioConfig fields: 128 mel bins (the feature extractor's) / 4 = 32 frequency
#: rows x 32 channels into the width of 64; llama.cpp hard-codes the attention chunking
#: (12 frames, 12 past), so those stay at transformers' defaults
AUDIO = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    subsampling_conv_channels=[128, 32],
    conv_kernel_size=5,
    output_proj_dims=64,
    use_clipped_linears=True,
)
SAMPLE_RATE = 16000


def _finite_bounds(folder: Path, seed: int) -> None:
    """Seeded finite clip bounds for the audio tower's linears (transformers initialises
    them to +-inf, which would leave the clamps untested)."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    rng = np.random.default_rng(seed)
    for k in sorted(sd):
        if k.startswith("model.audio_tower.") and k.endswith(("_max", "_min")):
            b = float(rng.uniform(1.5, 3.0))
            sd[k] = sd[k].new_tensor(b if k.endswith("_max") else -b)
    save_file(sd, path, metadata={"format": "pt"})


@pytest.fixture(scope="module")
def g4a(tmp_path_factory) -> Path:
    """The tiny Gemma 4 with audio; the reference's projector at each type and text f16,
    and ours (``ref-*`` / ``ours-*`` beside the model folder)."""
    root = tmp_path_factory.mktemp("gemma4-audio")
    src = build("gemma4", root / "model", seed=34, audio=AUDIO)
    _finite_bounds(src, 35)
    convert_both(src, root)
    return src


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(g4a, t):
    root = g4a.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_cli_writes_both(g4a, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the same two files as the API."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(g4a), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    ref = (g4a.parent / "ref-mmproj-q8_0.gguf").read_bytes()
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == ref
    assert dst.read_bytes() == (g4a.parent / "ours-text-q8_0.gguf").read_bytes()


def test_projector_contents(g4a):
    """Guard against a vacuous pass: both towers are in the file, typed and shaped as the
    reference's rules say."""
    from weightsmith.gguf import read

    with read(g4a.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.has_vision_encoder"] is True and md["clip.has_audio_encoder"] is True
    assert md["clip.vision.projector_type"] == "gemma4v"
    assert md["clip.audio.projector_type"] == "gemma4a"
    assert md["clip.audio.projection_dim"] == 256 and md["clip.audio.embedding_length"] == 64
    assert md["clip.audio.feed_forward_length"] == 256 and md["clip.audio.block_count"] == 2
    assert md["clip.audio.attention.head_count"] == 2 and md["clip.audio.num_mel_bins"] == 128
    keys = list(md)
    # the audio sizes between the vision base rows and the vision projector type
    assert keys.index("clip.vision.image_std") < keys.index("clip.has_audio_encoder")
    assert keys.index("clip.audio.attention.head_count") < keys.index("clip.vision.projector_type")
    # F32 by the conv rule at every type: sub-sampling convs and input projection, the
    # depthwise conv (squeezed to [C, K])
    assert types["a.conv1d.0.weight"] == ("F32", (128, 1, 3, 3))
    assert types["a.input_projection.weight"] == ("F32", (64, 1024))
    assert types["a.blk.1.conv_dw.weight"] == ("F32", (64, 5))
    assert types["a.blk.1.per_dim_scale.weight"] == ("F32", (32,))
    assert types["a.blk.0.attn_q.input_max"] == ("F32", (1,))
    for n in ("a.blk.0.ffn_up_1.weight", "a.blk.1.attn_k_rel.weight", "a.pre_encode.out.weight",
              "mm.a.input_projection.weight", "v.blk.1.attn_q.weight"):  # fmt: skip
        assert types[n][0] == "Q8_0", n
    assert sum(n.startswith("a.") for n in types) == 2 * 62 + 7


def test_per_dim_scale_is_softplus(g4a):
    """The attention's per-dim scale is stored through softplus (as the graph reads it)."""
    import torch
    from safetensors.torch import load_file

    from weightsmith.gguf import read

    raw = load_file(g4a / "model.safetensors")["model.audio_tower.layers.1.self_attn.per_dim_scale"]
    with read(g4a.parent / "ours-mmproj-f32.gguf") as f:
        got = np.array(f.numpy("a.blk.1.per_dim_scale.weight"))
    want = torch.nn.functional.softplus(raw.float()).numpy()
    np.testing.assert_array_equal(got, want)
    assert not np.allclose(got, raw.float().numpy(), atol=0.1)


def _pcm(seconds: float) -> np.ndarray:
    """A seeded waveform: two tones and noise, float32 in [-1, 1]."""
    rng = np.random.default_rng(11)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    x = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1234 * t)
    return (x + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def _hf_audio_features(folder: Path, pcm: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForImageTextToText
    from transformers.models.gemma4 import Gemma4AudioFeatureExtractor

    fe = Gemma4AudioFeatureExtractor()
    inp = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        out = m.model.get_audio_features(inp["input_features"], inp["input_features_mask"])
    f = out.pooler_output[0]
    return f[out.attention_mask[0]].float().numpy()


def test_llama_cpp_encodes_audio(g4a):
    """mtmd loads our projector (both towers) with our text model and encodes a 1 s
    waveform (its own mel front end) into the features transformers computes for it
    (Gemma4AudioFeatureExtractor + get_audio_features): 25 tokens, measured within
    5.8e-4 of their scale.  The seeded clip bounds move transformers' features by 5.9e-2
    of it, so bounds mtmd did not find would fail this."""
    root = g4a.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_audio_features(g4a, pcm)
    assert got.shape == want.shape and got.shape[1] == 256, (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


def test_audio_only_refused(g4a, tmp_path):
    """Gemma 4 with an audio tower and no vision tower (``vision_config: null``, as
    transformers saves it): ours names the missing field before writing anything; the
    pinned reference cannot convert it either (it reads ``vision_config`` to pick the
    class, and the class asserts one), so there is no file to match."""
    src = tmp_path / "model"
    shutil.copytree(g4a, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["vision_config"] = None
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match="vision_config"):
        hf_to_gguf(src, tmp_path / "out" / "t.gguf", "f16", mmproj=tmp_path / "out" / "m.gguf")
    assert not (tmp_path / "out").exists()
    ref = tmp_path / "ref-mmproj.gguf"
    r = pyfork.run([sys.executable, str(llama_cpp_root() / "convert_hf_to_gguf.py"), str(src),
                        "--outfile", str(ref), "--outtype", "f16", "--mmproj"])  # fmt: skip
    assert r.returncode != 0 and "vision_config.get" in r.stderr, r.stderr[-2000:]
    assert not ref.exists()
