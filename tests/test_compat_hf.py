"""Differential tests: the same call on HF's installed ``safetensors`` and on
weightsmith's drop-in modules, and the same result or the same exception class.

HF's ``SafetensorError`` corresponds to ``weightsmith.SafetensorError``; every
other exception class must match as it is (ours may be a subclass).  Covers
issue 17 part 1: ``safe_open(backend=)``, empty-list slices, the error
classes on HF's paths, the ``safetensors.torch`` helpers, the top-level
``serialize``/``serialize_file``/``deserialize``/``TensorSpec``, and HF's
messages for sparse tensors and missing files.  The deliberate differences
(non-contiguous saves, numpy slice semantics) are pinned at the end.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import safetensors as hf
import safetensors.numpy as hf_np
import safetensors.torch as hf_pt
import torch

import weightsmith as ws
import weightsmith.numpy as ws_np
import weightsmith.torch as ws_pt


def outcome(fn, *args, **kwargs):
    """("ok", value) or ("raise", exception)."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:
        return "raise", exc


def same(hf_call, ws_call, eq=None):
    """Run both; same exception class (ours may subclass it) or equal results."""
    h_kind, h = outcome(hf_call)
    w_kind, w = outcome(ws_call)
    if h_kind == "raise":
        want = ws.SafetensorError if isinstance(h, hf.SafetensorError) else type(h)
        assert w_kind == "raise", f"HF raised {type(h).__name__}: {h}; weightsmith returned {w!r}"
        assert isinstance(w, want), f"HF raised {type(h).__name__}, weightsmith {type(w).__mro__}"
        return h, w
    assert w_kind == "ok", f"HF returned {h!r}; weightsmith raised {type(w).__name__}: {w}"
    if eq is None:
        assert h == w
    else:
        eq(h, w)
    return h, w


