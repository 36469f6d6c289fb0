"""GGUF -> HF of more vision-language models: the text GGUF and its projector GGUF
back into one ``*ForConditionalGeneration`` folder (``gguf_to_hf(..., mmproj=...)``),
for the families of this module's ARCHS (the first thirteen are in
tests/test_convert_mmproj_to_hf.py, whose helpers this module reuses).

For each tiny random VLM (built once per module, float32): original folder -> our GGUF
pair (f32; and f16 for Qwen4-Exp) -> our HF folder, then

* transformers 5.24 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's: bit for bit from the f32 pair, except the text
  model's tensors the forward conversion rounds (norms stored ``1 + w``: 1 ulp of
  ``1 + w``; ``A_log`` stored ``-exp``: ``log(-(-exp(x)))``, 1e-6 relative); from the
  f16 pair, at most the f16 rounding apart;
* the image features and the text logits of the model loaded from our folder equal
  the original's on the same inputs;
* the folder converts forward again to the same GGUF pair (rows, names, types, values).

Families transformers 5.24 cannot rebuild are refused by name before any output.
"""

from __future__ import annotations

import json
import re
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from support.deepseek_ocr_models import MEAN_STD, deepseek_ocr2, hub_config
from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.muse_dots_pocket_models import muse_glimmer
from support.vlm_models import build
from test_convert_mmproj_to_hf import _features, _model, _pixels
from test_convert_muse_glimmer import _patches
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

