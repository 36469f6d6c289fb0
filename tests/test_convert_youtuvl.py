"""Youtu-VL (``YoutuVLForConditionalGeneration``) against llama.cpp's converter and runtime.

Youtu-VL is remote code: transformers 5.24 has Youtu-LLM's text classes
(``YoutuForCausalLM``) but no Youtu-VL model type (pinned below).  The tiny folder
(tests/support/vlm_models.py ``youtuvl``) is Youtu-LLM's text saved by transformers with
seeded tensors for the SigLIP2 tower and the merger under the names the reference's
tensor map gives for Youtu-VL.  Checked here:

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32,
  f16, bf16 and q8_0, and the text GGUF (``deepseek2``) to the reference's;
* llama.cpp runs the text file with the logits transformers' ``YoutuForCausalLM`` gives
  on the same weights; mtmd (llama-cpp-python 0.3.36, projector type ``youtuvl``) loads
  our projector with it and encodes images into one embedding per 2 x 2 merged patches
  (not compared: no transformers model computes Youtu-VL's image features);
* a config the reference's class refuses is refused by name, nothing written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_hf_to_gguf import _llama_logits
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]


@pytest.fixture(scope="module")
def yv(tmp_path_factory):
    """The model folder; the reference's text f16 and projectors; ours."""
    root = tmp_path_factory.mktemp("youtuvl")
    src = build("youtuvl", root / "hub")
    convert_both(src, root)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(yv, t):
    _same(yv / f"ours-mmproj-{t}.gguf", yv / f"ref-mmproj-{t}.gguf")


def test_text_same_as_reference(yv):
    _same(yv / "ours-text-f16.gguf", yv / "ref-text-f16.gguf")


def test_projector_contents(yv):
    """The rows mtmd requires (window size, full-attention layers) and the tensors."""
    from weightsmith.gguf import read

    with read(yv / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "youtuvl" and md["clip.use_gelu"] is True
    assert md["clip.vision.image_size"] == 560 and md["clip.vision.window_size"] == 32
    assert list(md["clip.vision.wa_layer_indexes"]) == [1, 3]
    assert md["clip.vision.spatial_merge_size"] == 2
    assert types["v.patch_embd.weight"] == ("F32", (64, 192))  # linear, kept 2-D
    assert types["mm.0.weight"] == ("Q8_0", (256, 256))
    assert types["mm.input_norm.weight"][0] == "F32"
    assert len(types) == 2 + 2 + 16 * 4 + 5  # patch, post_ln, blocks, merger
    with read(yv / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "deepseek2" and "deepseek2.expert_count" not in md
    assert md["deepseek2.leading_dense_block_count"] == 2  # every layer dense
    assert not any(n.startswith(("v.", "mm.")) for n in names)


def test_transformers_has_no_youtu_vl():
    """Why the image features are not compared: transformers 5.24 builds Youtu-LLM's
    text, not Youtu-VL."""
    import transformers
    from transformers import CONFIG_MAPPING

    assert "youtu" in CONFIG_MAPPING and "youtu_vl" not in CONFIG_MAPPING
    assert not hasattr(transformers, "YoutuVLForConditionalGeneration")


def test_text_in_llama_cpp(yv):
    """llama.cpp runs the VL's text file with the logits of transformers' Youtu-LLM on the
    same weights (the vision tensors are not loaded)."""
    import torch
    from transformers import YoutuConfig, YoutuForCausalLM

    cfg = json.loads((yv / "hub" / "config.json").read_text())
    text = {k: v for k, v in cfg.items()
            if k not in ("architectures", "model_type", "vision_config")}  # fmt: skip
    m = YoutuForCausalLM.from_pretrained(
        yv / "hub", config=YoutuConfig(**text), dtype=torch.float32
    ).eval()
    with torch.no_grad():
        want = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    got = _llama_logits(yv / "ours-text-f32.gguf", TOKENS)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


@pytest.mark.parametrize("hw", [(64, 64), (64, 128)])
def test_mtmd_encodes_image(yv, hw):
    """mtmd loads our projector with our text file and encodes an image: one text-width
    embedding per 2 x 2 merged 8 px patches (the pixels are not resized: multiples of 16)."""
    h, w = hw
    img = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(yv / "ours-text-f32.gguf", yv / "ours-mmproj-f32.gguf", img)
    assert got.shape == ((h // 16) * (w // 16), 256)
    assert np.isfinite(got).all() and np.abs(got).max() > 0


def test_cli_writes_both(yv, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the two files of the library call."""
    from weightsmith.cli._main import main

    dst = tmp_path / "hub.gguf"
    assert main(["convert", str(yv / "hub"), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-hub.gguf").read_bytes() == (yv / "ours-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (yv / "ours-text-f16.gguf").read_bytes()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda v: v.pop("fullatt_block_indexes"), "fullatt_block_indexes"),
        (lambda v: v.update(hidden_act="relu"), "hidden_act"),
    ],
)
def test_refused_before_writing(yv, tmp_path, edit, field):
    """No ``fullatt_block_indexes`` (the reference asserts it) or an activation its class
    has no flag for: a named error, neither file written.  The weights are linked."""
    src = tmp_path / "y"
    src.mkdir()
    for f in (yv / "hub").iterdir():
        (src / f.name).symlink_to(f)
    cfg = json.loads((yv / "hub" / "config.json").read_text())
    edit(cfg["vision_config"])
    (src / "config.json").unlink()
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_unknown_tower_tensor_refused(yv, tmp_path):
    """A tower tensor the reference's map cannot name (it skips those) is refused by name;
    the SigLIP2 position table is the one left out knowingly."""
    from safetensors.numpy import load_file, save_file

    src = tmp_path / "hub"  # general.name comes from the folder
    src.mkdir()
    for f in (yv / "hub").iterdir():
        if f.name != "model.safetensors":
            (src / f.name).symlink_to(f)
    sd = load_file(yv / "hub" / "model.safetensors")
    h = sd["siglip2.vision_model.post_layernorm.weight"]
    sd["siglip2.vision_model.embeddings.position_embedding.weight"] = np.stack([h] * 4)
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == (yv / "ours-mmproj-f16.gguf").read_bytes()
    sd["siglip2.vision_model.head.probe"] = h[None]
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    with pytest.raises(E.UnmappedTensor, match=r"head\.probe"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
