"""GGUF -> HF of GLM-4V, GLM-4.5V and GLM-OCR (projector ``glm4v``), Granite 4 Vision
(``granite4_vision``) and HunyuanVL (``hunyuanvl``): the text GGUF and its projector back
into one ``*ForConditionalGeneration`` folder (``gguf_to_hf(..., mmproj=...)``).

For each tiny random model (float32, built once for the module by the forward tests'
builders): original folder -> our GGUF pair (f32; GLM-4V also f16) -> our HF folder, then

* transformers 5.24 loads the folder with no missing or mismatched keys and no
  unexpected ones but those the original's folder has too (GLM-OCR's MTP block, which
  transformers does not build: written back as the Hub's checkpoint carries it);
* every tensor of the original's safetensors is in ours under the same name, bit for bit
  from the f32 pair (from the f16 pair: at most the f16 rounding apart), except what
  GGUF does not keep: Granite 4 Vision's SigLIP pooling head (not built back) and
  HunyuanVL's class-token row of the position table (zeros; transformers never reads
  it); Granite 4 Vision's layerwise projectors are matched by the text layer they feed;
* ``get_image_features`` on the same pixels and the text logits on the same ids equal
  the original model's (measured gap 0; one Granite 4 Vision block is the original's
  with its vision layer as mtmd reads it, see that test);
* converting our folder forward again gives the same GGUF pair (rows, tensor names,
  types, values);
* the GLM and HunyuanVL text GGUFs alone still have no HF class.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support.gguf_pair import assert_same_gguf, convert_forward
from support.vlm_models import build
from test_convert_mmproj_to_hf import _features, _model
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

GLM = ["glm4v", "glm4vmoe", "glmocr"]
ARCHS = [*GLM]
ARCHS += ["granite4_vision"]
ARCHS += ["hunyuanvl"]
#: the families given pixels as flattened patches with a grid, and a text refused alone
PATCHES = [*GLM, "hunyuanvl"]
#: the position table whose class-token row the reference drops (zeros when back)
CLS_ROW = {"hunyuanvl": "embeddings.position_embedding.weight"}
#: the family whose f16 pair is converted back too (one: test time)
F16 = "glm4v"
#: the tensors transformers does not build (the original's folder has them too)
UNBUILT = {"glmocr": "model.language_model.layers.2."}
#: the original's tensors GGUF does not keep (the reference drops them)
#: (the SigLIP pooling head, in the file and in transformers' model)
DROPPED = {"granite4_vision": ("model.vision_tower.vision_model.head.", "model.vision_tower.head.")}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the original folder; our GGUF pair and the folder back (f32, and f16)."""
    root = tmp_path_factory.mktemp("vlm_back_glm")
    out: dict = {"root": root}
    for arch in ARCHS:
        src = build(arch, root / arch / "src", dtype="float32")
        out[arch] = src
        for t in ("f32", "f16") if arch == F16 else ("f32",):
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


def _types(arch: str) -> list[str]:
    return ["f32", "f16"] if arch == F16 else ["f32"]


def _weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    out: dict[str, np.ndarray] = {}
    for p in sorted(folder.glob("*.safetensors")):
        out.update(load_file(p))
    return out


@pytest.mark.parametrize(
    ("arch", "t"), [(a, t) for a in ARCHS for t in _types(a)]
)  # fmt: skip
def test_loads_with_every_tensor(work, arch, t):
    back_dir = work["root"] / arch / f"back-{t}"
    back, info = _model(back_dir)
    orig, oinfo = _model(work[arch])
    assert type(back) is type(orig)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert not info["error_msgs"], info
    assert sorted(info["unexpected_keys"]) == sorted(oinfo["unexpected_keys"])
    if arch in UNBUILT:  # guard: the MTP block is there, and only it is unexpected
        assert info["unexpected_keys"]
        assert all(k.startswith(UNBUILT[arch]) for k in info["unexpected_keys"])
    # the files: every tensor under the original's (the Hub's) name
    want, got = _weights(work[arch]), _weights(back_dir)
    if arch in DROPPED:
        gone = {k for k in want if k.startswith(DROPPED[arch])}
        assert gone and not any(k.startswith(DROPPED[arch]) for k in got)
        want = {k: v for k, v in want.items() if k not in gone}
    if arch == "granite4_vision":  # the layerwise projectors by the text layer they feed
        got = {_g4v_original_name(work[arch], back_dir, k): v for k, v in got.items()}
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        if arch in CLS_ROW and k.endswith(CLS_ROW[arch]):
            assert not g[0].any(), k  # row 0: unused by transformers, not in GGUF
            g, w = g[1:], w[1:]
        if t == "f32":
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:  # f16 where the type rules store F16, exact elsewhere
            f16 = w.astype(np.float16).astype(np.float32)
            assert np.all(np.abs(g - w) <= np.abs(f16 - w)), k
    # the model loaded: every parameter transformers builds
    sw = {k: v.numpy() for k, v in orig.state_dict().items()}
    sg = {k: v.numpy() for k, v in back.state_dict().items()}
    if arch in DROPPED:
        sw = {k: v for k, v in sw.items() if not k.startswith(DROPPED[arch])}
    if arch == "granite4_vision":
        sg = {_g4v_original_name(work[arch], back_dir, k): v for k, v in sg.items()}
    assert set(sg) == set(sw)
    if t == "f32":
        for k, w in sw.items():
            cut = 1 if arch in CLS_ROW and k.endswith(CLS_ROW[arch]) else 0
            np.testing.assert_array_equal(sg[k][cut:], w[cut:], err_msg=k)


