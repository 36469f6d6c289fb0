"""llama.cpp importance matrices (``llama-imatrix`` output), read as llama-quantize reads them.

GGUF format (current): a GGUF file whose tensors come in pairs
``<tensor>.in_sum2`` (F32, ``n_expert * ncols`` sums of squared activations)
and ``<tensor>.counts`` (F32, one count per expert), with the KVs
``imatrix.datasets`` (string array), ``imatrix.chunk_count`` and
``imatrix.chunk_size``.  The importance of column ``i`` of expert ``j`` is
``in_sum2[j, i] / lround(counts[j])``, or 1 where that count is 0.

Legacy ``.dat`` (little-endian)::

    i32 n_entries
    n_entries x { i32 len; u8 name[len]; i32 ncall; i32 nval; f32 values[nval] }
    optional: i32 chunk_count; i32 len; u8 dataset[len]

whose values are divided by ``ncall`` (when positive).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import errors as E
from ..gguf import read

__all__ = ["Imatrix", "for_tensor", "read_imatrix"]

_GGUF_MAGIC = b"GGUF"
# llama-quantize records the file and dataset names in a kv override, whose
# value buffer holds 127 characters.
_KV_STR_MAX = 127


@dataclass
class Imatrix:
    """Importance per column for each GGUF tensor name (float32 arrays)."""

    path: str
    entries: dict[str, np.ndarray]
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    legacy: bool = False

    def gguf_rows(self) -> list[tuple[str, object, str]]:
        """The ``quantize.imatrix.*`` KVs the llama-quantize tool adds to its output.

        They are kv overrides there, and integer overrides are written as u32
        (llama-quant.cpp).
        """
        rows: list[tuple[str, object, str]] = [
            ("quantize.imatrix.file", self.path[:_KV_STR_MAX], "str")
        ]
        if self.datasets:
            rows.append(("quantize.imatrix.dataset", self.datasets[0][:_KV_STR_MAX], "str"))
        rows.append(("quantize.imatrix.entries_count", len(self.entries), "u32"))
        if self.chunk_count > 0:
            rows.append(("quantize.imatrix.chunks_count", self.chunk_count, "u32"))
        return rows


def _bad(path: Path, what: str, field: str | None = None, expected=None, found=None, offset=None):
    return E.InvalidImatrixFile(
        what, path=path, field=field, expected=expected, found=found, offset=offset
    )


def _lround(x: np.ndarray) -> np.ndarray:
    # C's lround: halves away from zero (numpy's rint is half-to-even).
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)).astype(np.int64)


def _read_gguf(path: Path) -> Imatrix:
    with read(path) as f:
        md = f.metadata
        ds = md.get("imatrix.datasets")
        datasets = [str(x) for x in ds] if ds is not None else []
        pairs: dict[str, list] = {}
        for t in f.tensors:
            for suffix, slot in ((".in_sum2", 0), (".counts", 1)):
                if t.name.endswith(suffix):
                    pairs.setdefault(t.name[: -len(suffix)], [None, None])[slot] = t
        if not pairs:
            raise _bad(path, "no importance data", expected="<name>.in_sum2 / <name>.counts")
        entries: dict[str, np.ndarray] = {}
        for name, (s, c) in sorted(pairs.items()):
            if s is None or c is None:
                raise _bad(path, "sums without counts (or counts without sums)", field=name,
                           expected="both .in_sum2 and .counts", found="one of them")  # fmt: skip
            if s.ggml_type.name != "F32" or c.ggml_type.name != "F32":
                raise _bad(path, "importance tensors must be F32", field=name,
                           expected="F32", found=f"{s.ggml_type.name}/{c.ggml_type.name}")  # fmt: skip
            sums = np.asarray(f.numpy(s.name)).astype(np.float32).reshape(-1)
            counts = np.asarray(f.numpy(c.name)).astype(np.float32).reshape(-1)
            if counts.size == 0 or sums.size % counts.size:
                raise _bad(path, "sums are not a whole number of experts", field=name,
                           expected=f"a multiple of {counts.size}", found=sums.size)  # fmt: skip
            cnt = _lround(counts).astype(np.float32)
            s2 = sums.reshape(counts.size, sums.size // counts.size)
            with np.errstate(divide="ignore", invalid="ignore"):
                e = np.where(cnt[:, None] > 0, s2 / cnt[:, None], np.float32(1))
            entries[name] = e.astype(np.float32).reshape(-1)
        return Imatrix(
            os.fspath(path),
            entries,
            datasets,
            int(md.get("imatrix.chunk_count", 0) or 0),
            int(md.get("imatrix.chunk_size", 0) or 0),
        )


def _read_legacy(path: Path, raw: bytes) -> Imatrix:
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > len(raw):
            raise _bad(path, "file ends early", field=what, offset=pos,
                       expected=f"{n} more bytes", found=len(raw) - pos)  # fmt: skip
        b = raw[pos : pos + n]
        pos += n
        return b

    (n_entries,) = struct.unpack("<i", take(4, "n_entries"))
    if n_entries < 1:
        raise _bad(path, "no entries", field="n_entries", offset=0, expected=">= 1",
                   found=n_entries)  # fmt: skip
    entries: dict[str, np.ndarray] = {}
    for i in range(n_entries):
        (ln,) = struct.unpack("<i", take(4, f"entry {i} name length"))
        if ln < 0 or ln > len(raw):
            raise _bad(path, "bad name length", field=f"entry {i}", offset=pos - 4,
                       expected="0..file size", found=ln)  # fmt: skip
        name = take(ln, f"entry {i} name").decode("utf-8", "replace")
        ncall, nval = struct.unpack("<ii", take(8, f"entry {i} ncall/nval"))
        if nval < 1:
            raise _bad(path, "bad value count", field=name, offset=pos - 4, expected=">= 1",
                       found=nval)  # fmt: skip
        vals = np.frombuffer(take(4 * nval, f"{name} values"), dtype="<f4").astype(np.float32)
        entries[name] = (vals / np.float32(ncall)).astype(np.float32) if ncall > 0 else vals
    chunks, datasets = 0, []
    if pos + 4 <= len(raw):
        (chunks,) = struct.unpack("<i", take(4, "chunk_count"))
        if pos + 4 <= len(raw):
            (ln,) = struct.unpack("<i", take(4, "dataset length"))
            if 0 < ln <= len(raw) - pos:
                datasets.append(take(ln, "dataset").decode("utf-8", "replace"))
    return Imatrix(os.fspath(path), entries, datasets, chunks, 0, legacy=True)


def read_imatrix(path: str | os.PathLike[str]) -> Imatrix:
    """Read an importance matrix file (GGUF or legacy ``.dat``), as llama-quantize loads it."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise _bad(p, "cannot open importance matrix", expected="a readable file",
                   found=str(exc)) from None  # fmt: skip
    im = _read_gguf(p) if head == _GGUF_MAGIC else _read_legacy(p, p.read_bytes())
    for name, e in im.entries.items():
        if not np.all(np.isfinite(e)):
            raise E.InvalidImatrix(
                "non-finite importance weight", path=im.path, field=name,
                expected="finite", found="nan/inf",
            )  # fmt: skip
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
        raise E.InvalidImatrixFile(
            "size differs from the tensor's", path=im.path, field=name,
            expected=n_per_row * n_expert, found=e.size,
        )  # fmt: skip
    return e.reshape(n_expert, n_per_row)
