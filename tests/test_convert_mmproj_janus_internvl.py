"""Janus-Pro and InternVL projectors (``--mmproj``) against llama.cpp's converter and
runtime, as tests/test_convert_mmproj.py does for the others:

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32,
  f16, bf16 and q8_0, and the text GGUF beside it to ``convert_hf_to_gguf.py``;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text file and encodes an
  image into the features transformers computes for the same pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.gguf_pair import pair_jobs
from support.vlm_models import build
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import TYPES, _image, _mtmd_embeddings, _reference, _same
from weightsmith.convert import hf_to_gguf

ARCHS = ["janus", "internvl", "internvl_qwen3"]
QUANT_TYPES = ["q4_k_m", "iq4_xs"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Per arch: the model folder, with the reference's files (``ref-mmproj-T``,
    ``ref-text-f16``) and ours (``ours-text-T``, ``ours-mmproj-T``) beside it; the
    reference's runs of both archs in one process."""
    out, jobs = {}, []
    for arch in ARCHS:
        root = tmp_path_factory.mktemp(arch)
        src = out[arch] = build(arch, root / "model")
        jobs += pair_jobs(src, root, TYPES)
    _reference(jobs)
    for arch in ARCHS:  # the llama-quantize types: the reference's f32 file quantized
        root = out[arch].parent
        for t in QUANT_TYPES:
            _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{t}.gguf", t)
    return out


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_projector_same_as_reference(folders, arch, t):
    root = folders[arch].parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", TYPES + QUANT_TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_text_same_as_reference(folders, arch, t):
    """The text GGUF: the reference's text conversion byte for byte (f32 ... q8_0), and
    for the llama-quantize types its f32 file through ``llama_model_quantize``."""
    root = folders[arch].parent
    ours = root / f"ours-text-{t}.gguf"
    if t in QUANT_TYPES:
        hf_to_gguf(folders[arch], ours, t)
    _same(ours, root / f"ref-text-{t}.gguf")


#: the text models' prompt (the tiny models all have a SentencePiece vocabulary of 512)
PROMPT = [1, 5, 9, 33, 100, 7, 200, 42]
#: the original's text tensors by the names of a text-only checkpoint
TEXT_NAMES = {"janus": (("model.language_model.", "model."), ("lm_head.", "lm_head.")),
              "internvl": (("language_model.model.", "model."),
                           ("language_model.lm_head.", "lm_head."))}  # fmt: skip
TEXT_NAMES["internvl_qwen3"] = TEXT_NAMES["internvl"]


