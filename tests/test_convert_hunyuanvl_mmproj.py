"""HunyuanVL's projector (``HunYuanVLForConditionalGeneration``, HunyuanOCR) against
llama.cpp's converter and runtime.

The tiny model (tests/support/vlm_models.py ``hunyuanvl``) is saved by transformers
5.24 in the Hub's layout (measured here: the tower under ``vit.*``, the only names the
reference's projector reads), which transformers loads back.  Checked here:

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32,
  f16, bf16 and q8_0, and the text GGUF written beside it to the reference's;
* mtmd (llama-cpp-python 0.3.36, projector type ``hunyuanvl``) loads our projector with
  our text model and encodes an image into transformers' ``get_image_features`` (the
  merged patches, a newline row after each row, the begin / end rows);
* the tower under transformers' in-memory names (``model.vision_tower.*``, as a
  ``state_dict`` saved by hand has them) is refused by name, nothing written, where the
  reference writes a projector without a tensor.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_mmproj import TYPES, _mtmd_embeddings, _reference, _same
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

# mtmd's image embeddings vs transformers' features, as a fraction of their scale:
# measured 1.6e-4 (3.3e-4 at a scale of 2.06; oblong images up to 4.0e-4)
TOL = 1e-3


@pytest.fixture(scope="module")
def hv(tmp_path_factory):
    """The model folder; a copy with transformers' in-memory names; the reference's text
    f16 and projectors (and its projector of the copy); ours."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForImageTextToText

    root = tmp_path_factory.mktemp("hunyuanvl")
    src = build("hunyuanvl", root / "hub")
    mem = root / "mem"
    shutil.copytree(src, mem)
    sd = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32).state_dict()
    save_file({k: v.contiguous() for k, v in sd.items()}, mem / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    jobs = [[str(src), "--outfile", str(root / "ref-text-f16.gguf"), "--outtype", "f16"],
            [str(mem), "--outfile", str(root / "ref-mem.gguf"), "--outtype", "f16",
             "--mmproj"]]  # fmt: skip
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    return root


def test_saved_in_hub_layout(hv):
    """transformers 5.24 writes HunyuanVL's Hub names (the reference's input), not its
    in-memory ones."""
    from safetensors import safe_open

    with safe_open(hv / "hub" / "model.safetensors", "np") as f:
        names = list(f.keys())
    assert not any(n.startswith(("model.vision_tower.", "model.language_model.")) for n in names)
    assert "vit.perceive.proj.2.weight" in names
    assert "vit.layers.2.mlp.dense_h_to_4h.weight" in names


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(hv, t):
    _same(hv / f"ours-mmproj-{t}.gguf", hv / f"ref-mmproj-{t}.gguf")


def test_text_same_as_reference(hv):
    _same(hv / "ours-text-f16.gguf", hv / "ref-text-f16.gguf")


def test_projector_contents(hv):
    """The rows mtmd reads and the tensors its graph needs, with the class-token row of
    the position table gone."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    with read(hv / "ours-mmproj-f32.gguf") as f:
        md = f.metadata
        assert md["clip.projector_type"] == "hunyuanvl"
        assert md["clip.vision.image_size"] == 64  # max_image_size
        assert md["clip.vision.block_count"] == 3
        assert md["clip.vision.spatial_merge_size"] == 2
        assert (md["clip.vision.image_min_pixels"], md["clip.vision.image_max_pixels"]) == (
            1024,
            4096,
        )
        names = {t.name for t in f.tensors}
        for n in ("mm.0.weight", "mm.2.weight", "mm.model.fc.weight", "mm.pre_norm.weight",
                  "mm.post_norm.weight", "mm.image_begin", "mm.image_end", "v.image_newline",
                  "v.view_seperator"):  # fmt: skip
            assert n in names, n
        pos = np.array(f.numpy("v.position_embd.weight"))
    with safe_open(hv / "hub" / "model.safetensors", "np") as s:
        table = s.get_tensor("vit.embeddings.position_embedding.weight")
    assert table.shape == (17, 32)
    np.testing.assert_array_equal(pos, table[1:])
    with read(hv / "ours-mmproj-f16.gguf") as f:
        types = {t.name: t.ggml_type.name for t in f.tensors}
    assert types["mm.0.weight"] == types["mm.2.weight"] == "F16"
    with read(hv / "ours-mmproj-q8_0.gguf") as f:
        types = {t.name: t.ggml_type.name for t in f.tensors}
    assert types["mm.0.weight"] == types["mm.2.weight"] == "F32"
    assert types["mm.model.fc.weight"] == "Q8_0"


def _hf_image_features(folder, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (already a multiple of 32 px, inside the pixel
    bounds: neither runtime resizes it), through its own image processor."""
    import torch
    from transformers import AutoModelForImageTextToText
    from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import (
        HunYuanVLImageProcessorPil,
    )

    proc = HunYuanVLImageProcessorPil.from_pretrained(folder)
    out = proc(images=[img], return_tensors="pt", do_resize=False)
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        f = m.get_image_features(
            pixel_values=out["pixel_values"], image_grid_thw=out["image_grid_thw"]
        )
    return torch.cat(list(f.pooler_output), 0).float().numpy()


@pytest.mark.parametrize("hw", [(64, 64), (32, 64), (64, 32)])
def test_llama_cpp_encodes_image(hv, hw):
    """Square and both oblong images (the learned 4 x 4 position grid resized to 2 x 4 /
    4 x 2: bilinear in transformers, mtmd's own on the CPU)."""
    h, w = hw
    img = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(hv / "ours-text-f32.gguf", hv / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(hv / "hub", img)
    # the merged tokens (2 x 2 at most), a newline after each row, begin and end
    rows, cols = h // 32, w // 32
    assert want.shape == (rows * (cols + 1) + 2, 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_in_memory_names_refused(hv, tmp_path):
    """The tower under transformers' in-memory names (which it loads as well): the
    reference's projector reads ``vit.*`` alone and writes a file without a tensor; ours
    names the missing prefix and writes neither file."""
    from support import gguf_c_reader

    _, tensors = gguf_c_reader.read(hv / "ref-mem.gguf")
    assert tensors == []
    text, proj = tmp_path / "t.gguf", tmp_path / "p.gguf"
    with pytest.raises(E.MissingModelFile, match="vit"):
        hf_to_gguf(hv / "mem", text, "f16", mmproj=proj)
    assert not text.exists() and not proj.exists()


def test_cli_writes_both(hv, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the two files of the library call."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(hv / "hub"), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (hv / "ours-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (hv / "ours-text-f16.gguf").read_bytes()


@pytest.mark.parametrize("key", ["min_pixels", "max_pixels"])
def test_needs_the_pixel_bounds(hv, tmp_path, key):
    """The ``image_min_pixels`` / ``image_max_pixels`` rows come from the image
    processor file (the reference fails without them): a named error before any file is
    written.  The weights are linked, not copied."""
    src = tmp_path / "h"
    src.mkdir()
    for f in (hv / "hub").iterdir():
        (src / f.name).symlink_to(f)
    pre = json.loads((hv / "hub" / "preprocessor_config.json").read_text())
    del pre[key]
    (src / "preprocessor_config.json").unlink()
    (src / "preprocessor_config.json").write_text(json.dumps(pre))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match=key):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
