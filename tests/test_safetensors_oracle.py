"""HF ``safetensors`` as the oracle, both directions, every dtype both can express.

* we write -> HF parses (``safetensors.deserialize``: its full validation,
  raw bytes for every dtype, F6 included) and HF loads (numpy / torch);
* HF writes (``safetensors.serialize`` with raw pointers, and
  ``safetensors.torch``) -> we load equal;
* and the two files are byte-identical (0 or 1 metadata keys).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as hf_np
import safetensors.torch as hf_pt
import torch
from safetensors import TensorSpec

import weightsmith
import weightsmith.numpy as ws_np
import weightsmith.torch as ws_pt
from weightsmith.dtypes import SAFETENSORS

ALL = list(SAFETENSORS)
# dtype codes HF's serializer accepts (its TensorSpec names); F6 has none.
HF_WRITABLE = [c for c in ALL if not c.startswith("F6_")]
TORCH_CODES = [c for c in ALL if c == "F4" or SAFETENSORS[c].torch is not None]
HF_NUMPY_LOADS = [
    "BOOL",
    "U8",
    "I8",
    "I16",
    "U16",
    "F16",
    "I32",
    "U32",
    "F32",
    "C64",
    "F64",
    "I64",
    "U64",
]


def _random(code: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random bit patterns (NaNs included) as the numpy / ml_dtypes array."""
    d = SAFETENSORS[code]
    rng = np.random.default_rng(seed + d.order)
    n = int(np.prod(shape, dtype=np.int64))
    if d.packed:
        codes = rng.integers(0, 1 << d.bits, n, dtype=np.uint8)
        return codes.view(d.numpy).reshape(shape)
    if code == "BOOL":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    raw = rng.integers(0, 256, n * d.itemsize, dtype=np.uint8)
    return raw.view(d.numpy).reshape(shape)


def _packed_reference(codes: np.ndarray, bits: int) -> bytes:
    """Independent packing: build the little-endian bit string element by element."""
    acc = 0
    for i, c in enumerate(codes.reshape(-1).view(np.uint8).tolist()):
        acc |= (c & ((1 << bits) - 1)) << (i * bits)
    nbytes = codes.size * bits // 8
    return acc.to_bytes(nbytes, "little")


def _raw(code: str, arr: np.ndarray) -> bytes:
    d = SAFETENSORS[code]
    if d.packed:
        return _packed_reference(arr, d.bits)
    return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()


def _hf_name(code: str) -> str:
    d = SAFETENSORS[code]
    return {"F4": "float4_e2m1fn_x2", "BOOL": "bool"}.get(code, d.numpy.name)


def _hf_serialize(tensors: dict[str, tuple[str, tuple[int, ...], bytes]], metadata=None) -> bytes:
    """HF's own writer fed raw bytes (every dtype its TensorSpec knows)."""
    keep = []
    specs = {}
    for name, (code, shape, raw) in tensors.items():
        buf = np.frombuffer(raw, np.uint8).copy() if raw else np.zeros(1, np.uint8)
        keep.append(buf)
        spec_shape = list(shape)
        if code == "F4":  # HF doubles the last dim of the storage shape it is given
            spec_shape[-1] //= 2
        specs[name] = TensorSpec(
            dtype=_hf_name(code), shape=spec_shape, data_ptr=buf.ctypes.data, data_len=len(raw)
        )
    return bytes(safetensors.serialize(specs, metadata))


SHAPES = [(), (0,), (4,), (2, 6), (3, 0, 2), (2, 2, 4)]


def _shape_ok(code: str, shape) -> bool:
    d = SAFETENSORS[code]
    n = int(np.prod(shape, dtype=np.int64))
    if code == "F4" and shape and shape[-1] % 2:
        return False
    return (n * d.bits) % 8 == 0


