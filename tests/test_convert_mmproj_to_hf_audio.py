"""GGUF -> HF of audio-language models: the text GGUF and its audio projector GGUF back
into one ``*ForConditionalGeneration`` folder (``gguf_to_hf(..., mmproj=...)``).

For each tiny random model (tests/support/audio_models.py, and the forward tests' Gemma
4 with both towers; float32, built once per module): original folder -> our GGUF pair
(f32; Audio Flamingo 3 also f16) -> our HF folder, then

* transformers 5 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's bit for bit from the f32 pair, except the Whisper
  conv weights the reference stores F16 at every type (Voxtral's and Qwen2-Audio's):
  those are the original's rounded to f16, exactly, and Gemma 4's ``per_dim_scale``
  (stored through softplus, many-to-one in float32: the same softplus again); from the
  f16 pair, at most the f16 rounding apart;
* the audio features (the model's own audio path on the same mel features) equal the
  original model's with its conv weights rounded as the GGUF keeps them, and the text
  logits on the same ids equal the original's;
* the feature extractor file gives the mel features mtmd's front end is compared with
  (WhisperFeatureExtractor with the projector's mel bins);
* the folder converts forward again into the same GGUF pair;
* a projector without its audio encoder row is a named error before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support.audio_models import audioflamingo3, qwen2audio, voxtral
from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.hf_models import gemma4unified
from support.vlm_models import build, qwen3asr
from test_convert_gemma4_audio import AUDIO as G4_AUDIO
from test_convert_gemma4_audio import _finite_bounds, _pcm
from test_convert_gemma4_unified_mmproj import _hf_features as _g4u_features
from test_convert_gemma4_unified_mmproj import _image as _g4u_image
from test_convert_gemma4_unified_mmproj import _pcm as _g4u_pcm
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf


def gemma4_audio(folder: Path, dtype: str) -> Path:
    """The forward tests' Gemma 4 with both towers and seeded finite clip bounds."""
    src = build("gemma4", folder, dtype=dtype, seed=34, audio=G4_AUDIO)
    _finite_bounds(src, 35)
    return src


