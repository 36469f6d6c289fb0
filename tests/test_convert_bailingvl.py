"""Ling-3.0 VL (``BailingMoeV3VLForConditionalGeneration``) against llama.cpp's converter
and runtime.

The tiny folder (tests/support/bailingvl_models.py) is transformers 5.24's Qwen3-VL
tower with its merger's two layers moved to the top-level ``linear_proj`` MLP, beside
the BailingMoE V3 text of the text harness (``bailing_hybrid``, Hub spellings), with a
hand-written Hub config.  Checked:

* the text GGUF (``bailingmoe3`` with ``rope.dimension_sections``) and the projector GGUF
  (``ling3vl``) are ``convert_hf_to_gguf.py``'s / ``--mmproj``'s byte for byte at f32,
  f16, bf16 and q8_0; the text at q4_k_m and iq4_xs is ``llama_model_quantize`` of the
  reference's f32; ``weightsmith convert DIR out.gguf --mmproj`` writes the pair;
* llama.cpp's logits on our text equal those on the reference's bit for bit, and
  transformers' ``bailing_hybrid`` with its RoPE on NeoX pairs (what llama.cpp's M-RoPE
  runs on text tokens; transformers as shipped rotates adjacent pairs: pinned apart);
* mtmd (llama-cpp-python 0.3.36 has the ``ling3vl`` graph) loads our pair and encodes
  images into transformers' Qwen3-VL ``get_image_features`` of the same weights;
* refused by name before any output: configs the reference refuses, and GGUF -> HF of
  the text alone or of the pair (transformers has no class for either).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from support.bailingvl_models import ling3vl, qwen3vl_tower
from support.hf_models import bailingmoe3
from test_convert_archs import _hf_logits, _prompt
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import TYPES, _hf_image_features, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANT_TYPES = ["q4_k_m", "iq4_xs"]


@pytest.fixture(scope="module")
def ling(tmp_path_factory):
    """``tower`` (the Qwen3-VL transformers loads), ``text`` (the bailing_hybrid text),
    ``ling`` (both in Ling-3.0 VL's layout), the reference's and our pairs at each type
    (``ref-*`` / ``ours-*``) and the reference's f32 text through llama-quantize."""
    root = tmp_path_factory.mktemp("bailingvl")
    src = ling3vl(qwen3vl_tower(root / "tower"), bailingmoe3(root / "text"), root / "ling")
    convert_both(src, root, text_types=TYPES)
    for t in QUANT_TYPES:
        _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{t}.gguf", t)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_pair_same_as_reference(ling, t):
    _same(ling / f"ours-text-{t}.gguf", ling / f"ref-text-{t}.gguf")
    _same(ling / f"ours-mmproj-{t}.gguf", ling / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", QUANT_TYPES)
def test_text_same_as_llama_quantize(ling, t, tmp_path):
    hf_to_gguf(ling / "ling", tmp_path / "t.gguf", t)
    _same(tmp_path / "t.gguf", ling / f"ref-text-{t}.gguf")


def test_contents(ling):
    """Guard against a vacuous pass: the source has the moved MLP and no merger layers;
    the projector is ``ling3vl`` with the merger norm as ``mm.input_norm`` and no
    deepstack; the text has the sections and no tower or projector tensor."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    with safe_open(ling / "ling" / "model.safetensors", "np") as f:
        names = set(f.keys())
    assert {"linear_proj.0.weight", "linear_proj.2.bias", "visual.merger.norm.weight"} <= names
    assert not any(".merger.linear_fc" in n for n in names)
    with read(ling / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "ling3vl" and md["clip.use_gelu"] is True
    assert md["clip.vision.projection_dim"] == 256 and md["clip.vision.spatial_merge_size"] == 2
    assert "clip.vision.is_deepstack_layers" not in md
    assert types["mm.input_norm.weight"] == ("F32", (64,))
    assert types["mm.0.weight"] == ("Q8_0", (256, 256)) and types["mm.2.weight"][0] == "Q8_0"
    assert types["v.patch_embd.weight.1"] == ("F32", (64, 3, 8, 8))
    assert not any(n.startswith(("v.post_ln", "v.deepstack", "blk.")) for n in types)
    with read(ling / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "bailingmoe3"
    assert list(md["bailingmoe3.rope.dimension_sections"]) == [2, 3, 3, 0]
    assert "blk.1.attn_gate.weight" in names and not any(n.startswith(("v.", "mm.")) for n in names)


def _neox_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """RoPE on NeoX pairs (``rotate_half``) in place of bailing_hybrid's adjacent pairs."""
    import torch

    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], -1)

    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def test_llama_cpp_logits(ling, monkeypatch):
    """llama.cpp runs the VL text with M-RoPE (NeoX pairs; text tokens get one position on
    every axis): ours equals the reference's file, and transformers' bailing_hybrid with
    its RoPE on NeoX pairs within 2e-3 of scale (the text harness's bound); as shipped
    (adjacent pairs) transformers is another model, pinned more than 1e-2 apart."""
    import transformers.models.bailing_hybrid.modeling_bailing_hybrid as mb

    tokens = _prompt("bailingmoe3")
    ours = _llama_logits(ling / "ours-text-f32.gguf", tokens)
    np.testing.assert_array_equal(ours, _llama_logits(ling / "ref-text-f32.gguf", tokens))
    shipped = _hf_logits(ling / "text", tokens)
    monkeypatch.setattr(mb, "apply_rotary_pos_emb_interleave", _neox_rope)
    neox = _hf_logits(ling / "text", tokens)
    scale = max(1.0, float(np.abs(neox).max()))
    assert np.abs(ours - neox).max() <= 2e-3 * scale
    assert np.abs(ours - shipped).max() > 1e-2 * scale


