"""GGUF -> HF of the last projector families that convert forward: Unlimited-OCR and
DeepSeek-OCR (1) (``deepseekocr``), GLM-5.2-Vision (a ``kimik25`` file), and the two
transformers 5.24 cannot rebuild, Youtu-VL (``youtuvl``) and Kimi-VL (``kimivl``).

For each tiny random model (the forward tests' builders, float32, built once per module):
original folder -> our GGUF pair (f32; Unlimited-OCR's f16 too) -> our HF folder, then

* transformers 5.24 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's: bit for bit from the f32 pair; from the f16 pair
  at most the f16 rounding apart;
* the image features and the text logits of the model loaded from our folder equal the
  original's on the same inputs;
* the folder converts forward again to the same GGUF pair (rows, names, types, values).

The originals transformers loads: Unlimited-OCR's and DeepSeek-OCR (1)'s transformers
twin over the Hub folder's weights (transformers cannot read the Hub's config); for
GLM-5.2-Vision, transformers' Kimi-K2.5 of the same weights (its tower and projector; the
GGUF pair is Kimi-K2.5's, see the test).  Youtu-VL and Kimi-VL are remote code with no
transformers class: their pairs are refused by name before anything is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.deepseek_ocr_models import (
    MEAN_STD,
    deepseek_ocr1,
    deepseek_ocr1_hub_config,
    unlimited_hub_config,
    unlimited_ocr,
)
from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.remote_layouts import glm5v, kimivl
from support.vlm_models import build, kimik25
from test_convert_mmproj_to_hf import _model
from test_convert_mmproj_to_hf_more import _features, _inputs
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

#: the families that come back, and the ones converted from their f16 pair too
ARCHS = ["unlimited", "dsocr1"]
F16 = ("unlimited",)
#: arch -> the Hub config written beside our folder's weights for the forward converters
HUB_CONFIG = {"unlimited": unlimited_hub_config, "dsocr1": deepseek_ocr1_hub_config}


def _twin(hub: Path) -> tuple[Path, Path]:
    """An OCR model's Hub folder (converted) and its transformers twin (the original
    transformers loads: it cannot read the Hub's config)."""
    return hub, hub.parent / "hf"


def _kimi(root: Path) -> Path:
    """The tiny Kimi-K2.5 folder (built once), which transformers loads."""
    folder = root / "kimi"
    return folder if folder.exists() else kimik25(folder, dtype="float32")


#: arch -> (module root -> (the folder converted, the original transformers loads))
BUILD = {
    "unlimited": lambda root: _twin(unlimited_ocr(root / "unlimited" / "src", dtype="float32")),
    "dsocr1": lambda root: _twin(deepseek_ocr1(root / "dsocr1" / "src", dtype="float32")),
}
ARCHS += ["glm5v"]
BUILD["glm5v"] = lambda root: (glm5v(_kimi(root), root / "glm5v" / "src"), _kimi(root))
#: the remote-code families refused by name (arch = their projector type): the model type
#: and class transformers lacks, and the class their text GGUF converts back to alone
REFUSED = {"youtuvl": ("youtu_vl", "YoutuVLForConditionalGeneration", "YoutuForCausalLM")}
BUILD["youtuvl"] = lambda root: (build("youtuvl", root / "youtuvl" / "src"), None)
REFUSED["kimivl"] = ("kimi_vl", "KimiVLForConditionalGeneration", "DeepseekV3ForCausalLM")
BUILD["kimivl"] = lambda root: (kimivl(_kimi(root), root / "kimivl" / "src"), None)


