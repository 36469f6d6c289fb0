"""One test per GGUF hardening rule, each expecting its named error; plus fuzzing.

Malformed files are built byte by byte with a small builder; the builder's
well-formed output is first checked against gguf-py's and ggml's readers, so
each test breaks one rule of a file both accept.  ggml's C reader must refuse
every malformed file too, except where weightsmith is stricter (non-UTF-8
keys, zero dims).
"""

from __future__ import annotations

import struct
import time
import tracemalloc

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_gguf_edit_split import _lib, _Params
from weightsmith import errors as E
from weightsmith.gguf import Writer, parse, read


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def s(b: bytes | str) -> bytes:
    b = b.encode() if isinstance(b, str) else b
    return u64(len(b)) + b


def kv(key, vtype: int, payload: bytes) -> bytes:
    return s(key) + u32(vtype) + payload


def ti(name, dims, gtype=0, off=0) -> bytes:
    return s(name) + u32(len(dims)) + b"".join(u64(d) for d in dims) + u32(gtype) + u64(off)


def build(kvs=(), tis=(), data=b"", n_kv=None, n_tensors=None, version=3, align=32) -> bytes:
    head = b"GGUF" + u32(version)
    head += u64(len(tis) if n_tensors is None else n_tensors)
    head += u64(len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tis)
    head += bytes(-len(head) % align)
    return head + data


GOOD_KVS = [kv("general.architecture", 8, s("llama")), kv("x.u32", 4, u32(7))]
GOOD_TIS = [ti("a", [4], 0, 0), ti("b", [8, 2], 0, 32)]
GOOD_DATA = (
    np.arange(4, dtype=np.float32).tobytes() + bytes(16) + np.arange(16, dtype=np.float32).tobytes()
)


