"""torchfile values against torch.load(weights_only=True) on files torch.save wrote."""

from __future__ import annotations

import json
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

from support.torchfile_helpers import (
    ALL_DTYPES,
    _sample,
    dict_,
    make_zip,
    rezip,
    storage,
    tensor_bytes,
    tensor_v2,
)
from weightsmith import errors, torchfile


def _lookup(obj, dotted: str):
    """Follow a dotted name through dicts (whose keys may hold dots) and lists."""
    parts = dotted.split(".")
    while parts:
        if isinstance(obj, dict):
            for n in range(len(parts), 0, -1):
                key = ".".join(parts[:n])
                if key in obj or (key.isdigit() and int(key) in obj):
                    obj = obj[key] if key in obj else obj[int(key)]
                    parts = parts[n:]
                    break
            else:
                raise KeyError(dotted)
        else:
            obj, parts = obj[int(parts[0])], parts[1:]
    return obj


def _assert_same(ck, ref) -> None:
    """Every tensor of ck equals the one torch.load found at the same dotted name."""
    assert len(ck) > 0
    for name in ck:
        t = _lookup(ref, name) if name != "tensor" else ref
        a = ck[name]
        assert a.shape == tuple(t.shape), name
        assert str(t.dtype) == f"torch.{ck.tensors[name].torch_dtype}", name
        assert np.ascontiguousarray(a).tobytes() == tensor_bytes(t), name


# torch.load cannot read its own legacy files for dtypes saved as an
# UntypedStorage (float8, uint16/32/64): torch writes them, we read them.
UNTYPED = {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
           "uint16", "uint32", "uint64"}  # fmt: skip


@pytest.mark.parametrize("legacy", [False, True])
def test_all_dtypes(tmp_path, legacy):
    sd = {str(dt).removeprefix("torch."): _sample(dt, seed=k) for k, dt in enumerate(ALL_DTYPES)}
    p = tmp_path / "d.pt"
    torch.save(sd, p, _use_new_zipfile_serialization=not legacy)
    with torchfile.open(p) as ck:
        assert ck.layout == ("legacy" if legacy else "zip")
        assert set(ck) == set(sd)
        _assert_same(ck, sd)
        for name, info in ck.tensors.items():
            assert info.torch_dtype == name
    if legacy:
        typed = {k: v for k, v in sd.items() if k not in UNTYPED}
        torch.save(typed, p, _use_new_zipfile_serialization=False)
        with torchfile.open(p) as ck:
            _assert_same(ck, torch.load(p, weights_only=True))
    else:
        with torchfile.open(p) as ck:
            _assert_same(ck, torch.load(p, weights_only=True))


@pytest.mark.parametrize("legacy", [False, True])
def test_scalars_empty_and_views(tmp_path, legacy):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    sd = {
        "scalar": torch.tensor(2.5),
        "int_scalar": torch.tensor(7, dtype=torch.int64),
        "empty": torch.zeros(0, 4),
        "empty_slice": base[3:3],
        "base": base,
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "offset": base[2:5, 3:7],
        "row": base[4],
        "expanded": torch.arange(3.0).expand(4, 3),
    }
    p = tmp_path / "v.pt"
    torch.save(sd, p, _use_new_zipfile_serialization=not legacy)
    ref = torch.load(p, weights_only=True)
    with torchfile.open(p) as ck:
        _assert_same(ck, ref)
        assert ck["scalar"].shape == () and ck["empty"].shape == (0, 4)
        assert not ck["transposed"].flags.c_contiguous  # a view, not a copy
        assert ck.tensors["offset"].offset == 2 * 8 + 3
        group = next(g for g in ck.shared if "base" in g)
        assert {"transposed", "strided", "offset", "row"} <= set(group)


def test_zero_copy_from_mmap(tmp_path):
    p = tmp_path / "z.pt"
    torch.save({"w": torch.randn(64, 64)}, p)
    with torchfile.open(p) as ck:
        a = ck["w"]
        assert not a.flags.writeable and not a.flags.owndata
        assert a.ctypes.data % 64 == 0  # torch aligns records; we read them in place


