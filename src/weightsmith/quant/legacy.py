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
``make_qx_quants`` (Q4_0, Q5_0) or ``make_qkx3_quants`` (Q4_1, Q5_1), both
from :mod:`._search`.
Q8_0 ignores the importance matrix, as ggml does.
"""

from __future__ import annotations

import numpy as np

from ..errors import NonFiniteInput
from ._common import (
    F32,
    block_f16,
    block_field,
    decoder,
    f32_to_f16_bits,
    imatrix_weights,
    inv_or_zero,
    pack_nibbles,
    round_away_int,
    row_sigma2,
    scale_rows,
)
from ._search import make_qkx_quants, make_qx_quants

QK = 32


# --------------------------------------------------------------------------- decode
#
# Speed: numpy pays a fixed cost per inner loop, so operations on [B, 16]
# byte slices of the blocks (inner loop 16) are slow.  The decoders instead
# copy each field out as one fixed-size record per block (a memcpy per
# block), expand nibbles on 64-bit words, interleave the halves as 16-byte
# records, and only then convert to float32 once and scale in place -- a
# cache-sized chunk of blocks at a time, straight into the output.

_LO = np.uint64(0x0F0F0F0F0F0F0F0F)
_HALVES = np.dtype([("lo", "V16"), ("hi", "V16")])


def _f16(blocks: np.ndarray, off: int) -> np.ndarray:
    """The fp16 field at byte ``off`` of every block, as float32 [B, 1]."""
    return block_f16(blocks, off).reshape(-1, 1)


def _nibbles(blocks: np.ndarray, off: int) -> np.ndarray:
    """qs (16 bytes at ``off``) -> uint8 codes [B, 32]: low nibbles 0-15, high 16-31."""
    w = block_field(blocks, off, "V16").view("<u8")
    hi = w >> np.uint64(4)
    hi &= _LO
    w = w & _LO
    out = np.empty(len(blocks), _HALVES)
    out["lo"] = w.view("V16")
    out["hi"] = hi.view("V16")
    return out.view(np.uint8).reshape(-1, QK)


def _add_high_bits(blocks: np.ndarray, off: int, q: np.ndarray) -> np.ndarray:
    """q[B, 32] |= (bit j of the u32 qh at ``off``) << 4."""
    qh = block_field(blocks, off, "V4").view(np.uint8)
    # flat: unpackbits along axis 1 runs one 4-byte loop per block, 3x slower
    bits = np.unpackbits(qh, bitorder="little").reshape(q.shape)
    bits <<= 4
    q |= bits
    return q


def _fill_q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _nibbles(blocks, 2).view(np.int8)
    q -= 8
    scale_rows(out, q, _f16(blocks, 0))


def _fill_q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_rows(out, _nibbles(blocks, 4), _f16(blocks, 0))
    out += _f16(blocks, 2)


def _fill_q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _add_high_bits(blocks, 2, _nibbles(blocks, 6)).view(np.int8)
    q -= 16
    scale_rows(out, q, _f16(blocks, 0))


def _fill_q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_rows(out, _add_high_bits(blocks, 4, _nibbles(blocks, 8)), _f16(blocks, 0))
    out += _f16(blocks, 2)


def _fill_q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_rows(out, block_field(blocks, 2, "V32").view(np.int8).reshape(-1, QK), _f16(blocks, 0))


def _fill_q8_1(blocks: np.ndarray, out: np.ndarray) -> None:
    scale_rows(out, block_field(blocks, 4, "V32").view(np.int8).reshape(-1, QK), _f16(blocks, 0))


_dequantize_q4_0 = decoder(QK, _fill_q4_0)
_dequantize_q4_1 = decoder(QK, _fill_q4_1)
_dequantize_q5_0 = decoder(QK, _fill_q5_0)
_dequantize_q5_1 = decoder(QK, _fill_q5_1)
_dequantize_q8_0 = decoder(QK, _fill_q8_0)
_dequantize_q8_1 = decoder(QK, _fill_q8_1)


# --------------------------------------------------------------------------- encode


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
    """(blocks, weights) for the imatrix paths, both [32, B]: the searches'
    in-block-index-first layout."""
    nrows, n = rows.shape
    sigma2 = row_sigma2(rows)
    x = rows.reshape(nrows, n // QK, QK)
    w = imatrix_weights(x, imatrix.reshape(n // QK, QK), sigma2[:, None, None])
    return np.ascontiguousarray(x.reshape(-1, QK).T), np.ascontiguousarray(w.reshape(-1, QK).T)


def _qx(rows: np.ndarray, imatrix: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants (rmse_type 1) per block -> (d [B], levels uint8 [B, 32])."""
    x, w = _weights(rows, imatrix)
    d, L = make_qx_quants(x, nmax, w)
    return d, np.ascontiguousarray(L.T)


