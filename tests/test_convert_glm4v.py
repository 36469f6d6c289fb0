"""GLM-4V (``Glm4vForConditionalGeneration``), GLM-4.5V (``Glm4vMoeForConditionalGeneration``)
and GLM-OCR (``GlmOcrForConditionalGeneration``): their projector (``glm4v``) and text
halves (``glm4`` / ``glm4moe`` with M-RoPE sections; GLM-OCR's with its MTP block) against
llama.cpp's converter and runtime.

* both files byte-identical to ``convert_hf_to_gguf.py`` (``--mmproj`` at f32, f16, bf16,
  q8_0; the text file at f16);
* llama.cpp's mtmd (llama-cpp-python 0.3.36) loads our projector with our text file and
  encodes an image into the features transformers' ``get_image_features`` gives;
* llama.cpp's logits on our text file equal transformers' (text-only input: the three
  M-RoPE positions are equal, so for GLM-4V the Q/K reorder to NeoX halves is what is
  checked; GLM-4.5V's text model rotates NeoX halves already);
* the text file alone has no HF class: GGUF -> HF refuses it before writing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_mmproj import TYPES, _image, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E

# the prompt's ids are inside the tiny GPT-2 + GLM vocabulary
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]


ARCHS = ["glm4v", "glm4vmoe", "glmocr"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Per arch, the tiny model; the reference's projectors and text f16 and ours beside it."""
    out = {}
    for arch in ARCHS:
        root = tmp_path_factory.mktemp(arch)
        out[arch] = build(arch, root / "model")
        convert_both(out[arch], root)
    return out


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_as_reference(models, arch, t):
    root = models[arch].parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_contents(models):
    """Guard against a vacuous pass: what the files say and hold."""
    from weightsmith.gguf import read

    root = models["glm4v"].parent
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "glm4v" and md["clip.use_silu"] is True
    assert "clip.use_gelu" not in md
    assert types["mm.patch_merger.weight"] == ("F32", (128, 64, 2, 2))  # forced F32
    assert types["v.patch_embd.weight.1"] == ("F32", (64, 3, 8, 8))
    assert types["v.blk.1.attn_qkv.weight"] == ("Q8_0", (192, 64))
    assert {"mm.model.fc.weight", "mm.gate.weight", "mm.post_norm.bias", "v.norm_embd.weight",
            "v.post_ln.weight", "v.position_embd.weight"} <= set(types)  # fmt: skip
    with read(root / "ours-mmproj-f16.gguf") as f:
        assert {t.name: t.ggml_type.name for t in f.tensors}["mm.patch_merger.weight"] == "F16"
    with read(root / "ours-text-f16.gguf") as f:
        md = f.metadata
    assert md["general.architecture"] == "glm4"
    assert list(md["glm4.rope.dimension_sections"]) == [2, 3, 3, 0]
    assert md["glm4.rope.dimension_count"] == 16
    with read(models["glm4vmoe"].parent / "ours-text-f16.gguf") as f:
        md = f.metadata
        types = {t.name: t.shape for t in f.tensors}
    assert md["general.architecture"] == "glm4moe" and md["glm4moe.expert_count"] == 4
    assert list(md["glm4moe.rope.dimension_sections"]) == [2, 3, 3, 0]
    assert types["blk.1.ffn_gate_exps.weight"] == (4, 64, 128)
    with read(models["glmocr"].parent / "ours-mmproj-f16.gguf") as f:
        names = {t.name for t in f.tensors}
    assert {"v.blk.1.attn_q_norm.weight", "v.blk.1.attn_qkv.bias", "v.blk.1.ffn_up.bias"} <= names
    assert "v.position_embd.weight" not in names and "v.norm_embd.weight" not in names
    with read(models["glmocr"].parent / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["glm4.block_count"] == 3 and md["glm4.nextn_predict_layers"] == 1
    assert {"blk.2.nextn.eh_proj.weight", "blk.2.attn_q.weight"} <= names


def _hf_features(folder: Path, img: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    out = AutoImageProcessor.from_pretrained(folder)(images=[img], return_tensors="pt",
                                                     do_resize=False)  # fmt: skip
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        f = m.get_image_features(pixel_values=out["pixel_values"],
                                 image_grid_thw=out["image_grid_thw"])  # fmt: skip
    f = getattr(f, "pooler_output", f)
    if isinstance(f, (list, tuple)):
        f = torch.cat(list(f), 0)
    return f.reshape(-1, f.shape[-1]).float().numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_encodes_image(models, arch):
    root = models[arch].parent
    img = _image(64)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    want = _hf_features(models[arch], img)
    assert got.shape == want.shape == (16, 128)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


@pytest.mark.parametrize("arch", ARCHS)
def test_text_in_llama_cpp(models, arch):
    import torch
    from transformers import AutoModelForImageTextToText

    from test_convert_hf_to_gguf import _llama_logits

    got = _llama_logits(models[arch].parent / "ours-text-f32.gguf", TOKENS)
    m = AutoModelForImageTextToText.from_pretrained(models[arch], dtype=torch.float32).eval()
    with torch.no_grad():
        want = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


@pytest.mark.parametrize(
    ("arch", "gguf_arch"), [("glm4v", "glm4"), ("glm4vmoe", "glm4moe"), ("glmocr", "glm4")]
)
def test_text_alone_has_no_hf_class(models, tmp_path, arch, gguf_arch):
    """The reordered Q/K (GLM-4V) and the sections say these are no GLM-4 (MoE) files."""
    from weightsmith.convert import gguf_to_hf

    with pytest.raises(E.UnknownArchitecture, match=gguf_arch):
        gguf_to_hf(models[arch].parent / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_odd_rotated_part_refused(models, tmp_path):
    """Q/K heads whose rotated part is odd cannot be reordered to NeoX halves: a named
    error naming the heads, before any file is written."""
    import json
    import shutil

    from weightsmith.convert import hf_to_gguf

    src = tmp_path / "bad"
    shutil.copytree(models["glm4v"], src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.3  # 9 of 32 rotated
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.TensorShapeMismatch, match="9 of them rotated"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_hub_config_spelling(models, tmp_path):
    """The Hub's GLM-4.1V config spells the RoPE the transformers 4 way (``rope_scaling``
    with ``type`` and ``mrope_section``, ``rope_theta`` and ``partial_rotary_factor`` at
    the top of ``text_config``): the same text file as the reference's for transformers
    5's spelling (and the reference's own for this spelling, measured once: identical)."""
    import json
    import shutil

    from weightsmith.convert import hf_to_gguf

    src = tmp_path / "model"  # the same folder name: the same general.name
    shutil.copytree(models["glm4v"], src)
    cfg = json.loads((src / "config.json").read_text())
    text = cfg["text_config"]
    rp = text.pop("rope_parameters")
    text["rope_scaling"] = {"type": "default", "mrope_section": rp["mrope_section"]}
    text["rope_theta"], text["partial_rotary_factor"] = (
        rp["rope_theta"],
        rp["partial_rotary_factor"],
    )
    (src / "config.json").write_text(json.dumps(cfg))
    hf_to_gguf(src, tmp_path / "t.gguf", "f16")
    ref = models["glm4v"].parent / "ref-text-f16.gguf"
    assert (tmp_path / "t.gguf").read_bytes() == ref.read_bytes()
