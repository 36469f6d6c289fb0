"""MiniCPM-V 4.6 (``MiniCPMV4_6ForConditionalGeneration``) against llama.cpp's converter
and runtime.

The tiny model (tests/support/vlm_models.py ``minicpmv46``) is saved by transformers 5.24
(the names the reference reads): a Qwen3.5 text with the Hub's MTP block, a SigLIP tower
with its window merger and the final merger.  Checked here:

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32,
  f16, bf16 and q8_0 (``16x`` mode), and at f32 in ``4x`` mode (no window merger);
* the text GGUF is byte-identical to the reference's at f32 and f16 and to its f32 run
  through ``llama_model_quantize`` (q4_k_m); like the reference's it counts the
  MTP block in ``block_count`` without its tensors, which llama.cpp 0.3.36 cannot load
  (pinned); without ``mtp_num_hidden_layers`` the reference stops, ours writes the trunk,
  whose logits in llama.cpp are transformers', and GGUF -> HF gives it back;
* mtmd (llama-cpp-python 0.3.36, projector type ``minicpmv4_6``) loads our projector with
  our text model and encodes an image into transformers' ``get_image_features``, in
  both modes.
"""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

from support import pyfork
from support.llama_sdist import llama_cpp_root
from support.vlm_models import build, minicpmv46_files
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import TYPES, _mtmd_embeddings, _reference, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

# mtmd's image embeddings vs transformers' features, as a fraction of their scale:
# measured 1.2e-4 (16x, scale 4.7) and 1.1e-4 (4x, scale 4.6)
TOL = 1e-3
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
# the text is the qwen35 entry's (its whole harness runs at every type in
# tests/test_convert_archs.py) less the merger and MTP tensors, which no type changes:
# f32 (the quantized types' source) and f16 here
TEXT_TYPES = ["f32", "f16"]


def _variant(src, dst, cfg_edit=None, **pre):
    """A copy of ``src`` (weights linked) with its config edited and ``pre`` in the image
    processor file."""
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f)
    if cfg_edit is not None:
        cfg = json.loads((src / "config.json").read_text())
        cfg_edit(cfg)
        (dst / "config.json").unlink()
        (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    if pre:
        (dst / "preprocessor_config.json").unlink()
        minicpmv46_files(dst, **pre)
    return dst


def _no_mtp_field(cfg: dict) -> None:
    del cfg["text_config"]["mtp_num_hidden_layers"]


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    """The model folder, a copy without ``mtp_num_hidden_layers`` and one in ``4x`` mode;
    the reference's files and ours."""
    root = tmp_path_factory.mktemp("minicpmv46")
    src = build("minicpmv46", root / "hub")
    nomtp = _variant(src, root / "nomtp", _no_mtp_field)
    x4 = _variant(
        nomtp, root / "x4", lambda c: c.update(downsample_mode="4x"), downsample_mode="4x"
    )
    jobs = [[str(x4), "--outfile", str(root / "ref-mmproj-4x.gguf"), "--outtype", "f32",
             "--mmproj"]]  # fmt: skip
    for t in TYPES:
        if t in TEXT_TYPES:
            jobs.append([str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t])
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)
    _llama_quantize(root / "ref-text-f32.gguf", root / "ref-text-q4_k_m.gguf", "q4_k_m")
    hf_to_gguf(src, root / "ours-text-q4_k_m.gguf", "q4_k_m")
    hf_to_gguf(nomtp, root / "nomtp-text-f32.gguf", "f32", mmproj=root / "nomtp-mmproj-f32.gguf")
    hf_to_gguf(x4, root / "x4-text-f32.gguf", "f32", mmproj=root / "x4-mmproj-f32.gguf")
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(mc, t):
    _same(mc / f"ours-mmproj-{t}.gguf", mc / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", [*TEXT_TYPES, "q4_k_m"])
def test_text_same_as_reference(mc, t):
    _same(mc / f"ours-text-{t}.gguf", mc / f"ref-text-{t}.gguf")


def test_4x_projector_same_as_reference(mc):
    """``downsample_mode`` ``4x``: the window merger left out, scale factor 2."""
    from weightsmith.gguf import read

    _same(mc / "x4-mmproj-f32.gguf", mc / "ref-mmproj-4x.gguf")
    with read(mc / "x4-mmproj-f32.gguf") as f:
        assert f.metadata["clip.vision.projector.scale_factor"] == 2
        assert not any(".vit_merger." in t.name for t in f.tensors)


def test_projector_contents(mc):
    """The rows mtmd reads and the tensors of both mergers."""
    from weightsmith.gguf import read

    with read(mc / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "minicpmv4_6"
    assert md["clip.vision.image_size"] == 128  # scale_resolution, not the 560 bucket grid
    assert list(md["clip.vision.wa_layer_indexes"]) == [1]
    assert md["clip.vision.projector.scale_factor"] == 4 and md["clip.use_gelu"] is True
    assert types["v.position_embd.weight"] == ("F32", (4900, 64))
    assert types["v.patch_embd.weight"] == ("F32", (64, 3, 8, 8))
    assert types["v.vit_merger.ds_ffn_up.weight"] == ("Q8_0", (512, 256))
    assert types["mm.up.weight"] == ("Q8_0", (256, 256))
    assert types["mm.down.weight"] == ("Q8_0", (64, 256))
    assert types["mm.input_norm.weight"][0] == "F32"
    assert not any(n.startswith(("blk.", "token_embd", "output")) for n in types)


def test_text_drops_mtp_tensors_but_counts_them(mc):
    """As the reference: ``block_count`` = trunk + MTP layers and ``nextn_predict_layers``,
    no MTP (nor merger) tensor; llama.cpp cannot load that file (ours or the
    reference's).  Without the config field, ours is the trunk alone."""
    import llama_cpp

    from weightsmith.gguf import read

    with read(mc / "ours-text-f16.gguf") as f:
        md, names = f.metadata, {t.name for t in f.tensors}
    assert md["general.architecture"] == "qwen35" and md["qwen35.block_count"] == 5
    assert md["qwen35.nextn_predict_layers"] == 1
    assert not any(n.startswith("blk.4.") for n in names) and "blk.3.attn_q.weight" in names
    for path in (mc / "ours-text-f32.gguf", mc / "ref-text-f32.gguf"):
        with pytest.raises(ValueError, match="Failed to load"):
            llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False)
    with read(mc / "nomtp-text-f32.gguf") as f:
        md = f.metadata
    assert md["qwen35.block_count"] == 4 and "qwen35.nextn_predict_layers" not in md


def test_reference_needs_the_mtp_field(mc, tmp_path):
    """The reference's Qwen3.5 class asserts an MTP layer count it cannot take from
    MiniCPM-V's checkpoint (its class drops the ``mtp.*`` tensors first)."""
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, script, str(mc / "nomtp"), "--outfile",
                        str(tmp_path / "r.gguf"), "--outtype", "f16"])  # fmt: skip
    assert r.returncode != 0 and "opt_num_mtp_layers" in r.stderr


