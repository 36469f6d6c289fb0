"""Resource bounds: every malformed file fails with our named error under a
memory limit (RLIMIT_AS in a subprocess) and a time limit.

The named cases the issue asks for -- a 100 MB header of tiny tensors, a GGUF
declaring 2^60 tensors, strings of length 2^63, pickles declaring 2^40-byte
payloads -- each get a subprocess of their own; the whole malformed seed
corpus of the fuzzers (fuzz/seeds.py: the validation cases of the format
tests in miniature) runs one subprocess per format.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz import seeds

from weightsmith import errors as E

CHILD = Path(__file__).parent / "support" / "reliability_child.py"
MB = 1 << 20


def run_child(kind: str, paths: list[Path], extra: int, seconds: int) -> list[dict]:
    """Open ``paths`` in a limited child; wall-clock limit is 3x the CPU limit (shared CI cores)."""
    p = subprocess.run(
        [sys.executable, str(CHILD), str(extra), str(seconds), kind, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=3 * seconds + 30,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(rows) == len(paths), p.stderr[-3000:]
    for r in rows:  # figures for docs/reliability.md (pytest -s)
        print(
            f"{r['path']}: {r['error']} in {r['seconds']:.2f} s, peak +{r['peak_extra'] >> 20} MiB"
        )
    return rows


def expect_named(rows: list[dict], cls: type | None = None) -> None:
    for r in rows:
        assert r["ours"], r
        if cls is not None:
            assert r["error"] == cls.__name__, r


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def gs(b: bytes) -> bytes:
    return u64(len(b)) + b


# --------------------------------------------------------------------------- the named cases


COMPACT = '"t{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}'


def _tiny_tensor_header(n: int, entry: str = COMPACT, sep: str = ",") -> bytes:
    # '"t0000001":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}' : ~60 bytes per tensor
    body = sep.join(entry.format(i=i, j=i + 1) for i in range(n))
    return ("{" + body + "}").encode()


def _short_of_data(path: Path, n: int, entry: str = COMPACT, sep: str = ",") -> Path:
    """n one-byte tensors: a header just under the 100 MB cap, so the whole JSON
    must be judged, and a data section 5 bytes short."""
    h = _tiny_tensor_header(n, entry, sep)
    assert 90 * MB < len(h) < 100_000_000
    path.write_bytes(u64(len(h)) + h + bytes(n - 5))
    return path


def _fails_within_the_file(p: Path) -> None:
    # safe_open may grow by less than the file: the header is validated from
    # the file a window at a time (read_header), never held whole
    (r,) = run_child("safetensors", [p], extra=p.stat().st_size, seconds=60)
    expect_named([r], E.TruncatedData)
    # `weightsmith inspect` reads a header whole (one request, also over HTTP),
    # so it holds the file's bytes once, beside the validator's tables
    (r,) = run_child("inspect", [p], extra=2 * p.stat().st_size, seconds=60)
    expect_named([r], E.TruncatedData)


def test_100mb_header_of_tiny_tensors(tmp_path):
    # 1.4 million one-byte tensors in the compact form every writer uses
    _fails_within_the_file(_short_of_data(tmp_path / "tiny_tensors.safetensors", 1_400_000))
    # a header past the cap is refused from its 8-byte size alone
    q = tmp_path / "over_cap.safetensors"
    h2 = _tiny_tensor_header(1_450_000)
    assert len(h2) > 100_000_000
    q.write_bytes(u64(len(h2)) + h2 + bytes(1_450_000))
    del h2
    (r,) = run_child("safetensors", [q], extra=64 * MB, seconds=20)
    expect_named([r], E.HeaderTooLarge)


def test_100mb_header_of_tiny_tensors_not_compact(tmp_path):
    # the same header as json.dumps spaces it (", " and ": "): the same one
    # pass, whatever the spacing
    spaced = '"t{i:07d}": {{"dtype": "U8", "shape": [1], "data_offsets": [{i}, {j}]}}'
    p = _short_of_data(tmp_path / "tiny_tensors_spaced.safetensors", 1_250_000, spaced, ", ")
    _fails_within_the_file(p)


def test_100mb_header_of_tiny_tensors_escaped_names(tmp_path):
    # names spelled with an escape ("\u0041..." is "A..."): no numpy path
    # takes it, json.loads would cost ~1 KB per tensor (14x the file)
    escaped = '"\\u0041{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}'
    p = _short_of_data(tmp_path / "tiny_tensors_escaped.safetensors", 1_300_000, escaped)
    _fails_within_the_file(p)


def test_gguf_declaring_2_60_tensors(tmp_path):
    p = tmp_path / "many.gguf"
    p.write_bytes(b"GGUF" + u32(3) + u64(2**60) + u64(0) + bytes(64))
    q = tmp_path / "many_kv.gguf"
    q.write_bytes(b"GGUF" + u32(3) + u64(0) + u64(2**60) + bytes(64))
    expect_named(run_child("gguf", [p, q], extra=64 * MB, seconds=20), E.GGUFCountTooLarge)


def test_strings_of_length_2_63(tmp_path):
    head = b"GGUF" + u32(3) + u64(0) + u64(1)
    key = tmp_path / "key.gguf"
    pad = bytes(64)  # enough bytes that the counts are plausible and the length is read
    key.write_bytes(head + u64(2**63) + b"abc" + pad)
    value = tmp_path / "value.gguf"
    value.write_bytes(head + gs(b"k") + u32(8) + u64(2**63) + b"abc" + pad)
    in_array = tmp_path / "in_array.gguf"
    in_array.write_bytes(
        head + gs(b"k") + u32(9) + u32(8) + u64(2) + gs(b"a") + u64(2**63) + b"x" + pad
    )
    name = tmp_path / "tensor_name.gguf"
    name.write_bytes(b"GGUF" + u32(3) + u64(1) + u64(0) + u64(2**63) + b"abc" + pad)
    rows = run_child("gguf", [key, value, in_array, name], extra=64 * MB, seconds=20)
    expect_named(rows)
    assert {r["error"] for r in rows} <= {"GGUFStringTooLong", "GGUFTensorNameTooLong"}, rows
    # the pickle spelling: BINUNICODE8 / BINBYTES8 of 2^63 bytes
    pk = []
    for op in (b"\x8d", b"\x8e"):
        f = tmp_path / f"str8_{op.hex()}.pt"
        f.write_bytes(b"\x80\x04" + op + u64(2**63) + b"abc.")
        pk.append(f)
    expect_named(run_child("torch", pk, extra=64 * MB, seconds=20))


def test_pickle_payload_lengths_of_2_40(tmp_path):
    # LONG4's length field is a signed 32-bit count, so it cannot say 2^40:
    # its largest value (2^31 - 1) and a negative one stand for it; the
    # 8-byte-length opcodes (BINUNICODE8, BINBYTES8, BYTEARRAY8) say 2^40.
    cases = {
        "long4_max": b"\x80\x02\x8b" + struct.pack("<i", 2**31 - 1) + bytes(16) + b".",
        "long4_negative": b"\x80\x02\x8b" + struct.pack("<i", -1) + bytes(16) + b".",
        "long4_2_40_low_bits": b"\x80\x02\x8b" + (2**40).to_bytes(8, "little")[:4] + b".",
        "binunicode8_2_40": b"\x80\x04\x8d" + u64(2**40) + b"abc.",
        "binbytes8_2_40": b"\x80\x04\x8e" + u64(2**40) + b"abc.",
        "bytearray8_2_40": b"\x80\x05\x96" + u64(2**40) + b"abc.",
    }
    paths = []
    for name, data in cases.items():
        p = tmp_path / f"{name}.pt"
        p.write_bytes(data)
        paths.append(p)
    expect_named(run_child("torch", paths, extra=64 * MB, seconds=20))


def test_huge_long_is_bounded_and_never_printed_as_digits(tmp_path):
    # a 1 MB LONG4 (legal length) inside a state dict: Python refuses to turn
    # such an int into a string (ValueError) -- no message of ours may try.
    big = b"\x8b" + struct.pack("<i", MB) + b"\x01" * MB
    pkl = b"\x80\x02}(X\x01\x00\x00\x00a" + big + b"u."
    p = tmp_path / "big_long.pt"
    p.write_bytes(pkl)
    (r,) = run_child("torch", [p], extra=256 * MB, seconds=30)
    assert r["error"] is None or r["ours"], r


# --------------------------------------------------------------------------- the seed corpora


@pytest.mark.parametrize(
    "target,kind",
    [("safetensors", "safetensors"), ("gguf", "gguf"), ("pickle", "torch"), ("dequant", "dequant")],
)
def test_malformed_corpus_under_limits(tmp_path, target, kind):
    paths = []
    for name, data in seeds.seeds(target).items():
        p = tmp_path / f"{name}.bin"
        if target == "dequant":  # the child reads: type id byte + raw
            data = bytes([seeds.dequant_type_id(data[0])]) + data[2:]
        p.write_bytes(data)
        paths.append(p)
    rows = run_child(kind, paths, extra=256 * MB, seconds=60)
    for r in rows:
        assert r["error"] is None or r["ours"], r
    # the malformed ones do fail (names starting with valid_ may open)
    bad = [r for r in rows if not r["path"].startswith(("valid", "torch_", "plain_", "raw_valid"))]
    assert sum(r["error"] is not None for r in bad) >= len(bad) * 0.8, bad
