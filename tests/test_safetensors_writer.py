"""Writer: layouts HF gets wrong, atomicity, StreamWriter, shared torch tensors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as hf_np
import safetensors.torch as hf_pt
import torch
from torch import nn

import weightsmith
import weightsmith.numpy as ws_np
import weightsmith.torch as ws_pt
from weightsmith import errors as E
from weightsmith.gguf import Writer as GGUFWriter
from weightsmith.safetensors import StreamWriter


def _hf_values(path):
    with safetensors.safe_open(path, "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - HF handle


# --------------------------------------------------------------------------- layouts


def test_non_contiguous_fortran_big_endian_saved_correctly(tmp_path):
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    cases = {
        "strided": base[::2, 1::3],
        "transposed": base.T,
        "fortran": np.asfortranarray(base),
        "negative": base[::-1, ::-2],
        "big_endian": base.astype(">f4"),
        "big_endian_i64_strided": np.arange(20, dtype=">i8")[::3],
    }
    p = tmp_path / "a.safetensors"
    ws_np.save_file(cases, p)
    got = _hf_values(p)  # the oracle reads them back
    for k, v in cases.items():
        np.testing.assert_array_equal(got[k], v)
        assert got[k].dtype == v.dtype.newbyteorder("=")
    # contiguous copies give the same bytes as HF writes
    contig = {
        k: np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")) for k, v in cases.items()
    }
    q = tmp_path / "b.safetensors"
    hf_np.save_file(contig, q)
    assert p.read_bytes() == q.read_bytes()


def test_hf_writes_non_contiguous_wrong_we_do_not(tmp_path):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    hf_np.save_file({"a": a}, tmp_path / "hf.safetensors")
    ws_np.save_file({"a": a}, tmp_path / "ws.safetensors")
    assert not np.array_equal(
        _hf_values(tmp_path / "hf.safetensors")["a"], a
    )  # documents HF 0.8's bug
    np.testing.assert_array_equal(_hf_values(tmp_path / "ws.safetensors")["a"], a)


def test_torch_non_contiguous_saved(tmp_path):
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6).t()[1:, ::2]
    p = tmp_path / "a.safetensors"
    ws_pt.save_file({"t": t}, p)
    assert torch.equal(hf_pt.load_file(p)["t"], t)


def test_non_contiguous_peak_memory_is_bounded(tmp_path):
    big = np.ones((2048, 8192), np.float32)[:, ::2]  # 32 MiB view of a 64 MiB array
    tracemalloc.start()
    ws_np.save_file({"w": big}, tmp_path / "a.safetensors", {"k": "v"})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 20 * 2**20  # 8 MiB slabs (two alive at most), not a 32 MiB copy
    np.testing.assert_array_equal(_hf_values(tmp_path / "a.safetensors")["w"], big)


def test_metadata_keys_sorted_and_checked(tmp_path):
    md = {"b": "2", "a": "1", "c": "3"}
    blob = ws_np.save({"x": np.zeros(1, np.uint8)}, md)
    assert blob[8:].startswith(b'{"__metadata__":{"a":"1","b":"2","c":"3"}')
    assert ws_np.save({"x": np.zeros(1, np.uint8)}, dict(reversed(md.items()))) == blob
    with pytest.raises(E.InvalidMetadata):
        ws_np.save({"x": np.zeros(1)}, {"a": 1})
    with pytest.raises(E.InvalidTensorEntry):
        ws_np.save({"__metadata__": np.zeros(1)})
    with pytest.raises(E.UnsupportedDtype):
        ws_np.save({"x": np.zeros(1, np.complex128)})


def test_names_with_unicode_and_controls_match_hf():
    t = {'ünï\n"q"\\/\x01\x7f': np.zeros(2, np.float16), "🙂": np.ones(1, np.int8)}
    assert ws_np.save(t, {"é\t": "\x00"}) == hf_np.save(t, {"é\t": "\x00"})


# --------------------------------------------------------------------------- atomicity


def test_overwrite_keeps_mmapped_reader_intact(tmp_path):
    p = tmp_path / "a.safetensors"
    ws_np.save_file({"w": np.full(100_000, 1.0, np.float32)}, p)
    with weightsmith.safe_open(p) as f:
        old = f.get_tensor("w")
        ws_np.save_file({"w": np.full(100_000, 2.0, np.float32)}, p)
        assert float(old.sum()) == 100_000.0  # the old inode is still mapped
    assert float(ws_np.load_file(p)["w"][0]) == 2.0
    assert [x.name for x in tmp_path.iterdir()] == ["a.safetensors"]  # no temp left


class _Boom:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("boom")


def test_error_mid_write_leaves_target_untouched(tmp_path):
    p = tmp_path / "a.safetensors"
    ws_np.save_file({"w": np.zeros(4, np.float32)}, p)
    before = p.read_bytes()
    with pytest.raises(RuntimeError, match="boom"):
        ws_np.save_file({"w": np.ones(4, np.float32), "x": _Boom()}, p)
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.safetensors"]


def test_kill_mid_write_leaves_no_target(tmp_path):
    p = tmp_path / "big.safetensors"
    script = textwrap.dedent(
        f"""
        import sys, numpy as np
        from weightsmith.safetensors import StreamWriter
        w = StreamWriter({str(p)!r}, [("w", "F32", (1 << 20,))])
        w.write_chunk("w", np.zeros(1 << 10, np.float32))
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stdin=subprocess.PIPE
    )
    assert proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not p.exists()
    # the dead writer's temp file is swept by the next successful write
    assert any(x.name.endswith(".wstmp") for x in tmp_path.iterdir())
    ws_np.save_file({"w": np.zeros(1, np.float32)}, p)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["big.safetensors"]