def _qkx(rows: np.ndarray, imatrix: np.ndarray, nmax: int) -> tuple[np.ndarray, ...]:
    """make_qkx3_quants(-0.9, 0.05, 36) per block -> (d [B], min [B], levels uint8 [B, 32])."""
    x, w = _weights(rows, imatrix)
    L, d, the_min = make_qkx_quants(x, w, nmax, -0.9, 0.05, 36, False)
    return d, -the_min, np.ascontiguousarray(L.T).astype(np.uint8)


# Reference (no imatrix) paths run on tiles in a "quad-transposed" layout:
# the [c, 32] float32 tile is viewed as [c, 8] 16-byte units and transposed to
# [8, c] (a quarter of the element moves of a float transpose), i.e. row k
# holds x[4k:4k+4] of every block.  Per-block min/max become reductions over
# 8 contiguous rows plus a 4-wide step, per-block scales broadcast along the
# fast axis (repeated x4), and codes go back to file order as 4-byte units.
# numpy runs all of this several times faster than reductions and
# broadcasts over a 32-wide last axis.
_TILE = 8192  # blocks per tile: 1 MiB of float32


def _tiles(rows: np.ndarray, rec: np.dtype, encode) -> np.ndarray:
    """Encode tile by tile: ``encode(x8 [8, 4c], tile [c, 32], out [c] records)``."""
    xb = rows.reshape(-1, QK)
    out = np.empty(xb.shape[0], rec)
    # One buffer for every tile's x8: copyto into it is ~25 % faster than a
    # fresh ascontiguousarray, and it is a copy even for a 1-block tile (whose
    # transpose is already contiguous): the encoders scale x8 in place, and
    # rows may be the caller's array.
    buf = np.empty(8 * min(xb.shape[0], _TILE), np.complex128)
    for b0 in range(0, xb.shape[0], _TILE):
        tile = xb[b0 : b0 + _TILE]
        x8 = buf[: 8 * len(tile)].reshape(8, -1)
        np.copyto(x8, tile.view(np.complex128).T)
        encode(x8.view(np.float32), tile, out[b0 : b0 + _TILE])
    return out.view(np.uint8).reshape(rows.shape[0], -1)


def _rec(*fields: tuple[str, str]) -> np.dtype:
    return np.dtype(list(fields))


def _finite(*extremes: np.ndarray) -> None:
    """Per-block min/max propagate NaN and inf: a cheap exact check of the whole tile."""
    for v in extremes:
        if not np.isfinite(v).all():
            raise NonFiniteInput("legacy types cannot hold NaN or inf")


def _quad(v: np.ndarray, op) -> np.ndarray:
    """op-reduce [4c] (four per block) to [c]."""
    h = v.reshape(-1, 4)
    return op(op(h[:, 0], h[:, 1]), op(h[:, 2], h[:, 3]))


def _x4(v: np.ndarray) -> np.ndarray:
    """A per-block value repeated for the four lanes of each block in a row of x8.

    A broadcast store, not ``np.repeat``: repeat holds the GIL for its whole
    copy, so two worker threads running it take turns (0.9x); this is as fast
    on one thread and lets them overlap.
    """
    out = np.empty((v.size, 4), v.dtype)
    out[...] = v[:, None]
    return out.reshape(-1)


