"""edit / split / merge against gguf-py and against ggml's own gguf C API.

The split oracle replays what llama.cpp's gguf-split does (gguf_set_kv,
gguf_set_val_u16/i32, gguf_add_tensor, gguf_get_meta_data) through ctypes on
the libggml-base shipped with llama-cpp-python, and compares header bytes.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from weightsmith import errors as E
from weightsmith.gguf import GGUFValue, GGUFValueType, Writer, edit, merge, read, split

VT = gguf.GGUFValueType


# --------------------------------------------------------------------------- fixtures


def _tensors():
    rng = np.random.default_rng(1)
    return [
        ("tok_embd.weight", rng.standard_normal((10, 64)).astype(np.float32), None),
        ("blk.0.q", rng.integers(0, 256, (4, 34), dtype=np.uint8), gguf.GGMLQuantizationType.Q8_0),
        ("blk.0.norm", rng.standard_normal((1, 64)).astype(np.float32), None),
        ("blk.1.w", rng.standard_normal((3, 32)).astype(np.float16), None),
        ("out", rng.standard_normal((64,)).astype(np.float32), None),
    ]


KV0 = [
    ("general.name", "tiny", VT.STRING, None),
    ("x.ctx", 4096, VT.UINT32, None),
    ("x.f64", 0.5, VT.FLOAT64, None),
    ("tokenizer.ggml.tokens", ["<unk>", "a", "bc", "d" * 300], VT.ARRAY, None),
    ("tokenizer.ggml.scores", [0.0, -1.0, -2.0, -3.0], VT.ARRAY, None),
    ("x.ids", [1, 2, 3], VT.ARRAY, VT.UINT64),
]


def gguf_py_write(path, kvs, tensors=None, alignment=None):
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, value, vt, sub in kvs:
        w.add_key_value(key, value, vt, sub_type=sub)
        if key == "general.alignment":  # add_custom_alignment, but at this position
            w.data_alignment = value
    for name, arr, raw in _tensors() if tensors is None else tensors:
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def model(tmp_path) -> Path:
    p = tmp_path / "model.gguf"
    gguf_py_write(p, KV0)
    return p


def reader_kvs(path):
    r = gguf.GGUFReader(path)
    return {
        k: (f.contents(), [int(t) for t in f.types])
        for k, f in r.fields.items()
        if not k.startswith("GGUF.")
    }


def tensor_bytes(path):
    with read(path) as f:
        return {t.name: f.tensor_bytes(t.name).tobytes() for t in f.tensors}


# --------------------------------------------------------------------------- edit


def test_edit_in_place_same_size(model):
    ino = os.stat(model).st_ino
    before = model.read_bytes()
    edit(model, set={"x.ctx": 8192, "general.name": "TINY"})
    assert os.stat(model).st_ino == ino  # no rename: the bytes were patched in place
    after = model.read_bytes()
    assert len(after) == len(before)
    kvs = reader_kvs(model)
    assert kvs["x.ctx"] == (8192, [int(VT.UINT32)])  # the type of the existing key is kept
    assert kvs["general.name"] == ("TINY", [int(VT.STRING)])
    # byte-identical to gguf-py writing the edited content
    expected = model.with_name("expected.gguf")
    kv = [(k, {"x.ctx": 8192, "general.name": "TINY"}.get(k, v), t, s) for k, v, t, s in KV0]
    gguf_py_write(expected, kv)
    assert after == expected.read_bytes()


def test_edit_rewrite_grows_and_repads(model):
    before = tensor_bytes(model)
    new_tokens = [f"tok{i}" for i in range(5000)]
    out = edit(
        model,
        set={"general.name": "a much longer name " * 20, "tokenizer.ggml.tokens": new_tokens},
        remove=["x.f64"],
    )
    assert out == model
    kvs = reader_kvs(model)
    assert "x.f64" not in kvs
    assert kvs["tokenizer.ggml.tokens"][0] == new_tokens
    assert kvs["tokenizer.ggml.tokens"][1] == [int(VT.ARRAY), int(VT.STRING)]
    assert kvs["x.ids"] == ([1, 2, 3], [int(VT.ARRAY), int(VT.UINT64)])
    assert tensor_bytes(model) == before
    expected = model.with_name("expected.gguf")
    new = {"general.name": "a much longer name " * 20, "tokenizer.ggml.tokens": new_tokens}
    kv = [(k, new.get(k, v), t, s) for k, v, t, s in KV0 if k != "x.f64"]
    gguf_py_write(expected, kv)
    assert model.read_bytes() == expected.read_bytes()


def test_edit_new_key_explicit_type_and_out(model, tmp_path):
    src = model.read_bytes()
    out = tmp_path / "out.gguf"
    edit(model, set={"x.new": GGUFValue(7, "u64"), "x.list": [1.5, 2.5]}, out=out)
    assert model.read_bytes() == src
    kvs = reader_kvs(out)
    assert kvs["x.new"] == (7, [int(VT.UINT64)])
    assert kvs["x.list"] == ([1.5, 2.5], [int(VT.ARRAY), int(VT.FLOAT32)])
    assert list(kvs)[-2:] == ["x.new", "x.list"]
    assert tensor_bytes(out) == tensor_bytes(model)


def test_edit_alignment_relayouts_data(model):
    before = tensor_bytes(model)
    edit(model, set={"general.alignment": 64})  # a plain int: general.alignment is always u32
    r = gguf.GGUFReader(model)
    assert r.alignment == 64
    assert all(t.data_offset % 64 == 0 for t in r.tensors)
    assert {t.name: t.data.tobytes() for t in r.tensors} == before
    expected = model.with_name("expected.gguf")
    gguf_py_write(expected, [*KV0, ("general.alignment", 64, VT.UINT32, None)])
    assert model.read_bytes() == expected.read_bytes()


def test_edit_errors(model):
    with pytest.raises(KeyError):
        edit(model, remove=["no.such.key"])
    with pytest.raises(E.GGUFInvalidValue):
        edit(model, set={"x.ctx": -1})  # existing type u32 is kept, -1 does not fit
    with pytest.raises(E.GGUFInvalidAlignment):
        edit(model, set={"general.alignment": GGUFValue(48, "u32")})


def test_edit_big_endian_and_v2_in_place(tmp_path):
    p = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(p, "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_key_value("x.ctx", 1, VT.UINT32)
    w.add_tensor("t", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    edit(p, set={"x.ctx": 2})
    with read(p) as f:
        assert f.byte_order == ">" and f.metadata["x.ctx"] == 2
        np.testing.assert_array_equal(f.numpy("t"), np.arange(8, dtype=np.float32))
    assert gguf.GGUFReader(p).fields["x.ctx"].contents() == 2


# --------------------------------------------------------------------------- ggml C oracle


class _Params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


def _lib():
    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    sigs = {
        "gguf_init_from_file": (vp, [cp, _Params]),
        "gguf_init_empty": (vp, []),
        "gguf_set_kv": (None, [vp, vp]),
        "gguf_set_val_u16": (None, [vp, cp, ctypes.c_uint16]),
        "gguf_set_val_i32": (None, [vp, cp, ctypes.c_int32]),
        "gguf_add_tensor": (None, [vp, vp]),
        "gguf_get_meta_size": (ctypes.c_size_t, [vp]),
        "gguf_get_meta_data": (None, [vp, vp]),
        "gguf_get_n_tensors": (ctypes.c_int64, [vp]),
        "gguf_get_tensor_name": (cp, [vp, ctypes.c_int64]),
        "ggml_get_tensor": (vp, [vp, cp]),
        "gguf_free": (None, [vp]),
        "ggml_free": (None, [vp]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class GGUFC:
    """The few gguf C calls gguf-split makes."""

    def __init__(self) -> None:
        self.lib = _lib()
        self.keep: list = []

    def open(self, path):
        meta = ctypes.c_void_p()
        ctx = self.lib.gguf_init_from_file(str(path).encode(), _Params(True, ctypes.pointer(meta)))
        assert ctx, f"ggml refused {path}"
        self.keep.append((ctx, meta))
        return ctx, meta

    def names(self, ctx):
        n = self.lib.gguf_get_n_tensors(ctx)
        return [self.lib.gguf_get_tensor_name(ctx, i) for i in range(n)]

    def meta(self, ctx) -> bytes:
        n = self.lib.gguf_get_meta_size(ctx)
        buf = ctypes.create_string_buffer(n)
        self.lib.gguf_get_meta_data(ctx, buf)
        return buf.raw

    def close(self):
        for ctx, meta in self.keep:
            self.lib.gguf_free(ctx)
            self.lib.ggml_free(meta)


def gguf_split_headers(src, groups: list[list[str]]) -> list[bytes]:
    """Shard headers exactly as llama.cpp's gguf-split builds them."""
    c = GGUFC()
    try:
        ctx, meta = c.open(src)
        n_tensors = len(c.names(ctx))
        outs = []
        for k, group in enumerate(groups):
            out = c.lib.gguf_init_empty()
            if k == 0:
                c.lib.gguf_set_kv(out, ctx)
            c.lib.gguf_set_val_u16(out, b"split.no", k)
            c.lib.gguf_set_val_u16(out, b"split.count", 0)
            c.lib.gguf_set_val_i32(out, b"split.tensors.count", n_tensors)
            for name in group:
                c.lib.gguf_add_tensor(out, c.lib.ggml_get_tensor(meta, name.encode()))
            outs.append(out)
        heads = []
        for out in outs:
            c.lib.gguf_set_val_u16(out, b"split.count", len(outs))
            heads.append(c.meta(out))
            c.lib.gguf_free(out)
        return heads
    finally:
        c.close()


