"""The FP4 (E2M1) ggml types: MXFP4 and NVFP4.

Both store 4-bit E2M1 codes looked up in ``kvalues_mxfp4`` (twice the E2M1
value: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives; code 8 is -0 -> 0) and a
per-group power-of-two-ish scale::

    MXFP4   32 values, 17 B:  e:u8 (E8M0) | qs[16]
            value = kvalues[q] * 2**(e - 128)      (ggml's E8M0 "half")
    NVFP4   64 values, 36 B:  d:u8[4] (UE4M3, one per 16 values) | qs[32]
            value = kvalues[q] * ue4m3(d[s]) / 2

``qs[j]`` holds element ``j`` of the group in its low nibble and element
``j + group/2`` in its high nibble (per 16-value sub-block for NVFP4, whose
sub-block ``s`` owns ``qs[8s:8s+8]``).

Quantization follows ``quantize_row_mxfp4_ref`` / ``quantize_row_nvfp4_ref``:
the scale comes from the group's max |x| (MXFP4: ``floor(log2(amax)) - 2``;
NVFP4: ``amax / 6`` rounded to UE4M3 by ggml's own round-half-up), then each
value takes the first code with the smallest ``|kvalue * d - x|``.  ggml
ignores the importance matrix for both types, and so do we.
"""

from __future__ import annotations

import numpy as np

from ._common import F32, block_field, decoder, nibble_lookup, nibble_table, scale_rows

KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)
_KF = KVALUES.astype(np.float32)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """ggml_e8m0_to_fp32_half: 2**(e-128) as float32 (subnormal for e < 2)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23)
    return bits.astype(np.uint32).view(np.float32)


def _ue4m3_table() -> np.ndarray:
    """ggml_ue4m3_to_fp32 for all 256 byte values (sign bit ignored, as in ggml)."""
    x = np.arange(256)
    exp = (x >> 3) & 0xF
    man = (x & 7).astype(np.float64)
    raw = np.where(exp == 0, np.ldexp(man, -9), np.ldexp(1.0 + man / 8.0, exp - 7))
    out = (raw * 0.5).astype(np.float32)
    out[(x == 0) | (x == 0x7F)] = 0
    return out


_UE4M3 = _ue4m3_table()


def _to_ue4m3(x: np.ndarray) -> np.ndarray:
    """ggml_fp32_to_ue4m3: positive float32 -> UE4M3 byte (round half up, sat. 0x7E)."""
    x = np.asarray(x, dtype=np.float32)
    pos = x > 0
    x = np.where(x > F32(448), F32(448), x)
    bits = x.view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int32) - 127 + 7
    man = ((bits >> 20) & 7).astype(np.int32) + ((bits >> 19) & 1).astype(np.int32)
    carry = man > 7
    man = np.where(carry, 0, man)
    exp = np.where(carry, exp + 1, exp)
    normal = np.where(exp >= 15, 0x7E, (np.clip(exp, 0, 15) << 3) | man)
    sub = np.trunc(x * F32(512) + F32(0.5)).astype(np.int32)
    sub = np.where(sub < 1, 0, np.minimum(sub, 7))
    pre_exp = ((bits >> 23) & 0xFF).astype(np.int32) - 127 + 7
    out = np.where(pre_exp <= 0, sub, normal)
    return np.where(pos, out, 0).astype(np.uint8)


_MAGS = np.array([0, 1, 2, 3, 4, 6, 8, 12], dtype=np.float32)  # kvalues[0:8]


def _best_index(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """best_index_mxfp4 for x[B, n] and per-row d[B]: the first i minimising |k_i*d - x|.

    Exact shortcut of ggml's 16-way scan: kvalues[8:16] are the negatives of
    kvalues[0:8], and fl(|-v*d - x|) = fl(|v*d - |x||), so for x < 0 a
    negative code can only tie with -- never beat first -- its code of the
    same magnitude... except that the positive codes come first in ggml's
    scan: for x >= 0 the answer is a magnitude code m (a negative one can at
    best tie with code 0 and loses), for x < 0 it is m + 8 unless m == 0.
    The magnitude is found with the same strict ``err < best`` scan over the
    8 magnitudes, on whole arrays.
    """
    shape = x.shape
    a = np.abs(x).reshape(-1)
    drep = np.repeat(d.astype(np.float32), shape[1])  # per element: long contiguous loops
    best = np.zeros(a.shape, np.uint8)
    best_err = a.copy()  # |0*d - x|
    e = np.empty_like(a)
    for m in range(1, 8):
        np.multiply(drep, _MAGS[m], out=e)  # the same float as kvalues[m]*d in C
        e -= a
        np.abs(e, out=e)
        better = (e < best_err).view(np.uint8)
        better *= np.uint8(m)
        np.maximum(best, better, out=best)  # m grows: the last improvement wins
        np.minimum(best_err, e, out=best_err)
    best = best.reshape(shape)
    neg = ((x < 0) & (best > 0)).view(np.uint8)
    neg <<= 3
    best += neg
    return best


def _pack(q: np.ndarray) -> np.ndarray:
    half = q.shape[1] // 2
    return q[:, :half] | (q[:, half:] << 4)


def _unpack(qs: np.ndarray) -> np.ndarray:
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _mxfp4_exponent(amax: np.ndarray) -> np.ndarray:
    """(uint8)(floorf(log2f(amax)) - 2 + 127), 0 for amax == 0.

    log2f is taken as the float32 rounding of the double log2, which makes
    values a hair below a power of two round up to it as log2f does.
    """
    with np.errstate(divide="ignore"):
        lg = np.log2(amax.astype(np.float64)).astype(np.float32)
    e = np.floor(lg) - F32(2) + F32(127)
    e = np.where(amax > 0, e, F32(0))
    # C converts through int; the low byte is what lands in the uint8
    return (e.astype(np.int32) & 0xFF).astype(np.uint8)


def _quantize_mxfp4(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml ignores it
    x = rows.reshape(-1, 32)
    e = _mxfp4_exponent(np.max(np.abs(x), axis=1))
    q = _best_index(x, _e8m0_half(e))
    return np.concatenate([e[:, None], _pack(q)], axis=1).reshape(rows.shape[0], -1)


def _field(blocks: np.ndarray, off: int, size: int) -> np.ndarray:
    """``size`` bytes at ``off`` of every block, contiguous [B, size] (a memcpy per block)."""
    return block_field(blocks, off, f"V{size}").view(np.uint8).reshape(-1, size)


_KV_PAIRS = nibble_table(KVALUES)  # byte -> (kvalues[lo nibble], kvalues[hi nibble])
_E8M0_HALF = _e8m0_half(np.arange(256))  # scale byte -> 2**(e-128)


def _fill_mxfp4(blocks: np.ndarray, out: np.ndarray) -> None:
    d = _E8M0_HALF[blocks[:, 0]]
    scale_rows(out, nibble_lookup(_field(blocks, 1, 16), _KV_PAIRS), d)


_dequantize_mxfp4 = decoder(32, _fill_mxfp4)


def _quantize_nvfp4(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix  # ggml ignores it
    x = rows.reshape(-1, 16)  # sub-blocks
    ue = _to_ue4m3((np.max(np.abs(x), axis=1) / F32(6)).astype(np.float32))
    q = _pack(_best_index(x, _UE4M3[ue]))  # [S, 8]
    out = np.concatenate([ue.reshape(-1, 4), q.reshape(-1, 32)], axis=1)
    return out.reshape(rows.shape[0], -1)


def _fill_nvfp4(blocks: np.ndarray, out: np.ndarray) -> None:
    d = _UE4M3[_field(blocks, 0, 4)]  # [B, 4], one scale per 16 values
    q = nibble_lookup(_field(blocks, 4, 32).reshape(-1, 8), _KV_PAIRS)  # [B * 4, 16]
    scale_rows(out.reshape(-1, 16), q, d)


_dequantize_nvfp4 = decoder(64, _fill_nvfp4)


DEQUANTIZE = {"MXFP4": _dequantize_mxfp4, "NVFP4": _dequantize_nvfp4}
QUANTIZE = {"MXFP4": _quantize_mxfp4, "NVFP4": _quantize_nvfp4}
