"""Remote-code projectors that are a transformers 5.24 family under other names, against
llama.cpp's converter and runtime (tiny checkpoints: tests/support/remote_layouts.py).

GLM-5.2-Vision (``Glm5vForConditionalGeneration``): Kimi-K2.5's tower and projector
with the projector's layers renamed.  Checked: the projector GGUF (``kimik25``) is
``convert_hf_to_gguf.py --mmproj``'s byte for byte at f32, f16, bf16 and q8_0, and the
text beside it at f16; mtmd (llama-cpp-python 0.3.36) loads ours with our text model
and encodes an image into transformers' ``Kimi_K25ForConditionalGeneration`` features
of the same weights.

Sarashina2-VL (``Sarashina2VisionForCausalLM``): Qwen2-VL's tower and merger under
``visual.``, a Llama text under ``llm.``.  Checked: the projector GGUF
(``qwen2vl_merger``) at f32, f16, bf16 and q8_0 and the text GGUF (``llama``) at f16
and f32 are the reference's byte for byte; llama-cpp-python's logits on our text equal
those on the reference's and transformers' Llama's; mtmd encodes an image through ours
into transformers' Qwen2-VL features of the same tower.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from support.remote_layouts import glm5v, sarashina2_llama, sarashina2vl
from support.vlm_models import kimik25, qwen2vl
from test_convert_archs import _hf_logits
from test_convert_hf_to_gguf import _llama_logits
from test_convert_kimik25 import TOL, _hf_image_features
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same, convert_both
from test_convert_mmproj import _hf_image_features as _qwen_features
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def g5v(tmp_path_factory):
    """``kimi`` (the Kimi-K2.5 folder transformers loads), ``glm5v`` (the same weights as
    GLM-5.2-Vision's), the reference's and our files (``ref-*`` / ``ours-*``)."""
    root = tmp_path_factory.mktemp("glm5v")
    src = glm5v(kimik25(root / "kimi"), root / "glm5v")
    convert_both(src, root)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_glm5v_same_as_reference(g5v, t):
    _same(g5v / f"ours-mmproj-{t}.gguf", g5v / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(g5v / "ours-text-f16.gguf", g5v / "ref-text-f16.gguf")


def test_glm5v_contents(g5v):
    """Guard against a vacuous pass: the renamed layers are the projector's ``mm.1`` /
    ``mm.2`` and the file is Kimi-K2.5's projector type; the source really has GLM's
    names."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    with safe_open(g5v / "glm5v" / "model.safetensors", "np") as f:
        names = set(f.keys())
    assert "mm_projector.linear_1.weight" in names
    assert not any(n.startswith("mm_projector.proj.") for n in names)
    with read(g5v / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "kimik25"
    assert types["mm.1.weight"] == ("Q8_0", (256, 256)) and types["mm.2.weight"][0] == "Q8_0"
    assert types["mm.input_norm.weight"] == ("F32", (64,))


def test_glm5v_llama_cpp_encodes_image(g5v):
    """mtmd's embeddings of a 64 x 32 image are transformers' Kimi-K2.5 features of the
    same weights (1e-3 of their scale)."""
    img = np.random.default_rng(7).integers(0, 256, (32, 64, 3), dtype=np.uint8)
    got = _mtmd_embeddings(g5v / "ours-text-f32.gguf", g5v / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(g5v / "kimi", img)
    assert want.shape == (2 * 4, 256) and got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_glm5v_text_class_needed(g5v, tmp_path):
    """Without ``text_config.architectures`` the text class is the top level's,
    ``Glm5vForConditionalGeneration``, which neither converter has a text conversion for
    (the reference: "not supported", its ``--mmproj`` run then writes the projector
    alone); ours converts the pair or nothing: a named error, nothing written."""
    src = tmp_path / "g"
    shutil.copytree(g5v / "glm5v", src, ignore=shutil.ignore_patterns("*.safetensors"))
    (src / "model.safetensors").symlink_to(g5v / "glm5v" / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    del cfg["text_config"]["architectures"]
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="Glm5vForConditionalGeneration"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


# --------------------------------------------------------------------------- Sarashina2-VL


@pytest.fixture(scope="module")
def s2v(tmp_path_factory):
    """``qwen2vl`` (the tower's model, transformers loads it), ``llama`` (the text's),
    ``sarashina`` (both in Sarashina2-VL's layout), the reference's and our files."""
    root = tmp_path_factory.mktemp("sarashina2vl")
    src = sarashina2vl(qwen2vl(root / "qwen2vl"), sarashina2_llama(root / "llama"),
                       root / "sarashina")  # fmt: skip
    convert_both(src, root, text_types=("f16", "f32"))
    return root


@pytest.mark.parametrize("t", TYPES)
def test_sarashina2vl_same_as_reference(s2v, t):
    _same(s2v / f"ours-mmproj-{t}.gguf", s2v / f"ref-mmproj-{t}.gguf")
    if t in ("f16", "f32"):
        _same(s2v / f"ours-text-{t}.gguf", s2v / f"ref-text-{t}.gguf")


def test_sarashina2vl_contents(s2v):
    """Guard against a vacuous pass: the source has the ``llm.`` wrapper, the top-level
    ``norm.`` and a text_config naming plain Llama; the text file is the whole Llama
    (no ``norm.``), the projector Qwen2-VL's merger."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    with safe_open(s2v / "sarashina" / "model.safetensors", "np") as f:
        names = set(f.keys())
    assert {"llm.model.embed_tokens.weight", "llm.lm_head.weight", "norm.weight"} <= names
    cfg = json.loads((s2v / "sarashina" / "config.json").read_text())
    assert cfg["text_config"]["architectures"] == ["LlamaForCausalLM"]
    with read(s2v / "ours-text-f16.gguf") as f:
        assert f.metadata["general.architecture"] == "llama"
        text = {t.name for t in f.tensors}
    n_llm = sum(1 for n in names if n.startswith("llm."))
    assert len(text) == n_llm and {"output.weight", "output_norm.weight"} <= text
    with read(s2v / "ours-mmproj-q8_0.gguf") as f:
        assert f.metadata["clip.projector_type"] == "qwen2vl_merger"
        types = {t.name: t.ggml_type.name for t in f.tensors}
    assert types["mm.0.weight"] == "Q8_0" and types["mm.2.weight"] == "Q8_0"
    assert not any("norm" in n and n.startswith("mm.") for n in types)


def test_sarashina2vl_llama_cpp_logits(s2v):
    """llama.cpp's logits on our text equal those on the reference's, and transformers'
    Llama's (the model the text came from) to 2e-3 of their scale."""
    tokens = [1, 5, 9, 17, 33, 65, 129, 257, 400]
    ours = _llama_logits(s2v / "ours-text-f32.gguf", tokens)
    np.testing.assert_array_equal(ours, _llama_logits(s2v / "ref-text-f32.gguf", tokens))
    hf = _hf_logits(s2v / "llama", tokens)
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0), np.abs(ours - hf).max()


def test_sarashina2vl_llama_cpp_encodes_image(s2v):
    """mtmd's embeddings of a 64 x 64 image are transformers' Qwen2-VL merger output of
    the same tower (1e-3 of their scale).  The remote model's LayerNorm over them
    (``norm.``) is in neither converter's file: measured, the normalized features are
    far from these (a real gap of the reference's class, pinned)."""
    import torch

    img = np.random.default_rng(7).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    got = _mtmd_embeddings(s2v / "ours-text-f32.gguf", s2v / "ours-mmproj-f32.gguf", img)
    want = _qwen_features(s2v / "qwen2vl", img)
    assert want.shape == (16, 64) and got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()
    from safetensors.torch import load_file

    sd = load_file(s2v / "sarashina" / "model.safetensors")
    normed = torch.nn.functional.layer_norm(
        torch.from_numpy(want), (64,), sd["norm.weight"].float(), sd["norm.bias"].float()
    ).numpy()
    assert np.abs(got - normed).max() > 0.1 * max(float(np.abs(normed).max()), 1.0)
