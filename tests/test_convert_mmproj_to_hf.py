"""GGUF -> HF of a vision-language model: the text GGUF and its projector GGUF back
into one ``*ForConditionalGeneration`` folder (``gguf_to_hf(..., mmproj=...)``).

For each tiny random VLM (tests/support/vlm_models.py, float32, built once per module):
original folder -> our GGUF pair (f32, and f16) -> our HF folder, then

* transformers 5 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's: bit for bit from the f32 pair, except where
  the forward conversion itself rounds (Gemma 3's ``norm + 1`` added and taken off
  again in float32: 1 ulp of ``1 + w``; its input projection, which the reference
  stores F16 at every type); from the f16 pair, at most the f16 rounding apart;
* ``get_image_features`` on the same pixels and the text logits on the same ids
  equal the original model's;
* a projector that does not fit the text GGUF is a named error before anything is
  written, and the CLI converts the pair with one call.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.vlm_models import build
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

ARCHS = ["llava"]
ARCHS += ["gemma3"]
ARCHS += ["mistral3"]
ARCHS += ["qwen25vl"]
ARCHS += ["qwen2vl"]
ARCHS += ["qwen3vl"]
ARCHS += ["smolvlm"]
ARCHS += ["lfm2vl"]
ARCHS += ["llama4vl"]
ARCHS += ["gemma4"]
ARCHS += ["qwen3vlmoe"]
ARCHS += ["qwen35vl", "qwen35vlmoe"]
#: the families given pixels as flattened patches, with their image processor checked
QWEN = ("qwen25vl", "qwen2vl", "qwen3vl")
QWEN += ("qwen3vlmoe",)
QWEN += ("qwen35vl", "qwen35vlmoe")
#: Qwen3.5's text (gated DeltaNet): RMS norms stored + 1, A_log as -exp(A_log) (1 ulp)
QWEN35 = ("qwen35vl", "qwen35vlmoe")
TYPES = ["f32", "f16"]
# the tensors whose f32 round trip is not bit-exact, and why (see the module docstring)
PLUS_ONE = ("soft_emb_norm.weight", "layernorm.weight", "norm.weight", "q_norm.weight",
            "k_norm.weight")  # fmt: skip
F16_ALWAYS = ("mm_input_projection_weight",)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the original folder; per type, our GGUF pair and the folder back."""
    root = tmp_path_factory.mktemp("vlm_back")
    out: dict = {"root": root}
    for arch in ARCHS:
        src = build(arch, root / arch / "src", dtype="float32")
        out[arch] = src
        for t in TYPES:
            text, proj = root / arch / f"text-{t}.gguf", root / arch / f"mmproj-{t}.gguf"
            hf_to_gguf(src, text, t, mmproj=proj)
            gguf_to_hf(text, root / arch / f"back-{t}", "f32", mmproj=proj)
    return out


_MODELS: dict = {}


def _model(folder: Path):
    """The model of ``folder`` in float32 (loaded once), with transformers' loading info."""
    import torch
    from transformers import AutoModelForImageTextToText

    if folder not in _MODELS:
        m, info = AutoModelForImageTextToText.from_pretrained(
            folder, dtype=torch.float32, output_loading_info=True
        )
        _MODELS[folder] = (m.eval(), info)
    return _MODELS[folder]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_loads_with_every_tensor(work, arch, t):
    got, want = state_dicts(*_model(work["root"] / arch / f"back-{t}"), _model(work[arch])[0])
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape, k
        ulp = np.float32(2.0**-23) * (1 + np.abs(w))  # (w + 1) - 1 in float32
        f16 = w.astype(np.float16).astype(np.float32)
        if t == "f32" and k.endswith(F16_ALWAYS):
            np.testing.assert_array_equal(g, f16, err_msg=k)
        elif (
            t == "f32"
            and k.endswith(PLUS_ONE)
            and (arch == "gemma3" or (arch in QWEN35 and ".language_model." in k))
        ):
            assert np.all(np.abs(g - w) <= ulp), k
        elif t == "f32" and arch in QWEN35 and k.endswith("A_log"):  # log(-(-exp(x)))
            assert np.all(np.abs(g - w) <= 1e-6 * np.maximum(1, np.abs(w))), k
        elif t == "f32":
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:  # f16 where the type rules store F16, the exact (or + 1) values elsewhere
            fin = np.isfinite(w)  # Gemma 4's unset clip bounds are +-inf: kept as such
            np.testing.assert_array_equal(g[~fin], w[~fin], err_msg=k)
            assert np.all(np.abs(g[fin] - w[fin]) <= np.abs(f16[fin] - w[fin]) + ulp[fin]), k


