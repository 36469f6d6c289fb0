"""Ternary and binary ggml types: TQ1_0, TQ2_0, Q1_0, Q2_0.

All four store a single fp16 scale ``d`` per block and small integer codes
``q`` with ``value = (q - 1) * d`` (Q1_0: ``+d``/``-d``).  Q1_0 and Q2_0 live
here rather than with the legacy types because their numerics are the
BitNet-style ones of this family -- a scale taken straight from the block
(mean |x| for Q1_0, max |x| for Q2_0), codes ``roundf(x/d) + 1`` and no
scale search -- not the ``-8``/``-16`` offsets and searches of Q4_0..Q5_1.

Byte layouts (little-endian)::

    TQ1_0  256 values, 54 B:  qs[48] | qh[4] | d:f16
        qs[0:32]   byte m: trits of elements m + 32*n, n = 0..4
        qs[32:48]  byte m: trits of elements 160 + m + 16*n, n = 0..4
        qh[0:4]    byte j: trits of elements 240 + j + 4*n, n = 0..3 (then *3)
        a byte holds ceil(t * 256 / 243) where t is the base-3 number whose
        most significant trit is the first element; trit k is recovered as
        ((uint8)(byte * 3**k) * 3) >> 8
    TQ2_0  256 values, 66 B:  qs[64] | d:f16
        byte 32*c + m, bits 2n..2n+1: element 128*c + 32*n + m
    Q1_0   128 values, 18 B:  d:f16 | qs[16]   bit j of the block: x_j >= 0
    Q2_0    64 values, 18 B:  d:f16 | qs[16]   bits 2(j%4) of byte j//4: q_j

Quantization follows the ``quantize_row_*_ref`` functions of ggml-quants.c.
ggml ignores the importance matrix for all four types (TQ*: ``(void)
quant_weights``; Q1_0/Q2_0: the imatrix path calls the same reference row
function), so the imatrix is accepted and ignored here too.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    F32,
    block_f16,
    block_field,
    decoder,
    f16_to_f32,
    f32_to_f16_bits,
    inv_or_zero,
    round_away,
    scale_rows,
    seq_sum,
)

QK_K = 256
_POW3 = np.array([1, 3, 9, 27, 81, 243], dtype=np.uint8)


def _d16(v: np.ndarray) -> np.ndarray:
    return f32_to_f16_bits(v).reshape(-1, 1).view(np.uint8)


def _trits(x: np.ndarray) -> np.ndarray:
    """Per-block ``lroundf(x * (1/amax)) + 1`` in {0, 1, 2} and d = amax."""
    d = np.max(np.abs(x), axis=1)
    return (round_away(x * inv_or_zero(d)[:, None]) + F32(1)).astype(np.int32), d


# --------------------------------------------------------------------------- TQ1_0


def _pack_base3(t: np.ndarray) -> np.ndarray:
    """t[..., k, m] trits (first k most significant) -> ceil(value * 256 / 243) bytes."""
    q = np.zeros(t.shape[:-2] + t.shape[-1:], dtype=np.int32)
    for k in range(t.shape[-2]):
        q = q * 3 + t[..., k, :]
    if t.shape[-2] == 4:
        q = q * 3  # the 4-trit qh bytes shift the first trit to the top
    return ((q * 256 + 242) // 243).astype(np.uint8)


def _quantize_tq1_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml ignores it
    x = rows.reshape(-1, QK_K)
    t, d = _trits(x)
    qs0 = _pack_base3(t[:, :160].reshape(-1, 5, 32))
    qs1 = _pack_base3(t[:, 160:240].reshape(-1, 5, 16))
    qh = _pack_base3(t[:, 240:].reshape(-1, 4, 4))
    out = np.concatenate([qs0, qs1, qh, _d16(d)], axis=1)
    return out.reshape(rows.shape[0], -1)


def _trit_k(b: np.ndarray, k: int) -> np.ndarray:
    """Trit k of base-3 bytes, ((uint8)(b * 3**k) * 3) >> 8 as ggml's dequantize, as uint8.

    The product wraps in uint8 as in C; ``(t * 3) >> 8`` is 0, 1, 2 for t
    up to 85, up to 170 and above: two comparisons, no widening.
    """
    t = b * _POW3[k]
    q = (t >= 86).view(np.uint8)
    q += t >= 171
    return q


_TQ1_GROUPS = np.dtype([(f"f{i}", f"V{n}") for i, n in enumerate([32] * 5 + [16] * 5 + [4] * 4)])


_TQ1_AB = np.dtype([("a", "V32"), ("b", "V16")])


def _fill_tq1_0(blocks: np.ndarray, out: np.ndarray) -> None:
    # Trit k of qs[0:32] and of qs[32:48] come from one pass over the 48 bytes;
    # each group is then placed with a record copy (a memcpy per block).
    nb = len(blocks)
    ab = block_field(blocks, 0, "V48").view(np.uint8)
    h = block_field(blocks, 48, "V4").view(np.uint8)
    q = np.empty(nb, _TQ1_GROUPS)
    for k in range(5):
        t = _trit_k(ab, k).view(_TQ1_AB)
        q[f"f{k}"] = t["a"]
        q[f"f{5 + k}"] = t["b"]
    for k in range(4):
        q[f"f{10 + k}"] = _trit_k(h, k).view("V4")
    q8 = q.view(np.int8).reshape(nb, QK_K)
    q8 -= 1
    scale_rows(out, q8, block_f16(blocks, 52))


# ~30 numpy calls per chunk: larger chunks amortise them (measured)
_dequantize_tq1_0 = decoder(QK_K, _fill_tq1_0, 1 << 19)


# --------------------------------------------------------------------------- TQ2_0


def _quantize_tq2_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml ignores it
    x = rows.reshape(-1, QK_K)
    t, d = _trits(x)
    t = (t & 3).astype(np.uint8).reshape(-1, 2, 4, 32)  # [B, chunk, n, m]
    qs = t[:, :, 0] | (t[:, :, 1] << 2) | (t[:, :, 2] << 4) | (t[:, :, 3] << 6)
    out = np.concatenate([qs.reshape(-1, 64), _d16(d)], axis=1)
    return out.reshape(rows.shape[0], -1)


_M2 = np.uint64(0x0303030303030303)


_TQ2_RUNS = np.dtype([(f"f{i}", "V32") for i in range(8)])
_TQ2_HALVES = np.dtype([("c0", "V32"), ("c1", "V32")])


def _fill_tq2_0(blocks: np.ndarray, out: np.ndarray) -> None:
    nb = len(blocks)
    w = block_field(blocks, 0, "V64").view("<u8").reshape(nb, 8)
    # element 128c + 32l + m is bits 2l of byte 32c + m
    q = np.empty(nb, _TQ2_RUNS)
    for shift in range(4):
        t = w >> np.uint64(2 * shift)
        t &= _M2
        halves = t.view(_TQ2_HALVES).reshape(-1)
        q[f"f{shift}"] = halves["c0"]
        q[f"f{4 + shift}"] = halves["c1"]
    q8 = q.view(np.int8).reshape(nb, QK_K)
    q8 -= 1
    scale_rows(out, q8, block_f16(blocks, 64))


_dequantize_tq2_0 = decoder(QK_K, _fill_tq2_0, 1 << 19)


# --------------------------------------------------------------------------- Q1_0


def _quantize_q1_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml's imatrix path calls the same reference row function
    x = rows.reshape(-1, 128)
    d = seq_sum(np.abs(x)) / F32(128)
    qs = np.packbits(x >= F32(0), axis=1, bitorder="little")
    return np.concatenate([_d16(d), qs], axis=1).reshape(rows.shape[0], -1)


def _dequantize_q1_0(blocks: np.ndarray) -> np.ndarray:
    d = f16_to_f32(blocks[:, 0:2].copy().view(np.uint16))
    bits = np.unpackbits(blocks[:, 2:18], axis=1, bitorder="little").astype(bool)
    return np.where(bits, d, -d).astype(np.float32)


# --------------------------------------------------------------------------- Q2_0


def _quantize_q2_0(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml's imatrix path calls the same reference row function
    x = rows.reshape(-1, 64)
    d = np.max(np.abs(x), axis=1)
    idd = np.where(d > 0, F32(1) / np.where(d > 0, d, F32(1)), F32(0)).astype(np.float32)
    q = np.clip(round_away(x * idd[:, None]) + F32(1), 0, 3).astype(np.uint8).reshape(-1, 16, 4)
    qs = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return np.concatenate([_d16(d), qs], axis=1).reshape(rows.shape[0], -1)


def _dequantize_q2_0(blocks: np.ndarray) -> np.ndarray:
    d = f16_to_f32(blocks[:, 0:2].copy().view(np.uint16))
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    q = ((blocks[:, 2:18, None] >> shifts) & 3).astype(np.int8).reshape(-1, 64)
    return (q - np.int8(1)).astype(np.float32) * d


DEQUANTIZE = {
    "TQ1_0": _dequantize_tq1_0,
    "TQ2_0": _dequantize_tq2_0,
    "Q1_0": _dequantize_q1_0,
    "Q2_0": _dequantize_q2_0,
}

QUANTIZE = {
    "TQ1_0": _quantize_tq1_0,
    "TQ2_0": _quantize_tq2_0,
    "Q1_0": _quantize_q1_0,
    "Q2_0": _quantize_q2_0,
}
