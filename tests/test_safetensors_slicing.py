"""Slices follow numpy basic indexing exactly (numpy on the full array is the oracle)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import safetensors
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import weightsmith
from weightsmith.safetensors import _reader

SHAPE = (5, 4, 6)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("slices")
    full = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    codes = (np.arange(np.prod(SHAPE)) % 16).astype(np.uint8)
    f4 = codes.view(ml_dtypes.float4_e2m1fn).reshape(SHAPE)
    f6 = (
        (np.arange(np.prod(SHAPE)) % 64)
        .astype(np.uint8)
        .view(ml_dtypes.float6_e3m2fn)
        .reshape(SHAPE)
    )
    p = d / "a.safetensors"
    weightsmith.save_file({"x": full, "f4": f4, "f6": f6, "s": np.array(7.0, np.float64)}, p)
    return p, {"x": full, "f4": f4, "f6": f6, "s": np.array(7.0)}


def _index(dim: int):
    ints = st.integers(-dim - 2, dim + 2)
    return st.one_of(
        st.integers(-dim, dim - 1),
        st.builds(
            slice,
            st.none() | ints,
            st.none() | ints,
            st.none() | st.sampled_from([1, 2, 3, -1, -2, -4]),
        ),
    )


@st.composite
def keys(draw):
    parts = [draw(_index(n)) for n in SHAPE[: draw(st.integers(0, 3))]]
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), Ellipsis)
    for _ in range(draw(st.integers(0, 2))):
        parts.insert(draw(st.integers(0, len(parts))), None)
    if len(parts) == 1 and draw(st.booleans()):
        return parts[0]
    return tuple(parts)


def _same(got, want):
    got = np.asarray(got)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=keys())
def test_slices_equal_numpy(files, key):
    p, ref = files
    try:
        want = {name: ref[name][key] for name in ("x", "f4", "f6")}
    except IndexError:
        want = None  # numpy refuses the key: so must we
    for mmap in (True, False):
        with weightsmith.safe_open(p, mmap=mmap) as f:
            for name in ("x", "f4", "f6"):
                if want is None:
                    with pytest.raises(IndexError):
                        f.get_slice(name)[key]
                else:
                    _same(f.get_slice(name)[key], want[name])


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=keys())
def test_torch_slices_equal_numpy(files, key):
    p, ref = files
    try:
        want = ref["x"][key]
    except IndexError:
        want = None
    for mmap in (True, False):
        with weightsmith.safe_open(p, "pt", mmap=mmap) as f:
            if want is None:
                with pytest.raises(IndexError):
                    f.get_slice("x")[key]
                continue
            got = f.get_slice("x")[key]
            assert isinstance(got, torch.Tensor)
            assert tuple(got.shape) == want.shape
            assert got.numpy().tobytes() == np.ascontiguousarray(want).tobytes()


def test_cases_hf_gets_wrong(files):
    p, ref = files
    x = ref["x"]
    with weightsmith.safe_open(p) as f:
        s = f.get_slice("x")
        _same(s[-2:], x[-2:])  # HF: OverflowError
        _same(s[3:1], x[3:1])  # HF: SystemError
        _same(s[::-1, 1, -3:], x[::-1, 1, -3:])
        _same(s[..., 2], x[..., 2])
        _same(s[None, 1:10:4], x[None, 1:10:4])
        assert s.get_shape() == [5, 4, 6] and s.get_dtype() == "F32"
        with pytest.raises(IndexError):
            s[5]
        with pytest.raises(IndexError):
            s[0, 0, 0, 0]
        with pytest.raises(IndexError):
            s[..., ...]
        with pytest.raises(IndexError):
            s["a"]


def test_agrees_with_hf_where_hf_works(files):
    p, _ref = files
    keys_ = [(slice(1, 3),), (slice(None), slice(0, 2)), (0,), (slice(None), 1, slice(2, 5))]
    with weightsmith.safe_open(p) as f, safetensors.safe_open(p, "np") as g:
        for k in keys_:
            _same(f.get_slice("x")[k], g.get_slice("x")[k])


def test_scalar_slices(files):
    p, _ref = files
    for mmap in (True, False):
        with weightsmith.safe_open(p, mmap=mmap) as f:
            s = f.get_slice("s")
            assert s.get_shape() == []
            assert float(s[()]) == 7.0
            assert np.asarray(s[...]).shape == ()
            assert np.asarray(s[None]).shape == (1,)


def test_mmap_slices_are_read_only_views(files):
    p, _ = files
    with weightsmith.safe_open(p) as f:
        a = f.get_slice("x")[1:3]
        t = f.get_tensor("x")
        assert not a.flags.writeable and not t.flags.writeable
        assert np.shares_memory(a, t)


class _Recorder:
    def __init__(self, monkeypatch):
        self.calls = []
        real = _reader._pread_into

        def spy(fd, buf, offset, path):
            self.calls.append((offset, memoryview(buf).nbytes))
            return real(fd, buf, offset, path)

        monkeypatch.setattr(_reader, "_pread_into", spy)


def test_pread_reads_only_needed_ranges(tmp_path, monkeypatch):
    big = np.arange(256 * 1024, dtype=np.float32).reshape(512, 512)
    p = tmp_path / "big.safetensors"
    weightsmith.save_file({"w": big}, p)
    rec = _Recorder(monkeypatch)
    with weightsmith.safe_open(p, mmap=False) as f:
        rec.calls.clear()
        got = f.get_slice("w")[100:110]
        _same(got, big[100:110])
        assert sum(n for _, n in rec.calls) == 10 * 512 * 4  # exactly the 10 rows
        rec.calls.clear()
        got = f.get_slice("w")[::128, 7]
        _same(got, big[::128, 7])
        assert sum(n for _, n in rec.calls) <= 4 * 512 * 4  # at most the 4 rows touched
        rec.calls.clear()
        got = f.get_slice("w")[-1, -3:]
        _same(got, big[-1, -3:])
        assert sum(n for _, n in rec.calls) <= 512 * 4
