"""GGUF -> HF of more vision-language models (tests/test_convert_mmproj_to_hf.py does the
first families): MiniCPM-V 4.6, EXAONE 4.5 and Kimi-K2.5 back into their
``*ForConditionalGeneration`` folders; Janus-Pro refused.

For each tiny random VLM (the forward tests' builders, float32, built once per module):
original folder -> our GGUF pair (f32; EXAONE 4.5 also f16) -> our HF folder, then

* transformers 5.24 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's bit for bit from the f32 pair, except MiniCPM-V
  4.6's Qwen3.5 text (its RMS norms stored ``+ 1`` and ``A_log`` as ``-exp``: within
  1 ulp, as Qwen3.5's own round trip); from the f16 pair, at most the f16 rounding apart;
* the vision config is the original's (the values GGUF does not keep are transformers'
  defaults, which the tiny models use); the image processor gives the original's pixels;
* the image features and the text logits of the model loaded from our folder equal
  the original's on the same inputs;
* converting our folder forward again gives the same GGUF pair;
* Janus-Pro (whose image-generation half neither GGUF keeps) and a MiniCPM-V 4.6
  projector in ``4x`` mode (no window merger, which transformers' tower always builds)
  are named errors before anything is written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.vlm_models import build, minicpmv46_files
from test_convert_mmproj_to_hf import PLUS_ONE, _model
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

ARCHS = ["minicpmv46"]
ARCHS += ["exaone4_5"]
ARCHS += ["kimik25"]
#: the family whose f16 pair converts back too (one: test time)
F16 = "exaone4_5"
#: the Qwen3.5 text (RMS norms stored + 1, A_log as -exp(A_log): 1 ulp)
QWEN35 = ("minicpmv46",)


def _types(arch: str) -> list[str]:
    return ["f32", "f16"] if arch == F16 else ["f32"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the original folder; per type, our GGUF pair and the folder back."""
    root = tmp_path_factory.mktemp("vlm_back_more")
    out: dict = {"root": root}
    for arch in ARCHS:
        src = build(arch, root / arch / "src", dtype="float32")
        out[arch] = src
        for t in _types(arch):
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


@pytest.mark.parametrize(
    ("arch", "t"), [(a, t) for a in ARCHS for t in _types(a)], ids=lambda x: str(x)
)
def test_loads_with_every_tensor(work, arch, t):
    got, want = state_dicts(*_model(work["root"] / arch / f"back-{t}"), _model(work[arch])[0])
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        ulp = np.float32(2.0**-23) * (1 + np.abs(w))  # (w + 1) - 1 in float32
        text35 = arch in QWEN35 and ".language_model." in k
        if t == "f32" and text35 and k.endswith(PLUS_ONE):
            assert np.all(np.abs(g - w) <= ulp), k
        elif t == "f32" and text35 and k.endswith("A_log"):  # log(-(-exp(x)))
            assert np.all(np.abs(g - w) <= 1e-6 * np.maximum(1, np.abs(w))), k
        elif t == "f32":
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:  # f16 where the type rules store F16, the exact values elsewhere
            f16 = w.astype(np.float16).astype(np.float32)
            assert np.all(np.abs(g - w) <= np.abs(f16 - w)), k


#: vision config values ours writes beside the original's: Kimi-K2.5's position table
#: sizes also under the Hub's remote-code spelling, which both converters read
EXTRA_VISION = {"kimik25": {"init_pos_emb_height", "init_pos_emb_width", "init_pos_emb_time"}}
#: top-level token ids of tokens the tiny vocabularies do not spell as the Hub's (the
#: class defaults come back; the tiny Kimi's image token is its <|endoftext|>)
LOST_TOP = {"kimik25": {"image_token_id"}}


