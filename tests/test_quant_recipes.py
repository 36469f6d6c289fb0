"""llama-quantize file-type recipes against llama.cpp's own choices.

expected.json was produced by llama.cpp's llama_model_quantize (see
tests/data/recipes/make_expected.py); a few file types are also re-run live
here so the oracle itself is exercised in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.recipe_models import MODELS, llama_quantize, write_model
from weightsmith.errors import NoFallbackType, UnknownFileType
from weightsmith.quant import recipes

EXPECTED = json.loads((Path(__file__).parent / "data" / "recipes" / "expected.json").read_text())


def _plan(model: str, ftype: str) -> dict[str, str]:
    spec = MODELS[model]
    return recipes.plan(
        spec.tensors(), ftype, arch=spec.arch, n_head=spec.n_head, n_head_kv=spec.n_head_kv
    )


@pytest.mark.parametrize(
    ("model", "ftype"), [(m, f) for m, fts in sorted(EXPECTED.items()) for f in sorted(fts)]
)
def test_plan_matches_llama_quantize(model, ftype):
    expected = EXPECTED[model][ftype]
    got = _plan(model, ftype)
    assert set(got) == set(expected)
    diff = {k: (got[k], expected[k]) for k in expected if got[k] != expected[k]}
    assert not diff, f"{len(diff)} tensors differ (ours, llama.cpp): {dict(list(diff.items())[:8])}"


def test_expected_table_covers_the_issue_file_types():
    wanted = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
              "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0",
              "TQ2_0", "F16", "BF16"}  # fmt: skip
    for model in ("llama32", "qwen2_28", "odd_tied"):
        assert wanted <= set(EXPECTED[model])


@pytest.fixture(scope="module")
def llama32_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("recipes") / "llama32.gguf"
    write_model(MODELS["llama32"], path)
    return path


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q6_K", "IQ4_XS", "Q2_K", "Q3_K_M"])
def test_plan_matches_live_llama_quantize(llama32_gguf, tmp_path, ftype):
    live = llama_quantize(llama32_gguf, tmp_path / "out.gguf", ftype)
    assert _plan("llama32", ftype) == live


@pytest.mark.parametrize("ftype", ["Q4_0", "Q5_0", "IQ4_XS", "IQ4_NL", "Q4_K_M"])
def test_imatrix_rules_match_live_llama_quantize(llama32_gguf, tmp_path, ftype):
    spec = MODELS["llama32"]
    live = llama_quantize(llama32_gguf, tmp_path / "out.gguf", ftype, imatrix_for=spec)
    ours = recipes.plan(
        spec.tensors(), ftype, n_head=spec.n_head, n_head_kv=spec.n_head_kv, has_imatrix=True
    )
    assert ours == live
    if ftype == "Q4_0":  # the imatrix-only guard on early ffn_down layers
        assert live["blk.0.ffn_down.weight"] == "Q4_1"


def test_rules_visible_in_the_plan():
    p = _plan("llama32", "Q4_K_M")
    assert p["output.weight"] == "Q6_K"
    assert p["blk.0.attn_norm.weight"] == "F32"
    # use_more_bits: first/last eighth and every third layer between get Q6_K.
    assert [p[f"blk.{i}.ffn_down.weight"] for i in (0, 4, 6, 7, 31)] == [
        "Q6_K", "Q4_K", "Q6_K", "Q4_K", "Q6_K"
    ]  # fmt: skip
    tied = _plan("odd_tied", "Q4_K_M")
    assert "output.weight" not in tied
    assert tied["token_embd.weight"] == "Q8_0"  # tied, row 288 not divisible by 256
    assert tied["blk.0.ffn_down.weight"] == "F16"  # row 300: not even divisible by 32


def test_file_type_lookup():
    assert recipes.file_type("q4_k_m").id == 15
    assert recipes.file_type(15).name == "Q4_K_M"
    assert recipes.file_type("all_f32").default == "F32"
    with pytest.raises(UnknownFileType, match="Q4_K_M"):
        recipes.file_type("q4_k_x")
    with pytest.raises(UnknownFileType):
        recipes.file_type(99)


def test_no_fallback_is_a_named_error():
    with pytest.raises(NoFallbackType, match="Q1_0"):
        recipes.plan([("blk.0.attn_q.weight", (64, 96))], "Q1_0")
