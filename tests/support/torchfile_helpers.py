"""Hand assembly of pickles and zip checkpoints for the torchfile tests.

pickle.dumps cannot write most of the hostile pickles, so they are spelled
opcode by opcode here (the opcode bytes are those of Lib/pickletools.py).
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import torch

PROTO2 = b"\x80\x02"
PROTO4 = b"\x80\x04"
PROTO5 = b"\x80\x05"
MARK = b"("
STOP = b"."
REDUCE = b"R"
BUILD = b"b"
TUPLE = b"t"
EMPTY_TUPLE = b")"
EMPTY_DICT = b"}"
EMPTY_LIST = b"]"
SETITEMS = b"u"
APPEND = b"a"
NEWFALSE = b"\x89"
BINPERSID = b"Q"


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def s(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def short_s(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def i(v: int) -> bytes:
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if -(2**31) <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def tup(*parts: bytes) -> bytes:
    return MARK + b"".join(parts) + TUPLE


def put(n: int) -> bytes:
    return b"q" + bytes([n])


def get(n: int) -> bytes:
    return b"h" + bytes([n])


def storage(stype: str, key: str, numel: int, module: str = "torch") -> bytes:
    return tup(s("storage"), glob(module, stype), s(key), s("cpu"), i(numel)) + BINPERSID


def tensor_v2(stor: bytes, offset: int, size, stride) -> bytes:
    args = tup(
        stor,
        i(offset),
        tup(*map(i, size)),
        tup(*map(i, stride)),
        NEWFALSE,
        glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE,
    )
    return glob("torch._utils", "_rebuild_tensor_v2") + args + REDUCE


def dict_(*pairs: tuple[str, bytes]) -> bytes:
    return EMPTY_DICT + MARK + b"".join(s(k) + v for k, v in pairs) + SETITEMS


def make_zip(
    path: Path,
    pkl: bytes,
    storages: dict[str, bytes] | None = None,
    *,
    archive: str = "archive",
    byteorder: str | None = "little",
    compression: int = zipfile.ZIP_STORED,
) -> Path:
    """A zip checkpoint with the members torch.save writes."""
    pre = f"{archive}/" if archive is not None else ""
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.writestr(pre + "data.pkl", pkl)
        if byteorder is not None:
            z.writestr(pre + "byteorder", byteorder)
        for key, data in (storages or {}).items():
            z.writestr(pre + f"data/{key}", data)
        z.writestr(pre + "version", "3\n")
    return path


def tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's values as contiguous little-endian bytes (works for every dtype)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def rezip(
    src: Path, dst: Path, *, rename=None, transform=None, compression=zipfile.ZIP_STORED
) -> Path:
    """Copy a zip checkpoint member by member, optionally renaming or rewriting members."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=compression) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            name = rename(info.filename) if rename else info.filename
            if transform is not None:
                data = transform(info.filename, data)
            zout.writestr(name, data)
    return dst


ALL_DTYPES = [
    torch.float64, torch.float32, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu, torch.uint16, torch.uint32, torch.uint64,
]  # fmt: skip


def _sample(dtype: torch.dtype, shape=(3, 5), seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g) * 4
        if dtype == torch.float8_e8m0fnu:
            x = x.abs() + 0.01
        return x.to(dtype)
    return torch.randint(0, 120, shape, generator=g).to(dtype)
