"""HunYuan dense beyond the whole-file harness (tests/test_convert_archs.py runs
``hunyuan_dense``: bytes, llama-quantize types, llama.cpp logits, GGUF -> HF): the values
that make the file right, and the RoPE layouts the reference refuses.  And the text GGUF
of HunyuanVL (``hunyuan_vl``): byte-identical to the reference at f32 / f16 / bf16 /
q8_0, its XD-RoPE rows, llama.cpp's logits on ours equal those on the reference's and
transformers' on a text prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.hf_models import build
from test_convert_archs import _same_file
from test_convert_hf_to_gguf import _llama_logits, _run_reference
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build("hunyuan_dense", tmp_path_factory.mktemp("hunyuan") / "m")


def test_metadata_is_real(model, tmp_path):
    """The stretched base (theta * alpha ** (d / (d - 2)), as transformers' ntk_alpha),
    the 256k context of ``dynamic``, EOS from ``eod_token_id``, EOT from the EOS list."""
    from weightsmith.gguf import read

    hf_to_gguf(model, tmp_path / "h.gguf", "q8_0")
    with read(tmp_path / "h.gguf") as f:
        md = f.metadata
        assert md["hunyuan-dense.rope.freq_base"] == np.float32(10000.0 * 1000.0 ** (16 / 14))
        assert md["hunyuan-dense.context_length"] == 262144
        assert md["hunyuan-dense.rope.scaling.type"] == "none"
        assert md["hunyuan-dense.rope.scaling.original_context_length"] == 262144
        assert md["tokenizer.ggml.eos_token_id"] == 151645  # eod, not config's 151643
        assert md["tokenizer.ggml.eot_token_id"] == 151645
        assert f.tensor("blk.1.attn_q_norm.weight").shape == (16,)


@pytest.mark.parametrize("change", [{"rope_theta": 5000.0}, {"max_position_embeddings": 4096}])
def test_dynamic_rope_outside_the_known_layout_refused(model, tmp_path, change):
    """The reference asserts theta 10000 and a 32k / 256k config context for ``dynamic``;
    ours names the fields, before any output."""
    import shutil

    bad = shutil.copytree(model, tmp_path / "bad")
    cfg = json.loads((bad / "config.json").read_text())
    if "rope_theta" in change:
        cfg["rope_parameters"]["rope_theta"] = change["rope_theta"]
    else:
        cfg.update(change)
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match="dynamic RoPE"):
        hf_to_gguf(bad, tmp_path / "bad.gguf", "f16")
    assert not (tmp_path / "bad.gguf").exists()


VL_TYPES = ["f32", "f16", "bf16", "q8_0"]
PROMPT = [9707, 11, 1879, 0, 358, 1079, 264, 2272]


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    root = tmp_path_factory.mktemp("hunyuan_vl")
    src = build("hunyuan_vl", root / "m")
    _run_reference([(str(src), str(root / f"ref-{t}.gguf"), t) for t in VL_TYPES])
    for t in VL_TYPES:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t)
    return root


@pytest.mark.parametrize("t", VL_TYPES)
def test_vl_text_same_as_reference(vl, t):
    _same_file(vl / f"ours-{t}.gguf", vl / f"ref-{t}.gguf")


def test_vl_text_metadata_is_real(vl):
    """XD-RoPE: theta itself as the base, alpha and the sections in their rows, the
    config context; the vision tower left to the projector."""
    from weightsmith.gguf import read

    with read(vl / "ours-f16.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "hunyuan_vl"
        assert md["hunyuan_vl.rope.freq_base"] == 10000.0
        assert md["hunyuan_vl.rope.scaling.alpha"] == 1000.0
        assert md["hunyuan_vl.rope.dimension_sections"] == [2, 2, 2, 2]
        assert md["hunyuan_vl.context_length"] == 256
        assert md["hunyuan_vl.rope.scaling.original_context_length"] == 256
        names = [t.name for t in f.tensors]
        assert len(names) == 3 + 2 * 11 and "output.weight" in names
        assert not any("vision" in n or n.startswith(("v.", "mm.")) for n in names)


def test_vl_text_logits_in_llama_cpp(vl):
    """llama.cpp runs ours as the reference's file, bit for bit; on a text prompt (every
    XD-RoPE section at the same position) the logits are transformers' within 1e-3 of
    their scale."""
    import torch
    from transformers import AutoModelForImageTextToText

    got = _llama_logits(vl / "ours-f32.gguf", PROMPT)
    np.testing.assert_array_equal(got, _llama_logits(vl / "ref-f32.gguf", PROMPT))
    model = AutoModelForImageTextToText.from_pretrained(vl / "m", dtype=torch.float32).eval()
    with torch.no_grad():
        want = model(input_ids=torch.tensor([PROMPT])).logits[0].numpy()
    gap = np.abs(got - want).max()
    assert gap <= 1e-3 * np.abs(want).max(), (gap, np.abs(want).max())
