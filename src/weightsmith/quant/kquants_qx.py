"""K-quants built on the make_qx_quants search (Q3_K, Q6_K); Q2_K/Q4_K/Q5_K live in kquants.py.

Both types use super-blocks of 256 weights split into 16 sub-blocks of 16,
each with a signed integer scale multiplying one float16 super-block scale
``d`` (symmetric: ``x = d * sc * q``, no minimum).  Multi-byte fields are
little-endian.

Q3_K block, 110 bytes::

    offset size  field
         0   32  hmask   bit 2 of each quant: weight e -> byte e % 32, bit e // 32
        32   64  qs      low 2 bits of each quant, four per byte: weight
                         e = 128*h + 32*k + r -> byte 32*h + r, bits 2k..2k+1
        96   12  scales  16 six-bit scales (stored +32): scale j has its low
                         nibble in byte j (j < 8, low half) or byte j-8 (high
                         half), and its top 2 bits in byte 8 + j%4 at bit 2*(j//4)
       108    2  d       float16 super-block scale
    weight e = d * (scale[e//16] - 32) * (q - 4),  q = low2 | hmask_bit << 2

Q6_K block, 210 bytes::

    offset size  field
         0  128  ql      low 4 bits: weight e = 128*h + 32*c + l -> byte
                         64*h + 32*(c & 1) + l, low nibble for c < 2, high for c >= 2
       128   64  qh      high 2 bits: same e -> byte 32*h + l, bits 2c..2c+1
       192   16  scales  int8 scale per sub-block of 16
       208    2  d       float16 super-block scale
    weight e = d * scales[e//16] * (q - 32)

Quantization follows ggml-quants.c exactly: ``quantize_row_q{3,6}_K_ref``
without an importance matrix and ``quantize_row_q{3,6}_K_impl`` with one.
Everything is float32, no fused multiply-add, sums in ggml's sequential
order.  The arrays are laid out *in-group index first* (``[16, groups]``) so
that each C loop over the in-group index becomes one vector operation across
all groups, and a reduction over axis 0 adds the terms in C's order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import GROUP_MAX_EPS, f16_to_f32, f32_to_f16_bits
from ._search import (
    MAGIC as _MAGIC,
)
from ._search import (
    make_q3_quants,
    make_qx_quants,
    nearest_int,
    q3_levels,
    q3_search,
    qx_levels,
    qx_search,
    reduce0,
    signed_absmax,
)

F32 = np.float32
QK_K = 256
_CHUNK_BLOCKS = 1024  # super-blocks per vectorised step (amortises numpy call overhead)
_DEQ_CHUNK = 1024  # super-blocks per dequantize step (temporaries stay in L2)
_LE16 = np.dtype("<u2")  # the block's float16 d is little-endian on every host
_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_PAIRS = np.uint64(0x0303030303030303)
_ONES = np.uint64(0x0101010101010101)
_NIBBLE_SHIFTS = np.array([0, 4], dtype=np.uint64).reshape(1, 2, 1, 1)
_PAIR_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint64).reshape(1, 4, 1, 1)
_HMASK_SHIFTS = (4 * np.arange(2, dtype=np.uint64)[:, None] + np.arange(4, dtype=np.uint64))[
    :, :, None, None
]

__all__ = ["DEQUANTIZE", "QUANTIZE", "make_q3_quants", "make_qx_quants"]


# --------------------------------------------------------------------------- shared steps


def _groups(xb: np.ndarray) -> np.ndarray:
    """Super-blocks ``[b, 256]`` -> sub-blocks in-group-index-first ``[16, b*16]``."""
    return np.ascontiguousarray(xb.reshape(-1, 16).T)


def _requantize(
    xb: np.ndarray,
    d: np.ndarray,
    search_levels: Callable[[np.ndarray], np.ndarray],
    lo: int,
    hi: int,
) -> np.ndarray:
    """Final levels ``nearest_int(x / d) - lo``, clipped, per sub-block with ``d != 0``.

    ``xb`` is ``[b, 256]`` and ``d`` ``[b, 16]``.  Sub-blocks whose scale
    rounded to zero keep the search's levels (ggml ``continue``s past them):
    ``search_levels(idx)`` returns them as ``[len(idx), 16]`` for the flat
    sub-block indices ``idx``.
    """
    b = xb.shape[0]
    with np.errstate(all="ignore"):  # repeat + flat divide: long inner loops
        v = np.divide(xb, np.repeat(d.reshape(-1), 16).reshape(b, QK_K))
    # nearest_int's bit trick with the clip folded into the mantissa range.
    bits = np.add(v, _MAGIC, out=v).view(np.int32)
    bits &= 0x007FFFFF
    np.clip(bits, 0x00400000 + lo, 0x00400000 + hi, out=bits)
    bits -= 0x00400000 + lo
    q = bits.astype(np.uint8).reshape(b * 16, 16)
    skipped = np.flatnonzero(d.reshape(-1) == 0)
    if skipped.size:
        q[skipped] = search_levels(skipped)
    return q.reshape(b, QK_K)


# --------------------------------------------------------------------------- Q6_K


def _q6k_blocks(xb: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """quantize_row_q6_K_ref (qw None) / _impl (qw = imatrix slice) on ``[b, 256]``."""
    b = xb.shape[0]
    xg = _groups(xb)
    scale, iscale_search = qx_search(xg, 32, None if qw is None else _groups(qw))
    scales = scale.reshape(b, 16)
    max_abs, max_scale = signed_absmax(scales.T)
    dead = max_abs < GROUP_MAX_EPS
    iscale = F32(-128) / np.where(dead, F32(1), max_scale)
    d16 = f32_to_f16_bits(F32(1) / iscale)
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)
    d = f16_to_f32(d16)[:, None] * sc.astype(F32)

    def search_levels(idx: np.ndarray) -> np.ndarray:
        return qx_levels(xg[:, idx], iscale_search[idx], 32).T

    L = _byte_lanes(_requantize(xb, d, search_levels, -32, 31)).reshape(2, 4, 4, b)
    low = L & _NIBBLES  # [half, column c, lane, block]
    ql = low[:, :2] | (low[:, 2:] << np.uint64(4))
    high = (L >> np.uint64(4)) & _PAIRS
    qh = high[:, 0] | (high[:, 1] << np.uint64(2))
    qh |= high[:, 2] << np.uint64(4)
    qh |= high[:, 3] << np.uint64(6)
    out = np.empty((b, 210), dtype=np.uint8)
    out[:, :192] = _lane_bytes(np.concatenate([ql.reshape(16, b), qh.reshape(8, b)]))
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d16.astype(_LE16).view(np.uint8).reshape(b, 2)
    out[dead] = 0
    return out


def _lanes(b: np.ndarray, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of each block as uint64 lanes, lane-major ``[nbytes/8, B]``."""
    return _byte_lanes(b[:, :nbytes])