@pytest.mark.parametrize("code", ALL)
def test_we_write_hf_parses(code):
    tensors = {f"t{i}": _random(code, s, i) for i, s in enumerate(SHAPES) if _shape_ok(code, s)}
    blob = ws_np.save(tensors)
    parsed = dict(safetensors.deserialize(blob))
    assert set(parsed) == set(tensors)
    for name, arr in tensors.items():
        assert parsed[name]["dtype"] == code
        assert list(parsed[name]["shape"]) == list(arr.shape)
        assert bytes(parsed[name]["data"]) == _raw(code, arr)


@pytest.mark.parametrize("code", HF_WRITABLE)
@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])
def test_byte_identical_with_hf(code, metadata):
    tensors = {f"t{i}": _random(code, s, i) for i, s in enumerate(SHAPES) if _shape_ok(code, s)}
    if code == "F4":
        tensors = {k: v for k, v in tensors.items() if v.shape}
    raw = {k: (code, v.shape, _raw(code, v)) for k, v in tensors.items()}
    theirs = _hf_serialize(raw, metadata)
    ours = ws_np.save(tensors, metadata)
    assert ours == theirs
    # and back: what HF wrote, we read equal
    got = weightsmith.safetensors.load(theirs)
    for name, arr in tensors.items():
        assert got[name].dtype == arr.dtype
        assert got[name].shape == arr.shape
        assert _raw(code, got[name]) == _raw(code, arr)


def test_mixed_dtypes_byte_identical_and_ordered(tmp_path):
    tensors = {f"{c.lower()}_{i}": _random(c, (2, 4), i) for i, c in enumerate(HF_WRITABLE)}
    tensors["zz_f32"] = _random("F32", (3,), 99)
    tensors["aa_f32"] = _random("F32", (5,), 98)
    raw = {k: (c, v.shape, _raw(c, v)) for k, v in tensors.items() for c in [_code(v)]}
    theirs = _hf_serialize(raw, {"k": "v"})
    ours = ws_np.save(tensors, {"k": "v"})
    assert ours == theirs
    ws_np.save_file(tensors, tmp_path / "a.safetensors", {"k": "v"})
    assert (tmp_path / "a.safetensors").read_bytes() == theirs


def _code(arr: np.ndarray) -> str:
    from weightsmith.dtypes import from_numpy

    return from_numpy(arr.dtype).name


@pytest.mark.parametrize("code", HF_NUMPY_LOADS)
def test_hf_numpy_round_trip(tmp_path, code):
    tensors = {f"t{i}": _random(code, s, i) for i, s in enumerate(SHAPES)}
    p = tmp_path / "ours.safetensors"
    ws_np.save_file(tensors, p)
    theirs = hf_np.load_file(p)
    for k, v in tensors.items():
        assert theirs[k].dtype == v.dtype and theirs[k].shape == v.shape
        assert theirs[k].tobytes() == v.tobytes()
    q = tmp_path / "theirs.safetensors"
    hf_np.save_file(tensors, q)
    assert p.read_bytes() == q.read_bytes()
    for backend in ("mmap", "pread"):
        ours = ws_np.load_file(q, backend=backend)
        for k, v in tensors.items():
            assert ours[k].dtype == v.dtype and ours[k].shape == v.shape
            assert ours[k].tobytes() == v.tobytes()