def _types(arch: str) -> tuple[str, ...]:
    return ("f32", "f16") if arch in F16 else ("f32",)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the original transformers loads; per type, our GGUF pair and (the
    families that come back) the folder back."""
    root = tmp_path_factory.mktemp("vlm_back_rest")
    out: dict = {"root": root}
    for arch, make in BUILD.items():
        src, out[arch] = make(root)
        for t in _types(arch):
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            if arch in ARCHS:
                gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


@pytest.mark.parametrize(("arch", "t"), [(a, t) for a in ARCHS for t in _types(a)])
def test_loads_with_every_tensor(work, arch, t):
    got, want = state_dicts(*_model(work["root"] / arch / f"back-{t}"), _model(work[arch])[0])
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        if t == "f32":
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:  # f16 where the type rules store F16, the f32 values elsewhere
            f16 = w.astype(np.float16).astype(np.float32)
            assert np.all(np.abs(g - w) <= np.abs(f16 - w)), k


def _ocr_pixels() -> dict:
    """The 1024 px global view and two 640 px tiles side by side (the newline rows)."""
    import torch

    g = torch.Generator().manual_seed(0)
    return {
        "pixel_values": torch.randn(1, 3, 1024, 1024, generator=g),
        "pixel_values_local": torch.randn(2, 3, 640, 640, generator=g),
        "num_local_patches": [2],
        "patches_grid": [[2, 1]],
    }


# measured gaps (f32 pair): every feature and every logit 0
@pytest.mark.parametrize("arch", ARCHS)
def test_same_image_features_and_logits(work, arch):
    import torch

    orig, _ = _model(work[arch])
    back, _ = _model(work["root"] / arch / "back-f32")
    kw = _ocr_pixels() if arch != "glm5v" else _inputs("kimik25", work[arch])
    want, got = _features(orig, kw), _features(back, kw)
    assert got.shape == want.shape and want.shape[0] > 0
    np.testing.assert_array_equal(got, want)
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    np.testing.assert_array_equal(lg, lw)


def _hub(arch: str, folder: Path, dst: Path) -> Path:
    """Our OCR folder (transformers' config) with the Hub's config.json and processor
    file, as the forward tests build them (tests/support/deepseek_ocr_models)."""
    shutil.copytree(folder, dst)
    cfg = json.loads((folder / "config.json").read_text())
    # DeepSeek-OCR (1)'s text keeps no window: none written back (the class default),
    # none in its Hub config
    cfg["text_config"].setdefault("sliding_window", None)
    (dst / "config.json").write_text(json.dumps(HUB_CONFIG[arch](cfg)))
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    assert {k: pre[k] for k in MEAN_STD} == MEAN_STD
    (dst / "processor_config.json").write_text(json.dumps(
        {"processor_class": "DeepseekVLV2Processor", "patch_size": 16, "downsample_ratio": 4,
         "normalize": True, **MEAN_STD}))  # fmt: skip
    return dst


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """HF -> GGUF of our folder gives our GGUF pair again (every hyperparameter, tensor
    name, type and value; the tokenizer is text GGUF -> HF's, not compared).  The OCR
    folders get the Hub's config the converters read (transformers' is ours)."""
    d = work["root"] / arch
    folder = d / "back-f32"
    if arch in HUB_CONFIG:
        folder = _hub(arch, folder, tmp_path / "hub")
    text, proj = convert_forward(folder, tmp_path)
    assert_same_gguf(text, d / "text-f32.gguf")
    # GLM-5.2-Vision's projector comes back as Kimi-K2.5's, whose tensors the converters
    # write in Kimi's order
    assert_same_gguf(proj, d / "mmproj-f32.gguf", any_order=arch == "glm5v")


def test_ocr_configs_restored(work):
    """The tower configs, the text attention and the processor settings are the
    originals' (Unlimited-OCR: sliding window 128, 32 tiles; DeepSeek-OCR: full
    attention, 9 tiles)."""
    for arch, tiles in (("unlimited", 32), ("dsocr1", 9)):
        ours = json.loads((work["root"] / arch / "back-f32" / "config.json").read_text())
        orig = json.loads((work[arch] / "config.json").read_text())
        for tower in ("sam_config", "encoder_config"):
            o = orig["vision_config"][tower]
            assert {k: o[k] for k in ours["vision_config"][tower]} == ours["vision_config"][tower]
        for k in ("layer_types", "mlp_layer_types"):
            assert ours["text_config"][k] == orig["text_config"][k], (arch, k)
        pre = json.loads(
            (work["root"] / arch / "back-f32" / "preprocessor_config.json").read_text()
        )
        assert pre["image_processor_type"] == "UnlimitedOcrImageProcessor"
        assert (pre["min_patches"], pre["max_patches"], pre["tile_size"]) == (2, tiles, 640)
    ours = json.loads((work["root"] / "unlimited" / "back-f32" / "config.json").read_text())
    assert ours["text_config"]["sliding_window"] == 128


def test_glm5v_pair_is_kimi_k25s(work, tmp_path):
    """Why GLM-5.2-Vision comes back as Kimi-K2.5: its GGUF pair is Kimi-K2.5's file type
    and holds Kimi-K2.5's pair of the same weights (every row but the name, every tensor),
    and transformers 5.24 has no GLM-5.2-Vision class."""
    import transformers

    root = work["root"]
    hf_to_gguf(work["glm5v"], tmp_path / "t.gguf", "f32", mmproj=tmp_path / "p.gguf")
    assert_same_gguf(root / "glm5v" / "text-f32.gguf", tmp_path / "t.gguf")
    assert_same_gguf(root / "glm5v" / "mmproj-f32.gguf", tmp_path / "p.gguf", any_order=True)
    cfg = json.loads((root / "glm5v" / "back-f32" / "config.json").read_text())
    assert cfg["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert not hasattr(transformers, "Glm5vForConditionalGeneration")


def test_glm5v_projector_needs_kimis_text(work, tmp_path):
    """A ``kimik25`` projector converts back only beside a ``deepseek2`` text (Kimi's):
    beside another (here the OCR's ``deepseek2-ocr``; a real GLM-5.2-Vision's GLM-5 text,
    ``glm-dsa``, which our text registry does not convert) it is refused by name,
    nothing written."""
    root = work["root"]
    with pytest.raises(E.ProjectorMismatch, match="'kimik25' with a 'deepseek2-ocr'"):
        gguf_to_hf(root / "unlimited" / "text-f32.gguf", tmp_path / "back",
                   mmproj=root / "glm5v" / "mmproj-f32.gguf")  # fmt: skip
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("arch", sorted(REFUSED))
def test_remote_code_pair_refused(work, arch, tmp_path):
    """Remote code: transformers 5.24 has no class to rebuild the pair into; refused by
    name (the projector type and the reason), nothing written; the text converts alone."""
    import transformers
    from transformers import CONFIG_MAPPING

    model_type, hf_class, text_class = REFUSED[arch]
    assert model_type not in CONFIG_MAPPING and not hasattr(transformers, hf_class)
    d = work["root"] / arch
    with pytest.raises(E.ProjectorMismatch, match=hf_class) as exc:
        gguf_to_hf(d / "text-f32.gguf", tmp_path / "back", mmproj=d / "mmproj-f32.gguf")
    assert "remote code" in str(exc.value) and repr(arch) in str(exc.value)
    assert not (tmp_path / "back").exists()
    gguf_to_hf(d / "text-f32.gguf", tmp_path / "text")
    cfg = json.loads((tmp_path / "text" / "config.json").read_text())
    assert cfg["architectures"] == [text_class]