def _signed_absmax(x8: np.ndarray, tile: np.ndarray) -> np.ndarray:
    """quantize_row_q4_0_ref's ``max``: the first value of largest |v| (+0.0 if none)."""
    hi = _quad(np.max(x8, axis=0), np.maximum)
    lo = _quad(np.min(x8, axis=0), np.minimum)
    _finite(hi, lo)
    neg = -lo
    mx = np.where(neg > hi, lo, hi)
    eq = neg == hi
    if eq.any():  # rare: both +a and -a occur (the first wins), or the block is all zero
        tie = eq & (hi > 0)
        rows = tile[tie]
        mx[tie] = rows[np.arange(len(rows)), np.argmax(np.abs(rows), axis=1)]
        mx[eq & (hi == 0)] = 0  # all zero (either sign): C keeps max = +0.0
    return mx


def _first_min_max(x8: np.ndarray, tile: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``if (v < min) min = v`` / ``if (v > max) max = v`` from x[0]: first occurrence.

    Only the sign of a zero extreme depends on the order; those blocks are rescanned.
    """
    out = []
    for red, op in ((np.min, np.minimum), (np.max, np.maximum)):
        m = _quad(red(x8, axis=0), op)
        zero = m == 0
        if zero.any():
            rows = tile[zero]
            m[zero] = rows[np.arange(len(rows)), np.argmax(rows == 0, axis=1)]
        out.append(m)
    _finite(*out)
    return out[0], out[1]


def _codes(t: np.ndarray, bits: int | None) -> np.ndarray:
    """``MIN(2**bits - 1, (int8_t)t)`` for t in [0, 2**(bits+1)): the cast truncates as in C.

    The clamp is ``q - (q >> bits)`` (only 2**bits itself can occur above the
    top), a byte shift and subtract that numpy runs ~4x faster than minimum.
    """
    q = t.astype(np.uint8)
    if bits is not None:
        q -= q >> bits
    return q


def _put_units(out: np.ndarray, field: str, q8: np.ndarray) -> None:
    """Byte codes [k, 4c] in the quad layout -> record field ``field`` (4k bytes) in file order.

    The field is addressed as [c, k] uint32 straight inside the records, so the
    transpose back to file order is the store itself.
    """
    k = q8.shape[0]
    off = out.dtype.fields[field][1]
    dst = np.ndarray((len(out), k), np.uint32, out, off, (out.dtype.itemsize, 4))
    np.copyto(dst, q8.view(np.uint32).reshape(k, -1).T)


def _put_nibbles(out: np.ndarray, q8: np.ndarray, mask: bool) -> None:
    """Codes of elements j and j + 16 -> the 16 qs bytes of each block."""
    qs = q8[4:] << 4  # uint8: bit 4 of a 5-bit code falls off, as (xi & 0x0F) << 4
    qs |= (q8[:4] & 0x0F) if mask else q8[:4]  # 4-bit codes are already < 16
    _put_units(out, "qs", qs)


_SPREAD = np.uint32(0x01020408)  # moves bit 0 of byte i to bit 24 + i (no carries)


_NIB_SHIFTS = (np.arange(8, dtype=np.uint32) * 4)[:, None]


def _high_bits(q8: np.ndarray) -> np.ndarray:
    """Bit 4 of every code -> the u32 qh with bit j = element j.

    ``q8 >> 4`` is 0/1 (codes are < 32); each quad's four lanes are gathered
    into a nibble by one multiply, and the eight nibbles OR-ed into place.
    """
    v = (q8 >> 4).view(np.uint32)  # [8, c]: lane i of quad k in byte i
    nib = (v * _SPREAD) >> np.uint32(24)  # bits 0-3 = the four lanes
    nib &= np.uint32(0xF)
    nib <<= _NIB_SHIFTS
    return np.bitwise_or.reduce(nib, axis=0)


_REC_Q4_0 = _rec(("d", "<u2"), ("qs", "V16"))
_REC_Q4_1 = _rec(("d", "<u2"), ("m", "<u2"), ("qs", "V16"))
_REC_Q5_0 = _rec(("d", "<u2"), ("qh", "<u4"), ("qs", "V16"))
_REC_Q5_1 = _rec(("d", "<u2"), ("m", "<u2"), ("qh", "<u4"), ("qs", "V16"))
_REC_Q8_0 = _rec(("d", "<u2"), ("qs", "V32"))


def _enc_q4_0(x8: np.ndarray, tile: np.ndarray, out: np.ndarray) -> None:
    d = (_signed_absmax(x8, tile) / F32(-8)).astype(np.float32)
    x8 *= _x4(inv_or_zero(d))
    x8 += F32(8.5)
    out["d"] = f32_to_f16_bits(d)
    _put_nibbles(out, _codes(x8, 4), False)


def _enc_q4_1(x8: np.ndarray, tile: np.ndarray, out: np.ndarray) -> None:
    mn, mx = _first_min_max(x8, tile)
    d = ((mx - mn) / F32(15)).astype(np.float32)
    x8 -= _x4(mn)
    x8 *= _x4(inv_or_zero(d))
    x8 += F32(0.5)
    out["d"] = f32_to_f16_bits(d)
    out["m"] = f32_to_f16_bits(mn)
    _put_nibbles(out, _codes(x8, 4), False)


def _enc_q5_0(x8: np.ndarray, tile: np.ndarray, out: np.ndarray) -> None:
    d = (_signed_absmax(x8, tile) / F32(-16)).astype(np.float32)
    x8 *= _x4(inv_or_zero(d))
    x8 += F32(16.5)
    q = _codes(x8, 5)
    out["d"] = f32_to_f16_bits(d)
    out["qh"] = _high_bits(q)
    _put_nibbles(out, q, True)


def _enc_q5_1(x8: np.ndarray, tile: np.ndarray, out: np.ndarray) -> None:
    mn, mx = _first_min_max(x8, tile)
    d = ((mx - mn) / F32(31)).astype(np.float32)
    x8 -= _x4(mn)
    x8 *= _x4(inv_or_zero(d))
    x8 += F32(0.5)
    q = _codes(x8, None)  # ggml has no clamp here; only bits 0-4 are stored
    out["d"] = f32_to_f16_bits(d)
    out["m"] = f32_to_f16_bits(mn)
    out["qh"] = _high_bits(q)
    _put_nibbles(out, q, True)


def _enc_q8_0(x8: np.ndarray, tile: np.ndarray, out: np.ndarray) -> None:
    hi = _quad(np.max(x8, axis=0), np.maximum)
    lo = _quad(np.min(x8, axis=0), np.minimum)
    _finite(hi, lo)
    d = (np.abs(np.maximum(hi, -lo)) / F32(127)).astype(np.float32)  # +0.0 for zeros
    x8 *= _x4(inv_or_zero(d))
    out["d"] = f32_to_f16_bits(d)
    _put_units(out, "qs", round_away_int(x8, np.int8).view(np.uint8))


def _quantize_q4_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, _REC_Q4_0, _enc_q4_0)
    d, L = _qx(rows, imatrix, 8)
    return _assemble(rows, _f16_field(d), pack_nibbles(L))


def _quantize_q4_1(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, _REC_Q4_1, _enc_q4_1)
    d, m, L = _qkx(rows, imatrix, 15)
    return _assemble(rows, _f16_field(d), _f16_field(m), pack_nibbles(L))


def _quantize_q5_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, _REC_Q5_0, _enc_q5_0)
    d, q = _qx(rows, imatrix, 16)
    return _assemble(rows, _f16_field(d), _pack_high_bits(q), pack_nibbles(q))


def _quantize_q5_1(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        return _tiles(rows, _REC_Q5_1, _enc_q5_1)
    d, m, q = _qkx(rows, imatrix, 31)
    return _assemble(rows, _f16_field(d), _f16_field(m), _pack_high_bits(q), pack_nibbles(q))


def _quantize_q8_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml's quantize_q8_0 ignores it
    return _tiles(rows, _REC_Q8_0, _enc_q8_0)


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