def gguf_merge_header(shards) -> bytes:
    c = GGUFC()
    try:
        out = c.lib.gguf_init_empty()
        for i, p in enumerate(shards):
            ctx, meta = c.open(p)
            if i == 0:
                c.lib.gguf_set_val_u16(ctx, b"split.count", 0)
                c.lib.gguf_set_kv(out, ctx)
            for name in c.names(ctx):
                c.lib.gguf_add_tensor(out, c.lib.ggml_get_tensor(meta, name))
        head = c.meta(out)
        c.lib.gguf_free(out)
        return head
    finally:
        c.close()


def _data_bytes(path, names):
    with read(path) as f:
        out = b""
        for n in names:
            b = f.tensor_bytes(n).tobytes()
            out += b + bytes(-len(b) % 32)
        return out


# --------------------------------------------------------------------------- split / merge


@pytest.mark.parametrize(
    "kwargs,groups",
    [
        ({"max_tensors": 2}, [[0, 1], [2, 3], [4]]),
        ({"max_tensors": 2, "no_tensor_first_split": True}, [[], [0, 1], [2, 3], [4]]),
        ({"max_tensors": 128}, [[0, 1, 2, 3, 4]]),
        ({"max_size": 2600}, [[0], [1, 2, 3, 4]]),
        ({"max_size": "3K"}, [[0, 1, 2], [3, 4]]),
        ({"max_size": 100_000}, [[0, 1, 2, 3, 4]]),
    ],
)
def test_split_matches_gguf_split(model, tmp_path, kwargs, groups):
    names = [t[0] for t in _tensors()]
    out_dir = tmp_path / "shards"
    out_dir.mkdir()
    paths = split(model, out_dir=out_dir, **kwargs)
    n = len(groups)
    assert [p.name for p in paths] == [f"model-{i + 1:05d}-of-{n:05d}.gguf" for i in range(n)]
    heads = gguf_split_headers(model, [[names[i] for i in g] for g in groups])
    for p, head, g in zip(paths, heads, groups):
        data = p.read_bytes()
        assert data[: len(head)] == head
        assert data[len(head) :] == _data_bytes(model, [names[i] for i in g])
        kvs = reader_kvs(p)
        assert kvs["split.count"] == (n, [int(VT.UINT16)])
        assert kvs["split.tensors.count"] == (5, [int(VT.INT32)])
        assert list(kvs)[-3:] == ["split.no", "split.tensors.count", "split.count"]
    # read() of any shard presents the whole set
    whole = tensor_bytes(model)
    for p in paths:
        with read(p) as f:
            assert [t.name for t in f.tensors] == names
            assert f.metadata["general.name"] == "tiny"
            assert f.metadata["split.count"] == n
            assert {t.name: f.tensor_bytes(t.name).tobytes() for t in f.tensors} == whole
            np.testing.assert_array_equal(f.numpy("out"), _tensors()[4][1])
            assert [t.shard for t in f.tensors] == [k for k, g in enumerate(groups) for _ in g]


