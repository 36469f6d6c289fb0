"""MiMo-V2.5's projector (``MiMoV2ForCausalLM``: the ``mimovl`` vision tower and the
``mimo_audio`` encoder, the latter from the second checkpoint ``audio_tokenizer/``)
against llama.cpp's converter and mtmd.

MiMo-V2.5 is remote code on the Hub (no transformers class), so the checkpoint is
hand-built (tests/support/mimo_proj_models.py) beside the tiny fused-qkv text of
tests/support/mimo_models.py.  There is no numeric oracle of the towers: the reference's
files and mtmd's graphs stand in.  Checked:

* the projector file byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32, f16,
  bf16 and q8_0, and the text file beside it at f32 (one reference launch, on
  transformers 4.47.1 as tests/test_convert_mimo.py explains);
* the merged tensors hold the sources: the codebooks zero-padded to the widest, the code
  embeddings stacked, the conv biases as columns;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text file and encodes an
  image and audio into the embeddings the reference's projector gives, finite, and
  different for different inputs;
* ``weightsmith convert DIR out.gguf --mmproj`` writes the reference's two files;
* a folder without ``audio_tokenizer/`` (or with a tokenizer lacking codebooks, or holding
  a tensor the projector cannot name) is refused by name before anything is written, and
  so is GGUF -> HF of the pair (no transformers class holds the towers).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from support.meta_oracle import oracle_env
from support.mimo_models import fused_qkv, mimo_v2_flash, with_mtp
from support.mimo_proj_models import AUDIO, TOKENIZER, mimo_v25_towers
from test_convert_mmproj import TYPES, _mtmd_encode, _same
from test_convert_step35 import _reference
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    """The model folder; the reference's text (f32) and projectors (each type); ours."""
    root = tmp_path_factory.mktemp("mimo_proj")
    src = mimo_v2_flash(root / "hub")
    mtp = with_mtp(src, root / "mtp")
    v25 = fused_qkv(mtp, root / "v25")
    folder = mimo_v25_towers(v25, root / "mm")
    jobs = [[str(folder), "--outfile", str(root / "ref-text-f32.gguf"), "--outtype", "f32"]]
    for t in TYPES:
        jobs.append([str(folder), "--outfile", str(root / f"ref-mmproj-{t}.gguf"),
                     "--outtype", t, "--mmproj"])  # fmt: skip
    r = _reference(jobs, oracle_env())
    assert r.stdout.splitlines()[-len(jobs) :] == ["ok"] * len(jobs), r.stderr[-3000:]
    hf_to_gguf(folder, root / "ours-text-f32.gguf", "f32", mmproj=root / "ours-mmproj-f32.gguf")
    for t in TYPES[1:]:
        hf_to_gguf(folder, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
        (
            root / f"ours-text-{t}.gguf"
        ).unlink()  # the text at other types: tests/test_convert_mimo.py
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(mm, t):
    _same(mm / f"ours-mmproj-{t}.gguf", mm / f"ref-mmproj-{t}.gguf")


def test_text_same_as_reference(mm):
    assert (mm / "ours-text-f32.gguf").read_bytes() == (mm / "ref-text-f32.gguf").read_bytes()


def test_merged_tensors(mm):
    """The codebooks padded with zeros to the widest, the code embeddings stacked in
    channel order, a conv bias as a [C, 1] column; all F32 at q8_0 (the class forces
    them), and the windowed blocks alone carry sinks."""
    from weightsmith.gguf import read

    tok = {k: v.astype(np.float32) for k, v in _bf16(mm / "mm" / "audio_tokenizer").items()}
    main = _bf16(mm / "mm")
    with read(mm / "ours-mmproj-q8_0.gguf") as g:
        types = {t.name: t.ggml_type.name for t in g.tensors}
        cb = np.asarray(g.numpy("a.rvq.codebook.weight"))
        emb = np.asarray(g.numpy("mm.a.code_embd.weight"))
        bias = np.asarray(g.numpy("a.conv1d.1.bias"))
        names = [t.name for t in g.tensors]
    sizes = TOKENIZER["codebook_size"]
    assert cb.shape == (len(sizes), max(sizes), TOKENIZER["d_model"])
    for i, n in enumerate(sizes):
        np.testing.assert_array_equal(
            cb[i, :n], tok[f"encoder.quantizer.vq.layers.{i}._codebook.embed"]
        )
        assert not cb[i, n:].any()
    assert emb.shape[0] == AUDIO["audio_channels"]
    for i in range(AUDIO["audio_channels"]):
        np.testing.assert_array_equal(
            emb[i], main[f"speech_embeddings.{i}.weight"].astype(np.float32)
        )
    np.testing.assert_array_equal(bias, tok["encoder.conv1.bias"].reshape(-1, 1))
    for n in ("a.rvq.codebook.weight", "mm.a.code_embd.weight", "a.conv1d.1.weight",
              "a.downsample.conv.weight"):  # fmt: skip
        assert types[n] == "F32", n
    assert types["v.blk.0.attn_qkv.weight"] == "Q8_0"
    # the tokenizer's tensors first (the codebooks last of them), the patch halves last
    assert names[-1] == "v.patch_embd.weight.1"
    assert names.index("a.rvq.codebook.weight") < names.index("v.blk.0.ln1.weight")
    sinks = sorted(n for n in names if n.endswith("attn_sinks"))
    assert sinks == ["v.blk.0.attn_sinks", "v.blk.1.attn_sinks", "v.blk.3.attn_sinks"]


def _bf16(folder) -> dict:
    import torch
    from safetensors.torch import load_file

    return {
        k: v.to(torch.float32).numpy() for k, v in load_file(folder / "model.safetensors").items()
    }


def test_mtmd_encodes_image_and_audio(mm):
    """mtmd loads our projector with our text file; an image and a second of audio give the
    embeddings the reference's projector gives (bit for bit), finite, one row per merged
    patch / audio group, different for another input."""
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)
    pcm = (rng.standard_normal(24000) * 0.1).astype(np.float32)
    text = mm / "ours-text-f32.gguf"
    for kind, x in (("img", img), ("pcm", pcm)):
        args = (x, None) if kind == "img" else (None, x)
        ours = _mtmd_encode(text, mm / "ours-mmproj-f32.gguf", *args)
        ref = _mtmd_encode(mm / "ref-text-f32.gguf", mm / "ref-mmproj-f32.gguf", *args)
        assert np.isfinite(ours).all() and ours.shape[1] == 256
        np.testing.assert_array_equal(ours, ref)
        # (not reversed noise: the RVQ codes of the tiny tokenizer are the same for it)
        tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(24000) / 24000)).astype(np.float32)
        other = (255 - img, None) if kind == "img" else (None, tone)
        assert not np.allclose(_mtmd_encode(text, mm / "ours-mmproj-f32.gguf", *other), ours)
    # 84 x 56 pixels: 6 x 4 patches of 14, merged 2 x 2
    assert _mtmd_encode(text, mm / "ours-mmproj-f32.gguf", img, None).shape[0] == 6


