"""Qwen2.5-Omni (``Qwen2_5OmniModel``, the Hub's class name) and Qwen3-Omni MoE
(``Qwen3OmniMoeForConditionalGeneration``) against llama.cpp.

Tiny seeded thinkers (tests/support/vlm_models.py ``qwen25omni`` / ``qwen3omni``: a
Qwen2.5-VL / Qwen3-VL tower, a 2-layer Whisper-style audio encoder, the Qwen2 / Qwen3-VL-
MoE text model with MRoPE sections, all under ``thinker.`` as on the Hub; no talker):

* ``--mmproj``: our projector (both towers in one clip file: ``qwen2.5o``;
  ``qwen3vl_merger`` + ``qwen3a``) is ``convert_hf_to_gguf.py --mmproj``'s file byte for
  byte at f32, f16, bf16 and q8_0 (Qwen3-Omni: of the same weights with the tower saved
  as ``visual.*``, the layout the reference converts; on the Hub's it stops, pinned);
  the text file is the reference's at f16 and ``llama_model_quantize``'s of its f32;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36) loads our projector
  with our text model and encodes an image, and a waveform, into the features
  transformers' thinker gives (``get_image_features``, ``get_audio_features``; the
  window differences of mtmd's audio runtime measured and pinned); it refuses a
  Qwen3-Omni with deepstack mergers (pinned); llama.cpp's logits on our text files are
  the thinker's;
* transformers 5's own class name for Qwen2.5-Omni (which the reference does not
  register) and a thinker without an audio tower are refused with named errors before
  anything is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.vlm_models import build
from test_convert_mmproj import TYPES, _image, _mtmd_embeddings, _same
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

SAMPLE_RATE = 16000


@pytest.fixture(scope="module")
def omni(tmp_path_factory) -> Path:
    """The tiny Qwen2.5-Omni; the reference's projector at each type and its text f16 and
    f32, and ours (``ref-*`` / ``ours-*`` beside the model folder)."""
    from test_convert_mmproj import _reference

    root = tmp_path_factory.mktemp("qwen25omni")
    src = build("qwen25omni", root / "model")
    jobs = [[str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t]
            for t in ("f16", "f32")]  # fmt: skip
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    return src


@pytest.fixture(scope="module")
def thinker(omni):
    """transformers' model of the folder, float32 (the talker is not built)."""
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration

    m = Qwen2_5OmniForConditionalGeneration.from_pretrained(omni, dtype=torch.float32)
    return m.eval()


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(omni, t):
    root = omni.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_projector_contents(omni):
    """Guard against a vacuous pass: both towers are in the file, named, typed and shaped
    as the reference's rules say."""
    from weightsmith.gguf import read

    with read(omni.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
        first = f.tensors[0].name
    assert md["clip.projector_type"] == "qwen2.5o" and md["clip.vision.n_wa_pattern"] == 2
    assert md["clip.has_vision_encoder"] is True and md["clip.has_audio_encoder"] is True
    assert md["clip.audio.embedding_length"] == 64 and md["clip.audio.feed_forward_length"] == 128
    assert md["clip.audio.block_count"] == 2 and md["clip.audio.num_mel_bins"] == 128
    assert md["clip.audio.projection_dim"] == md["clip.vision.projection_dim"] == 64
    # the computed sinusoid table first, F32; the convs F16 even at q8_0, biases as columns
    assert first == "a.position_embd.weight"
    assert types["a.position_embd.weight"] == ("F32", (1500, 64))
    assert types["a.conv1d.1.weight"] == ("F16", (64, 128, 3))
    assert types["a.conv1d.2.bias"] == ("F32", (64, 1))
    assert types["mm.a.fc.weight"][0] == types["a.blk.1.attn_q.weight"][0] == "Q8_0"
    assert types["v.blk.3.attn_k.weight"] == ("Q8_0", (64, 64))  # separate q / k / v
    assert types["v.patch_embd.weight.1"] == ("F32", (64, 3, 8, 8))
    assert not any("bos_eos" in n or n.startswith(("blk.", "token_embd")) for n in types)
    with read(omni.parent / "ours-mmproj-f32.gguf") as f:
        assert f.tensors[0].name == "a.position_embd.weight"
        assert {t.name: t.ggml_type.name for t in f.tensors}["a.conv1d.1.weight"] == "F16"
    with read(omni.parent / "ours-text-f16.gguf") as f:
        md = f.metadata
    assert md["general.architecture"] == "qwen2vl"
    assert list(md["qwen2vl.rope.dimension_sections"]) == [2, 3, 3, 0]


def test_position_table(omni, thinker, monkeypatch):
    """The sinusoid table is transformers' own buffer bit for bit (torch's kernels, as
    the reference computes it); without torch, numpy's float64 functions rounded to
    float32 give it within a few float32 ulps."""
    import sys

    from weightsmith.convert.arch.qwen_omni_audio import sinusoids
    from weightsmith.gguf import read

    buf = next(m for m in thinker.modules() if hasattr(m, "positional_embedding"))
    want = buf.positional_embedding.positional_embedding.numpy()
    with read(omni.parent / "ours-mmproj-f32.gguf") as f:
        got = np.array(f.numpy("a.position_embd.weight"))
    np.testing.assert_array_equal(got, want)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    fallback = sinusoids(64)
    assert not np.array_equal(fallback, want)  # the other path, really taken
    assert np.abs(fallback - want).max() <= 1e-6


def test_cli_writes_both(omni, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's projector."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(omni), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    ref = (omni.parent / "ref-mmproj-q8_0.gguf").read_bytes()
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == ref
    assert dst.read_bytes() == (omni.parent / "ours-text-q8_0.gguf").read_bytes()


def test_llama_cpp_encodes_image(omni, thinker):
    """mtmd (``qwen2.5o`` read as Qwen2.5-VL for images) encodes a 64 x 64 image into the
    16 merged-patch features transformers' thinker gives: measured 3.0e-3 of their scale,
    as for Qwen2.5-VL (the window-attention ViT in ggml's float32 ops)."""
    import torch
    from transformers import AutoImageProcessor

    root = omni.parent
    img = _image(64)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    px = AutoImageProcessor.from_pretrained(omni)(images=[img], return_tensors="pt",
                                                  do_resize=False)  # fmt: skip
    with torch.no_grad():
        f = thinker.thinker.get_image_features(
            pixel_values=px["pixel_values"], image_grid_thw=px["image_grid_thw"]
        ).pooler_output
    want = torch.cat(list(f), 0).float().numpy() if isinstance(f, (list, tuple)) else f.numpy()
    assert got.shape == want.shape == (16, 64)
    assert np.abs(got - want).max() <= 6e-3 * float(np.abs(want).max())


def _pcm(seconds: float) -> np.ndarray:
    """A seeded waveform: two tones and noise, float32 in [-1, 1]."""
    rng = np.random.default_rng(11)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    x = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1234 * t)
    return (x + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def _hf_audio(thinker, pcm: np.ndarray, n_window: int, whole: bool) -> np.ndarray:
    """transformers' audio features of ``pcm`` (Whisper's 128-bin mel, padded to 30 s):
    the encoder attending within chunks of ``2 n_window`` mel frames; ``whole``: the 30 s
    window all valid (as mtmd reads it), else the clip's frames only."""
    import torch
    from transformers import WhisperFeatureExtractor

    x = WhisperFeatureExtractor(feature_size=128)(
        pcm, sampling_rate=SAMPLE_RATE, return_attention_mask=True, padding="max_length",
        return_tensors="pt",
    )  # fmt: skip
    enc = next(m for m in thinker.modules() if hasattr(m, "n_window"))
    saved, enc.n_window = enc.n_window, n_window
    mask = torch.ones_like(x["attention_mask"]) if whole else x["attention_mask"]
    try:
        with torch.no_grad():
            f = thinker.thinker.get_audio_features(x["input_features"], feature_attention_mask=mask)
    finally:
        enc.n_window = saved
    f = f.pooler_output
    return (torch.cat(list(f), 0) if isinstance(f, (list, tuple)) else f).float().numpy()


def test_llama_cpp_encodes_audio(omni, thinker):
    """mtmd (``qwen2.5o`` read as ``qwen2a`` for audio: its Whisper mel front end and
    encoder) encodes a 2 s waveform into the 30 s window's 750 features; transformers
    gives the same features when its encoder attends over the whole window at once
    (``n_window`` = 1500: one chunk of 3000 frames): measured 5.5e-5 of their scale.

    The Hub's ``n_window`` (100) makes transformers attend within 2 s chunks, with the
    position table restarting in each: llama.cpp's runtime does not, and its features of
    the clip differ by about a twentieth of their scale (measured 0.12 at 2.3), which is
    the runtime's, not the file's (the projector file has no ``n_window``)."""
    root = omni.parent
    pcm = _pcm(2.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_audio(thinker, pcm, 1500, whole=True)
    assert got.shape == want.shape == (750, 64)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * scale
    chunked = _hf_audio(thinker, pcm, 100, whole=False)  # the clip's 50 features
    assert chunked.shape == (50, 64)
    assert np.abs(got[:50] - chunked).max() > 0.02 * scale


def test_llama_cpp_text_logits(omni, thinker):
    """llama.cpp's logits on our text file (the thinker's Qwen2 with MRoPE sections, text
    positions on all sections) are the thinker's."""
    import torch

    from test_convert_hf_to_gguf import _llama_logits

    tokens = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
    got = _llama_logits(omni.parent / "ours-text-f32.gguf", tokens)
    with torch.no_grad():
        want = thinker.thinker(input_ids=torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_refused_before_writing(omni, tmp_path):
    """transformers 5's class name (not the reference's: it refuses the folder too) and a
    thinker without an audio tower (the reference's class asserts one): named errors,
    nothing written."""
    src = tmp_path / "model"
    src.mkdir()
    for p in omni.iterdir():
        if p.suffix != ".safetensors":
            shutil.copy(p, src)
    (src / "model.safetensors").symlink_to(omni / "model.safetensors")
    cfg = json.loads((omni / "config.json").read_text())
    out = tmp_path / "out"
    (src / "config.json").write_text(
        json.dumps({**cfg, "architectures": ["Qwen2_5OmniForConditionalGeneration"]})
    )
    with pytest.raises(E.UnknownArchitecture, match="Qwen2_5OmniForConditionalGeneration"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    thinker_cfg = {k: v for k, v in cfg["thinker_config"].items() if k != "audio_config"}
    (src / "config.json").write_text(json.dumps({**cfg, "thinker_config": thinker_cfg}))
    with pytest.raises(E.InvalidModelConfig, match="audio_config"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


# --------------------------------------------------------------------------- Qwen3-Omni


def _hub_visual(k: str) -> str:
    return "visual." + k[len("thinker.visual.") :] if k.startswith("thinker.visual.") else k


def _flat(src: Path, dst: Path) -> None:
    """A copy of ``src`` without deepstack mergers (config and tensors)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["thinker_config"]["vision_config"]["deepstack_visual_indexes"] = []
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = load_file(src / "model.safetensors")
    keep = {k: v for k, v in sd.items() if ".merger_list." not in k}
    save_file(keep, dst / "model.safetensors", metadata={"format": "pt"})


@pytest.fixture(scope="module")
def omni3(tmp_path_factory) -> Path:
    """The tiny Qwen3-Omni MoE (Hub layout: ``thinker.visual.*``) and a copy of it with the
    tower saved as ``visual.*`` (``alt/model``: the layout the pinned reference's
    projector class converts); the reference's text f16 and f32 (of the Hub layout) and
    projectors (of the copy) at each type, and ours of the Hub layout; the reference's
    ``--mmproj`` of the Hub layout last in the same process (it fails: its stderr is
    kept as ``ref-hub-layout.log``)."""
    import sys

    from support.llama_sdist import llama_cpp_root
    from support.vlm_models import hub_layout
    from test_convert_mmproj import _DRIVER

    root = tmp_path_factory.mktemp("qwen3omni")
    src = build("qwen3omni", root / "model")
    alt = root / "alt" / "model"
    shutil.copytree(src, alt)
    hub_layout(alt, _hub_visual)
    jobs = [[str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t]
            for t in ("f16", "f32")]  # fmt: skip
    for t in TYPES:
        jobs.append([str(alt), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    jobs.append([str(src), "--outfile", str(root / "ref-hub-layout.gguf"), "--outtype", "f16",
                 "--mmproj"])  # fmt: skip
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])  # fmt: skip
    (root / "ref-hub-layout.log").write_text(f"returncode {r.returncode}\n{r.stderr}")
    return src


@pytest.fixture(scope="module")
def omni3_flat(omni3) -> tuple:
    """The same Qwen3-Omni without its deepstack mergers (the one mtmd 0.3.36 can load:
    see test_qwen3omni_deepstack_not_in_mtmd), converted by ours at f32, and
    transformers' model of it."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    src = omni3.parent / "flat" / "model"
    _flat(omni3, src)
    hf_to_gguf(src, src.parent / "ours-text-f32.gguf", "f32",
               mmproj=src.parent / "ours-mmproj-f32.gguf")  # fmt: skip
    m = Qwen3OmniMoeForConditionalGeneration.from_pretrained(src, dtype=torch.float32)
    return src, m.eval()


@pytest.mark.parametrize("t", TYPES)
def test_qwen3omni_same_as_reference(omni3, t):
    """Our projector of the Hub's layout is the reference's of the same weights (saved
    as ``visual.*``) byte for byte; the text file (the thinker's ``qwen3vlmoe``) is the
    reference's of the Hub's layout."""
    root = omni3.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_qwen3omni_reference_fails_on_hub_layout(omni3, tmp_path):
    """Why ours is compared with the reference's file of the ``visual.*`` copy: the
    pinned converter renames the Hub's ``thinker.visual.*`` to ``model.visual.*`` and
    stops at the first vision tensor (no file); ours reads the same tensors under either
    name and writes the same file."""
    root = omni3.parent
    log = (root / "ref-hub-layout.log").read_text()
    assert not log.startswith("returncode 0") and "Can not map tensor 'model.visual." in log
    assert not (root / "ref-hub-layout.gguf").exists()
    assert (root / "ref-mmproj-q8_0.gguf").exists()  # the jobs before it ran
    dst = tmp_path / "alt"
    dst.mkdir()
    hf_to_gguf(omni3.parent / "alt" / "model", dst / "t.gguf", "f16", mmproj=dst / "m.gguf")
    assert (dst / "m.gguf").read_bytes() == (omni3.parent / "ours-mmproj-f16.gguf").read_bytes()


def test_qwen3omni_contents(omni3):
    """Guard against a vacuous pass: both towers, the deepstack mergers named by their
    tower layer, the audio convs F16 at q8_0; the text file's BOS and EOS the
    ``<|im_end|>`` id and no deepstack width."""
    from weightsmith.gguf import read

    with read(omni3.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
        first = f.tensors[0].name
    assert md["clip.vision.projector_type"] == "qwen3vl_merger"
    assert md["clip.audio.projector_type"] == "qwen3a" and "clip.projector_type" not in md
    assert list(md["clip.vision.is_deepstack_layers"]) == [False, True, True, False]
    assert md["clip.audio.block_count"] == 2 and md["clip.audio.num_mel_bins"] == 128
    assert first == "a.position_embd.weight"
    assert types["a.position_embd.weight"] == ("F32", (1500, 64))
    assert types["a.conv2d.1.weight"] == ("F16", (32, 1, 3, 3))
    assert types["a.conv2d.3.bias"] == ("F32", (32, 1, 1))
    assert types["a.conv_out.weight"] == ("F16", (64, 512))
    assert types["mm.a.mlp.2.weight"][0] == types["v.deepstack.2.fc1.weight"][0] == "Q8_0"
    assert types["v.deepstack.1.norm.weight"] == ("F32", (256,)) and "mm.0.weight" in types
    with read(omni3.parent / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "qwen3vlmoe" and md["qwen3vlmoe.n_deepstack_layers"] == 0
    assert md["tokenizer.ggml.bos_token_id"] == md["tokenizer.ggml.eos_token_id"] == 151645
    assert "blk.1.ffn_gate_exps.weight" in names


def test_qwen3omni_deepstack_not_in_mtmd(omni3):
    """mtmd 0.3.36 does not load a Qwen3-Omni projector whose tower has deepstack mergers
    (every Hub Qwen3-Omni: layers 8, 16, 24): it wants the vision output width
    (``n_embd x (1 + deepstack)``) equal to the audio one (``n_embd``), and the reference's
    file (ours) has both.  The runtime's limit, not the file's: the same tower without
    mergers loads and runs (test_qwen3omni_llama_cpp_*)."""
    root = omni3.parent
    with pytest.raises(AssertionError, match="did not load"):
        _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", _image(64))


def test_qwen3omni_llama_cpp_image(omni3_flat):
    """mtmd encodes a 64 x 64 image through our projector into the 16 merged-patch
    features transformers' thinker gives: measured 4.4e-4 of their scale."""
    import torch
    from transformers import AutoImageProcessor

    src, m = omni3_flat
    img = _image(64)
    got = _mtmd_embeddings(src.parent / "ours-text-f32.gguf", src.parent / "ours-mmproj-f32.gguf",
                           img)  # fmt: skip
    px = AutoImageProcessor.from_pretrained(src)(images=[img], return_tensors="pt",
                                                 do_resize=False)  # fmt: skip
    with torch.no_grad():
        f = m.thinker.get_image_features(
            pixel_values=px["pixel_values"], image_grid_thw=px["image_grid_thw"]
        ).pooler_output
    want = torch.cat(list(f), 0).float().numpy() if isinstance(f, (list, tuple)) else f.numpy()
    assert got.shape == want.shape == (16, 64)
    assert np.abs(got - want).max() <= 1e-3 * float(np.abs(want).max())


def test_qwen3omni_llama_cpp_audio(omni3_flat):
    """mtmd (``qwen3a``: Whisper's mel, 100-frame chunks through the Conv2d stack, 13
    tokens each) encodes a 2 s waveform into the 26 features transformers' thinker
    gives for its 200 mel frames (WhisperFeatureExtractor, no padding): measured 2.4e-4
    of their scale.  mtmd keeps one mel frame more (``n_samples / hop + 1``, which
    Whisper's extractor drops): a third chunk of that frame and padding, 13 more tokens."""
    import torch
    from transformers import WhisperFeatureExtractor

    src, m = omni3_flat
    pcm = _pcm(2.0)
    got = _mtmd_embeddings(src.parent / "ours-text-f32.gguf", src.parent / "ours-mmproj-f32.gguf",
                           None, pcm)  # fmt: skip
    x = WhisperFeatureExtractor(feature_size=128)(
        pcm, sampling_rate=SAMPLE_RATE, return_attention_mask=True, truncation=False,
        padding="longest", return_tensors="pt",
    )  # fmt: skip
    assert x["input_features"].shape[-1] == 200
    with torch.no_grad():
        f = m.thinker.get_audio_features(
            x["input_features"], feature_attention_mask=x["attention_mask"]
        ).pooler_output
    want = (torch.cat(list(f), 0) if isinstance(f, (list, tuple)) else f).float().numpy()
    assert want.shape == (26, 64) and got.shape == (39, 64)
    assert np.abs(got[:26] - want).max() <= 1e-3 * float(np.abs(want).max())


def test_qwen3omni_llama_cpp_text_logits(omni3_flat):
    """llama.cpp's logits on our text file (Qwen3-VL-MoE: the Hub's per-expert tensors
    stacked) are the thinker's."""
    import torch

    from test_convert_hf_to_gguf import _llama_logits

    src, m = omni3_flat
    tokens = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
    got = _llama_logits(src.parent / "ours-text-f32.gguf", tokens)
    with torch.no_grad():
        want = m.thinker(input_ids=torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


# --------------------------------------------------------------------------- both


@pytest.mark.parametrize(
    ("model", "t"), [("omni", "q4_k_m"), ("omni3", "q4_k_m"), ("omni3", "iq4_xs")]
)
def test_text_same_as_llama_quantize(request, model, t, tmp_path):
    """Our text file at a llama-quantize type is ``llama_model_quantize`` of the
    reference's f32 file, byte for byte (the thinker's Qwen2 / Qwen3-MoE tensors; the
    i-quant on the MoE one, whose stacked experts it quantizes slab by slab)."""
    from test_convert_hf_to_gguf import _llama_quantize

    src = request.getfixturevalue(model)
    ref = tmp_path / "ref.gguf"
    _llama_quantize(src.parent / "ref-text-f32.gguf", ref, t)
    hf_to_gguf(src, tmp_path / "ours.gguf", t)
    _same(tmp_path / "ours.gguf", ref)


@pytest.mark.parametrize(("model", "gguf_arch"), [("omni", "qwen2vl"), ("omni3", "qwen3vlmoe")])
def test_text_alone_has_no_hf_class(request, model, gguf_arch, tmp_path):
    """GGUF -> HF: the thinker's text file has no HF class of its own (as the VL models'
    text files): a named error, nothing written."""
    from weightsmith.convert import gguf_to_hf

    src = request.getfixturevalue(model)
    with pytest.raises(E.UnknownArchitecture, match=gguf_arch):
        gguf_to_hf(src.parent / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()