def test_merge_matches_gguf_split(model, tmp_path):
    paths = split(model, max_tensors=2, out_dir=tmp_path)
    merged = tmp_path / "merged.gguf"
    merge(paths[1], merged)  # any shard names the set
    head = gguf_merge_header(paths)
    data = merged.read_bytes()
    assert data[: len(head)] == head
    names = [t[0] for t in _tensors()]
    assert data[len(head) :] == _data_bytes(model, names)
    kvs = reader_kvs(merged)
    assert kvs["split.count"] == (0, [int(VT.UINT16)])
    with read(merged) as f:
        assert len(f.paths) == 1
        assert {t.name: f.tensor_bytes(t.name).tobytes() for t in f.tensors} == tensor_bytes(model)
        orig = reader_kvs(model)
        assert {k: v for k, v in kvs.items() if not k.startswith("split.")} == orig
    with pytest.raises(FileExistsError):
        merge(paths[0], merged)


def test_split_errors(model, tmp_path):
    with pytest.raises(E.GGUFSplitError):
        split(model, max_size=100, out_dir=tmp_path)  # first tensor alone exceeds it
    with pytest.raises(ValueError):
        split(model, max_size="1M", max_tensors=2)
    paths = split(model, max_tensors=2, out_dir=tmp_path)
    with pytest.raises(E.GGUFSplitError):
        split(paths[0], out_dir=tmp_path / "again")
    paths[2].unlink()
    with pytest.raises(E.GGUFSplitError):
        read(paths[0])
    with pytest.raises(E.GGUFSplitError):
        merge(model, tmp_path / "m.gguf")


