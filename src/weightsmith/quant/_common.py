"""Numeric helpers shared by every codec family.

ggml computes in float32 scalar arithmetic without FMA; these helpers keep
every intermediate float32 so that vectorised numpy matches it bit for bit.
Codec families append shared pieces here rather than writing them twice;
the scale searches of ggml-quants.c live in :mod:`._search`.

Conventions used by the block helpers below:

* a batch of blocks is a float32 array ``x[B, n]`` (B blocks of n values);
* sums that ggml runs sequentially must be sequential here too
  (``np.sum`` is pairwise and differs in the last bit).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

F32 = np.float32

# ggml's GROUP_MAX_EPS: below this a group counts as all zero.
GROUP_MAX_EPS = F32(1e-15)


# --------------------------------------------------------------------------- fp16 / bf16


def f16_to_f32(bits: np.ndarray) -> np.ndarray:
    """IEEE half bit patterns (uint16, any shape) -> float32 values, as ggml.

    ggml's ``ggml_compute_fp16_to_fp32`` multiplies by 2**-112 in float32,
    which quiets a signalling NaN; numpy keeps it signalling, so set the quiet
    bit on NaNs to match.
    """
    b = np.ascontiguousarray(bits).view(np.uint16)
    out = b.view(np.float16).astype(np.float32)
    if out.size and np.isnan(np.max(out)):  # max propagates NaN: one cheap pass, no mask
        u = out.view(np.uint32)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        u[nan] |= 0x00400000
    return out


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits as ``ggml_compute_fp32_to_fp16``.

    Round to nearest even, overflow to inf, and every NaN becomes
    ``sign | 0x7E00`` (ggml drops the payload).
    """
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        h = np.array(h, copy=True)
        sign = (x.view(np.uint32)[nan] >> 16).astype(np.uint16) & np.uint16(0x8000)
        h[nan] = sign | np.uint16(0x7E00)
    return h


# --------------------------------------------------------------------------- block fields


def block_field(blocks: np.ndarray, off: int, fmt: str) -> np.ndarray:
    """Field ``fmt`` (e.g. ``"<u2"``, ``"V16"``) at byte ``off`` of every block, contiguous [B].

    ``blocks`` is uint8 [B, type_size].  The field is read through a record
    dtype, i.e. one memcpy per block, about twice as fast as slicing the
    byte columns and combining them.
    """
    blocks = np.ascontiguousarray(blocks)
    rec = _field_record(off, fmt, blocks.shape[1])
    return np.ascontiguousarray(blocks.view(rec).reshape(-1)["f"])


@functools.lru_cache(maxsize=256)
def _field_record(off: int, fmt: str, itemsize: int) -> np.dtype:
    # building the dtype costs more than copying the field of a cache-sized chunk
    return np.dtype({"names": ["f"], "formats": [fmt], "offsets": [off], "itemsize": itemsize})


def block_f16(blocks: np.ndarray, off: int = 0) -> np.ndarray:
    """The little-endian fp16 at byte ``off`` of every block, as float32 [B]."""
    return f16_to_f32(block_field(blocks, off, "<u2"))


def inv_or_zero(v: np.ndarray) -> np.ndarray:
    """ggml's ``v ? 1.0f/v : 0.0f`` in float32 (NaN stays NaN, -0 gives +0)."""
    v = np.asarray(v, dtype=np.float32)
    with np.errstate(divide="ignore"):
        inv = np.divide(F32(1), v, dtype=np.float32)
    if inv.ndim == 0:
        return np.where(v == 0, F32(0), inv)
    inv[v == 0] = 0  # in place: cheaper than np.where on the legacy tiles
    return inv


# --------------------------------------------------------------------------- row driver


def quantize_blocks(
    rows: np.ndarray,
    imatrix: np.ndarray | None,
    block_size: int,
    type_size: int,
    chunk_fn,
    chunk_blocks: int,
) -> np.ndarray:
    """Cut rows [nrows, n] into blocks and quantize ``chunk_blocks`` of them per call.

    ``chunk_fn(x [c, block_size], qw [c, block_size] | None) -> uint8 [c, type_size]``;
    the importance weights of a block are its column slice of the imatrix
    (ggml weights column j of every row by ``imatrix[j]``).  Returns
    bytes [nrows, n / block_size * type_size].
    """
    nrows, n = rows.shape
    per_row = n // block_size
    x = np.ascontiguousarray(rows, dtype=np.float32).reshape(-1, block_size)
    qw = None
    if imatrix is not None:
        qw = np.asarray(imatrix, dtype=np.float32).reshape(per_row, block_size)
    out = np.empty((x.shape[0], type_size), dtype=np.uint8)
    for s in range(0, x.shape[0], chunk_blocks):
        e = min(s + chunk_blocks, x.shape[0])
        out[s:e] = chunk_fn(x[s:e], None if qw is None else qw[np.arange(s, e) % per_row])
    return out.reshape(nrows, per_row * type_size)


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """Codes [..., 32k] uint8 -> bytes [..., 16k]: in each group of 32, value j
    in the low and value j + 16 in the high nibble (Q4_0/Q4_1/Q5_x's qs, IQ4's).

    Only the low 4 bits of each code are kept (5-bit codes lose their fifth
    bit here, as ggml's ``(q & 0x0F) | (q << 4)`` into a uint8 does).
    """
    g = np.asarray(q, dtype=np.uint8).reshape(*q.shape[:-1], -1, 2, 16)
    hi = g[..., 1, :] << 4
    hi |= g[..., 0, :] & 0x0F
    return hi.reshape(*q.shape[:-1], -1)


