"""Step 3.5 text (the Hub's ``Step3p5ForCausalLM``, GGUF ``step35``: the text of Step3-VL
/ Step-3.7) against llama.cpp's converter and runtime.

transformers 5.24 has no text-only Step 3.5 class; its ``Step3p7ForConditionalGeneration``
builds the text model, saved in the Hub's layout with the Hub's flat config.json written
from transformers' config (tests/support/step35_models.py).  The pinned reference reads
the Hub's field names through ``AutoConfig``; on transformers 5.24 (which maps model type
``step3p5`` to ``Step3p7TextConfig`` and renames ``num_attention_groups``) it stops with a
``KeyError`` (pinned here), so it runs on transformers 4.47.1, which does not know the
model type and leaves config.json as written.  Checked:

* byte-identical to ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and at q4_k_m
  and q2_k to its f32 through ``llama_model_quantize``;
* llama.cpp's logits on ours are those on the reference's file, and transformers' within
  2e-3 of scale (measured 6.2e-4 at scale 3.9); the sliding window and the SwiGLU clamps
  change transformers' logits by far more (they are exercised);
* GGUF -> HF refused by name (no transformers class loads the text alone);
* with an MTP block appended after the trunk (as the Hub's checkpoints carry it): the
  reference's bytes at f32, q8_0 and q4_k_m, and llama.cpp's logits those of the trunk;
* a config without the Hub's fields (as transformers 5.24 writes it), with RoPE widths
  the reference asserts against, or with llama3 RoPE (not done): refused by name,
  nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from support import pyfork
from support.llama_sdist import llama_cpp_root
from support.meta_oracle import oracle_env
from support.step35_models import step35, with_mtp
from test_convert_archs import _llama_logits_f32_kv
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANTS = ["q4_k_m", "q2_k"]
#: the model with an MTP block: these types
MTP_TYPES = ["f32", "q8_0", "q4_k_m"]
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
#: llama.cpp vs transformers, as a fraction of the logits' scale (measured 1.6e-4)
TOL = 2e-3


# every job in one process (torch loads once); each job's exception, or "ok", on a line
_DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys
    script, jobs = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(script))
    for args in jobs:
        sys.argv = [script, *args]
        try:
            runpy.run_path(script, run_name="__main__")
            print("ok")
        except BaseException as e:
            print(type(e).__name__ + ": " + (str(e).splitlines() or [""])[0])
    """
)


def _reference(jobs: list[list[str]], env: dict | None) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)], env=env)  # fmt: skip


def _variant(src, dst, **changes):
    """A copy of the model folder ``src`` in ``dst`` (weights linked) with config.json
    fields changed (a value of None deletes the field)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def s35(tmp_path_factory):
    """The model folder and transformers' model; the reference's files (each type, the
    quantized ones through llama_model_quantize; the model with an MTP block, ``mtp-*``)
    on transformers 4.47.1, and its answer to a config with other RoPE widths (the last
    line of its output); ours."""
    root = tmp_path_factory.mktemp("step35")
    src, model = step35(root / "hub")
    mtp = with_mtp(src, root / "mtp")
    bad = _variant(src, root / "rope", partial_rotary_factors=[0.5, 0.5, 0.5])
    jobs = [[str(src), "--outfile", str(root / f"ref-{t}.gguf"), "--outtype", t] for t in TYPES]
    jobs += [[str(mtp), "--outfile", str(root / f"ref-mtp-{t}.gguf"), "--outtype", t]
             for t in MTP_TYPES[:2]]  # fmt: skip
    jobs.append([str(bad), "--outfile", str(root / "ref-rope.gguf"), "--outtype", "f16"])
    r = _reference(jobs, oracle_env())
    lines = r.stdout.splitlines()[-len(jobs) :]
    assert lines[:-1] == ["ok"] * (len(jobs) - 1), r.stdout[-2000:] + r.stderr[-3000:]
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t)
    for q in QUANTS:
        _llama_quantize(root / "ref-f32.gguf", root / f"ref-{q}.gguf", q)
        hf_to_gguf(src, root / f"ours-{q}.gguf", q)
    _llama_quantize(root / "ref-mtp-f32.gguf", root / "ref-mtp-q4_k_m.gguf", "q4_k_m")
    for t in MTP_TYPES:
        hf_to_gguf(mtp, root / f"ours-mtp-{t}.gguf", t)
    return root, model, lines[-1]


def test_reference_fails_on_transformers_5(s35, tmp_path):
    """Why the reference runs on transformers 4.47.1 here: on 5.24 its AutoConfig view of
    the Hub's config has lost ``num_attention_groups`` and it stops, writing nothing."""
    root, _, _ = s35
    out = tmp_path / "r.gguf"
    r = _reference([[str(root / "hub"), "--outfile", str(out), "--outtype", "f16"]],
                   dict(os.environ))  # fmt: skip
    assert r.stdout.splitlines()[-1] == "KeyError: 'num_attention_groups'", r.stdout[-2000:]
    assert not out.exists()


