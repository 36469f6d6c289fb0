"""``weightsmith convert`` through the console script: .pth -> safetensors, safetensors
casts and resharding, HF <-> GGUF."""

from __future__ import annotations

import json
import shutil

import gguf
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as hf_load

from support.cli_helpers import assert_one_line_error, build_hf_llama, run

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
    return build_hf_llama(tmp_path_factory.mktemp("cli_hf"))


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
    assert not (tmp_path / "o").exists()


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
