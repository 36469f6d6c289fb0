"""weightsmith.gguf against gguf-py (PyPI ``gguf``) in both directions.

* files gguf-py writes (all 13 value types, nested arrays, both byte orders,
  a custom alignment, quantized raw tensors) read identically in ours;
* files we write read identically in gguf-py's GGUFReader;
* our Writer's bytes equal GGUFWriter's for the same content;
* v1 files (built from gguf-py output by widening nothing: u32 counts) and
  prefixes of files (NeedMoreData) parse to the same header.
"""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from weightsmith import errors as E
from weightsmith.gguf import GGUFValueType, MetaType, Writer, parse, read
from weightsmith.quant.file import dequantize_tensor

VT = gguf.GGUFValueType
ORDERS = [("<", gguf.GGUFEndian.LITTLE), (">", gguf.GGUFEndian.BIG)]

# key, value, gguf-py type, gguf-py sub_type, our type argument
KVS = [
    ("k.u8", 200, VT.UINT8, None, "u8"),
    ("k.i8", -100, VT.INT8, None, "i8"),
    ("k.u16", 60000, VT.UINT16, None, "u16"),
    ("k.i16", -30000, VT.INT16, None, "i16"),
    ("k.u32", 4_000_000_000, VT.UINT32, None, "u32"),
    ("k.i32", -2_000_000_000, VT.INT32, None, None),
    ("k.f32", 3.25, VT.FLOAT32, None, None),
    ("k.bool", False, VT.BOOL, None, None),
    ("k.str", "héllo ▁ wörld", VT.STRING, None, None),
    ("k.empty_str", "", VT.STRING, None, None),
    ("k.u64", 2**64 - 2, VT.UINT64, None, "u64"),
    ("k.i64", -(2**63), VT.INT64, None, "i64"),
    ("k.f64", 1e-300, VT.FLOAT64, None, "f64"),
    ("k.arr_u8", [0, 255, 7], VT.ARRAY, VT.UINT8, "u8"),
    ("k.arr_i8", [-128, 127], VT.ARRAY, VT.INT8, "i8"),
    ("k.arr_u16", [1, 65535], VT.ARRAY, VT.UINT16, "u16"),
    ("k.arr_i16", [-32768, 5], VT.ARRAY, VT.INT16, "i16"),
    ("k.arr_u32", [1, 2**32 - 1], VT.ARRAY, VT.UINT32, "u32"),
    ("k.arr_i32", [1, -2, 3], VT.ARRAY, None, None),
    ("k.arr_f32", [0.5, -1.25, 3.0], VT.ARRAY, None, None),
    ("k.arr_bool", [True, False, True], VT.ARRAY, None, None),
    ("k.arr_str", ["a", "", "ü" * 300, "tok"], VT.ARRAY, None, None),
    ("k.arr_u64", [0, 2**64 - 1], VT.ARRAY, VT.UINT64, "u64"),
    ("k.arr_i64", [-(2**63), 2**63 - 1], VT.ARRAY, VT.INT64, "i64"),
    ("k.arr_f64", [0.1, 0.2], VT.ARRAY, VT.FLOAT64, "f64"),
    ("k.nested", [[1, 2], [3, 4, 5]], VT.ARRAY, None, None),
    ("k.nested_str", [["x", "yz"], ["w"]], VT.ARRAY, None, None),
]


def _tensors():
    rng = np.random.default_rng(0)
    return [
        ("t.f32", rng.standard_normal((3, 64)).astype(np.float32), None),
        ("t.f16", rng.standard_normal((5,)).astype(np.float16), None),
        ("t.f64", rng.standard_normal((2, 2, 3)).astype(np.float64), None),
        ("t.i8", rng.integers(-128, 127, (7,), dtype=np.int8), None),
        ("t.i16", rng.integers(-1000, 1000, (2, 9), dtype=np.int16), None),
        ("t.i32", rng.integers(-(2**31), 2**31 - 1, (4,), dtype=np.int32), None),
        ("t.i64", rng.integers(-(2**40), 2**40, (1, 2, 3, 4), dtype=np.int64), None),
        ("t.q4k", rng.integers(0, 256, (2, 144), dtype=np.uint8), gguf.GGMLQuantizationType.Q4_K),
        (
            "t.q8_0",
            rng.integers(0, 256, (3, 2 * 34), dtype=np.uint8),
            gguf.GGMLQuantizationType.Q8_0,
        ),
    ]


