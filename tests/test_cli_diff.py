"""``weightsmith diff`` through the console script: by name, across formats, and an HF
model against a GGUF through the architecture registry (weightsmith.convert.compare)."""

from __future__ import annotations

import shutil

import gguf
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as hf_load
from safetensors.torch import save_file as hf_save

from support.cli_helpers import build_hf_llama, diff_json, run


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    return build_hf_llama(tmp_path_factory.mktemp("cli_hf"))


# --------------------------------------------------------------------------- diff


@pytest.fixture
def pair(tmp_path):
    g = torch.Generator().manual_seed(1)
    a = {
        "model.layers.0.w.weight": torch.randn(64, 32, generator=g),
        "model.layers.0.n.weight": torch.ones(32),
        "only_a": torch.zeros(2),
    }
    b = {k: v.clone() for k, v in a.items() if k != "only_a"}
    b["model.layers.0.w.weight"][0, 0] += 0.5
    b["model.layers.0.n.weight"] = b["model.layers.0.n.weight"].to(torch.float16)
    b["only_b"] = torch.zeros(3)
    hf_save(a, str(tmp_path / "a.safetensors"))
    hf_save(b, str(tmp_path / "b.safetensors"))
    return tmp_path / "a.safetensors", tmp_path / "b.safetensors", a, b


def test_diff_identical(pair):
    a, _, _, _ = pair
    p = run("diff", a, a, "--values")
    assert p.returncode == 0, p.stderr
    assert "identical" in p.stdout


def test_diff_sets_dtypes_values(pair):
    a, b, ta, tb = pair
    p = run("diff", a, b, "--values", "--json")
    assert p.returncode == 1, p.stderr
    d = diff_json(p)
    assert d["only_in_a"] == ["only_a"] and d["only_in_b"] == ["only_b"]
    assert d["dtype_differs"] == [{"name": "model.layers.0.n.weight", "a": "F32", "b": "F16"}]
    vals = {v["name"]: v for v in d["values"]}
    x = ta["model.layers.0.w.weight"].double().numpy().ravel()
    y = tb["model.layers.0.w.weight"].double().numpy().ravel()
    w = vals["model.layers.0.w.weight"]
    assert w["max_abs"] == pytest.approx(0.5)
    assert w["rmse"] == pytest.approx(float(np.sqrt(np.mean((x - y) ** 2))))
    assert w["cosine"] == pytest.approx(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)))
    assert vals["model.layers.0.n.weight"]["max_abs"] == 0.0
    p = run("diff", a, b)
    assert p.returncode == 1 and "- only_a" in p.stdout and "+ only_b" in p.stdout


def test_diff_across_formats_dequantizes(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    hf_save({"blk.0.attn_q.weight": torch.from_numpy(x)}, str(tmp_path / "a.safetensors"))
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), "llama")
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = run("diff", tmp_path / "a.safetensors", tmp_path / "b.gguf", "--values", "--json")
    d = diff_json(p)
    assert d["shape_differs"] == [] and d["only_in_a"] == [] and d["only_in_b"] == []
    # the dequantization oracle is gguf-py
    y = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).astype(np.float64).ravel()
    v = d["values"][0]
    assert v["max_abs"] == pytest.approx(float(np.max(np.abs(x.ravel() - y))))
    assert v["rmse"] == pytest.approx(float(np.sqrt(np.mean((x.ravel() - y) ** 2))))
    assert 0.999 < v["cosine"] <= 1.0
    assert p.returncode == 1  # quantization changed the values


# diff across formats: names and layouts through the architecture registry


