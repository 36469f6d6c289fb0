"""Sharded checkpoints: transformers / huggingface_hub as the oracles."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from huggingface_hub import split_torch_state_dict_into_shards
from huggingface_hub.serialization._base import parse_size_to_int

import weightsmith
from weightsmith import errors as E
from weightsmith.safetensors import INDEX_NAME, parse_size, read_index


def test_layout_byte_identical_to_transformers(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path / "hf", max_shard_size="20KB")
    written = weightsmith.save_sharded(model.state_dict(), tmp_path / "ws", max_shard_size="20KB")
    hf_files = sorted(p.name for p in (tmp_path / "hf").iterdir() if "safetensors" in p.name)
    assert sorted(written) == hf_files
    assert len(hf_files) > 3
    for name in hf_files:  # every shard and the index, byte for byte
        assert (tmp_path / "ws" / name).read_bytes() == (tmp_path / "hf" / name).read_bytes(), name


def test_split_matches_huggingface_hub(tmp_path):
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 300, 40)
    sd = {f"layer.{i}.w": torch.zeros(int(n), dtype=torch.float32) for i, n in enumerate(sizes)}
    sd["huge"] = torch.zeros(2000)
    split = split_torch_state_dict_into_shards(sd, max_shard_size=1000)
    weightsmith.save_sharded(sd, tmp_path, max_shard_size=1000)
    index = read_index(tmp_path / INDEX_NAME)
    assert index["weight_map"] == split.tensor_to_filename
    assert index["metadata"]["total_size"] == split.metadata["total_size"]
    raw = (tmp_path / INDEX_NAME).read_text()
    assert raw == json.dumps(json.loads(raw), indent=2, sort_keys=True) + "\n"


def test_single_shard_is_plain_file_and_stale_shards_go(tmp_path):
    sd = {f"t{i}": np.full(100, i, np.float32) for i in range(6)}
    first = weightsmith.save_sharded(sd, tmp_path, max_shard_size="1KB")
    assert INDEX_NAME in first and len(first) == 4
    second = weightsmith.save_sharded(sd, tmp_path)  # 5GB: one shard
    assert second == ["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    with weightsmith.open_checkpoint(tmp_path) as ck:
        assert ck.keys() == sorted(sd)
        assert ck.metadata() == {"format": "pt"}


def test_open_checkpoint_is_lazy_and_complete(tmp_path):
    sd = {f"t{i}": np.arange(200, dtype=np.float32) + i for i in range(8)}
    weightsmith.save_sharded(sd, tmp_path, max_shard_size="2KB")
    for target in (tmp_path, tmp_path / INDEX_NAME):
        with weightsmith.open_checkpoint(target) as ck:
            assert ck._handles == {}  # nothing mapped yet
            assert len(ck) == 8 and "t3" in ck
            np.testing.assert_array_equal(ck.get_tensor("t3"), sd["t3"])
            assert len(ck._handles) == 1  # only the shard holding t3
            np.testing.assert_array_equal(ck.get_slice("t5")[-3:], sd["t5"][-3:])
            assert ck.metadata()["total_size"] == 8 * 800
            assert ck.weight_map()["t0"].startswith("model-00001-of-")
            with pytest.raises(E.TensorNotFound):
                ck.get_tensor("nope")
        with pytest.raises(E.ClosedFileError):
            ck.get_tensor("t0")
    with weightsmith.open_checkpoint(tmp_path, "pt") as ck:
        got = ck.get_tensors()
        assert set(got) == set(sd) and torch.equal(got["t7"], torch.from_numpy(sd["t7"]))


def test_missing_shard(tmp_path):
    weightsmith.save_sharded(
        {f"t{i}": np.zeros(300, np.float32) for i in range(4)}, tmp_path, "2KB"
    )
    victim = sorted(tmp_path.glob("model-0000*"))[1]
    victim.unlink()
    with pytest.raises(E.MissingShard) as info:
        weightsmith.open_checkpoint(tmp_path)
    assert victim.name in str(info.value)


def test_duplicate_tensor_in_index(tmp_path):
    weightsmith.save_sharded(
        {f"t{i}": np.zeros(300, np.float32) for i in range(4)}, tmp_path, "2KB"
    )
    idx = tmp_path / INDEX_NAME
    text = idx.read_text().replace(
        '"weight_map": {', '"weight_map": {\n    "t0": "model-00001-of-00004.safetensors",', 1
    )
    idx.write_text(text)
    with pytest.raises(E.DuplicateShardTensor):
        weightsmith.open_checkpoint(tmp_path)


def test_duplicate_tensor_across_shards(tmp_path):
    weightsmith.save_file({"a": np.zeros(2, np.float32)}, tmp_path / "one.safetensors")
    weightsmith.save_file({"a": np.ones(2, np.float32)}, tmp_path / "two.safetensors")
    with pytest.raises(E.DuplicateShardTensor) as info:
        weightsmith.open_checkpoint(tmp_path)
    assert "'a'" in str(info.value)


def test_invalid_index(tmp_path):
    (tmp_path / INDEX_NAME).write_text("{not json")
    with pytest.raises(E.InvalidIndex):
        weightsmith.open_checkpoint(tmp_path)
    (tmp_path / INDEX_NAME).write_text('{"metadata": {}}')
    with pytest.raises(E.InvalidIndex):
        read_index(tmp_path / INDEX_NAME)
    (tmp_path / INDEX_NAME).write_text('{"weight_map": {"a": "../x.safetensors"}}')
    with pytest.raises(E.InvalidIndex):
        read_index(tmp_path / INDEX_NAME)
    weightsmith.save_file({"a": np.zeros(1, np.float32)}, tmp_path / "s.safetensors")
    (tmp_path / INDEX_NAME).write_text(
        '{"weight_map": {"a": "s.safetensors", "b": "s.safetensors"}}'
    )
    with pytest.raises(E.InvalidIndex, match="'b'"):
        weightsmith.open_checkpoint(tmp_path)


@pytest.mark.parametrize("text", ["5GB", "500MB", "10KB", "1TB", "1.5GB", " 7 MB "])
def test_parse_size_decimal_like_huggingface_hub(text):
    assert parse_size(text) == parse_size_to_int(text)


def test_parse_size_binary_bits_and_errors():
    assert parse_size("5GiB") == 5 * 2**30
    assert parse_size("3MiB") == 3 * 2**20
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("8Gb") == 10**9  # bits, as in transformers
    assert parse_size(1234) == 1234
    assert parse_size("1234") == 1234
    for bad in ["", "GB", "5XB", "-1GB", "five", 0, -5, 1.5, True, "0KB"]:
        with pytest.raises(E.InvalidSize):
            parse_size(bad)
    with pytest.raises(E.InvalidSize):
        weightsmith.save_sharded({"a": np.zeros(1)}, "/tmp/never-created-ws", max_shard_size="huge")


def test_index_with_an_integer_past_the_digit_limit(tmp_path):
    (tmp_path / INDEX_NAME).write_text('{"metadata": {"total_size": %s}}' % ("9" * 5000))
    with pytest.raises(E.InvalidIndex):
        read_index(tmp_path / INDEX_NAME)
