"""validate, diff, edit, split, merge, scan and convert (HF <-> GGUF included) through the console script."""

from __future__ import annotations

import json
import pickle
import shutil

import gguf
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as hf_load
from safetensors.torch import save_file as hf_save

from support.cli_helpers import assert_one_line_error, diff_json, run

# --------------------------------------------------------------------------- validate


def test_validate_good_files(remote_tree):
    f = remote_tree.files
    split = sorted((f / "split").glob("*.gguf"))
    for target in (f / "small.safetensors", f / "sharded", f / "model.gguf", split[0]):
        p = run("validate", target)
        assert p.returncode == 0, (target, p.stderr)
        assert p.stdout.startswith("OK  ")


def test_validate_bad_files(tmp_path, remote_tree):
    good = (remote_tree.files / "small.safetensors").read_bytes()
    (tmp_path / "trailing.safetensors").write_bytes(good + b"\0")
    assert_one_line_error(run("validate", tmp_path / "trailing.safetensors"), "TrailingBytes")
    (tmp_path / "short.safetensors").write_bytes(good[:5])
    assert_one_line_error(run("validate", tmp_path / "short.safetensors"), "FileTooSmall")
    # a shard named by the index is missing
    folder = tmp_path / "sharded"
    shutil.copytree(remote_tree.files / "sharded", folder)
    (folder / "model-00002-of-00003.safetensors").unlink()
    assert_one_line_error(run("validate", folder), "MissingShard")


def test_validate_many_reports_each(tmp_path, remote_tree):
    (tmp_path / "bad.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}" + b"x")
    p = run("validate", remote_tree.files / "small.safetensors", tmp_path / "bad.safetensors")
    assert p.returncode == 1
    assert "OK  " in p.stdout
    assert "bad.safetensors: error: TrailingBytes" in p.stderr


def test_validate_remote_header(nginx):
    p = run("validate", f"{nginx.url}/files/small.safetensors")
    assert p.returncode == 0, p.stderr


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


# --------------------------------------------------------------------------- GGUF edit / split / merge


