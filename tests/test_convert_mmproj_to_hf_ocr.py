"""GGUF -> HF of InternVL (Qwen2 and Qwen3 texts), LightOnOCR and PaddleOCR-VL: the text
GGUF and its projector back into one ``*ForConditionalGeneration`` folder, as
tests/test_convert_mmproj_to_hf.py does for the other families (its helpers reused).

For each tiny random model (tests/support/vlm_models.py, float32, built once): original
folder -> our GGUF pair (f32; LightOnOCR f16 too) -> our HF folder, then

* transformers 5 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's bit for bit from the f32 pair (no exception: none
  of these families' forward transforms rounds), within the f16 rounding from the f16
  pair;
* ``get_image_features`` on the same pixels and the text logits on the same ids equal
  the original model's (gap 0);
* HF -> GGUF of the folder gives our GGUF pair again (every row, tensor name, type and
  value).  InternVL's folder is transformers' own layout (``-hf``), which neither
  converter reads (pinned: refused by name); its tensors and config re-laid as
  OpenGVLab's checkpoints (the builder's renames) give the pair again.

The original of InternVL is the builder's ``-hf`` twin (transformers cannot load
OpenGVLab's layout without the checkpoint's remote code); its OpenGVLab folder is the
one converted forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.vlm_models import _INTERNVL_NAMES, build
from test_convert_mmproj_to_hf import _features, _model
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

#: the pairs converted per arch (f16 for one family: test time)
TYPES = {"internvl": ["f32"]}
TYPES["lightonocr"] = ["f32", "f16"]
TYPES["paddleocrvl"] = ["f32"]
TYPES["internvl_qwen3"] = ["f32"]  # InternVL 3.5's text: Qwen3 (QK norms)
ARCHS = list(TYPES)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the folder transformers loads as the original; per type, our GGUF pair
    (from the folder the forward converters read) and the folder back."""
    root = tmp_path_factory.mktemp("ocr_back")
    out: dict = {"root": root}
    for arch in ARCHS:
        src = build(arch, root / arch / "src", dtype="float32")
        hf = src.with_name(src.name + "-hf")  # InternVL's transformers twin
        out[arch] = hf if hf.is_dir() else src
        for t in TYPES[arch]:
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


CASES = [(a, t) for a in ARCHS for t in TYPES[a]]


@pytest.mark.parametrize(("arch", "t"), CASES)
def test_loads_with_every_tensor(work, arch, t):
    got, want = state_dicts(*_model(work["root"] / arch / f"back-{t}"), _model(work[arch])[0])
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        if t == "f32":
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:  # F16 where the type rules store it, exact elsewhere
            f16 = w.astype(np.float16).astype(np.float32)
            assert np.all(np.abs(g - w) <= np.abs(f16 - w)), k


def _pixels(arch: str, folder: Path, img: np.ndarray) -> dict:
    """The model inputs of ``img`` (HWC uint8, 64 x 64), from the folder's own image
    processor where it runs without torchvision (PaddleOCR-VL's), else normalised by the
    folder's mean and std as the processors do."""
    import torch

    if arch == "paddleocrvl":  # flattened patches and their grid
        from transformers import AutoImageProcessor

        out = AutoImageProcessor.from_pretrained(folder)(
            images=[img], return_tensors="pt", do_resize=False
        )
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    x = (img.astype(np.float32) / 255 - np.float32(pre["image_mean"])) / np.float32(
        pre["image_std"]
    )
    kw = {"pixel_values": torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)[None]))}
    if arch == "lightonocr":
        kw["image_sizes"] = torch.tensor([[64, 64]])
    return kw