@pytest.mark.parametrize("shape", [(64, 64), (32, 64)])
def test_llama_cpp_encodes_image(ling, shape):
    """mtmd's embeddings are transformers' Qwen3-VL features of the same weights (the
    merger's MLP is Ling's moved ``linear_proj``), 1e-3 of their scale (measured 3.0e-4
    at scale 4.8 for 64 x 64)."""
    img = np.random.default_rng(7).integers(0, 256, (*shape, 3), dtype=np.uint8)
    got = _mtmd_embeddings(ling / "ours-text-f32.gguf", ling / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(ling / "tower", img)
    assert want.shape == (shape[0] * shape[1] // 256, 256) and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= 1e-3 * scale


def test_cli_writes_both(ling, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(ling / "ling"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (ling / "ref-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (ling / "ref-text-q8_0.gguf").read_bytes()


def _edited(ling, tmp_path, edit):
    src = tmp_path / "src"
    shutil.copytree(ling / "ling", src, ignore=shutil.ignore_patterns("*.safetensors"))
    (src / "model.safetensors").symlink_to(ling / "ling" / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg)
    (src / "config.json").write_text(json.dumps(cfg))
    return src


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda c: c["vision_config"].pop("disable_merger_proj"), "disable_merger_proj"),
        (lambda c: c["vision_config"].pop("out_hidden_size"), "out_hidden_size"),
        (lambda c: c["text_config"].pop("mrope_section"), "mrope_section"),
        (lambda c: c["text_config"].update(mrope_section=[2, 2, 2]), "mrope_section"),
    ],
    ids=["no-disable_merger_proj", "no-out_hidden_size", "no-mrope_section", "bad-sections"],
)
def test_refuses_what_the_reference_refuses(ling, tmp_path, edit, field):
    """The reference's ValueErrors (BailingMoeV3VLModel / BailingMoeV3VLVisionModel), by
    name before any output: ours converts the pair or nothing."""
    src = _edited(ling, tmp_path, edit)
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_gguf_to_hf_refused(ling, tmp_path):
    """transformers 5.24 has no Ling-3.0 VL class, and bailing_hybrid is not the VL text
    (adjacent-pair RoPE): the text file alone and the pair are refused by name."""
    with pytest.raises(E.UnknownArchitecture, match="bailingmoe3"):
        gguf_to_hf(ling / "ours-text-f16.gguf", tmp_path / "a")
    with pytest.raises(E.ProjectorMismatch, match="ling3vl"):
        gguf_to_hf(ling / "ours-text-f16.gguf", tmp_path / "b",
                   mmproj=ling / "ours-mmproj-f16.gguf")  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