def test_edit_set_and_remove(tmp_path):
    src = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_name("before")
    w.add_context_length(256)
    w.add_tensor("t", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = tmp_path / "out.gguf"
    p = run(
        "edit", src, "--set", "general.name=after", "--set", "llama.context_length=4096",
        "--set", "my.flag=true:bool", "--set", "my.ratio=0.25:f64", "--remove", "general.architecture",
        "-o", out,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    r = gguf.GGUFReader(str(out))
    f = r.fields
    assert f["general.name"].contents() == "after"
    assert f["llama.context_length"].contents() == 4096
    assert f["llama.context_length"].types == [gguf.GGUFValueType.UINT32]  # kept its type
    assert f["my.flag"].contents() is True and f["my.flag"].types == [gguf.GGUFValueType.BOOL]
    assert f["my.ratio"].contents() == 0.25 and f["my.ratio"].types == [gguf.GGUFValueType.FLOAT64]
    assert "general.architecture" not in f
    assert np.array_equal(r.get_tensor(0).data, np.arange(8, dtype=np.float32))
    assert_one_line_error(run("edit", src, "--set", "llama.context_length=big"), "UsageError")
    assert_one_line_error(run("edit", src), "UsageError")


def test_split_then_merge(tmp_path, remote_tree):
    src = remote_tree.files / "model.gguf"
    p = run("split", src, tmp_path / "parts", "--max-tensors", "3")
    assert p.returncode == 0, p.stderr
    parts = sorted((tmp_path / "parts").glob("*.gguf"))
    assert len(parts) == 3
    # llama.cpp's split metadata, read by gguf-py
    assert gguf.GGUFReader(str(parts[0])).fields["split.count"].contents() == 3
    p = run("merge", parts[1], tmp_path / "merged.gguf")
    assert p.returncode == 0, p.stderr
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(tmp_path / "merged.gguf"))
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.tensor_type == tb.tensor_type and bytes(ta.data.tobytes()) == bytes(
            tb.data.tobytes()
        )


# --------------------------------------------------------------------------- scan


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_scan_safe_and_unsafe(tmp_path):
    torch.save({"w": torch.ones(2, 2)}, tmp_path / "ok.pth")
    p = run("scan", tmp_path / "ok.pth", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["safe"] is True and d["reasons"] == []
    (tmp_path / "evil.pth").write_bytes(pickle.dumps({"w": Evil()}, protocol=2))
    p = run("scan", tmp_path / "evil.pth")
    assert p.returncode == 1
    assert "NOT weights-only safe" in p.stdout and "system" in p.stdout
    assert "pwned" not in p.stdout + p.stderr  # never executed


# --------------------------------------------------------------------------- convert


def test_convert_unknown_pair_is_named(tmp_path):
    (tmp_path / "x.txt").write_text("hi")
    assert_one_line_error(
        run("convert", tmp_path / "x.txt", tmp_path / "y.txt"), "UnknownTargetError"
    )


def test_convert_torch_to_safetensors(tmp_path):
    sd = {"a.weight": torch.randn(4, 3), "b": torch.arange(5)}
    torch.save(sd, tmp_path / "m.pth")
    p = run("convert", tmp_path / "m.pth", tmp_path / "m.safetensors")
    assert p.returncode == 0, p.stderr
    out = hf_load(str(tmp_path / "m.safetensors"))
    for k, v in sd.items():
        assert np.array_equal(out[k], v.numpy())
    # a folder as the destination gets model.safetensors
    p = run("convert", tmp_path / "m.pth", tmp_path / "out")
    assert p.returncode == 0, p.stderr
    out = hf_load(str(tmp_path / "out" / "model.safetensors"))
    assert sorted(out) == sorted(sd)


# --------------------------------------------------------------------------- safetensors -> safetensors


def _torch_load(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def test_convert_cast_to_bf16(tmp_path, remote_tree):
    src = remote_tree.files / "small.safetensors"
    p = run("convert", src, tmp_path / "bf16.safetensors", "--type", "bf16")
    assert p.returncode == 0, p.stderr
    ours, ref = _torch_load(tmp_path / "bf16.safetensors"), _torch_load(src)
    assert sorted(ours) == sorted(ref)
    for k, v in ref.items():
        want = v.to(torch.bfloat16) if v.is_floating_point() else v  # torch is the rounding oracle
        assert ours[k].dtype == want.dtype, k
        assert torch.equal(ours[k], want), k


def test_convert_reshard_and_back(tmp_path, remote_tree):
    src = remote_tree.files / "small.safetensors"
    p = run("convert", src, tmp_path / "sharded", "--max-shard-size", "100KB")
    assert p.returncode == 0, p.stderr
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    merged = {}
    for shard in sorted(set(index["weight_map"].values())):
        merged.update(_torch_load(tmp_path / "sharded" / shard))
    ref = _torch_load(src)
    assert sorted(merged) == sorted(ref) and all(torch.equal(merged[k], ref[k]) for k in ref)
    p = run("convert", tmp_path / "sharded", tmp_path / "one.safetensors")
    assert p.returncode == 0, p.stderr
    one = _torch_load(tmp_path / "one.safetensors")
    assert all(torch.equal(one[k], ref[k]) for k in ref)
    assert_one_line_error(
        run("convert", src, tmp_path / "x.safetensors", "--type", "q4_k"), "UnsupportedTargetDtype"
    )


# --------------------------------------------------------------------------- HF <-> GGUF


PROMPT = [1, 5, 17, 42, 7, 99, 3, 250]


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    """A tiny Llama folder (SentencePiece tokenizer) and its f32 and q8_0 GGUFs, made by the CLI."""
    from support import hf_models

    root = tmp_path_factory.mktemp("cli_hf")
    src = hf_models.build("llama", root / "hf")
    for t in ("f32", "q8_0"):
        p = run("convert", src, root / f"m-{t}.gguf", "--type", t)
        assert p.returncode == 0, p.stderr
        assert f"wrote {root / f'm-{t}.gguf'}" in p.stdout
    return root


def _logits(folder) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


def test_convert_hf_to_gguf_q8_0_read_by_gguf_py(hf_llama):
    r = gguf.GGUFReader(str(hf_llama / "m-q8_0.gguf"))
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["general.file_type"].contents() == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    types = {t.name: t.tensor_type for t in r.tensors}
    src = hf_load(str(hf_llama / "hf" / "model.safetensors"))
    assert len(types) == len(src)
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    # the value oracle: gguf-py's dequantization against the source (no Q/K permutation here)
    got = gguf.quants.dequantize(
        next(t for t in r.tensors if t.name == "blk.0.ffn_up.weight").data,
        gguf.GGMLQuantizationType.Q8_0,
    )
    ref = src["model.layers.0.mlp.up_proj.weight"]
    assert got.shape == ref.shape
    assert np.max(np.abs(got - ref)) < 0.01 * np.max(np.abs(ref))


def test_convert_gguf_back_to_hf_folder_loads_in_transformers(hf_llama, tmp_path):
    back = tmp_path / "back"
    p = run("convert", hf_llama / "m-q8_0.gguf", back, "--type", "f32")
    assert p.returncode == 0, p.stderr
    assert f"wrote {back / 'config.json'}" in p.stdout
    a = hf_load(str(hf_llama / "hf" / "model.safetensors"))
    b = hf_load(str(back / "model.safetensors"))
    assert {k: v.shape for k, v in a.items()} == {k: v.shape for k, v in b.items()}
    assert all(v.dtype == np.float32 for v in b.values())
    la, lb = _logits(hf_llama / "hf"), _logits(back)
    assert torch.equal(la.argmax(-1), lb.argmax(-1))
    assert torch.allclose(la, lb, atol=0.05 * float(la.abs().max()))


def test_convert_f32_round_trip_is_exact(hf_llama, tmp_path):
    # f32 GGUF -> f32 folder: the inverse transforms (Q/K un-permute) give the source bits back
    p = run("convert", hf_llama / "m-f32.gguf", tmp_path / "back", "--type", "f32", "-q")
    assert p.returncode == 0 and p.stdout == "", p.stderr
    a = hf_load(str(hf_llama / "hf" / "model.safetensors"))
    b = hf_load(str(tmp_path / "back" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_convert_gguf_to_hf_sharded(hf_llama, tmp_path):
    p = run("convert", hf_llama / "m-q8_0.gguf", tmp_path / "o", "--max-shard-size", "1MB")
    assert p.returncode == 0, p.stderr
    index = json.loads((tmp_path / "o" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all((tmp_path / "o" / s).is_file() for s in shards)
    assert len(index["weight_map"]) == len(hf_load(str(hf_llama / "hf" / "model.safetensors")))


def test_convert_hf_to_gguf_split(hf_llama, tmp_path):
    p = run(
        "convert", hf_llama / "hf", tmp_path / "s.gguf", "--type", "f32", "--split-max-size", "2M"
    )
    assert p.returncode == 0, p.stderr
    shards = sorted(tmp_path.glob("s-*-of-*.gguf"))
    assert len(shards) > 1
    n = sum(len(gguf.GGUFReader(str(s)).tensors) for s in shards)
    assert n == len(gguf.GGUFReader(str(hf_llama / "m-f32.gguf")).tensors)


def test_convert_hf_to_gguf_k_quant_with_imatrix(hf_llama, tmp_path):
    # an importance matrix in llama.cpp's legacy .dat layout, one entry per 2-D weight
    r = gguf.GGUFReader(str(hf_llama / "m-f32.gguf"))
    rng = np.random.default_rng(0)
    entries = [(t.name, int(t.shape[0])) for t in r.tensors if len(t.shape) == 2]
    im = tmp_path / "imatrix.dat"
    with open(im, "wb") as f:
        f.write(np.int32(len(entries)).tobytes())
        for name, n in entries:
            f.write(np.int32(len(name)).tobytes() + name.encode())
            f.write(np.int32(1).tobytes() + np.int32(n).tobytes())
            f.write(rng.uniform(0.5, 2.0, n).astype(np.float32).tobytes())
        f.write(np.int32(10).tobytes())
    p = run("convert", hf_llama / "hf", tmp_path / "k.gguf", "--type", "q4_k_m", "--imatrix", im)
    assert p.returncode == 0, p.stderr
    k = gguf.GGUFReader(str(tmp_path / "k.gguf"))
    assert k.fields["general.file_type"].contents() == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert "quantize.imatrix.file" in k.fields
    types = {t.tensor_type.name for t in k.tensors}
    assert {"Q4_K", "Q6_K"} <= types


def test_convert_flags_that_do_not_apply_are_named(hf_llama, tmp_path):
    p = run("convert", hf_llama / "m-q8_0.gguf", tmp_path / "o", "--imatrix", "x.dat")
    assert_one_line_error(p, "UsageError")
    p = run("convert", hf_llama / "hf", tmp_path / "o.gguf", "--max-shard-size", "1GB")
    assert_one_line_error(p, "UsageError")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.gguf").exists()


def test_convert_errors_from_the_converters_are_one_line(hf_llama, tmp_path):
    # a folder without config.json, a bad --type, a GGUF without tokenizer keys
    (tmp_path / "empty").mkdir()
    shutil.copy(hf_llama / "hf" / "model.safetensors", tmp_path / "empty")
    p = run("convert", tmp_path / "empty", tmp_path / "x.gguf")
    assert_one_line_error(p, "MissingModelFile")
    assert not (tmp_path / "x.gguf").exists()
    p = run("convert", hf_llama / "hf", tmp_path / "x.gguf", "--type", "q9_z")
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = run("convert", hf_llama / "hf", tmp_path / "w.gguf", "--type", "f32", "--no-tokenizer")
    assert p.returncode == 0, p.stderr
    p = run("convert", tmp_path / "w.gguf", tmp_path / "o")
    assert_one_line_error(p, "MissingGGUFMetadata")
    p = run("convert", tmp_path / "w.gguf", tmp_path / "o", "--no-tokenizer", "--debug")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o" / "config.json").is_file() and not (
        tmp_path / "o" / "tokenizer.json"
    ).exists()


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


# --------------------------------------------------------------------------- error paths


ERROR_CASES = [
    (("inspect", "{bad}.gguf"), "GGUFInvalidMagic"),
    (("inspect", "{missing}"), "UnknownTargetError"),
    (("validate", "{bad}.safetensors"), "HeaderTooLarge"),
    (("diff", "{bad}.gguf", "{bad}.gguf"), "GGUFInvalidMagic"),
    (("diff", "{bad}.safetensors", "{bad}.gguf", "--values"), "HeaderTooLarge"),
    (("convert", "{bad}.gguf", "{tmp}/out"), "GGUFInvalidMagic"),
    (("convert", "{tmp}", "{tmp}/x.gguf"), "MissingModelFile"),
    (("convert", "{tmp}/a.txt", "{tmp}/b.txt"), "UnknownTargetError"),
    (("quantize", "{bad}.gguf", "{tmp}/o.gguf", "--type", "q4_k_m"), "GGUFInvalidMagic"),
    (("edit", "{bad}.gguf", "--set", "a=1"), "GGUFInvalidMagic"),
    (("edit", "{empty}.gguf", "--set", "a=1"), "GGUFInvalidMagic"),
    (("split", "{bad}.gguf", "{tmp}/sp", "--max-size", "1M"), "GGUFInvalidMagic"),
    (("merge", "{bad}.gguf", "{tmp}/m.gguf"), "GGUFInvalidMagic"),
    (("scan", "{missing}.pth"), "FileNotFoundError"),
]


@pytest.mark.parametrize(
    ("argv", "name"), ERROR_CASES, ids=[c[0][0] + str(i) for i, c in enumerate(ERROR_CASES)]
)
def test_every_command_fails_with_one_named_line(tmp_path, argv, name):
    (tmp_path / "bad.gguf").write_bytes(b"garbage, not a GGUF file\n")
    (tmp_path / "bad.safetensors").write_bytes(b"garbage, not a safetensors file\n")
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "a.txt").write_text("x")
    names = {
        "bad": tmp_path / "bad",
        "empty": tmp_path / "empty",
        "missing": tmp_path / "nope",
        "tmp": tmp_path,
    }
    args = [a.format(**names) for a in argv]
    p = run(*args)
    assert_one_line_error(p, name)
    # --debug: the same line, after the traceback
    p = run(*args, "--debug")
    assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: {name}: ")
