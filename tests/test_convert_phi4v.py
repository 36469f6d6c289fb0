"""Phi-4 reasoning-vision (``Phi4ForCausalLMV``) against llama.cpp's converter and runtime.

transformers 5.24 has no class for it (the Hub's is remote code, model type
``phi4-siglip``: pinned below); the tiny folder (tests/support/phi4v_models.py) is
assembled from transformers' ``Phi3ForCausalLM`` text, a ``Siglip2VisionModel`` tower
(3 layers; its last layer, post-norm and head present) and a 2-layer GELU MLP, under the
Hub's names, with a hand-written config.json and preprocessor_config.json.  Checked:

* the projector GGUF (``phi4``) and the text GGUF (``phi3``, the reference's
  ``Phi3MiniModel``) are byte-identical to ``convert_hf_to_gguf.py`` (``--mmproj``) at
  f32, f16, bf16 and q8_0; the text at q4_k_m equals ``llama_model_quantize`` of the
  reference's f32;
* llama.cpp's logits on our text file equal transformers' ``Phi3ForCausalLM`` on the same
  weights; GGUF -> HF of the text file alone gives a ``Phi3ForCausalLM`` with the same
  logits; GGUF -> HF of the pair is refused by name;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text file and encodes
  images (position table kept, shrunk, grown) into transformers' ``Siglip2VisionModel``
  ``hidden_states[-2]`` followed by the MLP;
* what the reference refuses (a 1-layer tower, no min / max patch counts, no patch size
  in the image processor) is refused by name, nothing written (the reference's own
  refusals pinned too).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.phi4v_models import PATCH, oracle, phi4v
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TOKENS = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]


@pytest.fixture(scope="module")
def p4(tmp_path_factory):
    """The model folder; the reference's text and projector files at every type; ours."""
    root = tmp_path_factory.mktemp("phi4v")
    src = phi4v(root / "hub")
    convert_both(src, root, text_types=TYPES)
    return root