def test_diff_hf_folder_against_f32_gguf_is_exact(hf_llama):
    p = run("diff", hf_llama / "hf", hf_llama / "m-f32.gguf", "--values", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    d = diff_json(p)
    assert d["only_in_a"] == [] and d["only_in_b"] == [] and d["shape_differs"] == []
    src = hf_load(str(hf_llama / "hf" / "model.safetensors"))
    assert d["common"] == len(src) == len(d["values"])
    names = {v["name"]: v["name_b"] for v in d["values"]}
    assert names["model.layers.0.self_attn.q_proj.weight"] == "blk.0.attn_q.weight"
    assert names["lm_head.weight"] == "output.weight"
    for v in d["values"]:
        assert (
            v["rmse"] == 0 and v["max_abs"] == 0 and v["cosine"] == pytest.approx(1, abs=1e-12)
        ), v
    p = run("diff", hf_llama / "hf", hf_llama / "m-f32.gguf", "--values")
    assert p.returncode == 0 and p.stdout.rstrip().endswith("identical")
    assert "model.layers.1.mlp.up_proj.weight -> blk.1.ffn_up.weight" in p.stdout


def test_diff_safetensors_file_against_q8_0_gguf(hf_llama):
    # GGUF first, the HF side as one safetensors file: names come back through the registry
    st = hf_llama / "hf" / "model.safetensors"
    p = run("diff", hf_llama / "m-q8_0.gguf", st, "--values", "--json")
    assert p.returncode == 1, p.stderr  # quantization changed the values
    d = diff_json(p)
    assert d["only_in_a"] == [] and d["only_in_b"] == [] and d["shape_differs"] == []
    src = hf_load(str(st))
    vals = {v["name"]: v for v in d["values"]}
    assert len(vals) == len(src)
    for v in vals.values():
        assert v["cosine"] > 0.99 and v["max_abs"] < 0.01, v
        if v["type"] == "Q8_0":
            assert 0 < v["rmse"] < 1e-3
    # the Q8_0 error of one weight against gguf-py's own dequantization
    r = gguf.GGUFReader(str(hf_llama / "m-q8_0.gguf"))
    t = next(t for t in r.tensors if t.name == "blk.1.ffn_down.weight")
    got = gguf.quants.dequantize(t.data, gguf.GGMLQuantizationType.Q8_0).astype(np.float64)
    ref = src["model.layers.1.mlp.down_proj.weight"].astype(np.float64)
    v = vals["blk.1.ffn_down.weight"]
    assert v["name_b"] == "model.layers.1.mlp.down_proj.weight"
    assert v["max_abs"] == pytest.approx(float(np.max(np.abs(got - ref))))
    assert v["rmse"] == pytest.approx(float(np.sqrt(np.mean((got - ref) ** 2))))


def test_diff_without_config_json_matches_by_name_and_says_so(hf_llama, tmp_path):
    shutil.copy(hf_llama / "hf" / "model.safetensors", tmp_path / "model.safetensors")
    p = run("diff", tmp_path / "model.safetensors", hf_llama / "m-f32.gguf")
    assert p.returncode == 1, p.stderr
    assert "only when its folder has a config.json" in p.stdout
    assert "0 tensors in both" in p.stdout and "- lm_head.weight" in p.stdout


def test_diff_registry_reports_missing_and_changed_tensors(hf_llama, tmp_path):
    # an HF folder with one weight removed and one reshaped, against the f32 GGUF
    d = tmp_path / "hf"
    shutil.copytree(hf_llama / "hf", d)
    t = hf_load(str(d / "model.safetensors"))
    del t["model.layers.1.mlp.up_proj.weight"]
    t["model.norm.weight"] = t["model.norm.weight"][:128].copy()
    from safetensors.numpy import save_file

    save_file(t, str(d / "model.safetensors"))
    p = run("diff", d, hf_llama / "m-f32.gguf", "--json", "--values")
    assert p.returncode == 1, p.stderr
    r = diff_json(p)
    assert r["only_in_a"] == [] and r["only_in_b"] == ["blk.1.ffn_up.weight"]
    assert r["shape_differs"] == [
        {"name": "model.norm.weight", "name_b": "output_norm.weight", "a": [128], "b": [256]}
    ]
    assert r["values"] == [] and "shapes differ" in r["values_skipped"]
    # with only the missing weight, the others are compared (and equal)
    t["model.norm.weight"] = hf_load(str(hf_llama / "hf" / "model.safetensors"))[
        "model.norm.weight"
    ]
    save_file(t, str(d / "model.safetensors"))
    p = run("diff", d, hf_llama / "m-f32.gguf", "--json", "--values")
    r = diff_json(p)
    assert (
        p.returncode == 1 and r["only_in_b"] == ["blk.1.ffn_up.weight"] and r["shape_differs"] == []
    )
    assert len(r["values"]) == r["common"] == len(t) and all(v["max_abs"] == 0 for v in r["values"])


def test_diff_gemma3_norms_and_qk_through_the_registry(tmp_path):
    # Gemma stores norm weights as w - 1 in HF and w in GGUF; the registry's transform is
    # applied by convert.compare, so an f32 GGUF still diffs to exactly zero
    from support import hf_models

    src = hf_models.build("gemma3", tmp_path / "hf")
    p = run("convert", src, tmp_path / "g.gguf", "--type", "f32", "-q")
    assert p.returncode == 0, p.stderr
    p = run("diff", src, tmp_path / "g.gguf", "--values", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    d = diff_json(p)
    names = {v["name"] for v in d["values"]}
    assert "model.layers.0.post_feedforward_layernorm.weight" in names
    assert all(v["max_abs"] == 0 for v in d["values"])
    # and the plain GGUF norm values really differ from the HF ones by one
    r = gguf.GGUFReader(str(tmp_path / "g.gguf"))
    g = next(t for t in r.tensors if t.name == "blk.0.attn_norm.weight").data
    from safetensors.torch import load_file

    h = load_file(str(src / "model.safetensors"))["model.layers.0.input_layernorm.weight"]
    np.testing.assert_array_equal(g, h.float().numpy() + np.float32(1))


def test_diff_remote_against_local_headers(nginx, remote_tree):
    p = run("diff", f"{nginx.url}/files/small.safetensors", remote_tree.files / "small.safetensors")
    assert p.returncode == 0, p.stderr
    assert "identical" in p.stdout
    p = run(
        "diff",
        f"{nginx.url}/files/small.safetensors",
        remote_tree.files / "big.safetensors",
        "--json",
    )
    d = diff_json(p)
    assert p.returncode == 1 and d["common"] == 0 and len(d["only_in_b"]) == 2500
