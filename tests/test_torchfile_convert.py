"""torch_to_safetensors against torch.load + HF safetensors' own reader."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from support.torchfile_helpers import ALL_DTYPES, _sample, glob, make_zip, s, tensor_bytes, tup
from weightsmith import errors
from weightsmith.convert import torch_to_safetensors


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and tensor_bytes(a) == tensor_bytes(b)


@pytest.mark.parametrize("legacy", [False, True])
def test_module_state_dict_with_tied_weights(tmp_path, legacy):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(16, 8)
            self.lin = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 16, bias=False)
            self.head.weight = self.embed.weight

    src = tmp_path / "m.pt"
    torch.save(Net().state_dict(), src, _use_new_zipfile_serialization=not legacy)
    ref = torch.load(src, weights_only=True)
    rep = torch_to_safetensors(src, tmp_path / "m.safetensors")
    out = load_file(tmp_path / "m.safetensors")
    assert rep.aliases == {"head.weight": "embed.weight"}
    assert set(out) == set(ref) - {"head.weight"}
    assert all(_same(out[k], ref[k]) for k in out)
    with safe_open(tmp_path / "m.safetensors", "pt") as f:
        assert f.metadata()["format"] == "pt"
        assert json.loads(f.metadata()["aliases"]) == {"head.weight": "embed.weight"}
    rep = torch_to_safetensors(src, tmp_path / "c.safetensors", share="copy")
    out = load_file(tmp_path / "c.safetensors")
    assert rep.aliases == {} and set(out) == set(ref)
    assert all(_same(out[k], ref[k]) for k in out)


def test_all_convertible_dtypes_and_views(tmp_path):
    sd = {str(dt): _sample(dt, seed=k) for k, dt in enumerate(ALL_DTYPES) if dt != torch.complex128}
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    sd.update(
        scalar=torch.tensor(1.5),
        empty=torch.zeros(0, 3),
        t=base.t(),
        strided=base[::2, 1::3],
        off=base[2:4],
    )
    src = tmp_path / "d.pt"
    torch.save(sd, src)
    ref = torch.load(src, weights_only=True)
    rep = torch_to_safetensors(src, tmp_path / "d.safetensors")
    out = load_file(tmp_path / "d.safetensors")
    assert set(out) == set(ref) and rep.tensors == len(ref)
    for k in ref:
        assert _same(out[k], ref[k]), k
    assert any({"t", "strided", "off"} <= set(g) for g in rep.shared)


def test_non_tensors_reported_and_optionally_stored(tmp_path):
    src = tmp_path / "n.pt"
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 7, "tag": "best"}, src)
    rep = torch_to_safetensors(src, tmp_path / "a.safetensors")
    assert rep.non_tensors == {"epoch": "7", "tag": "best"} and not rep.non_tensors_in_metadata
    with safe_open(tmp_path / "a.safetensors", "pt") as f:
        assert "epoch" not in f.metadata() and list(f.keys()) == ["model.w"]
    torch_to_safetensors(src, tmp_path / "b.safetensors", non_tensors="metadata")
    with safe_open(tmp_path / "b.safetensors", "pt") as f:
        assert f.metadata()["epoch"] == "7" and f.metadata()["tag"] == "best"


def test_sharded_output_and_sharded_input(tmp_path):
    sd = {f"layer{k}.weight": torch.randn(64, 64) for k in range(5)}
    src = tmp_path / "s.pt"
    torch.save(sd, src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rep = torch_to_safetensors(src, out_dir, max_shard_size=40_000)
    index = json.loads((out_dir / "model.safetensors.index.json").read_text())
    assert len(rep.files) == 4 and set(index["weight_map"]) == set(sd)
    assert index["metadata"]["total_size"] == 5 * 64 * 64 * 4
    for name, fname in index["weight_map"].items():
        assert _same(load_file(out_dir / fname)[name], sd[name])
    # transformers-style .bin shards in, one file out
    bins = tmp_path / "bins"
    bins.mkdir()
    wmap = {}
    for k, names in enumerate([["layer0.weight", "layer1.weight"], ["layer2.weight"]]):
        fname = f"pytorch_model-0000{k + 1}-of-00002.bin"
        torch.save({n: sd[n] for n in names}, bins / fname)
        wmap.update(dict.fromkeys(names, fname))
    (bins / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wmap}))
    torch_to_safetensors(bins, tmp_path / "one.safetensors")
    out = load_file(tmp_path / "one.safetensors")
    assert set(out) == set(wmap) and all(_same(out[n], sd[n]) for n in out)


def test_nothing_written_on_refusal(tmp_path):
    src = tmp_path / "c.pt"
    torch.save({"z": torch.zeros(2, dtype=torch.complex128)}, src)
    with pytest.raises(errors.UnsupportedTorchDtype):
        torch_to_safetensors(src, tmp_path / "c.safetensors")
    evil = make_zip(
        tmp_path / "e.pt", b"\x80\x02" + glob("os", "system") + tup(s("touch x")) + b"R.", {}
    )
    with pytest.raises(errors.UnsafePickleError):
        torch_to_safetensors(evil, tmp_path / "e.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt", "e.pt"]


def test_expanded_view_larger_than_file_is_refused(tmp_path):
    from support.torchfile_helpers import dict_, storage, tensor_v2

    pkl = (
        b"\x80\x02"
        + dict_(("w", tensor_v2(storage("FloatStorage", "0", 1), 0, (2**20, 2**20), (0, 0))))
        + b"."
    )
    src = make_zip(tmp_path / "x.pt", pkl, {"0": bytes(4)})
    with pytest.raises(errors.TensorLargerThanFile):
        torch_to_safetensors(src, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_conversion_never_imports_torch(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "m.pt"
    torch.save({"w": torch.randn(3, 3), "f8": torch.ones(2).to(torch.float8_e4m3fn)}, src)
    code = (
        "import sys\n"
        "class Block:\n"  # any import of torch now fails
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('torch is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from weightsmith.convert import torch_to_safetensors\n"
        "import weightsmith.torchfile as tf\n"
        f"torch_to_safetensors({str(src)!r}, {str(tmp_path / 'm.safetensors')!r})\n"
        f"assert tf.scan({str(src)!r}).safe\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    out = load_file(tmp_path / "m.safetensors")
    ref = torch.load(src, weights_only=True)
    assert all(_same(out[k], ref[k]) for k in ref)
