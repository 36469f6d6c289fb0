"""MiMo-V2-Flash text (``MiMoV2FlashForCausalLM``, GGUF ``mimo2``) against llama.cpp's
converter and runtime and transformers 5.24.

transformers 5.24's ``MiMoV2FlashForCausalLM`` builds the tiny model and writes the Hub's
tensor names; its config.json is rewritten in the Hub's spellings, which the reference
reads (tests/support/mimo_models.py).  The pinned reference reads config.json through
``AutoConfig``: on transformers 5.24 (which knows ``mimo_v2_flash`` and replaces the
RoPE fields by per-layer-type ``rope_parameters``) it stops with a ``KeyError`` (pinned
here), so it runs on transformers 4.47.1, which leaves config.json as written.  Checked:

* byte-identical to ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and at q4_k_m
  and iq4_xs to its f32 through ``llama_model_quantize``;
* llama.cpp's logits on ours are those on the reference's file, and transformers' within
  2e-3 of scale; the sliding window and the value scale are exercised (transformers with
  another window or no value scale is far off);
* GGUF -> HF -> transformers: every tensor equal, the same logits;
* with the three MTP blocks the Hub's checkpoints carry: the reference's bytes, llama.cpp's
  logits those of the trunk, and GGUF -> HF gives them back;
* configs the reference refuses or that are not done here: refused by name, nothing written.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from support.meta_oracle import oracle_env
from support.mimo_models import MIMO_TEXT, fused_qkv, mimo_v2_flash, with_mtp
from test_convert_archs import _llama_logits_f32_kv
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _same
from test_convert_step35 import _reference, _variant
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANTS = ["q4_k_m", "iq4_xs"]
MTP_TYPES = ["f32"]
#: MiMo-V2.5's text (fused qkv_proj, towers' tensors beside it)
V25_TYPES = ["f32", "q8_0"]
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
#: llama.cpp (f32 KV cache) vs transformers, as a fraction of the logits' scale (measured
#: 1e-6: 4.0e-6 at scale 4.2)
TOL = 2e-3


@pytest.fixture(scope="module")
def mimo(tmp_path_factory):
    """The model folder, with MTP blocks (``mtp``); the reference's files (each type, the
    quantized ones through llama_model_quantize) on transformers 4.47.1; ours."""
    root = tmp_path_factory.mktemp("mimo")
    src = mimo_v2_flash(root / "hub")
    mtp = with_mtp(src, root / "mtp")
    v25 = fused_qkv(mtp, root / "v25")
    jobs = [[str(src), "--outfile", str(root / f"ref-{t}.gguf"), "--outtype", t] for t in TYPES]
    jobs += [[str(mtp), "--outfile", str(root / f"ref-mtp-{t}.gguf"), "--outtype", t]
             for t in MTP_TYPES]  # fmt: skip
    jobs += [[str(v25), "--outfile", str(root / f"ref-v25-{t}.gguf"), "--outtype", t]
             for t in V25_TYPES]  # fmt: skip
    r = _reference(jobs, oracle_env())
    assert r.stdout.splitlines()[-len(jobs) :] == ["ok"] * len(jobs), r.stderr[-3000:]
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t)
    for q in QUANTS:
        _llama_quantize(root / "ref-f32.gguf", root / f"ref-{q}.gguf", q)
        hf_to_gguf(src, root / f"ours-{q}.gguf", q)
    for t in MTP_TYPES:
        hf_to_gguf(mtp, root / f"ours-mtp-{t}.gguf", t)
    for t in V25_TYPES:
        hf_to_gguf(v25, root / f"ours-v25-{t}.gguf", t)
    return root


@pytest.fixture(scope="module")
def hf_model(mimo):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(mimo / "hub", dtype=torch.float32).eval()


def _hf_logits(model) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([TOKENS])).logits[0].numpy()


def test_reference_fails_on_transformers_5(mimo, tmp_path):
    """Why the reference runs on transformers 4.47.1 here: on 5.24 its AutoConfig view of
    the Hub's config has per-layer-type ``rope_parameters`` and no top-level partial
    rotary factor, and it stops, writing nothing."""
    out = tmp_path / "r.gguf"
    r = _reference([[str(mimo / "hub"), "--outfile", str(out), "--outtype", "f16"]],
                   dict(os.environ))  # fmt: skip
    assert r.stdout.splitlines()[-1] == "KeyError: 'partial_rotary_factor'", r.stdout[-2000:]
    assert not out.exists()


@pytest.mark.parametrize("t", [*TYPES, *QUANTS])
def test_text_same_as_reference(mimo, t):
    _same(mimo / f"ours-{t}.gguf", mimo / f"ref-{t}.gguf")


def test_contents(mimo):
    """Guard against a vacuous pass: the per-layer KV heads and window pattern padded
    for the three MTP blocks, the head widths, the rotary width, the experts stacked,
    the router and its bias F32 at q8_0, the sinks on the sliding layers only."""
    from weightsmith.gguf import read

    with read(mimo / "ours-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, tuple(t.shape)) for t in f.tensors}
    assert md["general.architecture"] == "mimo2"
    assert md["mimo2.block_count"] == 6 and md["mimo2.nextn_predict_layers"] == 3
    assert md["mimo2.attention.head_count_kv"] == [1, 2, 2, 2, 2, 2]
    assert md["mimo2.attention.sliding_window_pattern"] == [0, 1, 1, 1, 1, 1]
    assert md["mimo2.attention.sliding_window"] == 4
    assert md["mimo2.attention.key_length"] == 48 and md["mimo2.attention.value_length"] == 32
    assert md["mimo2.rope.dimension_count"] == 16
    assert md["mimo2.rope.freq_base"] == 5e6 and md["mimo2.rope.freq_base_swa"] == 1e4
    assert np.isclose(md["mimo2.attention.value_scale"], 0.707)
    assert md["mimo2.expert_gating_func"] == 2  # sigmoid
    assert types["blk.1.ffn_gate_exps.weight"] == ("Q8_0", (4, 128, 256))
    assert types["blk.1.ffn_down_exps.weight"] == ("Q8_0", (4, 256, 128))
    assert types["blk.1.ffn_gate_inp.weight"] == ("F32", (4, 256))
    assert types["blk.1.exp_probs_b.bias"] == ("F32", (4,))
    assert types["blk.1.attn_sinks.weight"] == ("F32", (4,))
    assert types["blk.1.attn_k.weight"][1] == (96, 256) and types["blk.0.attn_k.weight"][1] == (
        48,
        256,
    )
    assert "blk.0.attn_sinks.weight" not in types and "blk.0.ffn_gate.weight" in types


def test_text_in_llama_cpp(mimo, hf_model):
    """llama.cpp's logits (f32 KV cache) on our file are those on the reference's, and
    transformers' within TOL of scale; transformers with a window of 5 instead of 4, or
    without the value scale, is far off (each measured > 0.1)."""
    ours = _llama_logits_f32_kv(mimo / "ours-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(mimo / "ref-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    hf = _hf_logits(hf_model)
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= TOL * max(scale, 1.0), np.abs(ours - hf).max()
    attn = [la.self_attn for la in hf_model.model.layers]
    swa = [a for a in attn if a.sliding_window is not None]
    assert swa and all(a.sinks is not None for a in swa)
    try:
        for a in swa:
            a.sliding_window = 5
        hf_model.config.sliding_window = 5
        assert np.abs(ours - _hf_logits(hf_model)).max() > 0.1
    finally:
        for a in swa:
            a.sliding_window = 4
        hf_model.config.sliding_window = 4
    try:
        for a in attn:
            a.v_scale = 1.0
        assert np.abs(ours - _hf_logits(hf_model)).max() > 0.1
    finally:
        for a in attn:
            a.v_scale = 0.707
    np.testing.assert_array_equal(_hf_logits(hf_model), hf)


def test_round_trip(mimo, hf_model, tmp_path):
    """GGUF (f32) -> HF: transformers 5.24's config, every tensor the original's, and
    transformers' logits on the folder are the original's."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    back = tmp_path / "back"
    gguf_to_hf(mimo / "ours-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["MiMoV2FlashForCausalLM"] and cfg["num_hidden_layers"] == 3
    assert cfg["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention"]
    assert cfg["mlp_layer_types"] == ["dense", "sparse", "sparse"]
    orig, got = load_file(mimo / "hub" / "model.safetensors"), load_file(back / "model.safetensors")
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v.astype(np.float32), err_msg=k)
    model = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    np.testing.assert_array_equal(_hf_logits(model), _hf_logits(hf_model))