def tensors_equal(a, b):
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        flat_a, flat_b = a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
        assert torch.equal(flat_a, flat_b)
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def dicts_equal(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        tensors_equal(a[k], b[k])


PT = {
    "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    "bf16": torch.arange(8, dtype=torch.bfloat16).reshape(2, 4),
    "f16": torch.arange(24, dtype=torch.float16).reshape(2, 3, 4),
    "scalar": torch.tensor(7.5),
    "empty": torch.empty((0, 5), dtype=torch.float16),
    "i64": torch.arange(5, dtype=torch.int64),
    "f8": torch.zeros(8, dtype=torch.float8_e4m3fn),
}


@pytest.fixture
def pt_file(tmp_path):
    p = tmp_path / "pt.safetensors"
    hf_pt.save_file(PT, p, metadata={"foo": "bar"})
    return p


# --------------------------------------------------------------------------- safe_open(backend=)


@pytest.mark.parametrize("framework", ["pt", "np", "numpy", "torch"])
@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_safe_open_backend(tmp_path, pt_file, framework, backend):
    path = pt_file
    if framework in ("np", "numpy"):
        # HF's numpy side fails on float8 (AttributeError); we read it.  Compare the rest.
        path = tmp_path / "np.safetensors"
        hf_pt.save_file({k: v for k, v in PT.items() if k not in ("f8", "bf16")}, path)

    def read(mod):
        with mod.safe_open(path, framework=framework, device="cpu", backend=backend) as f:
            return f.metadata(), f.keys(), f.offset_keys(), f.get_tensors()

    def eq(h, w):
        assert h[:3] == w[:3]
        dicts_equal(h[3], w[3])

    same(lambda: read(hf), lambda: read(ws), eq)


@pytest.mark.parametrize("backend", ["not_a_backend", "MMAP", ""])
def test_safe_open_bad_backend(pt_file, backend):
    same(
        lambda: hf.safe_open(pt_file, framework="pt", backend=backend),
        lambda: ws.safe_open(pt_file, framework="pt", backend=backend),
    )


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_load_file_and_load_model_backend(tmp_path, pt_file, backend):
    same(
        lambda: hf_pt.load_file(pt_file, backend=backend),
        lambda: ws_pt.load_file(pt_file, backend=backend),
        dicts_equal,
    )
    lin = torch.nn.Linear(4, 3)
    p = tmp_path / "m.safetensors"
    hf_pt.save_model(lin, p)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    same(
        lambda: hf_pt.load_model(a, p, backend=backend),
        lambda: ws_pt.load_model(b, p, backend=backend),
    )
    dicts_equal(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("framework", ["np", "pt", "tf2", "jaxx", ""])
def test_bad_framework(pt_file, framework):
    same(
        lambda: hf.safe_open(pt_file, framework=framework),
        lambda: ws.safe_open(pt_file, framework=framework),
        lambda h, w: None,
    )


# --------------------------------------------------------------------------- slicing


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize(
    ("framework", "name"),
    # HF's numpy framework has no bfloat16: that one is compared with torch only
    [
        (fw, n)
        for fw in ("np", "pt")
        for n in ("f32", "f16", "bf16", "i64", "empty")
        if (fw, n) != ("np", "bf16")
    ],
)
def test_empty_list_slice(pt_file, framework, backend, name):

    def take(mod, key):
        with mod.safe_open(pt_file, framework=framework, backend=backend) as f:
            return f.get_slice(name)[key]

    if name == "empty":
        # HF: "index 0 out of bounds ... of size 0"; numpy and torch give (0, 5)
        assert tuple(take(ws, []).shape) == (0, 5)
        return
    _h, w = same(lambda: take(hf, []), lambda: take(ws, []), tensors_equal)
    assert next(iter(w.shape)) == 0
    # inside a tuple HF refuses it; we follow numpy / torch
    full = PT[name] if framework == "pt" else PT[name].numpy()
    for key in (([],), ([], slice(None)))[: full.ndim]:
        got = take(ws, key)
        assert tuple(got.shape) == tuple(full[key].shape)


@pytest.mark.parametrize("framework", ["np", "pt"])
@pytest.mark.parametrize(
    "key",
    [(slice(2, None), -6), (slice(2, None), 20), (0, 0, 0), (slice(None), [7])],
    ids=["neg-out-of-range", "int-out-of-range", "too-many", "list-out-of-range"],
)
def test_slice_errors_are_safetensor_errors(tmp_path, framework, key):
    p = tmp_path / "a.safetensors"
    hf_np.save_file({"a": np.random.rand(10, 5)}, p)

    def take(mod):
        with mod.safe_open(p, framework=framework) as f:
            return f.get_slice("a")[key]

    _h, w = same(lambda: take(hf), lambda: take(ws))
    assert isinstance(w, IndexError)  # and still what numpy users catch


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("key", [[0, 1], [3, -1, 3], [9], (slice(1, None), [4, 0])], ids=str)
def test_list_index_torch(tmp_path, backend, key):
    # HF's torch side takes integer lists on mmap (its pread and numpy sides
    # refuse them); ours follows torch / numpy indexing on every path
    a = torch.randn(10, 5)
    p = tmp_path / "a.safetensors"
    hf_pt.save_file({"a": a}, p)

    def take(mod, backend):
        with mod.safe_open(p, framework="pt", backend=backend) as f:
            return f.get_slice("a")[key]

    same(lambda: take(hf, "mmap"), lambda: take(ws, backend), tensors_equal)
    tensors_equal(take(ws, backend), a[key])


# --------------------------------------------------------------------------- error classes


def test_shared_tensors_raise_runtime_error(tmp_path):
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    for b in (a[:1], a[1:], a):
        data = {"A": a, "B": b}
        _h, w = same(
            lambda d=data: hf_pt.save_file(d, tmp_path / "h"),
            lambda d=data: ws_pt.save_file(d, tmp_path / "w"),
        )
        assert isinstance(w, RuntimeError) and isinstance(w, ws.errors.SharedTensorsError)
        same(lambda d=data: hf_pt.save(d), lambda d=data: ws_pt.save(d))


def test_closed_handle_and_missing_tensor(pt_file):
    def closed(mod):
        with mod.safe_open(pt_file, framework="pt") as f:
            pass
        return f.keys()

    same(lambda: closed(hf), lambda: closed(ws))

    def missing(mod):
        with mod.safe_open(pt_file, framework="pt") as f:
            return f.get_tensor("nope")

    same(lambda: missing(hf), lambda: missing(ws))


def test_missing_file_message(tmp_path):
    for path in ("notafile", str(tmp_path / "nope.safetensors")):
        h, w = same(
            lambda p=path: hf.safe_open(p, framework="pt"),
            lambda p=path: ws.safe_open(p, framework="pt"),
        )
        assert str(w) == str(h)
        assert w.filename == path  # and, unlike HF, errno/filename are kept
        assert w.errno == 2


def test_sparse_message(tmp_path):
    data = {"test": torch.sparse_coo_tensor(size=(2, 3)), "dense": torch.zeros(2)}
    h, w = same(
        lambda: hf_pt.save_file(data, tmp_path / "h"), lambda: ws_pt.save_file(data, tmp_path / "w")
    )
    assert str(w) == str(h)


@pytest.mark.parametrize("bogus", ["notadict", {"test": {"some": "thing"}}, {"t": np.zeros(2)}])
def test_bogus_input_messages(tmp_path, bogus):
    h, w = same(
        lambda: hf_pt.save_file(bogus, tmp_path / "h"),
        lambda: ws_pt.save_file(bogus, tmp_path / "w"),
    )
    assert str(w) == str(h)


def test_meta_tensor(tmp_path):
    data = {"m": torch.zeros((4, 4), device="meta")}
    same(
        lambda: hf_pt.save_file(data, tmp_path / "h"), lambda: ws_pt.save_file(data, tmp_path / "w")
    )


# --------------------------------------------------------------------------- torch helpers


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 6)
        self.b = self.a


def _state_dicts():
    base = torch.zeros(16)
    m = torch.randn(10)
    n = torch.empty([], dtype=m.dtype)
    n.set_(source=m.untyped_storage()[:16])
    copy_model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    copy_model.append(copy.deepcopy(copy_model[0]))
    return {
        "tied": _Tied().state_dict(),
        "copies": copy_model.state_dict(),
        "views": {"A": base, "B": base[:4], "C": base[8:], "D": base[::4]},
        "disjoint": {"B": base[:8], "C": base[8:]},
        "overlap": {"B": base[:2], "C": base[1:], "D": base[:1]},
        "same_ptr_other_size": {"m": m, "n": n},
        "meta": {"C": torch.zeros(2, 2, device="meta"), "D": torch.zeros(2, 2, device="meta")[:1]},
        "empty": {"E": torch.zeros(0), "F": torch.zeros(3)},
        "lone_view": {"B": base[:4]},
        "lone_whole": {"A": base},
    }


STATE_DICTS = _state_dicts()


@pytest.mark.parametrize("case", sorted(STATE_DICTS))
def test_torch_helpers(case):
    sd = STATE_DICTS[case]
    for name in ("storage_ptr", "storage_size", "_is_complete", "_end_ptr"):
        for _k, v in sd.items():
            same(lambda f=name, v=v: getattr(hf_pt, f)(v), lambda f=name, v=v: getattr(ws_pt, f)(v))
    same(lambda: hf_pt._find_shared_tensors(sd), lambda: ws_pt._find_shared_tensors(sd))
    for kw in ({}, {"preferred_names": sorted(sd)[-1:]}, {"discard_names": sorted(sd)[:1]}):
        same(
            lambda kw=kw: dict(hf_pt._remove_duplicate_names(sd, **kw)),
            lambda kw=kw: dict(ws_pt._remove_duplicate_names(sd, **kw)),
        )


def test_save_model_tied(tmp_path):
    # HF writes 2+ metadata keys in hash order, we sort them: compare the
    # metadata as a dict and the tensor data byte for byte
    model = _Tied()
    h, w = tmp_path / "h.safetensors", tmp_path / "w.safetensors"
    hf_pt.save_model(model, h)
    ws_pt.save_model(model, w)
    with hf.safe_open(h, "pt") as fh, hf.safe_open(w, "pt") as fw:
        assert fh.metadata() == fw.metadata() == {"b.bias": "a.bias", "b.weight": "a.weight"}
        assert fh.offset_keys() == fw.offset_keys()
    hb, wb = h.read_bytes(), w.read_bytes()
    assert len(hb) == len(wb)
    n = int.from_bytes(hb[:8], "little")
    assert hb[8 + n :] == wb[8 + n :]


# --------------------------------------------------------------------------- top level


@pytest.mark.parametrize(
    ("hf_mod", "ws_mod"), [(hf_np, ws_np), (hf_pt, ws_pt)], ids=["numpy", "torch"]
)
def test_module_public_names(hf_mod, ws_mod):
    # every public function/class HF's module offers (its typing imports aside),
    # e.g. paddle itself does `from safetensors.numpy import safe_open`
    names = [
        n
        for n in dir(hf_mod)
        if not n.startswith("_")
        and callable(getattr(hf_mod, n))
        and getattr(getattr(hf_mod, n), "__module__", "") not in ("typing", "collections")
    ]
    assert names and [n for n in names if not hasattr(ws_mod, n)] == []


def test_top_level_names():
    for name in (
        "safe_open",
        "serialize",
        "serialize_file",
        "deserialize",
        "TensorSpec",
        "SafetensorError",
    ):
        assert hasattr(hf, name) and hasattr(ws, name)
    assert issubclass(ws.SafetensorError, Exception)


ARRAYS = {
    "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
    "i8": np.arange(-4, 4, dtype=np.int8),
    "u16": np.arange(5, dtype=np.uint16),
    "f64": np.zeros((0, 3)),
    "b": np.array([True, False]),
    "c64": np.array([1 + 2j], dtype=np.complex64),
}


def _specs(mod, arrays):
    return {
        k: mod.TensorSpec(
            dtype=v.dtype.name, shape=v.shape, data_ptr=v.ctypes.data, data_len=v.nbytes
        )
        for k, v in arrays.items()
    }


def test_tensor_spec_attributes():
    for k, v in ARRAYS.items():
        h, w = _specs(hf, {k: v})[k], _specs(ws, {k: v})[k]
        assert (h.dtype, list(h.shape), h.data_ptr, h.data_len) == (
            w.dtype,
            list(w.shape),
            w.data_ptr,
            w.data_len,
        )
    t = torch.empty(2, 3, dtype=torch.float4_e2m1fn_x2)
    args = dict(dtype="float4_e2m1fn_x2", shape=t.shape, data_ptr=t.data_ptr(), data_len=6)
    h, w = hf.TensorSpec(**args), ws.TensorSpec(**args)
    assert (h.dtype, list(h.shape)) == (w.dtype, list(w.shape)) == ("F4", [2, 6])


@pytest.mark.parametrize("dtype", ["nonsense", "F32", "float", "int4", "Float32"])
def test_tensor_spec_bad_dtype(dtype):
    same(
        lambda: hf.TensorSpec(dtype=dtype, shape=[1], data_ptr=0, data_len=0),
        lambda: ws.TensorSpec(dtype=dtype, shape=[1], data_ptr=0, data_len=0),
    )


def test_serialize_same_bytes(tmp_path):
    for md in (None, {"framework": "pt"}):
        same(
            lambda md=md: hf.serialize(_specs(hf, ARRAYS), metadata=md),
            lambda md=md: ws.serialize(_specs(ws, ARRAYS), metadata=md),
        )
        hf.serialize_file(_specs(hf, ARRAYS), tmp_path / "h", metadata=md)
        ws.serialize_file(_specs(ws, ARRAYS), tmp_path / "w", metadata=md)
        assert (tmp_path / "h").read_bytes() == (tmp_path / "w").read_bytes()


def test_serialize_raw_dict_is_type_error():
    raw = {"test": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}}
    same(lambda: hf.serialize(raw), lambda: ws.serialize(raw))


