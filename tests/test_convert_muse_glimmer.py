"""Muse Glimmer (``MuseGlimmerForConditionalGeneration``) text against llama.cpp.

A tiny seeded model as transformers 5.24 saves it (tests/support/muse_glimmer_models.py:
4 text layers, 3 sliding with RoPE and the last full without, attention output gate,
scaleless QK norm times ``qk_scale_factor``, logit softcap; a 2-layer vision tower):

* the text file (GGUF ``muse-glimmer``) is ``convert_hf_to_gguf.py``'s byte for byte at
  f32, f16, bf16 and q8_0, and ``llama_model_quantize``'s of its f32 at q4_k_m;
* llama.cpp's logits on our f32 equal those on the reference's, and transformers' own
  (12 tokens: past the sliding window of 8);
* GGUF -> HF: the text alone has no HF class (a named error, nothing written).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.muse_glimmer_models import muse_glimmer
from test_convert_archs import _same_file
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize, _run_reference
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = ["f32", "f16", "bf16", "q8_0"]
QUANT = ["q4_k_m"]
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272, 50, 60, 70, 80]


@pytest.fixture(scope="module")
def mg(tmp_path_factory) -> Path:
    """The tiny model; beside it the reference's text files (``ref-T``, q4_k_m from its
    f32) and ours (``ours-T``)."""
    root = tmp_path_factory.mktemp("muse_glimmer")
    src = muse_glimmer(root / "model")
    _run_reference([(str(src), str(root / f"ref-{t}.gguf"), t) for t in TYPES])
    for t in QUANT:
        _llama_quantize(root / "ref-f32.gguf", root / f"ref-{t}.gguf", t)
    for t in TYPES + QUANT:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t)
    return src


@pytest.mark.parametrize("t", TYPES + QUANT)
def test_text_same_as_reference(mg, t):
    _same_file(mg.parent / f"ours-{t}.gguf", mg.parent / f"ref-{t}.gguf")


def test_text_contents(mg):
    """Guard against a vacuous pass: the synthesized Q/K norms, the norms + 1 (not the
    final one), the gate, the pattern and softcap rows."""
    import gguf
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    sd = load_file(mg / "model.safetensors")
    with read(mg.parent / "ours-f32.gguf") as f:
        md = f.metadata
    t = {x.name: np.asarray(x.data) for x in gguf.GGUFReader(mg.parent / "ours-f32.gguf").tensors}
    assert list(md["muse-glimmer.attention.sliding_window_pattern"]) == [True] * 3 + [False]
    assert md["muse-glimmer.final_logit_softcapping"] == pytest.approx(20.0)
    assert md["tokenizer.ggml.eot_token_id"] == 50257
    np.testing.assert_array_equal(t["blk.1.attn_q_norm.weight"], np.float32(3.87))
    np.testing.assert_array_equal(t["blk.1.attn_k_norm.weight"], np.float32(1.0))
    pre = "model.language_model."
    norm = sd[pre + "layers.2.post_feedforward_layernorm.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["blk.2.post_ffw_norm.weight"], norm + np.float32(1))
    final = sd[pre + "norm.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["output_norm.weight"], final)
    gate = sd[pre + "layers.0.self_attn.gate_proj.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["blk.0.attn_gate.weight"], gate)


def test_llama_cpp_logits(mg):
    import torch
    from transformers import MuseGlimmerForConditionalGeneration

    ours = _llama_logits(mg.parent / "ours-f32.gguf", TOKENS)
    ref = _llama_logits(mg.parent / "ref-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    m = MuseGlimmerForConditionalGeneration.from_pretrained(mg, dtype=torch.float32).eval()
    with torch.no_grad():
        hf = m(torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0)


def test_text_alone_has_no_hf_class(mg, tmp_path):
    with pytest.raises(E.UnknownArchitecture, match="muse-glimmer"):
        gguf_to_hf(mg.parent / "ours-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()
