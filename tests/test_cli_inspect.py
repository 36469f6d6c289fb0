"""``weightsmith inspect`` through the console script: local and remote targets, --json schema."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from support.cli_helpers import SCHEMA, assert_one_line_error, run, run_json
from support.nginx_fixture import TOKEN
from support.remote_oracles import gguf_counts, gguf_tensors, hf_counts, hf_tensors, hub_counts


def _counts(data: dict) -> dict[str, int]:
    return {k: v["parameters"] for k, v in data["dtypes"].items()}


# --------------------------------------------------------------------------- local


def test_json_safetensors_file(remote_tree):
    path = remote_tree.files / "small.safetensors"
    data = run_json("inspect", path)
    assert data["format"] == "safetensors" and data["remote"] is None
    assert _counts(data) == hf_counts(path)
    assert {t["name"]: (t["dtype"], tuple(t["shape"])) for t in data["tensors"]} == hf_tensors(path)
    assert data["totals"]["parameters"] == sum(hf_counts(path).values())
    assert data["totals"]["bytes"] == sum(t["bytes"] for t in data["tensors"])
    bpw = 8 * data["totals"]["bytes"] / data["totals"]["parameters"]
    assert data["totals"]["bits_per_weight"] == pytest.approx(bpw)
    assert [g["name"] for g in data["layers"]] == [
        "model.layers.0",
        "model.layers.1",
        "model.layers.2",
    ]
    assert data["files"][0]["metadata"] == {"format": "pt"}
    # offsets are absolute: 8 + N + data_offsets[0]
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    for t in data["tensors"]:
        assert t["offset"] == 8 + n + header[t["name"]]["data_offsets"][0]


def test_json_gguf_file(remote_tree):
    path = remote_tree.files / "model.gguf"
    data = run_json("inspect", path)
    assert data["format"] == "gguf"
    assert _counts(data) == gguf_counts(path)
    oracle = gguf_tensors(path)
    assert {
        t["name"]: (t["dtype"], tuple(t["shape"]), t["offset"]) for t in data["tensors"]
    } == oracle
    meta = data["files"][0]["metadata"]
    assert meta["general.architecture"] == "llama"
    assert meta["tokenizer.ggml.tokens"]["array_length"] == 15_000
    assert [g["name"] for g in data["layers"]] == ["blk.0", "blk.1"]


def test_folder_index_and_split(remote_tree):
    folder = remote_tree.files / "sharded"
    shards = sorted(folder.glob("*.safetensors"))
    for target in (folder, folder / "model.safetensors.index.json"):
        data = run_json("inspect", target)
        assert _counts(data) == hf_counts(*shards)
        assert len(data["files"]) == 3
        assert (
            data["index_metadata"]
            == json.loads((folder / "model.safetensors.index.json").read_text())["metadata"]
        )
    split = sorted((remote_tree.files / "split").glob("*.gguf"))
    data = run_json("inspect", split[2])
    assert _counts(data) == gguf_counts(*split)
    assert [f["path"] for f in data["files"]] == [str(p) for p in split]


def test_pytorch_checkpoint(tmp_path):
    sd = {
        "model.layers.0.w.weight": torch.randn(8, 4),
        "model.layers.0.b.bias": torch.zeros(8, dtype=torch.float16),
        "emb.weight": torch.ones(3, 5, dtype=torch.bfloat16),
    }
    torch.save(sd, tmp_path / "pytorch_model.bin")
    data = run_json("inspect", tmp_path / "pytorch_model.bin")
    assert data["format"] == "pytorch"
    assert {t["name"]: (t["dtype"], tuple(t["shape"])) for t in data["tensors"]} == {
        "model.layers.0.w.weight": ("F32", (8, 4)),
        "model.layers.0.b.bias": ("F16", (8,)),
        "emb.weight": ("BF16", (3, 5)),
    }
    assert data["totals"]["parameters"] == sum(t.numel() for t in sd.values())


def test_filter_and_no_tensors(remote_tree):
    path = remote_tree.files / "small.safetensors"
    data = run_json("inspect", path, "--tensors", "*q_proj*")
    assert [t["name"] for t in data["tensors"]] == [
        f"model.layers.{i}.self_attn.q_proj.weight" for i in range(3)
    ]
    # totals are of the whole model, not of the filtered table
    assert data["totals"]["parameters"] == sum(hf_counts(path).values())
    data = run_json("inspect", path, "--tensors", "norm")
    assert all("norm" in t["name"] for t in data["tensors"]) and len(data["tensors"]) == 4
    data = run_json("inspect", path, "--no-tensors")
    assert "tensors" not in data


def test_text_output_tree(remote_tree):
    p = run("inspect", remote_tree.files / "small.safetensors")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "Tensors (grouped by layer)" in out
    # identical layers collapse into one run; the layer's tensors are listed once, relative
    assert "  model.layers.0–2 " in out and "× 3 layers" in out
    assert "\n    self_attn.q_proj.weight " in out
    assert "Parameters by dtype" in out and "bits per weight" in out
    p = run("inspect", remote_tree.files / "small.safetensors", "--all-layers")
    assert "\n  model.layers.1 " in p.stdout and "–" not in p.stdout
    p = run("inspect", remote_tree.files / "model.gguf", "--no-tensors")
    assert "tokenizer.ggml.tokens" in p.stdout and "[15000 × " in p.stdout
    assert "Tensors" not in p.stdout


def test_schema_is_strict():
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 1}, SCHEMA)


# --------------------------------------------------------------------------- errors


def test_missing_target_is_one_line(tmp_path):
    assert_one_line_error(run("inspect", tmp_path / "nope.safetensors"), "UnknownTargetError")


def test_corrupt_file_names_the_rule(tmp_path, remote_tree):
    bad = tmp_path / "bad.safetensors"
    data = bytearray((remote_tree.files / "small.safetensors").read_bytes())
    data[8] = ord("[")  # the header must begin with "{"
    bad.write_bytes(bytes(data))
    assert_one_line_error(run("inspect", bad), "HeaderNotBrace")
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(bytes(data[:-1]))
    data[8] = ord("{")
    truncated.write_bytes(bytes(data[:-1]))
    assert_one_line_error(run("inspect", truncated), "TruncatedData")
    p = run("--debug", "inspect", bad)
    assert p.returncode == 1 and "Traceback" in p.stderr and "HeaderNotBrace" in p.stderr


def test_bad_gguf_is_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 20)
    p = run("inspect", bad)
    assert p.returncode == 1 and p.stderr.startswith("error: GGUF") and "Traceback" not in p.stderr


def test_usage_error_exit_2():
    p = run("inspect")
    assert p.returncode == 2 and "usage:" in p.stderr


# --------------------------------------------------------------------------- remote


def test_remote_url_json(nginx, remote_tree):
    data = run_json("inspect", f"{nginx.url}/files/small.safetensors")
    assert _counts(data) == hf_counts(remote_tree.files / "small.safetensors")
    assert data["remote"]["requests"] == 1
    assert len(nginx.wait_logged(1)) == 1


def test_hub_repo_through_hf_endpoint(nginx, remote_tree, tmp_path):
    env = {"HF_ENDPOINT": nginx.url}
    data = run_json("inspect", "org/sharded", env=env)
    assert _counts(data) == hub_counts(nginx.url, "org/sharded", None, tmp_path)
    assert data["remote"]["requests"] == 5  # 404 probe, index, three shards
    data = run_json("inspect", "hf://org/ggufrepo@main/model.gguf", env=env)
    assert _counts(data) == gguf_counts(remote_tree.files / "model.gguf")


def test_hub_token_option_and_env(nginx):
    env = {"HF_ENDPOINT": nginx.url, "HF_TOKEN": ""}
    assert_one_line_error(run("inspect", "org/private", env=env), "RemoteAuthError")
    data = run_json("inspect", "org/private", "--token", TOKEN, env=env)
    assert data["totals"]["parameters"] > 0
    data = run_json("inspect", "org/private", env={**env, "HF_TOKEN": TOKEN})
    assert data["totals"]["parameters"] > 0
    lines2 = nginx.wait_logged(2, "log2")
    assert len(lines2) == 2 and all(ln.auth == "" for ln in lines2)


def test_remote_missing_file(nginx):
    assert_one_line_error(run("inspect", f"{nginx.url}/files/nope.safetensors"), "RemoteNotFound")


def test_connection_refused_is_one_line():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert_one_line_error(
        run("inspect", f"http://127.0.0.1:{port}/x.safetensors"), "RemoteConnectionError"
    )


def test_local_copy_of_remote_counts_equal(nginx, remote_tree, tmp_path):
    local = tmp_path / "model.safetensors"
    shutil.copy(remote_tree.files / "big.safetensors", local)
    a = run_json("inspect", local)
    b = run_json("inspect", f"{nginx.url}/files/big.safetensors")
    assert a["dtypes"] == b["dtypes"] and a["totals"] == b["totals"]
    assert [t["name"] for t in a["tensors"]] == [t["name"] for t in b["tensors"]]


def test_gguf_folder_one_model_or_a_clear_error(tmp_path, remote_tree):
    split = sorted((remote_tree.files / "split").glob("*.gguf"))
    folder = tmp_path / "g"
    folder.mkdir()
    for p in split:
        shutil.copy(p, folder / p.name)
    data = run_json("inspect", folder)
    assert _counts(data) == gguf_counts(*split)
    shutil.copy(remote_tree.files / "model.gguf", folder / "other.gguf")
    p = run("inspect", folder)
    assert_one_line_error(p, "UnknownTargetError")
    assert "other.gguf" in p.stderr and "model-00001-of-00003.gguf" in p.stderr