def gemma4_unified(folder: Path, dtype: str) -> Path:
    """The forward tests' Gemma 4 Unified (model patches of 2 x 3 px, 640-sample frames)
    with their image processor file (the projector's mean/std rows read it)."""
    src = gemma4unified(folder, dtype=dtype, seed=36, vision=G4U_VISION, audio=G4U_AUDIO)
    (src / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma4UnifiedImageProcessor", "patch_size": 2,
        "pooling_kernel_size": 3, "max_soft_tokens": 280,
        "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0]}))  # fmt: skip
    return src


BUILDERS = {"voxtral": voxtral, "qwen2audio": qwen2audio, "audioflamingo3": audioflamingo3}
BUILDERS["gemma4a"] = gemma4_audio
BUILDERS["gemma4u"] = gemma4_unified
BUILDERS["qwen3asr"] = qwen3asr
ARCHS = ["voxtral", "qwen2audio", "audioflamingo3"]
ARCHS += ["gemma4a"]
ARCHS += ["gemma4u"]
ARCHS += ["qwen3asr"]
#: the family also converted through the f16 pair (one, for test time)
F16_ARCH = "audioflamingo3"
#: the families whose Whisper conv weights the reference keeps F16 at every type
F16_CONVS = ("voxtral", "qwen2audio")
F16_CONVS += ("qwen3asr",)  # its sub-sampling convs and conv_out (Qwen3-Omni's rule)
#: the forward tests' Gemma 4 Unified fields (mtmd's fixed pooling of 3, 640-sample frames)
G4U_VISION = {"pooling_kernel_size": 3, "mm_posemb_size": 64, "output_proj_dims": 32}
G4U_AUDIO = {"audio_embed_dim": 640}
SAMPLE_RATE = 16000


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the original folder; per type, our GGUF pair and the folder back."""
    root = tmp_path_factory.mktemp("audio_back")
    out: dict = {"root": root}
    for arch in ARCHS:
        src = BUILDERS[arch](root / arch / "src", dtype="float32")
        out[arch] = src
        for t in ("f32", "f16") if arch == F16_ARCH else ("f32",):
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


_MODELS: dict = {}


def _model(folder: Path):
    """The model of ``folder`` (its config's class) in float32, loaded once, with
    transformers' loading info."""
    import torch
    import transformers

    if folder not in _MODELS:
        cls = json.loads((folder / "config.json").read_text())["architectures"][0]
        m, info = getattr(transformers, cls).from_pretrained(
            folder, dtype=torch.float32, output_loading_info=True
        )
        _MODELS[folder] = (m.eval(), info)
    return _MODELS[folder]


def _cases() -> list[tuple[str, str]]:
    return [(a, "f32") for a in ARCHS] + [(F16_ARCH, "f16")]


def _is_f16_conv(arch: str, k: str) -> bool:
    return arch in F16_CONVS and ".conv" in k and k.endswith(".weight")


@pytest.mark.parametrize(("arch", "t"), _cases())
def test_loads_with_every_tensor(work, arch, t):
    got, want = state_dicts(*_model(work["root"] / arch / f"back-{t}"), _model(work[arch])[0])
    assert any((".audio_tower." in k or "embed_audio" in k) for k in got)
    assert any(("projector" in k or "embed_audio" in k) for k in got)
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        f16 = w.astype(np.float16).astype(np.float32)
        if _is_f16_conv(arch, k):  # F16 at every type: the original rounded, exactly
            np.testing.assert_array_equal(g, f16, err_msg=k)
        elif k.endswith("per_dim_scale"):  # stored as softplus: the same softplus again
            import torch

            sp = torch.nn.functional.softplus
            assert torch.equal(sp(torch.from_numpy(g)), sp(torch.from_numpy(w))), k
            assert np.all(np.abs(g - w) <= 3 * np.spacing(np.abs(w))), k
        elif t == "f32":
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:
            assert np.all(np.abs(g - w) <= np.abs(f16 - w)), k


def _mel(folder: Path) -> dict:
    """The mel features (and mask, where the extractor gives one) of a 1 s waveform by
    the feature extractor of ``folder``."""
    from transformers import AutoFeatureExtractor

    fe = AutoFeatureExtractor.from_pretrained(folder)
    return dict(fe([_pcm(1.0)], sampling_rate=SAMPLE_RATE, return_tensors="pt"))


def _features(arch: str, model, mel) -> np.ndarray:
    """The model's audio embeddings (what replaces its audio tokens) for ``mel``."""
    import torch

    x = mel["input_features"]
    with torch.no_grad():
        if arch == "qwen2audio":  # no get_audio_features: forward's own two calls
            h = model.model.audio_tower(x).last_hidden_state
            f = model.model.multi_modal_projector(h)
        elif arch in ("audioflamingo3", "qwen3asr"):  # the whole 30 s window attended
            mask = torch.ones(x.shape[0], x.shape[-1], dtype=torch.long)
            f = model.get_audio_features(x, mask).pooler_output
        elif arch in ("gemma4a", "gemma4u"):  # the frames the mask keeps (Unified: raw)
            out = model.model.get_audio_features(x, mel["input_features_mask"])
            f = out.pooler_output[out.attention_mask]
        else:
            f = model.get_audio_features(x).pooler_output
    return f.reshape(-1, f.shape[-1]).numpy()


# measured (f32 pair): the features of the original with its convs rounded to f16 and
# every logit equal exactly; against the unrounded original the features differ by the
# F16 convs alone (Voxtral 8.7e-5, Qwen2-Audio 4.1e-5 of their scale)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_audio_features_and_logits(work, arch):
    import torch

    orig, _ = _model(work[arch])
    back, _ = _model(work["root"] / arch / "back-f32")
    mel = _mel(work["root"] / arch / "back-f32")
    got = _features(arch, back, mel)
    want = _features(arch, orig, mel)
    assert got.shape == want.shape and got.shape[0] > 0
    if arch in F16_CONVS:
        # the GGUF keeps the conv weights in f16 (the reference's rule): our folder
        # runs the original's values rounded so, as llama.cpp does
        scale = float(np.abs(want).max())
        assert 0 < float(np.abs(got - want).max()) <= 1e-3 * scale
        convs = [p for n, p in orig.named_parameters() if _is_f16_conv(arch, n)]
        assert len(convs) == (4 if arch == "qwen3asr" else 2)
        own = [p.detach().clone() for p in convs]
        try:
            with torch.no_grad():
                for p in convs:
                    p.copy_(p.half().float())
            want = _features(arch, orig, mel)
        finally:
            with torch.no_grad():
                for p, o in zip(convs, own, strict=True):
                    p.copy_(o)
    np.testing.assert_array_equal(got, want)
    if arch == "gemma4u":  # its image features too (the image embedder is new here)
        img, pcm = _g4u_image(), _g4u_pcm()
        for w, g in zip(_g4u_features(work[arch], img, pcm),
                        _g4u_features(work["root"] / arch / "back-f32", img, pcm), strict=True):  # fmt: skip
            assert w.shape == g.shape and w.shape[0] > 0
            np.testing.assert_array_equal(g, w)
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    np.testing.assert_array_equal(lg, lw)


@pytest.mark.parametrize("arch", ARCHS)
def test_feature_extractor(work, arch):
    """Our folder's feature extractor gives the mel features the forward tests compare
    mtmd's output with: WhisperFeatureExtractor with the projector's mel bins and mtmd's
    fixed front end (16 kHz, 400-sample FFT, hop 160, 30 s window); Gemma 4's
    Gemma4AudioFeatureExtractor (its defaults, nested in processor_config.json beside
    the image processor's preprocessor_config.json)."""
    from transformers import WhisperFeatureExtractor
    from transformers.models.gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4_unified import Gemma4UnifiedAudioFeatureExtractor
    from transformers.models.qwen3_asr import Qwen3ASRFeatureExtractor

    if arch == "gemma4a":
        fe, shape = Gemma4AudioFeatureExtractor(), (1, 99, 128)
    elif arch == "gemma4u":  # 1 s in 640-sample frames
        fe, shape = Gemma4UnifiedAudioFeatureExtractor(), (1, 25, 640)
    elif arch == "qwen3asr":  # Whisper's front end under Qwen3-ASR's class
        fe, shape = Qwen3ASRFeatureExtractor(), (1, 128, 3000)
    else:
        fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SAMPLE_RATE)
        shape = (1, 128, 3000)
    want = dict(fe([_pcm(1.0)], sampling_rate=SAMPLE_RATE, return_tensors="pt"))
    got = _mel(work["root"] / arch / "back-f32")
    assert set(got) == set(want)
    assert tuple(got["input_features"].shape) == shape
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """HF -> GGUF of our folder gives our GGUF pair again (every hyperparameter, tensor
    name, type and value; the tokenizer is text GGUF -> HF's, not compared)."""
    d = work["root"] / arch
    text, proj = convert_forward(d / "back-f32", tmp_path)
    assert_same_gguf(text, d / "text-f32.gguf")
    assert_same_gguf(proj, d / "mmproj-f32.gguf")


def test_config_values(work):
    """The audio config from the rows (each family's spelling), the values GGUF does not
    keep restored from the tensors (position table rows, projector bias)."""
    cfg = {a: json.loads((work["root"] / a / "back-f32" / "config.json").read_text())
           for a in ARCHS}  # fmt: skip
    assert cfg["qwen2audio"]["audio_config"]["d_model"] == 64
    assert cfg["qwen2audio"]["audio_config"]["encoder_layers"] == 3
    assert cfg["voxtral"]["audio_config"]["intermediate_size"] == 256
    assert cfg["audioflamingo3"]["projector_bias"] is True
    g4 = cfg["gemma4a"]["audio_config"]
    assert g4["subsampling_conv_channels"] == [128, 32] and g4["output_proj_dims"] == 64
    assert g4["conv_kernel_size"] == 5 and g4["use_clipped_linears"] is True
    g4u = cfg["gemma4u"]
    assert (
        g4u["vision_config"]["mm_posemb_size"] == 64
        and g4u["audio_config"]["audio_embed_dim"] == 640
    )
    for a in ARCHS:
        orig = json.loads((work[a] / "config.json").read_text())
        for tower in ("audio_config", "vision_config"):
            for k, v in cfg[a].get(tower, {}).items():
                assert orig[tower][k] == v, (a, k)
        assert ("vision_config" in cfg[a]) == (a in ("gemma4a", "gemma4u"))


def test_audio_only_projector_without_audio_is_refused(work, tmp_path):
    """An audio-only family's projector whose audio row says no encoder, or whose width is
    not the text model's: a named error naming the row, nothing written."""
    from weightsmith.gguf import edit

    d = work["root"] / "voxtral"
    for n, (key, value) in enumerate(
        [("clip.has_audio_encoder", False), ("clip.audio.projection_dim", 512)]
    ):
        proj = edit(d / "mmproj-f32.gguf", {key: value}, out=tmp_path / f"p{n}.gguf")
        with pytest.raises(E.ProjectorMismatch) as ei:
            gguf_to_hf(d / "text-f32.gguf", tmp_path / "out", mmproj=proj)
        assert ei.value.field == key
        assert not (tmp_path / "out").exists()
    proj = edit(d / "mmproj-f32.gguf", remove=["clip.audio.block_count"], out=tmp_path / "r.gguf")
    with pytest.raises(E.MissingGGUFMetadata, match=r"clip\.audio\.block_count"):
        gguf_to_hf(d / "text-f32.gguf", tmp_path / "out", mmproj=proj)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("ptype", ["qwen2.5o"])
def test_audio_family_not_done_is_refused(work, ptype, tmp_path):
    """Qwen2.5-Omni's projector has no way back yet (see
    docs/convert-architectures.md): refused naming the projector type (Qwen2.5-Omni's
    with the reason: its joint class needs the talker's speaker table), nothing
    written."""
    from weightsmith.gguf import edit

    d = work["root"] / "voxtral"
    proj = edit(d / "mmproj-f32.gguf", {"clip.projector_type": ptype}, out=tmp_path / "p.gguf")
    with pytest.raises(E.ProjectorMismatch) as ei:
        gguf_to_hf(d / "text-f32.gguf", tmp_path / "out", mmproj=proj)
    assert ei.value.field == "clip.projector_type" and ptype in str(ei.value)
    assert ("spk_dict.pt" in str(ei.value)) == (ptype == "qwen2.5o")
    assert not (tmp_path / "out").exists()
