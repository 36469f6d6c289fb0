"""llama.cpp importance matrices (``llama-imatrix`` output), in both formats.

* GGUF (current): for each tensor ``<name>.in_sum2`` (f32, ``n_expert x n_per_row``
  sums of squared activations) and ``<name>.counts`` (f32, per expert, the number
  of rows summed), plus ``imatrix.datasets``, ``imatrix.chunk_count`` and
  ``imatrix.chunk_size``.  The weight is ``in_sum2 / lround(count)`` per expert
  (1 where the count is 0), as llama-quantize normalises it.
* legacy ``.dat``: little-endian ``i32 n_entries``, then per entry ``i32 len,
  name[len], i32 ncall, i32 nval, f32 values[nval]`` (sums; the weight is
  ``values / ncall``), then optionally ``i32 chunk_count, i32 len, dataset[len]``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InvalidImatrix

__all__ = ["Imatrix", "for_tensor", "load_imatrix"]


@dataclass
class Imatrix:
    """Per-tensor importance weights (float32, ``n_expert * n_per_row`` each)."""

    path: str
    entries: dict[str, np.ndarray] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0


def _lround(x: np.ndarray) -> np.ndarray:
    # C's lround: halves away from zero (numpy's round is half-to-even)
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)).astype(np.int64)


def load_imatrix(path: str | os.PathLike[str]) -> Imatrix:
    """An importance matrix file, GGUF or legacy ``.dat``, normalised as llama-quantize does."""
    with open(path, "rb") as f:
        magic = f.read(4)
    im = _load_gguf_imatrix(path) if magic == b"GGUF" else _load_legacy_imatrix(path)
    for name, e in im.entries.items():
        if not np.all(np.isfinite(e)):
            raise InvalidImatrix(
                "non-finite importance weight",
                path=os.fspath(path),
                field=name,
                expected="finite",
                found="nan/inf",
            )
    return im


def _load_gguf_imatrix(path: str | os.PathLike[str]) -> Imatrix:
    from .. import gguf

    f = gguf.read(path)
    try:
        meta = f.metadata
        if not all(
            k in meta for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")
        ):
            raise InvalidImatrix(
                "missing imatrix metadata", path=os.fspath(path), field="imatrix.*",
                expected="imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size", found="none",
            )  # fmt: skip
        im = Imatrix(
            os.fspath(path),
            datasets=list(meta["imatrix.datasets"]),
            chunk_count=int(meta["imatrix.chunk_count"]),
        )
        names = {t.name for t in f.tensors}
        for t in f.tensors:
            if not t.name.endswith(".in_sum2"):
                continue
            base = t.name[: -len(".in_sum2")]
            if base + ".counts" not in names:
                raise InvalidImatrix(
                    "sums without counts",
                    path=os.fspath(path),
                    field=base,
                    expected=".counts",
                    found="none",
                )
            sums = np.asarray(f.numpy(t.name), dtype=np.float32).ravel()
            counts = _lround(np.asarray(f.numpy(base + ".counts"), dtype=np.float32).ravel())
            ne0 = sums.size // counts.size
            e = np.ones(sums.size, np.float32).reshape(counts.size, ne0)
            s = sums.reshape(counts.size, ne0)
            for j, c in enumerate(counts):
                if c > 0:
                    e[j] = s[j] / np.float32(c)
            im.entries[base] = e.ravel()
        return im
    finally:
        f.close()


def _load_legacy_imatrix(path: str | os.PathLike[str]) -> Imatrix:
    data = Path(path).read_bytes()
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise InvalidImatrix(
                "truncated",
                path=os.fspath(path),
                field=what,
                offset=pos,
                expected=f"{n} bytes",
                found=len(data) - pos,
            )
        out = data[pos : pos + n]
        pos += n
        return out

    (n_entries,) = struct.unpack("<i", take(4, "n_entries"))
    if n_entries < 1:
        raise InvalidImatrix(
            "no entries", path=os.fspath(path), field="n_entries", expected=">= 1", found=n_entries
        )
    im = Imatrix(os.fspath(path))
    for i in range(n_entries):
        (length,) = struct.unpack("<i", take(4, f"entry {i} name length"))
        name = take(max(length, 0), f"entry {i} name").split(b"\0")[0].decode("utf-8", "replace")
        ncall, nval = struct.unpack("<ii", take(8, f"entry {i} counts"))
        if nval < 1:
            raise InvalidImatrix(
                "empty entry", path=os.fspath(path), field=name, expected="nval >= 1", found=nval
            )
        sums = np.frombuffer(take(4 * nval, f"entry {i} values"), dtype="<f4").astype(np.float32)
        im.entries[name] = sums / np.float32(ncall) if ncall > 0 else sums.copy()
    if pos + 4 <= len(data):  # optional trailer: chunk count and dataset name
        (im.chunk_count,) = struct.unpack("<i", take(4, "chunk count"))
        if pos + 4 <= len(data):
            (length,) = struct.unpack("<i", take(4, "dataset length"))
            if length > 0 and pos + length <= len(data):
                im.datasets.append(take(length, "dataset").decode("utf-8", "replace"))
    return im


def for_tensor(name: str, shape: tuple[int, ...], im: Imatrix) -> np.ndarray | None:
    """``[n_expert, n_per_row]`` weights for a tensor, None if the file has none for it."""
    e = im.entries.get(name)
    if e is None:
        return None
    n_per_row = shape[-1]
    n_expert = shape[0] if len(shape) == 3 else 1
    if e.size != n_per_row * n_expert:
        if name in ("token_embd.weight", "per_layer_token_embd.weight"):
            return None  # llama-quantize ignores a mismatched embedding entry
        raise InvalidImatrix(
            "size differs from the tensor's", path=im.path, field=name,
            expected=n_per_row * n_expert, found=e.size,
        )  # fmt: skip
    return e.reshape(n_expert, n_per_row)
