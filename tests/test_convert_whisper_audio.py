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

Ultravox (remote code) is assembled in the Hub's layout from transformers' Whisper
encoder, seeded projector weights and a Llama (support.audio_models.ultravox): the same
byte-for-byte checks; mtmd encodes it only at a stack factor that divides the 1500
encoder frames (the Hub's 8 aborts, pinned), compared with transformers' Whisper encoder
followed by our own torch statement of its projector.  MERaLiON 2 likewise (a Gemma 2
under ``text_decoder.``): mtmd's graph normalises the stacked rows where the model
normalises frames (the measured gap, pinned).
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

from support import pyfork
from support.audio_models import audioflamingo3, glmasr, meralion2, qwen2audio, ultravox, voxtral
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
    r = pyfork.run([sys.executable, str(llama_cpp_root() / "convert_hf_to_gguf.py"), str(src),
                        "--outfile", str(ref), "--outtype", "f16", "--mmproj"])  # fmt: skip
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


# ------------------------------------------------------------------------------ Ultravox
#
# Remote code on the Hub (transformers cannot build ``UltravoxModel``): the tiny folder is
# assembled in the Hub's layout by support.audio_models.ultravox (transformers' own Whisper
# encoder, seeded projector weights under the Hub's names, a Llama text model).


@pytest.fixture(scope="module")
def uvx(tmp_path_factory) -> dict[str, Path]:
    """``s8``: the tiny Ultravox at the Hub's stack factor 8 (ours and the reference's
    projector at each type, and the text f16); ``s4``: the same at stack factor 4 (both
    projectors at f32), the one mtmd 0.3.36 can encode.  Reference runs in one batch."""
    root = tmp_path_factory.mktemp("uvx")
    s8, s4 = ultravox(root / "s8" / "model"), ultravox(root / "s4" / "model", stack=4, seed=56)
    jobs = [[str(s8), "--outfile", str(root / "ref-text-f16.gguf"), "--outtype", "f16"]]
    for t in TYPES:
        jobs.append([str(s8), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(s8, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    jobs.append([str(s4), "--outfile", str(root / "ref4-mmproj-f32.gguf"), "--outtype", "f32",
                 "--mmproj"])  # fmt: skip
    hf_to_gguf(s4, root / "ours4-text-f32.gguf", "f32", mmproj=root / "ours4-mmproj-f32.gguf")
    _reference(jobs)
    return {"root": root, "s8": s8, "s4": s4}


@pytest.mark.parametrize("t", TYPES)
def test_ultravox_same_as_reference(uvx, t):
    """Our projector is the reference's byte for byte (and the text file beside it: the
    reference converts an Ultravox folder's text as its ``text_config`` architecture, a
    Llama under ``language_model.``)."""
    root = uvx["root"]
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")
    if t == "f32":
        _same(root / "ours4-mmproj-f32.gguf", root / "ref4-mmproj-f32.gguf")


def test_ultravox_contents(uvx):
    """Guard against a vacuous pass: the ``ultravox`` rows, the stack factor from the top
    level, the RMSNorm weights F32, no projector biases."""
    from weightsmith.gguf import read

    with read(uvx["root"] / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "ultravox" and "clip.has_vision_encoder" not in md
    assert md["clip.audio.projector.stack_factor"] == 8
    assert md["clip.audio.embedding_length"] == 64 and md["clip.audio.block_count"] == 3
    assert md["clip.audio.projection_dim"] == 256 and md["clip.audio.num_mel_bins"] == 128
    assert types["mm.a.norm_pre.weight"] == ("F32", (512,))
    assert types["mm.a.mlp.1.weight"] == ("Q8_0", (128, 512))
    assert types["mm.a.norm_mid.weight"] == ("F32", (64,))
    assert types["mm.a.mlp.2.weight"] == ("Q8_0", (256, 64))
    assert not any(n.startswith("mm.") and n.endswith(".bias") for n in types)
    assert types["a.conv1d.1.weight"][0] == "F16" and len(types) == 56


def test_ultravox_stack_factor_missing_refused(uvx, tmp_path):
    """Without the top-level ``stack_factor`` (the reference: a KeyError): a named error,
    nothing written."""
    src = tmp_path / "model"
    src.mkdir()
    for p in uvx["s8"].iterdir():
        (src / p.name).symlink_to(p)
    cfg = json.loads((uvx["s8"] / "config.json").read_text())
    del cfg["stack_factor"]
    (src / "config.json").unlink()
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="stack_factor"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_ultravox_mtmd_cannot_encode_stack_8(uvx):
    """mtmd 0.3.36 loads our Ultravox projector at the Hub's stack factor 8 (all 56
    tensors) but cannot encode its audio: its graph stacks the 1500 encoder frames by 8
    into 188 rows (padded) while it counts align(3000, 8) / 8 / 2 = 187 tokens, and it
    aborts on the mismatch (the reference's byte-identical file alike)."""
    root = uvx["root"]
    r = _mtmd_in_subprocess(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf")
    assert "load_tensors: loaded 56 tensors" in r.stderr, r.stderr[-3000:]
    assert r.returncode != 0, r.stdout
    assert "expected output 187 tokens, got 188" in r.stderr, r.stderr[-3000:]


def _ultravox_features(folder: Path, pcm: np.ndarray) -> np.ndarray:
    """(a) transformers' Whisper encoder (WhisperFeatureExtractor's mel, then
    ``WhisperEncoder`` with the checkpoint's ``audio_tower.*``) -- the oracle; then (b) our
    own torch re-statement of Ultravox's documented projector (remote code, not importable):
    frames zero-padded and stacked by ``stack_factor``, RMSNorm (eps 1e-6), ``linear_1``,
    SwiGLU (SiLU on the second half, times the first), RMSNorm, ``linear_2``."""
    import torch
    from safetensors.torch import load_file
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = json.loads((folder / "config.json").read_text())
    sd = {k: v.float() for k, v in load_file(folder / "model.safetensors").items()}
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SAMPLE_RATE)
    feats = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_features"]
    enc = WhisperEncoder(WhisperConfig(**cfg["audio_config"])).eval()
    tower = "audio_tower."
    enc.load_state_dict({k[len(tower) :]: v for k, v in sd.items() if k.startswith(tower)})
    p = {k.split(".", 1)[1]: v for k, v in sd.items() if k.startswith("multi_modal_projector.")}
    s = cfg["stack_factor"]

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    with torch.no_grad():
        h = enc(feats).last_hidden_state[0]
        n, c = h.shape
        h = torch.nn.functional.pad(h, (0, 0, 0, (-n) % s)).reshape(-1, c * s)
        x = rms(h, p["ln_pre.weight"]) @ p["linear_1.weight"].T
        a, gate = x.chunk(2, dim=-1)
        x = rms(torch.nn.functional.silu(gate) * a, p["ln_mid.weight"])
        return (x @ p["linear_2.weight"].T).numpy()


def test_ultravox_llama_cpp_encodes_audio(uvx):
    """At stack factor 4 (1500 frames divide evenly: mtmd's count and graph agree), mtmd
    loads our projector with our text file and encodes 1 s of audio into (a) + (b) above:
    375 tokens, measured within 1.5e-4 of their scale (1.4)."""
    root, pcm = uvx["root"], _pcm(1.0)
    got = _mtmd_embeddings(root / "ours4-text-f32.gguf", root / "ours4-mmproj-f32.gguf", None, pcm)
    want = _ultravox_features(uvx["s4"], pcm)
    assert got.shape == want.shape == (375, 256), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


def test_ultravox_text_in_llama_cpp_and_back(uvx, tmp_path):
    """The text file beside the projector: llama.cpp's logits equal transformers' on the
    Llama the folder holds (saved alone beside it), and GGUF -> HF gives its tensors
    exactly and the same logits."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from test_convert_archs import _llama_logits_f32_kv
    from weightsmith.convert import gguf_to_hf

    alone = uvx["s8"].parent / "llama" / "model"
    tokens = [1, 5, 17, 42, 99, 7, 300, 11]
    m = AutoModelForCausalLM.from_pretrained(alone, dtype=torch.float32).eval()
    with torch.no_grad():
        want = m(torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    got = _llama_logits_f32_kv(uvx["root"] / "ours-text-f32.gguf", tokens)
    assert float(np.abs(got - want).max()) <= 2e-3 * max(scale, 1.0)
    back = tmp_path / "back"
    gguf_to_hf(uvx["root"] / "ours-text-f32.gguf", back, dtype="f32")
    orig = load_file(alone / "model.safetensors")
    sd = load_file(back / "model.safetensors")
    assert sorted(sd) == sorted(orig)
    for k, v in orig.items():
        assert torch.equal(sd[k], v.float()), k
    m2 = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    with torch.no_grad():
        again = m2(torch.tensor([tokens])).logits[0].numpy()
    assert float(np.abs(again - want).max()) <= 1e-5 * max(scale, 1.0)


def test_ultravox_hub_folder_without_text(uvx, tmp_path):
    """The Hub's own Ultravox folders hold no text weights (``text_model_id`` names the
    model): the projector is the same file, and the text file beside it is metadata only
    (0 tensors), as the reference writes it too (measured byte-identical by hand)."""
    from safetensors.torch import load_file, save_file

    from weightsmith.gguf import read

    src = tmp_path / "model"  # the same folder name: the same general.name rows
    src.mkdir()
    for name in ("config.json", "tokenizer.model"):
        (src / name).symlink_to(uvx["s8"] / name)
    sd = load_file(uvx["s8"] / "model.safetensors")
    save_file({k: v for k, v in sd.items() if not k.startswith("language_model.")},
              src / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    out = tmp_path / "out"
    hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    _same(out / "m.gguf", uvx["root"] / "ref-mmproj-f16.gguf")
    with read(out / "t.gguf") as f:
        assert f.metadata["general.architecture"] == "llama" and len(f.tensors) == 0


# ---------------------------------------------------------------------------- MERaLiON 2


@pytest.fixture(scope="module")
def mer(tmp_path_factory) -> Path:
    """The tiny MERaLiON 2 (support.audio_models.meralion2); beside it ours and the
    reference's projector at each type, the reference's text f16 of the Gemma 2 saved
    alone (``gemma2/model``: the reference's text run refuses the MERaLiON folder)."""
    root = tmp_path_factory.mktemp("mer")
    src = meralion2(root / "model")
    alone = root / "gemma2" / "model"
    jobs = [[str(alone), "--outfile", str(root / "ref-text-f16.gguf"), "--outtype", "f16"]]
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    return src


@pytest.mark.parametrize("t", TYPES)
def test_meralion2_same_as_reference(mer, t):
    """Our projector is the reference's byte for byte; our text file (the Gemma 2 under
    ``text_decoder.``) is the reference's file of that Gemma 2 saved alone."""
    root = mer.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_meralion2_contents(mer):
    """Guard against a vacuous pass: ``speech_config`` read as the audio config, the
    stack factor, the LayerNorm and the four linears with their biases."""
    from weightsmith.gguf import read

    with read(mer.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "meralion" and "clip.has_vision_encoder" not in md
    assert md["clip.audio.projector.stack_factor"] == 15
    assert md["clip.audio.embedding_length"] == 64 and md["clip.audio.block_count"] == 3
    assert md["clip.audio.projection_dim"] == 256
    assert types["mm.a.norm_pre.weight"] == ("F32", (64,)) and "mm.a.norm_pre.bias" in types
    assert types["mm.a.mlp.0.weight"] == ("Q8_0", (320, 960))
    assert types["mm.a.mlp.3.weight"] == ("Q8_0", (256, 320)) and "mm.a.mlp.3.bias" in types
    assert types["a.conv1d.1.weight"][0] == "F16" and len(types) == 62
    assert not any(n.startswith(("token_embd", "blk.")) for n in types)


def _meralion2_features(folder: Path, pcm: np.ndarray, norm_after_stack: bool) -> np.ndarray:
    """(a) transformers' Whisper encoder on WhisperFeatureExtractor's mel (``speech_encoder.*``)
    -- the oracle; then (b) our own torch statement of MERaLiON 2's documented adaptor
    (remote code, not importable): ``ln_speech`` (LayerNorm, eps 1e-5) over each frame,
    frames stacked by ``speech_mlp_scale_factor``, ``mlp_adapter.0`` + SiLU, SiLU(gate) x
    pool, ``out_proj``.  ``norm_after_stack``: the LayerNorm over each stacked row instead
    (its weight and bias repeated), as mtmd's ``meralion`` graph does."""
    import torch
    from safetensors.torch import load_file
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    F = torch.nn.functional
    cfg = json.loads((folder / "config.json").read_text())
    sd = {k: v.float() for k, v in load_file(folder / "model.safetensors").items()}
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SAMPLE_RATE)
    feats = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_features"]
    enc = WhisperEncoder(WhisperConfig(**cfg["speech_config"])).eval()
    tower = "speech_encoder."
    enc.load_state_dict({k[len(tower) :]: v for k, v in sd.items() if k.startswith(tower)})
    s = cfg["speech_mlp_scale_factor"]
    w, b = sd["ln_speech.weight"], sd["ln_speech.bias"]

    def lin(x, name):
        a = "speech_audio_adapter." + name
        return F.linear(x, sd[a + ".weight"], sd[a + ".bias"])

    with torch.no_grad():
        h = enc(feats).last_hidden_state[0]
        c = h.shape[1]
        if norm_after_stack:
            h = F.layer_norm(h.reshape(-1, c * s), (c * s,), w.repeat(s), b.repeat(s), 1e-5)
        else:
            h = F.layer_norm(h, (c,), w, b, 1e-5).reshape(-1, c * s)
        x = F.silu(lin(h, "mlp_adapter.0"))
        x = F.silu(lin(x, "gate_proj")) * lin(x, "pool_proj")
        return lin(x, "out_proj").numpy()


def test_meralion2_llama_cpp_encodes_audio(mer):
    """mtmd loads our MERaLiON 2 projector with our text file and encodes 1 s of audio
    into 100 tokens (1500 frames / 15).  Against (a) + (b) they differ by 8.4e-3 of the
    scale (1.5): mtmd 0.3.36's ``meralion`` graph applies ``ln_speech`` after stacking,
    over each 15-frame row, where the model normalises each frame; with that one change
    (b') they agree within 2.1e-4 (measured).  Both pinned: the gap is mtmd's graph, not
    the file (byte-identical to the reference's)."""
    root, pcm = mer.parent, _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _meralion2_features(mer, pcm, norm_after_stack=False)
    as_mtmd = _meralion2_features(mer, pcm, norm_after_stack=True)
    assert got.shape == want.shape == (100, 256), (got.shape, want.shape)
    scale = float(np.abs(want).max())
    err_model = float(np.abs(got - want).max()) / scale
    err_graph = float(np.abs(got - as_mtmd).max()) / scale
    assert err_graph < 1e-3, err_graph
    assert err_model > 5 * err_graph and err_model < 5e-2, (err_model, err_graph)


def test_meralion2_text_in_llama_cpp_and_back(mer, tmp_path):
    """The text file: llama.cpp's logits equal transformers' on the Gemma 2 saved alone,
    and GGUF -> HF gives its tensors exactly."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from test_convert_archs import _llama_logits_f32_kv
    from weightsmith.convert import gguf_to_hf

    alone = mer.parent / "gemma2" / "model"
    tokens = [1, 5, 17, 42, 99, 7, 300, 11]
    m = AutoModelForCausalLM.from_pretrained(alone, dtype=torch.float32).eval()
    with torch.no_grad():
        want = m(torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    got = _llama_logits_f32_kv(mer.parent / "ours-text-f32.gguf", tokens)
    assert float(np.abs(got - want).max()) <= 2e-3 * max(scale, 1.0)
    back = tmp_path / "back"
    gguf_to_hf(mer.parent / "ours-text-f32.gguf", back, dtype="f32")
    orig = load_file(alone / "model.safetensors")
    sd = load_file(back / "model.safetensors")
    assert sorted(sd) == sorted(orig)
    for k, v in orig.items():
        assert torch.equal(sd[k], v.float()), k


def test_meralion2_reference_text_refused(mer):
    """The pinned reference cannot convert a MERaLiON 2 folder's text (its Gemma 2 class
    meets the adaptor's tensors), which is why our text file is compared with its file
    of the same Gemma 2 saved alone."""
    out = mer.parent / "ref-text-refused.gguf"
    r = pyfork.run([sys.executable, str(llama_cpp_root() / "convert_hf_to_gguf.py"), str(mer),
                        "--outfile", str(out), "--outtype", "f16"])  # fmt: skip
    assert r.returncode != 0, r.stderr[-2000:]
    assert "Can not map tensor 'ln_speech.bias'" in r.stderr, r.stderr[-2000:]
    assert not out.exists()


@pytest.mark.parametrize("fixture", ["uvx", "mer"])
def test_remote_code_cli_writes_both(request, fixture, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj`` on the remote-code folders: the
    reference's projector and our text file, as the API writes them."""
    from weightsmith.cli._main import main

    got = request.getfixturevalue(fixture)
    src, root = (got["s8"], got["root"]) if fixture == "uvx" else (got, got.parent)
    dst = tmp_path / "t.gguf"
    assert main(["convert", str(src), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-t.gguf").read_bytes() == (root / "ref-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (root / "ours-text-q8_0.gguf").read_bytes()


@pytest.mark.parametrize("fixture", ["uvx", "mer"])
def test_remote_code_pair_back_refused(request, fixture, tmp_path):
    """GGUF -> HF of the pair: no transformers class to rebuild a remote-code model into;
    refused naming the projector type, nothing written."""
    from weightsmith.convert import gguf_to_hf

    got = request.getfixturevalue(fixture)
    root = got["root"] if fixture == "uvx" else got.parent
    out = tmp_path / "out"
    with pytest.raises(E.ProjectorMismatch, match="remote code") as ei:
        gguf_to_hf(root / "ours-text-f32.gguf", out, mmproj=root / "ours-mmproj-f32.gguf")
    assert ei.value.field == "clip.projector_type"
    assert not out.exists()