# --------------------------------------------------------------------------- StreamWriter


def test_stream_writer_matches_save_file_any_order_and_chunks(tmp_path):
    tensors = {
        "a": np.arange(1000, dtype=np.float32).reshape(10, 100),
        "b": np.arange(7, dtype=np.int64),
        "c": np.arange(16, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(4, 4),
        "f4": (np.arange(8) % 16).astype(np.uint8).view(ml_dtypes.float4_e2m1fn),
        "e": np.zeros((0, 3), np.float32),
    }
    ref = tmp_path / "ref.safetensors"
    ws_np.save_file(tensors, ref, {"k": "v"})
    out = tmp_path / "out.safetensors"
    spec = [(k, weightsmith.dtypes.from_numpy(v.dtype).name, v.shape) for k, v in tensors.items()]
    with StreamWriter(out, spec, {"k": "v"}) as w:
        assert not out.exists()
        w.write("b", tensors["b"])
        for i in range(0, 10, 3):  # row chunks
            w.write_chunk("a", tensors["a"][i : i + 3])
        w.write("c", tensors["c"].tobytes())  # raw bytes are fine too
        w.write_chunk("f4", tensors["f4"][:4])
        w.write_chunk("f4", tensors["f4"][4:])
        w.write("e", tensors["e"])
    assert out.read_bytes() == ref.read_bytes()


def test_stream_writer_errors_leave_nothing(tmp_path):
    out = tmp_path / "o.safetensors"
    w = StreamWriter(out, [("a", "F32", (4,)), ("b", "U8", (2,))])
    with pytest.raises(E.WriteError, match="too much"):
        w.write_chunk("a", np.zeros(5, np.float32))
    with pytest.raises(E.UnsupportedDtype):
        w.write("a", np.zeros(4, np.float64))
    with pytest.raises(E.TensorNotFound):
        w.write("zz", b"")
    w.write("a", np.zeros(4, np.float32))
    with pytest.raises(E.WriteError, match="incomplete"):
        w.close()
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(E.ClosedFileError):
        w.write("b", b"\0\0")
    with pytest.raises(E.UnknownDtype):
        StreamWriter(out, [("a", "f32", (1,))])
    with pytest.raises(E.DuplicateTensorName):
        StreamWriter(out, [("a", "F32", (1,)), ("a", "F32", (1,))])
    with pytest.raises(RuntimeError), StreamWriter(out, [("a", "U8", (1,))]) as w2:
        w2.write("a", b"\x01")
        raise RuntimeError("caller failed")
    assert not out.exists()


def test_stream_writer_large_file_constant_memory(tmp_path):
    n = 64 * 2**20 // 4  # 64 MiB of F32 in 1 MiB pieces
    out = tmp_path / "big.safetensors"
    piece = np.ones(2**18, np.float32)
    tracemalloc.start()
    with StreamWriter(out, [("w", "F32", (n,))]) as w:
        for _ in range(n // piece.size):
            w.write_chunk("w", piece)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * 2**20
    with weightsmith.safe_open(out) as f:
        assert float(f.get_tensor("w").sum()) == n


# --------------------------------------------------------------------------- shared torch tensors


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight


def test_shared_tensors_refused_listing_names(tmp_path):
    base = torch.zeros(10)
    with pytest.raises(E.SharedTensorsError) as info:
        ws_pt.save_file({"x": base, "y": base[2:5], "z": torch.ones(2)}, tmp_path / "a.safetensors")
    assert "'x'" in str(info.value) and "'y'" in str(info.value) and "'z'" not in str(info.value)
    with pytest.raises(E.SharedTensorsError):
        weightsmith.save_file(_Tied().state_dict(), tmp_path / "b.safetensors")
    # disjoint parts of one storage are not shared (same rule as HF)
    ws_pt.save_file({"p": base[:5], "q": base[5:]}, tmp_path / "c.safetensors")
    with pytest.raises(RuntimeError):
        hf_pt.save_file({"x": base, "y": base[2:5]}, tmp_path / "d.safetensors")


def test_save_model_load_model_like_hf(tmp_path):
    m = _Tied()
    ws_pt.save_model(m, tmp_path / "ws.safetensors")
    hf_pt.save_model(m, tmp_path / "hf.safetensors")
    assert (tmp_path / "ws.safetensors").read_bytes() == (tmp_path / "hf.safetensors").read_bytes()
    m2 = _Tied()
    # HF returns the missing keys as a set
    assert ws_pt.load_model(m2, tmp_path / "hf.safetensors") == (set(), [])
    assert torch.equal(m2.b.weight, m.a.weight) and m2.b.weight is m2.a.weight
    m3 = _Tied()
    hf_pt.load_model(m3, tmp_path / "ws.safetensors")
    assert torch.equal(m3.a.bias, m.a.bias)
    with pytest.raises(RuntimeError, match="Missing key"):
        ws_pt.load_model(
            nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), tmp_path / "ws.safetensors"
        )


def test_torch_tensors_are_copy_on_write(tmp_path):
    p = tmp_path / "a.safetensors"
    ws_pt.save_file({"w": torch.ones(8)}, p)
    before = p.read_bytes()
    t = ws_pt.load_file(p)["w"]
    t.add_(1)
    assert p.read_bytes() == before
    assert torch.equal(ws_pt.load_file(p)["w"], torch.ones(8))
    assert ws_pt.load(before)["w"].sum().item() == 8


def test_load_file_outlives_close_and_gc(tmp_path):
    import gc

    p = tmp_path / "a.safetensors"
    ws_np.save_file({"w": np.arange(10, dtype=np.int16)}, p)
    a = ws_np.load_file(p)["w"]
    t = ws_pt.load_file(p)["w"]
    gc.collect()
    assert a.tolist() == list(range(10)) and t.tolist() == list(range(10))
    os.unlink(p)
    assert int(a.sum()) == 45 and int(t.sum()) == 45


def test_stream_writer_takes_torch_chunks_and_top_level_exports(tmp_path):
    t = torch.arange(64, dtype=torch.float32).reshape(8, 8).to(torch.bfloat16)
    out = tmp_path / "t.safetensors"
    with weightsmith.StreamWriter(
        out, [("w", "BF16", (8, 8)), ("f", weightsmith.dtypes.SAFETENSORS["F4"], (4,))]
    ) as w:
        w.write_chunk("w", t[:3])
        w.write_chunk("w", t[3:].t().contiguous().t())  # a non-contiguous piece
        w.write("f", torch.tensor([0x21, 0x43], dtype=torch.uint8).view(torch.float4_e2m1fn_x2))
    with safetensors.safe_open(out, "pt") as f:
        assert torch.equal(f.get_tensor("w"), t)
        assert f.get_tensor("f").view(torch.uint8).tolist() == [0x21, 0x43]
    got = weightsmith.load_file(out, "pt")
    assert torch.equal(got["w"], t)
    assert weightsmith.read_index is weightsmith.safetensors.read_index
    assert weightsmith.save_file is weightsmith.safetensors.save_file


def _count_fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd):
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


