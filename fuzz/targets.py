"""Fuzz targets: one function per parser, each taking raw bytes.

Each target feeds the bytes to a public weightsmith entry point and exercises
what a caller would do with a file that opened (read every tensor, a few
slices, every metadata value).  The contract under test: the only exception
that may escape is a :class:`weightsmith.errors.WeightsmithError`; anything
else (IndexError, OverflowError, struct.error, a numpy error, RecursionError,
MemoryError, ...) is a bug.  ``check(target, data)`` applies that contract
and is shared by the atheris driver (:mod:`fuzz.driver`), the seed replay in
the CI smoke tests and the regression tests.

Targets: ``safetensors`` (header parser + reader, bytes and mmap paths),
``gguf`` (header, metadata values, tensor infos, tensor reads), ``pickle``
(the restricted pickle interpreter: load and scan, plus the torchfile opener
on the same bytes), ``dequant`` (every ggml dequantizer on random bytes).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable

import numpy as np

from weightsmith import errors as E
from weightsmith import gguf, quant, torchfile
from weightsmith import safetensors as st
from weightsmith.dtypes import GGML
from weightsmith.quant.file import dequantize_tensor
from weightsmith.torchfile import _pickle

# Files are needed for the mmap readers; /dev/shm keeps them off the disk.
SCRATCH_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_SCRATCH = os.path.join(SCRATCH_DIR, f"ws-fuzz-{os.getpid()}")
# Cap on the elements a target materialises per tensor: the parsers already
# bound sizes by the file size; this only keeps iterations fast.
_MAX_READ = 1 << 20


def _scratch(data: bytes, suffix: str) -> str:
    path = _SCRATCH + suffix
    with open(path, "wb") as f:
        f.write(data)
    return path


def cleanup() -> None:
    for suffix in (".safetensors", ".gguf", ".pt"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_SCRATCH + suffix)


def _slices(shape: tuple[int, ...], data: bytes) -> list[tuple]:
    """A few deterministic slice keys derived from the input bytes."""
    if not shape:
        return [()]
    seed = data[-1] if data else 0
    keys: list[tuple] = [(slice(None),)]
    keys.append(tuple(slice(seed % (d + 1), None, 1 + seed % 3) for d in shape))
    keys.append((slice(None, None, -1),))
    if shape[0]:
        keys.append((seed % shape[0],))
    return keys


# --------------------------------------------------------------------------- safetensors


def safetensors_target(data: bytes) -> None:
    """Header parse from bytes and from the file in small windows (the C
    validator's two sources), then the mmap and pread readers."""
    with contextlib.suppress(E.WeightsmithError):
        st.load(data)
    path = _scratch(data, ".safetensors")
    with contextlib.suppress(E.WeightsmithError), open(path, "rb") as f:
        n = st.read_header_size(data[:8], len(data))
        st.read_header(f.fileno(), n, len(data), window=16 + data[-1] % 64)
    for use_mmap in (True, False):
        with st.safe_open(path, mmap=use_mmap) as f:
            f.metadata()
            for name in f.offset_keys():
                info = f.info(name)
                if info.n_elements > _MAX_READ:
                    continue
                f.get_tensor(name)
                sl = f.get_slice(name)
                for key in _slices(tuple(info.shape), data):
                    sl[key]


# --------------------------------------------------------------------------- GGUF


def _touch(value) -> None:
    if isinstance(value, (str, bytes)):
        return
    if hasattr(value, "__getitem__"):
        try:
            n = len(value)
        except TypeError:
            return
        for i in range(min(n, 64)):
            _touch(value[i])
        if n:
            _touch(value[-1])


def gguf_target(data: bytes) -> None:
    """Header parse from a buffer, every metadata value, then the mmap reader."""
    try:
        h = gguf.parse(data, len(data))
        for key in h.metadata:
            _touch(h.metadata[key])
    except E.WeightsmithError:
        pass
    path = _scratch(data, ".gguf")
    with gguf.read(path) as f:
        for key in f.metadata:
            _touch(f.metadata[key])
            f.summary(key)
        for t in f.tensors:
            if t.n_elements > _MAX_READ:
                continue
            f.tensor_bytes(t.name)
            if t.ggml_type.numpy is not None:
                f.numpy(t.name)
            with contextlib.suppress(E.UnsupportedDequantizeType, E.RowLengthNotMultiple):
                dequantize_tensor(f, t.name)


# --------------------------------------------------------------------------- pickle


def pickle_target(data: bytes) -> None:
    """The restricted interpreter (load and scan) and torchfile on the same bytes."""
    with contextlib.suppress(E.WeightsmithError):
        _pickle.load(data)
    _pickle.scan(data)
    path = _scratch(data, ".pt")
    torchfile.scan(path)
    with torchfile.open(path) as ckpt:
        for name in list(ckpt)[:16]:
            ckpt[name]


# --------------------------------------------------------------------------- dequantizers

_TYPES = sorted(GGML.values(), key=lambda t: t.id)


def dequant_target(data: bytes) -> None:
    """First byte picks the ggml type, the second the row count; the rest is blocks."""
    if len(data) < 2:
        return
    t = _TYPES[data[0] % len(_TYPES)]
    raw = np.frombuffer(data, np.uint8)[2:]
    nblocks = raw.size // t.type_size
    rows = 1 + data[1] % 4
    if data[1] & 0x80:  # sometimes a wrong byte count or row length: named errors
        quant.dequantize(raw, t, (rows, t.block_size + 1))
    nblocks -= nblocks % rows
    blocks = raw[: nblocks * t.type_size]
    out = quant.dequantize(blocks, t, (rows, nblocks // rows * t.block_size))
    assert out.dtype == np.float32


TARGETS: dict[str, Callable[[bytes], None]] = {
    "safetensors": safetensors_target,
    "gguf": gguf_target,
    "pickle": pickle_target,
    "dequant": dequant_target,
}


def check(target: str, data: bytes) -> None:
    """Run ``target`` on ``data``; only a WeightsmithError may escape (it is swallowed)."""
    with contextlib.suppress(E.WeightsmithError):
        TARGETS[target](data)
