"""Whisper-encoder audio projectors (conversion/ultravox.py) in the ``--mmproj`` file.

Tiny seeded models with transformers 5's classes (a 3-layer Whisper encoder of width 64,
128 mel bins, 1500 positions): ``VoxtralForConditionalGeneration`` (outputs stacked by 4
into a 2-layer MLP; a Llama text model), ``Qwen2AudioForConditionalGeneration``
(Whisper's own field names, average pooling, one linear projector; a Qwen2 text model)
and ``AudioFlamingo3ForConditionalGeneration`` (pooled, a 2-layer MLP; Qwen2 text):

* our projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32, f16,
  bf16 and q8_0 (an audio-only clip file), and the text file beside it too;
* the text file in llama.cpp gives transformers' logits, and converts back (GGUF -> HF)
  to the text model's exact tensors;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36) loads Qwen2-Audio's
  and Audio Flamingo 3's with our text file and encodes a waveform into the features
  transformers computes for the same samples; it loads Voxtral's but cannot encode Voxtral audio at all (a
  token-count abort, pinned here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.audio_models import audioflamingo3, glmasr, qwen2audio, voxtral
from support.llama_sdist import llama_cpp_root
from test_convert_gemma4_audio import _pcm
from test_convert_mmproj import TYPES, _mtmd_embeddings, _reference, _same
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

SAMPLE_RATE = 16000


#: fixture name -> builder
BUILDERS = {"vox": voxtral, "q2a": qwen2audio, "af3": audioflamingo3}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Each tiny model; beside its folder the reference's projector at each type and its
    text f16 (``ref-*``), and ours (``ours-*``).  The reference's runs go in one batch
    (torch loads once)."""
    out, jobs = {}, []
    for name, build in BUILDERS.items():
        root = tmp_path_factory.mktemp(name)
        src = out[name] = build(root / "model")
        jobs.append([str(src), "--outfile", str(root / "ref-text-f16.gguf"), "--outtype", "f16"])
        for t in TYPES:
            jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"),
                         "--outtype", t, "--mmproj"])  # fmt: skip
            hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    return out


@pytest.fixture(scope="module")
def vox(models) -> Path:
    """The tiny Voxtral."""
    return models["vox"]


@pytest.fixture(scope="module")
def q2a(models) -> Path:
    """The tiny Qwen2-Audio."""
    return models["q2a"]


@pytest.fixture(scope="module")
def af3(models) -> Path:
    """The tiny Audio Flamingo 3."""
    return models["af3"]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("model", ["vox", "q2a", "af3"])
