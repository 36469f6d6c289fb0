"""dots.ocr (``DotsOCRForCausalLM``) against llama.cpp's converter and runtime: the
``qwen2`` text GGUF and the ``dots_ocr`` projector.

dots.ocr is remote code (no transformers 5.24 class), so the tiny checkpoint is built by
hand in the Hub's layout (tests/support/dotsocr_models.py): its text half is transformers'
own ``Qwen2ForCausalLM`` (the remote class subclasses it), its vision tower seeded tensors
under the Hub's names.  The oracles:

* text: byte-identical to ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and at
  q4_k_m / iq4_xs to its f32 through ``llama_model_quantize``; llama.cpp's logits on ours
  are those on the reference's file and transformers' ``Qwen2ForCausalLM`` (the same
  folder: the remote class adds only the tower); GGUF -> HF of the text gives a
  ``Qwen2ForCausalLM`` with the original's logits; the pair (text + projector) is refused
  by name (no class holds the whole model);
* projector: byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32, f16, bf16 and
  q8_0; mtmd (llama-cpp-python 0.3.36) loads ours with our text file and encodes images
  as it does with the reference's pair, and as transformers' Dots3 Note vision model with
  its per-head Q/K RMS norms replaced by identities -- the one structural difference
  between that tower and dots.ocr's remote ``DotsVisionTransformer`` (same patch
  embedding + RMS norm, fused QKV with axial 2-D rotate-half RoPE over [h, w, h, w],
  SwiGLU ``fc1`` / ``fc3`` / ``fc2``, final RMS norm, LayerNorm + GELU merger).  The swap
  is shown to matter (with the norms the features differ).  This stands in for a numeric
  oracle of dots.ocr's own code, which nothing here can run.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from support import pyfork
from support.dotsocr_models import PREPROCESSOR, VISION, dots_ocr
from support.gguf_pair import pair_jobs
from support.llama_sdist import llama_cpp_root
from test_convert_archs import _llama_logits_f32_kv
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import _DRIVER, TYPES, _mtmd_embeddings, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANTS = ["q4_k_m", "iq4_xs"]
TOKENS = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 50256, 11, 290, 0]


@pytest.fixture(scope="module")
def dots(tmp_path_factory):
    """The model folder; the reference's text files (each type, the quantized ones through
    llama_model_quantize of its f32) and projectors; ours."""
    root = tmp_path_factory.mktemp("dotsocr")
    src = dots_ocr(root / "hub")
    jobs = pair_jobs(src, root, TYPES)
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])
    assert r.returncode == 0, r.stderr[-3000:]
    for q in QUANTS:
        _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{q}.gguf", q)
        hf_to_gguf(src, root / f"ours-text-{q}.gguf", q)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(dots, t):
    _same(dots / f"ours-mmproj-{t}.gguf", dots / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", [*TYPES, *QUANTS])
def test_text_same_as_reference(dots, t):
    _same(dots / f"ours-text-{t}.gguf", dots / f"ref-text-{t}.gguf")


def test_contents(dots):
    """Guard against a vacuous pass: the text file is qwen2 without a vision tensor, the
    projector has the whole tower (SwiGLU split as gate / up / down, fused QKV, the
    patch norm and the final norm), quantized at q8_0 but the patch kernel and norms."""
    from weightsmith.gguf import read

    with read(dots / "ours-text-q8_0.gguf") as f:
        assert f.metadata["general.architecture"] == "qwen2"
        names = [t.name for t in f.tensors]
    assert len(names) == 27 and "blk.1.attn_q.bias" in names and "output.weight" in names
    assert not any(n.startswith(("v.", "mm.")) for n in names)
    with read(dots / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, tuple(t.shape)) for t in f.tensors}
    assert md["clip.projector_type"] == "dots_ocr"
    assert md["clip.vision.image_size"] == 0 and md["clip.vision.projector.scale_factor"] == 2
    assert (md["clip.vision.image_min_pixels"], md["clip.vision.image_max_pixels"]) == (
        PREPROCESSOR["min_pixels"], PREPROCESSOR["max_pixels"])  # fmt: skip
    assert len(types) == 7 * VISION["num_hidden_layers"] + 10
    assert types["v.patch_embd.weight"] == ("F32", (64, 3, 8, 8))
    assert types["v.blk.2.attn_qkv.weight"] == ("Q8_0", (192, 64))
    assert types["v.blk.0.ffn_gate.weight"] == types["v.blk.0.ffn_up.weight"] == ("Q8_0", (128, 64))
    assert types["v.blk.0.ffn_down.weight"] == ("Q8_0", (64, 128))
    assert types["mm.0.weight"] == ("Q8_0", (256, 256)) and types["mm.2.weight"][1] == (64, 256)
    for n in ("v.pre_ln.weight", "mm.post_norm.weight", "mm.input_norm.bias"):
        assert types[n] == ("F32", (64,)), n


def _qwen2(folder):
    """transformers' Qwen2ForCausalLM on ``folder`` (float32): the Hub folder's text half
    (the remote class adds only ``vision_tower``, whose tensors it leaves unread)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config.from_pretrained(folder)
    return Qwen2ForCausalLM.from_pretrained(folder, config=cfg, dtype=torch.float32).eval()


