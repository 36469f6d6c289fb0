"""How the quantization API does its work: checks, row chunks and threads.

One thread pool does all the work: the kernel core's C pool
(``weightsmith._native.pool``, csrc/ws_threads.h), the calling thread plus
``workers - 1`` pool threads, with the GIL released for the whole call.

Quantizing: :func:`quantize_spans` hands a list of :class:`Span` (rows of
one tensor, its target type, its output slice) to the pool in one call; the
pool cuts them into units of whole rows (widening float16/bfloat16 unit by
unit in the thread that encodes it) and its threads claim units until none is
left.  :func:`quantize` makes one span per memory-bounded piece of a tensor
(the converters call it tensor by tensor); ``quantize_file`` makes one per
tensor and target type of a whole window, so many small tensors keep every
thread busy, with no Python hand-over per span.  Dequantizing: each span is
one kernel call that splits itself over the same threads.

A row's bytes do not depend on which thread made them, nor on how the tensor
was cut: results never depend on the number of threads or the chunk size.

Memory: spans are sized so that the codec's temporaries (registry
``*_TEMP_BYTES``, per element) of all spans in flight stay within
:data:`MEMORY_BUDGET`, whatever the tensor size; only the output is
allocated in full.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from ml_dtypes import bfloat16

from .._native import pool as _pool
from ..dtypes import GGMLType
from ..errors import (
    ByteCountMismatch,
    ImatrixLengthMismatch,
    ImatrixRequired,
    InvalidImatrix,
    InvalidQuantShape,
    InvalidWorkers,
    NonFiniteInput,
    RowLengthNotMultiple,
    UnsupportedDequantizeType,
    UnsupportedQuantizeType,
)
from .registry import Codec, codec, types

#: Bytes of temporaries all chunks in flight may use together.
MEMORY_BUDGET = 64 * 1024 * 1024
#: Families whose blocks never look at the rest of their row without an
#: importance matrix: a long row may be cut into block-aligned pieces.
BLOCKWISE_FAMILIES = frozenset({"plain", "legacy", "ternary", "fp4"})
BACKENDS = ("auto", "thread")


# --------------------------------------------------------------------------- batches


#: The pool reads these dtypes itself (0 = float32, 1 = float16, 2 = bfloat16).
_POOL_SOURCES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(bfloat16): 2}


def pool_source(x: np.ndarray) -> tuple[np.ndarray, int]:
    """``x`` as the pool reads it: (C-contiguous array, source type).  float32,
    float16 and bfloat16 in native order go as they are (widened unit by unit in
    the pool's threads); anything else is converted to float32 here."""
    kind = _POOL_SOURCES.get(x.dtype)
    if kind is None or not x.flags.c_contiguous:
        return np.ascontiguousarray(x, dtype=np.float32), 0
    return (x.view(np.uint16) if kind else x), kind  # bfloat16 has no buffer format


class Span(NamedTuple):
    """Rows to quantize in a batch: ``x`` [k, n] (any real dtype) to ``type_name`` into
    ``out`` (uint8 [k, row bytes]), with ``imatrix`` (checked float32 [n]) or None;
    ``name`` names the tensor in errors, whose row ``r0`` is the first of ``x``
    (``split`` > 1: rows of ``x`` are pieces of the tensor's rows cut that many ways)."""

    type_name: str
    x: np.ndarray
    out: np.ndarray
    imatrix: np.ndarray | None
    name: str | None
    r0: int = 0
    split: int = 1


def quantize_spans(spans: list[Span], workers: int) -> None:
    """Quantize every span in one call of the kernels' pool (``weightsmith._native.pool``):
    ``workers`` threads take units of rows of all the spans, the GIL released
    throughout.  NaN/inf a type cannot store: NonFiniteInput naming the first
    one of the first span holding any."""
    entries = []
    for s in spans:
        src, kind = pool_source(s.x)
        kernel = codec(s.type_name).quantize.kernel()
        entries.append((kernel, src, kind, s.out, s.x.shape[-1], s.imatrix))
    bad = _pool.quantize(entries, workers)
    if bad >= 0:
        s = spans[bad]
        t = codec(s.type_name).type
        check_finite(np.asarray(s.x, dtype=np.float32), s.r0, s.name, t, s.split)
        raise NonFiniteInput(  # not reached: check_finite names the value
            f"{t.name} cannot hold NaN or inf", field=s.name or "x", expected="finite values"
        )


# --------------------------------------------------------------------------- arguments


def workers_count(workers: int | None) -> int:
    """``workers`` as a thread count: None -> 1, 0 -> one per CPU."""
    if workers is None:
        return 1
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
        raise InvalidWorkers(
            "bad workers", field="workers", expected="an integer >= 0", found=repr(workers)
        )
    return int(workers) or (os.cpu_count() or 1)


def check_backend(backend: str) -> None:
    """Only the thread pool exists: "auto" and "thread" name it; anything else
    (the removed "process" and "pool" backends included) is InvalidWorkers."""
    if backend not in BACKENDS:
        raise InvalidWorkers(
            "bad backend: quantization runs on the kernels' thread pool in this process "
            "(the process backends were removed)",
            field="backend",
            expected="'auto' or 'thread'",
            found=repr(backend),
        )


def chunk_rows(n_per_row: int, workers: int, rows: int | None, temp_bytes: int = 64) -> int:
    """Rows per span: ``rows`` if given, else what fits the memory budget.

    ``temp_bytes`` is the codec's temporaries per element (see the registry).
    """
    if rows is not None:
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
            raise InvalidQuantShape(
                "bad chunk_rows", field="chunk_rows", expected="an integer >= 1", found=repr(rows)
            )
        return int(rows)
    per_chunk = MEMORY_BUDGET // (workers * temp_bytes)
    return max(1, per_chunk // max(1, n_per_row))


def spans(nrows: int, step: int, workers: int = 1, least: int = 1) -> list[tuple[int, int]]:
    """Spans of at most ``step`` rows covering ``nrows``.

    With several workers the rows are cut into near-equal spans, at least
    two per worker when spans of ``least`` rows allow it: threads taking
    equal spans in turn finish together (a large last span would leave one
    thread alone at the end).
    """
    count = -(-nrows // step)
    if workers > 1:
        count = max(count, min(2 * workers, nrows // max(1, least)))
    count = max(1, count)
    size, extra = divmod(nrows, count)
    out = []
    r0 = 0
    for i in range(count):
        r1 = r0 + size + (i < extra)
        if r1 > r0:
            out.append((r0, r1))
        r0 = r1
    return out


def check_imatrix(imatrix, n: int, name: str | None) -> np.ndarray | None:
    """The importance matrix as float32 [n], or a named error."""
    if imatrix is None:
        return None
    im = np.asarray(imatrix)
    if im.shape != (n,):
        raise ImatrixLengthMismatch(
            "importance matrix has the wrong shape",
            field=name or "imatrix",
            expected=f"shape ({n},), one weight per column",
            found=f"shape {im.shape}",
        )
    im = np.ascontiguousarray(im, dtype=np.float32)
    bad = ~np.isfinite(im) | (im < 0)
    if bad.any():
        j = int(np.argmax(bad))
        raise InvalidImatrix(
            "importance matrix weight out of range",
            field=name or "imatrix",
            expected="finite weights >= 0",
            found=f"{im[j]} at column {j}",
        )
    return im


def check_quantizable(c: Codec, x: np.ndarray, name: str | None) -> None:
    """Refuse a type without a quantizer, a scalar, a non-numeric array or a ragged row."""
    t = c.type
    if c.quantize is None:
        raise UnsupportedQuantizeType(
            f"no quantizer for {t.name}",
            field=name or "type",
            expected="a type with a quantizer: " + ", ".join(types(quantize=True)),
            found=t.name,
        )
    if x.ndim == 0:
        raise InvalidQuantShape(
            "cannot quantize a scalar",
            field=name or "x",
            expected="at least 1 dimension",
            found="0-d",
        )
    real = np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
    if not real and x.dtype != bfloat16:
        raise InvalidQuantShape(
            "not a real-valued array",
            field=name or "x",
            expected="float values",
            found=str(x.dtype),
        )
    if x.shape[-1] % t.block_size:
        raise RowLengthNotMultiple(
            f"row length is not a multiple of the {t.name} block size",
            field=name or "x",
            expected=f"a multiple of {t.block_size}",
            found=x.shape[-1],
        )


def check_finite(rows: np.ndarray, r0: int, name: str | None, t: GGMLType, split: int = 1) -> None:
    """NonFiniteInput naming the first NaN/inf of ``rows`` (rows ``r0``.. of the tensor).

    ``split`` > 1: the rows are pieces of tensor rows cut ``split`` ways.
    """
    ok = np.isfinite(rows)
    if ok.all():
        return
    r, c = np.argwhere(~ok)[0]
    piece = r0 + int(r)
    row, col = piece // split, (piece % split) * rows.shape[1] + int(c)
    raise NonFiniteInput(
        f"{t.name} cannot hold NaN or inf",
        field=name or "x",
        expected="finite values",
        found=f"{rows[r, c]} at row {row}, column {col}",
    )


# --------------------------------------------------------------------------- tasks


def dequantize_task(
    type_name: str, blocks: np.ndarray, out: np.ndarray | None = None, threads: int = 1
):
    """Decode one span of blocks on ``threads`` threads; into ``out`` when given."""
    dec = codec(type_name).dequantize
    with np.errstate(all="ignore"):  # inf * 0 is NaN in C too
        if out is None:
            return dec(blocks, threads=threads)
        if getattr(dec, "fills_out", False):
            return dec(blocks, out=out, threads=threads)
        out[...] = dec(blocks, threads=threads)
        return out


# --------------------------------------------------------------------------- whole tensors


def rows_getter(x: np.ndarray, n: int) -> Callable[[int, int], np.ndarray]:
    """Rows [r0, r1) of x as C-contiguous [k, n] in x's dtype, without copying the tensor
    (a strided x: only those rows are gathered)."""
    lead = x.shape[:-1]
    if x.flags.c_contiguous:
        flat = x.reshape(-1, n)
        return lambda r0, r1: flat[r0:r1]

    def gather(r0: int, r1: int) -> np.ndarray:
        idx = np.unravel_index(np.arange(r0, r1), lead)
        return np.ascontiguousarray(x[idx])

    return gather


def segment(n: int, block: int, max_elems: int) -> int:
    """The longest block-aligned piece length dividing ``n`` that fits ``max_elems``."""
    if n <= max_elems:
        return n
    nb = n // block
    k = max(1, max_elems // block)
    while nb % k:
        k -= 1
    return k * block


def quantize(x, type, imatrix, workers, name, chunk_rows_, backend) -> np.ndarray:
    """:func:`weightsmith.quant.quantize`."""
    c: Codec = codec(type)
    t = c.type
    x = np.asarray(x)
    check_quantizable(c, x, name)
    n = x.shape[-1]
    im = check_imatrix(imatrix, n, name)
    if im is None and c.requires_imatrix:
        raise ImatrixRequired(
            f"{t.name} cannot be quantized without an importance matrix",
            field=name or "imatrix",
            expected="an importance matrix",
            found=None,
        )
    nw = workers_count(workers)
    check_backend(backend)
    row_bytes = t.nbytes(n)
    lead = x.shape[:-1]
    nrows = math.prod(lead)
    if nrows == 0 or n == 0:
        return np.empty((*lead, row_bytes), dtype=np.uint8)
    # A codec whose blocks ignore the rest of the row may have a long row cut
    # into block-aligned pieces: even one huge row goes in bounded spans.
    seg = n
    if (
        im is None
        and c.family in BLOCKWISE_FAMILIES
        and x.flags.c_contiguous
        and chunk_rows_ is None
    ):
        seg = segment(n, t.block_size, MEMORY_BUDGET // c.quantize_temp_bytes)
    split = n // seg
    get_rows = rows_getter(x.reshape(-1, seg) if split > 1 else x, seg)
    step = chunk_rows(seg, 1, chunk_rows_, c.quantize_temp_bytes)  # one span in flight
    out = np.empty((nrows * split, t.nbytes(seg)), np.uint8)
    for r0, r1 in spans(nrows * split, step):  # each span on nw threads, in the pool
        quantize_spans([Span(t.name, get_rows(r0, r1), out[r0:r1], im, name, r0, split)], nw)
    return out.reshape(*lead, row_bytes)


def as_bytes(raw, name: str | None) -> np.ndarray:
    if isinstance(raw, np.ndarray):
        if not raw.flags.c_contiguous:
            raw = np.ascontiguousarray(raw)
        return raw.reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(raw, dtype=np.uint8)
    except TypeError:
        raise ByteCountMismatch(
            "raw data is not a byte buffer",
            field=name or "raw",
            expected="a uint8 array or a bytes-like object",
            found=type(raw).__name__,
        ) from None


def as_shape(shape, name: str | None) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise InvalidQuantShape(
            "bad shape",
            field=name or "shape",
            expected="a tuple of non-negative integers",
            found=repr(shape),
        )
    return tuple(int(d) for d in dims)


def dequantize(raw, type, shape, workers, name, chunk_rows_, backend) -> np.ndarray:
    """:func:`weightsmith.quant.dequantize`."""
    c: Codec = codec(type)
    t = c.type
    if c.dequantize is None:
        raise UnsupportedDequantizeType(
            f"no dequantizer for {t.name}",
            field=name or "type",
            expected="a known type",
            found=t.name,
        )
    dims = as_shape(shape, name)
    data = as_bytes(raw, name)
    n = dims[-1] if dims else 1
    if n % t.block_size:
        raise RowLengthNotMultiple(
            f"row length is not a multiple of the {t.name} block size",
            field=name or "shape",
            expected=f"a multiple of {t.block_size}",
            found=n,
        )
    count = math.prod(dims)
    want = t.nbytes(count)
    if data.size != want:
        raise ByteCountMismatch(
            f"byte count does not match {count} {t.name} elements",
            field=name or "raw",
            expected=want,
            found=data.size,
        )
    nw = workers_count(workers)
    check_backend(backend)
    out = np.empty(dims, dtype=np.float32)
    if count == 0:
        return out
    nrows = count // n
    bpr = n // t.block_size  # blocks per row
    blocks = data.reshape(nrows * bpr, t.type_size)
    if chunk_rows_ is not None:
        step = chunk_rows(n, 1, chunk_rows_) * bpr  # in blocks
    else:  # blocks decode independently: chunk by blocks, even inside one huge row
        step = max(1, MEMORY_BUDGET // c.dequantize_temp_bytes // t.block_size)
    outb = out.reshape(nrows * bpr, t.block_size)
    for b0, b1 in spans(nrows * bpr, step):  # each span on nw threads, in the kernel
        dequantize_task(t.name, np.ascontiguousarray(blocks[b0:b1]), outb[b0:b1], nw)
    return out
