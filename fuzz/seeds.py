"""Seed corpora, generated: valid files our writers (and torch) produce plus
the malformed cases of the format tests, in miniature.

``seeds(target)`` returns ``{name: bytes}``; ``write(target, folder)`` puts
them in a folder for libFuzzer.  Everything is small (a few KiB) so the fuzzer
spends its time on structure, not on copying data.
"""

from __future__ import annotations

import io
import pickle
import struct
import tempfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

from weightsmith import gguf, quant
from weightsmith import safetensors as st
from weightsmith.dtypes import GGML, SAFETENSORS


def _u32(n: int) -> bytes:
    return struct.pack("<I", n)


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


# --------------------------------------------------------------------------- safetensors


def _st_raw(header: str, data: bytes = b"") -> bytes:
    h = header.encode()
    return _u64(len(h)) + h + data


def safetensors_seeds() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    rng = np.random.default_rng(0)
    arrays = {
        "w": rng.standard_normal((4, 6)).astype(np.float32),
        "b": np.arange(6, dtype=np.int64),
        "h": rng.standard_normal((2, 3, 2)).astype(np.float16),
        "s": np.array(3.5, np.float64),
        "e": np.zeros((0, 3), np.uint8),
    }
    out["valid_mixed"] = st.save(arrays, {"format": "np", "k": "v"})
    for code, d in SAFETENSORS.items():
        if d.packed:
            group = 2 if d.bits == 4 else 4
            codes = (np.arange(2 * group) % (1 << d.bits)).astype(np.uint8)
            a = codes.view(d.numpy).reshape(2, group)
        else:
            a = np.frombuffer(rng.bytes(6 * d.itemsize), d.numpy).reshape(2, 3)
        out[f"valid_{code}"] = st.save({"t": a})
    ok = '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    cases = {
        "too_small": b"\x01\x00",
        "header_too_large": _u64(2**64 - 1) + b"{}",
        "header_oob": _u64(100) + b"{}",
        "not_utf8": _u64(4) + b'{"\xff}',
        "not_brace": _st_raw("[1] "),
        "bad_padding": _st_raw("{}\x00\x00"),
        "bad_json": _st_raw('{"a":'),
        "deep": _st_raw("{" + '"a":[' * 300 + "]" * 300 + "}"),
        "dup_meta": _st_raw('{"__metadata__":{},"__metadata__":{}}'),
        "meta_not_str": _st_raw('{"__metadata__":{"a":1}}'),
        "dup_tensor": _st_raw(ok[:-1] + "," + ok[1:-1] + "}", bytes(8)),
        "missing_field": _st_raw('{"a":{"dtype":"F32","shape":[2]}}', bytes(8)),
        "unknown_dtype": _st_raw(ok.replace("F32", "F128"), bytes(8)),
        "neg_shape": _st_raw(ok.replace("[2]", "[-2]"), bytes(8)),
        "huge_shape": _st_raw(ok.replace("[2]", "[4294967296,4294967296,4294967296]"), bytes(8)),
        "bad_offsets": _st_raw(ok.replace("[0,8]", "[8,0]"), bytes(8)),
        "size_mismatch": _st_raw(ok.replace("[0,8]", "[0,4]"), bytes(4)),
        "hole": _st_raw(ok.replace("[0,8]", "[4,12]"), bytes(12)),
        "truncated": _st_raw(ok, bytes(4)),
        "trailing": _st_raw(ok, bytes(12)),
        "subbyte": _st_raw(
            ok.replace("F32", "F4").replace("[2]", "[3]").replace("[0,8]", "[0,2]"), bytes(2)
        ),
        "valid_min": _st_raw(ok, np.arange(2, dtype=np.float32).tobytes()),
        # the compact fast path's number lists (found: "[1;2]" -> IndexError)
        "semicolon_shape": _st_raw(ok.replace("[2]", "[1;2]"), bytes(8)),
        "leading_zero": _st_raw(ok.replace("[2]", "[02]"), bytes(8)),
        "huge_digits": _st_raw(ok.replace("[2]", "[" + "9" * 30 + "]"), bytes(8)),
        "empty_dim": _st_raw(ok.replace("[2]", "[2,]"), bytes(8)),
        "spaced": _st_raw(ok.replace("[2]", "[ 2 ]"), bytes(8)),
        "scalar_and_empty": _st_raw(
            '{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},'
            '"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}}',
            bytes(4),
        ),
    }
    out.update(cases)
    return out