def _hf_logits(model) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([TOKENS])).logits[0].numpy()


def test_text_in_llama_cpp(dots):
    """llama.cpp's logits on our text file are those on the reference's, and
    transformers' within 1e-4 of their scale."""
    ours = _llama_logits_f32_kv(dots / "ours-text-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(dots / "ref-text-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    hf = _hf_logits(_qwen2(dots / "hub"))
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 1e-4 * max(scale, 1.0), np.abs(ours - hf).max()


def test_text_back_to_hf(dots, tmp_path):
    """GGUF -> HF of the text alone: a Qwen2ForCausalLM folder transformers loads, with
    the original's logits (the f32 file holds the bfloat16 weights exactly)."""
    gguf_to_hf(dots / "ours-text-f32.gguf", tmp_path / "back", "f32")
    cfg = json.loads((tmp_path / "back" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"]
    np.testing.assert_array_equal(_hf_logits(_qwen2(tmp_path / "back")),
                                  _hf_logits(_qwen2(dots / "hub")))  # fmt: skip


def test_pair_has_no_way_back(dots, tmp_path):
    """GGUF -> HF of the pair: no transformers class holds dots.ocr; refused by name
    before anything is written."""
    with pytest.raises(E.ProjectorMismatch, match="dots_ocr"):
        gguf_to_hf(dots / "ours-text-f32.gguf", tmp_path / "back",
                   mmproj=dots / "ours-mmproj-f32.gguf")  # fmt: skip
    assert not (tmp_path / "back").exists()


def _oracle(folder, qk_norms: bool = False):
    """transformers' Dots3NoteVisionModel (float32, dense blocks) holding the tiny
    dots.ocr tower's weights, its Q/K norms replaced by identities unless ``qk_norms``."""
    import torch
    from safetensors.torch import load_file
    from transformers.models.dots3_note.configuration_dots3_note import Dots3NoteVisionConfig
    from transformers.models.dots3_note.modeling_dots3_note import Dots3NoteVisionModel

    n, e = VISION["num_hidden_layers"], VISION["embed_dim"]
    cfg = Dots3NoteVisionConfig(
        embed_dim=e, intermediate_size=VISION["intermediate_size"], num_hidden_layers=n,
        num_heads=VISION["num_attention_heads"], patch_size=VISION["patch_size"],
        spatial_merge_size=VISION["spatial_merge_size"], rms_norm_eps=VISION["rms_norm_eps"],
        use_bias=False, pyramid_num_routed=[-1] * n, adapter_in_dim=e,
        adapter_out_dim=VISION["hidden_size"], adapter_merge_size=VISION["spatial_merge_size"],
        rope_parameters={"rope_type": "axial", "rope_theta": 10000.0},
    )  # fmt: skip
    cfg._attn_implementation = "eager"
    model = Dots3NoteVisionModel(cfg).to(torch.float32).eval()
    renames = (("patch_embed.patchifier.", "patch_embed."), ("post_trunk_norm.", "norm."),
               (".mlp.fc1.", ".mlp.gate_proj."), (".mlp.fc3.", ".mlp.up_proj."),
               (".mlp.fc2.", ".mlp.down_proj."))  # fmt: skip
    state = {}
    for k, v in load_file(folder / "model.safetensors").items():
        if k.startswith("vision_tower."):
            k = k.removeprefix("vision_tower.")
            for a, b in renames:
                k = k.replace(a, b)
            state[k] = v.float()
    if qk_norms:  # the tiny checkpoint has none: transformers' initial (all-ones) ones
        model.load_state_dict(state, strict=False)
    else:
        for block in model.blocks:
            block.attn.q_norm = torch.nn.Identity()
            block.attn.k_norm = torch.nn.Identity()
        model.load_state_dict(state, strict=True)
    return model


def _oracle_features(model, img: np.ndarray) -> np.ndarray:
    """The oracle's features of ``img`` (HWC uint8, a multiple of 16 px inside the pixel
    bounds: no resize), patched as dots.ocr's Qwen2-VL image processor does (one frame,
    channel-major patches, 2x2 merge windows in row order)."""
    import torch

    p, mg = VISION["patch_size"], VISION["spatial_merge_size"]
    mean, std = (np.float32(PREPROCESSOR[k]) for k in ("image_mean", "image_std"))
    x = (img.astype(np.float32) / np.float32(255.0) - mean) / std
    gh, gw = img.shape[0] // p, img.shape[1] // p
    pt = x.transpose(2, 0, 1).reshape(3, gh // mg, mg, p, gw // mg, mg, p)
    pt = pt.transpose(1, 4, 2, 5, 0, 3, 6).reshape(gh * gw, 3 * p * p)
    with torch.no_grad():
        out = model(torch.from_numpy(np.ascontiguousarray(pt)), torch.tensor([[1, gh, gw]]))
    return out.pooler_output.numpy()


@pytest.fixture(scope="module")
def oracle(dots):
    return _oracle(dots / "hub")


def _img(h: int, w: int) -> np.ndarray:
    return np.random.default_rng(11).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("hw", [(64, 64), (32, 64), (64, 32)])
def test_llama_cpp_encodes_image(dots, oracle, hw):
    """mtmd's image embeddings through our pair vs the oracle's features, within 1e-3 of
    their scale."""
    img = _img(*hw)
    got = _mtmd_embeddings(dots / "ours-text-f32.gguf", dots / "ours-mmproj-f32.gguf", img)
    want = _oracle_features(oracle, img)
    assert want.shape == (hw[0] // 16 * (hw[1] // 16), 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_reference_pair_encodes_the_same(dots, oracle):
    """mtmd encodes with our pair exactly as with the reference's, and the Q/K norms the
    oracle drops matter: with them its features are far from mtmd's."""
    img = _img(32, 64)
    ours = _mtmd_embeddings(dots / "ours-text-f32.gguf", dots / "ours-mmproj-f32.gguf", img)
    ref = _mtmd_embeddings(dots / "ref-text-f32.gguf", dots / "ref-mmproj-f32.gguf", img)
    np.testing.assert_array_equal(ours, ref)
    with_norms = _oracle_features(_oracle(dots / "hub", qk_norms=True), img)
    scale = float(np.abs(with_norms).max())
    assert np.abs(ours - with_norms).max() > 1e-2 * scale


def test_cli_writes_both(dots, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""
    from weightsmith.cli._main import main

    dst = tmp_path / "d.gguf"
    assert main(["convert", str(dots / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-d.gguf").read_bytes() == (dots / "ref-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (dots / "ref-text-q8_0.gguf").read_bytes()


def _variant(dots, tmp_path, file: str, change) -> object:
    """The model folder with ``file`` (a JSON file) changed; the rest linked, not copied."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (dots / "hub").iterdir():
        if f.name != file:
            (src / f.name).symlink_to(f)
    data = json.loads((dots / "hub" / file).read_text())
    change(data)
    (src / file).write_text(json.dumps(data))
    return src


def test_short_tower_refused(dots, tmp_path):
    """A tower of 2 blocks: the reference maps the merger's ``mlp.2`` through the block
    map (numbered below the block count) and stops at ``Can not map tensor
    'vision_tower.merger.mlp.2.bias'`` (measured with this model); ours refuses it by
    name before either file is written."""
    src = _variant(dots, tmp_path, "config.json",
                   lambda c: c["vision_config"].update(num_hidden_layers=2))  # fmt: skip
    with pytest.raises(E.InvalidModelConfig, match=r"vision_config\.num_hidden_layers"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "p.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "p.gguf").exists()


def test_pixel_bounds_needed(dots, tmp_path):
    """The reference reads the image processor's ``min_pixels`` without a default: a
    folder without it is refused by name before either file is written."""
    src = _variant(dots, tmp_path, "preprocessor_config.json", lambda p: p.pop("min_pixels"))
    with pytest.raises(E.InvalidModelConfig, match="min_pixels"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "p.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "p.gguf").exists()
