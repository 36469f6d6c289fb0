"""MiniMax-Text-01 (``MiniMaxText01ForCausalLM``, GGUF ``minimax-01``), issue 15 section 4.

The tiny model (tests/support/hf_models.py ``minimax01``) is transformers 5.24's
``MiniMaxForCausalLM`` written in the Hub's layout (the decay tables dropped, the Hub's
config fields added, sharded): seven lightning-attention layers and one softmax layer,
the pattern llama.cpp's graph assumes (the reference writes no layer kinds).  Own module,
not the text harness: GGUF -> HF is refused (below), which the harness's round trip
cannot express.

* HF -> GGUF: byte-identical to the reference at f32/f16/bf16/q8_0; q4_k_m identical to
  the reference's f32 + ``llama_model_quantize``;
* llama.cpp: logits on ours = on the reference's file, and near transformers';
* configs the reference refuses are refused by name before any output.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from support.hf_models import build
from test_convert_archs import PROMPTS, REF_TYPES, _hf_logits, _same_file
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize, _run_reference
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = [*REF_TYPES, "q4_k_m"]


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    root = tmp_path_factory.mktemp("minimax01")
    src = build("minimax01", root / "model")
    _run_reference([(str(src), str(root / f"ref-{t}.gguf"), t) for t in REF_TYPES])
    _llama_quantize(root / "ref-f32.gguf", root / "ref-q4_k_m.gguf", "q4_k_m")
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_same_as_reference(mm, t):
    _same_file(mm / f"ours-{t}.gguf", mm / f"ref-{t}.gguf")


def test_llama_cpp_logits(mm):
    tokens = PROMPTS["bpe"]
    ours = _llama_logits(mm / "ours-f32.gguf", tokens)
    np.testing.assert_array_equal(ours, _llama_logits(mm / "ref-f32.gguf", tokens))
    hf = _hf_logits(mm / "model", tokens)
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0)


def test_no_way_back(mm, tmp_path):
    """GGUF -> HF: the file names no layer kinds, and transformers' ``minimax`` saves
    decay tables the Hub's layout has not; not done, refused by name."""
    with pytest.raises(E.UnknownArchitecture, match="minimax-01"):
        gguf_to_hf(mm / "ours-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def _edited(mm, tmp_path, edit) -> object:
    src = tmp_path / "m"
    shutil.copytree(mm / "model", src)
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg)
    (src / "config.json").write_text(json.dumps(cfg))
    return src


@pytest.mark.parametrize(
    "edit, field",
    [
        # transformers' own spelling of the norms' alphas (the reference reads the Hub's)
        (lambda c: c.pop("layernorm_mlp_alpha"), "layernorm_mlp_alpha"),
        (lambda c: c.pop("rotary_dim"), "rotary_dim"),
        # the reference asserts one alpha and betas of 1
        (lambda c: c.update(layernorm_mlp_alpha=2.0), "layernorm_\\*_alpha"),
        (lambda c: c.update(layernorm_mlp_beta=0.5), "layernorm_\\*_beta"),
    ],
)
def test_configs_the_reference_refuses(mm, tmp_path, edit, field):
    src = _edited(mm, tmp_path, edit)
    out = tmp_path / "out.gguf"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


def test_decay_tables_are_unmapped(mm, tmp_path):
    """transformers' own save keeps the lightning layers' decay tables; the reference
    cannot map them (``Can not map tensor ... diagonal_decay``) and ours refuses them."""
    from safetensors.numpy import load_file, save_file

    src = _edited(mm, tmp_path, lambda c: None)
    index = json.loads((src / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["model.norm.weight"]
    sd = load_file(src / shard)
    sd["model.layers.0.self_attn.slope_rate"] = np.ones((4, 1, 1), np.float32)
    save_file(sd, src / shard, metadata={"format": "pt"})
    index["weight_map"]["model.layers.0.self_attn.slope_rate"] = shard
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    out = tmp_path / "out.gguf"
    with pytest.raises(E.UnmappedTensor, match="slope_rate"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()