def _byte_lanes(a: np.ndarray) -> np.ndarray:
    """Bytes ``[B, 8m]`` -> uint64 lanes, lane-major ``[m, B]``.

    Lane-major order gives every bit operation a long inner loop (over the
    blocks); the per-byte shifts and masks used on lanes never cross a byte,
    so the results do not depend on endianness.
    """
    return np.ascontiguousarray(np.ascontiguousarray(a).view(np.uint64).T)


def _lane_bytes(lanes: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_byte_lanes`: lanes ``[m, B]`` -> bytes ``[B, 8m]``."""
    return np.ascontiguousarray(lanes.T).view(np.uint8)


def _lanes_to_levels(q: np.ndarray, offset: int) -> np.ndarray:
    """Lane-major level bytes ``[32, B]`` uint64 -> int8 ``[B, 256]`` minus ``offset``."""
    q8 = np.ascontiguousarray(q.reshape(32, -1).T).view(np.uint8)
    q8 -= np.uint8(offset)  # wraps to the int8 value q - offset
    return q8.view(np.int8)


def _q6k_levels(b: np.ndarray) -> np.ndarray:
    """Signed 6-bit levels ``q - 32`` of Q6_K blocks ``[B, 210]`` -> int8 ``[B, 256]``."""
    lanes = _lanes(b, 192)
    ql = lanes[:16].reshape(2, 1, 8, -1)  # [half, _, lane of 32 columns c & 1]
    qh = lanes[16:].reshape(2, 1, 4, -1)  # [half, _, lane]
    q = np.right_shift(ql, _NIBBLE_SHIFTS)  # [half, low|high nibble, lane]
    q &= _NIBBLES
    high = np.right_shift(qh, _PAIR_SHIFTS)  # [half, column c, lane]
    high &= _PAIRS
    high <<= np.uint64(4)
    q.reshape(2, 4, 4, -1)[...] |= high
    return _lanes_to_levels(q, 32)


def _scale_levels(out: np.ndarray, dl: np.ndarray, q: np.ndarray) -> None:
    """``out[b, 16j+i] = dl[b, j] * q[b, 16j+i]`` in float32.

    Filling ``out`` with the scales by a broadcast copy, then multiplying it
    in place by the int8 levels, measured faster than a broadcast multiply
    over the 16-wide sub-blocks or a ``np.repeat`` of the scales.
    """
    out.reshape(-1, 16, 16)[...] = dl.reshape(-1, 16, 1)
    out *= q


@np.errstate(invalid="ignore", over="ignore")  # inf * 0 -> NaN, as in ggml
def dequantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    """Q6_K blocks ``[nb, 210]`` -> float32 ``[nb, 256]`` (dequantize_row_q6_K)."""
    d = _f16_field(blocks, 208)
    out = np.empty((blocks.shape[0], QK_K), dtype=F32)
    for s in range(0, blocks.shape[0], _DEQ_CHUNK):
        b = blocks[s : s + _DEQ_CHUNK]
        dl = d[s : s + _DEQ_CHUNK, None] * b[:, 192:208].view(np.int8).astype(F32)
        _scale_levels(out[s : s + _DEQ_CHUNK], dl, _q6k_levels(b))  # C: (d * sc) * q
    return out


def _f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian float16 at byte ``offset`` of every block, as float32 ``[nb]``."""
    bits = blocks[:, offset].astype(np.uint16) | (blocks[:, offset + 1].astype(np.uint16) << 8)
    return f16_to_f32(bits)


# --------------------------------------------------------------------------- Q3_K


def _pack_q3k_scales(ls: np.ndarray) -> np.ndarray:
    """16 six-bit scales per block ``[b, 16]`` -> the 12 packed bytes."""
    b = ls.shape[0]
    out = np.empty((b, 12), dtype=np.uint8)
    low = ls & 0xF
    out[:, :8] = low[:, :8] | (low[:, 8:] << 4)
    high = (ls >> 4).reshape(b, 4, 4)  # [j // 4, j % 4]
    out[:, 8:] = high[:, 0] | (high[:, 1] << 2) | (high[:, 2] << 4) | (high[:, 3] << 6)
    return out


def _unpack_q3k_scales(packed: np.ndarray) -> np.ndarray:
    """The 12 packed bytes ``[b, 12]`` -> signed scales ``[b, 16]`` (int8, minus 32)."""
    low = np.concatenate([packed[:, :8] & 0xF, packed[:, :8] >> 4], axis=1)
    shifts = np.repeat(np.arange(0, 8, 2, dtype=np.uint8), 4)  # 2 * (j // 4)
    high = (packed[:, 8 + np.arange(16) % 4] >> shifts) & 3
    return (low | (high << 4)).astype(np.int8) - np.int8(32)


_Levels = Callable[[np.ndarray], np.ndarray]


def _q3k_scales_ref(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray, _Levels]:
    """quantize_row_q3_K_ref's scale step -> (6-bit scales, f16 d bits, search levels)."""
    b = xb.shape[0]
    with np.errstate(all="ignore"):
        scale, lv = q3_search(_groups(xb), 4)
    scales = scale.reshape(b, 16)
    _, max_scale = signed_absmax(scales.T)
    has = max_scale != 0  # C: if (max_scale)
    iscale = F32(-32) / np.where(has, max_scale, F32(1))
    ls = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31) + np.int8(32)
    d16 = np.where(has, f32_to_f16_bits(F32(1) / iscale), np.uint16(0))
    ls = np.where(has[:, None], ls, np.int8(0)).astype(np.uint8)
    return ls, d16, lambda idx: q3_levels(lv[:, idx], 4).T


def _q3k_scales_impl(xb: np.ndarray, qw: np.ndarray) -> tuple[np.ndarray, np.ndarray, _Levels]:
    """quantize_row_q3_K_impl's scale step -> (6-bit scales, f16 d bits, search levels)."""
    b = xb.shape[0]
    x2 = xb * xb
    sigma2 = F32(2) * reduce0(x2.T) / F32(QK_K)
    weight = qw * np.sqrt(sigma2[:, None] + x2)
    wg = _groups(weight)
    sw = reduce0(wg)
    xg = _groups(xb)
    scale, iscale = qx_search(xg, 4, wg)
    d_block, Ls = make_qx_quants(scale.reshape(b, 16).T, 32, sw.reshape(b, 16).T)
    return (
        np.ascontiguousarray(Ls.T),
        f32_to_f16_bits(d_block),
        lambda idx: qx_levels(xg[:, idx], iscale[idx], 4).T,
    )


def _q3k_blocks(xb: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """quantize_row_q3_K_ref (qw None) / _impl (qw = imatrix slice) on ``[b, 256]``."""
    b = xb.shape[0]
    ls, d16, search_levels = _q3k_scales_ref(xb) if qw is None else _q3k_scales_impl(xb, qw)
    # ggml re-reads each scale from the packed bytes: 6-bit value minus 32.
    d = f16_to_f32(d16)[:, None] * (ls.astype(F32) - F32(32))
    L = _byte_lanes(_requantize(xb, d, search_levels, -4, 3))  # [32 lanes, block]
    bit2 = (L >> np.uint64(2)) & _ONES  # lane 4k' + j holds weights 32k' + 8j ..
    hmask = bit2[0:4].copy()
    for k in range(1, 8):
        hmask |= bit2[4 * k : 4 * k + 4] << np.uint64(k)
    low = (L & _PAIRS).reshape(2, 4, 4, b)  # [half, k, lane, block]
    qs = low[:, 0] | (low[:, 1] << np.uint64(2))
    qs |= low[:, 2] << np.uint64(4)
    qs |= low[:, 3] << np.uint64(6)
    out = np.empty((b, 110), dtype=np.uint8)
    out[:, :96] = _lane_bytes(np.concatenate([hmask, qs.reshape(8, b)]))
    out[:, 96:108] = _pack_q3k_scales(ls)
    out[:, 108:110] = d16.astype(_LE16).view(np.uint8).reshape(b, 2)
    return out


def _q3k_levels(b: np.ndarray) -> np.ndarray:
    """Signed 3-bit levels ``q - 4`` of Q3_K blocks ``[B, 110]`` -> int8 ``[B, 256]``."""
    lanes = _lanes(b, 96)
    hmask = lanes[:4].reshape(1, 1, 4, -1)  # [_, _, lane]
    qs = lanes[4:].reshape(2, 1, 4, -1)  # [half, _, lane]
    q = np.right_shift(qs, _PAIR_SHIFTS)  # [half, k, lane]: bits 2k..2k+1
    q &= _PAIRS
    high = np.right_shift(hmask, _HMASK_SHIFTS)  # bit 4*half + k
    high &= _ONES
    high <<= np.uint64(2)
    q |= high
    return _lanes_to_levels(q, 4)


@np.errstate(invalid="ignore", over="ignore")  # inf * 0 -> NaN, as in ggml
def dequantize_q3_k(blocks: np.ndarray) -> np.ndarray:
    """Q3_K blocks ``[nb, 110]`` -> float32 ``[nb, 256]`` (dequantize_row_q3_K)."""
    d = _f16_field(blocks, 108)
    out = np.empty((blocks.shape[0], QK_K), dtype=F32)
    for s in range(0, blocks.shape[0], _DEQ_CHUNK):
        b = blocks[s : s + _DEQ_CHUNK]
        dl = d[s : s + _DEQ_CHUNK, None] * _unpack_q3k_scales(b[:, 96:108]).astype(F32)
        _scale_levels(out[s : s + _DEQ_CHUNK], dl, _q3k_levels(b))
    return out


# --------------------------------------------------------------------------- rows


BlockFn = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]


def _row_quantizer(
    block_fn: BlockFn, type_size: int, chunk: int, chunk_imatrix: int
) -> Callable[..., np.ndarray]:
    """Wrap a super-block quantizer into the family's row contract.

    Rows are cut into super-blocks and processed ``chunk`` (with an imatrix:
    ``chunk_imatrix``) at a time;
    the imatrix weight of a super-block is its column slice of the row.
    """

    def quantize(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=F32)
        nrows, n = rows.shape
        nb = n // QK_K
        xb = rows.reshape(nrows * nb, QK_K)
        im = None if imatrix is None else np.asarray(imatrix, dtype=F32).reshape(nb, QK_K)
        out = np.empty((nrows * nb, type_size), dtype=np.uint8)
        step = chunk if im is None else chunk_imatrix
        # Huge inputs overflow float32 inside the search exactly as in ggml; quiet.
        with np.errstate(all="ignore"):
            for s in range(0, nrows * nb, step):
                e = min(s + step, nrows * nb)
                qw = None if im is None else im[np.arange(s, e) % nb]
                out[s:e] = block_fn(xb[s:e], qw)
        return out.reshape(nrows, nb * type_size)

    quantize.__doc__ = f"Quantize float32 rows [nrows, n] to {type_size}-byte super-blocks."
    return quantize


quantize_q6_k = _row_quantizer(_q6k_blocks, 210, _CHUNK_BLOCKS, _CHUNK_BLOCKS)
# make_q3_quants' sparse later passes gain from more groups per numpy call.
quantize_q3_k = _row_quantizer(_q3k_blocks, 110, 2 * _CHUNK_BLOCKS, _CHUNK_BLOCKS)

DEQUANTIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Q3_K": dequantize_q3_k,
    "Q6_K": dequantize_q6_k,
}
QUANTIZE: dict[str, Callable[..., np.ndarray]] = {
    "Q3_K": quantize_q3_k,
    "Q6_K": quantize_q6_k,
}
