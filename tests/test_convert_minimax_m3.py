"""MiniMax-M3 VL (``MiniMaxM3SparseForConditionalGeneration``) against llama.cpp's converter
and runtime: the ``minimax-m3`` text and the ``minimax_m3`` projector.

The tiny model (tests/support/vlm_models.py ``minimaxm3``) is saved by transformers 5.24
in the Hub's layout, with the Hub's text config fields added.  The pinned reference reads
the config through ``AutoConfig``, and transformers 5.24's ``MiniMaxM3VLTextConfig`` drops
``sparse_attention_config`` / ``moe_layer_freq``: the reference then stops with a
``KeyError`` (pinned here), so it is run on transformers 4.47.1 (which does not know the
model type and leaves config.json as written), as for Nemotron-H.  Checked:

* text: byte-identical to ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and at
  q4_k_m to its f32 through ``llama_model_quantize``; llama.cpp's logits on ours are those
  on the reference's file and transformers' (f32 KV cache); GGUF -> HF refused by name
  (no HF class of the text alone in the reference's layout);
* projector: byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32, f16, bf16 and
  q8_0; mtmd (llama-cpp-python 0.3.36) loads ours with our text file and encodes images
  into transformers' ``get_image_features``;
* a config as transformers 5.24 writes it (no Hub fields) is refused by name, nothing
  written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from support import pyfork
from support.gguf_pair import pair_jobs
from support.llama_sdist import llama_cpp_root
from support.meta_oracle import oracle_env
from support.vlm_models import MINIMAX_M3_HUB_FIELDS, build
from test_convert_archs import _llama_logits_f32_kv
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import _DRIVER, TYPES, _mtmd_embeddings, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

# mtmd's image embeddings vs transformers' features, as a fraction of their scale:
# measured 3.1e-5 (64 x 64), 1.7e-4 and 1.4e-4 (32 x 64, 64 x 32) at a scale of 10
TOL = 1e-3
QUANT = "q4_k_m"
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]


def _reference(jobs: list[list[str]], env: dict | None) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)], env=env)  # fmt: skip


@pytest.fixture(scope="module")
def mm3(tmp_path_factory):
    """The model folder; the reference's text files (each type, q4_k_m through
    llama_model_quantize) and projectors, on transformers 4.47.1; ours."""
    root = tmp_path_factory.mktemp("minimaxm3")
    src = build("minimaxm3", root / "hub")
    jobs = pair_jobs(src, root, TYPES)
    r = _reference(jobs, oracle_env())
    assert r.returncode == 0, r.stderr[-3000:]
    _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{QUANT}.gguf", QUANT)
    hf_to_gguf(src, root / f"ours-text-{QUANT}.gguf", QUANT)
    return root


def test_reference_fails_on_transformers_5(mm3, tmp_path):
    """Why the reference runs on transformers 4.47.1 here: on 5.24 its AutoConfig view of
    the same folder has lost ``sparse_attention_config`` and it stops, writing nothing."""
    out = tmp_path / "r.gguf"
    r = _reference([[str(mm3 / "hub"), "--outfile", str(out), "--outtype", "f16"]],
                   dict(os.environ))  # fmt: skip
    assert r.returncode != 0 and "sparse_attention_config" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(mm3, t):
    _same(mm3 / f"ours-mmproj-{t}.gguf", mm3 / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", [*TYPES, QUANT])
def test_text_same_as_reference(mm3, t):
    _same(mm3 / f"ours-text-{t}.gguf", mm3 / f"ref-text-{t}.gguf")


def test_contents(mm3):
    """Guard against a vacuous pass: the indexer F32 at q8_0, the experts stacked, the
    norms 1 + w, the tower's Conv3d as two kernels and its 80-wide heads reordered."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(mm3 / "ours-text-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["general.architecture"] == "minimax-m3"
    assert md["minimax-m3.leading_dense_block_count"] == 1
    assert md["minimax-m3.attention.indexer.block_size"] == 4
    assert md["minimax-m3.rope.dimension_count"] == 32
    assert types["blk.2.indexer.q_proj.weight"] == ("F32", (64, 256))
    assert types["blk.1.ffn_gate_exps.weight"] == ("Q8_0", (4, 256, 256))
    assert "blk.0.ffn_gate.weight" in types and "blk.0.indexer.q_proj.weight" not in types
    hub = load_file(mm3 / "hub" / "model.safetensors")
    with read(mm3 / "ours-text-f32.gguf") as f:
        norm = np.array(f.numpy("blk.1.attn_q_norm.weight"))
    want = hub["language_model.model.layers.1.self_attn.q_norm.weight"].astype(np.float32) + 1
    np.testing.assert_array_equal(norm, want)
    with read(mm3 / "ours-mmproj-f32.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
        q = np.array(f.numpy("v.blk.0.attn_q.bias"))
    assert md["clip.projector_type"] == "minimax_m3" and md["clip.vision.spatial_merge_size"] == 2
    assert types["v.patch_embd.weight"] == types["v.patch_embd.weight.1"] == ("F32", (160, 3, 8, 8))
    assert types["mm.merger.fc1.weight"] == ("F32", (256, 1024))
    b = hub["vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.bias"].astype(np.float32)
    # head 0's first rotated pair of axis T, then its second half (after 3 x 13 channels)
    np.testing.assert_array_equal(q[:13], b[:13])
    np.testing.assert_array_equal(q[13:26], b[39:52])
    assert not np.array_equal(q, b)


def _hf_image_features(folder, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (a multiple of 16 px: no resize), patched as
    MiniMax-M3's image processor does (it needs torchvision: done here): 2x2 merge
    windows in row order, each patch repeated over the 2 frames."""
    import torch
    from transformers import AutoModelForImageTextToText

    pre = json.loads((folder / "preprocessor_config.json").read_text())
    p, mg, t = pre["patch_size"], pre["merge_size"], pre["temporal_patch_size"]
    x = (img.astype(np.float32) / 255.0 - np.float32(pre["image_mean"])) / np.float32(
        pre["image_std"]
    )
    gh, gw = img.shape[0] // p, img.shape[1] // p
    pt = x.transpose(2, 0, 1).reshape(3, gh // mg, mg, p, gw // mg, mg, p)
    pt = pt.transpose(1, 4, 2, 5, 0, 3, 6)[:, :, :, :, :, None]
    pt = np.broadcast_to(pt, (*pt.shape[:5], t, p, p)).reshape(gh * gw, 3 * t * p * p)
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        f = m.get_image_features(pixel_values=torch.from_numpy(np.ascontiguousarray(pt)),
                                 image_grid_thw=torch.tensor([[1, gh, gw]]))  # fmt: skip
    f = f.pooler_output
    return (torch.cat(list(f), 0) if isinstance(f, (list, tuple)) else f).float().numpy()


@pytest.mark.parametrize("hw", [(64, 64), (32, 64), (64, 32)])
def test_llama_cpp_encodes_image(mm3, hw):
    h, w = hw
    img = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(mm3 / "ours-text-f32.gguf", mm3 / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(mm3 / "hub", img).reshape(-1, 256)
    assert want.shape == (h // 16 * (w // 16), 256)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_text_in_llama_cpp(mm3):
    """llama.cpp's logits on our text file (f32 KV cache: its default f16 cache moves them
    by 0.018 at scale 8.2) are those on the reference's, and transformers' within 2e-3 of
    scale (measured 1.4e-5).  Flash attention off: llama.cpp then runs dense attention
    (its sparse MSA path needs flash attention); 8 tokens in blocks of 4 with the top 2
    blocks kept are every block anyway, in transformers' sparse attention too."""
    import torch
    from transformers import AutoModelForImageTextToText

    ours = _llama_logits_f32_kv(mm3 / "ours-text-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(mm3 / "ref-text-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    m = AutoModelForImageTextToText.from_pretrained(mm3 / "hub", dtype=torch.float32).eval()
    with torch.no_grad():
        hf = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0), np.abs(ours - hf).max()


def test_text_has_no_way_back(mm3, tmp_path):
    """GGUF -> HF: transformers' text class (``MiniMaxM3VLForCausalLM``) keeps fused
    experts in its own layout, not the reference's; not done, refused by name."""
    with pytest.raises(E.UnknownArchitecture, match="minimax-m3"):
        gguf_to_hf(mm3 / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("field", sorted(MINIMAX_M3_HUB_FIELDS))
def test_transformers_config_refused(mm3, tmp_path, field):
    """A config without one of the Hub's fields (transformers 5.24 writes none of them): a
    named error before any file is written.  The weights are linked, not copied."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (mm3 / "hub").iterdir():
        (src / f.name).symlink_to(f)
    cfg = json.loads((mm3 / "hub" / "config.json").read_text())
    del cfg["text_config"][field]
    (src / "config.json").unlink()
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    if field == "scoring_func":  # optional in the reference too: no gating row, as its file
        hf_to_gguf(src, out / "t.gguf", "f16")
        from weightsmith.gguf import read

        with read(out / "t.gguf") as f:
            assert "minimax-m3.expert_gating_func" not in f.metadata
        return
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_vision_head_width_refused(mm3, tmp_path):
    """The reference asserts 80-wide vision heads (its Q/K reorder is built for them):
    another width is refused before any file is written."""
    src = tmp_path / "m"
    shutil.copytree(mm3 / "hub", src, ignore=shutil.ignore_patterns("*.safetensors"))
    (src / "model.safetensors").symlink_to(mm3 / "hub" / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    cfg["vision_config"]["num_attention_heads"] = 4
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="80"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_cli_writes_both(mm3, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(mm3 / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (mm3 / "ours-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (mm3 / "ours-text-q8_0.gguf").read_bytes()