def _torch_random(code: str, shape, seed: int):
    arr = _random(code, shape, seed)
    if code == "F4":
        packed = np.frombuffer(_raw(code, arr), np.uint8).copy()
        return (
            torch.from_numpy(packed)
            .view(torch.float4_e2m1fn_x2)
            .reshape(*shape[:-1], shape[-1] // 2)
        )
    d = SAFETENSORS[code]
    u = np.ascontiguousarray(arr).view(
        {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[d.itemsize]
    )
    return torch.from_numpy(u.copy()).view(getattr(torch, d.torch))


def _tbytes(t) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.mark.parametrize("code", TORCH_CODES)
def test_hf_torch_both_directions(tmp_path, code):
    shapes = [s for s in SHAPES if _shape_ok(code, s) and (code != "F4" or s)]
    tensors = {f"t{i}": _torch_random(code, s, i) for i, s in enumerate(shapes)}
    p, q = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    ws_pt.save_file(tensors, p, {"format": "pt"})
    hf_pt.save_file(tensors, q, {"format": "pt"})
    assert p.read_bytes() == q.read_bytes()
    assert ws_pt.save(tensors) == hf_pt.save(tensors)
    with safetensors.safe_open(p, "pt") as f:
        for k, v in tensors.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape and _tbytes(got) == _tbytes(v)
    for backend in ("mmap", "pread"):
        ours = ws_pt.load_file(q, backend=backend)
        for k, v in tensors.items():
            assert ours[k].dtype == v.dtype and ours[k].shape == v.shape
            assert _tbytes(ours[k]) == _tbytes(v)


def test_numpy_ml_dtypes_hf_loads_via_torch(tmp_path):
    """bfloat16 / float8 arrays written from numpy: HF's torch loader agrees."""
    codes = ["BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"]
    tensors = {c: _random(c, (3, 4), 1) for c in codes}
    p = tmp_path / "a.safetensors"
    ws_np.save_file(tensors, p)
    with safetensors.safe_open(p, "pt") as f:
        for c in codes:
            assert _tbytes(f.get_tensor(c)) == tensors[c].tobytes()


@pytest.mark.parametrize(
    "code,mld",
    [
        ("F4", ml_dtypes.float4_e2m1fn),
        ("F6_E2M3", ml_dtypes.float6_e2m3fn),
        ("F6_E3M2", ml_dtypes.float6_e3m2fn),
    ],
)
def test_subbyte_values_follow_ml_dtypes(tmp_path, code, mld):
    """Packed values: floats -> ml_dtypes bit patterns -> packed LSB-first, and back."""
    values = np.array([0.0, 0.5, 1.0, 1.5, -2.0, 3.0, -0.0, 6.0], np.float32)
    arr = values.astype(mld)
    blob = ws_np.save({"x": arr})
    parsed = dict(safetensors.deserialize(blob))
    assert bytes(parsed["x"]["data"]) == _packed_reference(arr, SAFETENSORS[code].bits)
    back = weightsmith.safetensors.load(blob)["x"]
    assert back.dtype == np.dtype(mld)
    np.testing.assert_array_equal(back.astype(np.float32), values)
    p = tmp_path / "x.safetensors"
    p.write_bytes(blob)
    with weightsmith.safe_open(p) as f:
        np.testing.assert_array_equal(f.get_tensor("x").astype(np.float32), values)
        np.testing.assert_array_equal(f.get_slice("x")[1:7].astype(np.float32), values[1:7])


def test_f4_hf_torch_unpacked_matches_ml_dtypes(tmp_path):
    """HF writes torch float4_e2m1fn_x2; we unpack to the ml_dtypes values."""
    vals = np.array([[0.5, -1.0, 6.0, 0.0], [1.5, 2.0, -3.0, 4.0]], np.float32)
    codes = vals.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    t = torch.from_numpy(packed.copy()).view(torch.float4_e2m1fn_x2)
    p = tmp_path / "f4.safetensors"
    hf_pt.save_file({"w": t}, p)
    with weightsmith.safe_open(p) as f:
        assert f.get_slice("w").get_shape() == [2, 4]
        np.testing.assert_array_equal(f.get_tensor("w").astype(np.float32), vals)
    with weightsmith.safe_open(p, "pt") as f:
        assert torch.equal(f.get_tensor("w").view(torch.uint8), t.view(torch.uint8))


def test_hf_metadata_and_key_order(tmp_path):
    p = tmp_path / "a.safetensors"
    hf_np.save_file({"b": np.zeros(2, np.float32), "a": np.ones(3, np.int64)}, p, {"x": "y"})
    with weightsmith.safe_open(p) as f, safetensors.safe_open(p, "np") as g:
        assert f.keys() == g.keys()
        assert f.offset_keys() == g.offset_keys()
        assert f.metadata() == g.metadata()
