"""Dots3 Note (``Dots3NoteForConditionalGeneration``) against llama.cpp's converter and
runtime: the ``dots3note`` text and the projector (vision ``dots3note_v`` and audio
``dots3note_a`` in one file).

The tiny model (tests/support/dots3_models.py) is built by transformers 5.24 from the
Hub's flat config and saved with that config (transformers' own normalised one has no
``swa_*`` fields; tests/test_convert_dots3_pockettts.py).  The pinned reference is run on
transformers 4.47.1 (which does not know the model type and reads config.json as
written), as for Nemotron-H and MiniMax-M3: on 5.24 its AutoConfig view loses the Hub's
``rope_theta`` and its file has no ``rope.freq_base`` (measured; not pinned here: a
second reference run costs 28 s).  Checked:

* text: byte-identical to ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and at
  q4_k_m to its f32 through ``llama_model_quantize``; llama.cpp's logits on ours are those
  on the reference's file, and transformers' (16 tokens: the sliding layers' window of 8
  is exceeded, the indexer keeps every key); GGUF -> HF of the text alone refused by
  name (with its projector: tests/test_convert_dots3_to_hf.py);
* projector: byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32, f16, bf16 and
  q8_0; mtmd (llama-cpp-python 0.3.36) loads ours with our text file and encodes images
  into transformers' ``get_image_features`` and audio into its ``get_audio_features``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support.dots3_models import dots3_note_hub
from support.llama_sdist import llama_cpp_root
from support.meta_oracle import oracle_env
from test_convert_archs import _llama_logits_f32_kv
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import _DRIVER, TYPES, _mtmd_embeddings, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANT = "q4_k_m"
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272, 50, 60, 70, 80, 90, 100, 110, 120]


def _reference(jobs: list[list[str]], env: dict | None) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return subprocess.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)],
                          capture_output=True, text=True, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def d3(tmp_path_factory):
    """The model folder; the reference's text files (each type, q4_k_m through
    llama_model_quantize) and projectors, on transformers 4.47.1; ours."""
    root = tmp_path_factory.mktemp("dots3")
    src = dots3_note_hub(root / "hub")
    jobs = []
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t])
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    r = _reference(jobs, oracle_env())
    assert r.returncode == 0, r.stderr[-3000:]
    _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{QUANT}.gguf", QUANT)
    hf_to_gguf(src, root / f"ours-text-{QUANT}.gguf", QUANT)
    return root


@pytest.fixture(scope="module")
def hf_model(d3):
    import torch
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(d3 / "hub", dtype=torch.float32).eval()


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(d3, t):
    _same(d3 / f"ours-mmproj-{t}.gguf", d3 / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", [*TYPES, QUANT])
def test_text_same_as_reference(d3, t):
    _same(d3 / f"ours-text-{t}.gguf", d3 / f"ref-text-{t}.gguf")


def test_contents(d3):
    """Guard against a vacuous pass: per-layer head counts, the sliding and indexer
    patterns, the two kinds' k_b / v_b, the latent rescale folded into the norms."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(d3 / "ours-text-f32.gguf") as f:
        md = f.metadata
        types = {t.name: t.shape for t in f.tensors}
        qn = np.array(f.numpy("blk.2.attn_q_a_norm.weight"))
        kvn = np.array(f.numpy("blk.0.attn_kv_a_norm.weight"))
    assert md["general.architecture"] == "dots3note"
    assert list(md["dots3note.attention.head_count"]) == [4, 4, 2, 2]
    assert list(md["dots3note.attention.sliding_window_pattern"]) == [False, False, True, True]
    assert list(md["dots3note.attention.indexer.types"]) == [True, True, False, False]
    assert md["dots3note.rope.freq_base_swa"] == 50000.0
    assert md["tokenizer.ggml.eot_token_id"] == 50257
    assert types["blk.0.attn_k_b.weight"] == (4, 32, 16)
    assert types["blk.3.attn_k_b.weight"] == (2, 32, 16)
    assert types["blk.2.attn_gate.weight"] == (2, 64)
    assert "blk.1.indexer.attn_q_b.weight" in types and "blk.2.indexer.proj.weight" not in types
    hub = load_file(d3 / "hub" / "model.safetensors")
    # sqrt(64 / 32): the rescale of the 32-wide latents, in float32
    s = np.float32(np.sqrt(2.0))
    np.testing.assert_array_equal(qn, hub["model.layers.2.self_attn.q_a_layernorm.weight"] * s)
    np.testing.assert_array_equal(kvn, hub["model.layers.0.self_attn.kv_a_layernorm.weight"] * s)