def test_tied_weights_and_module_state_dict(tmp_path):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.norm = torch.nn.LayerNorm(4)
            self.lin = torch.nn.Linear(4, 3)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight  # tied
            self.register_buffer("steps", torch.tensor(5))

    net = Net()
    p = tmp_path / "m.pt"
    torch.save(net.state_dict(), p)
    ref = torch.load(p, weights_only=True)
    with torchfile.open(p) as ck:
        _assert_same(ck, ref)
        assert set(ck) == set(ref)
        assert ck.aliases == {"head.weight": "embed.weight"}
        assert "" in ck.dict_state and "_metadata" in ck.dict_state[""]  # reported, not flattened


def test_parameters_and_tensor_attributes(tmp_path):
    t = torch.randn(3)
    t.note = "x"  # torch.save writes _rebuild_from_type_v2 for this
    sd = {"p": torch.nn.Parameter(torch.randn(2, 2)), "t": t}
    p = tmp_path / "p.pt"
    torch.save(sd, p)
    with torchfile.open(p) as ck:
        _assert_same(ck, torch.load(p, weights_only=True))
        assert ck.tensors["p"].parameter


@pytest.mark.parametrize("legacy", [False, True])
def test_nested_state_dicts(tmp_path, legacy):
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters(), lr=0.1)
    lin(torch.randn(4, 3)).sum().backward()
    opt.step()
    obj = {
        "model": lin.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 3,
        "name": "run-7",
        "layers": [torch.ones(2), {"inner": torch.zeros(1, dtype=torch.int8)}],
    }
    p = tmp_path / "n.pt"
    torch.save(obj, p, _use_new_zipfile_serialization=not legacy)
    ref = torch.load(p, weights_only=True)
    with torchfile.open(p) as ck:
        _assert_same(ck, ref)
        assert {
            "model.weight",
            "model.bias",
            "layers.0",
            "layers.1.inner",
            "optimizer.state.0.exp_avg",
        } <= set(ck)
        assert ck.non_tensors["epoch"] == 3 and ck.non_tensors["name"] == "run-7"
        assert ck.non_tensors["optimizer.param_groups.0.lr"] == 0.1
        assert ck.non_tensors["optimizer.param_groups.0.betas"] == (0.9, 0.999)
        meta = ck.metadata_strings()
        assert meta["epoch"] == "3" and meta["name"] == "run-7"


def test_single_tensor_file(tmp_path):
    p = tmp_path / "t.pt"
    torch.save(torch.arange(5), p)
    with torchfile.open(p) as ck:
        assert list(ck) == ["tensor"]
        assert ck["tensor"].tolist() == torch.load(p, weights_only=True).tolist()


def _swap(data: bytes, unit: int) -> bytes:
    return np.frombuffer(data, dtype=f"<u{unit}").byteswap().tobytes() if unit > 1 else data