def _pixels(arch: str, model, seed: int = 0) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    if arch in QWEN:  # flattened patches: 64 x 64 px, 8 px patches, 2 frames
        v = model.config.vision_config
        n = v.in_channels * v.temporal_patch_size * v.patch_size**2
        return {
            "pixel_values": torch.randn(64, n, generator=g),
            "image_grid_thw": torch.tensor([[1, 8, 8]]),
        }
    if arch == "gemma4":  # flattened 8 px patches of a 48 x 48 image, (x, y) positions
        v = model.config.vision_config
        n = 48 // v.patch_size
        xy = torch.stack(torch.meshgrid(torch.arange(n), torch.arange(n), indexing="xy"), -1)
        return {
            "pixel_values": torch.rand(1, n * n, 3 * v.patch_size**2, generator=g),
            "image_position_ids": xy.reshape(1, n * n, 2),
        }
    kw = {"pixel_values": torch.randn(1, 3, 64, 64, generator=g)}
    if arch == "smolvlm":  # [batch, images, C, H, W]
        kw["pixel_values"] = kw["pixel_values"][:, None]
    if arch == "lfm2vl":  # NaFlex: 16 px patches row by row, each channel-last
        x = kw["pixel_values"].reshape(1, 3, 4, 16, 4, 16).permute(0, 2, 4, 3, 5, 1)
        kw = {"pixel_values": x.reshape(1, 16, 16 * 16 * 3),
              "spatial_shapes": torch.tensor([[4, 4]]),
              "pixel_attention_mask": torch.ones(1, 16, dtype=torch.bool)}  # fmt: skip
    if arch in ("llava", "mistral3"):
        kw["image_sizes"] = torch.tensor([[64, 64]])
    return kw


def _features(arch: str, model, kw: dict):
    import torch

    with torch.no_grad():
        f = model.get_image_features(**kw)
        if arch == "llama4vl":  # the projection is applied by forward, not here
            f = model.multi_modal_projector(f.last_hidden_state)
    deep = getattr(f, "deepstack_features", None)  # Qwen3-VL's, compared too
    f = getattr(f, "pooler_output", f)
    if isinstance(f, (list, tuple)):
        f = torch.cat(list(f), 0)
    if deep:
        f = torch.cat([f, *(torch.cat(list(d), 0) if isinstance(d, (list, tuple)) else d
                            for d in deep)], -1)  # fmt: skip
    return f.reshape(-1, f.shape[-1]).numpy()


# measured largest gaps over the outputs' scale (f32 pair): Gemma 3's features 1.7e-4
# (its F16 input projection); Qwen3.5's logits 1.4e-6 (its norms' 1 ulp from + 1 and
# A_log's from -exp; its MoE's 0); all other features and every logit 0
@pytest.mark.parametrize("arch", ARCHS)
def test_same_image_features_and_logits(work, arch):
    import torch

    orig, _ = _model(work[arch])
    back, _ = _model(work["root"] / arch / "back-f32")
    kw = _pixels(arch, orig)
    want, got = _features(arch, orig, kw), _features(arch, back, kw)
    assert got.shape == want.shape
    if arch == "qwen25vl":
        # no GGUF row keeps Qwen2.5-VL's attention window (the tiny model's is 32 px):
        # llama.cpp runs 112 px, the default our folder restores, so the features are
        # the original's with its window set to 112, and differ from its own
        assert np.abs(got - want).max() > 1e-4 * np.abs(want).max()
        assert back.config.vision_config.window_size == 112
        own = orig.model.visual.window_size
        orig.model.visual.window_size = 112
        try:
            want = _features(arch, orig, kw)
        finally:
            orig.model.visual.window_size = own
    tol = 2e-4 if arch == "gemma3" else 0.0
    gap = float(np.abs(got - want).max())
    assert gap <= tol * float(np.abs(want).max()), gap
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    if arch == "llama4vl":  # transformers 5.24's Llama 4 forward fails without pixels
        orig, back = orig.language_model, back.language_model
    with torch.no_grad():
        lw = orig(input_ids=ids).logits.numpy()
        lg = back(input_ids=ids).logits.numpy()
    tol = 1e-5 if arch in ("gemma3", *QWEN35) else 0.0
    gap = float(np.abs(lg - lw).max())
    assert gap <= tol * float(np.abs(lw).max()), gap


@pytest.mark.parametrize("arch", ARCHS)
def test_processor_settings(work, arch):
    """The image processor file carries the projector's mean/std and patch size."""
    ours = json.loads((work["root"] / arch / "back-f32" / "preprocessor_config.json").read_text())
    ref = json.loads((work[arch] / "preprocessor_config.json").read_text())
    for k in ("image_processor_type", "patch_size", "image_mean", "image_std"):
        if k in ref:
            got, want = ours[k], ref[k]
            if k in ("image_mean", "image_std"):
                np.testing.assert_allclose(got, want, rtol=1e-6)
            else:
                assert got == want, k