def _g4v_original_name(orig: Path, ours: Path, name: str) -> str:
    """Our layerwise projector's name in the original: the one feeding the same text layer
    (ours are numbered in the sorted order of the map as written back, see the docs)."""
    pre = "model.layerwise_projectors."
    if not name.startswith(pre):
        return name
    i, _, rest = name[len(pre) :].partition(".")
    maps = [
        json.loads((d / "config.json").read_text())["deepstack_layer_map"] for d in (ours, orig)
    ]
    text_layer = maps[0][int(i)][1]
    j = next(j for j, (_, t) in enumerate(maps[1]) if t == text_layer)
    return f"{pre}{j}.{rest}"


def _pixels(model, seed: int = 0) -> dict:
    """Flattened patches of a 64 x 64 image: GLM's 8 px patches, 2 frames, an 8 x 8 grid;
    HunyuanVL's 16 px patches, 1 frame, a 4 x 4 grid."""
    import torch

    g = torch.Generator().manual_seed(seed)
    v = model.config.vision_config
    channels = getattr(v, "in_channels", getattr(v, "num_channels", 3))
    n = channels * v.temporal_patch_size * v.patch_size**2
    side = 64 // v.patch_size
    return {
        "pixel_values": torch.randn(side * side, n, generator=g),
        "image_grid_thw": torch.tensor([[1, side, side]]),
    }


# measured largest gaps (f32 pair): features 0, logits 0 for all four
@pytest.mark.parametrize("arch", PATCHES)
def test_same_image_features_and_logits(work, arch):
    import torch

    orig, _ = _model(work[arch])
    back, _ = _model(work["root"] / arch / "back-f32")
    kw = _pixels(orig)
    want, got = _features(arch, orig, kw), _features(arch, back, kw)
    # GLM: 16 merged tokens of 128; HunyuanVL: begin, 2 rows of 2 + newline, end
    assert got.shape == want.shape == ((16, 128) if arch in GLM else (8, 64))
    np.testing.assert_array_equal(got, want)
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    np.testing.assert_array_equal(lg, lw)