def test_big_endian_byteorder_record(tmp_path):
    dts = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int16,
           torch.complex64, torch.complex128, torch.uint32, torch.int8, torch.bool]  # fmt: skip
    sd = {str(dt): _sample(dt, seed=k) for k, dt in enumerate(dts)}
    sd["view"] = sd["torch.float32"].t()[1:]
    src = tmp_path / "le.pt"
    torch.save(sd, src)
    unit = {
        str(k): (dt.itemsize // 2 if dt.is_complex else dt.itemsize) for k, dt in enumerate(dts)
    }

    def to_big(name, data):
        if name.endswith("/byteorder"):
            return b"big"
        if "/data/" in name:
            return _swap(data, unit[name.rsplit("/", 1)[1]])
        return data

    dst = rezip(src, tmp_path / "be.pt", transform=to_big)  # also unaligned: python's zipfile
    ref = torch.load(dst, weights_only=True)  # torch byte-swaps big-endian records
    # torch 2.13 forgets to swap uint16/32/64 storages (it reads 1 as 16777216);
    # for those the oracle is the tensor that was saved
    ref["torch.uint32"] = sd["torch.uint32"]
    with torchfile.open(dst) as ck:
        assert ck.byteorder == "big"
        _assert_same(ck, ref)
        assert ck["torch.float32"].tolist() == sd["torch.float32"].tolist()


def test_deflated_and_odd_archive_name(tmp_path):
    src = tmp_path / "a.pt"
    sd = {"w": torch.randn(4, 4), "b": torch.arange(3)}
    torch.save(sd, src)
    dst = rezip(
        src,
        tmp_path / "b.pt",
        rename=lambda n: "we ird..ü name/" + n.split("/", 1)[1],
        compression=zipfile.ZIP_DEFLATED,
    )
    with torchfile.open(dst) as ck:
        _assert_same(ck, torch.load(dst, weights_only=True))


def test_sharded_bin_with_index(tmp_path):
    parts = [
        {"a.weight": torch.randn(3, 3), "a.bias": torch.randn(3)},
        {"b.weight": torch.randn(2, 3)},
    ]
    names = [f"pytorch_model-0000{k + 1}-of-00002.bin" for k in range(2)]
    wmap = {}
    for part, fname in zip(parts, names):
        torch.save(part, tmp_path / fname)
        wmap.update(dict.fromkeys(part, fname))
    (tmp_path / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": 1}, "weight_map": wmap})
    )
    merged = {**parts[0], **parts[1]}
    for target in (tmp_path, tmp_path / "pytorch_model.bin.index.json"):
        with torchfile.open(target) as ck:
            assert ck.layout == "sharded"
            _assert_same(ck, merged)
    wmap["c.weight"] = names[1]  # index claims a tensor the shard lacks
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(errors.ShardTensorMismatch):
        torchfile.open(tmp_path)
    wmap["c.weight"] = "pytorch_model-00009-of-00002.bin"
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(errors.MissingShard):
        torchfile.open(tmp_path)


def test_scan_reports_safe_file(tmp_path):
    p = tmp_path / "s.pt"
    torch.save({"w": torch.randn(2), "f8": torch.zeros(2, dtype=torch.float8_e5m2)}, p)
    rep = torchfile.scan(p)
    assert rep.safe and rep.supported and rep.reasons == []
    assert "torch._utils._rebuild_tensor_v2" in rep.globals
    assert "torch.float8_e5m2" in rep.globals
    assert rep.opcode_classes["persistent-id"] == 2
    assert "weights-only safe" in str(rep)
    legacy = tmp_path / "l.pt"
    torch.save({"w": torch.randn(2)}, legacy, _use_new_zipfile_serialization=False)
    rep = torchfile.scan(legacy)
    assert rep.safe and rep.layout == "legacy" and len(rep.pickles) == 5


# ----------------------------------------------------------------------------- bad containers
def _one_tensor_zip(tmp_path, size, stride, offset=0, numel=6, record=None):
    pkl = (
        b"\x80\x02"
        + dict_(("w", tensor_v2(storage("FloatStorage", "0", numel), offset, size, stride)))
        + b"."
    )
    data = record if record is not None else bytes(4 * numel)
    return make_zip(tmp_path / "c.pt", pkl, {"0": data})


def test_hand_built_checkpoint_reads(tmp_path):
    data = np.arange(6, dtype=np.float32).tobytes()
    p = _one_tensor_zip(tmp_path, (2, 2), (1, 2), offset=1, record=data)
    with torchfile.open(p) as ck:
        assert ck["w"].tolist() == torch.load(p, weights_only=True)["w"].tolist()


@pytest.mark.parametrize(
    ("size", "stride", "offset"),
    [
        ((2, 3), (3, 1), 1),
        ((7,), (1,), 0),
        ((2,), (6,), 0),
        ((1,), (1,), 6),
        ((2**40, 2**40), (1, 1), 0),
    ],
)
def test_view_outside_storage_is_refused(tmp_path, size, stride, offset):
    p = _one_tensor_zip(tmp_path, size, stride, offset)
    with pytest.raises(errors.StorageOutOfBounds) as e:
        torchfile.open(p)
    assert e.value.field == "w"


def test_record_size_mismatch(tmp_path):
    p = _one_tensor_zip(tmp_path, (6,), (1,), record=bytes(20))
    with pytest.raises(errors.StorageSizeMismatch):
        torchfile.open(p)


def test_missing_records_and_bad_byteorder(tmp_path):
    pkl = (
        b"\x80\x02" + dict_(("w", tensor_v2(storage("FloatStorage", "0", 1), 0, (1,), (1,)))) + b"."
    )
    with pytest.raises(errors.MissingRecord):
        torchfile.open(make_zip(tmp_path / "a.pt", pkl, {}))
    with pytest.raises(errors.UnknownByteOrder):
        torchfile.open(make_zip(tmp_path / "b.pt", pkl, {"0": bytes(4)}, byteorder="middle"))
    with zipfile.ZipFile(tmp_path / "c.pt", "w") as z:
        z.writestr("archive/version", "3")
    with pytest.raises(errors.MissingRecord):
        torchfile.open(tmp_path / "c.pt")


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "x.pt").write_bytes(b"hello world")
    with pytest.raises(errors.NotATorchFile):
        torchfile.open(tmp_path / "x.pt")
    (tmp_path / "e.pt").write_bytes(b"")
    with pytest.raises(errors.NotATorchFile):
        torchfile.open(tmp_path / "e.pt")


