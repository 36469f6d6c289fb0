"""Whole GGUF files and their tensors: quantize a file to a llama-quantize file type
(what ``llama-quantize`` does), and dequantize any tensor of an open file.

Sits above :mod:`weightsmith.gguf` (which reads and writes the bytes and knows
nothing of the codecs) and uses the codecs of :mod:`weightsmith.quant`.

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

Importance matrices are read by :mod:`weightsmith.quant.imatrix`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator

import numpy as np

from .. import gguf
from ..dtypes import GGML, ggml_type
from ..errors import ImatrixRequired, RequantizeRefused
from ..progress import ProgressFn
from . import dequantize, quantize, recipes
from ._engine import MIN_CHUNK, check_imatrix, chunk_rows, quantize_task, run, spans, workers_count
from .imatrix import Imatrix, for_tensor, read_imatrix
from .registry import codec

__all__ = ["dequantize_tensor", "quantize_file", "quantize_tensor"]

QNT_VERSION = 2  # GGML_QNT_VERSION
# llama-quantize quantizes from the float types, F64 excepted
_FLOAT_SOURCES = {t.name for t in GGML.values() if t.is_float and t.name != "F64"}
_NEEDS_IMATRIX = {"IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S"}
_NO_IMATRIX_NEEDED = {"token_embd.weight", "per_layer_token_embd.weight", "output.weight"}
#: Output bytes that quantize_file's threads produce before they are written:
#: bounds its extra memory whatever the model size.
WINDOW_BYTES = 256 * 1024 * 1024


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


class QuantizeResult(dict):
    """What :func:`quantize_file` wrote: ``{tensor name: ggml type name}`` (a dict),
    plus ``fallbacks`` (``{name: (wanted type, type used)}`` for the tensors whose
    row length the recipe's type does not divide), ``parameters``, ``nbytes``
    (tensor data) and ``bits_per_weight`` of the output."""

    def __init__(self, types: dict[str, str], fallbacks: dict, parameters: int, nbytes: int):
        super().__init__(types)
        self.fallbacks: dict[str, tuple[str, str]] = dict(fallbacks)
        self.parameters = parameters
        self.nbytes = nbytes

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.parameters if self.parameters else 0.0

    def summary(self) -> str:
        """One line, e.g. ``180 of 272 tensor(s) required fallback quantization
        (Q4_K -> Q5_0: 150, Q6_K -> Q8_0: 30); 6.17 bits per weight``."""
        counts: dict[tuple[str, str], int] = {}
        for pair in self.fallbacks.values():
            counts[pair] = counts.get(pair, 0) + 1
        kinds = ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(counts.items()))
        fb = f"{len(self.fallbacks)} of {len(self)} tensor(s) required fallback quantization"
        fb += f" ({kinds})" if kinds else ""
        return f"{fb}; {self.bits_per_weight:.2f} bits per weight"

    def to_dict(self) -> dict[str, object]:
        return {
            "tensors": len(self),
            "parameters": self.parameters,
            "bytes": self.nbytes,
            "bits_per_weight": round(self.bits_per_weight, 6),
            "fallbacks": [
                {"name": n, "wanted": a, "used": b} for n, (a, b) in sorted(self.fallbacks.items())
            ],
            "types": dict(sorted(self.items())),
        }


def quantize_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str,
    imatrix: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> QuantizeResult:
    """Quantize a GGUF model to the llama.cpp file type ``type``; returns name -> ggml type
    (a :class:`QuantizeResult`, which also counts the fallbacks and the bits per weight)."""
    ftype = recipes.file_type(type)
    im = read_imatrix(imatrix) if imatrix is not None else None
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
        _check_plan(tensors, plan, source_types, im, ftype.name, src)
        w = gguf.Writer(dst, alignment=f.alignment)
        try:
            for key in meta:
                if key.startswith("split."):
                    continue
                w.add(key, meta[key], type=f.metadata_type(key))
            for key, value, vtype in _tail_kvs(ftype.id, im):
                if key in meta:  # gguf_set_val_*: remove, then append at the end
                    w.remove(key)
                w.add(key, value, type=vtype)
            for t in tensors:
                w.add_tensor_info(t.name, plan[t.name], t.shape)
            total = sum(t.nbytes for t in tensors)
            done = 0
            for i, (t, data) in enumerate(_tensor_data(f, tensors, plan, im, workers), 1):
                w.write_tensor(t.name, data)
                done += t.nbytes
                if progress is not None:
                    progress(done, total, i, len(tensors))
            w.close()
        except BaseException:
            w.abort()
            raise
        return QuantizeResult(
            plan,
            plan.fallbacks,
            sum(t.n_elements for t in tensors),
            sum(ggml_type(plan[t.name]).nbytes(t.n_elements) for t in tensors),
        )
    finally:
        f.close()


def _tensor_data(f, tensors, plan, im: Imatrix | None, workers: int | None) -> Iterator[tuple]:
    """(tensor, bytes to write) in file order: copied, or quantized to the plan's type.

    Consecutive tensors are quantized together, a window of at most
    :data:`WINDOW_BYTES` of output at a time: the row spans of all of them go
    to the quantization thread pool at once, so a model of many small tensors
    keeps every worker busy (one tensor of a few spans could not).
    """
    nw = workers_count(workers)
    window: list = []
    size = 0
    for t in tensors:
        new = plan[t.name]
        nbytes = 0 if new == t.ggml_type.name else ggml_type(new).nbytes(math.prod(t.shape))
        if window and size + nbytes > WINDOW_BYTES:
            yield from _quantize_window(f, window, plan, im, nw)
            window, size = [], 0
        window.append(t)
        size += nbytes
    if window:
        yield from _quantize_window(f, window, plan, im, nw)


def _quantize_window(f, window, plan, im: Imatrix | None, nw: int) -> Iterator[tuple]:
    """Quantize the tensors of ``window`` on ``nw`` threads; yield all of them in order."""
    items: list[tuple[int, int, int, int]] = []  # (tensor, expert, first row, end row)
    layout: dict[int, tuple] = {}  # tensor -> (offset, rows per expert, row bytes, weights)
    total = 0
    for j, t in enumerate(window):
        new = plan[t.name]
        if new == t.ggml_type.name:
            continue
        n = t.shape[-1]
        experts = t.shape[0] if len(t.shape) == 3 else 1
        rows = math.prod(t.shape[:-1]) // experts
        e = None if im is None else for_tensor(t.name, t.shape, im)
        weights = []
        for k in range(experts):  # quantize()'s checks, before anything is computed
            ek = None if e is None else e[k]
            quantize(np.zeros((0, n), np.float32), new, ek, name=t.name)
            weights.append(check_imatrix(ek, n, t.name))
        step = chunk_rows(n, nw, None, codec(new).quantize_temp_bytes)
        for k in range(experts):
            items += [(j, k, r0, r1) for r0, r1 in spans(rows, step, nw, max(1, MIN_CHUNK // n))]
        row_bytes = ggml_type(new).nbytes(n)
        layout[j] = (total, rows, row_bytes, weights)
        total += experts * rows * row_bytes
    out = np.empty(total, np.uint8)

    def task(item: tuple[int, int, int, int]) -> None:
        j, k, r0, r1 = item
        t = window[j]
        off, rows, row_bytes, weights = layout[j]
        src = f.numpy(t.name).reshape(-1, t.shape[-1])  # a view: only these rows are read
        x = np.ascontiguousarray(src[k * rows + r0 : k * rows + r1], dtype=np.float32)
        dst = out[off + (k * rows + r0) * row_bytes : off + (k * rows + r1) * row_bytes]
        quantize_task(plan[t.name], x, weights[k], r0, t.name, 1, dst.reshape(r1 - r0, row_bytes))

    run(items, task, nw)
    for j, t in enumerate(window):
        if j not in layout:
            yield t, f.tensor_bytes(t.name)
            continue
        off, rows, row_bytes, _ = layout[j]
        yield t, out[off : off + math.prod(t.shape[:-1]) * row_bytes]


def _tail_kvs(ftype_id: int, im: Imatrix | None) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = [
        ("general.quantization_version", QNT_VERSION, "u32"),
        ("general.file_type", ftype_id, "u32"),
    ]
    return out + (im.gguf_rows() if im is not None else [])


def _check_plan(
    tensors, plan, source_types, im: Imatrix | None, ftype_name: str, src: str | os.PathLike[str]
) -> None:
    """Refuse before writing anything: requantizing, or a low-bit type without an imatrix."""
    for t in tensors:
        new, cur = plan[t.name], source_types[t.name]
        if new == cur:
            continue
        if cur not in _FLOAT_SOURCES:
            raise RequantizeRefused(
                f"already quantized, and requantizing would compound the error: quantize from "
                f"the F16/BF16/F32 GGUF instead (or convert the HF model with --type "
                f"{ftype_name.lower()})",
                path=src,
                field=f"tensor {t.name!r}",
                expected="F32, F16 or BF16",
                found=cur,
            )
        needs = t.name not in _NO_IMATRIX_NEEDED and (
            new in _NEEDS_IMATRIX or (new == "Q2_K" and ftype_name == "Q2_K_S")
        )
        if needs and (im is None or for_tensor(t.name, t.shape, im) is None):
            raise ImatrixRequired(
                f"{new} in a {ftype_name} file needs an importance matrix",
                path=src,
                field=t.name,
                expected="an importance matrix entry",
                found="none",
            )


def quantize_tensor(
    x: np.ndarray, new: str, name: str, im: Imatrix | None, workers: int | None = None
) -> np.ndarray:
    """Quantize one GGUF tensor (2-D, or 3-D experts) with its slice of an importance matrix."""
    e = None if im is None else for_tensor(name, x.shape, im)
    if x.ndim == 3:  # experts: each has its own slice of the importance matrix
        parts = [
            quantize(x[k], new, None if e is None else e[k], name=name, workers=workers)
            for k in range(x.shape[0])
        ]
        return np.stack(parts)
    return quantize(x, new, None if e is None else e[0], name=name, workers=workers)


def dequantize_tensor(f: gguf.GGUFFile, name: str) -> np.ndarray:
    """float32 values of any tensor of an open GGUF file, dequantizing block types."""
    t = f.tensor(name)
    if t.ggml_type.numpy is not None:
        return f.numpy(name).astype(np.float32)
    return dequantize(f.tensor_bytes(name), t.ggml_type, t.shape)
