"""The K-quant family: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (quantize + dequantize), Q8_K (dequantize).

Every type packs 256 weights ("super-block") into one block, split into
sub-blocks with their own integer scale (and, for Q2_K/Q4_K/Q5_K, min)
relative to fp16 super-block scales.  Q2_K, Q4_K and Q5_K decode a weight as
``d * sc * q - dmin * m``; Q3_K and Q6_K are symmetric, ``d * sc * q`` with
a signed q.  All multi-byte fields are little-endian.

Byte layout of one block (offsets in bytes)::

    Q2_K (84 B, 16 sub-blocks of 16)
      0  scales[16]  u8   low nibble: 4-bit scale sc, high nibble: 4-bit min m
     16  qs[64]      u8   2-bit quants; byte 32*h + l holds elements
                          128*h + l + 32*s in bits 2s..2s+1 (s = 0..3)
     80  d           f16
     82  dmin        f16

    Q3_K (110 B, 16 sub-blocks of 16)
      0  hmask[32]   u8   bit 2 of each quant: weight e -> byte e % 32, bit e // 32
     32  qs[64]      u8   low 2 bits, four per byte: weight e = 128*h + 32*k + r
                          -> byte 32*h + r, bits 2k..2k+1
     96  scales[12]  u8   16 six-bit scales (stored +32): scale j has its low
                          nibble in byte j (j < 8, low half) or byte j-8 (high
                          half), and its top 2 bits in byte 8 + j%4 at bit 2*(j//4)
    108  d           f16  weight e = d * (scale[e//16] - 32) * (q - 4),
                          q = low2 | hmask_bit << 2

    Q4_K (144 B, 8 sub-blocks of 32)
      0  d           f16
      2  dmin        f16
      4  scales[12]  u8   eight 6-bit scales and eight 6-bit mins (see below)
     16  qs[128]     u8   4-bit quants; byte 32*c + l holds element 64*c + l
                          in its low nibble and 64*c + 32 + l in its high one

    Q5_K (176 B, 8 sub-blocks of 32)
      0  d, 2 dmin, 4 scales[12]     as Q4_K
     16  qh[32]      u8   fifth bits: bit 2c of byte l for element 64*c + l,
                          bit 2c+1 for element 64*c + 32 + l
     48  qs[128]     u8   low 4 bits, packed as Q4_K's qs

    Q6_K (210 B, 16 sub-blocks of 16)
      0  ql[128]     u8   low 4 bits: weight e = 128*h + 32*c + l -> byte
                          64*h + 32*(c & 1) + l, low nibble for c < 2, high for c >= 2
    128  qh[64]      u8   high 2 bits: same e -> byte 32*h + l, bits 2c..2c+1
    192  scales[16]  i8   scale per sub-block of 16
    208  d           f16  weight e = d * scales[e//16] * (q - 32)

    Q8_K (292 B; an intermediate type ggml uses for dot products)
      0  d           f32
      4  qs[256]     i8   weight = d * q
    260  bsums[16]   i16  sums of 16 consecutive qs (ignored when decoding)

The 12 scale bytes of Q4_K/Q5_K hold scale ``sc[j]`` and min ``m[j]`` of
sub-block ``j`` (6 bits each): for ``j < 4`` the low 6 bits of byte ``j`` and
byte ``j + 4``; for ``j >= 4`` the low / high nibble of byte ``j + 4`` plus
the top two bits of byte ``j - 4`` (scale) and byte ``j`` (min).

Quantization is bit-exact with ggml's C reference (``quantize_row_*_ref``
without an importance matrix, ``quantize_row_*_impl`` with one); the scale
searches come from :mod:`._search`.  The numpy code vectorises *across*
sub-blocks: arrays are laid out ``[n_in_sub, M]`` so that reductions over
axis 0 run in C's sequential order, every intermediate stays float32, and the
C code's tie-breaking comparisons and early-outs are reproduced.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import (
    GROUP_MAX_EPS,
    block_f16,
    block_field,
    f16_to_f32,
    f32_to_f16_bits,
    imatrix_weights,
    quantize_blocks,
)
from ._search import MAGIC as _MAGIC
from ._search import (
    make_qkx_quants,
    make_qp_quants,
    make_qx_quants,
    nearest_int,
    q3_levels,
    q3_search,
    qx_levels,
    qx_search,
    reduce0,
    seqsum,
    signed_absmax,
)

# The scale searches are _search's; kquants only uses them (make_qp_quants and
# friends stay importable from here for older callers).
__all__ = ["DEQUANTIZE", "QUANTIZE", "get_scale_min_k4", "pack_scale_min_k4"]

F32 = np.float32
QK_K = 256
_ZERO = F32(0.0)

# Super-blocks per numpy pass of the quantizers: large enough to amortise
# per-call overhead, small enough that the scale searches' working arrays
# stay in L2.
_CHUNK_BLOCKS = 2048
_DEQ_CHUNK = 1024  # super-blocks per Q3_K/Q6_K dequantize step (temporaries stay in L2)
_LE16 = np.dtype("<u2")  # the block's float16 d is little-endian on every host
_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_PAIRS = np.uint64(0x0303030303030303)
_ONES = np.uint64(0x0101010101010101)
_NIBBLE_SHIFTS = np.array([0, 4], dtype=np.uint64).reshape(1, 2, 1, 1)
_PAIR_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint64).reshape(1, 4, 1, 1)
_HMASK_SHIFTS = (4 * np.arange(2, dtype=np.uint64)[:, None] + np.arange(4, dtype=np.uint64))[
    :, :, None, None
]
_DEQ_BLOCKS = 512  # blocks per float32 pass of the Q2_K/Q4_K/Q5_K dequantizers (L2-sized)


# --------------------------------------------------------------------------- helpers


_TRANSPOSE_TILE = 65536  # bytes per slice of the quantizers' layout transposes


def _transpose(a: np.ndarray) -> np.ndarray:
    """``a.T`` as a C-contiguous copy, made in slices along the long axis.

    One numpy transpose of a multi-MiB array misses the cache on nearly every
    strided access; slices of _TRANSPOSE_TILE bytes ran ~2x faster.
    """
    r, c = a.shape
    out = np.empty((c, r), dtype=a.dtype)
    k = max(16, _TRANSPOSE_TILE // (min(r, c) * a.itemsize or 1))
    if r >= c:
        for s in range(0, r, k):
            out[:, s : s + k] = a[s : s + k].T
    else:
        for s in range(0, c, k):
            out[s : s + k] = a[:, s : s + k].T
    return out


def _to_sub(blocks: np.ndarray, sub: int) -> np.ndarray:
    """[B, 256] blocks -> [sub, B*256/sub]: in-sub-block index first."""
    return _transpose(blocks.reshape(-1, sub))


def _from_sub(a: np.ndarray, nblocks: int) -> np.ndarray:
    """Inverse of :func:`_to_sub`."""
    return _transpose(a).reshape(nblocks, QK_K)


# --------------------------------------------------------------------------- 6-bit scale packing


def pack_scale_min_k4(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight scales and eight mins per block ([B, 8] ints) -> the 12 scale bytes.

    Inverse of :func:`get_scale_min_k4` for values < 64.  Larger values are
    truncated the way C's ``uint8_t`` stores truncate them.
    """
    ls = ls.astype(np.int64)
    lm = lm.astype(np.int64)
    out = np.empty((ls.shape[0], 12), dtype=np.int64)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return (out & 0xFF).astype(np.uint8)