def test_deserialize():
    data = hf_np.save(ARRAYS, metadata={"k": "v"})
    same(lambda: dict(hf.deserialize(data)), lambda: dict(ws.deserialize(data)))
    same(lambda: hf.deserialize(data[:20]), lambda: ws.deserialize(data[:20]))


# --------------------------------------------------------------------------- deliberate differences


def test_non_contiguous_saved_correctly_where_hf_refuses(tmp_path):
    x = torch.arange(6, dtype=torch.float32).reshape(1, 2, 3)[:, :, 1]
    assert not x.is_contiguous()
    with pytest.raises(ValueError):
        hf_pt.save_file({"x": x}, tmp_path / "h")
    assert ws_pt.save({"x": x}) == hf_pt.save({"x": x.contiguous()})


def test_numpy_slice_semantics_where_hf_raises(tmp_path):
    a = np.random.rand(10, 5)
    p = tmp_path / "a.safetensors"
    hf_np.save_file({"a": a}, p)
    for key in (slice(None, 20), (slice(None), slice(None, 20)), [0, 1], ([], 2)):
        with hf.safe_open(p, framework="np") as f, pytest.raises(hf.SafetensorError):
            f.get_slice("a")[key]
        with ws.safe_open(p, framework="np") as f:
            np.testing.assert_array_equal(f.get_slice("a")[key], a[key])
