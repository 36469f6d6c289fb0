"""EXAONE 4.5 (``Exaone4_5_ForConditionalGeneration``) against llama.cpp's converter and
runtime: its text half (GGUF ``exaone4``) and its projector (``exaone4_5``).

The tiny model (tests/support/vlm_models.py ``exaone4_5``) is saved as transformers 5.24
writes it (``model.visual.*``, ``model.language_model.*``), the names the reference
reads.  Checked here:

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32, f16,
  bf16 and q8_0, and the text GGUF written beside it to the reference's;
* mtmd (llama-cpp-python 0.3.36, projector type ``exaone4_5``) loads our projector with
  our text model and encodes square and oblong images into transformers'
  ``get_image_features``;
* the text GGUF converts back to an ``Exaone4ForCausalLM`` whose logits are the VLM's on
  text alone;
* a config that counts MTP blocks gives the reference's rows; MTP weights are refused by
  name, nothing written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_mmproj import TYPES, _mtmd_embeddings, _reference, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

# mtmd's image embeddings vs transformers' features, as a fraction of their scale:
# measured 3.1e-3 (0.0104 at a scale of 3.37; oblong 1.8e-3 and 2.0e-3), as Qwen2.5-VL's
# window-attention ViT with 2-D RoPE (test_convert_mmproj: 3.0e-3, bound 6e-3)
TOL = 6e-3


def _linked(src, dst, config: dict | None = None):
    """``dst`` holding links to ``src``'s files, with ``config`` as its config.json."""
    dst.mkdir()
    for f in src.iterdir():
        if config is None or f.name != "config.json":
            (dst / f.name).symlink_to(f)
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    """The model folder; a copy whose config counts one MTP block; the reference's text
    f16 (of both) and projectors; ours."""
    root = tmp_path_factory.mktemp("exaone4_5")
    src = build("exaone4_5", root / "hub")
    cfg = json.loads((src / "config.json").read_text())
    cfg["text_config"]["num_nextn_predict_layers"] = 1
    _linked(src, root / "nextn", cfg)
    jobs = [[str(src), "--outfile", str(root / "ref-text-f16.gguf"), "--outtype", "f16"],
            [str(root / "nextn"), "--outfile", str(root / "ref-nextn.gguf"), "--outtype",
             "f16"]]  # fmt: skip
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(ex, t):
    _same(ex / f"ours-mmproj-{t}.gguf", ex / f"ref-mmproj-{t}.gguf")


def test_text_same_as_reference(ex):
    _same(ex / "ours-text-f16.gguf", ex / "ref-text-f16.gguf")


def test_projector_contents(ex):
    """The rows mtmd reads and the fused GQA attention: one ``attn_qkv`` of q + 2 kv rows."""
    from weightsmith.gguf import read

    with read(ex / "ours-mmproj-f32.gguf") as f:
        md = f.metadata
        assert md["clip.projector_type"] == "exaone4_5"
        assert md["clip.vision.attention.head_count"] == 4
        assert md["clip.vision.attention.head_count_kv"] == 2
        assert md["clip.vision.n_wa_pattern"] == 2
        assert md["clip.vision.window_size"] == 32
        assert (md["clip.vision.image_min_pixels"], md["clip.vision.image_max_pixels"]) == (
            1024,
            4096,
        )
        shapes = {t.name: t.shape for t in f.tensors}
    assert shapes["v.blk.0.attn_qkv.weight"] == (64 + 2 * 32, 64)
    assert not any(".attn_q." in n or ".attn_k." in n for n in shapes)
    for n in ("v.patch_embd.weight", "v.patch_embd.weight.1", "v.post_ln.weight", "mm.0.weight",
              "mm.2.weight"):  # fmt: skip
        assert n in shapes, n


def _hf_image_features(folder, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (a multiple of 16 px inside the pixel bounds:
    neither runtime resizes it), through its own image processor."""
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    out = AutoImageProcessor.from_pretrained(folder)(
        images=[img], return_tensors="pt", do_resize=False
    )
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        f = m.get_image_features(
            pixel_values=out["pixel_values"], image_grid_thw=out["image_grid_thw"]
        )
    return torch.cat(list(f.pooler_output), 0).float().numpy()


@pytest.mark.parametrize("hw", [(64, 64), (32, 64), (64, 32)])
def test_llama_cpp_encodes_image(ex, hw):
    """Square and both oblong images: 2 x 2 merged patches per 16 px, in windows of 2 x 2."""
    h, w = hw
    img = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(ex / "ours-text-f32.gguf", ex / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(ex / "hub", img)
    assert want.shape == ((h // 16) * (w // 16), 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_text_half_round_trip(ex, tmp_path):
    """GGUF -> HF of the text half gives EXAONE 4.0 (the same text model): its tensors are
    the VLM's language model's and its logits the VLM's on text alone."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    back = tmp_path / "back"
    gguf_to_hf(ex / "ours-text-f32.gguf", back, dtype="f32")
    assert json.loads((back / "config.json").read_text())["architectures"] == ["Exaone4ForCausalLM"]
    orig = load_file(ex / "hub" / "model.safetensors")
    pre = "model.language_model."
    want = {"model." + k[len(pre) :]: v for k, v in orig.items() if k.startswith(pre)}
    want["lm_head.weight"] = orig["lm_head.weight"]
    got = load_file(back / "model.safetensors")
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v.astype(np.float32), err_msg=k)
    tokens = torch.tensor([[9707, 11, 1879, 0, 358, 1079, 264, 2272]])
    vlm = AutoModelForImageTextToText.from_pretrained(ex / "hub", dtype=torch.float32).eval()
    txt = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    with torch.no_grad():
        a, b = vlm(input_ids=tokens).logits[0].numpy(), txt(tokens).logits[0].numpy()
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * max(1.0, float(np.abs(a).max())))


def test_nextn_count_same_as_reference(ex, tmp_path):
    """``num_nextn_predict_layers`` 1 (no MTP weights): the reference counts the block in
    ``block_count`` and writes ``nextn_predict_layers``; so do we, byte for byte."""
    from weightsmith.gguf import read

    ours = tmp_path / "nextn.gguf"
    hf_to_gguf(ex / "nextn", ours, "f16")
    _same(ours, ex / "ref-nextn.gguf")
    with read(ours) as f:
        assert f.metadata["exaone4.block_count"] == 3
        assert f.metadata["exaone4.nextn_predict_layers"] == 1


def test_mtp_weights_refused(ex, tmp_path):
    """MTP weights (``mtp.*``, which llama.cpp loads but does not run) are not converted:
    named, and neither file is written."""
    from safetensors.numpy import save_file

    src = _linked(ex / "nextn", tmp_path / "mtp")
    save_file({"mtp.fc.weight": np.zeros((64, 128), np.float32)},
              str(src / "model-mtp.safetensors"))  # fmt: skip
    text, proj = tmp_path / "t.gguf", tmp_path / "p.gguf"
    with pytest.raises(E.UnmappedTensor, match=r"mtp\.fc\.weight"):
        hf_to_gguf(src, text, "f16", mmproj=proj)
    assert not text.exists() and not proj.exists()


def test_cli_writes_both(ex, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the two files of the library call."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(ex / "hub"), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (ex / "ours-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (ex / "ours-text-f16.gguf").read_bytes()