@pytest.mark.parametrize("arch", [a for a in ARCHS if a in QWEN])
def test_qwen_processor_same_pixels(work, arch):
    """transformers' Qwen2-VL image processor from our folder gives the original's pixels."""
    from transformers import AutoImageProcessor

    img = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    outs = [
        AutoImageProcessor.from_pretrained(d)(images=[img], return_tensors="np", do_resize=False)
        for d in (work[arch], work["root"] / arch / "back-f32")
    ]
    np.testing.assert_array_equal(outs[0]["image_grid_thw"], outs[1]["image_grid_thw"])
    np.testing.assert_allclose(outs[0]["pixel_values"], outs[1]["pixel_values"], atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_converts_forward_again(work, arch, tmp_path):
    """The folder is in the Hub's layout: HF -> GGUF of it gives our GGUF pair again
    (every hyperparameter, tensor name, type and value; Gemma 3's norms within the
    1 ulp of their ``+ 1`` round trip; the tokenizer is text GGUF -> HF's, not compared)."""
    d = work["root"] / arch
    # without the tokenizer: the tiny Gemma vocabulary's tokenizer.json written back is
    # not one llama.cpp's table knows (text GGUF -> HF's, not this module's)
    text, proj = convert_forward(d / "back-f32", tmp_path)
    rounded = arch in ("gemma3", *QWEN35)

    def within_ulp(name: str) -> bool:
        return rounded and name.endswith(("norm.weight", "ssm_a"))

    assert_same_gguf(text, d / "text-f32.gguf", within_ulp)
    assert_same_gguf(proj, d / "mmproj-f32.gguf", within_ulp)


def test_mismatched_projector_is_refused(work, tmp_path):
    from weightsmith.gguf import edit

    d = work["root"] / "llava"
    text, proj = d / "text-f32.gguf", d / "mmproj-f32.gguf"
    cases = [(text, "general.architecture")]  # not a clip file
    for n, (key, value) in enumerate([
        ("clip.projector_type", "gemma3"),  # a known projector, not of this text model
        ("clip.projector_type", "no-such-projector"),
        ("clip.vision.projection_dim", 512),  # another text width
    ]):  # fmt: skip
        cases.append((edit(proj, {key: value}, out=tmp_path / f"bad-{n}.gguf"), key))
    for path, field in cases:
        dst = tmp_path / "out"
        with pytest.raises(E.ProjectorMismatch) as ei:
            gguf_to_hf(text, dst, mmproj=path)
        assert ei.value.field == field, (path, ei.value)
        assert not dst.exists()


@pytest.mark.parametrize("arch", ["llava", "qwen3vlmoe"])
def test_audio_projector_is_refused(work, arch, tmp_path):
    """A family without an audio tower way back (LLaVA's; Qwen3-VL-MoE's, whose projector
    only says it has one: a real Qwen3-Omni pair also carries the `qwen3a` audio rows and
    converts, tests/test_convert_qwen_omni_back.py; Gemma 4's, Qwen3-ASR's and the Whisper
    families' convert: tests/test_convert_mmproj_to_hf_audio.py): a projector that says it
    has one is refused, naming the row, before anything is written."""
    from weightsmith.gguf import edit

    d = work["root"] / arch
    proj = edit(d / "mmproj-f32.gguf", {"clip.has_audio_encoder": True}, out=tmp_path / "a.gguf")
    with pytest.raises(E.ProjectorMismatch) as ei:
        gguf_to_hf(d / "text-f32.gguf", tmp_path / "out", mmproj=proj)
    assert ei.value.field == "clip.has_audio_encoder"
    assert not (tmp_path / "out").exists()


def test_projector_without_a_needed_row_is_refused(work, tmp_path):
    from weightsmith.gguf import edit

    d = work["root"] / "llava"
    for key in ("clip.vision.image_mean", "clip.vision.block_count"):
        proj = edit(d / "mmproj-f32.gguf", remove=[key], out=tmp_path / "p.gguf")
        with pytest.raises(E.MissingGGUFMetadata) as ei:
            gguf_to_hf(d / "text-f32.gguf", tmp_path / "out", mmproj=proj)
        assert key in str(ei.value)
        assert not (tmp_path / "out").exists()


# (Qwen3.5's qwen35 / qwen35moe text converts alone, as Qwen3_5(Moe)ForCausalLM)
@pytest.mark.parametrize("arch", [a for a in ARCHS if a in ("mistral3", *QWEN) and a not in QWEN35])
def test_text_alone_still_refused(work, arch, tmp_path):
    """``qwen2vl``, ``qwen3vl`` and ``mistral3`` text GGUFs have no HF class alone:
    refused without their projector, before any output."""
    with pytest.raises(E.UnknownArchitecture):
        gguf_to_hf(work["root"] / arch / "text-f32.gguf", tmp_path / arch)
    assert not (tmp_path / arch).exists()


def test_cli_converts_the_pair(work, tmp_path, capsys):
    from weightsmith.cli import main

    d = work["root"] / "llava"
    out = tmp_path / "back"
    rc = main(["convert", str(d / "text-f16.gguf"), str(out), "--mmproj", str(d / "mmproj-f16.gguf"),
               "--type", "f32"])  # fmt: skip
    assert rc == 0
    ref = d / "back-f16"
    for name in ("model.safetensors", "config.json", "preprocessor_config.json"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    # --mmproj without a path is an HF -> GGUF default; here it needs the projector
    assert main(["convert", str(d / "text-f16.gguf"), str(tmp_path / "x"), "--mmproj"]) != 0
    assert not (tmp_path / "x").exists()