# --------------------------------------------------------------------------- GGUF


def _gguf_bytes(build) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.gguf"
        w = gguf.Writer(p)
        tensors = build(w)
        w.write_header()
        for name, data in tensors:
            w.write_tensor(name, data)
        w.close()
        return p.read_bytes()


def _gs(b: bytes | str) -> bytes:
    b = b.encode() if isinstance(b, str) else b
    return _u64(len(b)) + b


def _kv(key, vtype: int, payload: bytes) -> bytes:
    return _gs(key) + _u32(vtype) + payload


def _ti(name, dims, gtype=0, off=0) -> bytes:
    return _gs(name) + _u32(len(dims)) + b"".join(_u64(d) for d in dims) + _u32(gtype) + _u64(off)


def _gguf_raw(kvs=(), tis=(), data=b"", n_kv=None, n_tensors=None, version=3) -> bytes:
    head = b"GGUF" + _u32(version)
    head += _u64(len(tis) if n_tensors is None else n_tensors)
    head += _u64(len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tis)
    head += bytes(-len(head) % 32)
    return head + data


def gguf_seeds() -> dict[str, bytes]:
    rng = np.random.default_rng(1)

    def plain(w):
        w.add("general.architecture", "llama")
        w.add("u8", 7, gguf.GGUFValueType.UINT8)
        w.add("i64", -3, gguf.GGUFValueType.INT64)
        w.add("f", 0.5)
        w.add("flag", True)
        w.add("tokens", ["a", "", "bcd", "é"])
        w.add("scores", [1.0, 2.0, 3.0])
        w.add("nested", [[1, 2], [3]])
        a = rng.standard_normal((3, 8)).astype(np.float32)
        b = rng.standard_normal(16).astype(np.float16)
        w.add_tensor_info("a", "F32", a.shape)
        w.add_tensor_info("b", "F16", b.shape)
        return [("a", a), ("b", b)]

    def quantized(w):
        w.add("general.architecture", "llama")
        out = []
        for i, name in enumerate(["Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_NL"]):
            t = GGML[name]
            raw = quant.quantize(rng.standard_normal((2, 256)).astype(np.float32), name)
            w.add_tensor_info(f"t{i}", name, (2, 256))
            out.append((f"t{i}", raw))
            del t
        return out

    out = {"valid_plain": _gguf_bytes(plain), "valid_quant": _gguf_bytes(quantized)}
    good_kvs = [_kv("general.architecture", 8, _gs("llama")), _kv("x.u32", 4, _u32(7))]
    good_tis = [_ti("a", [4], 0, 0), _ti("b", [8, 2], 0, 32)]
    data = (
        np.arange(4, dtype=np.float32).tobytes()
        + bytes(16)
        + np.arange(16, dtype=np.float32).tobytes()
    )
    out.update(
        {
            "raw_valid": _gguf_raw(good_kvs, good_tis, data),
            "bad_magic": b"GGUX" + _gguf_raw(good_kvs, good_tis, data)[4:],
            "bad_version": _gguf_raw(good_kvs, good_tis, data, version=9),
            "too_many_tensors": _gguf_raw(good_kvs, good_tis, data, n_tensors=2**60),
            "too_many_kv": _gguf_raw(good_kvs, good_tis, data, n_kv=2**62),
            "string_2_63": _gguf_raw([_kv("k", 8, _u64(2**63) + b"abc")]),
            "array_huge": _gguf_raw([_kv("k", 9, _u32(4) + _u64(2**61))]),
            "str_array_past_end": _gguf_raw([_kv("k", 9, _u32(8) + _u64(3) + _gs("a") + _u64(99))]),
            "unknown_vtype": _gguf_raw([_kv("k", 99, _u32(0))]),
            "nested_deep": _gguf_raw([_kv("k", 9, (_u32(9) + _u64(1)) * 40 + _u32(4) + _u64(0))]),
            "dup_key": _gguf_raw([good_kvs[0], good_kvs[0]]),
            "empty_key": _gguf_raw([_kv("", 4, _u32(1))]),
            "bad_utf8_key": _gguf_raw([_kv(b"\xff\xfe", 4, _u32(1))]),
            "dup_tensor": _gguf_raw(good_kvs, [good_tis[0], good_tis[0]], data),
            "too_many_dims": _gguf_raw(good_kvs, [_ti("a", [1] * 5)], data),
            "zero_dim": _gguf_raw(good_kvs, [_ti("a", [0])], data),
            "dim_overflow": _gguf_raw(good_kvs, [_ti("a", [2**40, 2**40], 0)], data),
            "unknown_ggml": _gguf_raw(good_kvs, [_ti("a", [4], 200)], data),
            "row_not_block": _gguf_raw(good_kvs, [_ti("a", [33], 2)], data),
            "unaligned": _gguf_raw(good_kvs, [_ti("a", [4], 0, 3)], data),
            "overlap": _gguf_raw(good_kvs, [_ti("a", [8], 0, 0), _ti("b", [8], 0, 0)], data),
            "past_eof": _gguf_raw(good_kvs, [_ti("a", [4], 0, 4096)], data),
            "bad_alignment": _gguf_raw([_kv("general.alignment", 4, _u32(3))], good_tis, data),
            "v1": _gguf_raw(good_kvs, [], b"", version=1),
            "big_endian": b"GGUF" + struct.pack(">I", 3) + bytes(16),
        }
    )
    return out