@pytest.mark.parametrize("t", MTP_TYPES)
def test_mtp_same_as_reference(mimo, t):
    """The three MTP blocks numbered after the trunk: the reference's bytes too."""
    _same(mimo / f"ours-mtp-{t}.gguf", mimo / f"ref-mtp-{t}.gguf")


def test_mtp_contents_logits_and_back(mimo, tmp_path):
    """Their tensors (``blk.3`` .. ``blk.5``: the NextN ones, sinks, a dense MLP);
    llama.cpp loads the file and its logits are the trunk's; GGUF -> HF gives them back
    under ``model.mtp.layers.{i}``, equal."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(mimo / "ours-mtp-f32.gguf") as f:
        names = {t.name for t in f.tensors}
    for i in (3, 4, 5):
        for t in ("nextn.eh_proj", "nextn.enorm", "nextn.hnorm", "layer_output_norm",
                  "attn_sinks", "ffn_gate"):  # fmt: skip
            assert f"blk.{i}.{t}.weight" in names
    got = _llama_logits_f32_kv(mimo / "ours-mtp-f32.gguf", TOKENS)
    np.testing.assert_array_equal(got, _llama_logits_f32_kv(mimo / "ours-f32.gguf", TOKENS))
    back = tmp_path / "back"
    gguf_to_hf(mimo / "ours-mtp-f32.gguf", back, dtype="f32")
    orig, out = load_file(mimo / "mtp" / "model.safetensors"), load_file(back / "model.safetensors")
    assert sorted(out) == sorted(orig) and any(k.startswith("model.mtp.layers.2.") for k in out)
    for k, v in orig.items():
        np.testing.assert_array_equal(out[k], v.astype(np.float32), err_msg=k)


@pytest.mark.parametrize(
    "field",
    ["hybrid_layer_pattern", "swa_num_key_value_heads", "v_head_dim", "moe_intermediate_size"],
)
def test_hub_field_required(mimo, tmp_path, field):
    """A config without one of the Hub's fields the reference reads: refused by name,
    nothing written."""
    src = _variant(mimo / "hub", tmp_path / "m", **{field: None})
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()


def test_transformers_config_refused(mimo, tmp_path):
    """The config as transformers 5.24 writes it (per-layer-type ``rope_parameters``, no
    ``hybrid_layer_pattern`` or ``swa_*`` fields): refused by name, nothing written."""
    from transformers import MiMoV2FlashConfig

    cfg = MiMoV2FlashConfig(vocab_size=50257, **MIMO_TEXT).to_dict()
    cfg["architectures"] = ["MiMoV2FlashForCausalLM"]
    assert "hybrid_layer_pattern" not in cfg and "full_attention" in cfg["rope_parameters"]
    src = _variant(mimo / "hub", tmp_path / "m")
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()
    # with the Hub's fields but transformers' RoPE spelling: the reference's KeyError
    src = _variant(mimo / "hub", tmp_path / "m2", rope_parameters=cfg["rope_parameters"])
    with pytest.raises(E.InvalidModelConfig, match="partial_rotary_factor"):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"swa_head_dim": 64}, "swa_head_dim"),
        ({"swa_num_attention_heads": 8}, "swa_num_attention_heads"),
        ({"swa_v_head_dim": 16}, "swa_v_head_dim"),
        ({"topk_method": "greedy"}, "topk_method"),
        ({"quantization_config": {"quant_method": "fp8"}}, "quantization_config"),
    ],
)
def test_refused_as_reference_or_not_done(mimo, tmp_path, changes, field):
    """What the reference asserts against (sliding layers' widths and heads, the routing
    method), and FP8 / MXFP4 checkpoints (not done): refused by name, nothing written."""
    src = _variant(mimo / "hub", tmp_path / "m", **changes)
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16")
    assert not out.exists()


def test_back_refuses_what_transformers_cannot_hold(mimo, tmp_path):
    """transformers' class has twice the full layers' KV heads on sliding layers: a file
    that says otherwise is refused by name, nothing written."""
    src = _variant(mimo / "hub", tmp_path / "m", swa_num_key_value_heads=1)
    g = tmp_path / "g.gguf"
    hf_to_gguf(src, g, "f32", tokenizer=False)
    back = tmp_path / "back"
    with pytest.raises(E.UnknownArchitecture, match="head_count_kv"):
        gguf_to_hf(g, back)
    assert not back.exists()


def test_cli(mimo, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(mimo / "hub"), str(dst), "--type", "q8_0", "--quiet"]) == 0
    assert dst.read_bytes() == (mimo / "ours-q8_0.gguf").read_bytes()


@pytest.mark.parametrize("t", V25_TYPES)
def test_v25_same_as_reference(mimo, t):
    """MiMo-V2.5's text (``MiMoV2ForCausalLM``: fused ``qkv_proj``, MTP blocks, tensors of
    its towers left out): the reference's bytes."""
    _same(mimo / f"ours-v25-{t}.gguf", mimo / f"ref-v25-{t}.gguf")


