"""HunYuan dense beyond the whole-file harness (tests/test_convert_archs.py runs
``hunyuan_dense``: bytes, llama-quantize types, llama.cpp logits, GGUF -> HF): the values
that make the file right, and the RoPE layouts the reference refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.hf_models import build
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