@pytest.mark.parametrize("arch", ARCHS)
def test_same_config(work, arch):
    """Every vision config value and top-level field of the original comes back (the
    values no GGUF row keeps are transformers' defaults, as llama.cpp hard-codes them)."""
    from transformers import AutoConfig

    orig = AutoConfig.from_pretrained(work[arch]).to_dict()
    back = AutoConfig.from_pretrained(work["root"] / arch / "back-f32").to_dict()
    skip = {"architectures", "transformers_version", "dtype", "torch_dtype", "_name_or_path"}
    skip |= {"text_config"}  # text GGUF -> HF's (tested with the text registry)
    ov, bv = orig.pop("vision_config"), back.pop("vision_config")
    extra = EXTRA_VISION.get(arch, set())
    assert {k: v for k, v in bv.items() if k not in extra} == ov
    assert {k for k in bv if k not in ov} == extra
    lost = LOST_TOP.get(arch, set())
    drop = skip | {"vision_config"} | lost
    assert {k: v for k, v in back.items() if k not in drop} == {
        k: v for k, v in orig.items() if k not in drop
    }
    for k in lost:  # the class's default for the Hub's token
        assert back[k] != orig[k]


def _inputs(arch: str, folder, seed: int = 0) -> dict:
    """Pixels as each family's get_image_features takes them."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if arch == "minicpmv46":  # its own image processor: one 128 px slice, no resize
        from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import (
            MiniCPMV4_6ImageProcessorPil,
        )

        img = np.random.default_rng(seed).integers(0, 256, (128, 128, 3), dtype=np.uint8)
        out = MiniCPMV4_6ImageProcessorPil.from_pretrained(folder)(
            images=[img], return_tensors="pt", do_resize=False
        )
        return {"pixel_values": out["pixel_values"], "target_sizes": out["target_sizes"]}
    if arch == "exaone4_5":  # flattened patches: 64 x 64 px, 8 px patches, 2 frames
        return {
            "pixel_values": torch.randn(64, 3 * 2 * 8 * 8, generator=g),
            "image_grid_thw": torch.tensor([[1, 8, 8]]),
        }
    # Kimi-K2.5: one [3, 8, 8] patch per row, an 8 x 8 grid
    return {
        "pixel_values": torch.randn(64, 3, 8, 8, generator=g),
        "image_grid_thw": torch.tensor([[1, 8, 8]]),
    }


def _features(model, kw: dict) -> np.ndarray:
    import torch

    with torch.no_grad():
        f = model.get_image_features(**kw)
    f = getattr(f, "pooler_output", f)
    if isinstance(f, (list, tuple)):
        f = torch.cat(list(f), 0)
    return f.reshape(-1, f.shape[-1]).numpy()


# measured gaps over the outputs' scale (f32 pair): every feature and every logit 0;
# MiniCPM-V 4.6's logits bounded at 1e-5 (its Qwen3.5 norms' 1 ulp from + 1, A_log's
# from -exp: Qwen3.5-VL's measured 1.4e-6)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_image_features_and_logits(work, arch):
    import torch

    orig, _ = _model(work[arch])
    back, _ = _model(work["root"] / arch / "back-f32")
    kw = _inputs(arch, work[arch])
    want, got = _features(orig, kw), _features(back, kw)
    assert got.shape == want.shape and want.shape[0] == 16  # 8 x 8 patches (16 x 16), merged
    np.testing.assert_array_equal(got, want)
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    tol = 1e-5 if arch in QWEN35 else 0.0
    gap = float(np.abs(lg - lw).max())
    assert gap <= tol * float(np.abs(lw).max()), gap


@pytest.mark.parametrize("arch", ARCHS)
def test_processor_settings(work, arch):
    """The image processor file: the original's fields the projector keeps, and (where
    transformers' processor runs without torchvision) the original's pixels."""
    ours = json.loads((work["root"] / arch / "back-f32" / "preprocessor_config.json").read_text())
    ref = json.loads((work[arch] / "preprocessor_config.json").read_text())
    keys = {
        "minicpmv46": ("scale_resolution", "patch_size", "downsample_mode"),
        "exaone4_5": ("patch_size", "temporal_patch_size", "merge_size", "min_pixels"),
        "kimik25": ("patch_size", "merge_size", "media_proc_cfg"),
    }[arch]
    keys += ("max_pixels",) if arch == "exaone4_5" else ()
    for k in ("image_processor_type", *keys):
        assert ours[k] == ref[k], k
    for k in ("image_mean", "image_std"):
        np.testing.assert_allclose(ours[k], ref[k], rtol=1e-6)
    if arch == "kimik25":  # Kimi's image processor needs torchvision
        return
    if arch == "minicpmv46":
        a = _inputs(arch, work[arch], seed=3)
        b = _inputs(arch, work["root"] / arch / "back-f32", seed=3)
    else:
        from transformers import AutoImageProcessor

        img = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
        a, b = (
            AutoImageProcessor.from_pretrained(d)(images=[img], return_tensors="pt")
            for d in (work[arch], work["root"] / arch / "back-f32")
        )
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """HF -> GGUF of our folder gives our GGUF pair again: every hyperparameter, tensor
    name, type and value (MiniCPM-V 4.6's Qwen3.5 norms and ssm_a within the 1 ulp of
    their round trip; the tokenizer is text GGUF -> HF's, not compared)."""
    d = work["root"] / arch
    text, proj = convert_forward(d / "back-f32", tmp_path)

    def within_ulp(name: str) -> bool:
        return arch in QWEN35 and name.endswith(("norm.weight", "ssm_a"))

    assert_same_gguf(text, d / "text-f32.gguf", within_ulp)
    assert_same_gguf(proj, d / "mmproj-f32.gguf", within_ulp)


def test_minicpmv46_4x_projector_refused(work, tmp_path):
    """A ``4x`` projector has no window merger (the reference leaves it out), which
    transformers' MiniCPM-V 4.6 tower always builds: the missing tensor is named, nothing
    written."""
    from weightsmith.gguf import read

    src = work["minicpmv46"]
    x4 = tmp_path / "x4"
    x4.mkdir()
    for f in src.iterdir():
        if f.name not in ("config.json", "preprocessor_config.json"):
            (x4 / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    (x4 / "config.json").write_text(json.dumps({**cfg, "downsample_mode": "4x"}))
    minicpmv46_files(x4, downsample_mode="4x")
    text, proj = tmp_path / "t.gguf", tmp_path / "m.gguf"
    hf_to_gguf(x4, text, "f32", mmproj=proj)
    with read(proj) as f:
        assert f.metadata["clip.vision.projector.scale_factor"] == 2
        assert not any(".vit_merger." in t.name for t in f.tensors)
    out = tmp_path / "out"
    with pytest.raises(E.MissingGGUFMetadata) as ei:
        gguf_to_hf(text, out, mmproj=proj)
    assert ei.value.field == "v.vit_merger.attn_q.weight"
    assert not out.exists()


def test_janus_refused(tmp_path):
    """Janus-Pro: JanusForConditionalGeneration always builds the image-generation half
    (VQ-VAE, generation embeddings / aligner / head), and neither GGUF holds it (the pair
    holds exactly the other tensors): refused by projector type, nothing written."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    src = build("janus", tmp_path / "janus", dtype="float32")
    text, proj = tmp_path / "text.gguf", tmp_path / "mmproj.gguf"
    hf_to_gguf(src, text, "f32", mmproj=proj)
    with safe_open(src / "model.safetensors", "np") as f:
        names = list(f.keys())
    gen = [k for k in names if k.startswith(("model.vqmodel.", "model.generation_"))]
    assert gen  # the generation half is in the checkpoint (and in transformers' class) ...
    with read(text) as a, read(proj) as b:  # ... and not in the pair
        assert len(a.tensors) + len(b.tensors) == len(names) - len(gen)
    out = tmp_path / "out"
    with pytest.raises(E.ProjectorMismatch, match="image-generation") as ei:
        gguf_to_hf(text, out, mmproj=proj)
    assert ei.value.field == "clip.projector_type"
    assert not out.exists()