def test_split_keeps_custom_alignment_valid(tmp_path):
    p = tmp_path / "a64.gguf"
    gguf_py_write(p, KV0, alignment=64)
    paths = split(p, max_tensors=3, out_dir=tmp_path)
    r0 = gguf.GGUFReader(paths[0])
    assert r0.alignment == 64 and all(t.data_offset % 64 == 0 for t in r0.tensors)
    with read(paths[1]) as f:
        assert {t.name: f.tensor_bytes(t.name).tobytes() for t in f.tensors} == tensor_bytes(p)


def test_writer_keeps_stored_dims(tmp_path):
    """dims= keeps trailing 1s as stored; split drops them like ggml_n_dims."""
    p = tmp_path / "d.gguf"
    with Writer(p) as w:
        w.add("x", 1, GGUFValueType.UINT8)
        w.add_tensor_info("t", "F32", (), dims=(4, 1, 1))
        w.write_tensor("t", np.zeros(4, np.float32))
    with read(p) as f:
        assert f.tensor("t").dims == (4, 1, 1)
    (tmp_path / "s").mkdir()
    paths = split(p, out_dir=tmp_path / "s")
    with read(paths[0]) as f:
        assert f.tensor("t").dims == (4,)


def test_streaming_memory_is_bounded(tmp_path):
    """Writer, edit (rewrite), split and merge hold one chunk, not the model (32 MiB here)."""
    import tracemalloc

    p = tmp_path / "big.gguf"
    rows, cols = 256, 16384  # 16 MiB per tensor
    tracemalloc.start()
    try:
        with Writer(p, arch="llama") as w:
            w.add_tensor_info("a", "F32", (rows, cols))
            w.add_tensor_info("b", "F32", (rows, cols))
            for name in ("a", "b"):
                for i in range(rows // 32):  # 2 MiB chunks
                    w.write_tensor_chunk(name, np.full((32, cols), i, np.float32))
        _, peak_write = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        edit(p, set={"general.name": "x" * 5000})
        _, peak_edit = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        shards = split(p, max_tensors=1, out_dir=tmp_path)
        merged = merge(shards[0], tmp_path / "merged.gguf")
        _, peak_split = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert max(peak_write, peak_edit, peak_split) < 8 << 20, (peak_write, peak_edit, peak_split)
    with read(merged) as f:
        assert f.metadata["general.name"] == "x" * 5000
        np.testing.assert_array_equal(f.numpy("b")[::32, 0], np.arange(8, dtype=np.float32))
