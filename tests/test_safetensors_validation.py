"""One test per validation rule, each expecting its named exception."""

from __future__ import annotations

import json
import struct
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import weightsmith
from support.mutation_helpers import apply_edits, edit_lists
from weightsmith import errors as E
from weightsmith.safetensors import parse_header, read_header_size, safe_open


def _file(tmp_path, header: str | bytes, data: bytes = b"", pad: bool = True, name="x.safetensors"):
    h = header.encode() if isinstance(header, str) else header
    if pad:
        h += b" " * (-len(h) % 8)
    p = tmp_path / name
    p.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return p


def _entry(dtype="F32", shape=(1,), offs=(0, 4)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offs)}


def _expect(tmp_path, cls, header, data=b"", pad=True, mmap=True):
    p = _file(tmp_path, header, data, pad)
    with pytest.raises(cls) as info:
        safe_open(p, mmap=mmap)
    err = info.value
    assert type(err) is cls
    assert str(p) in str(err)  # messages name the file
    return err


# --------------------------------------------------------------------------- size prefix


def test_file_too_small(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\x00" * 7)
    with pytest.raises(E.FileTooSmall) as info:
        safe_open(p)
    assert "7 bytes" in str(info.value) and str(p) in str(info.value)


def test_header_too_large(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(struct.pack("<Q", 100_000_001) + b"{}")
    with pytest.raises(E.HeaderTooLarge, match="100000001"):
        safe_open(p)


def test_header_too_large_u64_max(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(E.HeaderTooLarge):
        safe_open(p)


def test_header_out_of_bounds(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(struct.pack("<Q", 64) + b"{}      ")
    with pytest.raises(E.HeaderOutOfBounds, match="8 \\+ 64"):
        safe_open(p)


def test_read_header_size_needs_more_data_for_short_prefix():
    with pytest.raises(E.NeedMoreData) as info:
        read_header_size(b"\x08\x00", 100)
    assert info.value.needed == 8
    assert read_header_size(struct.pack("<Q", 8), 16) == 8


# --------------------------------------------------------------------------- text level


def test_header_not_utf8(tmp_path):
    err = _expect(tmp_path, E.HeaderNotUTF8, b'{"\xff":1}')
    assert err.offset == 10


def test_header_must_begin_with_brace(tmp_path):
    _expect(tmp_path, E.HeaderNotBrace, "  {}")


def test_empty_header_is_not_brace(tmp_path):
    _expect(tmp_path, E.HeaderNotBrace, b"", pad=False)


def test_padding_must_be_spaces(tmp_path):
    err = _expect(tmp_path, E.InvalidHeaderPadding, b"{}\n     ", pad=False)
    assert err.offset == 10


def test_padding_nul_bytes_rejected(tmp_path):
    _expect(tmp_path, E.InvalidHeaderPadding, b"{}\x00\x00\x00\x00\x00\x00", pad=False)


def test_trailing_garbage_after_json(tmp_path):
    _expect(tmp_path, E.InvalidHeaderPadding, "{} x")


def test_invalid_json(tmp_path):
    _expect(tmp_path, E.InvalidHeaderJSON, '{"a": }')


# one header per JSON syntax error of the validator (csrc/st_header.c's E_VALUE .. E_UESCAPE)
_SYNTAX = [b'{"a": }', b"{1}", b'{"a" 1}', b'{"a": 1 "b"}', b'{"a": "x', b'{"a": "\x01"}']
_SYNTAX += [b'{"a": "\\x"}', b'{"a": "\\u12G4"}', b'{"a": "\\ud800\\u12G4 "}']


@pytest.mark.parametrize("raw", _SYNTAX)
def test_json_errors_in_cpythons_words(raw):
    """CPython's json message and offset for each kind of syntax error (the oracle: a
    word or offset of ours that drifted from json's would show here)."""
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(raw)
    with pytest.raises(E.InvalidHeaderJSON) as got:
        parse_header(raw, 8 + len(raw))
    assert f"header is not valid JSON ({want.value.msg})" in str(got.value)
    assert got.value.offset == 8 + want.value.pos


def test_header_too_deep_is_named_not_recursion_error(tmp_path):
    deep = '{"a":' + "[" * 200_000 + "]" * 200_000 + "}"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)  # even with a generous limit, we stop first
    try:
        _expect(tmp_path, E.HeaderTooDeep, deep)
    finally:
        sys.setrecursionlimit(limit)


def test_brackets_inside_strings_do_not_count_as_depth(tmp_path):
    md = {"__metadata__": {"k": "[" * 1000 + '\\"{' * 100}}
    p = _file(tmp_path, json.dumps(md))
    with safe_open(p) as f:
        assert f.metadata()["k"].startswith("[[[")


@pytest.mark.parametrize("header", ["[]", "1", '"a"', "null"])
def test_header_not_object(tmp_path, header):
    _expect(tmp_path, E.HeaderNotObject, header)


# --------------------------------------------------------------------------- metadata


def test_duplicate_metadata(tmp_path):
    _expect(tmp_path, E.DuplicateMetadata, '{"__metadata__":{},"__metadata__":{}}')


def test_metadata_values_must_be_strings(tmp_path):
    err = _expect(tmp_path, E.InvalidMetadata, '{"__metadata__":{"a":1}}')
    assert "__metadata__['a']" in str(err)


def test_metadata_must_be_object(tmp_path):
    _expect(tmp_path, E.InvalidMetadata, '{"__metadata__":["a"]}')


def test_duplicate_metadata_key_even_identical(tmp_path):
    _expect(tmp_path, E.DuplicateMetadataKey, '{"__metadata__":{"a":"1","a":"1"}}')


# --------------------------------------------------------------------------- tensor entries


def test_duplicate_tensor_name_even_identical(tmp_path):
    e = json.dumps(_entry())
    err = _expect(tmp_path, E.DuplicateTensorName, f'{{"w":{e},"w":{e}}}', b"\0" * 4)
    assert "'w'" in str(err)


def test_duplicate_tensor_field(tmp_path):
    h = '{"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    _expect(tmp_path, E.DuplicateTensorField, h, b"\0" * 4)


def test_tensor_entry_not_object(tmp_path):
    _expect(tmp_path, E.InvalidTensorEntry, '{"w":[1,2]}')


@pytest.mark.parametrize("missing", ["dtype", "shape", "data_offsets"])
def test_missing_tensor_field(tmp_path, missing):
    e = _entry()
    del e[missing]
    err = _expect(tmp_path, E.MissingTensorField, json.dumps({"w": e}), b"\0" * 4)
    assert missing in str(err)


def test_unknown_tensor_field(tmp_path):
    e = _entry()
    e["extra"] = 1
    _expect(tmp_path, E.UnknownTensorField, json.dumps({"w": e}), b"\0" * 4)


@pytest.mark.parametrize("dtype", ["f32", "FLOAT32", "F128", 3, None])
def test_unknown_dtype_case_sensitive(tmp_path, dtype):
    _expect(tmp_path, E.UnknownDtype, json.dumps({"w": _entry(dtype=dtype)}), b"\0" * 4)


@pytest.mark.parametrize(
    "shape", ["[-1]", "[1.0]", "[true]", "[18446744073709551616]", '"1"', "{}", "[[1]]"]
)
def test_invalid_shape(tmp_path, shape):
    h = '{"w":{"dtype":"F32","shape":' + shape + ',"data_offsets":[0,4]}}'
    _expect(tmp_path, E.InvalidShape, h, b"\0" * 4)


@pytest.mark.parametrize(
    "offs", ["[4,0]", "[0]", "[0,4,4]", "[-1,3]", "[0,4.0]", '"0,4"', "[0,18446744073709551616]"]
)
def test_invalid_offsets(tmp_path, offs):
    h = '{"w":{"dtype":"F32","shape":[1],"data_offsets":' + offs + "}}"
    _expect(tmp_path, E.InvalidOffsets, h, b"\0" * 4)


def test_size_overflow(tmp_path):
    h = json.dumps({"w": _entry(shape=(2**32, 2**32), offs=(0, 4))})
    _expect(tmp_path, E.SizeOverflow, h, b"\0" * 4)


def test_size_overflow_in_bits(tmp_path):
    h = json.dumps({"w": _entry(dtype="F64", shape=(2**62,), offs=(0, 4))})
    _expect(tmp_path, E.SizeOverflow, h, b"\0" * 4)


def test_tensor_size_mismatch(tmp_path):
    err = _expect(tmp_path, E.TensorSizeMismatch, json.dumps({"w": _entry(shape=(2,))}), b"\0" * 4)
    assert "8 bytes" in str(err) and "4 bytes" in str(err)


@pytest.mark.parametrize("dtype,n", [("F4", 3), ("F6_E2M3", 2), ("F6_E3M2", 6)])
def test_misaligned_sub_byte(tmp_path, dtype, n):
    nbytes = n * (4 if dtype == "F4" else 6) // 8
    h = json.dumps({"w": _entry(dtype=dtype, shape=(n,), offs=(0, nbytes))})
    _expect(tmp_path, E.MisalignedSubByte, h, b"\0" * nbytes)


# --------------------------------------------------------------------------- data coverage


def test_data_hole(tmp_path):
    h = json.dumps({"a": _entry(offs=(0, 4)), "b": _entry(offs=(8, 12))})
    err = _expect(tmp_path, E.DataHole, h, b"\0" * 12)
    assert "'b'" in str(err)


def test_data_hole_at_start(tmp_path):
    _expect(tmp_path, E.DataHole, json.dumps({"a": _entry(offs=(4, 8))}), b"\0" * 8)


def test_data_overlap(tmp_path):
    h = json.dumps({"a": _entry(shape=(2,), offs=(0, 8)), "b": _entry(offs=(4, 8))})
    _expect(tmp_path, E.DataOverlap, h, b"\0" * 8)


def test_same_offsets_twice_is_overlap(tmp_path):
    h = json.dumps({"a": _entry(offs=(0, 4)), "b": _entry(offs=(0, 4))})
    _expect(tmp_path, E.DataOverlap, h, b"\0" * 4)


def test_truncated_data(tmp_path):
    err = _expect(
        tmp_path, E.TruncatedData, json.dumps({"a": _entry(shape=(4,), offs=(0, 16))}), b"\0" * 10
    )
    assert "'a'" in str(err)


def test_trailing_bytes(tmp_path):
    _expect(tmp_path, E.TrailingBytes, json.dumps({"a": _entry()}), b"\0" * 5)


def test_trailing_bytes_after_empty_header(tmp_path):
    _expect(tmp_path, E.TrailingBytes, "{}", b"\0")


def test_pread_path_validates_too(tmp_path):
    _expect(tmp_path, E.TrailingBytes, json.dumps({"a": _entry()}), b"\0" * 5, mmap=False)


# --------------------------------------------------------------------------- valid edge cases


def test_empty_header_scalars_and_zero_size_are_valid(tmp_path):
    p = _file(tmp_path, "{}")
    with safe_open(p) as f:
        assert f.keys() == [] and f.metadata() is None
    h = {
        "s": _entry(shape=(), offs=(0, 4)),
        "z": _entry(shape=(0, 3), offs=(4, 4)),
        "z2": _entry(dtype="F4", shape=(0,), offs=(4, 4)),
    }
    p = _file(tmp_path, json.dumps(h), np.float32(2.5).tobytes())
    for mmap in (True, False):
        with safe_open(p, mmap=mmap) as f:
            assert f.get_tensor("s").shape == () and float(f.get_tensor("s")) == 2.5
            assert f.get_tensor("z").shape == (0, 3)
            assert f.get_tensor("z2").shape == (0,)


def test_header_from_bytes_without_filesystem():
    h = json.dumps({"__metadata__": {"k": "v"}, "b": _entry(offs=(4, 8)), "a": _entry()}).encode()
    h += b" " * (-len(h) % 8)
    header = parse_header(h, 8 + len(h) + 8)
    assert list(header.tensors) == ["b", "a"]  # header order kept
    assert header.metadata == {"k": "v"}
    assert header.data_start == 8 + len(h) == 8 + header.header_size
    a = header.tensors["a"]
    assert (a.name, a.dtype.name, a.shape, a.data_offsets, a.nbytes, a.n_elements) == (
        "a",
        "F32",
        (1,),
        (0, 4),
        4,
        1,
    )
    with pytest.raises(E.TrailingBytes):
        parse_header(h, 8 + len(h) + 9)


# --------------------------------------------------------------------------- use errors


def test_tensor_not_found_and_closed(tmp_path):
    p = tmp_path / "a.safetensors"
    weightsmith.save_file({"a": np.zeros(3, np.float32)}, p)
    f = safe_open(p)
    with pytest.raises(E.TensorNotFound):
        f.get_tensor("b")
    with pytest.raises(KeyError):  # TensorNotFound is a KeyError too
        f.get_slice("b")
    s = f.get_slice("a")
    view = f.get_tensor("a")
    f.close()
    f.close()  # idempotent
    for call in (
        f.keys,
        f.metadata,
        f.offset_keys,
        lambda: f.get_tensor("a"),
        lambda: s[0],
        s.get_shape,
    ):
        with pytest.raises(E.ClosedFileError):
            call()
    assert view.tolist() == [0.0, 0.0, 0.0]  # arrays handed out stay valid


def test_error_messages_carry_fields(tmp_path):
    h = json.dumps({"w": _entry(shape=(2,))})
    err = _expect(tmp_path, E.TensorSizeMismatch, h, b"\0" * 4)
    assert err.field == "tensor 'w'" and err.expected and err.found
    err = _expect(tmp_path, E.DataHole, json.dumps({"a": _entry(offs=(4, 8))}), b"\0" * 8)
    assert err.offset is not None and err.offset >= 8


@pytest.mark.parametrize("name", ["a:b", 'q\\"{[:', "[[{{", "x\\\\", ":"])
def test_duplicates_found_whatever_the_names_hold(tmp_path, name):
    e = json.dumps(_entry())
    key = json.dumps(json.loads(f'"{name}"'))
    _expect(tmp_path, E.DuplicateTensorName, f"{{{key}:{e},{key}:{e}}}", b"\0" * 4)
    other = json.dumps(_entry(offs=(4, 8)))
    p = _file(tmp_path, f'{{{key}:{e},"{"z"}":{other}}}', b"\0" * 8, name="ok.safetensors")
    with safe_open(p) as f:
        assert f.keys() == sorted([json.loads(key), "z"])


def test_reopen_after_in_place_edit_revalidates(tmp_path):
    p = tmp_path / "a.safetensors"
    weightsmith.save_file({"w": np.zeros(2, np.float32)}, p)
    with safe_open(p) as f:
        assert f.get_tensor("w").dtype == np.float32
    raw = bytearray(p.read_bytes())
    i = raw.index(b'"F32"')
    with open(p, "r+b") as fh:  # same inode, same size, new header
        fh.seek(i)
        fh.write(b'"I32"')
    with safe_open(p) as f:
        assert f.get_tensor("w").dtype == np.int32
    with open(p, "r+b") as fh:
        fh.seek(i)
        fh.write(b'"X32"')
    with pytest.raises(E.UnknownDtype):
        safe_open(p)


# --------------------------------------------------------------------------- fuzz


def _valid_blob() -> bytes:
    return weightsmith.safetensors.save(
        {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.int8)},
        {"k": "v"},
    )


@settings(max_examples=400, deadline=None)
@given(
    edits=edit_lists(200, st.integers(0, 255), min_size=1, max_size=4),
    cut=st.integers(0, 200),
)
def test_mutated_files_fail_only_with_named_errors(edits, cut):
    data = apply_edits(_valid_blob(), edits)
    if cut < 20:
        data = data[: len(data) - cut]
    try:
        n = read_header_size(data[:8], len(data))
        header = parse_header(data[8 : 8 + n], len(data))
    except E.WeightsmithError:
        return
    # accepted: then every tensor must be readable and inside the file
    got = weightsmith.safetensors.load(data)
    assert set(got) == set(header.tensors)


# --------------------------------------------------------------------------- integers past int()'s digit limit

_HUGE = "1" * 5000  # json.loads raises a bare ValueError on these


@pytest.mark.parametrize(
    ("header", "cls"),
    [
        ('{"a":{"dtype":"U8","shape":[' + _HUGE + '],"data_offsets":[0,1]}}', E.InvalidShape),
        ('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,' + _HUGE + "]}}", E.InvalidOffsets),
        (
            '{"__metadata__":{"k":' + _HUGE + '},"a":' + json.dumps(_entry("U8")) + "}",
            E.InvalidMetadata,
        ),
        ('{"a":-' + _HUGE + "}", E.InvalidTensorEntry),
    ],
    ids=["shape", "offsets", "metadata", "entry"],
)
def test_integer_past_the_digit_limit_is_named(tmp_path, header, cls):
    err = _expect(tmp_path, cls, header, b"\0")
    assert "5000-digit integer" in str(err)
