"""The legacy ggml block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q8_1 decode).

Every block holds 32 values; fields are little-endian, in this order::

    Q4_0  18 B  d:f16 | qs[16]             value = (q - 8) * d
    Q4_1  20 B  d:f16 | m:f16 | qs[16]     value = q * d + m
    Q5_0  22 B  d:f16 | qh:u32 | qs[16]    value = (q - 16) * d
    Q5_1  24 B  d:f16 | m:f16 | qh:u32 | qs[16]    value = q * d + m
    Q8_0  34 B  d:f16 | qs:i8[32]          value = q * d
    Q8_1  36 B  d:f16 | s:f16 | qs:i8[32]  value = q * d   (s = d * sum(q))

``qs[j]`` holds element ``j`` in its low nibble and element ``j + 16`` in its
high nibble; for the 5-bit types bit ``j`` of ``qh`` is the fifth bit of
element ``j`` (bits 0-15 for the low half, 16-31 for the high half).

Quantization follows ggml-quants.c: without an importance matrix the
``quantize_row_*_ref`` round-trip of the block's extreme value; with one,
``quantize_row_*_impl`` weights each value by ``qw * sqrt(sigma2 + x^2)``
(sigma2 = mean square of the row) and searches the scale with
``make_qx_quants`` (Q4_0, Q5_0) or ``make_qkx3_quants`` (Q4_1, Q5_1).
Q8_0 ignores the importance matrix, as ggml does.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    F32,
    f16_to_f32,
    f32_to_f16_bits,
    imatrix_weights,
    make_qkx3_quants,
    make_qx_quants,
    round_away_int,
    row_sigma2,
)

QK = 32


# --------------------------------------------------------------------------- decode
#
# Speed: numpy pays a fixed cost per inner loop, so operations on [B, 16]
# byte slices of the blocks (inner loop 16) are slow.  The decoders instead
# copy each field out as one fixed-size record per block (a memcpy per
# block), expand nibbles on 64-bit words, interleave the halves as 16-byte
# records, and only then convert to float32 once and scale in place.

_LO = np.uint64(0x0F0F0F0F0F0F0F0F)
_HALVES = np.dtype([("lo", "V16"), ("hi", "V16")])


def _field(blocks: np.ndarray, off: int, fmt: str) -> np.ndarray:
    """Field ``fmt`` at byte ``off`` of every block, as a contiguous [B] array."""
    rec = np.dtype(
        {"names": ["f"], "formats": [fmt], "offsets": [off], "itemsize": blocks.shape[1]}
    )
    return np.ascontiguousarray(blocks.view(rec).reshape(-1)["f"])


def _f16(blocks: np.ndarray, off: int) -> np.ndarray:
    """The fp16 field at byte ``off`` of every block, as float32 [B, 1]."""
    return f16_to_f32(_field(blocks, off, "<u2")).reshape(-1, 1)


def _nibbles(blocks: np.ndarray, off: int) -> np.ndarray:
    """qs (16 bytes at ``off``) -> uint8 codes [B, 32]: low nibbles 0-15, high 16-31."""
    w = _field(blocks, off, "V16").view("<u8")
    hi = w >> np.uint64(4)
    hi &= _LO
    w = w & _LO
    out = np.empty(len(blocks), _HALVES)
    out["lo"] = w.view("V16")
    out["hi"] = hi.view("V16")
    return out.view(np.uint8).reshape(-1, QK)


def _add_high_bits(blocks: np.ndarray, off: int, q: np.ndarray) -> np.ndarray:
    """q[B, 32] |= (bit j of the u32 qh at ``off``) << 4."""
    qh = _field(blocks, off, "V4").view(np.uint8).reshape(-1, 4)
    bits = np.unpackbits(qh, axis=1, bitorder="little")
    bits <<= 4
    q |= bits
    return q


def _scaled(q: np.ndarray, d: np.ndarray, m: np.ndarray | None = None) -> np.ndarray:
    """``(float)q * d (+ m)`` in float32, no FMA."""
    out = q.astype(np.float32)
    out *= d
    if m is not None:
        out += m
    return out


def _dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks, 2).view(np.int8)
    q -= 8
    return _scaled(q, _f16(blocks, 0))


def _dequantize_q4_1(blocks: np.ndarray) -> np.ndarray:
    return _scaled(_nibbles(blocks, 4), _f16(blocks, 0), _f16(blocks, 2))


def _dequantize_q5_0(blocks: np.ndarray) -> np.ndarray:
    q = _add_high_bits(blocks, 2, _nibbles(blocks, 6)).view(np.int8)
    q -= 16
    return _scaled(q, _f16(blocks, 0))


def _dequantize_q5_1(blocks: np.ndarray) -> np.ndarray:
    q = _add_high_bits(blocks, 4, _nibbles(blocks, 8))
    return _scaled(q, _f16(blocks, 0), _f16(blocks, 2))


def _dequantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    q = _field(blocks, 2, "V32").view(np.int8).reshape(-1, QK)
    return _scaled(q, _f16(blocks, 0))


def _dequantize_q8_1(blocks: np.ndarray) -> np.ndarray:
    q = _field(blocks, 4, "V32").view(np.int8).reshape(-1, QK)
    return _scaled(q, _f16(blocks, 0))


# --------------------------------------------------------------------------- encode


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """q[B, 32] uint8 (< 16 after masking) -> qs[B, 16]."""
    hi = q[:, 16:] << 4
    hi |= q[:, :16] & 0x0F
    return hi


def _pack_high_bits(q: np.ndarray) -> np.ndarray:
    """The fifth bit of each of q[B, 32] -> qh[B, 4] (u32 little-endian)."""
    b = q >> 4
    b &= 1
    return np.packbits(b, axis=1, bitorder="little")


def _assemble(rows: np.ndarray, *fields: np.ndarray) -> np.ndarray:
    """Write per-block byte fields side by side, shaped as rows of bytes."""
    parts = [f.reshape(f.shape[0], -1).view(np.uint8) for f in fields]
    out = np.empty((parts[0].shape[0], sum(p.shape[1] for p in parts)), np.uint8)
    o = 0
    for p in parts:
        out[:, o : o + p.shape[1]] = p
        o += p.shape[1]
    return out.reshape(rows.shape[0], -1)


def _f16_field(v: np.ndarray) -> np.ndarray:
    return f32_to_f16_bits(v).reshape(-1, 1)


def _weights(rows: np.ndarray, imatrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(blocks [B, 32], weights [B, 32]) for the imatrix paths."""
    nrows, n = rows.shape
    sigma2 = row_sigma2(rows)
    x = rows.reshape(nrows, n // QK, QK)
    w = imatrix_weights(x, imatrix.reshape(n // QK, QK), sigma2[:, None, None])
    return x.reshape(-1, QK), w.reshape(-1, QK)


# Reference (no imatrix) paths run on tiles of blocks transposed to
# [32, tile]: the per-block min/max become reductions over contiguous rows
# and every per-block scale broadcasts along the fast axis, which numpy does
# several times faster than reductions/broadcasts over a 32-wide last axis.
_TILE = 8192  # blocks per tile: a [32, 8192] float32 tile is 1 MiB


def _tiles(rows: np.ndarray, type_size: int, encode) -> np.ndarray:
    """Encode tile by tile: ``encode(xt [32, c], xb [c, 32], outT [type_size, c])``.

    The encoder fills the block bytes transposed (one row per byte offset),
    so every field is written with contiguous stores; one transpose per tile
    puts the blocks back in file order.
    """
    xb = rows.reshape(-1, QK)
    out = np.empty((xb.shape[0], type_size), np.uint8)
    for b0 in range(0, xb.shape[0], _TILE):
        tile = xb[b0 : b0 + _TILE]
        out_t = np.empty((type_size, len(tile)), np.uint8)
        encode(np.ascontiguousarray(tile.T), tile, out_t)
        out[b0 : b0 + _TILE] = out_t.T
    return out.reshape(rows.shape[0], -1)


def _signed_absmax(xt: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """quantize_row_q4_0_ref's ``max``: the first value of largest |v| (+0.0 if none)."""
    hi, lo = np.max(xt, axis=0), np.min(xt, axis=0)
    mx = np.where(-lo > hi, lo, hi)
    tie = (-lo == hi) & (hi > 0)  # both +a and -a: the first one wins
    if tie.any():
        rows = xb[tie]
        idx = np.argmax(np.abs(rows), axis=1)
        mx[tie] = rows[np.arange(len(rows)), idx]
    mx[(hi == 0) & (lo == 0)] = 0  # all zero (either sign): C keeps max = +0.0
    return mx


def _first_min_max(xt: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``if (v < min) min = v`` / ``if (v > max) max = v`` from x[0]: first occurrence.

    Only the sign of a zero extreme depends on the order; those blocks are rescanned.
    """
    out = []
    for m in (np.min(xt, axis=0), np.max(xt, axis=0)):
        zero = m == 0
        if zero.any():
            rows = xb[zero]
            m[zero] = rows[np.arange(len(rows)), np.argmax(rows == 0, axis=1)]
        out.append(m)
    return out[0], out[1]


def _inv(d: np.ndarray) -> np.ndarray:
    """``d ? 1.0f/d : 0.0f``."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(np.float32)


def _codes(t: np.ndarray, bits: int | None) -> np.ndarray:
    """``MIN(2**bits - 1, (int8_t)t)`` for t in [0, 2**(bits+1)): the cast truncates as in C.

    The clamp is ``q - (q >> bits)`` (only 2**bits itself can occur above the
    top), a byte shift and subtract that numpy runs ~4x faster than minimum.
    """
    q = t.astype(np.uint8)
    if bits is not None:
        q -= q >> bits
    return q


def _put_f16(out_t: np.ndarray, off: int, v: np.ndarray) -> None:
    out_t[off : off + 2] = f32_to_f16_bits(v).view(np.uint8).reshape(-1, 2).T


def _put_nibbles(out_t: np.ndarray, off: int, qt: np.ndarray) -> None:
    """qt[32, c] codes -> qs bytes (element j low nibble, j + 16 high nibble)."""
    qs = out_t[off : off + 16]
    np.left_shift(qt[16:], 4, out=qs)
    qs |= qt[:16] & 0x0F


_BIT_SHIFTS = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)


def _put_high_bits(out_t: np.ndarray, off: int, qt: np.ndarray) -> None:
    """Bit 4 of qt[32, c] -> the u32 qh (bit j = element j), little-endian bytes."""
    h = qt >> 4
    h &= 1
    h = h.reshape(4, 8, -1) << _BIT_SHIFTS
    np.bitwise_or.reduce(h, axis=1, out=out_t[off : off + 4])


def _enc_q4_0(xt: np.ndarray, xb: np.ndarray, out_t: np.ndarray) -> None:
    d = (_signed_absmax(xt, xb) / F32(-8)).astype(np.float32)
    xt *= _inv(d)
    xt += F32(8.5)
    _put_f16(out_t, 0, d)
    _put_nibbles(out_t, 2, _codes(xt, 4))


def _enc_q4_1(xt: np.ndarray, xb: np.ndarray, out_t: np.ndarray) -> None:
    mn, mx = _first_min_max(xt, xb)
    d = ((mx - mn) / F32(15)).astype(np.float32)
    xt -= mn
    xt *= _inv(d)
    xt += F32(0.5)
    _put_f16(out_t, 0, d)
    _put_f16(out_t, 2, mn)
    _put_nibbles(out_t, 4, _codes(xt, 4))


def _enc_q5_0(xt: np.ndarray, xb: np.ndarray, out_t: np.ndarray) -> None:
    d = (_signed_absmax(xt, xb) / F32(-16)).astype(np.float32)
    xt *= _inv(d)
    xt += F32(16.5)
    q = _codes(xt, 5)
    _put_f16(out_t, 0, d)
    _put_high_bits(out_t, 2, q)
    _put_nibbles(out_t, 6, q)


def _enc_q5_1(xt: np.ndarray, xb: np.ndarray, out_t: np.ndarray) -> None:
    mn, mx = _first_min_max(xt, xb)
    d = ((mx - mn) / F32(31)).astype(np.float32)
    xt -= mn
    xt *= _inv(d)
    xt += F32(0.5)
    q = _codes(xt, None)  # ggml has no clamp here; only bits 0-4 are stored
    _put_f16(out_t, 0, d)
    _put_f16(out_t, 2, mn)
    _put_high_bits(out_t, 4, q)
    _put_nibbles(out_t, 8, q)


def _enc_q8_0(xt: np.ndarray, xb: np.ndarray, out_t: np.ndarray) -> None:
    amax = np.abs(np.maximum(np.max(xt, axis=0), -np.min(xt, axis=0)))  # +0.0 for zeros
    d = (amax / F32(127)).astype(np.float32)
    xt *= _inv(d)
    _put_f16(out_t, 0, d)
    out_t[2:34] = round_away_int(xt, np.int8).view(np.uint8)


def _quantize_q4_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, 18, _enc_q4_0)
    x, w = _weights(rows, imatrix)
    d, L = make_qx_quants(x, 8, 1, w)
    return _assemble(rows, _f16_field(d), _pack_nibbles(L))


def _quantize_q4_1(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, 20, _enc_q4_1)
    x, w = _weights(rows, imatrix)
    d, mneg, L = make_qkx3_quants(x, w, 15, -0.9, 0.05, 36, False)
    return _assemble(rows, _f16_field(d), _f16_field(-mneg), _pack_nibbles(L))


def _quantize_q5_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, 22, _enc_q5_0)
    x, w = _weights(rows, imatrix)
    d, q = make_qx_quants(x, 16, 1, w)
    return _assemble(rows, _f16_field(d), _pack_high_bits(q), _pack_nibbles(q))


def _quantize_q5_1(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, 24, _enc_q5_1)
    x, w = _weights(rows, imatrix)
    d, mneg, q = make_qkx3_quants(x, w, 31, -0.9, 0.05, 36, False)
    return _assemble(rows, _f16_field(d), _f16_field(-mneg), _pack_high_bits(q), _pack_nibbles(q))


def _quantize_q8_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml's quantize_q8_0 ignores it
    return _tiles(rows, 34, _enc_q8_0)


DEQUANTIZE = {
    "Q4_0": _dequantize_q4_0,
    "Q4_1": _dequantize_q4_1,
    "Q5_0": _dequantize_q5_0,
    "Q5_1": _dequantize_q5_1,
    "Q8_0": _dequantize_q8_0,
    "Q8_1": _dequantize_q8_1,
}

QUANTIZE = {
    "Q4_0": _quantize_q4_0,
    "Q4_1": _quantize_q4_1,
    "Q5_0": _quantize_q5_0,
    "Q5_1": _quantize_q5_1,
    "Q8_0": _quantize_q8_0,
}
