"""Granite Speech (``granite_speech``: an audio-only projector) against llama.cpp.

A tiny seeded ``GraniteSpeechForConditionalGeneration`` (tests/support/vlm_models.py:
a 4-layer conformer of width 64, a one-layer Q-Former, seeded batch-norm statistics)
and its Plus form (the input projection's and encoder layer 1's outputs concatenated to
the last layer's, ``cat_hidden_layers = [0, 1]``):

* our projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32,
  f16, bf16 and q8_0 (the batch norms folded where the reference writes them, the
  fused ``to_kv`` split, the conv kernels squeezed and F32), and the ``granite`` text
  file beside it too;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36 has the
  ``granite_speech`` graph and mel front end) loads it with our text file and encodes a
  waveform into the embeddings transformers' ``get_audio_features`` gives for the same
  samples (the log-mel features computed as GraniteSpeechFeatureExtractor computes them:
  that class needs torchaudio, which is not installed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_gemma4_audio import _pcm
from test_convert_mmproj import (
    TYPES,
    _mtmd_embeddings,
    _reference,
    _same,
    _same_renamed,
    convert_both,
)
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

#: the one difference: the pinned gguf-py names the folded batch norm conv_norm_var
#: (parakeet's running variance), mtmd reads conv_norm
RENAMED = (".conv_norm.", ".conv_norm_var.")


@pytest.fixture(scope="module")
def gs(tmp_path_factory) -> Path:
    """The tiny Granite Speech; the reference's projector at each type and text f16, and
    ours (``ref-*`` / ``ours-*`` beside the model folder)."""
    root = tmp_path_factory.mktemp("granite-speech")
    src = build("granite_speech", root / "model")
    convert_both(src, root)
    return src


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(gs, t):
    """Every KV, tensor type, shape, order and data byte-identical; the folded batch norms
    are ``conv_norm`` in ours, ``conv_norm_var`` in the reference's (see below)."""
    root = gs.parent
    _same_renamed(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf", *RENAMED)
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_cli_writes_both(gs, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the same two files as the API."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(gs), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (
        gs.parent / "ours-mmproj-q8_0.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (gs.parent / "ours-text-q8_0.gguf").read_bytes()


def test_projector_contents(gs):
    """Guard against a vacuous pass: the folded batch norm is the eval-mode affine map of
    the seeded statistics, the conv kernels are 2-D and F32, the rows are the config's."""
    import torch
    from safetensors.torch import load_file

    from weightsmith.gguf import read

    sd = load_file(gs / "model.safetensors")
    with read(gs.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
        scale = np.array(f.numpy("a.blk.3.conv_norm.weight"))
        shift = np.array(f.numpy("a.blk.3.conv_norm.bias"))
    assert md["clip.has_audio_encoder"] is True and "clip.has_vision_encoder" not in md
    assert md["clip.projector_type"] == "granite_speech"
    assert md["clip.audio.embedding_length"] == 64 and md["clip.audio.feed_forward_length"] == 256
    assert md["clip.audio.block_count"] == 4 and md["clip.audio.num_mel_bins"] == 160
    assert md["clip.audio.chunk_size"] == 20 and md["clip.audio.projector.window_size"] == 15
    assert types["a.blk.0.conv_dw.weight"] == ("F32", (128, 5))
    assert types["a.blk.0.conv_pw1.weight"] == ("F32", (256, 64))
    assert types["a.blk.0.attn_k.weight"] == ("Q8_0", (64, 64))
    assert types["a.proj_query"] == ("F32", (1, 3, 64))
    p = "encoder.layers.3.conv.batch_norm."
    w, b, mu, var = (sd[p + k].float() for k in ("weight", "bias", "running_mean", "running_var"))
    bn = torch.nn.BatchNorm1d(w.numel(), eps=1e-5).eval()
    with torch.no_grad():
        bn.weight.copy_(w), bn.bias.copy_(b), bn.running_mean.copy_(mu), bn.running_var.copy_(var)
        x = torch.randn(3, w.numel(), generator=torch.Generator().manual_seed(0))
        np.testing.assert_allclose(x.numpy() * scale + shift, bn(x).numpy(), atol=1e-5)
    assert np.abs(shift - b.numpy()).max() > 1e-2  # the running mean is not zero


def _log_mel(pcm: np.ndarray) -> np.ndarray:
    """GraniteSpeechFeatureExtractor's features: torchaudio's MelSpectrogram (n_fft 512,
    window 400, hop 160, 80 HTK bins, power 2, centred reflect padding), log10 floored
    at the max - 8, (x / 4) + 1, pairs of frames stacked -> [1, frames / 2, 160]."""
    import torch
    from transformers.audio_utils import mel_filter_bank

    x = torch.from_numpy(pcm)[None]
    win = torch.hann_window(400)
    spec = torch.stft(x, 512, hop_length=160, win_length=400, window=win, center=True,
                      pad_mode="reflect", return_complex=True).abs() ** 2  # fmt: skip
    fb = torch.from_numpy(mel_filter_bank(num_frequency_bins=257, num_mel_filters=80,
                                          min_frequency=0.0, max_frequency=8000.0,
                                          sampling_rate=16000, norm=None,
                                          mel_scale="htk")).float()  # fmt: skip
    mel = (spec.transpose(-1, -2) @ fb).clamp(min=1e-10).log10()
    mel = torch.maximum(mel, mel.amax() - 8.0) / 4 + 1
    if mel.shape[1] % 2:
        mel = mel[:, :-1]
    return mel.reshape(1, -1, 160).numpy()


def _hf_audio_features(folder: Path, pcm: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForSpeechSeq2Seq

    m = AutoModelForSpeechSeq2Seq.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        out = m.get_audio_features(torch.from_numpy(_log_mel(pcm)))
    return out.pooler_output[0].float().numpy()


def test_llama_cpp_encodes_audio(gs):
    """mtmd loads our projector with our text model and encodes a 1 s waveform (its own
    mel front end) into the features transformers computes for it."""
    root = gs.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_audio_features(gs, pcm)
    assert got.shape == want.shape and got.shape[1] == 256, (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


def test_text_back_to_hf(gs, tmp_path):
    """The ``granite`` text file converts back to a GraniteForCausalLM folder that
    transformers loads; its logits are the speech model's text logits divided by
    ``logits_scaling`` (8) exactly: transformers 5.24's GraniteSpeechForConditionalGeneration
    leaves that division out (GraniteForCausalLM and llama.cpp's ``logit_scale`` do it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSpeechSeq2Seq

    from weightsmith.convert import gguf_to_hf

    gguf_to_hf(gs.parent / "ours-text-f32.gguf", tmp_path / "hf")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    orig = AutoModelForSpeechSeq2Seq.from_pretrained(gs, dtype=torch.float32).eval()
    assert type(back).__name__ == "GraniteForCausalLM"
    ids = torch.tensor([[1, 5, 9, 30, 100, 7]])
    with torch.no_grad():
        a, b = back(ids).logits, orig(input_ids=ids).logits
    assert orig.config.text_config.logits_scaling == 8.0
    torch.testing.assert_close(a * 8.0, b, rtol=0, atol=0)


def test_reference_projector_refused_by_mtmd(gs):
    """Why ours names the folded batch norms conv_norm: mtmd 0.3.36 does not load the
    reference's file (it looks for a.blk.0.conv_norm.weight)."""
    root = gs.parent
    with pytest.raises(AssertionError, match="did not load"):
        _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ref-mmproj-f32.gguf", None, _pcm(1.0))


def test_missing_encoder_field_refused(gs, tmp_path):
    """An encoder config without a field the rows need: a named error, nothing written."""
    src = tmp_path / "model"
    shutil.copytree(gs, src)
    cfg = json.loads((src / "config.json").read_text())
    del cfg["encoder_config"]["context_size"]
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=r"encoder_config\.context_size"):
        hf_to_gguf(src, tmp_path / "out" / "t.gguf", "f16", mmproj=tmp_path / "out" / "m.gguf")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change", ["drop", "reshape"])
def test_bad_batch_norm_refused(gs, tmp_path, change):
    """A batch norm without its running variance, or with one of another length: named
    (the tensor and what is missing / the shapes) before any file is written."""
    from safetensors.torch import load_file, save_file

    src = tmp_path / "model"
    shutil.copytree(gs, src)
    sd = load_file(src / "model.safetensors")
    key = "encoder.layers.1.conv.batch_norm.running_var"
    if change == "drop":
        del sd[key]
    else:
        sd[key] = sd[key][:-1].clone()
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    err = E.UnmappedTensor if change == "drop" else E.TensorShapeMismatch
    with pytest.raises(err, match="running_var" if change == "drop" else r"\[128\]"):
        hf_to_gguf(src, tmp_path / "out" / "t.gguf", "f16", mmproj=tmp_path / "out" / "m.gguf")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- Plus


@pytest.fixture(scope="module")
def gsp(tmp_path_factory) -> Path:
    """The tiny Granite Speech Plus; the reference's projector at f32 and f16, and ours."""
    root = tmp_path_factory.mktemp("granite-speech-plus")
    src = build("granite_speech", root / "model", seed=51, cat=[0, 1])
    jobs = []
    for t in ("f32", "f16"):
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    return src


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_plus_projector_same_as_reference(gsp, t):
    """Granite Speech Plus: the same file rules plus ``clip.audio.feature_layer``."""
    from weightsmith.gguf import read

    root = gsp.parent
    _same_renamed(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf", *RENAMED)
    with read(root / f"ours-mmproj-{t}.gguf") as f:
        assert f.metadata["clip.audio.feature_layer"] == [0, 1]
        shapes = {x.name: x.shape for x in f.tensors}
    assert shapes["a.proj_blk.1.cross_attn_k.weight"] == (64, 192)  # 3 x 64 concatenated


def test_plus_llama_cpp_encodes_audio(gsp):
    """mtmd concatenates the same encoder layers as transformers: the 1 s waveform's 12
    tokens measured within 1.8e-4 of the scale (2.9)."""
    root = gsp.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_audio_features(gsp, pcm)
    assert got.shape == want.shape == (12, 256), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


def test_plus_middle_layer_differs_in_transformers(gsp, tmp_path):
    """Not ours: with the middle encoder layer (num_layers // 2, where the CTC branch is
    added) among ``cat_hidden_layers``, transformers 5.24 adds that branch in place to the
    tensor it has already kept for the concatenation, mtmd 0.3.36 keeps the layer's output
    before it; the two runtimes then differ (measured 7.6e-2 of the scale with [2])."""
    src = tmp_path / "model"
    shutil.copytree(gsp, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["encoder_config"]["cat_hidden_layers"] = [1, 2]  # same width: the same weights
    (src / "config.json").write_text(json.dumps(cfg))
    hf_to_gguf(src, tmp_path / "t.gguf", "f32", mmproj=tmp_path / "m.gguf")
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(tmp_path / "t.gguf", tmp_path / "m.gguf", None, pcm)
    want = _hf_audio_features(src, pcm)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err > 1e-2, err


def test_batch_norm_fold_without_torch(monkeypatch):
    """The plain install (no torch) folds with numpy: within 2 float32 ulps of torch's
    fold (the reference's, byte for byte in the files above; 17 % of scales differ,
    by at most 2 ulps on this draw), and the folded affine map is torch's own
    eval-mode batch norm."""
    import sys

    import torch

    from weightsmith.convert.arch.granite_speech import BN_EPS, fold_batch_norm

    rng = np.random.default_rng(7)
    w, b, mean = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    var = rng.uniform(1e-4, 4.0, 4096).astype(np.float32)
    scale_t, shift_t = fold_batch_norm(w, b, mean, var)
    x = rng.standard_normal((3, 4096)).astype(np.float32)
    want = torch.nn.functional.batch_norm(
        *(torch.from_numpy(a) for a in (x, mean, var, w, b)), training=False, eps=BN_EPS
    ).numpy()
    np.testing.assert_allclose(x * scale_t + shift_t, want, rtol=0, atol=1e-5)

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    scale_n, shift_n = fold_batch_norm(w, b, mean, var)
    assert scale_n.dtype == shift_n.dtype == np.float32
    assert np.all(np.abs(scale_n - scale_t) <= 2 * np.spacing(np.abs(scale_t)))
    assert not np.array_equal(scale_n, scale_t)  # the other path, really taken
    # the shift inherits the scale's ulp through mean * scale
    assert np.all(np.abs(shift_n - shift_t) <= 4 * np.spacing(np.abs(mean * scale_t) + np.abs(b)))