def test_v25_in_llama_cpp(mimo, hf_model):
    """The fused file is the Flash model with its Q/K/V rows fused: llama.cpp (which
    splits ``attn_qkv`` by the head counts) gives transformers' logits of the unfused
    model within TOL of scale; the file has ``attn_qkv`` and no tower tensor."""
    from weightsmith.gguf import read

    with read(mimo / "ours-v25-f32.gguf") as f:
        names = {t.name for t in f.tensors}
    assert "blk.1.attn_qkv.weight" in names and "blk.4.attn_qkv.weight" in names
    assert not any(n.startswith(("blk.1.attn_q.", "v.", "a.")) for n in names)
    got = _llama_logits_f32_kv(mimo / "ours-v25-f32.gguf", TOKENS)
    hf = _hf_logits(hf_model)
    scale = float(np.abs(hf).max())
    assert np.abs(got - hf).max() <= TOL * max(scale, 1.0), np.abs(got - hf).max()


def test_v25_has_no_way_back(mimo, tmp_path):
    """GGUF -> HF of a fused file: no transformers class holds it (MiMoV2ForCausalLM is
    remote code): refused by name, nothing written."""
    back = tmp_path / "back"
    with pytest.raises(E.UnknownArchitecture, match="attn_qkv"):
        gguf_to_hf(mimo / "ours-v25-f32.gguf", back)
    assert not back.exists()


@pytest.mark.parametrize(
    "key", ["mimo2.attention.sliding_window_pattern", "mimo2.rope.dimension_count"]
)
def test_back_needs_the_rows(mimo, tmp_path, key):
    """GGUF -> HF of a file without a row the config is rebuilt from: refused by name,
    nothing written."""
    from weightsmith.gguf import edit

    g = edit(mimo / "ours-f32.gguf", remove=[key], out=tmp_path / "g.gguf")
    back = tmp_path / "back"
    with pytest.raises(E.MissingGGUFMetadata, match=key):
        gguf_to_hf(g, back)
    assert not back.exists()


def test_v25_projector_incomplete_config_refused(mimo, tmp_path):
    """``--mmproj`` of a MiMo-V2.5 folder whose vision config lacks a field the reference
    reads (``patch_size``; the projector itself: tests/test_convert_mimo_proj.py) is
    refused by name before any output (text file included)."""
    src = _variant(mimo / "v25", tmp_path / "m", vision_config={"depth": 2, "num_heads": 4},
                   audio_config={"audio_channels": 2})  # fmt: skip
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="patch_size"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "p.gguf")
    assert not out.exists()