def test_legacy_truncated_storage(tmp_path):
    p = tmp_path / "l.pt"
    torch.save({"w": torch.randn(100)}, p, _use_new_zipfile_serialization=False)
    data = p.read_bytes()
    (tmp_path / "t.pt").write_bytes(data[:-10])
    with pytest.raises(errors.StorageSizeMismatch):
        torchfile.open(tmp_path / "t.pt")
    n = struct.unpack_from("<q", data, len(data) - 400 - 8)[0]
    assert n == 100  # the layout the docstring describes


def test_flat_name_collision(tmp_path):
    p = tmp_path / "n.pt"
    torch.save(OrderedDict([("a.b", torch.ones(1)), ("a", {"b": torch.zeros(1)})]), p)
    with pytest.raises(errors.FlatNameCollision):
        torchfile.open(p)


def test_legacy_storage_views(tmp_path):
    """Legacy persistent ids may name a view (key, offset, numel) of a root storage."""
    import pickle

    from support.torchfile_helpers import MARK, TUPLE, glob, i, s, tup

    def view_storage(view):
        v = b"N" if view is None else tup(s(view[0]), i(view[1]), i(view[2]))
        return (
            MARK
            + s("storage")
            + glob("torch", "FloatStorage")
            + s("root")
            + s("cpu")
            + i(10)
            + v
            + TUPLE
            + b"Q"
        )

    def rebuild(stor, offset, size, stride):
        return glob("torch._utils", "_rebuild_tensor_v2") + tup(
            stor, i(offset), tup(*map(i, size)), tup(*map(i, stride)), b"\x89", glob("collections", "OrderedDict") + b")R"
        ) + b"R"  # fmt: skip

    main = b"\x80\x02" + dict_(
        ("whole", rebuild(view_storage(None), 0, (10,), (1,))),
        ("view", rebuild(view_storage(("v1", 4, 5)), 1, (2, 2), (1, 2))),
    ) + b"."  # fmt: skip
    head = b"".join(
        pickle.dumps(x, protocol=2)
        for x in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True})
    )
    body = (
        pickle.dumps(["root"], protocol=2)
        + struct.pack("<q", 10)
        + np.arange(10, dtype=np.float32).tobytes()
    )
    p = tmp_path / "views.pt"
    p.write_bytes(head + main + body)
    ref = torch.load(p, weights_only=True)  # torch's own reading of the view
    with torchfile.open(p) as ck:
        _assert_same(ck, ref)
        assert ck["view"].tolist() == [[5.0, 7.0], [6.0, 8.0]]


def test_quantized_and_sparse_are_safe_but_unsupported(tmp_path):
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    sp = torch.eye(3).to_sparse()
    for k, obj in enumerate([{"q": q}, {"sp": sp}]):
        p = tmp_path / f"u{k}.pt"
        torch.save(obj, p)
        torch.load(p, weights_only=True)  # torch considers these weights-only safe
        rep = torchfile.scan(p)
        assert rep.safe and not rep.supported, str(rep)
        with pytest.raises(errors.UnsupportedPickleGlobal) as e:
            torchfile.open(p)
        assert not isinstance(e.value, errors.UnsafePickleError)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("legacy", [False, True])
def test_pickle_protocols(tmp_path, protocol, legacy):
    """torch.save(pickle_protocol=4/5) uses FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE."""
    lin = torch.nn.Linear(5, 4)
    obj = {
        "model": lin.state_dict(),
        "half": torch.randn(3, 2).half().t(),
        "step": 10,
        "ids": {1, 2},
    }
    p = tmp_path / "p.pt"
    torch.save(obj, p, pickle_protocol=protocol, _use_new_zipfile_serialization=not legacy)
    # torch's weights-only loader knows no FRAME opcode (protocol 4+): the file is ours, so load it fully
    ref = torch.load(p, weights_only=protocol <= 3)
    with torchfile.open(p) as ck:
        _assert_same(ck, ref)
        assert ck.non_tensors["step"] == 10 and ck.non_tensors["ids"] == {1, 2}
    assert torchfile.scan(p).safe
