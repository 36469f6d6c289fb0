"""Qwen3-ASR (``Qwen3ASRForConditionalGeneration``) against llama.cpp.

A tiny seeded model as transformers 5 saves it (tests/support/vlm_models.py
``qwen3asr``: the Qwen3 text model, Qwen3-Omni's Conv2d-sub-sampling audio encoder of 4
layers and its 2-layer output MLP) and a copy in the layout of Qwen's own release
(``qwen3asr_qwen_layout``: ``thinker_config``, ``thinker.*``, ``proj1`` / ``proj2``):

* ``--mmproj``: our audio-only projector (``qwen3a``) of transformers' layout is
  ``convert_hf_to_gguf.py --mmproj``'s of the Qwen layout byte for byte at f32, f16,
  bf16 and q8_0 (the reference stops on transformers' layout: pinned), ours of the Qwen
  layout the same file; the text file (``qwen3vl``, ChatML template, BOS = EOS =
  ``<|im_end|>``) is the reference's at the same four types and ``llama_model_quantize``'s
  of its f32 at q4_k_m;
* llama.cpp's multimodal runtime (mtmd in llama-cpp-python 0.3.36) loads our projector
  with our text file and encodes 1 s of audio into the features transformers gives;
  llama.cpp's logits on our text file are the reference file's and transformers';
* pinned: a text config without ``mrope_section`` gives a ``qwen3vl`` file llama.cpp
  cannot load (the reference's too); a config without ``audio_config`` is refused with
  a named error before anything is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.vlm_models import build, qwen3asr_qwen_layout
from test_convert_mmproj import _DRIVER, TYPES, _mtmd_embeddings, _same
from test_convert_qwen_omni import SAMPLE_RATE, _pcm
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


def _without_sections(src: Path, dst: Path) -> Path:
    """A copy of ``src`` whose text RoPE has no ``mrope_section`` (what transformers 5's
    own Qwen3-ASR config, a plain Qwen3 one, gives by default); weights linked."""
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    rope = cfg["text_config"]["rope_parameters"]
    cfg["text_config"]["rope_parameters"] = {k: rope[k] for k in ("rope_type", "rope_theta")}
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


@pytest.fixture(scope="module")
def asr(tmp_path_factory) -> Path:
    """The tiny Qwen3-ASR (transformers' layout) and its Qwen-layout copy
    (``qwen/model``); the reference's text at each type (transformers' layout), its
    projectors at each type (Qwen layout) and ours (``ref-*`` / ``ours-*``); the
    reference's ``--mmproj`` of transformers' layout last (it fails: its stderr kept as
    ``ref-hf-layout.log``)."""
    from support.llama_sdist import llama_cpp_root

    root = tmp_path_factory.mktemp("qwen3asr")
    src = build("qwen3asr", root / "model")
    qwen = qwen3asr_qwen_layout(src, root / "qwen" / "model")
    jobs = [[str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t]
            for t in TYPES]  # fmt: skip
    for t in TYPES:
        jobs.append([str(qwen), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    flat = _without_sections(src, root / "flat" / "model")
    jobs.append([str(flat), "--outfile", str(root / "ref-flat-f16.gguf"), "--outtype", "f16"])
    hf_to_gguf(flat, root / "ours-flat-f16.gguf", "f16")
    jobs.append([str(src), "--outfile", str(root / "ref-hf-layout.gguf"), "--outtype", "f16",
                 "--mmproj"])  # fmt: skip
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])  # fmt: skip
    (root / "ref-hf-layout.log").write_text(f"returncode {r.returncode}\n{r.stderr}")
    return src


@pytest.fixture(scope="module")
def hf_model(asr):
    import torch
    from transformers import Qwen3ASRForConditionalGeneration

    m = Qwen3ASRForConditionalGeneration.from_pretrained(asr, dtype=torch.float32)
    return m.eval()


@pytest.mark.parametrize("t", TYPES)
def test_same_as_reference(asr, t):
    root = asr.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    _same(root / f"ours-text-{t}.gguf", root / f"ref-text-{t}.gguf")


def test_reference_fails_on_transformers_layout(asr, tmp_path):
    """Why our projector is compared with the reference's of the Qwen layout: the pinned
    converter's class reads ``thinker_config`` (KeyError on transformers' config) and
    writes nothing; ours reads either layout and writes the same projector."""
    root = asr.parent
    log = (root / "ref-hf-layout.log").read_text()
    assert not log.startswith("returncode 0") and "KeyError: 'thinker_config'" in log
    assert not (root / "ref-hf-layout.gguf").exists()
    assert (root / "ref-mmproj-q8_0.gguf").exists()  # the jobs before it ran
    hf_to_gguf(root / "qwen" / "model", tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == (root / "ours-mmproj-f16.gguf").read_bytes()


def test_contents(asr):
    """Guard against a vacuous pass: the audio tower only, the convs F16 at q8_0, the
    position table first; the text file's template, BOS / EOS and deepstack count."""
    from weightsmith.gguf import read

    with read(asr.parent / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
        first = f.tensors[0].name
    assert md["clip.audio.projector_type"] == "qwen3a" and md["clip.has_audio_encoder"] is True
    assert "clip.has_vision_encoder" not in md and "clip.projector_type" not in md
    assert md["clip.audio.block_count"] == 4 and md["clip.audio.projection_dim"] == 64
    assert first == "a.position_embd.weight"
    assert types["a.position_embd.weight"] == ("F32", (1500, 64))
    assert types["a.conv2d.2.weight"] == ("F16", (32, 32, 3, 3))
    assert types["a.conv2d.3.bias"] == ("F32", (32, 1, 1))
    assert types["mm.a.mlp.1.weight"] == ("Q8_0", (64, 64)) and "mm.a.mlp.2.bias" in types
    assert not any(n.startswith(("v.", "blk.", "token_embd")) for n in types)
    with read(asr.parent / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "qwen3vl" and md["qwen3vl.n_deepstack_layers"] == 0
    assert md["tokenizer.ggml.bos_token_id"] == md["tokenizer.ggml.eos_token_id"] == 151645
    assert md["tokenizer.chat_template"].startswith("{% for message in messages %}")
    assert "blk.1.attn_q_norm.weight" in names and not any(n.startswith("a.") for n in names)


def test_cli_writes_both(asr, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's projector."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(asr), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (
        asr.parent / "ref-mmproj-q8_0.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (asr.parent / "ours-text-q8_0.gguf").read_bytes()


def test_text_same_as_llama_quantize(asr, tmp_path):
    """Our text file at q4_k_m is ``llama_model_quantize`` of the reference's f32."""
    from test_convert_hf_to_gguf import _llama_quantize

    ref = tmp_path / "ref.gguf"
    _llama_quantize(asr.parent / "ref-text-f32.gguf", ref, "q4_k_m")
    hf_to_gguf(asr, tmp_path / "ours.gguf", "q4_k_m")
    _same(tmp_path / "ours.gguf", ref)


def test_llama_cpp_text_logits(asr, hf_model):
    """llama.cpp's logits on our f32 text file equal those on the reference's, and are
    transformers' (text positions on all MRoPE sections = plain RoPE): measured 9.5e-4
    at a scale of 1.9."""
    import torch

    from test_convert_hf_to_gguf import _llama_logits

    tokens = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
    got = _llama_logits(asr.parent / "ours-text-f32.gguf", tokens)
    ref = _llama_logits(asr.parent / "ref-text-f32.gguf", tokens)
    np.testing.assert_array_equal(got, ref)
    with torch.no_grad():
        want = hf_model(input_ids=torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_llama_cpp_encodes_audio(asr, hf_model):
    """mtmd (``qwen3a``: Whisper's mel, 100-frame chunks through the Conv2d stack, 13
    tokens each) encodes 1 s of audio into the 13 features transformers gives for its
    100 mel frames (WhisperFeatureExtractor, no padding; transformers' chunks are
    ``2 n_window`` = 100 frames too): measured 4.8e-4 of their scale.  mtmd keeps one mel frame more (``n_samples / hop +
    1``): a second chunk of that frame and padding, 13 more tokens."""
    import torch
    from transformers import WhisperFeatureExtractor

    root = asr.parent
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    x = WhisperFeatureExtractor(feature_size=128)(
        pcm, sampling_rate=SAMPLE_RATE, return_attention_mask=True, truncation=False,
        padding="longest", return_tensors="pt",
    )  # fmt: skip
    assert x["input_features"].shape[-1] == 100
    with torch.no_grad():
        f = hf_model.get_audio_features(x["input_features"], x["attention_mask"]).pooler_output
    want = (torch.cat(list(f), 0) if isinstance(f, (list, tuple)) else f).float().numpy()
    want = want.reshape(-1, want.shape[-1])
    assert want.shape == (13, 64) and got.shape == (26, 64)
    assert np.abs(got[:13] - want).max() <= 1e-3 * float(np.abs(want).max())


def test_text_alone_has_no_hf_class(asr, tmp_path):
    """GGUF -> HF: the text file (``qwen3vl``) has no HF class of its own, as Qwen3-VL's:
    a named error, nothing written."""
    from weightsmith.convert import gguf_to_hf

    with pytest.raises(E.UnknownArchitecture, match="qwen3vl"):
        gguf_to_hf(asr.parent / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_text_without_sections_not_in_llama_cpp(asr, tmp_path):
    """Without ``mrope_section`` in the text config (transformers 5's default Qwen3-ASR
    config) the reference writes no ``qwen3vl.rope.dimension_sections`` (ours the same
    file), and llama.cpp 0.3.36 cannot load that file (its ``qwen3vl`` requires the key):
    the reference's behaviour, pinned; with the sections (Qwen's release) it loads."""
    from test_convert_hf_to_gguf import _llama_quantize
    from weightsmith.gguf import read

    root = asr.parent
    _same(root / "ours-flat-f16.gguf", root / "ref-flat-f16.gguf")
    with read(root / "ours-flat-f16.gguf") as f:
        assert "qwen3vl.rope.dimension_sections" not in f.metadata
    with read(root / "ours-text-f16.gguf") as f:
        assert list(f.metadata["qwen3vl.rope.dimension_sections"]) == [2, 3, 3, 0]
    with pytest.raises(AssertionError, match="returned"):
        _llama_quantize(root / "ours-flat-f16.gguf", tmp_path / "q.gguf", "q8_0")
    _llama_quantize(root / "ours-text-f16.gguf", tmp_path / "q.gguf", "q8_0")


def test_no_audio_config_refused_before_writing(asr, tmp_path):
    """A Qwen3-ASR config without ``audio_config`` (the reference's class needs one):
    a named error naming it, nothing written."""
    src = tmp_path / "model"
    src.mkdir()
    for p in asr.iterdir():
        (src / p.name).symlink_to(p)
    cfg = json.loads((asr / "config.json").read_text())
    (src / "config.json").unlink()
    (src / "config.json").write_text(
        json.dumps({k: v for k, v in cfg.items() if k != "audio_config"})
    )
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="audio_config"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