@pytest.fixture(scope="module")
def text_logits(mc) -> np.ndarray:
    """transformers' MiniCPM-V text logits for TOKENS."""
    import torch
    from transformers import AutoModelForImageTextToText

    m = AutoModelForImageTextToText.from_pretrained(mc / "hub", dtype=torch.float32).eval()
    with torch.no_grad():
        return m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()


def test_text_in_llama_cpp(mc, text_logits):
    """llama.cpp runs the trunk file with transformers' logits for the same tokens."""
    got = _llama_logits(mc / "nomtp-text-f32.gguf", TOKENS)
    want = text_logits
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_text_back_to_hf(mc, tmp_path, text_logits):
    """GGUF -> HF of the reference-identical file (the MTP layer counted, no MTP tensor):
    the ``qwen35`` entry's Qwen3_5ForCausalLM with the VLM's text logits."""
    import torch
    from transformers import AutoModelForCausalLM

    back = tmp_path / "back"
    gguf_to_hf(mc / "ours-text-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3_5ForCausalLM"] and cfg["num_hidden_layers"] == 4
    with torch.no_grad():
        m = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
        got = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    want = text_logits
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-4 * max(scale, 1.0)


def _hf_image_features(folder, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (the slice size: no slicing, no resize) through
    its own image processor."""
    import torch
    from transformers import AutoModelForImageTextToText
    from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import (
        MiniCPMV4_6ImageProcessorPil,
    )

    out = MiniCPMV4_6ImageProcessorPil.from_pretrained(folder)(
        images=[img], return_tensors="pt", do_resize=False
    )
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        f = m.model.get_image_features(
            pixel_values=out["pixel_values"], target_sizes=out["target_sizes"]
        )
    return torch.cat(list(f.pooler_output), 0).float().numpy()


@pytest.mark.parametrize("mode", ["16x", "4x"])
def test_llama_cpp_encodes_image(mc, mode):
    """A 128 x 128 image (one slice): 16 x 16 patches, 4 x 4 tokens (8 x 8 in 4x mode)."""
    img = np.random.default_rng(7).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    pre, folder = ("nomtp", mc / "nomtp") if mode == "16x" else ("x4", mc / "x4")
    got = _mtmd_embeddings(mc / f"{pre}-text-f32.gguf", mc / f"{pre}-mmproj-f32.gguf", img)
    want = _hf_image_features(folder, img)
    assert want.shape == ((16 if mode == "16x" else 64), 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_cli_writes_both(mc, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the two files of the library call."""
    from weightsmith.cli._main import main

    dst = tmp_path / "hub.gguf"  # general.name comes from the folder, not the file
    assert main(["convert", str(mc / "hub"), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-hub.gguf").read_bytes() == (mc / "ours-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (mc / "ours-text-f16.gguf").read_bytes()


def test_bad_downsample_mode_refused(mc, tmp_path):
    """Another ``downsample_mode`` is refused (the reference raises): a named error before
    any file is written."""
    src = _variant(mc / "hub", tmp_path / "bad", downsample_mode="8x")
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="downsample_mode"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    shutil.rmtree(src)


def test_second_merger_round_refused(mc, tmp_path):
    """``merger_times`` > 1 adds ``model.merger.mlp.1.*``, which gguf-py (the reference's
    names) has no name for: a named error, nothing written."""
    from safetensors.numpy import load_file, save_file

    src = _variant(mc / "hub", tmp_path / "m2")
    sd = load_file(mc / "hub" / "model.safetensors")
    sd["model.merger.mlp.1.linear_1.weight"] = sd["model.merger.mlp.0.linear_1.weight"]
    (src / "model.safetensors").unlink()
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    with pytest.raises(E.UnmappedTensor, match=r"model\.merger\.mlp\.1\.linear_1\.weight"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
