"""Muse Glimmer (``MuseGlimmerForConditionalGeneration``) text against llama.cpp.

A tiny seeded model as transformers 5.24 saves it (tests/support.muse_dots_pocket_models.py:
4 text layers, 3 sliding with RoPE and the last full without, attention output gate,
scaleless QK norm times ``qk_scale_factor``, logit softcap; a 2-layer vision tower):

* the text file (GGUF ``muse-glimmer``) is ``convert_hf_to_gguf.py``'s byte for byte at
  f32, f16, bf16 and q8_0, and ``llama_model_quantize``'s of its f32 at q4_k_m and iq4_xs;
* llama.cpp's logits on our f32 equal those on the reference's, and transformers' own
  (12 tokens: past the sliding window of 8);
* GGUF -> HF: the text alone has no HF class (a named error, nothing written);
* EOT without ``<|eot|>`` in the tokenizer: the unknown token of tokenizer_config.json,
  else none, as the reference (byte-identical files);
* ``--mmproj``: the projector (``muse-glimmer``: Q/K permuted, the two temporal slabs of
  the patch embedding summed into a Conv2d kernel, the 3-linear projector) is the
  reference's byte for byte at the same four types;
* mtmd (llama-cpp-python 0.3.36 has the graph) loads it with our text file and encodes
  square images into transformers' image features (before the weightless
  ``perception_emb_norm``, which llama.cpp's text graph applies to every input
  embedding): 32 x 32 (the position table's own grid) as transformers; 64 x 64 as
  transformers with the position table resampled with edge clamping -- the runtime's
  bilinear resize clamps where transformers' ``grid_sample`` pads with zeros (pinned).
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from support.muse_dots_pocket_models import muse_glimmer
from test_convert_archs import _same_file
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import _mtmd_embeddings, _reference, _same
from weightsmith import errors as E
from weightsmith.cli._main import main
from weightsmith.convert import gguf_to_hf, hf_to_gguf
from weightsmith.gguf import read

TYPES = ["f32", "f16", "bf16", "q8_0"]
QUANT = ["q4_k_m", "iq4_xs"]
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272, 50, 60, 70, 80]


def _without_eot(mg: Path, dst: Path, unk_in_config: bool) -> Path:
    """A copy of the model whose tokenizer has no ``<|eot|>`` (weights linked); with an
    ``unk_token`` in special_tokens_map.json always, in tokenizer_config.json if asked."""

    dst.mkdir()
    for f in mg.iterdir():
        if f.name not in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (dst / f.name).symlink_to(f)
    tj = json.loads((mg / "tokenizer.json").read_text())
    tj["added_tokens"] = [t for t in tj["added_tokens"] if t["content"] != "<|eot|>"]
    (dst / "tokenizer.json").write_text(json.dumps(tj))
    tc = json.loads((mg / "tokenizer_config.json").read_text())
    if unk_in_config:
        tc["unk_token"] = "<|endoftext|>"
    (dst / "tokenizer_config.json").write_text(json.dumps(tc))
    stm = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    (dst / "special_tokens_map.json").write_text(json.dumps(stm))
    return dst


@pytest.fixture(scope="module")
def mg(tmp_path_factory) -> Path:
    """The tiny model; beside it the reference's text files (``ref-T``, q4_k_m from its
    f32) and ours (``ours-T``)."""
    root = tmp_path_factory.mktemp("muse_glimmer")
    src = muse_glimmer(root / "model")
    jobs = [[str(src), "--outfile", str(root / f"ref-{t}.gguf"), "--outtype", t] for t in TYPES]
    jobs += [[str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
              "--mmproj"] for t in TYPES]  # fmt: skip
    for unk in (0, 1):  # test_eot_without_the_token's folders
        other = _without_eot(src, root / f"no-eot-{unk}", bool(unk))
        jobs.append([str(other), "--outfile", str(root / f"ref-no-eot-{unk}.gguf"), "--outtype",
                     "f16"])  # fmt: skip
    _reference(jobs)
    for t in QUANT:
        _llama_quantize(root / "ref-f32.gguf", root / f"ref-{t}.gguf", t)
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    for t in QUANT:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t)
    return src


@pytest.fixture(scope="module")
def hf_model(mg):
    import torch
    from transformers import MuseGlimmerForConditionalGeneration

    return MuseGlimmerForConditionalGeneration.from_pretrained(mg, dtype=torch.float32).eval()


@pytest.mark.parametrize("t", TYPES + QUANT)
def test_text_same_as_reference(mg, t):
    _same_file(mg.parent / f"ours-{t}.gguf", mg.parent / f"ref-{t}.gguf")


def test_text_contents(mg):
    """Guard against a vacuous pass: the synthesized Q/K norms, the norms + 1 (not the
    final one), the gate, the pattern and softcap rows."""
    sd = load_file(mg / "model.safetensors")
    with read(mg.parent / "ours-f32.gguf") as f:
        md = f.metadata
    t = {x.name: np.asarray(x.data) for x in gguf.GGUFReader(mg.parent / "ours-f32.gguf").tensors}
    assert list(md["muse-glimmer.attention.sliding_window_pattern"]) == [True] * 3 + [False]
    assert md["muse-glimmer.final_logit_softcapping"] == pytest.approx(20.0)
    assert md["tokenizer.ggml.eot_token_id"] == 50257
    np.testing.assert_array_equal(t["blk.1.attn_q_norm.weight"], np.float32(3.87))
    np.testing.assert_array_equal(t["blk.1.attn_k_norm.weight"], np.float32(1.0))
    pre = "model.language_model."
    norm = sd[pre + "layers.2.post_feedforward_layernorm.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["blk.2.post_ffw_norm.weight"], norm + np.float32(1))
    final = sd[pre + "norm.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["output_norm.weight"], final)
    gate = sd[pre + "layers.0.self_attn.gate_proj.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["blk.0.attn_gate.weight"], gate)


def test_llama_cpp_logits(mg, hf_model):
    import torch

    ours = _llama_logits(mg.parent / "ours-f32.gguf", TOKENS)
    ref = _llama_logits(mg.parent / "ref-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    with torch.no_grad():
        hf = hf_model(torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0)


def test_text_alone_has_no_hf_class(mg, tmp_path):
    with pytest.raises(E.UnknownArchitecture, match="muse-glimmer"):
        gguf_to_hf(mg.parent / "ours-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(mg, t):
    _same(mg.parent / f"ours-mmproj-{t}.gguf", mg.parent / f"ref-mmproj-{t}.gguf")


def test_projector_contents(mg):
    """Guard against a vacuous pass: the summed patch kernel (F16 at f16), the nominal
    image size, the projector rows."""
    with read(mg.parent / "ours-mmproj-f16.gguf") as f:
        md = f.metadata
        types = {x.name: x.ggml_type.name for x in f.tensors}
    assert md["clip.projector_type"] == "muse-glimmer" and md["clip.vision.image_size"] == 64
    assert md["clip.vision.spatial_merge_size"] == 2
    assert types["v.patch_embd.weight"] == "F16" and types["mm.2.weight"] == "F16"
    w = load_file(mg / "model.safetensors")[
        "model.vision_tower.patch_embedder.patch_embedding.weight"
    ].astype(np.float32)
    want = w.reshape(64, 2, 3, 8, 8).sum(1)
    r = gguf.GGUFReader(mg.parent / "ours-mmproj-f32.gguf")
    got = {x.name: np.asarray(x.data) for x in r.tensors}["v.patch_embd.weight"]
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def _patches(img: np.ndarray, p: int = 8, pt: int = 2) -> tuple[np.ndarray, list[int]]:
    """MuseGlimmerImageProcessor's pixels of an image that needs no resize (mean / std
    0.5): raster patches, each ``pt`` copies of ``[3, p, p]``; and its grid."""
    h, w = img.shape[:2]
    x = ((img.astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)
    gh, gw = h // p, w // p
    x = x.reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4)
    x = np.broadcast_to(x[:, :, None], (gh, gw, pt, 3, p, p)).reshape(gh * gw, -1)
    return np.ascontiguousarray(x), [1, gh, gw]


def _hf_features(m, img: np.ndarray, padding: str = "zeros") -> np.ndarray:
    """transformers' image features before ``perception_emb_norm``; ``padding`` of the
    position table's resampling (the model's is zeros)."""
    import torch

    px, grid = _patches(img)
    pe = m.model.vision_tower.patch_embedder
    old, pe.interpolation_padding = pe.interpolation_padding, padding
    try:
        with torch.no_grad():
            h = m.model.vision_tower(pixel_values=torch.tensor(px), grid_thw=torch.tensor([grid]))
            out = m.model.vision_projection(m.model.vision_adapter(h.last_hidden_state))
    finally:
        pe.interpolation_padding = old
    return out.numpy()


def test_mtmd_image_features(mg, hf_model):
    """mtmd's embeddings of our projector are transformers' features (before the
    weightless norm llama.cpp's text graph applies, checked too): at the position
    table's own grid exactly as transformers; larger, as transformers with its position
    resampling clamped at the edges, the runtime's (transformers pads with zeros: that
    moves them by more than the bound, pinned)."""
    import torch

    root = mg.parent
    rng = np.random.default_rng(7)
    small = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    got = _mtmd_embeddings(root / "ours-f32.gguf", root / "ours-mmproj-f32.gguf", small)
    want = _hf_features(hf_model, small)
    assert got.shape == want.shape == (4, 64)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0)
    # the norm the model applies after the projection is llama.cpp's embd_norm
    eps = hf_model.config.text_config.rms_norm_eps
    with torch.no_grad():
        f = hf_model.model.get_image_features(*map(torch.tensor, _patches(small)[:1]),
                                              image_grid_thw=torch.tensor([[1, 4, 4]]))  # fmt: skip
    normed = torch.cat(list(f.pooler_output), 0).numpy()
    ours_normed = got / np.sqrt((got.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps)
    assert np.abs(ours_normed - normed).max() <= 1e-3 * float(np.abs(normed).max())

    big = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    got = _mtmd_embeddings(root / "ours-f32.gguf", root / "ours-mmproj-f32.gguf", big)
    clamped, zeros = _hf_features(hf_model, big, "border"), _hf_features(hf_model, big)
    assert got.shape == clamped.shape == (16, 64)
    scale = float(np.abs(clamped).max())
    assert np.abs(got - clamped).max() <= 1e-3 * max(scale, 1.0)
    assert np.abs(got - zeros).max() > 2e-3 * max(scale, 1.0)


def test_cli_writes_both(mg, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(mg), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (
        mg.parent / "ref-mmproj-q8_0.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (mg.parent / "ref-q8_0.gguf").read_bytes()


def test_needs_the_image_processor_file(mg, tmp_path):
    """Without the image processor's mean / std (the reference stops on a KeyError) a
    named error comes before any file is written; the weights are linked, not copied."""
    src = tmp_path / "model"
    src.mkdir()
    for f in mg.iterdir():
        if f.name != "preprocessor_config.json":
            (src / f.name).symlink_to(f)
    with pytest.raises(E.MissingModelFile, match="image_mean"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "m.gguf").exists()


def test_eot_without_the_token(mg):
    """No ``<|eot|>``: EOT is what transformers' ``convert_tokens_to_ids`` gives, the
    unknown token of tokenizer_config.json (special_tokens_map.json's is not read), else
    none -- the reference's files, byte for byte."""
    root = mg.parent
    for unk, eot in ((0, None), (1, 50256)):
        ours = root / f"ours-no-eot-{unk}.gguf"
        hf_to_gguf(root / f"no-eot-{unk}", ours, "f16")
        _same_file(ours, root / f"ref-no-eot-{unk}.gguf")
        with read(ours) as f:
            assert f.metadata.get("tokenizer.ggml.eot_token_id") == eot