@pytest.mark.parametrize("arch", PATCHES)
def test_processor_same_pixels(work, arch):
    """transformers' image processor from our folder gives the original's pixels (GLM's
    pixel bounds are not kept: a 64 x 64 image passes unresized either way; HunyuanVL's
    are, from their rows)."""
    from transformers import AutoImageProcessor

    ours = json.loads((work["root"] / arch / "back-f32" / "preprocessor_config.json").read_text())
    ref = json.loads((work[arch] / "preprocessor_config.json").read_text())
    assert ours["image_processor_type"] == ref["image_processor_type"]
    for k in ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels"):
        assert ours.get(k) == ref.get(k) or (arch in GLM and k.endswith("_pixels")), k
    img = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    outs = [
        AutoImageProcessor.from_pretrained(d)(images=[img], return_tensors="np", do_resize=False)
        for d in (work[arch], work["root"] / arch / "back-f32")
    ]
    np.testing.assert_array_equal(outs[0]["image_grid_thw"], outs[1]["image_grid_thw"])
    np.testing.assert_allclose(outs[0]["pixel_values"], outs[1]["pixel_values"], atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """HF -> GGUF of our folder gives our GGUF pair again (every hyperparameter, tensor
    name, type and value, in the same order but for Granite 4 Vision's projector;
    provenance and the tokenizer are text GGUF -> HF's)."""
    d = work["root"] / arch
    # without the tokenizer (text GGUF -> HF's, not compared): HunyuanVL's 151k-token
    # vocabulary is most of the time otherwise
    text, proj = convert_forward(d / "back-f32", tmp_path)
    assert_same_gguf(text, d / "text-f32.gguf")
    # Granite 4 Vision: the same tensors in another order: the reference writes them in
    # the HF names' order, and our layerwise projectors are numbered anew (docs)
    assert_same_gguf(proj, d / "mmproj-f32.gguf", any_order=arch == "granite4_vision")


@pytest.mark.parametrize("arch", PATCHES)
def test_text_alone_still_refused(work, arch, tmp_path):
    with pytest.raises(E.UnknownArchitecture):
        gguf_to_hf(work["root"] / arch / "text-f32.gguf", tmp_path / arch)
    assert not (tmp_path / arch).exists()


def _g4v_features(model, px) -> dict[int, np.ndarray]:
    """Each projector's features of a 64 x 64 image (the base image and its one anyres
    tile), by the text layer it feeds."""
    import torch

    with torch.no_grad():
        out = model.model.get_image_features(px, torch.tensor([[64, 64]]))
    return {t: f[0].numpy() for t, f in out.deepstack_features}


def test_granite4_vision_features_and_logits(work):
    """Every projector's features and the text logits equal the original's (gap 0), with
    one deliberate difference: the original's deepstack pair ``[2, 1]`` (vision layer 2
    counted from the start, transformers' ``hidden_states[2]``) is read by mtmd as the
    tower's layer 2 counted from 0 (``hidden_states[3]``, see
    test_convert_granite4_vision.py); GGUF keeps only mtmd's reading, which our folder
    writes as ``-4`` (counted from the end): that block equals the original's with its
    pair set to ``[3, 1]``, and differs from its own."""
    import torch

    orig, _ = _model(work["granite4_vision"])
    back, _ = _model(work["root"] / "granite4_vision" / "back-f32")
    assert sorted(map(list, back.config.deepstack_layer_map)) == [[-4, 1], [-1, 0]]
    g = torch.Generator().manual_seed(0)
    px = torch.randn(1, 2, 3, 64, 64, generator=g)
    got, want = _g4v_features(back, px), _g4v_features(orig, px)
    assert sorted(got) == sorted(want) == [0, 1, 2, 3, 4, 5]
    for t in (0, 2, 3, 4, 5):
        np.testing.assert_array_equal(got[t], want[t], err_msg=str(t))
    assert np.abs(got[1] - want[1]).max() > 1e-2 * np.abs(want[1]).max()
    own = orig.config.deepstack_layer_map
    orig.config.deepstack_layer_map = [(3, 1) if t == 1 else (v, t) for v, t in own]
    try:
        np.testing.assert_array_equal(got[1], _g4v_features(orig, px)[1])
    finally:
        orig.config.deepstack_layer_map = own
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    np.testing.assert_array_equal(lg, lw)


def test_granite4_vision_processor(work):
    """The image processor file: transformers' class for the model, the projector's
    mean / std, the anyres pinpoints (``[h, w]`` again) and the tower's size."""
    from transformers import AutoImageProcessor

    d = work["root"] / "granite4_vision" / "back-f32"
    p = AutoImageProcessor.from_pretrained(d)
    assert type(p).__name__.startswith("LlavaNextImageProcessor")
    np.testing.assert_allclose(p.image_mean, [0.5] * 3)
    np.testing.assert_allclose(p.image_std, [0.5] * 3)
    assert [list(x) for x in p.image_grid_pinpoints] == [[64, 64], [64, 128]]
    assert p.size["shortest_edge"] == 64


def test_granite4_vision_without_its_text_row(work, tmp_path):
    """The text file's ``deepstack_mapping`` row is needed (each block's text layer):
    a named error naming it and the text file, before anything is written."""
    from weightsmith.gguf import edit

    d = work["root"] / "granite4_vision"
    text = edit(d / "text-f32.gguf", remove=["granite.deepstack_mapping"], out=tmp_path / "t.gguf")
    with pytest.raises(E.MissingGGUFMetadata) as ei:
        gguf_to_hf(text, tmp_path / "out", mmproj=d / "mmproj-f32.gguf")
    assert "granite.deepstack_mapping" in str(ei.value) and "t.gguf" in str(ei.value)
    assert not (tmp_path / "out").exists()