def _elem_shape(arr, raw):
    if raw is None:
        return arr.shape
    bs, ts = gguf.GGML_QUANT_SIZES[raw]
    return (*arr.shape[:-1], arr.shape[-1] // ts * bs)


def write_gguf_py(path, endian=gguf.GGUFEndian.LITTLE, alignment=None):
    w = gguf.GGUFWriter(path, "llama", endianess=endian)
    if alignment:
        w.add_custom_alignment(alignment)
    for key, value, vt, sub, _ in KVS:
        w.add_key_value(key, value, vt, sub_type=sub)
    for name, arr, raw in _tensors():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_ours(path, order="<", alignment=32):
    tensors = _tensors()
    with Writer(path, arch="llama", alignment=alignment, byte_order=order) as w:
        for key, value, _, _, ours in KVS:
            w.add(key, value, ours)
        for name, arr, raw in tensors:
            gt = raw.name if raw is not None else {np.dtype(np.float32): "F32"}.get(arr.dtype)
            gt = gt or arr.dtype.name.upper().replace("FLOAT", "F").replace("INT", "I")
            w.add_tensor_info(name, gt, _elem_shape(arr, raw))
        for name, arr, _ in tensors:
            w.write_tensor(name, arr)


def _flat_types(mt: MetaType) -> list[int]:
    out = [int(mt.type)]
    while mt.element is not None:
        mt = mt.element
        out.append(int(mt.type))
    return out


def _flatten(v):
    if isinstance(v, list) and v and isinstance(v[0], list):
        return [x for inner in v for x in _flatten(inner)]
    return v


def assert_same_as_reader(ours_path, ref_path, same_layout=True):
    """Every field and tensor of GGUFReader(ref_path) equals ours on ours_path.

    ``same_layout=False`` (a v1 copy of the file) compares data offsets relative
    to the data section.
    """
    r = gguf.GGUFReader(ref_path)
    with read(ours_path) as f:
        fields = {k: v for k, v in r.fields.items() if not k.startswith("GGUF.")}
        assert list(f.metadata) == list(fields)
        for key, field in fields.items():
            assert _flat_types(f.metadata_type(key)) == [int(t) for t in field.types], key
            ours = f.metadata[key]
            theirs = field.contents()
            # gguf-py flattens nested arrays; compare flattened
            assert _flatten(ours) == theirs, key
        assert f.alignment == r.alignment
        assert len(f.tensors) == len(r.tensors)
        for t, rt in zip(f.tensors, r.tensors):
            assert t.name == rt.name
            assert t.ggml_type.id == int(rt.tensor_type)
            assert t.ggml_type.name == rt.tensor_type.name
            assert t.dims == tuple(int(x) for x in rt.shape)
            assert t.shape == tuple(reversed(t.dims))
            assert t.n_elements == rt.n_elements
            assert t.nbytes == rt.n_bytes
            if same_layout:
                assert t.offset == rt.data_offset
            assert t.offset - f.header.data_start == rt.data_offset - r.data_offset
            assert f.tensor_bytes(t.name).tobytes() == rt.data.tobytes()
            if t.ggml_type.numpy is not None:
                np.testing.assert_array_equal(f.numpy(t.name), rt.data.reshape(t.shape))


@pytest.mark.parametrize("order,endian", ORDERS)
@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_gguf_py_files(tmp_path, order, endian, alignment):
    p = tmp_path / "ref.gguf"
    write_gguf_py(p, endian, alignment)
    assert_same_as_reader(p, p)
    with read(p) as f:
        assert f.version == 3
        assert f.byte_order == order
        assert f.alignment == (alignment or 32)
        assert f.metadata["k.nested"] == [[1, 2], [3, 4, 5]]
        assert f.metadata["k.nested_str"] == [["x", "yz"], ["w"]]
        assert str(f.metadata_type("k.nested")) == "arr[arr[i32]]"
        assert f.metadata_type("k.arr_u64") == MetaType(
            GGUFValueType.ARRAY, MetaType(GGUFValueType.UINT64)
        )
        for key, value, *_ in KVS:
            if isinstance(value, float):
                assert f.metadata[key] == pytest.approx(value, rel=1e-6)
            else:
                assert f.metadata[key] == value, key


@pytest.mark.parametrize("order,endian", ORDERS)
@pytest.mark.parametrize("alignment", [None, 64])
def test_writer_byte_identical_and_read_by_gguf_py(tmp_path, order, endian, alignment):
    ref, ours = tmp_path / "ref.gguf", tmp_path / "ours.gguf"
    write_gguf_py(ref, endian, alignment)
    write_ours(ours, order, alignment or 32)
    assert ours.read_bytes() == ref.read_bytes()
    assert_same_as_reader(ours, ours)


def test_roundtrip_keeps_exact_types(tmp_path):
    """A value read and written again (with metadata_type) keeps its GGUF type and bytes."""
    ref, out = tmp_path / "ref.gguf", tmp_path / "out.gguf"
    write_gguf_py(ref)
    with read(ref) as f, Writer(out, byte_order=f.byte_order) as w:
        for key in f.metadata:
            w.add(key, f.metadata[key], f.metadata_type(key))
        for t in f.tensors:
            w.add_tensor_info(t.name, t.ggml_type, t.shape)
        for t in f.tensors:
            w.write_tensor(t.name, f.tensor_bytes(t.name))
    assert out.read_bytes() == ref.read_bytes()


def test_writer_numpy_values_and_chunks(tmp_path):
    """numpy arrays as metadata values and chunked tensor writes match GGUFWriter."""
    ref, ours = tmp_path / "ref.gguf", tmp_path / "ours.gguf"
    scores = np.linspace(-1, 1, 1000, dtype=np.float32)
    types = np.arange(1000, dtype=np.int32) % 6
    big = np.arange(10_000, dtype=np.float32).reshape(100, 100)
    w = gguf.GGUFWriter(ref, "gpt2")
    w.add_array("tokenizer.ggml.scores", scores.tolist())
    w.add_key_value("tokenizer.ggml.token_type", types.tolist(), VT.ARRAY)
    w.add_key_value("x.u64", 5, VT.UINT64)
    w.add_tensor("big", big)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with Writer(ours, arch="gpt2") as ow:
        ow.add("tokenizer.ggml.scores", scores)
        ow.add("tokenizer.ggml.token_type", types)
        ow.add("x.u64", np.uint64(5))
        ow.add_tensor_info("big", "F32", big.shape)
        flat = big.reshape(-1)
        for a in range(0, flat.size, 3001):
            ow.write_tensor_chunk("big", flat[a : a + 3001])
    assert ours.read_bytes() == ref.read_bytes()


def test_big_endian_tensor_values(tmp_path):
    p = tmp_path / "be.gguf"
    write_gguf_py(p, gguf.GGUFEndian.BIG)
    with read(p) as f:
        for name, arr, raw in _tensors():
            if raw is None:
                np.testing.assert_array_equal(f.numpy(name), arr)
                assert f.numpy(name).dtype.byteorder in (">", "|")


# --------------------------------------------------------------------------- string arrays

STRINGS = [
    [],
    ["a"],
    [""],
    ["", "", "x", ""],
    ["x" * 255, "y" * 256, "z" * 70_000, "w"],
    ["a\x00b", "\x00", "\x00" * 9, "c", "é\x00"],
    [bytes([0xFF, 0xFE]), b"ok", bytes([0xC3]), b"\xe2\x82", b"fine"],
    [f"tok{i}" * (i % 7) for i in range(5000)],
]


@pytest.mark.parametrize("order,endian", ORDERS)
@pytest.mark.parametrize("strings", STRINGS, ids=range(len(STRINGS)))
def test_string_arrays(tmp_path, order, endian, strings):
    p = tmp_path / "s.gguf"
    w = gguf.GGUFWriter(p, "llama", endianess=endian)
    w.add_key_value("before", 1, VT.UINT8)
    if strings:
        w.add_key_value("s", strings, VT.ARRAY, sub_type=VT.STRING)
    else:  # gguf-py refuses empty arrays: write one with ours
        pass
    w.add_key_value("after", "\x00\x00\x00\x00\x00\x00\x00", VT.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if not strings:
        with Writer(p, arch="llama", byte_order=order) as ow:
            ow.add("before", 1, "u8")
            ow.add("s", [], "str")
            ow.add("after", "\x00" * 7)
    raw = [s.encode() if isinstance(s, str) else s for s in strings]
    with read(p) as f:
        arr = f.array("s")
        assert len(arr) == len(strings)
        assert [arr.raw(i) for i in range(len(arr))] == raw
        assert f.metadata["s"] == [b.decode("utf-8", "surrogateescape") for b in raw]
        assert f.metadata["after"] == "\x00" * 7
        assert f.summary("s") == f"arr[str] x {len(strings)}"
        # index access agrees with the bulk decode
        for i in range(0, len(strings), max(1, len(strings) // 10)):
            assert arr[i] == f.metadata["s"][i]


# --------------------------------------------------------------------------- v1 and prefixes


def to_v1(src) -> bytes:
    """A GGUFv1 file with the content of a (little-endian, no nested arrays) gguf-py file.

    v1 differs from v2/v3 only in widths: u32 counts, string lengths, array
    counts and dims.  Built from GGUFReader's view of the file.
    """
    r = gguf.GGUFReader(src)
    u32 = lambda n: struct.pack("<I", n)  # noqa: E731
    s = lambda b: u32(len(b)) + b  # noqa: E731
    fields = {k: v for k, v in r.fields.items() if not k.startswith("GGUF.")}
    out = [b"GGUF", u32(1), u32(len(r.tensors)), u32(len(fields))]
    for key, fld in fields.items():
        out += [s(key.encode()), u32(fld.types[0])]
        if fld.types[0] == VT.STRING:
            out.append(s(fld.parts[-1].tobytes()))
        elif fld.types[0] == VT.ARRAY:
            et = fld.types[1]
            out += [u32(et), u32(len(fld.data))]
            for i in fld.data:
                b = fld.parts[i].tobytes()
                out.append(s(b) if et == VT.STRING else b)
        else:
            out.append(fld.parts[-1].tobytes())
    for t in r.tensors:
        out += [s(t.name.encode()), u32(len(t.shape))]
        out += [u32(int(d)) for d in t.shape]
        out += [u32(int(t.tensor_type)), struct.pack("<Q", t.data_offset - r.data_offset)]
    head = b"".join(out)
    head += bytes(-len(head) % r.alignment)
    return head + bytes(r.data[r.data_offset :])


def test_reads_v1(tmp_path):
    ref = tmp_path / "ref.gguf"
    w = gguf.GGUFWriter(ref, "llama")
    for key, value, vt, sub, _ in KVS:
        if key.startswith("k.nested"):
            continue
        w.add_key_value(key, value, vt, sub_type=sub)
    for name, arr, raw in _tensors():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(to_v1(ref))
    with read(v1) as f:
        assert f.version == 1
    assert_same_as_reader(v1, ref, same_layout=False)


def test_prefix_parsing_needs_more_data(tmp_path):
    """Parsing growing prefixes: NeedMoreData(needed > len) until the header is complete."""
    p = tmp_path / "ref.gguf"
    write_gguf_py(p)
    data = p.read_bytes()
    full = parse(data, len(data))
    for k in list(range(0, 600, 7)) + list(range(600, full.data_start + 1, 53)):
        try:
            h = parse(data[:k], len(data))
        except E.NeedMoreData as e:
            assert k < e.needed <= len(data)
        else:
            assert [t.offset for t in h.tensors] == [t.offset for t in full.tensors]
            assert dict(h.metadata) == dict(full.metadata)
    # following the hints reaches the full header
    k, rounds = 4, 0
    while True:
        try:
            h = parse(data[:k], len(data))
            break
        except E.NeedMoreData as e:
            k, rounds = e.needed, rounds + 1
    assert rounds < 10
    assert h.data_start == full.data_start and h.tensors == full.tensors


def test_prefix_parsing_long_string_array(tmp_path):
    p = tmp_path / "v.gguf"
    tokens = [f"t{i}" for i in range(20_000)]
    with Writer(p, arch="llama") as w:
        w.add("tokenizer.ggml.tokens", tokens)
        w.add_tensor_info("x", "F32", (4,))
        w.write_tensor("x", np.zeros(4, np.float32))
    data = p.read_bytes()
    with pytest.raises(E.NeedMoreData) as ei:
        parse(data[:1000], len(data))
    assert ei.value.needed > 1000
    h = parse(data[: ei.value.needed], len(data)) if ei.value.needed >= len(data) - 64 else None
    k = ei.value.needed
    while h is None:
        try:
            h = parse(data[:k], len(data))
        except E.NeedMoreData as e:
            k = e.needed
    assert h.metadata["tokenizer.ggml.tokens"] == tokens


def test_tensor_infos_and_context_manager(tmp_path):
    p = tmp_path / "ref.gguf"
    write_gguf_py(p)
    f = read(p)
    with f:
        t = f.tensor("t.q4k")
        assert t.ggml_type.name == "Q4_K" and t.ggml_type.id == 12
        assert t.shape == (2, 256) and t.dims == (256, 2)
        assert t.nbytes == 288 and t.n_elements == 512
        assert f.tensor_bytes("t.q4k").shape == (288,)
        with pytest.raises(TypeError):
            f.numpy("t.q4k")
        with pytest.raises(E.TensorNotFound):
            f.tensor("nope")
    with pytest.raises(E.ClosedFileError):
        f.tensor_bytes("t.f32")


@pytest.mark.parametrize("order", ["<", ">"])
def test_bf16_and_value_preserving_byte_order(tmp_path, order):
    import ml_dtypes

    p = tmp_path / "bf.gguf"
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    bf = x.astype(ml_dtypes.bfloat16)
    f16_be = x.astype(">f2")  # explicit byte order: values are kept, not bytes
    with Writer(p, byte_order=order) as w:
        w.add_tensor_info("bf", "BF16", bf.shape)
        w.add_tensor_info("h", "F16", x.shape)
        w.add_tensor_info("f", "F32", x.shape)
        w.write_tensor("bf", bf)
        w.write_tensor("h", f16_be)
        w.write_tensor("f", x.astype(np.float64))  # cast to the declared type
    with read(p) as f:
        np.testing.assert_array_equal(f.numpy("bf").astype(np.float32), bf.astype(np.float32))
        np.testing.assert_array_equal(f.numpy("h"), x.astype(np.float16))
        np.testing.assert_array_equal(f.numpy("f"), x)
        bits = bf.view(np.uint16).astype(np.dtype("u2").newbyteorder(order)).tobytes()
        assert f.tensor_bytes("bf").tobytes() == bits
    r = gguf.GGUFReader(p)
    assert r.tensors[1].data.tolist() == x.astype(np.float16).tolist()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # random scales: inf/nan in both
def test_dequantize_matches_gguf_py(tmp_path):
    p = tmp_path / "q.gguf"
    write_gguf_py(p)
    from gguf.quants import dequantize as gdq

    with read(p) as f:
        for name in ("t.q4k", "t.q8_0"):
            t = f.tensor(name)
            raw = f.tensor_bytes(name).reshape(t.shape[0], -1)
            ref = gdq(raw, gguf.GGMLQuantizationType(t.ggml_type.id))
            np.testing.assert_array_equal(dequantize_tensor(f, name), ref.astype(np.float32))
        np.testing.assert_array_equal(
            dequantize_tensor(f, "t.f16"), f.numpy("t.f16").astype(np.float32)
        )


@pytest.mark.parametrize("order,endian", ORDERS)
def test_string_array_zero_filled_and_indexing(tmp_path, order, endian):
    """Zero-filled strings (prefixes that look like more zeros) scan like any others;
    negative and out-of-range indexes behave like a list's."""
    strings = [s for group in STRINGS[1:] for s in group][:3000] + ["\x00" * 300] * 50 + ["end"]
    p = tmp_path / "w.gguf"
    w = gguf.GGUFWriter(p, "llama", endianess=endian)
    w.add_key_value("s", strings, VT.ARRAY, sub_type=VT.STRING)
    w.add_key_value("n", [1, 2], VT.ARRAY)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    raw = [s.encode() if isinstance(s, str) else s for s in strings]
    with read(p) as f:
        arr = f.array("s")
        assert [arr.raw(i) for i in range(len(arr))] == raw
        assert arr.raw(-1) == b"end" and arr[-51] == "\x00" * 300 and arr[-2:] == arr.tolist()[-2:]
        for bad in (len(arr), -len(arr) - 1):
            with pytest.raises(IndexError):
                arr.raw(bad)
        assert f.metadata["n"] == [1, 2]
        assert f.byte_order == order


REAL = Path(__file__).parent / "data" / "gguf" / "ggml-vocab-llama-spm.gguf"


def test_real_converter_output(tmp_path):
    """A vocab file written by llama.cpp's converter: same values as gguf-py, and our rewrite is its bytes."""
    assert_same_as_reader(REAL, REAL)
    out = tmp_path / "rt.gguf"
    with read(REAL) as f, Writer(out, byte_order=f.byte_order) as w:
        assert len(f.metadata["tokenizer.ggml.tokens"]) == 32000
        for key in f.metadata:
            w.add(key, f.metadata[key], f.metadata_type(key))
    src, ours = REAL.read_bytes(), out.read_bytes()
    # the converter stops after the KVs (no tensors, no padding); we pad to the alignment as GGUFWriter does
    assert ours[: len(src)] == src
    assert ours[len(src) :] == bytes(len(ours) - len(src)) and len(ours) % 32 == 0
    h, k = None, 4096
    while h is None:
        try:
            h = parse(src[:k], len(src))
        except E.NeedMoreData as e:
            k = e.needed
    with read(REAL) as f:
        assert dict(h.metadata) == dict(f.metadata)
