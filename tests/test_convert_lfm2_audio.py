"""LFM2-Audio (``Lfm2AudioForConditionalGeneration``): the ``lfm2a`` audio projector and
the LFM2 text beside it.

transformers 5.24 has no LFM2-Audio class; the tiny checkpoint is assembled
(:func:`support.lfm2_audio_models.lfm2_audio`) from transformers' ``ParakeetEncoder``
(NeMo's FastConformer, renamed to the Hub's ``conformer.*`` names), a seeded adapter
(``audio_adapter.model.{0,1,3}``) and transformers' ``Lfm2ForCausalLM`` under ``lfm.``:

* our projector and text are ``convert_hf_to_gguf.py [--mmproj]``'s files byte for byte
  at f32, f16, bf16 and q8_0;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36: its ``lfm2a``
  conformer graph and NeMo mel front end) loads ours and encodes a 1 s waveform into
  what transformers computes for it: ``ParakeetFeatureExtractor`` -> ``ParakeetEncoder``
  (transformers) -> the adapter (LayerNorm, Linear, GELU, Linear: our torch restatement,
  transformers has none).
"""

from __future__ import annotations

import numpy as np
import pytest

from support.lfm2_audio_models import lfm2_audio
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both

SAMPLE_RATE = 16000


@pytest.fixture(scope="module")
def l2a(tmp_path_factory):
    root = tmp_path_factory.mktemp("lfm2a")
    src, enc, adapter = lfm2_audio(root / "model")
    convert_both(src, root, text_types=TYPES)
    return src, enc, adapter


@pytest.mark.parametrize("t", TYPES)
def test_same_as_reference(l2a, t):
    root = l2a[0].parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    _same(root / f"ours-text-{t}.gguf", root / f"ref-text-{t}.gguf")


def _pcm(seconds: float) -> np.ndarray:
    """A seeded waveform: two tones and noise, float32 in [-1, 1]."""
    rng = np.random.default_rng(11)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    x = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1234 * t)
    return (x + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_llama_cpp_encodes_audio(l2a):
    """mtmd's embeddings of 1 s through our f32 pair: 13 tokens, measured within 2.4e-7
    of transformers' scale (Parakeet encoder + the adapter)."""
    import torch
    from transformers import ParakeetFeatureExtractor

    src, enc, adapter = l2a
    root = src.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    fe = ParakeetFeatureExtractor(feature_size=128)
    inp = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")
    with torch.no_grad():
        want = adapter(enc(inp["input_features"]).last_hidden_state)[0].numpy()
    assert got.shape == want.shape == (13, 64), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, err


def test_cli_writes_both(l2a, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""
    from weightsmith.cli._main import main

    src = l2a[0]
    dst = tmp_path / "a.gguf"
    assert main(["convert", str(src), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-a.gguf").read_bytes() == (
        src.parent / "ref-mmproj-q8_0.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (src.parent / "ref-text-q8_0.gguf").read_bytes()


def test_gguf_to_hf_refused(l2a, tmp_path):
    """GGUF -> HF of the pair is not done: refused by name, nothing written (transformers
    has no LFM2-Audio class to load such a folder)."""
    from weightsmith import errors as E
    from weightsmith.convert import gguf_to_hf

    root = l2a[0].parent
    out = tmp_path / "back"
    with pytest.raises(E.ProjectorMismatch, match="lfm2a"):
        gguf_to_hf(root / "ours-text-f32.gguf", out, mmproj=root / "ours-mmproj-f32.gguf")
    assert not out.exists() or not any(out.iterdir())