@pytest.mark.parametrize(
    ("env", "arg", "durable"),
    [
        (None, None, False),  # default: like torch.save and HF, no fsync
        ("1", None, True),  # WEIGHTSMITH_FSYNC=1 turns it on process-wide
        ("0", None, False),
        (None, True, True),  # the argument wins over the environment
        ("1", False, False),
    ],
)
def test_fsync_is_opt_in(tmp_path, monkeypatch, env, arg, durable):
    if env is None:
        monkeypatch.delenv("WEIGHTSMITH_FSYNC", raising=False)
    else:
        monkeypatch.setenv("WEIGHTSMITH_FSYNC", env)
    calls = _count_fsyncs(monkeypatch)
    t = {"a": np.arange(1000, dtype=np.float32)}
    kw = {} if arg is None else {"fsync": arg}
    weightsmith.safetensors.save_file(t, tmp_path / "a.safetensors", **kw)
    with StreamWriter(tmp_path / "b.safetensors", [("a", "F32", (1000,))], **kw) as w:
        w.write("a", t["a"])
    assert len(calls) == (2 if durable else 0)
    for name in ("a", "b"):  # either way the file is complete and HF reads it
        np.testing.assert_array_equal(_hf_values(tmp_path / f"{name}.safetensors")["a"], t["a"])


