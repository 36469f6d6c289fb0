"""``weightsmith quantize``: llama-quantize's job, composed from library parts.

* the per-tensor types come from :func:`weightsmith.quant.recipes.plan`
  (llama.cpp's ``llama-quant.cpp`` rules for a file type such as Q4_K_M);
* the blocks from :func:`weightsmith.quant.quantize` (bit-exact with ggml);
* the file from :class:`weightsmith.gguf.Writer`.

What the output holds, as llama-quantize writes it: every KV of the input
(minus ``split.*``), then ``general.quantization_version`` = 2 and
``general.file_type`` moved to the end, then the ``quantize.imatrix.*`` keys
when an importance matrix was given; tensors in llama.cpp's loader order (by
layer number, then name); a tensor whose
planned type is its current type is copied byte for byte; other tensors
must be F32, F16 or BF16 (no requantizing of quantized data).

Importance matrices are read in both of llama.cpp's formats: the GGUF one
(``<tensor>.in_sum2`` and ``<tensor>.counts``, normalised per expert by the
rounded count) and the legacy ``.dat`` one (sums divided by ``ncall``).
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InvalidImatrix, UsageError

QNT_VERSION = 2  # GGML_QNT_VERSION
_FLOAT_SOURCES = {"F32", "F16", "BF16"}
_NEEDS_IMATRIX = {"IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S"}
_NO_IMATRIX_NEEDED = {"token_embd.weight", "per_layer_token_embd.weight", "output.weight"}


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


_BLK = re.compile(r"blk\.\s*([+-]?\d+)")


def _loader_order(t) -> tuple[int, bytes]:
    """llama.cpp's weight_name_comparer: layer number (``blk.N``, else -1), then name."""
    m = _BLK.match(t.name)
    return (int(m.group(1)) if m else -1, t.name.encode())


def _int_kv(meta, key: str, default: int | None) -> int | None:
    if key not in meta:
        return default
    v = meta[key]
    if isinstance(v, (list, tuple)):
        v = max(v) if v else default
    return int(v) if v is not None else default


def quantize_gguf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str,
    imatrix: str | os.PathLike[str] | None = None,
    progress: Callable | None = None,
    workers: int | None = None,
) -> dict[str, str]:
    """Quantize a GGUF model to the llama.cpp file type ``type``; returns name -> ggml type."""
    from .. import gguf, quant
    from ..quant import recipes

    ftype = recipes.file_type(type)
    im = load_imatrix(imatrix) if imatrix is not None else None
    f = gguf.read(src)
    try:
        meta = f.metadata
        arch = str(meta.get("general.architecture", "llama"))
        tensors = sorted(f.tensors, key=_loader_order)
        source_types = {t.name: t.ggml_type.name for t in tensors}
        plan = recipes.plan(
            [(t.name, t.shape) for t in tensors],
            ftype,
            arch=arch,
            n_layer=_int_kv(meta, f"{arch}.block_count", None),
            n_head=_int_kv(meta, f"{arch}.attention.head_count", 1) or 1,
            n_head_kv=_int_kv(meta, f"{arch}.attention.head_count_kv", None),
            n_expert=_int_kv(meta, f"{arch}.expert_count", 0) or 0,
            has_imatrix=im is not None,
            source_types=source_types,
        )
        _check_plan(tensors, plan, source_types, im, ftype.name)
        w = gguf.Writer(dst, alignment=f.alignment)
        try:
            for key in meta:
                if key.startswith("split."):
                    continue
                w.add(key, meta[key], type=f.metadata_type(key))
            for key, value, vtype in _tail_kvs(ftype.id, im, imatrix):
                if key in meta:  # gguf_set_val_*: remove, then append at the end
                    w.remove(key)
                w.add(key, value, type=vtype)
            for t in tensors:
                w.add_tensor_info(t.name, plan[t.name], t.shape)
            total = sum(t.nbytes for t in tensors)
            done = 0
            for i, t in enumerate(tensors, 1):
                new = plan[t.name]
                if new == t.ggml_type.name:
                    w.write_tensor(t.name, f.tensor_bytes(t.name))
                else:
                    x = np.asarray(f.dequantize(t.name), dtype=np.float32)
                    w.write_tensor(t.name, _quantize_tensor(quant, x, new, t.name, im, workers))
                done += t.nbytes
                if progress is not None:
                    progress(done, total, i, len(tensors))
            w.close()
        except BaseException:
            w.abort()
            raise
        return plan
    finally:
        f.close()


def _tail_kvs(ftype_id: int, im: Imatrix | None, imatrix_path) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = [
        ("general.quantization_version", QNT_VERSION, "u32"),
        ("general.file_type", ftype_id, "u32"),
    ]
    if im is not None:
        out.append(("quantize.imatrix.file", os.fspath(imatrix_path)[:127], "str"))
        if im.datasets:
            out.append(("quantize.imatrix.dataset", im.datasets[0][:127], "str"))
        out.append(("quantize.imatrix.entries_count", len(im.entries), "u32"))
        if im.chunk_count > 0:
            out.append(("quantize.imatrix.chunks_count", im.chunk_count, "u32"))
    return out


def _check_plan(tensors, plan, source_types, im: Imatrix | None, ftype_name: str) -> None:
    """Refuse before writing anything: requantizing, or a low-bit type without an imatrix."""
    for t in tensors:
        new, cur = plan[t.name], source_types[t.name]
        if new == cur:
            continue
        if cur not in _FLOAT_SOURCES:
            raise UsageError(
                f"{t.name} is {cur}: quantize takes F32, F16 or BF16 tensors (requantizing is disabled)"
            )
        needs = t.name not in _NO_IMATRIX_NEEDED and (
            new in _NEEDS_IMATRIX or (new == "Q2_K" and ftype_name == "Q2_K_S")
        )
        if needs and (im is None or _imatrix_for(t.name, t.shape, im) is None):
            raise UsageError(
                f"{t.name}: {new} in a {ftype_name} file needs an importance matrix (--imatrix)"
            )


def _imatrix_for(name: str, shape: tuple[int, ...], im: Imatrix) -> np.ndarray | None:
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


def _quantize_tensor(
    quant, x: np.ndarray, new: str, name: str, im: Imatrix | None, workers
) -> np.ndarray:
    e = None if im is None else _imatrix_for(name, x.shape, im)
    if x.ndim == 3:  # experts: each has its own slice of the importance matrix
        parts = [
            quant.quantize(x[k], new, None if e is None else e[k], name=name, workers=workers)
            for k in range(x.shape[0])
        ]
        return np.stack(parts)
    return quant.quantize(x, new, None if e is None else e[0], name=name, workers=workers)