def test_same_as_reference(request, model, t):
    root = request.getfixturevalue(model).parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_voxtral_contents(vox):
    """Guard against a vacuous pass: an audio-only file, the Whisper rows and types."""
    from weightsmith.gguf import read

    with read(vox.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.has_audio_encoder"] is True and "clip.has_vision_encoder" not in md
    assert md["clip.projector_type"] == "voxtral"
    assert md["clip.audio.projection_dim"] == 256 and md["clip.audio.embedding_length"] == 64
    assert md["clip.audio.feed_forward_length"] == 256 and md["clip.audio.block_count"] == 3
    assert md["clip.audio.num_mel_bins"] == 128
    assert md["clip.audio.projector.stack_factor"] == 4
    assert not any(n.startswith("v.") for n in types)
    # conv weights F16 at every type, their biases a [C, 1] column
    assert types["a.conv1d.1.weight"] == ("F16", (64, 128, 3))
    assert types["a.conv1d.2.bias"] == ("F32", (64, 1))
    assert types["a.position_embd.weight"] == ("F32", (1500, 64))
    assert types["mm.a.mlp.1.weight"] == ("Q8_0", (256, 256))
    assert types["a.blk.2.attn_k.weight"][0] == "Q8_0" and "a.blk.2.attn_k.bias" not in types
    with read(vox.parent / "ours-mmproj-f32.gguf") as f:
        assert f.tensor("a.conv1d.2.weight").ggml_type.name == "F16"


def test_cli_writes_both(vox, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the same two files as the API."""
    from weightsmith.cli._main import main

    dst = tmp_path / "v.gguf"
    assert main(["convert", str(vox), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-v.gguf").read_bytes() == (
        vox.parent / "ref-mmproj-q8_0.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (vox.parent / "ours-text-q8_0.gguf").read_bytes()


_MTMD_RUN = """
import sys
from pathlib import Path
from test_convert_mmproj import _mtmd_embeddings
from test_convert_gemma4_audio import _pcm
e = _mtmd_embeddings(Path(sys.argv[1]), Path(sys.argv[2]), None, _pcm(1.0))
print("tokens", e.shape[0])
"""


def _mtmd_in_subprocess(text: Path, mmproj: Path) -> subprocess.CompletedProcess:
    """_mtmd_embeddings of 1 s of audio in a child process (a GGML abort kills it)."""
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "src"), str(tests)])}
    return subprocess.run([sys.executable, "-c", _MTMD_RUN, str(text), str(mmproj)],
                          capture_output=True, text=True, env=env)  # fmt: skip


def test_voxtral_mtmd_loads_but_cannot_encode(vox):
    """mtmd 0.3.36 loads our Voxtral projector (all 54 tensors, the ``voxtral`` graph) with
    our text model, but cannot encode any Voxtral audio: its graph average-pools the 1500
    encoder frames to 750 before stacking them by 4 (188 tokens) while it counts 187
    (3000 frames / 4 / 2 / 2), and it aborts on the mismatch.  transformers' Voxtral
    does not pool (375 tokens per 30 s window), so there are no llama.cpp embeddings to
    compare.  (The reference's file is byte-identical to ours: it fails alike.)"""
    root = vox.parent
    r = _mtmd_in_subprocess(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf")
    assert "load_tensors: loaded 54 tensors" in r.stderr, r.stderr[-3000:]
    assert r.returncode != 0, r.stdout
    assert "expected output 187 tokens, got 188" in r.stderr, r.stderr[-3000:]


def test_qwen2audio_contents(q2a):
    """Whisper's own field names read as the sizes; one linear projector with its bias."""
    from weightsmith.gguf import read

    with read(q2a.parent / "ours-mmproj-bf16.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "qwen2a" and "clip.audio.projector.stack_factor" not in md
    assert md["clip.audio.embedding_length"] == 64 and md["clip.audio.feed_forward_length"] == 128
    assert md["clip.audio.block_count"] == 3 and md["clip.audio.attention.head_count"] == 2
    assert types["mm.a.fc.weight"] == ("BF16", (256, 64)) and types["mm.a.fc.bias"][0] == "F32"
    assert types["a.conv1d.1.weight"][0] == "F16" and types["a.blk.0.ffn_up.weight"][0] == "BF16"


def _hf_qwen2audio_features(folder: Path, pcm: np.ndarray) -> np.ndarray:
    import torch
    from transformers import Qwen2AudioForConditionalGeneration, WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SAMPLE_RATE)
    inp = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")
    m = Qwen2AudioForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        h = m.model.audio_tower(inp["input_features"]).last_hidden_state
        return m.model.multi_modal_projector(h)[0].float().numpy()


def test_qwen2audio_llama_cpp_encodes_audio(q2a):
    """mtmd loads our Qwen2-Audio projector with our text model and encodes a 1 s
    waveform (its Whisper mel front end, padded to the 30 s window) into the features
    transformers computes for it (WhisperFeatureExtractor, the audio tower with its
    average pooling, the projector): 750 tokens, measured within 3.9e-5 of their scale."""
    root = q2a.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_qwen2audio_features(q2a, pcm)
    assert got.shape == want.shape == (750, 256), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


def test_audioflamingo3_contents(af3):
    """Conv weights F32 even at f16 (its class's rule), the MLP's biases kept."""
    from weightsmith.gguf import read

    with read(af3.parent / "ours-mmproj-f16.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "musicflamingo"
    assert types["a.conv1d.1.weight"] == ("F32", (64, 128, 3))
    assert types["mm.a.mlp.1.weight"] == ("F16", (256, 64)) and "mm.a.mlp.2.bias" in types


def _hf_audioflamingo3_features(folder: Path, pcm: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AudioFlamingo3ForConditionalGeneration, WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SAMPLE_RATE)
    feats = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_features"]
    m = AudioFlamingo3ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    # the whole 30 s window attended (mtmd masks no frame)
    mask = torch.ones(feats.shape[0], feats.shape[-1], dtype=torch.long)
    with torch.no_grad():
        return m.get_audio_features(feats, mask).pooler_output.float().numpy()


def test_audioflamingo3_llama_cpp_encodes_audio(af3):
    """mtmd (its ``musicflamingo`` graph) encodes 1 s of audio with our projector into
    transformers' ``get_audio_features`` over the whole 30 s window: 750 tokens, measured
    within 3.3e-5 of their scale (3.5)."""
    root = af3.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_audioflamingo3_features(af3, pcm)
    assert got.shape == want.shape == (750, 256), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


#: fixture name -> the class whose text half the text GGUF is
_FULL = {"vox": "VoxtralForConditionalGeneration", "q2a": "Qwen2AudioForConditionalGeneration",
         "af3": "AudioFlamingo3ForConditionalGeneration"}  # fmt: skip


@pytest.mark.parametrize("model", ["vox", "q2a", "af3"])
def test_text_in_llama_cpp_and_back(request, model, tmp_path):
    """The text GGUF beside the projector: llama.cpp's logits equal transformers' on the
    whole model (text ids only; measured within 2.1e-6 at scale 2.9), and GGUF -> HF
    gives the text model's tensors exactly and the same logits in transformers
    (measured: identical)."""
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from test_convert_archs import _llama_logits_f32_kv
    from weightsmith.convert import gguf_to_hf

    src = request.getfixturevalue(model)
    text = src.parent / "ours-text-f32.gguf"
    tokens = [1, 5, 17, 42, 99, 7, 300, 11]
    full = getattr(transformers, _FULL[model]).from_pretrained(src, dtype=torch.float32).eval()
    with torch.no_grad():
        want = full(input_ids=torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    got = _llama_logits_f32_kv(text, tokens)
    assert float(np.abs(got - want).max()) <= 2e-3 * max(scale, 1.0)
    back = tmp_path / "back"
    gguf_to_hf(text, back, dtype="f32")
    orig = {k[len("language_model.") :]: v for k, v in load_file(src / "model.safetensors").items()
            if k.startswith("language_model.")}  # fmt: skip
    sd = load_file(back / "model.safetensors")
    assert sorted(sd) == sorted(orig)
    for k, v in orig.items():
        assert torch.equal(sd[k], v.float()), k
    m = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    with torch.no_grad():
        again = m(torch.tensor([tokens])).logits[0].numpy()
    assert float(np.abs(again - want).max()) <= 1e-5 * max(scale, 1.0)


def test_audio_config_missing_refused(vox, tmp_path):
    """An audio projector without its audio config: a named error, nothing written."""
    src = tmp_path / "model"
    src.mkdir()
    for p in vox.iterdir():
        (src / p.name).symlink_to(p)
    cfg = json.loads((vox / "config.json").read_text())
    del cfg["audio_config"]["num_mel_bins"]
    (src / "config.json").unlink()
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match="num_mel_bins"):
        hf_to_gguf(src, tmp_path / "out" / "t.gguf", "f16", mmproj=tmp_path / "out" / "m.gguf")
    assert not (tmp_path / "out").exists()


def test_glmasr_transformers_layout_refused(tmp_path):
    """GLM-ASR as transformers 5.24 saves it (``GlmAsrForConditionalGeneration``, the
    layout the Hub's GLM-ASR-Nano-2512 carries since its 2025-12-27 update): the pinned
    converter registers only the older custom-code ``GlmasrModel`` layout
    (``audio_encoder.whisper.*``, ``whisper_config``, ``merge_factor``), which
    transformers cannot build, and refuses this one (text and projector: its class
    lookup by ``architectures[0]`` fails); ours refuses it with a named error before writing anything.  (mtmd's ``glma``
    graph also reads a learned position table, a pre-projector norm and begin/end
    embeddings that this layout does not have: its encoder uses partial RoPE.)"""
    src = glmasr(tmp_path / "model")
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="GlmAsrForConditionalGeneration"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    # the projector run (the text run stops at the same architecture lookup)
    ref = tmp_path / "ref.gguf"
    r = subprocess.run([sys.executable, str(llama_cpp_root() / "convert_hf_to_gguf.py"), str(src),
                        "--outfile", str(ref), "--outtype", "f16", "--mmproj"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode != 0, r.stderr[-2000:]
    assert "Model GlmAsrForConditionalGeneration is not supported" in r.stderr, r.stderr[-2000:]
    assert not ref.exists()


def test_no_audio_tensors_refused(vox, tmp_path):
    """The audio tower and projector under names the entry does not read (``model.*``):
    a named error, nothing written."""
    from support.vlm_models import hub_layout

    src = tmp_path / "model"
    shutil.copytree(vox, src)
    hub_layout(src, lambda k: k if k.startswith("language_model.") else "model." + k)
    out = tmp_path / "out"
    with pytest.raises(E.MissingModelFile, match="no audio tower tensors"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
