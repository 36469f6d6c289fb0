"""GGUF -> HF of Granite Speech (``granite_speech``: an audio-only projector over a
``granite`` text file) into one ``GraniteSpeechForConditionalGeneration`` folder.

The tiny seeded model of tests/support/vlm_models.py (float32, seeded batch-norm
statistics) -> our GGUF pair (f32) -> our HF folder, then:

* transformers 5 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's bit for bit, except each conformer layer's batch
  norm: the GGUF keeps it folded (scale, shift), written back as weight = scale,
  bias = shift, running_mean = 0, running_var = 1 - eps (``1 - 1e-5`` in float32 plus
  ``1e-5`` is exactly 1.0, so eval mode computes ``x * scale + shift``); those are
  compared folded (the original's fold equals ours bit for bit);
* the audio features (the model's own audio path on the same log-mel features) and
  the text logits equal the original's (measured gap below);
* the encoder and Q-Former configs rebuilt from the rows and shapes are the original's;
* the folder converts forward again into the same GGUF pair.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.gguf_pair import assert_same_gguf, convert_forward
from support.vlm_models import build
from test_convert_gemma4_audio import _pcm
from test_convert_granite_speech import _log_mel
from test_convert_mmproj_to_hf_audio import _model
from weightsmith.convert import gguf_to_hf, hf_to_gguf
from weightsmith.convert.arch.granite_speech import fold_batch_norm

_BN = ".conv.batch_norm."


@pytest.fixture(scope="module")
def gs(tmp_path_factory) -> dict:
    """The original folder, our f32 GGUF pair and the folder back."""
    root = tmp_path_factory.mktemp("gs_back")
    src = build("granite_speech", root / "src", dtype="float32")
    text, proj = root / "text-f32.gguf", root / "mmproj-f32.gguf"
    hf_to_gguf(src, text, "f32", mmproj=proj)
    gguf_to_hf(text, root / "back", "f32", mmproj=proj)
    return {"root": root, "src": src, "back": root / "back", "text": text, "proj": proj}


def test_loads_with_every_tensor(gs):
    back, info = _model(gs["back"])
    orig, _ = _model(gs["src"])
    assert (
        type(back) is type(orig) and type(back).__name__ == "GraniteSpeechForConditionalGeneration"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    want = {k: v.numpy() for k, v in orig.state_dict().items()}
    got = {k: v.numpy() for k, v in back.state_dict().items()}
    assert set(got) == set(want)
    bn = sorted({k[: k.index(_BN) + len(_BN)] for k in want if _BN in k})
    assert len(bn) == 4
    for k, w in want.items():
        if _BN not in k:
            assert got[k].shape == w.shape, k
            np.testing.assert_array_equal(got[k], w, err_msg=k)
    for p in bn:
        # ours: the fold as the GGUF keeps it, over unit statistics
        scale, shift = fold_batch_norm(
            *(want[p + s] for s in ("weight", "bias", "running_mean", "running_var"))
        )
        np.testing.assert_array_equal(got[p + "weight"], scale)
        np.testing.assert_array_equal(got[p + "bias"], shift)
        assert not np.any(got[p + "running_mean"])
        np.testing.assert_array_equal(got[p + "running_var"], np.float32(1) - np.float32(1e-5))
        # ... whose own fold is itself, bit for bit (sqrt(var + eps) == 1 exactly)
        s2, b2 = fold_batch_norm(
            *(got[p + s] for s in ("weight", "bias", "running_mean", "running_var"))
        )
        np.testing.assert_array_equal(s2, scale)
        np.testing.assert_array_equal(b2, shift)
        assert np.abs(want[p + "running_mean"]).max() > 1e-2  # the original's is not unit


def test_batch_norm_same_in_eval_mode(gs):
    """Each written-back batch norm computes the original's eval-mode map up to float32
    rounding (the original normalises with its statistics, ours multiplies by the
    folded scale): measured 4.8e-7, one ulp of the output scale, in every layer."""
    import torch

    orig, _ = _model(gs["src"])
    back, _ = _model(gs["back"])
    x = torch.randn(2, 128, 30, generator=torch.Generator().manual_seed(3))
    for lo, lb in zip(orig.model.encoder.layers, back.model.encoder.layers, strict=True):
        with torch.no_grad():
            a, b = lo.conv.batch_norm(x).numpy(), lb.conv.batch_norm(x).numpy()
        assert np.abs(a - b).max() <= 2 * np.spacing(np.abs(a).max()), np.abs(a - b).max()


# measured: the audio features [1, 12, 256] differ from the original's by 6.0e-7 at
# most, 2.2e-7 of their scale (the batch norms' rounding above); text logits equal
def test_same_audio_features_and_logits(gs):
    import torch

    orig, _ = _model(gs["src"])
    back, _ = _model(gs["back"])
    mel = torch.from_numpy(_log_mel(_pcm(1.0)))
    with torch.no_grad():
        want = orig.get_audio_features(mel).pooler_output.numpy()
        got = back.get_audio_features(mel).pooler_output.numpy()
    assert got.shape == want.shape and got.shape[1] > 0
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err <= 1e-5, err
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    np.testing.assert_array_equal(lg, lw)


def test_config_values(gs):
    """encoder_config, projector_config and the window from the rows and shapes."""
    got = json.loads((gs["back"] / "config.json").read_text())
    orig = json.loads((gs["src"] / "config.json").read_text())
    assert got["architectures"] == ["GraniteSpeechForConditionalGeneration"]
    assert got["encoder_config"]["model_type"] == "granite_speech_encoder"
    for k, v in got["encoder_config"].items():
        assert orig["encoder_config"][k] == v, k
    assert len(got["encoder_config"]) == 12  # every field the encoder reads
    for k, v in got["projector_config"].items():
        assert orig["projector_config"][k] == v, k
    for k in ("window_size", "downsample_rate", "has_lora_adapter"):
        assert got[k] == orig[k], k
    pre = json.loads((gs["back"] / "preprocessor_config.json").read_text())
    assert pre["feature_extractor_type"] == "GraniteSpeechFeatureExtractor" and pre["n_mels"] == 80


def test_folder_converts_forward_again(gs, tmp_path):
    """HF -> GGUF of our folder gives our GGUF pair again: every row (but ``general.*``,
    the folder's name, and the tokenizer, text GGUF -> HF's), tensor name, type, shape
    and value; the folded batch norms too."""
    from weightsmith.gguf import read

    text, proj = convert_forward(gs["back"], tmp_path)
    assert_same_gguf(text, gs["text"])
    assert_same_gguf(proj, gs["proj"])
    with read(proj) as a:
        assert sum(".conv_norm." in t.name for t in a.tensors) == 8


def test_plus_loads_with_every_tensor(tmp_path):
    """Granite Speech Plus (``audio.feature_layer`` = ``cat_hidden_layers`` [0, 1]): the
    Plus class and encoder config, every tensor but the batch norms equal."""
    import torch
    import transformers

    src = build("granite_speech", tmp_path / "src", dtype="float32", cat=[0, 1])
    text, proj = tmp_path / "t.gguf", tmp_path / "p.gguf"
    hf_to_gguf(src, text, "f32", mmproj=proj)
    gguf_to_hf(text, tmp_path / "back", "f32", mmproj=proj)
    cfg = json.loads((tmp_path / "back" / "config.json").read_text())
    assert cfg["architectures"] == ["GraniteSpeechPlusForConditionalGeneration"]
    assert cfg["encoder_config"]["cat_hidden_layers"] == [0, 1]
    assert cfg["projector_config"]["encoder_hidden_size"] == 192
    cls = transformers.GraniteSpeechPlusForConditionalGeneration
    back, info = cls.from_pretrained(
        tmp_path / "back", dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), info
    want = cls.from_pretrained(src, dtype=torch.float32).state_dict()
    got = back.state_dict()
    assert set(got) == set(want)
    for k, w in want.items():
        if _BN not in k:
            assert torch.equal(got[k], w), k