def load(tmp_path, data: bytes, name="bad.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    with read(p) as f:
        return dict(f.metadata), f.tensors


def ggml_accepts(path) -> bool:
    """Whether ggml's own C reader (libggml-base from llama-cpp-python) opens the file."""
    import ctypes

    lib = _lib()
    meta = ctypes.c_void_p()
    # no_alloc=False: ggml also reads the data blob, so it checks the data size
    ctx = lib.gguf_init_from_file(str(path).encode(), _Params(False, ctypes.pointer(meta)))
    if ctx:
        lib.gguf_free(ctx)
        lib.ggml_free(meta)
    return bool(ctx)


def expect(tmp_path, data: bytes, cls, field_part: str | None = None, ggml_rejects: bool = True):
    """``data`` raises ``cls`` (with offset and field); ggml's C reader refuses it too."""
    with pytest.raises(cls) as ei:
        load(tmp_path, data)
    if ggml_rejects:
        assert not ggml_accepts(tmp_path / "bad.gguf")
    err = ei.value
    assert type(err) is cls
    assert err.offset is not None and err.field, str(err)
    assert str(tmp_path) in str(err)
    if field_part:
        assert field_part in err.field
    # the same error from a buffer parse (the path the remote reader uses)
    with pytest.raises(cls):
        parse(data, len(data))
    return err


def test_builder_baseline_is_valid(tmp_path):
    data = build(GOOD_KVS, GOOD_TIS, GOOD_DATA)
    p = tmp_path / "good.gguf"
    p.write_bytes(data)
    r = gguf.GGUFReader(p)
    assert [t.name for t in r.tensors] == ["a", "b"]
    assert ggml_accepts(p)
    md, tensors = load(tmp_path, data, "good2.gguf")
    assert md == {"general.architecture": "llama", "x.u32": 7}
    assert [t.shape for t in tensors] == [(4,), (2, 8)]


def test_bad_magic(tmp_path):
    expect(tmp_path, b"GGUX" + build(GOOD_KVS)[4:], E.GGUFInvalidMagic, "magic")
    expect(tmp_path, b"GG", E.GGUFInvalidMagic)
    expect(tmp_path, b"", E.GGUFInvalidMagic)


@pytest.mark.parametrize("raw", [u32(0), u32(4), struct.pack(">I", 4), u32(0xFFFFFFFF)])
def test_unsupported_version(tmp_path, raw):
    data = bytearray(build(GOOD_KVS))
    data[4:8] = raw
    expect(tmp_path, bytes(data), E.GGUFUnsupportedVersion, "version")


def test_truncated_header_and_scalar(tmp_path):
    expect(tmp_path, b"GGUF" + u32(3) + u64(0), E.GGUFTruncated, "n_kv")
    data = build([kv("x", 10, u64(5))])
    cut = data[: data.index(b"x") + 1 + 4 + 3]  # u64 value cut after 3 bytes
    expect(tmp_path, cut, E.GGUFTruncated, "value")


@pytest.mark.parametrize("field", ["n_kv", "n_tensors"])
def test_count_too_large(tmp_path, field):
    big = 1 << 40
    data = build(GOOD_KVS, n_kv=big) if field == "n_kv" else build(GOOD_KVS, n_tensors=big)
    expect(tmp_path, data, E.GGUFCountTooLarge, field)


def test_counts_cannot_fit_max_u64(tmp_path):
    expect(tmp_path, build(GOOD_KVS, n_kv=2**64 - 1), E.GGUFCountTooLarge)


@pytest.mark.parametrize("length", [2**63, 2**64 - 1, 10_000])
def test_string_too_long(tmp_path, length):
    key = u64(length) + b"abc"
    expect(tmp_path, build([key + u32(4) + u32(1)]), E.GGUFStringTooLong, "key 0")
    value = kv("k", 8, u64(length) + b"abc")
    expect(tmp_path, build([value]), E.GGUFStringTooLong, "'k'")


@pytest.mark.parametrize(
    "etype,count",
    [(10, 2**61), (10, 2**64 - 1), (4, 1000), (8, 2**62), (9, 2**60), (0, 2**63)],
)
def test_array_too_long(tmp_path, etype, count):
    data = build([kv("arr", 9, u32(etype) + u64(count) + bytes(16))])
    expect(tmp_path, data, E.GGUFArrayTooLong, "'arr'")


def test_string_in_array_runs_past_end(tmp_path):
    payload = u32(8) + u64(3) + s("a") + s("b") + u64(1000) + b"c"
    expect(tmp_path, build([kv("arr", 9, payload)]), E.GGUFStringTooLong, "'arr' array[2]")


def _string_array_file(version: int, order: str, strings: list[bytes], tail: bytes) -> tuple:
    """A one-KV GGUF: key 'arr', a string array declaring len(strings) + 1 strings, the
    strings, then ``tail`` (the last string, whole or broken) and nothing after it.
    Returns the bytes and the offset of the tail."""
    lw = "I" if version == 1 else "Q"
    n = lambda v: struct.pack(order + lw, v)  # noqa: E731
    head = b"GGUF" + struct.pack(order + "I", version) + n(0) + n(1)
    head += n(3) + b"arr" + struct.pack(order + "I", 9) + struct.pack(order + "I", 8)
    head += n(len(strings) + 1) + b"".join(n(len(x)) + x for x in strings)
    return head + tail, len(head), n


@pytest.mark.parametrize("version,order", [(3, "<"), (3, ">"), (1, "<")])
def test_string_array_errors_name_the_string_and_its_offset(tmp_path, version, order):
    """The string that breaks an array is named with its index and the offset of its length."""
    strings = [b"a" * 10, "\u00e9t\u00e9".encode(), b"", b"\xff\xfe" * 6]
    _, at, n = _string_array_file(version, order, strings, b"")
    lw = len(n(0))
    whole, _, _ = _string_array_file(version, order, strings, n(2) + b"ok")
    p = tmp_path / "ok.gguf"
    p.write_bytes(whole)
    with read(p) as f:
        assert f.metadata["arr"] == [x.decode("utf-8", "surrogateescape") for x in strings] + ["ok"]
    # a length past the end of the file
    data, at, _ = _string_array_file(version, order, strings, n(1000) + b"c")
    err = expect(tmp_path, data, E.GGUFStringTooLong, ggml_rejects=version == 3)
    assert (err.field, err.offset, err.found) == ("'arr' array[4]", at, 1000)
    assert err.expected == f"length <= {len(data) - at - lw}"
    # a length prefix cut by the end of the file
    data, at, _ = _string_array_file(version, order, strings, n(1)[:3])
    err = expect(tmp_path, data, E.GGUFTruncated, ggml_rejects=version == 3)
    assert (err.field, err.offset, err.found) == ("'arr' array[4] length", at, "3 bytes left")
    # a prefix of a longer file ending inside the array asks for more, never names an error
    for cut in range(at - 2 * lw, len(whole)):
        with pytest.raises(E.NeedMoreData) as ei:
            parse(whole[:cut], len(whole))
        assert cut < ei.value.needed <= len(whole)


@pytest.mark.parametrize("where", ["value", "element"])
def test_unknown_value_type(tmp_path, where):
    data = (
        build([kv("k", 13, u32(0))])
        if where == "value"
        else build([kv("k", 9, u32(99) + u64(1) + u32(0))])
    )
    expect(tmp_path, data, E.GGUFUnknownValueType, "'k'")


def test_nesting_too_deep(tmp_path):
    inner = u32(4) + u64(1) + u32(5)  # arr[u32] = [5]
    for _ in range(9):
        inner = u32(9) + u64(1) + inner
    expect(tmp_path, build([kv("deep", 9, inner)]), E.GGUFNestingTooDeep, "'deep'")
    # 8 levels are fine
    ok = u32(4) + u64(1) + u32(5)
    for _ in range(7):
        ok = u32(9) + u64(1) + ok
    md, _ = load(tmp_path, build([kv("deep", 9, ok)]), "ok.gguf")
    v = md["deep"]
    for _ in range(7):
        v = v[0]
    assert v == [5]


def test_empty_key(tmp_path):
    expect(tmp_path, build([kv("", 4, u32(1))]), E.GGUFEmptyKey, "key 0")


def test_duplicate_key(tmp_path):
    expect(tmp_path, build([kv("k", 4, u32(1)), kv("k", 8, s("x"))]), E.GGUFDuplicateKey, "'k'")


def test_invalid_utf8_key(tmp_path):
    data = build([kv(b"\xff\xfe", 4, u32(1))])
    expect(tmp_path, data, E.GGUFInvalidUTF8, "key 0", ggml_rejects=False)  # ggml takes any bytes


def test_duplicate_tensor(tmp_path):
    data = build(GOOD_KVS, [ti("a", [4], 0, 0), ti("a", [4], 0, 32)], GOOD_DATA)
    expect(tmp_path, data, E.GGUFDuplicateTensor, "'a'")


def test_tensor_name_too_long(tmp_path):
    ok = build([], [ti("n" * 63, [4], 0, 0)], bytes(32))
    load(tmp_path, ok, "ok.gguf")
    data = build([], [ti("n" * 64, [4], 0, 0)], bytes(32))
    expect(tmp_path, data, E.GGUFTensorNameTooLong)


def test_too_many_dims(tmp_path):
    expect(
        tmp_path,
        build([], [ti("a", [1, 1, 1, 1, 1], 0, 0)], bytes(32)),
        E.GGUFTooManyDims,
        "n_dims",
    )


@pytest.mark.parametrize("dim", [0, 2**63, 2**64 - 1])
def test_bad_dim(tmp_path, dim):
    data = build([], [ti("a", [4, dim], 0, 0)], bytes(32))
    expect(
        tmp_path, data, E.GGUFInvalidDim, "dims[1]", ggml_rejects=dim != 0
    )  # ggml allows empty tensors


@pytest.mark.parametrize(
    "dims,gtype",
    [([2**32, 2**32], 0), ([2**62, 4], 0), ([2**31, 2**31], 28)],  # elements, elements, bytes (F64)
)
def test_size_overflow(tmp_path, dims, gtype):
    expect(tmp_path, build([], [ti("a", dims, gtype, 0)], bytes(32)), E.GGUFSizeOverflow, "'a'")


@pytest.mark.parametrize("gtype", [4, 5, 31, 999, 2**32 - 1])
def test_unknown_ggml_type(tmp_path, gtype):
    expect(tmp_path, build([], [ti("a", [32], gtype, 0)], bytes(64)), E.GGUFUnknownGGMLType, "type")


def test_row_not_block_multiple(tmp_path):
    expect(
        tmp_path,
        build([], [ti("q", [33, 2], 2, 0)], bytes(128)),
        E.GGUFRowNotBlockMultiple,
        "dims[0]",
    )
    expect(tmp_path, build([], [ti("q", [128], 12, 0)], bytes(256)), E.GGUFRowNotBlockMultiple)
    # no dims at all is one element: not a whole block either
    expect(tmp_path, build([], [ti("q", [], 2, 0)], bytes(64)), E.GGUFRowNotBlockMultiple)


@pytest.mark.parametrize(
    "payload",
    [
        (10, u64(32)),
        (5, struct.pack("<i", 32)),
        (8, s("32")),
        (4, u32(0)),
        (4, u32(48)),
        (4, u32(3)),
    ],
)
def test_bad_alignment(tmp_path, payload):
    vtype, raw = payload
    data = build([kv("general.alignment", vtype, raw)], [ti("a", [4], 0, 0)], bytes(64))
    expect(tmp_path, data, E.GGUFInvalidAlignment, "general.alignment")


def test_unaligned_offset(tmp_path):
    data = build([], [ti("a", [4], 0, 0), ti("b", [4], 0, 16)], bytes(64))
    expect(tmp_path, data, E.GGUFUnalignedOffset, "'b' offset")


def test_tensor_overlap(tmp_path):
    data = build([], [ti("a", [64], 0, 0), ti("b", [4], 0, 128)], bytes(512))
    expect(tmp_path, data, E.GGUFTensorOverlap, "'b' offset")


def test_tensor_out_of_order(tmp_path):
    data = build([], [ti("a", [4], 0, 64), ti("b", [4], 0, 0)], bytes(128))
    expect(tmp_path, data, E.GGUFTensorOutOfOrder, "'b' offset")


def test_tensor_past_eof(tmp_path):
    data = build(GOOD_KVS, GOOD_TIS, GOOD_DATA)
    expect(tmp_path, data[:-1], E.GGUFDataPastEOF, "'b'")


def test_data_section_past_eof(tmp_path):
    data = build([], [ti("a", [4], 0, 0)], b"", align=1)
    assert len(data) % 32
    expect(tmp_path, data, E.GGUFDataPastEOF, "data section")


def test_zero_tensor_file_without_padding_is_valid(tmp_path):
    md, tensors = load(tmp_path, build(GOOD_KVS, align=1))
    assert tensors == [] and md["x.u32"] == 7


# --------------------------------------------------------------------------- writer refuses


def test_writer_refuses_bad_input(tmp_path):
    w = Writer(tmp_path / "w.gguf")
    with pytest.raises(E.GGUFTensorNameTooLong):
        w.add_tensor_info("x" * 64, "F32", (4,))
    with pytest.raises(E.GGUFRowNotBlockMultiple):
        w.add_tensor_info("q", "Q4_0", (2, 33))
    with pytest.raises(E.GGUFInvalidDim):
        w.add_tensor_info("z", "F32", (0, 4))
    with pytest.raises(E.GGUFTooManyDims):
        w.add_tensor_info("d", "F32", (1, 1, 1, 1, 1))
    with pytest.raises(E.GGUFUnknownGGMLType):
        w.add_tensor_info("u", "Q9_9", (4,))
    with pytest.raises(E.GGUFInvalidAlignment):
        w.add("general.alignment", 48, "u32")
    with pytest.raises(E.GGUFInvalidValue):
        w.add("big", 2**40)  # int infers INT32: say u64/i64 explicitly
    with pytest.raises(E.GGUFInvalidValue):
        w.add("mixed", [1, "a"])
    with pytest.raises(E.GGUFInvalidValue):
        w.add("neg", [-1], "u32")
    with pytest.raises(E.GGUFEmptyKey):
        w.add("", 1)
    w.add_tensor_info("a", "F32", (4,))
    with pytest.raises(E.GGUFDuplicateTensor):
        w.add_tensor_info("a", "F32", (4,))
    with pytest.raises(E.WriteError):
        w.write_tensor("a", np.zeros(3, np.float32))
    w.abort()
    assert not (tmp_path / "w.gguf").exists()
    assert list(tmp_path.iterdir()) == []


def test_writer_no_half_written_output(tmp_path):
    target = tmp_path / "out.gguf"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), Writer(target) as w:
        w.add_tensor_info("a", "F32", (4,))
        w.add_tensor_info("b", "F32", (4,))
        w.write_tensor("a", np.zeros(4, np.float32))
        raise RuntimeError("killed mid-way")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.gguf"]