# --------------------------------------------------------------------------- pickle


def pickle_seeds() -> dict[str, bytes]:
    import torch  # seeds only: torch.save writes the real layouts

    sd = OrderedDict(
        w=torch.arange(6, dtype=torch.float32).reshape(2, 3), b=torch.ones(3, dtype=torch.int64)
    )
    out: dict[str, bytes] = {}
    buf = io.BytesIO()
    torch.save(sd, buf)
    out["torch_zip"] = buf.getvalue()
    buf = io.BytesIO()
    torch.save(sd, buf, _use_new_zipfile_serialization=False)
    out["torch_legacy"] = buf.getvalue()
    obj = {"a": [1, 2.5, "x", b"y", None, True, (1, 2)], "n": 2**70, "s": {"k": -1}}
    for proto in range(0, 6):
        out[f"plain_p{proto}"] = pickle.dumps(obj, protocol=proto)
    g = b"cos\nsystem\n"
    out.update(
        {
            "reduce_os_system": b"\x80\x02" + g + b"(X\x02\x00\x00\x00idtR.",
            "long4_2_31": b"\x80\x02\x8b" + _u32(2**31 - 1) + b".",
            "binunicode8_huge": b"\x80\x04\x8d" + _u64(2**40) + b"abc.",
            "bytes8_huge": b"\x80\x04\x8e" + _u64(2**63) + b".",
            "deep_lists": b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b".",
            "deep_marks": b"\x80\x02" + b"(" * 5000 + b".",
            "memo_missing": b"\x80\x02h\x05.",
            "stack_underflow": b"\x80\x02t.",
            "persid": b"\x80\x02(X\x07\x00\x00\x00storagetQ.",
            "build_global": b"\x80\x02" + b"cbuiltins\ndict\n)R}b.",
            "truncated": pickle.dumps(obj, protocol=4)[:-7],
        }
    )
    return out


# --------------------------------------------------------------------------- dequantizers


def dequant_seeds() -> dict[str, bytes]:
    rng = np.random.default_rng(2)
    out: dict[str, bytes] = {}
    types = sorted(GGML.values(), key=lambda t: t.id)
    for i, t in enumerate(types):
        body = rng.bytes(t.type_size * 2)
        out[f"random_{t.name}"] = bytes([i, 1]) + body
        try:
            q = quant.quantize(
                rng.standard_normal((1, 2 * t.block_size)).astype(np.float32), t.name
            )
        except Exception:
            continue
        out[f"valid_{t.name}"] = bytes([i, 0]) + np.asarray(q).tobytes()
        out[f"nan_{t.name}"] = bytes([i, 0]) + b"\xff" * (t.type_size * 2)
    return out


SEEDS = {
    "safetensors": safetensors_seeds,
    "gguf": gguf_seeds,
    "pickle": pickle_seeds,
    "dequant": dequant_seeds,
}


def seeds(target: str) -> dict[str, bytes]:
    return SEEDS[target]()


def write(target: str, folder: str | Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds(target).items():
        (folder / f"seed_{name}").write_bytes(data)
    return folder


def dequant_type_id(selector: int) -> int:
    """The ggml type id the dequant target's first byte selects."""
    types = sorted(GGML.values(), key=lambda t: t.id)
    return types[selector % len(types)].id
