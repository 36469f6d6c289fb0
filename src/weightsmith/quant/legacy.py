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
    first_extreme,
    imatrix_weights,
    make_qkx3_quants,
    make_qx_quants,
    round_away,
    row_sigma2,
)

QK = 32


# --------------------------------------------------------------------------- decode


def _f16(blocks: np.ndarray, off: int) -> np.ndarray:
    """The fp16 field at byte ``off`` of every block, as float32 [B, 1]."""
    return f16_to_f32(blocks[:, off : off + 2].copy().view(np.uint16))


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """qs[B, 16] -> q[B, 32]: low nibbles are elements 0-15, high ones 16-31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """qh[B, 4] (u32 LE) -> the fifth bit of each element, as 0/16 [B, 32]."""
    bits = np.unpackbits(qh, axis=1, bitorder="little")
    return bits << 4


def _dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - np.int8(8)
    return q.astype(np.float32) * d


def _dequantize_q4_1(blocks: np.ndarray) -> np.ndarray:
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    return _nibbles(blocks[:, 4:20]).astype(np.float32) * d + m


def _dequantize_q5_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    q = (_nibbles(blocks[:, 6:22]) | _high_bits(blocks[:, 2:6])).astype(np.int8) - np.int8(16)
    return q.astype(np.float32) * d


def _dequantize_q5_1(blocks: np.ndarray) -> np.ndarray:
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _nibbles(blocks[:, 8:24]) | _high_bits(blocks[:, 4:8])
    return q.astype(np.float32) * d + m


def _dequantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    return blocks[:, 2:34].view(np.int8).astype(np.float32) * _f16(blocks, 0)


def _dequantize_q8_1(blocks: np.ndarray) -> np.ndarray:
    return blocks[:, 4:36].view(np.int8).astype(np.float32) * _f16(blocks, 0)


# --------------------------------------------------------------------------- encode


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """q[B, 32] (values < 16 after masking) -> qs[B, 16]."""
    q = q.astype(np.uint8)
    return (q[:, :16] & 0x0F) | ((q[:, 16:] & 0x0F) << 4)


def _pack_high_bits(q: np.ndarray) -> np.ndarray:
    """The fifth bit of each of q[B, 32] -> qh[B, 4] (u32 little-endian)."""
    return np.packbits(((q.astype(np.uint8) >> 4) & 1), axis=1, bitorder="little")


def _blocks_of(rows: np.ndarray) -> np.ndarray:
    return rows.reshape(-1, QK)


def _assemble(rows: np.ndarray, *fields: np.ndarray) -> np.ndarray:
    """Concatenate per-block byte fields and shape them as rows of bytes."""
    parts = [f.reshape(f.shape[0], -1).view(np.uint8) for f in fields]
    out = np.concatenate(parts, axis=1)
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


def _id_of(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(np.float32)


def _trunc_u8(v: np.ndarray) -> np.ndarray:
    """C's ``(int8_t)`` / ``(uint8_t)`` of a non-negative float: truncation."""
    return np.trunc(v).astype(np.int32)


def _quantize_q4_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is not None:
        x, w = _weights(rows, imatrix)
        d, L = make_qx_quants(x, 8, 1, w)
        return _assemble(rows, _f16_field(d), _pack_nibbles(L))
    x = _blocks_of(rows)
    _, mx = first_extreme(x, "absmax")
    d = (mx / F32(-8)).astype(np.float32)
    idd = _id_of(d)
    q = np.minimum(15, _trunc_u8(x * idd[:, None] + F32(8.5)))
    return _assemble(rows, _f16_field(d), _pack_nibbles(q))


def _quantize_q4_1(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is not None:
        x, w = _weights(rows, imatrix)
        d, mneg, L = make_qkx3_quants(x, w, 15, -0.9, 0.05, 36, False)
        return _assemble(rows, _f16_field(d), _f16_field(-mneg), _pack_nibbles(L))
    x = _blocks_of(rows)
    mn, _ = first_extreme(x, "min")
    mx, _ = first_extreme(x, "max")
    d = ((mx - mn) / F32(15)).astype(np.float32)
    idd = _id_of(d)
    q = np.minimum(15, _trunc_u8((x - mn[:, None]) * idd[:, None] + F32(0.5)))
    return _assemble(rows, _f16_field(d), _f16_field(mn), _pack_nibbles(q))


def _quantize_q5_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is not None:
        x, w = _weights(rows, imatrix)
        d, q = make_qx_quants(x, 16, 1, w)
    else:
        x = _blocks_of(rows)
        _, mx = first_extreme(x, "absmax")
        d = (mx / F32(-16)).astype(np.float32)
        idd = _id_of(d)
        q = np.minimum(31, _trunc_u8(x * idd[:, None] + F32(16.5)))
    return _assemble(rows, _f16_field(d), _pack_high_bits(q), _pack_nibbles(q))


def _quantize_q5_1(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is not None:
        x, w = _weights(rows, imatrix)
        d, mneg, q = make_qkx3_quants(x, w, 31, -0.9, 0.05, 36, False)
        m = -mneg
    else:
        x = _blocks_of(rows)
        m, _ = first_extreme(x, "min")
        mx, _ = first_extreme(x, "max")
        d = ((mx - m) / F32(31)).astype(np.float32)
        idd = _id_of(d)
        # ggml has no clamp here: (uint8_t) truncation, then only bits 0-4 are used
        q = _trunc_u8((x - m[:, None]) * idd[:, None] + F32(0.5)) & 0xFF
    return _assemble(rows, _f16_field(d), _f16_field(m), _pack_high_bits(q), _pack_nibbles(q))


def _quantize_q8_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml's quantize_q8_0 ignores it
    x = _blocks_of(rows)
    amax = np.max(np.abs(x), axis=1)
    d = (amax / F32(127)).astype(np.float32)
    idd = _id_of(d)
    q = round_away(x * idd[:, None]).astype(np.int8)
    return _assemble(rows, _f16_field(d), q)


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