def get_scale_min_k4(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 scale bytes [B, 12] -> (scales, mins), each uint8 [B, 8].

    Works on the three little-endian 32-bit words of each block, four 6-bit
    fields at a time, as ggml's SIMD code does.
    """
    w = np.ascontiguousarray(q, dtype=np.uint8).view("<u4")  # [B, 3]
    w0, w1, w2 = w[:, 0], w[:, 1], w[:, 2]
    out = np.empty((2, q.shape[0], 2), dtype="<u4")  # [scales | mins, B, 8 bytes]
    np.bitwise_and(w0, 0x3F3F3F3F, out=out[0, :, 0])
    np.bitwise_or(w2 & 0x0F0F0F0F, (w0 >> 2) & 0x30303030, out=out[0, :, 1])
    np.bitwise_and(w1, 0x3F3F3F3F, out=out[1, :, 0])
    np.bitwise_or((w2 >> 4) & 0x0F0F0F0F, (w1 >> 2) & 0x30303030, out=out[1, :, 1])
    b = out.view(np.uint8).reshape(2, -1, 8)
    return b[0], b[1]


# --------------------------------------------------------------------------- shared pieces


def _max_positive(v: np.ndarray) -> np.ndarray:
    """C's ``m = 0; if (v > m) m = v`` over axis 1."""
    m = np.max(v, axis=1)
    return np.where(m > 0, m, _ZERO)


def _requantize_affine(
    x: np.ndarray, L: np.ndarray, d: np.ndarray, dm: np.ndarray, nmax: int
) -> np.ndarray:
    """Re-derive quants from the stored (rounded) scales: ``(x + dm) / d``.

    ``x``, ``L``: [n, M]; ``d``, ``dm``: [M].  Sub-blocks whose decoded scale
    is 0 keep the quants of the search, as in C's ``if (!d) continue``.
    """
    v = np.add(x, dm)
    v /= d
    q = nearest_int(v)
    np.clip(q, 0, nmax, out=q)
    dead = d == 0
    if dead.any():
        q[:, dead] = L[:, dead]
    return q.astype(np.uint8)


def _sigma2(blocks: np.ndarray, factor: float) -> np.ndarray:
    """``factor * sum(x*x) / 256`` per block, summed in C's order."""
    xb = _transpose(blocks)
    return F32(factor) * seqsum(xb * xb) / F32(QK_K)


def _imatrix_weights(
    x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray, per_block: int
) -> np.ndarray:
    """``qw * sqrt(sigma2 + x*x)`` for x [n, M] and sigma2 per block."""
    return imatrix_weights(x, qw, np.repeat(sigma2, per_block))


# --------------------------------------------------------------------------- Q4_K / Q5_K


def _scales_k4(blocks: np.ndarray, qw: np.ndarray | None, nmax: int):
    """Sub-block search + 6-bit scale quantization shared by Q4_K and Q5_K.

    Returns (x [32, M], L [32, M], scale bytes [B, 12], d bits, dmin bits).
    """
    nb = blocks.shape[0]
    x = _to_sub(blocks, 32)
    if qw is None:
        av_x = np.sqrt(seqsum(x * x) / F32(32))
        w = av_x + np.abs(x)
        rmin = -1.0 if nmax == 15 else -0.5
        nstep = 20 if nmax == 15 else 15
        L, scales, mins = make_qkx_quants(x, w, nmax, rmin, 0.1, nstep, False)
        scales = scales.reshape(nb, 8)
        mins = mins.reshape(nb, 8)
        max_scale = _max_positive(scales)
        max_min = _max_positive(mins)
        with np.errstate(divide="ignore"):
            inv_scale = np.where(max_scale > 0, F32(63.0) / max_scale, _ZERO)
            inv_min = np.where(max_min > 0, F32(63.0) / max_min, _ZERO)
        ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
        lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
        d_bits = f32_to_f16_bits(max_scale / F32(63.0))
        m_bits = f32_to_f16_bits(max_min / F32(63.0))
    else:
        sigma2 = _sigma2(blocks, 2.0)
        w = _imatrix_weights(x, _to_sub(qw, 32), sigma2, 8)
        sw = seqsum(w)
        L, scales, mins = make_qkx_quants(x, w, nmax, -0.9, 0.05, 36, False)
        sw8 = np.ascontiguousarray(sw.reshape(nb, 8).T)
        d_block, ls = make_qp_quants(np.ascontiguousarray(scales.reshape(nb, 8).T), sw8, 63)
        m_block, lm = make_qp_quants(np.ascontiguousarray(mins.reshape(nb, 8).T), sw8, 63)
        ls, lm = ls.T, lm.T
        if nmax == 31:  # only Q5_K's impl clamps the stored levels
            ls = np.minimum(ls, 63)
            lm = np.minimum(lm, 63)
        d_bits = f32_to_f16_bits(d_block)
        m_bits = f32_to_f16_bits(m_block)

    packed = pack_scale_min_k4(ls, lm)
    sc, mc = get_scale_min_k4(packed)
    d = (f16_to_f32(d_bits)[:, None] * sc.astype(np.float32)).reshape(-1)
    dm = (f16_to_f32(m_bits)[:, None] * mc.astype(np.float32)).reshape(-1)
    q = _requantize_affine(x, L, d, dm, nmax)
    return _from_sub(q, nb), packed, d_bits, m_bits


def _nibbles(q: np.ndarray) -> np.ndarray:
    """[B, 256] levels -> [B, 128] bytes: chunk c of 64 -> low/high nibbles."""
    q = q.reshape(-1, 4, 2, 32)
    return ((q[:, :, 0] & 0xF) | ((q[:, :, 1] & 0xF) << 4)).astype(np.uint8).reshape(-1, 128)


def _head_k4(blocks: np.ndarray, qw: np.ndarray | None, nmax: int, type_size: int):
    """Q4_K/Q5_K: the levels [B, 256] and the output blocks with d, dmin and scales filled in."""
    q, packed, d_bits, m_bits = _scales_k4(blocks, qw, nmax)
    out = np.empty((blocks.shape[0], type_size), dtype=np.uint8)
    out[:, 0:2] = d_bits.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = m_bits.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = packed
    return q, out


def _quantize_q4_k(blocks: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Q4_K blocks: 8 x 32 weights, 6-bit scales and mins, 4-bit quants."""
    q, out = _head_k4(blocks, qw, 15, 144)
    out[:, 16:144] = _nibbles(q)
    return out


def _quantize_q5_k(blocks: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Q5_K blocks: 8 x 32 weights, 6-bit scales and mins, 5-bit quants."""
    q, out = _head_k4(blocks, qw, 31, 176)
    hi = (q >> 4).reshape(-1, 8, 32)  # fifth bit of sub-block s sits in bit s
    qh = np.zeros((blocks.shape[0], 32), dtype=np.int32)
    for s in range(8):
        qh |= hi[:, s] << s
    out[:, 16:48] = qh.astype(np.uint8)
    out[:, 48:176] = _nibbles(q)
    return out


def _dequantize_q4_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    dl, ml = _dl_ml_k4(blocks)
    return _affine(_nibble_rows(blocks[:, 16:144]), dl, ml, 32, out)


def _dequantize_q5_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    dl, ml = _dl_ml_k4(blocks)
    q = _nibble_rows(blocks[:, 48:176])
    # fifth bits: bit s of qh byte e belongs to element e of sub-block s
    qh = np.ascontiguousarray(blocks[:, 16:48]).view("<u8")  # [B, 4]
    hi = np.empty((8, *qh.shape), dtype=np.uint64)
    for s in range(8):
        np.bitwise_and(qh >> np.uint64(s), _ONES, out=hi[s])
    hi <<= np.uint64(4)
    q.view("<u8").reshape(-1, 8, 4)[...] |= _rows_v32(hi)
    return _affine(q, dl, ml, 32, out)


def _dl_ml_k4(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per sub-block ``d * sc`` and ``dmin * m`` of Q4_K/Q5_K blocks, flat [B*8]."""
    dd = f16_to_f32(np.ascontiguousarray(blocks[:, 0:4]).view("<u2"))  # [B, 2]
    sc, mn = get_scale_min_k4(blocks[:, 4:16])
    with np.errstate(all="ignore"):
        dl = np.repeat(dd[:, 0], 8) * sc.reshape(-1).astype(np.float32)
        ml = np.repeat(dd[:, 1], 8) * mn.reshape(-1).astype(np.float32)
    return dl, ml


def _rows_v32(parts: np.ndarray) -> np.ndarray:
    """[P, n, 4] uint64 (P runs of 32 bytes per block) -> [n, P, 4], runs interleaved.

    The runs are moved as opaque 32-byte items, so numpy copies them in one
    long loop instead of one short loop per run.
    """
    p, n = parts.shape[0], parts.shape[1]
    items = np.ascontiguousarray(parts).view("V32").reshape(p, n)
    out = np.empty((n, p), dtype="V32")
    out[...] = items.T
    return out.view("<u8").reshape(n, p, 4)


def _nibble_rows(qs: np.ndarray) -> np.ndarray:
    """[n, 128] packed nibbles -> [n, 256] uint8 levels in element order.

    Byte ``32*c + l`` holds element ``64*c + l`` (low nibble) and
    ``64*c + 32 + l`` (high nibble).
    """
    n = qs.shape[0]
    w = np.ascontiguousarray(qs).view("<u8").reshape(n, 4, 4)  # [n, c, 4 words]
    parts = np.empty((2, n, 4, 4), dtype=np.uint64)
    np.bitwise_and(w, _NIBBLES, out=parts[0])
    np.right_shift(w, np.uint64(4), out=parts[1])
    parts[1] &= _NIBBLES
    # [2, n*4] runs -> [n*4, 2]: low run then high run of each 32-byte group
    q = _rows_v32(parts.reshape(2, n * 4, 4))
    return q.view(np.uint8).reshape(n, QK_K)


def _affine(
    q: np.ndarray, dl: np.ndarray, ml: np.ndarray, per: int, out: np.ndarray | None = None
) -> np.ndarray:
    """``dl * q - ml`` with dl, ml constant over each sub-block -> float32 [B, 256].

    ``q`` [B, 256] uint8 levels; ``dl``, ``ml`` [B * 256 / per], ``per`` the
    sub-block length.  The per-row factors are expanded with np.repeat:
    broadcasting them over rows of 16 or 32 floats costs numpy one short
    inner loop per row, about twice the time of repeat + one long loop.
    Chunks keep the float32 work inside L2.  ``out``: float32 [B, 256] to
    write into (new if None).
    """
    if out is None:
        out = np.empty(q.shape, dtype=np.float32)
    rows = _DEQ_BLOCKS * QK_K // per
    for r0 in range(0, dl.size, rows):
        r1 = min(dl.size, r0 + rows)
        y = out.reshape(-1)[r0 * per : r1 * per]
        np.copyto(y, q.reshape(-1)[r0 * per : r1 * per], casting="unsafe")
        with np.errstate(all="ignore"):  # inf * 0 is NaN in C too
            y *= np.repeat(dl[r0:r1], per)
            y -= np.repeat(ml[r0:r1], per)
    return out


# --------------------------------------------------------------------------- Q2_K


def _quantize_q2_k(blocks: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Q2_K blocks: 16 x 16 weights, 4-bit scales and mins, 2-bit quants."""
    nb = blocks.shape[0]
    x = _to_sub(blocks, 16)
    q4 = F32(15.0)
    if qw is None:
        L, scales, mins = make_qkx_quants(x, np.abs(x), 3, -0.5, 0.1, 15, True)
        scales = scales.reshape(nb, 16)
        mins = mins.reshape(nb, 16)
        max_scale = _max_positive(scales)
        max_min = _max_positive(mins)
        with np.errstate(divide="ignore", invalid="ignore"):
            ls = nearest_int((q4 / max_scale)[:, None] * scales) & 0xFF
            lm = nearest_int((q4 / max_min)[:, None] * mins) & 0xFF
        ls = np.where(max_scale[:, None] > 0, ls, 0)
        lm = np.where(max_min[:, None] > 0, lm, 0)
        d_bits = f32_to_f16_bits(np.where(max_scale > 0, max_scale / q4, _ZERO))
        m_bits = f32_to_f16_bits(np.where(max_min > 0, max_min / q4, _ZERO))
    else:
        sigma2 = _sigma2(blocks, 1.0)
        w = _imatrix_weights(x, _to_sub(qw, 16), sigma2, 16)
        sw = seqsum(w)
        L, scales, mins = make_qkx_quants(x, w, 3, -0.9, 0.05, 36, False)
        sw16 = np.ascontiguousarray(sw.reshape(nb, 16).T)
        dm, ls = make_qp_quants(np.ascontiguousarray(scales.reshape(nb, 16).T), sw16, 15)
        mm, lm = make_qp_quants(np.ascontiguousarray(mins.reshape(nb, 16).T), sw16, 15)
        ls, lm = ls.T, lm.T
        d_bits = f32_to_f16_bits(dm)
        m_bits = f32_to_f16_bits(mm)

    packed = ((ls | (lm << 4)) & 0xFF).astype(np.uint8)
    d = (f16_to_f32(d_bits)[:, None] * (packed & 0xF).astype(np.float32)).reshape(-1)
    dm_ = (f16_to_f32(m_bits)[:, None] * (packed >> 4).astype(np.float32)).reshape(-1)
    q = _from_sub(_requantize_affine(x, L, d, dm_, 3), nb).reshape(nb, 2, 4, 32)
    qs = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, 0:16] = packed
    out[:, 16:80] = qs.astype(np.uint8).reshape(nb, 64)
    out[:, 80:82] = d_bits.view(np.uint8).reshape(-1, 2)
    out[:, 82:84] = m_bits.view(np.uint8).reshape(-1, 2)
    return out


def _dequantize_q2_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    with np.errstate(all="ignore"):
        dd = f16_to_f32(block_field(blocks, 80, "V4").view("<u2")).reshape(-1, 2)  # [B, 2]
        sc = block_field(blocks, 0, "V16").view(np.uint8)
        dl = np.repeat(dd[:, 0], 16) * (sc & 0xF).astype(np.float32)
        ml = np.repeat(dd[:, 1], 16) * (sc >> 4).astype(np.float32)
    # qs byte 32*h + l holds element 128*h + 32*s + l in bits 2s..2s+1
    w = block_field(blocks, 16, "V64").view("<u8").reshape(-1, 4)
    parts = np.empty((4, *w.shape), dtype=np.uint64)
    for s in range(4):
        np.bitwise_and(w >> np.uint64(2 * s), _PAIRS, out=parts[s])
    q = _rows_v32(parts).view(np.uint8).reshape(-1, QK_K)
    return _affine(q, dl, ml, 16, out)


# --------------------------------------------------------------------------- Q8_K


def _dequantize_q8_k(blocks: np.ndarray) -> np.ndarray:
    d = blocks[:, 0:4].copy().view("<f4").reshape(-1, 1).astype(np.float32)
    q = blocks[:, 4:260].view(np.int8).astype(np.float32)
    q *= d
    return q


# --------------------------------------------------------------------------- Q3_K / Q6_K steps


def _requantize_symmetric(
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
    xg = _to_sub(xb, 16)
    scale, iscale_search = qx_search(xg, 32, None if qw is None else _to_sub(qw, 16))
    scales = scale.reshape(b, 16)
    # contiguous: a reduction over a transposed view runs ~8x slower
    max_abs, max_scale = signed_absmax(np.ascontiguousarray(scales.T))
    dead = max_abs < GROUP_MAX_EPS
    iscale = F32(-128) / np.where(dead, F32(1), max_scale)
    d16 = f32_to_f16_bits(F32(1) / iscale)
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)
    d = f16_to_f32(d16)[:, None] * sc.astype(F32)

    def search_levels(idx: np.ndarray) -> np.ndarray:
        return qx_levels(xg[:, idx], iscale_search[idx], 32).T

    L = _byte_lanes(_requantize_symmetric(xb, d, search_levels, -32, 31)).reshape(2, 4, 4, b)
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
def _dequantize_symmetric(
    blocks: np.ndarray,
    d_offset: int,
    scales: Callable[[np.ndarray], np.ndarray],
    levels: Callable[[np.ndarray], np.ndarray],
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Q3_K / Q6_K blocks -> float32 ``[nb, 256]``: ``(d * sc) * q`` as in C.

    ``d_offset``: byte offset of the f16 ``d``; ``scales(b)``: signed
    sub-block scales ``[n, 16]``; ``levels(b)``: signed levels ``[n, 256]``;
    ``out``: float32 ``[nb, 256]`` to write into (new if None).
    """
    dl = block_f16(blocks, d_offset)[:, None] * scales(blocks).astype(F32)  # all at once: small
    if out is None:
        out = np.empty((blocks.shape[0], QK_K), dtype=F32)
    for s in range(0, blocks.shape[0], _DEQ_CHUNK):
        b = blocks[s : s + _DEQ_CHUNK]
        _scale_levels(out[s : s + _DEQ_CHUNK], dl[s : s + _DEQ_CHUNK], levels(b))
    return out


def dequantize_q6_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Q6_K blocks ``[nb, 210]`` -> float32 ``[nb, 256]`` (dequantize_row_q6_K)."""
    q6_scales = lambda b: b[:, 192:208].view(np.int8)  # noqa: E731
    return _dequantize_symmetric(blocks, 208, q6_scales, _q6k_levels, out)


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
    # on the three little-endian 32-bit words: scales 4k..4k+3 are the bytes of word k
    w = np.ascontiguousarray(packed, dtype=np.uint8).view("<u4")  # [b, 3]
    w0, w1, w2 = w[:, 0], w[:, 1], w[:, 2]
    out = np.empty((packed.shape[0], 4), dtype="<u4")
    for k, low in enumerate((w0 & 0x0F0F0F0F, w1 & 0x0F0F0F0F, w0 >> 4, w1 >> 4)):
        low &= 0x0F0F0F0F
        np.bitwise_or(low, ((w2 >> (2 * k)) & 0x03030303) << 4, out=out[:, k])
    s = out.view(np.uint8).reshape(-1, 16)
    s -= np.uint8(32)  # wraps to the int8 value
    return s.view(np.int8)


_Levels = Callable[[np.ndarray], np.ndarray]


def _q3k_scales_ref(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray, _Levels]:
    """quantize_row_q3_K_ref's scale step -> (6-bit scales, f16 d bits, search levels)."""
    b = xb.shape[0]
    with np.errstate(all="ignore"):
        scale, lv = q3_search(_to_sub(xb, 16), 4)
    scales = scale.reshape(b, 16)
    _, max_scale = signed_absmax(np.ascontiguousarray(scales.T))
    has = max_scale != 0  # C: if (max_scale)
    iscale = F32(-32) / np.where(has, max_scale, F32(1))
    ls = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31) + np.int8(32)
    d16 = np.where(has, f32_to_f16_bits(F32(1) / iscale), np.uint16(0))
    ls = np.where(has[:, None], ls, np.int8(0)).astype(np.uint8)
    return ls, d16, lambda idx: q3_levels(lv[:, idx], 4).T


def _q3k_scales_impl(xb: np.ndarray, qw: np.ndarray) -> tuple[np.ndarray, np.ndarray, _Levels]:
    """quantize_row_q3_K_impl's scale step -> (6-bit scales, f16 d bits, search levels)."""
    b = xb.shape[0]
    xg = _to_sub(xb, 16)
    wg = _imatrix_weights(xg, _to_sub(qw, 16), _sigma2(xb, 2.0), 16)
    sw = reduce0(wg)
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
    L = _byte_lanes(_requantize_symmetric(xb, d, search_levels, -4, 3))  # [32 lanes, block]
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


def dequantize_q3_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Q3_K blocks ``[nb, 110]`` -> float32 ``[nb, 256]`` (dequantize_row_q3_K)."""
    return _dequantize_symmetric(
        blocks, 108, lambda b: _unpack_q3k_scales(b[:, 96:108]), _q3k_levels, out
    )


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
        step = chunk if imatrix is None else chunk_imatrix
        # Huge inputs overflow float32 inside the search exactly as in ggml; quiet.
        with np.errstate(all="ignore"):
            return quantize_blocks(rows, imatrix, QK_K, type_size, block_fn, step)

    quantize.__name__ = block_fn.__name__.lstrip("_")
    quantize.__doc__ = block_fn.__doc__
    return quantize


quantize_q2_k = _row_quantizer(_quantize_q2_k, 84, _CHUNK_BLOCKS, _CHUNK_BLOCKS)
quantize_q3_k = _row_quantizer(_q3k_blocks, 110, _CHUNK_BLOCKS, _CHUNK_BLOCKS // 2)
quantize_q4_k = _row_quantizer(_quantize_q4_k, 144, _CHUNK_BLOCKS, _CHUNK_BLOCKS)
quantize_q5_k = _row_quantizer(_quantize_q5_k, 176, _CHUNK_BLOCKS, _CHUNK_BLOCKS)
quantize_q6_k = _row_quantizer(_q6k_blocks, 210, _CHUNK_BLOCKS // 2, _CHUNK_BLOCKS // 2)

# these decoders accept ``out=``: the API hands them its output slice (no copy)
for _fn in (_dequantize_q2_k, dequantize_q3_k, _dequantize_q4_k, _dequantize_q5_k, dequantize_q6_k):
    _fn.fills_out = True  # type: ignore[attr-defined]

DEQUANTIZE: dict[str, Callable[..., np.ndarray]] = {
    "Q2_K": _dequantize_q2_k,
    "Q3_K": dequantize_q3_k,
    "Q4_K": _dequantize_q4_k,
    "Q5_K": _dequantize_q5_k,
    "Q6_K": dequantize_q6_k,
    "Q8_K": _dequantize_q8_k,
}

QUANTIZE: dict[str, Callable[[np.ndarray, np.ndarray | None], np.ndarray]] = {
    "Q2_K": quantize_q2_k,
    "Q3_K": quantize_q3_k,
    "Q4_K": quantize_q4_k,
    "Q5_K": quantize_q5_k,
    "Q6_K": quantize_q6_k,
}