# --------------------------------------------------------------------------- decode driver

#: Elements per decode step: the step's temporaries (a few bytes per element)
#: stay in L2, and numpy's per-call overhead is still small against the work.
DECODE_CHUNK = 1 << 18


def decode_chunks(
    blocks: np.ndarray,
    block_size: int,
    fill: Callable[[np.ndarray, np.ndarray], None],
    chunk: int = DECODE_CHUNK,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Decode blocks [B, type_size] into float32 [B, block_size], a chunk at a time.

    ``fill(blocks[s:e], out[s:e])`` writes the values of one chunk of blocks
    into its (contiguous) slice of the output, so no chunk result is copied.
    ``chunk`` is in elements; decoders issuing many numpy calls per chunk
    want larger ones.  ``out``: a C-contiguous float32 [B, block_size] to
    write into (a new array if None); it is returned.
    """
    blocks = np.ascontiguousarray(blocks)
    if out is None:
        out = np.empty((blocks.shape[0], block_size), dtype=np.float32)
    step = max(1, chunk // block_size)
    with np.errstate(all="ignore"):  # inf * 0 is NaN in C too
        for s in range(0, blocks.shape[0], step):
            fill(blocks[s : s + step], out[s : s + step])
    return out


def decoder(
    block_size: int, fill: Callable[[np.ndarray, np.ndarray], None], chunk: int = DECODE_CHUNK
) -> Callable[..., np.ndarray]:
    """A family's ``DEQUANTIZE`` entry ``(blocks, out=None) -> float32 [B, block_size]``
    made of a chunk filler (see :func:`decode_chunks`).

    Entries made here carry ``fills_out = True``: the API then hands them its
    own output slice and the values are written once, never copied.
    """

    def dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return decode_chunks(blocks, block_size, fill, chunk, out)

    dequantize.fills_out = True  # type: ignore[attr-defined]
    dequantize.__name__ = fill.__name__.replace("_fill", "_dequantize")
    dequantize.__doc__ = fill.__doc__
    return dequantize


def scale_rows(out: np.ndarray, q: np.ndarray, d: np.ndarray) -> None:
    """``out[b, j] = (float)q[b, j] * d[b]`` in float32 (integer q converted, then scaled)."""
    np.copyto(out, q, casting="unsafe")
    out *= d.reshape(-1, 1)


_HALVES: dict[int, np.dtype] = {}


def _halves(n: int) -> np.dtype:
    dt = _HALVES.get(n)
    if dt is None:
        dt = _HALVES[n] = np.dtype([("lo", f"V{n}"), ("hi", f"V{n}")])
    return dt


def nibble_table(values: np.ndarray) -> np.ndarray:
    """A 16-entry int8 code table -> the uint16 table byte -> (values[lo], values[hi])."""
    v = np.asarray(values, dtype=np.int8).view(np.uint8).astype(np.uint16)
    b = np.arange(256)
    return v[b & 15] | (v[b >> 4] << 8)


def nibble_lookup(qs: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Packed codes qs [G, n] uint8 -> int8 [G, 2n]: the table values of the low
    nibbles, then of the high nibbles (ggml's qs layout of Q4_0, IQ4_NL, ...).

    ``pairs`` is a :func:`nibble_table`.  One gather per byte looks both
    nibbles up at once (intp indices gather fastest); the two halves are then
    split on flat arrays and placed with one record copy each.
    """
    g, n = qs.shape
    p = np.take(pairs, qs.astype(np.intp), mode="wrap")  # indices are < 256
    out = np.empty(g, _halves(n))
    out["lo"] = p.astype(np.uint8).view(f"V{n}").reshape(g)
    p >>= 8
    out["hi"] = p.astype(np.uint8).view(f"V{n}").reshape(g)
    return out.view(np.int8).reshape(g, 2 * n)