ARCHS = ["qwen4exp_vl"]
#: arch -> the families' pixel layout in test_convert_mmproj_to_hf's _pixels
PIXELS = {"qwen4exp_vl": "qwen3vl"}
#: the one family also converted from its f16 pair (test time)
F16 = ("qwen4exp_vl",)
#: arch -> the text tensors (HF names) the forward conversion rounds: norms stored
#: ``1 + w`` (1 ulp of 1 + w back), A_log stored ``-exp(A_log)``
ROUNDED = {"qwen4exp_vl": re.compile(r"language_model\..*(norm\.weight|A_log)$")}
#: arch -> the GGUF tensors rounded the same way when converted forward again
ROUNDED_GGUF = {"qwen4exp_vl": re.compile(r"(norm\.weight|ssm_a)$")}
ARCHS += ["glm5next"]
PIXELS["glm5next"] = "qwen2vl"  # flattened Conv3d patches and their grid, as Qwen's
ROUNDED["glm5next"] = re.compile(r"language_model\..*A_log$")
ROUNDED_GGUF["glm5next"] = re.compile(r"ssm_a$")
ARCHS += ["muse_glimmer"]
#: the families built outside tests/support/vlm_models.py
BUILDERS = {"muse_glimmer": muse_glimmer}
ROUNDED["muse_glimmer"] = re.compile(r"language_model\..*layernorm\.weight$")
ROUNDED_GGUF["muse_glimmer"] = re.compile(
    r"(attn_norm|ffn_norm|post_attention_norm|post_ffw_norm)\.weight$"
)
ARCHS += ["minimaxm3"]
PIXELS["minimaxm3"] = "flat"  # flattened Conv3d patches (its config says num_channels)
ROUNDED["minimaxm3"] = re.compile(r"language_model\..*norm\.weight$")
ROUNDED_GGUF["minimaxm3"] = re.compile(r"norm\.weight$")
ARCHS += ["deepseekocr2"]
BUILDERS["deepseekocr2"] = deepseek_ocr2  # the Hub's folder, which the converters read
#: arch -> the original transformers loads, from the folder converted: DeepSeek-OCR 2's
#: transformers twin over the same weights (transformers cannot load the Hub's config)
HF_TWIN = {"deepseekocr2": lambda hub: hub.parent / "hf"}
#: measured largest logit gap over the logits' scale (the rounded norms above); the
#: image features are exact for every family here
LOGIT_TOL = {"qwen4exp_vl": 1e-5}
LOGIT_TOL["glm5next"] = 1e-5  # measured 1.3e-6: A_log's 1e-6
#: measured largest image-feature gap over their scale: Muse Glimmer's patch embedding
#: comes back as the summed kernel and a zero slab (sum of products vs product of sums)
FEATURE_TOL = {"muse_glimmer": 1e-5}  # measured 3.0e-7


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the original folder; per type, our GGUF pair and the folder back."""
    root = tmp_path_factory.mktemp("vlm_back_new")
    out: dict = {"root": root}
    for arch in ARCHS:
        make = BUILDERS.get(arch, partial(build, arch))
        src = make(root / arch / "src", dtype="float32")
        out[arch] = HF_TWIN[arch](src) if arch in HF_TWIN else src
        for t in ("f32", *(("f16",) if arch in F16 else ())):
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


@pytest.mark.parametrize(
    "arch,t", [(a, t) for a in ARCHS for t in ("f32", *(("f16",) if a in F16 else ()))]
)
def test_loads_with_every_tensor(work, arch, t):
    got, want = state_dicts(*_model(work["root"] / arch / f"back-{t}"), _model(work[arch])[0])
    rounded = ROUNDED.get(arch)
    inexact = []
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        ulp = np.float32(2.0**-23) * (1 + np.abs(w))  # (w + 1) - 1 in float32
        if k.endswith("patch_embedder.patch_embedding.weight"):
            # Muse Glimmer's frames were summed into one Conv2d kernel: back as that
            # kernel for the first frame and zeros for the second
            n = g.shape[1] // 2
            ws = w.reshape(w.shape[0], 2, n).astype(np.float32)
            np.testing.assert_array_equal(g[:, :n], ws[:, 0] + ws[:, 1])
            assert not g[:, n:].any()
            inexact.append(k)
        elif t == "f16":  # f16 where the type rules store F16, the f32 values elsewhere
            f16 = w.astype(np.float16).astype(np.float32)
            assert np.all(np.abs(g - w) <= np.abs(f16 - w) + ulp), k
        elif rounded is not None and rounded.search(k):
            if k.endswith("A_log"):  # log(-(-exp(x)))
                assert np.all(np.abs(g - w) <= 1e-6 * np.maximum(1, np.abs(w))), k
            else:
                assert np.all(np.abs(g - w) <= ulp), k
            inexact += [k] if not np.array_equal(g, w) else []
        else:
            np.testing.assert_array_equal(g, w, err_msg=k)
    # the exceptions are text tensors only (and Muse Glimmer's patch embedding)
    assert not any(".language_model." not in k and "patch_embedder" not in k for k in inexact)


@pytest.mark.parametrize("arch", ARCHS)
def test_same_image_features_and_logits(work, arch):
    import torch

    orig, _ = _model(work[arch])
    back, _ = _model(work["root"] / arch / "back-f32")
    if arch == "muse_glimmer":  # a still image's patches: each frame repeated
        img = np.random.default_rng(7).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        px, grid = _patches(img)
        kw = {"pixel_values": torch.tensor(px), "image_grid_thw": torch.tensor([grid])}
    elif arch == "deepseekocr2":  # the 1024 px global view alone (no tiles)
        g = torch.Generator().manual_seed(0)
        kw = {"pixel_values": torch.randn(1, 3, 1024, 1024, generator=g),
              "pixel_values_local": None, "num_local_patches": [0]}  # fmt: skip
    elif PIXELS[arch] == "flat":  # 64 patches of 8 px over 2 frames, an 8 x 8 grid
        v = orig.config.vision_config
        n = v.num_channels * v.temporal_patch_size * v.patch_size**2
        g = torch.Generator().manual_seed(0)
        kw = {"pixel_values": torch.randn(64, n, generator=g),
              "image_grid_thw": torch.tensor([[1, 8, 8]])}  # fmt: skip
    else:
        kw = _pixels(PIXELS[arch], orig)
    # DeepSeek-OCR 2's get_image_features is the inner model's
    fo, fb = (orig.model, back.model) if arch == "deepseekocr2" else (orig, back)
    want, got = _features(arch, fo, kw), _features(arch, fb, kw)
    assert got.shape == want.shape
    gap = float(np.abs(got - want).max())
    assert gap <= FEATURE_TOL.get(arch, 0.0) * float(np.abs(want).max()), gap
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    gap = float(np.abs(lg - lw).max())
    assert gap <= LOGIT_TOL.get(arch, 0.0) * float(np.abs(lw).max()), gap


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """HF -> GGUF of our folder gives our GGUF pair again (every hyperparameter, tensor
    name, type and value; the rounded text tensors within 1 ulp; the tokenizer is text
    GGUF -> HF's, not compared)."""
    d = work["root"] / arch
    folder = d / "back-f32"
    if arch == "deepseekocr2":  # the converters read the Hub's config: written from ours
        folder = _deepseek_hub(folder, tmp_path / "hub")
    text, proj = convert_forward(folder, tmp_path)
    rounded = ROUNDED_GGUF.get(arch)
    assert_same_gguf(
        text, d / "text-f32.gguf", lambda n: rounded is not None and bool(rounded.search(n))
    )
    assert_same_gguf(proj, d / "mmproj-f32.gguf")


def test_qwen4exp_processor_same_pixels(work):
    """transformers' image processor from our folder gives the original's pixels."""
    from transformers import AutoImageProcessor

    img = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    outs = [
        AutoImageProcessor.from_pretrained(d)(images=[img], return_tensors="np", do_resize=False)
        for d in (work["qwen4exp_vl"], work["root"] / "qwen4exp_vl" / "back-f32")
    ]
    np.testing.assert_array_equal(outs[0]["image_grid_thw"], outs[1]["image_grid_thw"])
    np.testing.assert_allclose(outs[0]["pixel_values"], outs[1]["pixel_values"], atol=1e-6)


def _deepseek_hub(folder: Path, dst: Path) -> Path:
    """Our DeepSeek-OCR 2 folder (transformers' config) with the Hub's config.json and
    processor file, as the forward tests build them (tests/support/deepseek_ocr_models)."""
    shutil.copytree(folder, dst)
    cfg = json.loads((folder / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(hub_config(cfg)))
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    assert {k: pre[k] for k in MEAN_STD} == MEAN_STD
    (dst / "processor_config.json").write_text(json.dumps(
        {"processor_class": "DeepseekVLV2Processor", "patch_size": 16, "downsample_ratio": 4,
         "normalize": True, **MEAN_STD}))  # fmt: skip
    return dst


def test_deepseek_ocr2_text_alone_refused(work, tmp_path):
    """DeepSeek-OCR 2's text alone has no HF class: refused by name, nothing written."""
    with pytest.raises(E.UnknownArchitecture, match="deepseek2-ocr"):
        gguf_to_hf(work["root"] / "deepseekocr2" / "text-f32.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()