def test_missing_audio_tokenizer_refused(mm, tmp_path):
    folder = tmp_path / "mm"
    shutil.copytree(mm / "mm", folder, symlinks=True)
    shutil.rmtree(folder / "audio_tokenizer")
    with pytest.raises(E.MissingModelFile, match="second checkpoint") as ei:
        hf_to_gguf(folder, tmp_path / "t.gguf", "f32", mmproj=tmp_path / "p.gguf")
    assert "audio_tokenizer" in str(ei.value)
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "p.gguf").exists()


def test_cli_writes_both(mm, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(mm / "mm"), str(dst), "--type", "f32", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (mm / "ref-mmproj-f32.gguf").read_bytes()
    assert dst.read_bytes() == (mm / "ref-text-f32.gguf").read_bytes()


def test_gguf_to_hf_refused(mm, tmp_path):
    """GGUF -> HF of the pair: no transformers class holds the towers (remote code), so
    the projector is refused by name before anything is written."""
    from weightsmith.convert import gguf_to_hf

    out = tmp_path / "back"
    with pytest.raises(E.ProjectorMismatch, match="'mimovl' with a 'mimo2' text model"):
        gguf_to_hf(mm / "ours-text-f32.gguf", out, mmproj=mm / "ours-mmproj-f32.gguf")
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ("drop_codebooks", E.MissingModelFile, "_codebook.embed"),
        ("stray_tensor", E.UnmappedTensor, "encoder.extra.weight"),
    ],
)
def test_bad_audio_tokenizer_refused(mm, tmp_path, change, error, field):
    """An audio tokenizer without codebooks, or with an encoder tensor the projector cannot
    name (the reference stops with a KeyError / "Can not map tensor"): refused by name
    before any output."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "mm"
    shutil.copytree(mm / "mm", folder, symlinks=True)
    f = folder / "audio_tokenizer" / "model.safetensors"
    sd = load_file(f)
    if change == "drop_codebooks":
        sd = {k: v for k, v in sd.items() if "quantizer" not in k}
    else:
        sd["encoder.extra.weight"] = np.zeros((2, 2), np.float32)
    save_file(sd, f)
    with pytest.raises(error, match=field):
        hf_to_gguf(folder, tmp_path / "t.gguf", "f32", mmproj=tmp_path / "p.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "p.gguf").exists()