def test_projector_contents(d3):
    """Guard against a vacuous pass: both halves, the pyramid MoE stacked and routed in F32
    at q8_0, the audio fc1 split, the convolutions F32."""
    from weightsmith.gguf import read

    with read(d3 / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.vision.projector_type"] == "dots3note_v"
    assert md["clip.audio.projector_type"] == "dots3note_a"
    assert list(md["clip.vision.expert_count_per_layer"]) == [0, 4]
    assert md["clip.vision.embedding_length"] == 32 and md["clip.vision.image_size"] == 0
    assert types["v.blk.1.ffn_gate_exps.weight"] == ("Q8_0", (4, 32, 32))
    assert types["v.blk.1.ffn_gate_inp.weight"] == ("F32", (4, 32))
    assert types["v.blk.0.ffn_gate.weight"] == ("Q8_0", (64, 32))
    assert types["a.blk.0.ffn_gate.weight"] == types["a.blk.0.ffn_up.weight"] == ("Q8_0", (64, 32))
    assert types["a.conv2d.2.weight"] == ("F32", (16, 16, 3, 3))
    assert types["a.conv_out.weight"] == ("F32", (32, 256))


def _hf_image_features(model, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (a multiple of 16 px: no resize), patched as the
    Qwen2-VL-style processor does (one frame): 2x2 merge windows in row order."""
    import torch

    p, mg = 8, 2
    x = (img.astype(np.float32) / 255.0 - np.float32(0.5)) / np.float32(0.5)
    gh, gw = img.shape[0] // p, img.shape[1] // p
    pt = x.transpose(2, 0, 1).reshape(3, gh // mg, mg, p, gw // mg, mg, p)
    pt = pt.transpose(1, 4, 2, 5, 0, 3, 6).reshape(gh * gw, 3 * p * p)
    with torch.no_grad():
        f = model.model.get_image_features(pixel_values=torch.from_numpy(np.ascontiguousarray(pt)),
                                           image_grid_thw=torch.tensor([[1, gh, gw]]))  # fmt: skip
    return torch.cat(list(f.pooler_output), 0).numpy()


@pytest.mark.parametrize("hw", [(64, 64), (32, 64), (64, 32)])
def test_llama_cpp_encodes_image(d3, hf_model, hw):
    """mtmd's image embeddings through our projector vs transformers' features, within
    1e-3 of their scale (measured 8.6e-5, 1.3e-4, 1.1e-4 at a scale of 3)."""
    h, w = hw
    img = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(d3 / "ours-text-f32.gguf", d3 / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(hf_model, img)
    assert want.shape == (h // 16 * (w // 16), 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def _pcm(seconds: float) -> np.ndarray:
    """A seeded 16 kHz waveform: a tone and noise, float32."""
    t = np.arange(int(16000 * seconds)) / 16000
    noise = 0.05 * np.random.default_rng(3).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + noise).astype(np.float32)


@pytest.mark.parametrize("seconds", [1.0, 2.5])
def test_llama_cpp_encodes_audio(d3, hf_model, seconds):
    """mtmd's audio embeddings (its Dots3Note log-mel and the ``dots3note_a`` graph)
    through our projector vs transformers' (Dots3NoteFeatureExtractor +
    ``get_audio_features``): 13 and 32 tokens, within 1e-3 of their scale (measured
    8.9e-5 and 1.7e-4 at a scale of 1.6)."""
    import torch
    from transformers.models.dots3_note.feature_extraction_dots3_note import (
        Dots3NoteFeatureExtractor,
    )

    pcm = _pcm(seconds)
    got = _mtmd_embeddings(d3 / "ours-text-f32.gguf", d3 / "ours-mmproj-f32.gguf", None, pcm)
    inp = Dots3NoteFeatureExtractor()([pcm], sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        out = hf_model.model.get_audio_features(inp["input_features"], inp["chunk_sample_lengths"])
    want = out.pooler_output.reshape(-1, 64).numpy()
    assert want.shape == ({1.0: 13, 2.5: 32}[seconds], 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_text_in_llama_cpp(d3, hf_model):
    """llama.cpp's logits on our text file are those on the reference's, and
    transformers' within 1e-4 of scale (measured 1.3e-6 at scale 2.0).  16 tokens: the
    sliding window (8) is exceeded, the indexer's top 16 keys are all of them."""
    import torch

    ours = _llama_logits_f32_kv(d3 / "ours-text-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(d3 / "ref-text-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    with torch.no_grad():
        hf = hf_model(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 1e-4 * max(scale, 1.0), np.abs(ours - hf).max()


def test_cli_writes_both(d3, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(d3 / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (d3 / "ref-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (d3 / "ref-text-q8_0.gguf").read_bytes()


def test_text_has_no_way_back(d3, tmp_path):
    """GGUF -> HF of the text alone: transformers 5.24 has no text-only class; refused
    by name (with its projector it converts: tests/test_convert_dots3_to_hf.py)."""
    with pytest.raises(E.UnknownArchitecture, match="dots3note"):
        gguf_to_hf(d3 / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("field", ["swa_num_attention_heads", "sliding_window_size"])
def test_missing_hub_field_refused(d3, tmp_path, field):
    """A config without one of the Hub's fields: a named error before any file is
    written.  The weights are linked, not copied."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (d3 / "hub").iterdir():
        if f.name != "config.json":
            (src / f.name).symlink_to(f)
    cfg = json.loads((d3 / "hub" / "config.json").read_text())
    del cfg[field]
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16")
    assert not (tmp_path / "t.gguf").exists()


@pytest.mark.parametrize(
    ("path", "value"),
    [("vision_config.adapter_type", "mlp"), ("audio_config.whisper_config.activation_function",
                                             "gelu")],
)  # fmt: skip
def test_other_tower_variant_refused(d3, tmp_path, path, value):
    """A tower variant the reference's projector class asserts against: a named error
    before either file is written."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (d3 / "hub").iterdir():
        if f.name != "config.json":
            (src / f.name).symlink_to(f)
    cfg = json.loads((d3 / "hub" / "config.json").read_text())
    *outer, last = path.split(".")
    node = cfg
    for k in outer:
        node = node[k]
    node[last] = value
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=path.replace(".", r"\.")):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "p.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "p.gguf").exists()