@pytest.mark.parametrize("arch", ARCHS)
def test_same_image_features_and_logits(work, arch):
    """The same pixels (each folder's own processor settings) give the same features,
    the same ids the same logits: measured gap 0 for all three."""
    import torch

    back_dir = work["root"] / arch / "back-f32"
    orig, _ = _model(work[arch])
    back, _ = _model(back_dir)
    img = np.random.default_rng(5).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    kw_w, kw_g = _pixels(arch, work[arch], img), _pixels(arch, back_dir, img)
    for k, v in kw_w.items():
        np.testing.assert_array_equal(kw_g[k].numpy(), v.numpy(), err_msg=k)
    want, got = _features(arch, orig, kw_w), _features(arch, back, kw_g)
    assert got.shape == want.shape and want.shape[0] == 16  # 64 patches merged 2 x 2
    np.testing.assert_array_equal(got, want)
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    np.testing.assert_array_equal(lg, lw)


@pytest.mark.parametrize("arch", ["internvl", "lightonocr"])
def test_image_processor_from_our_folder(work, arch):
    """transformers' image processor of our folder (InternVL's GotOcr2, LightOnOCR's
    Pixtral) turns a 64 x 64 image into the pixels compared above (one tile for
    InternVL); LightOnOCR's equals the original's processor's output."""
    from transformers import AutoImageProcessor

    img = np.random.default_rng(5).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    d = work["root"] / arch / "back-f32"
    got = AutoImageProcessor.from_pretrained(d)(images=[img], return_tensors="np")
    want = _pixels(arch, d, img)["pixel_values"].numpy()
    np.testing.assert_allclose(got["pixel_values"], want, rtol=0, atol=1e-6)
    if arch == "lightonocr":
        orig = AutoImageProcessor.from_pretrained(work[arch])(images=[img], return_tensors="np")
        np.testing.assert_array_equal(got["pixel_values"], orig["pixel_values"])


def _files(work, arch: str) -> tuple[dict, dict, dict, dict]:
    """``(our config, our preprocessor file, the original's config, its preprocessor
    file)``; the mean and std checked equal."""
    d = work["root"] / arch / "back-f32"
    ours = [json.loads((d / f).read_text()) for f in ("config.json", "preprocessor_config.json")]
    orig = [json.loads((work[arch] / f).read_text())
            for f in ("config.json", "preprocessor_config.json")]  # fmt: skip
    for k in ("image_mean", "image_std"):
        np.testing.assert_allclose(ours[1][k], orig[1][k], rtol=1e-6)
    return ours[0], ours[1], orig[0], orig[1]


def test_internvl_config(work):
    """The values GGUF does not keep, restored as llama.cpp runs them (and as the
    original has them); the tile limits in the processor file."""
    cfg, pre, orig, _ = _files(work, "internvl")
    for k in ("downsample_ratio", "vision_feature_layer", "vision_feature_select_strategy",
              "projector_hidden_act"):  # fmt: skip
        assert cfg[k] == orig[k], k
    for k in ("image_size", "patch_size", "hidden_act", "attention_bias", "use_qk_norm",
              "norm_type", "layer_norm_eps"):  # fmt: skip
        assert cfg["vision_config"][k] == orig["vision_config"][k], k
    # (64 / 8 * 0.5) ** 2 tokens per tile; the builder's twin keeps the class default 256
    assert cfg["image_seq_length"] == 16
    assert (pre["min_patches"], pre["max_patches"]) == (1, 12)