@pytest.fixture(scope="module")
def torch_model(p4):
    return oracle(p4 / "hub")


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(p4, t):
    _same(p4 / f"ours-mmproj-{t}.gguf", p4 / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", TYPES)
def test_text_same_as_reference(p4, t):
    _same(p4 / f"ours-text-{t}.gguf", p4 / f"ref-text-{t}.gguf")


def test_text_q4_k_m(p4, tmp_path):
    """llama-quantize's types: ours at q4_k_m is the reference's f32 through
    ``llama_model_quantize``."""
    _llama_quantize(p4 / "ref-text-f32.gguf", tmp_path / "ref.gguf", "q4_k_m")
    hf_to_gguf(p4 / "hub", tmp_path / "ours.gguf", "q4_k_m")
    _same(tmp_path / "ours.gguf", tmp_path / "ref.gguf")


def test_projector_contents(p4):
    """The rows mtmd reads and the tensors: one tower layer less, no post-norm or head."""
    from weightsmith.gguf import read

    with read(p4 / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "phi4" and md["clip.use_gelu"] is True
    assert md["clip.vision.block_count"] == 2 and md["clip.vision.patch_size"] == PATCH
    assert md["clip.vision.image_size"] == 8 * PATCH  # an 8 x 8 position table
    assert md["clip.vision.image_min_pixels"] == 16 * PATCH**2
    assert md["clip.vision.image_max_pixels"] == 256 * PATCH**2
    assert md["clip.vision.projection_dim"] == 64
    assert types["v.patch_embd.weight"] == ("F32", (64, 3, PATCH, PATCH))  # a Conv2d kernel
    assert types["v.position_embd.weight"] == ("F32", (64, 64))
    assert types["mm.0.weight"] == ("Q8_0", (64, 64)) and types["mm.2.bias"][0] == "F32"
    assert not any(".blk.2." in n or "post_ln" in n or "head" in n for n in types)
    assert len(types) == 3 + 16 * 2 + 4  # patch (w, b), position table, 2 blocks, MLP
    with read(p4 / "ours-mmproj-f16.gguf") as f:
        assert next(t for t in f.tensors if t.name == "v.patch_embd.weight").ggml_type.name == "F16"
    with read(p4 / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "phi3" and md["phi3.attention.sliding_window"] == 0
    assert not any(n.startswith(("v.", "mm.")) for n in names)


def test_transformers_has_no_phi4_siglip():
    """Why the folder is assembled from parts: no ``phi4-siglip`` model type or
    ``Phi4ForCausalLMV`` class in transformers 5.24."""
    import transformers
    from transformers import CONFIG_MAPPING

    assert "phi4-siglip" not in CONFIG_MAPPING and "phi4_siglip" not in CONFIG_MAPPING
    assert not hasattr(transformers, "Phi4ForCausalLMV")


def test_text_in_llama_cpp_and_back(p4, torch_model, tmp_path):
    """llama.cpp's logits on our text file are transformers' Phi3ForCausalLM's on the same
    weights; GGUF -> HF of that file alone is a Phi3ForCausalLM with the same logits."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        want = torch_model[2](input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(want).max())
    got = _llama_logits(p4 / "ours-text-f32.gguf", TOKENS)
    # the text harness's bound (llama.cpp's f16 KV cache); measured 2.9e-4 of scale 1.9
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()
    back = tmp_path / "back"
    gguf_to_hf(p4 / "ours-text-f32.gguf", back, "f32")
    assert json.loads((back / "config.json").read_text())["architectures"] == ["Phi3ForCausalLM"]
    m = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    with torch.no_grad():
        again = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    assert np.abs(again - want).max() <= 1e-5 * max(scale, 1.0), np.abs(again - want).max()


def test_pair_back_refused(p4, tmp_path):
    """GGUF -> HF of the pair: no transformers class to rebuild it into (named error,
    nothing written)."""
    out = tmp_path / "back"
    with pytest.raises(E.ProjectorMismatch, match="phi4"):
        gguf_to_hf(p4 / "ours-text-f32.gguf", out, mmproj=p4 / "ours-mmproj-f32.gguf")
    assert not out.exists() or not any(out.iterdir())


def _features(torch_model, img: np.ndarray) -> np.ndarray:
    """transformers' tower at ``hidden_states[-2]`` (NaFlex input: the patches row by row,
    each channel-last, with their grid and an all-ones mask), then the MLP."""
    import torch

    tower, mlp, _ = torch_model
    h, w, _ = img.shape
    x = (img.astype(np.float32) / 255.0 - 0.5) / 0.5
    gh, gw = h // PATCH, w // PATCH
    x = x.reshape(gh, PATCH, gw, PATCH, 3).transpose(0, 2, 1, 3, 4).reshape(1, gh * gw, -1)
    with torch.no_grad():
        o = tower(
            pixel_values=torch.from_numpy(np.ascontiguousarray(x)),
            pixel_attention_mask=torch.ones(1, gh * gw, dtype=torch.int32),
            spatial_shapes=torch.tensor([[gh, gw]]),
            output_hidden_states=True,
        )
        v = o.hidden_states[-2][0]
        return mlp(v).numpy()


# measured (of the features' scale, about 3): 3.3e-4 (8 x 8: the table as is), 3.4e-4
# (4 x 8: shrunk), 3.4e-4 (10 x 12: grown); the same with mtmd's flash attention off.
# The MLP's exact GELU (the Hub's nn.GELU) against ggml's tanh form is 1.2e-4 of it
@pytest.mark.parametrize("hw", [(128, 128), (64, 128), (160, 192)])
def test_mtmd_encodes_image(p4, torch_model, hw):
    """mtmd loads our pair and encodes an image (sides multiples of the patch, within the
    pixel budget: not resized) into transformers' features, one row per patch."""
    h, w = hw
    img = np.random.default_rng(11).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(p4 / "ours-text-f32.gguf", p4 / "ours-mmproj-f32.gguf", img)
    want = _features(torch_model, img)
    assert got.shape == want.shape == ((h // PATCH) * (w // PATCH), 64)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * scale, np.abs(got - want).max() / scale


def test_cli_writes_both(p4, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the two files of the library call."""
    from weightsmith.cli._main import main

    dst = tmp_path / "hub.gguf"
    assert main(["convert", str(p4 / "hub"), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-hub.gguf").read_bytes() == (p4 / "ours-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (p4 / "ours-text-f16.gguf").read_bytes()


def _edited(p4, tmp_path, cfg_edit=None, pre_edit=None):
    src = tmp_path / "hub"
    src.mkdir()
    for f in (p4 / "hub").iterdir():
        if f.name not in ("config.json", "preprocessor_config.json"):
            (src / f.name).symlink_to(f)
    for name, edit in (("config.json", cfg_edit), ("preprocessor_config.json", pre_edit)):
        j = json.loads((p4 / "hub" / name).read_text())
        if edit is not None:
            edit(j)
        (src / name).write_text(json.dumps(j))
    return src


@pytest.mark.parametrize(
    ("cfg_edit", "pre_edit", "match"),
    [
        (lambda c: c["vision_config"].update(num_hidden_layers=1), None, "num_hidden_layers"),
        (lambda c: c.pop("min_num_patches"), lambda p: p.pop("min_num_patches"), "min_num_patch"),
        (None, lambda p: p.pop("max_num_patches"), None),  # the config's top level is read
        (None, lambda p: p.pop("patch_size"), "patch_size"),
    ],
)
def test_refused_before_writing(p4, tmp_path, cfg_edit, pre_edit, match):
    """The reference's refusals (a tower of fewer than 2 layers; no min / max patch count
    in the image processor or the config; no patch size in the image processor) are named
    errors before any output; a count the config's top level gives is read from there."""
    src = _edited(p4, tmp_path, cfg_edit, pre_edit)
    out = tmp_path / "out"
    if match is None:
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
        assert (out / "m.gguf").read_bytes() == (p4 / "ours-mmproj-f16.gguf").read_bytes()
        return
    with pytest.raises(E.InvalidModelConfig, match=match):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


_EXPECT_FAIL = """
import json, os, runpy, sys
script, jobs = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, os.path.dirname(script))
out = []
for args in jobs:
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
        out.append(None)
    except BaseException as exc:  # the reference raises, or exits
        out.append(f"{type(exc).__name__}: {exc}")
print(json.dumps(out))
"""


def test_reference_refuses_the_same(p4, tmp_path):
    """The refusals above are the reference's: its --mmproj stops on each of those folders
    (ValueError for the 1-layer tower, KeyError for the missing fields), writing nothing."""
    import sys

    from support.llama_sdist import llama_cpp_root

    edits = [
        (lambda c: c["vision_config"].update(num_hidden_layers=1), None, "at least 2"),
        (lambda c: c.pop("min_num_patches"), lambda p: p.pop("min_num_patches"), "min_num"),
        (None, lambda p: p.pop("patch_size"), "patch_size"),
    ]
    jobs = []
    for i, (ce, pe, _) in enumerate(edits):
        d = tmp_path / str(i)
        d.mkdir()
        src = _edited(p4, d, ce, pe)
        jobs.append([str(src), "--outfile", str(d / "m.gguf"), "--outtype", "f16", "--mmproj"])
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _EXPECT_FAIL, script, json.dumps(jobs)])  # fmt: skip
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for (_, _, word), msg, job in zip(edits, got, jobs):
        assert msg is not None and word in msg, msg
        assert not Path(job[2]).exists()