@pytest.mark.parametrize("t", [*TYPES, *QUANTS])
def test_text_same_as_reference(s35, t):
    root, _, _ = s35
    _same(root / f"ours-{t}.gguf", root / f"ref-{t}.gguf")


def test_contents(s35):
    """Guard against a vacuous pass: per-layer head counts and window pattern, the
    clamps, the experts as stored, the router bias F32 at q8_0, the norms 1 + w."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    root, _, _ = s35
    with read(root / "ours-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["general.architecture"] == "step35"
    assert md["step35.attention.head_count"] == [4, 2, 4]
    assert md["step35.attention.head_count_kv"] == [2, 2, 2]
    assert md["step35.attention.sliding_window_pattern"] == [False, True, False]
    assert md["step35.rope.freq_base"] == 5e6 and md["step35.rope.freq_base_swa"] == 1e4
    assert md["step35.leading_dense_block_count"] == 1
    assert np.allclose(md["step35.swiglu_clamp_exp"], [0, 0.2, 0])
    assert np.allclose(md["step35.swiglu_clamp_shexp"], [0, 0, 0.2])
    assert types["blk.1.ffn_gate_exps.weight"] == ("Q8_0", (4, 32, 64))
    assert types["blk.1.exp_probs_b.bias"] == ("F32", (4,))
    assert types["blk.1.attn_gate.weight"] == ("Q8_0", (2, 64))
    assert "blk.0.ffn_gate.weight" in types and "blk.0.ffn_gate_inp.weight" not in types
    hub = load_file(root / "hub" / "model.safetensors")
    with read(root / "ours-f32.gguf") as f:
        norm = np.array(f.numpy("blk.1.attn_q_norm.weight"))
    want = hub["model.layers.1.self_attn.q_norm.weight"].astype(np.float32) + 1
    np.testing.assert_array_equal(norm, want)


def _hf_logits(model) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([TOKENS])).logits[0].numpy()


def test_text_in_llama_cpp(s35):
    """llama.cpp's logits (f32 KV cache) on our file are those on the reference's, and
    transformers' within TOL of scale; transformers with a window of 5 instead of 4, or
    without the clamps, is far off (each measured > 0.5)."""
    root, model, _ = s35
    ours = _llama_logits_f32_kv(root / "ours-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(root / "ref-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    hf = _hf_logits(model)
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= TOL * max(scale, 1.0), np.abs(ours - hf).max()
    layers = model.model.language_model.layers
    swa = [la.self_attn for la in layers if la.self_attn.sliding_window is not None]
    moe = [la.mlp for la in layers if hasattr(la.mlp, "experts")]
    assert swa and moe
    try:
        for a in swa:
            a.sliding_window = 5
        model.config.text_config.sliding_window = 5
        assert np.abs(ours - _hf_logits(model)).max() > 0.1
    finally:
        for a in swa:
            a.sliding_window = 4
        model.config.text_config.sliding_window = 4
    limits = [(b.experts.limit, b.shared_experts.limit) for b in moe]
    try:
        for b in moe:
            b.experts.limit = b.shared_experts.limit = float("inf")
        assert np.abs(ours - _hf_logits(model)).max() > 0.1
    finally:
        for b, (e, s) in zip(moe, limits):
            b.experts.limit, b.shared_experts.limit = e, s
    np.testing.assert_array_equal(_hf_logits(model), hf)


def test_text_has_no_way_back(s35, tmp_path):
    """GGUF -> HF: no transformers class loads the Step 3.5 text alone (transformers
    5.24's only class, Step3p7ForConditionalGeneration, wants its vision tower too)."""
    root, _, _ = s35
    with pytest.raises(E.UnknownArchitecture, match="step35"):
        gguf_to_hf(root / "ours-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize(
    "field",
    ["num_attention_groups", "moe_num_experts", "moe_top_k", "share_expert_dim", "sliding_window"],
)
def test_hub_field_required(s35, tmp_path, field):
    """A config without one of the Hub's fields the reference reads (transformers 5.24
    writes none of the first four): refused by name, nothing written."""
    root, _, _ = s35
    src = _variant(root / "hub", tmp_path / "m", **{field: None})
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()


def test_transformers_config_refused(s35, tmp_path):
    """The text config as transformers 5.24 writes it (its own field names), under the
    Hub's class name: refused by name (the first Hub field missing), nothing written."""
    root, model, _ = s35
    cfg = model.config.text_config.to_dict()
    assert "num_attention_groups" not in cfg and "moe_num_experts" not in cfg
    cfg["architectures"] = ["Step3p5ForCausalLM"]
    src = _variant(root / "hub", tmp_path / "m")
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="num_attention_groups"):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()