# --------------------------------------------------------------------------- preallocation


def _fake_fallocate(monkeypatch, err):
    """Make the libc fallocate fail with ``err``, recording its calls."""
    import ctypes

    from weightsmith import _atomic

    calls = []

    def fake(fd, mode, offset, size):
        calls.append(size)
        ctypes.set_errno(err)
        return -1

    monkeypatch.setattr(_atomic, "_fallocate", fake)
    return calls


_BIG = {"w": np.arange(1 << 19, dtype=np.float32)}  # 2 MiB: over PREALLOCATE_MIN


def test_writers_reserve_exactly_the_file_size(tmp_path):
    from weightsmith import _atomic

    assert _atomic._libc_fallocate(), "Linux has fallocate(2)"
    sizes = []
    real = _atomic.preallocate

    def spy(fd, size, path=None):
        sizes.append(size)
        return real(fd, size, path)

    import unittest.mock

    with unittest.mock.patch.object(_atomic, "preallocate", spy):
        weightsmith.safetensors.save_file(_BIG, tmp_path / "a.safetensors")
        with StreamWriter(tmp_path / "b.safetensors", [("w", "F32", (1 << 19,))]) as w:
            w.write("w", _BIG["w"])
        with GGUFWriter(tmp_path / "c.gguf") as g:
            g.add_tensor_info("w", "F32", (1 << 19,))
            g.write_tensor("w", _BIG["w"])
    assert sizes == [
        os.path.getsize(tmp_path / n) for n in ("a.safetensors", "b.safetensors", "c.gguf")
    ]
    fd = os.open(tmp_path / "a.safetensors", os.O_RDWR)
    try:  # this filesystem really reserves (so the benchmarks measure the fast path)
        assert real(fd, os.path.getsize(tmp_path / "a.safetensors")) is True
    finally:
        os.close(fd)
    np.testing.assert_array_equal(_hf_values(tmp_path / "a.safetensors")["w"], _BIG["w"])


def test_disk_full_fails_before_writing_and_leaves_target(tmp_path, monkeypatch):
    import errno

    target = tmp_path / "m.safetensors"
    weightsmith.safetensors.save_file({"old": np.ones(3, np.float32)}, target)
    before = target.read_bytes()
    calls = _fake_fallocate(monkeypatch, errno.ENOSPC)
    with pytest.raises(OSError) as info:
        weightsmith.safetensors.save_file(_BIG, target)
    assert info.value.errno == errno.ENOSPC and ".wstmp" in str(info.value.filename)
    assert calls == [8 + len(_header_of(_BIG)) + _BIG["w"].nbytes]
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]  # no temp left


def _header_of(tensors):
    blob = weightsmith.safetensors.save(tensors)
    return blob[8 : 8 + int.from_bytes(blob[:8], "little")]


def test_filesystem_without_fallocate_still_writes(tmp_path, monkeypatch):
    import errno

    calls = _fake_fallocate(monkeypatch, errno.EOPNOTSUPP)
    weightsmith.safetensors.save_file(_BIG, tmp_path / "a.safetensors")
    with StreamWriter(tmp_path / "b.safetensors", [("w", "F32", (1 << 19,))]) as w:
        w.write_chunk("w", _BIG["w"][: 1 << 18])
        w.write_chunk("w", _BIG["w"][1 << 18 :])
    assert len(calls) == 2
    for name in ("a", "b"):
        np.testing.assert_array_equal(_hf_values(tmp_path / f"{name}.safetensors")["w"], _BIG["w"])


def test_short_write_into_a_preallocated_file_is_an_error(tmp_path, monkeypatch):
    # A preallocated file already has its final size, so a writer that came
    # up short would leave zeros a reader accepts; save_file counts instead.
    from weightsmith.safetensors import _writer

    real = _writer._Tensor.chunks

    def short(self, limit=_writer.CHUNK):
        for c in real(self, limit):
            yield c[:-4]

    monkeypatch.setattr(_writer._Tensor, "chunks", short)
    target = tmp_path / "s.safetensors"
    with pytest.raises(E.WriteError, match="planned"):
        weightsmith.safetensors.save_file(_BIG, target)
    assert not target.exists() and not list(tmp_path.iterdir())


def test_gguf_writer_short_file_is_an_error(tmp_path):
    target = tmp_path / "s.gguf"
    w = GGUFWriter(target)
    w.add_tensor_info("w", "F32", (1 << 19,))
    w.write_tensor("w", _BIG["w"])
    w._f.seek(-4, os.SEEK_CUR)  # as if the last 4 bytes had never been written
    with pytest.raises(E.WriteError, match="planned"):
        w.close()
    assert not target.exists() and not list(tmp_path.iterdir())
