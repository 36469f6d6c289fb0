"""Mistral's original layout -> GGUF, against llama.cpp's own ``--mistral-format``.

The oracle is ``convert_hf_to_gguf.py --mistral-format`` from the pinned llama-cpp-python
sdist (it reads tekken.json through mistral_common, the ``test`` extra), run on a tiny
folder built here (support/mistral_fixtures.py).  Ours reads tekken.json itself.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from support import pyfork
from support.meta_fixtures import sample_texts
from support.mistral_fixtures import make_mistral_checkpoint
from weightsmith import errors as E
from weightsmith.convert import mistral_to_gguf


def _oracle(src, out, outtype):
    from support.llama_sdist import llama_cpp_root

    script = llama_cpp_root() / "convert_hf_to_gguf.py"
    r = pyfork.run(
        [sys.executable, str(script), str(src), "--mistral-format", "--outtype", outtype,
         "--outfile", str(out)], timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_mistral_checkpoint(tmp_path_factory.mktemp("mistral") / "Ministral-Tiny-v0.1")


@pytest.fixture(scope="module")
def converted(folder, tmp_path_factory):
    """outtype -> (ours, oracle)."""
    out = tmp_path_factory.mktemp("gguf")
    cache = {}

    def get(outtype):
        if outtype not in cache:
            ours = out / f"ours-{outtype}.gguf"
            mistral_to_gguf(folder, ours, outtype)
            cache[outtype] = (ours, _oracle(folder, out / f"ref-{outtype}.gguf", outtype))
        return cache[outtype]

    return get


@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_byte_identical_to_llama_cpps_mistral_format(converted, outtype):
    ours, ref = converted(outtype)
    assert ours.read_bytes() == ref.read_bytes()


def test_yarn_and_v3_byte_identical(tmp_path):
    """params.json's yarn block (MistralModel.set_mistral_config's rope rows) and a v3
    tokenizer (its built-in chat template name)."""
    yarn = {"factor": 4.0, "beta": 32.0, "alpha": 1.0, "original_max_position_embeddings": 1024,
            "apply_scale": True}  # fmt: skip
    src = make_mistral_checkpoint(tmp_path / "Yarn-Tiny", params_extra={"yarn": yarn}, version="v3")
    ours = tmp_path / "ours.gguf"
    mistral_to_gguf(src, ours, "f16")
    assert ours.read_bytes() == _oracle(src, tmp_path / "ref.gguf", "f16").read_bytes()


def test_llama_cpp_runs_ours_like_the_oracle(converted, folder):
    import llama_cpp
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    ours, ref = converted("f16")
    tek = Tekkenizer.from_file(folder / "tekken.json")
    prompt = tek.encode("Llamas live in the Andes. 0123", bos=True, eos=False)

    def run(path):
        m = llama_cpp.Llama(model_path=str(path), logits_all=True, verbose=False, n_ctx=64)
        try:
            toks = {t: m.tokenize(t.encode(), add_bos=True, special=False) for t in sample_texts()}
            m.eval(prompt)
            return np.array(m.scores[: len(prompt)], np.float32), toks
        finally:
            m.close()

    (a, toks), (b, _) = run(ours), run(ref)
    assert np.isfinite(a).all() and np.array_equal(a, b)
    # llama.cpp's tekken pre-tokenizer and our merges tokenize as mistral_common does
    for text, ids in toks.items():
        assert ids == tek.encode(text, bos=True, eos=False), text


def test_cli_convert_mistral_dir(folder, converted, tmp_path):
    from support.cli_helpers import run

    p = run("convert", str(folder), str(tmp_path / "cli.gguf"), "--type", "q8_0")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "cli.gguf").read_bytes() == converted("q8_0")[0].read_bytes()


def test_quantized_types_follow_the_hf_route(folder, tmp_path):
    from weightsmith import gguf

    res = mistral_to_gguf(folder, tmp_path / "q4.gguf", "q4_k_m")
    with gguf.read(tmp_path / "q4.gguf") as r:
        assert r.metadata["llama.attention.head_count_kv"] == 2
        assert {t.name: t.ggml_type.name for t in r.tensors} == res.tensor_types
    assert "Q4_K" in set(res.tensor_types.values()) or "Q5_0" in set(res.tensor_types.values())


# --------------------------------------------------------------------------- bad input


def _nothing_written(dst):
    assert not dst.exists()
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(f".{dst.name}")]


def _copy(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / "m")


def test_missing_tekken(folder, tmp_path):
    src = _copy(folder, tmp_path)
    (src / "tekken.json").unlink()
    with pytest.raises(E.TokenizerFilesMissing, match=r"tekken\.json"):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    _nothing_written(tmp_path / "out.gguf")


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"dim": 32}, "tok_embeddings"), ({"n_layers": 3}, r"layers\.2\."),
     ({"n_layers": 1}, "n_layers"), ({"n_kv_heads": 4}, "attention.wk"),
     ({"hidden_dim": 128}, "feed_forward"), ({"vocab_size": 100}, "tok_embeddings")],
)  # fmt: skip
def test_params_that_contradict_the_tensors(folder, tmp_path, extra, field):
    src = _copy(folder, tmp_path)
    params = json.loads((src / "params.json").read_text())
    (src / "params.json").write_text(json.dumps({**params, **extra}))
    with pytest.raises(E.ParamsShapeMismatch, match=field):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    _nothing_written(tmp_path / "out.gguf")


@pytest.mark.parametrize(
    ("extra", "error", "match"),
    [({"moe": {"num_experts": 8}}, E.InvalidModelConfig, "qk_rope_head_dim"),
     ({"llama_4_scaling": {"beta": None}}, E.InvalidModelConfig, r"llama_4_scaling\.beta"),
     ({"quantization": {"qformat_weight": "nf4"}}, E.UnknownArchitecture, "qformat_weight"),
     ({"max_position_embeddings": None}, E.InvalidModelConfig, "context length"),
     ({"head_dim": None}, E.InvalidModelConfig, "head_dim")],
)  # fmt: skip
def test_unsupported_or_incomplete_params(folder, tmp_path, extra, error, match):
    src = _copy(folder, tmp_path)
    params = json.loads((src / "params.json").read_text())
    params = {k: v for k, v in {**params, **extra}.items() if v is not None}
    (src / "params.json").write_text(json.dumps(params))
    with pytest.raises(error, match=match):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    _nothing_written(tmp_path / "out.gguf")


def test_malformed_tekken(folder, tmp_path):
    src = _copy(folder, tmp_path)
    tj = json.loads((src / "tekken.json").read_text())
    tj["special_tokens"] = [t for t in tj["special_tokens"] if t["token_str"] != "<pad>"]
    for i, t in enumerate(tj["special_tokens"]):
        t["rank"] = i
    (src / "tekken.json").write_text(json.dumps(tj))
    with pytest.raises(E.TokenizerInconsistent, match="<pad>"):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    tj = json.loads((folder / "tekken.json").read_text())
    tj["config"]["default_vocab_size"] -= 1
    (src / "tekken.json").write_text(json.dumps(tj))
    with pytest.raises(E.ParamsShapeMismatch, match="default_vocab_size"):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    tj = json.loads((folder / "tekken.json").read_text())
    tj["vocab"][300]["rank"] = 7
    (src / "tekken.json").write_text(json.dumps(tj))
    with pytest.raises(E.TokenizerInconsistent, match=r"vocab\[300\]"):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    _nothing_written(tmp_path / "out.gguf")
    assert os.listdir(tmp_path) == ["m"]