def test_rope_widths_refused_as_reference(s35, tmp_path):
    """RoPE over half of a sliding layer's head: the reference's assertion stops it (no
    file); ours refuses it by name before any output."""
    root, _, answer = s35
    assert answer.startswith("AssertionError"), answer
    assert not (root / "ref-rope.gguf").exists()
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="partial_rotary_factors"):
        hf_to_gguf(root / "rope", out / "t.gguf", "f16")
    assert not out.exists()


@pytest.mark.parametrize("t", MTP_TYPES)
def test_mtp_same_as_reference(s35, t):
    """An MTP block appended after the trunk: the reference's bytes too."""
    root, _, _ = s35
    _same(root / f"ours-mtp-{t}.gguf", root / f"ref-mtp-{t}.gguf")


def test_mtp_contents_and_logits(s35):
    """The block counts (4 = 3 + 1 MTP), its per-layer rows padded, its own tensors
    (the shared head renamed); llama.cpp loads the file and its logits are those of the
    file without the block (the trunk's)."""
    from weightsmith.gguf import read

    root, _, _ = s35
    with read(root / "ours-mtp-f32.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["step35.block_count"] == 4 and md["step35.nextn_predict_layers"] == 1
    assert md["step35.attention.head_count"] == [4, 2, 4, 4]
    assert np.allclose(md["step35.swiglu_clamp_exp"], [0, 0.2, 0, 0])
    for t in ("eh_proj", "enorm", "hnorm", "shared_head_head", "shared_head_norm"):
        assert f"blk.3.nextn.{t}.weight" in names
    assert "blk.3.attn_gate.weight" in names and "blk.3.ffn_gate.weight" in names
    mtp = _llama_logits_f32_kv(root / "ours-mtp-f32.gguf", TOKENS)
    np.testing.assert_array_equal(mtp, _llama_logits_f32_kv(root / "ours-f32.gguf", TOKENS))


def test_llama3_rope_refused(s35, tmp_path):
    """llama3 RoPE scaling (the reference then writes ``rope_freqs.weight``) is not done:
    refused by name, nothing written."""
    root, _, _ = s35
    rs = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}
    src = _variant(root / "hub", tmp_path / "m", rope_scaling=rs)
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="rope_scaling"):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()


def test_cli(s35, tmp_path):
    from weightsmith.cli._main import main

    root, _, _ = s35
    dst = tmp_path / "g.gguf"
    assert main(["convert", str(root / "hub"), str(dst), "--type", "q8_0", "--quiet"]) == 0
    assert dst.read_bytes() == (root / "ours-q8_0.gguf").read_bytes()