def _hf_text_logits(folder: Path, tokens: list[int]) -> np.ndarray:
    """transformers' logits of the whole VLM (InternVL: its -hf twin) on text alone."""
    import torch
    from transformers import AutoModelForImageTextToText

    hf = folder.with_name(folder.name + "-hf")
    m = AutoModelForImageTextToText.from_pretrained(hf if hf.is_dir() else folder,
                                                    dtype=torch.float32).eval()  # fmt: skip
    with torch.no_grad():
        return m(input_ids=torch.tensor([tokens])).logits[0].numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_text_in_llama_cpp_and_back(folders, arch, tmp_path):
    """llama.cpp's logits on our text file equal those on the reference's and are
    transformers' (within 2e-3 of their scale); GGUF -> HF gives the text model
    (LlamaForCausalLM / Qwen2ForCausalLM) with the original's text tensors exactly and
    its logits (within 1e-4)."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    from weightsmith.convert import gguf_to_hf

    root, tokens = folders[arch].parent, PROMPT
    ours = _llama_logits(root / "ours-text-f32.gguf", tokens)
    np.testing.assert_array_equal(ours, _llama_logits(root / "ref-text-f32.gguf", tokens))
    want = _hf_text_logits(folders[arch], tokens)
    scale = max(float(np.abs(want).max()), 1.0)
    assert np.abs(ours - want).max() <= 2e-3 * scale, np.abs(ours - want).max()
    back = tmp_path / "back"
    gguf_to_hf(root / "ours-text-f32.gguf", back, dtype="f32")
    orig = {}
    for k, v in load_file(folders[arch] / "model.safetensors").items():
        for a, b in TEXT_NAMES[arch]:
            if k.startswith(a):
                orig[b + k[len(a) :]] = v
    got = load_file(back / "model.safetensors")
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v.astype(np.float32), err_msg=k)
    m = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    with torch.no_grad():
        again = m(input_ids=torch.tensor([tokens])).logits[0].numpy()
    np.testing.assert_allclose(again, want, rtol=0, atol=1e-4 * scale)


def test_janus_contents(folders):
    """Guard against a vacuous pass: the aligner is mm.0 / mm.1, the MLP width derived
    from mlp_ratio, no generation or text tensor in the projector."""
    from weightsmith.gguf import read

    root = folders["janus"].parent
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "janus_pro" and md["clip.use_gelu"] is True
    assert md["clip.vision.feed_forward_length"] == 128  # 64 x mlp_ratio 2.0
    assert types["mm.0.weight"] == ("Q8_0", (256, 64)) and types["mm.1.weight"][0] == "Q8_0"
    assert types["v.blk.1.attn_out.weight"][0] == "Q8_0"
    assert all(n.startswith(("v.", "mm.")) for n in types)
    with read(root / "ours-text-f16.gguf") as f:
        assert f.metadata["general.architecture"] == "llama"
        names = {t.name for t in f.tensors}
    assert "output.weight" in names and len(names) == 21  # no vision/generation tensor


def test_internvl_contents(folders):
    """The OpenGVLab layout as llama.cpp wants it: the fused QKV split in three, the layer
    scales and position table as .weight tensors, mlp1 as mm.model.mlp.{0,1,3}, the tile
    limits and the pixel-shuffle factor from the top-level config."""
    from weightsmith.gguf import read

    root = folders["internvl"].parent
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "internvl" and md["clip.use_gelu"] is True
    assert md["clip.vision.projector.scale_factor"] == 2  # 1 / downsample_ratio 0.5
    assert (md["clip.vision.preproc_min_tiles"], md["clip.vision.preproc_max_tiles"]) == (1, 12)
    assert md["clip.vision.projection_dim"] == 64  # llm_config's hidden_size
    assert types["v.class_embd"] == ("F32", (1, 1, 64))
    assert types["v.position_embd.weight"] == ("F32", (1, 65, 64))
    assert types["v.blk.3.ls2.weight"] == ("F32", (64,))
    assert types["v.blk.0.attn_k.weight"] == ("Q8_0", (64, 64))
    assert types["v.blk.0.attn_v.bias"] == ("F32", (64,))
    assert types["mm.model.mlp.1.weight"] == ("Q8_0", (64, 256))
    assert {"mm.model.mlp.0.bias", "mm.model.mlp.3.weight"} <= set(types)
    with read(root / "ours-text-f16.gguf") as f:
        assert f.metadata["general.architecture"] == "qwen2"
        assert not any(t.name.startswith(("v.", "mm.")) for t in f.tensors)


def _hf_image_features(folder: Path, img: np.ndarray, cls_last: bool = False) -> np.ndarray:
    """transformers' features of ``img`` (HWC uint8, already the tower's size): the
    pixels normalised as the image processor does, then ``get_image_features``.

    ``cls_last``: InternViT's position table in the order llama.cpp's InternVL graph
    adds it (see test_internvl_mtmd_position_rows)."""
    import json

    import torch
    from transformers import AutoModelForImageTextToText

    # InternVL: transformers reads its own (-hf) layout, saved beside the OpenGVLab folder
    hf = folder.with_name(folder.name + "-hf")
    folder = hf if hf.is_dir() else folder
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    x = (img.astype(np.float32) / 255.0 - np.float32(pre["image_mean"])) / np.float32(
        pre["image_std"]
    )
    pixels = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)[None]))
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    if cls_last:
        pe = m.model.vision_tower.embeddings.position_embeddings
        with torch.no_grad():  # [cls, p0, p1, ...] -> the rows llama.cpp adds to them
            pe.copy_(torch.cat([pe[:, -1:], pe[:, :-1]], 1))
    with torch.no_grad():
        # Janus keeps it on the inner model (JanusModel), not the generation class
        f = m.model.get_image_features(pixel_values=pixels)
    f = getattr(f, "pooler_output", f)
    return f.reshape(-1, f.shape[-1]).float().numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_encodes_image(folders, arch):
    root = folders[arch].parent
    img = _image(64)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(folders[arch], img, cls_last=arch.startswith("internvl"))
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_internvl_mtmd_position_rows(folders):
    """Why the InternVL comparison reorders the position table: llama.cpp's graph
    (tools/mtmd/models/internvl.cpp) appends the CLS token after the patches and adds the
    table's rows in order, so patch i gets InternViT's row of patch i - 1 (the CLS's row
    for patch 0) and the CLS the last patch's.  Against transformers' own features (CLS
    first) the embeddings are off by more than 0.5 % of their scale (measured 0.049 at
    2.78 for this tiny model, whose random table is small against the patches); with the
    rows moved as llama.cpp uses them, within 1e-3 (measured 7.3e-4).  The projector file
    is the reference's byte for byte: the difference is the runtime's."""
    root = folders["internvl"].parent
    img = _image(64)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(folders["internvl"], img)
    assert got.shape == want.shape
    assert np.abs(got - want).max() > 5e-3 * float(np.abs(want).max())


def test_internvl_hf_layout_refused(folders, tmp_path):
    """transformers' own InternVL layout (``InternVLForConditionalGeneration``, the
    ``-hf`` checkpoints): the pinned reference has no class for it (text or projector)
    and fails; ours refuses it with a named error before writing anything."""
    import json
    import sys
    import textwrap

    from support.llama_sdist import llama_cpp_root
    from weightsmith import errors as E

    hf = folders["internvl"].with_name("model-hf")
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    # both runs in one process (torch loads once): each one's error, or None
    driver = textwrap.dedent(
        """
        import json, os, runpy, sys
        script, jobs, errs = sys.argv[1], json.loads(sys.argv[2]), []
        sys.path.insert(0, os.path.dirname(script))
        for args in jobs:
            sys.argv = [script, *args]
            try:
                runpy.run_path(script, run_name="__main__")
                errs.append(None)
            except BaseException as exc:
                errs.append(repr(exc))
        print(json.dumps(errs))
        """
    )
    jobs = [[str(hf), "--outfile", str(tmp_path / "ref.gguf"), "--outtype", "f16", *extra]
            for extra in ([], ["--mmproj"])]  # fmt: skip
    r = pyfork.run([sys.executable, "-c", driver, script, json.dumps(jobs)])  # fmt: skip
    errs = json.loads(r.stdout.strip().splitlines()[-1])
    # the reference logs "Model InternVLForConditionalGeneration is not supported", exits 1
    assert errs == ["SystemExit(1)"] * 2
    assert r.stderr.count("Model InternVLForConditionalGeneration is not supported") == 2
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="InternVLForConditionalGeneration"):
        hf_to_gguf(hf, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_janus_config_defaults(folders, tmp_path):
    """A Janus vision config without mlp_ratio or hidden_act: the reference reads the
    config through transformers' AutoConfig (which fills in 4.0 and GELU), and so does
    ours: the same projector file byte for byte."""
    import json
    import shutil

    src = tmp_path / "janus"
    shutil.copytree(folders["janus"], src)
    cfg = json.loads((src / "config.json").read_text())
    del cfg["vision_config"]["mlp_ratio"], cfg["vision_config"]["hidden_act"]
    (src / "config.json").write_text(json.dumps(cfg))
    _reference([[str(src), "--outfile", str(tmp_path / "ref.gguf"), "--outtype", "f16",
                 "--mmproj"]])  # fmt: skip
    hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    _same(tmp_path / "m.gguf", tmp_path / "ref.gguf")
    from weightsmith.gguf import read

    with read(tmp_path / "m.gguf") as f:
        assert f.metadata["clip.vision.feed_forward_length"] == 256  # 64 x 4.0
        assert f.metadata["clip.use_gelu"] is True


def test_cli_writes_both(folders, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the same two files as the API's."""
    from weightsmith.cli._main import main

    root = folders["internvl"].parent
    dst = tmp_path / "i.gguf"
    assert main(["convert", str(folders["internvl"]), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-i.gguf").read_bytes() == (root / "ours-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (root / "ours-text-f16.gguf").read_bytes()