def _opengvlab(back: Path, out: Path) -> Path:
    """Our InternVL folder (transformers' layout) re-laid as OpenGVLab's checkpoints, as
    the builder lays out the original: its tensor renames (q, k, v fused into attn.qkv)
    and an ``InternVLChatModel`` config of our config's values."""
    from safetensors.numpy import load_file, save_file

    sd = load_file(back / "model.safetensors")
    tensors = {}
    for k, v in sd.items():
        if ".attention.k_proj." in k or ".attention.v_proj." in k:
            continue
        if ".attention.q_proj." in k:
            kv = [sd[k.replace("q_proj", x)] for x in ("k_proj", "v_proj")]
            v, k = np.concatenate([v, *kv]), k.replace(".attention.q_proj.", ".attn.qkv.")
        for a, b in _INTERNVL_NAMES:
            k = k.replace(a, b)
        tensors[k] = v
    out.mkdir()
    save_file(tensors, out / "model.safetensors")
    cfg = json.loads((back / "config.json").read_text())
    pre = json.loads((back / "preprocessor_config.json").read_text())
    vc, text = cfg["vision_config"], cfg["text_config"]
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[text["model_type"]]
    (out / "config.json").write_text(json.dumps({
        "architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
        "downsample_ratio": cfg["downsample_ratio"], "min_dynamic_patch": pre["min_patches"],
        "max_dynamic_patch": pre["max_patches"], "llm_config": {**text, "architectures": [arch]},
        "vision_config": {**vc, "architectures": ["InternVisionModel"],
                          "image_size": vc["image_size"][0], "patch_size": vc["patch_size"][0]},
    }))  # fmt: skip
    (out / "preprocessor_config.json").write_text(json.dumps(pre))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """HF -> GGUF of the folder gives our GGUF pair again: every hyperparameter, tensor
    name, type and value (provenance and the tokenizer are text GGUF -> HF's, not
    compared).  InternVL: refused in transformers' layout (as the reference refuses it),
    converted from the same tensors and values in OpenGVLab's."""
    d = work["root"] / arch
    folder = d / "back-f32"
    if arch.startswith("internvl"):
        with pytest.raises(E.UnknownArchitecture, match="InternVLForConditionalGeneration"):
            convert_forward(folder, tmp_path)
        assert not (tmp_path / "text.gguf").exists() and not (tmp_path / "mmproj.gguf").exists()
        folder = _opengvlab(folder, tmp_path / "opengvlab")
    text, proj = convert_forward(folder, tmp_path)
    assert_same_gguf(text, d / "text-f32.gguf")
    assert_same_gguf(proj, d / "mmproj-f32.gguf")


def test_lightonocr_config(work):
    cfg, pre, orig, opre = _files(work, "lightonocr")
    assert cfg["architectures"] == orig["architectures"]  # the Hub's spelling
    assert cfg["spatial_merge_size"] == 2 and cfg["vision_config"]["head_dim"] == 32
    assert cfg["vision_config"]["hidden_act"] == orig["vision_config"]["hidden_act"] == "silu"
    assert cfg["text_config"]["architectures"] == ["Qwen3ForCausalLM"]
    assert pre["image_processor_type"] == opre["image_processor_type"]
    assert pre["patch_size"] == opre["patch_size"]


def test_projector_of_another_text_model_refused(work, tmp_path):
    """A projector with a text GGUF of an architecture its family does not pair with
    (LightOnOCR's with InternVL's Qwen2 text) is refused by name before writing."""
    with pytest.raises(E.ProjectorMismatch) as ei:
        gguf_to_hf(work["root"] / "internvl" / "text-f32.gguf", tmp_path / "o",
                   mmproj=work["root"] / "lightonocr" / "mmproj-f32.gguf")  # fmt: skip
    assert ei.value.field == "clip.projector_type"
    assert not (tmp_path / "o").exists()


def test_paddleocr_config(work):
    cfg, pre, orig, opre = _files(work, "paddleocrvl")
    assert cfg["text_config"]["rope_parameters"]["mrope_section"] == [2, 3, 3]
    assert cfg["vision_config"]["architectures"] == ["PaddleOCRVisionModel"]
    for k in ("hidden_act", "spatial_merge_size", "image_size", "layer_norm_eps"):
        assert cfg["vision_config"][k] == orig["vision_config"][k], k
    for k in ("image_processor_type", "min_pixels", "max_pixels", "patch_size", "merge_size",
              "temporal_patch_size"):  # fmt: skip
        assert pre[k] == opre[k], k


def test_paddleocr_text_alone_still_refused(work, tmp_path):
    """PaddleOCR-VL's ``paddleocr`` text GGUF has no HF class alone: refused without its
    projector, before any output (with it, the joint class above)."""
    with pytest.raises(E.UnknownArchitecture, match="paddleocr"):
        gguf_to_hf(work["root"] / "paddleocrvl" / "text-f32.gguf", tmp_path / "t")
    assert not (tmp_path / "t").exists()