# --------------------------------------------------------------------------- fuzzing


def _seed_file() -> bytes:
    kvs = [
        kv("general.architecture", 8, s("llama")),
        kv("tok", 9, u32(8) + u64(4) + s("a") + s("") + s("bcd") + s("é")),
        kv("sc", 9, u32(6) + u64(3) + np.ones(3, np.float32).tobytes()),
        kv("n", 9, u32(9) + u64(1) + u32(4) + u64(1) + u32(3)),
        kv("general.alignment", 4, u32(32)),
    ]
    return build(kvs, GOOD_TIS, GOOD_DATA)


SEED = _seed_file()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), max_size=6),
    st.integers(0, len(SEED)),
    st.sampled_from([None, 0, 1, 7]),
)
def test_fuzz_never_crashes_hangs_or_overallocates(flips, cut, big_field):
    data = bytearray(SEED)
    for i, b in flips:
        data[i] = b
    if big_field is not None:  # plant a huge count/length at a random field boundary
        at = [8, 16, 24, 32 + 20, 100][big_field % 5]
        data[at : at + 8] = u64(2**62 + big_field)
    data = bytes(data[:cut]) if cut < len(data) else bytes(data)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        parse(data, len(data))
    except E.GGUFError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 5
    assert peak < 64 * len(SEED) + (1 << 20)
