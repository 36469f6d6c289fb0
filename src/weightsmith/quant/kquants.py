"""K-quants with a min: Q2_K, Q4_K, Q5_K (quantize + dequantize) and Q8_K (dequantize).

Every type here packs 256 weights ("super-block") into one block.  Each block
is split into sub-blocks that have their own scale and min, quantized
relative to the two fp16 super-scales ``d`` and ``dmin``; a weight decodes as
``d * sc * q - dmin * m``.  All multi-byte fields are little-endian.

Byte layout of one block (offsets in bytes)::

    Q2_K (84 B, 16 sub-blocks of 16)
      0  scales[16]  u8   low nibble: 4-bit scale sc, high nibble: 4-bit min m
     16  qs[64]      u8   2-bit quants; byte 32*h + l holds elements
                          128*h + l + 32*s in bits 2s..2s+1 (s = 0..3)
     80  d           f16
     82  dmin        f16

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

    Q8_K (292 B; an intermediate type ggml uses for dot products)
      0  d           f32
      4  qs[256]     i8   weight = d * q
    260  bsums[16]   i16  sums of 16 consecutive qs (ignored when decoding)

The 12 scale bytes of Q4_K/Q5_K hold scale ``sc[j]`` and min ``m[j]`` of
sub-block ``j`` (6 bits each): for ``j < 4`` the low 6 bits of byte ``j`` and
byte ``j + 4``; for ``j >= 4`` the low / high nibble of byte ``j + 4`` plus
the top two bits of byte ``j - 4`` (scale) and byte ``j`` (min).

Quantization is bit-exact with ggml's C reference (``quantize_row_*_ref``
without an importance matrix, ``quantize_row_*_impl`` with one).  The numpy
code vectorises *across* sub-blocks: arrays are laid out ``[n_in_sub, M]``
so that reductions over axis 0 run in C's sequential order, every
intermediate stays float32, and the C code's tie-breaking comparisons and
early-outs are reproduced.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import F32, f16_to_f32, f32_to_f16_bits
from ._search import make_qkx_quants, make_qp_quants, seqsum
from ._search import nearest_int as _nearest_int

__all__ = [
    "DEQUANTIZE",
    "QUANTIZE",
    "get_scale_min_k4",
    "make_qkx_quants",
    "make_qp_quants",
    "pack_scale_min_k4",
]

QK_K = 256
_ZERO = F32(0.0)

# Blocks quantized per numpy pass: large enough to amortise per-call overhead,
# small enough that the ~8 working arrays of the scale search stay in L2.
_CHUNK_BLOCKS = 2048


# --------------------------------------------------------------------------- helpers


def _to_sub(blocks: np.ndarray, sub: int) -> np.ndarray:
    """[B, 256] blocks -> [sub, B*256/sub]: in-sub-block index first."""
    return np.ascontiguousarray(blocks.reshape(-1, sub).T)


def _from_sub(a: np.ndarray, nblocks: int) -> np.ndarray:
    """Inverse of :func:`_to_sub`."""
    return np.ascontiguousarray(a.T).reshape(nblocks, QK_K)


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


def _requantize(
    x: np.ndarray, L: np.ndarray, d: np.ndarray, dm: np.ndarray, nmax: int
) -> np.ndarray:
    """Re-derive quants from the stored (rounded) scales: ``(x + dm) / d``.

    ``x``, ``L``: [n, M]; ``d``, ``dm``: [M].  Sub-blocks whose decoded scale
    is 0 keep the quants of the search, as in C's ``if (!d) continue``.
    """
    v = np.add(x, dm)
    v /= d
    q = _nearest_int(v)
    np.clip(q, 0, nmax, out=q)
    dead = d == 0
    if dead.any():
        q[:, dead] = L[:, dead]
    return q.astype(np.uint8)


def _sigma2(blocks: np.ndarray, factor: float) -> np.ndarray:
    """``factor * sum(x*x) / 256`` per block, summed in C's order."""
    xb = np.ascontiguousarray(blocks.T)
    return F32(factor) * seqsum(xb * xb) / F32(QK_K)


def _imatrix_weights(
    x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray, per_block: int
) -> np.ndarray:
    """``qw * sqrt(sigma2 + x*x)`` for x [n, M] and sigma2 per block."""
    s2 = np.repeat(sigma2, per_block)
    return qw * np.sqrt(s2 + x * x)


def _chunked(
    fn: Callable[[np.ndarray, np.ndarray | None], np.ndarray], type_size: int
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """Run a block quantizer over rows in chunks of whole blocks."""

    def quantize(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(all="ignore"):  # C overflows to inf/NaN silently, and so do we
            return _quantize_rows(rows, imatrix)

    def _quantize_rows(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nrows, n_per_row = rows.shape
        nbr = n_per_row // QK_K
        blocks = rows.reshape(-1, QK_K)
        total = blocks.shape[0]
        out = np.empty((total, type_size), dtype=np.uint8)
        qwb = None
        if imatrix is not None:
            qwb = np.ascontiguousarray(imatrix, dtype=np.float32).reshape(nbr, QK_K)
        for b0 in range(0, total, _CHUNK_BLOCKS):
            b1 = min(total, b0 + _CHUNK_BLOCKS)
            qw = None
            if qwb is not None:
                qw = qwb[np.arange(b0, b1) % nbr]
            out[b0:b1] = fn(blocks[b0:b1], qw)
        return out.reshape(nrows, nbr * type_size)

    quantize.__name__ = fn.__name__.lstrip("_")
    quantize.__doc__ = fn.__doc__
    return quantize


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
        ls = np.minimum(_nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
        lm = np.minimum(_nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
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
    q = _requantize(x, L, d, dm, nmax)
    return _from_sub(q, nb), packed, d_bits, m_bits


def _nibbles(q: np.ndarray) -> np.ndarray:
    """[B, 256] levels -> [B, 128] bytes: chunk c of 64 -> low/high nibbles."""
    q = q.reshape(-1, 4, 2, 32)
    return ((q[:, :, 0] & 0xF) | ((q[:, :, 1] & 0xF) << 4)).astype(np.uint8).reshape(-1, 128)


def _quantize_q4_k(blocks: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Q4_K blocks: 8 x 32 weights, 6-bit scales and mins, 4-bit quants."""
    q, packed, d_bits, m_bits = _scales_k4(blocks, qw, 15)
    out = np.empty((blocks.shape[0], 144), dtype=np.uint8)
    out[:, 0:2] = d_bits.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = m_bits.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = packed
    out[:, 16:144] = _nibbles(q)
    return out


def _quantize_q5_k(blocks: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Q5_K blocks: 8 x 32 weights, 6-bit scales and mins, 5-bit quants."""
    q, packed, d_bits, m_bits = _scales_k4(blocks, qw, 31)
    out = np.empty((blocks.shape[0], 176), dtype=np.uint8)
    out[:, 0:2] = d_bits.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = m_bits.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = packed
    hi = (q >> 4).reshape(-1, 8, 32)  # fifth bit of sub-block s sits in bit s
    qh = np.zeros((blocks.shape[0], 32), dtype=np.int32)
    for s in range(8):
        qh |= hi[:, s] << s
    out[:, 16:48] = qh.astype(np.uint8)
    out[:, 48:176] = _nibbles(q)
    return out


def _dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    dl, ml = _dl_ml_k4(blocks)
    return _affine(_nibble_rows(blocks[:, 16:144]), dl, ml, 32)


def _dequantize_q5_k(blocks: np.ndarray) -> np.ndarray:
    dl, ml = _dl_ml_k4(blocks)
    q = _nibble_rows(blocks[:, 48:176])
    # fifth bits: bit s of qh byte e belongs to element e of sub-block s
    qh = np.ascontiguousarray(blocks[:, 16:48]).view("<u8")  # [B, 4]
    hi = np.empty((8, *qh.shape), dtype=np.uint64)
    for s in range(8):
        np.bitwise_and(qh >> np.uint64(s), _ONES, out=hi[s])
    hi <<= np.uint64(4)
    q.view("<u8").reshape(-1, 8, 4)[...] |= _rows_v32(hi)
    return _affine(q, dl, ml, 32)


_LOW4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_LOW2 = np.uint64(0x0303030303030303)
_ONES = np.uint64(0x0101010101010101)
_DEQ_BLOCKS = 512  # blocks per float32 pass of the dequantizers (L2-sized)


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
    np.bitwise_and(w, _LOW4, out=parts[0])
    np.right_shift(w, np.uint64(4), out=parts[1])
    parts[1] &= _LOW4
    # [2, n*4] runs -> [n*4, 2]: low run then high run of each 32-byte group
    q = _rows_v32(parts.reshape(2, n * 4, 4))
    return q.view(np.uint8).reshape(n, QK_K)


def _affine(q: np.ndarray, dl: np.ndarray, ml: np.ndarray, per: int) -> np.ndarray:
    """``dl * q - ml`` with dl, ml constant over each sub-block -> float32 [B, 256].

    ``q`` [B, 256] uint8 levels; ``dl``, ``ml`` [B * 256 / per], ``per`` the
    sub-block length.  The per-row factors are expanded with np.repeat:
    broadcasting them over rows of 16 or 32 floats costs numpy one short
    inner loop per row, about twice the time of repeat + one long loop.
    Chunks keep the float32 work inside L2.
    """
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
            ls = _nearest_int((q4 / max_scale)[:, None] * scales) & 0xFF
            lm = _nearest_int((q4 / max_min)[:, None] * mins) & 0xFF
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
    q = _from_sub(_requantize(x, L, d, dm_, 3), nb).reshape(nb, 2, 4, 32)
    qs = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, 0:16] = packed
    out[:, 16:80] = qs.astype(np.uint8).reshape(nb, 64)
    out[:, 80:82] = d_bits.view(np.uint8).reshape(-1, 2)
    out[:, 82:84] = m_bits.view(np.uint8).reshape(-1, 2)
    return out


def _dequantize_q2_k(blocks: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        dd = f16_to_f32(np.ascontiguousarray(blocks[:, 80:84]).view("<u2"))  # [B, 2]
        sc = np.ascontiguousarray(blocks[:, 0:16]).reshape(-1)
        dl = np.repeat(dd[:, 0], 16) * (sc & 0xF).astype(np.float32)
        ml = np.repeat(dd[:, 1], 16) * (sc >> 4).astype(np.float32)
    # qs byte 32*h + l holds element 128*h + 32*s + l in bits 2s..2s+1
    w = np.ascontiguousarray(blocks[:, 16:80]).view("<u8").reshape(-1, 4)
    parts = np.empty((4, *w.shape), dtype=np.uint64)
    for s in range(4):
        np.bitwise_and(w >> np.uint64(2 * s), _LOW2, out=parts[s])
    q = _rows_v32(parts).view(np.uint8).reshape(-1, QK_K)
    return _affine(q, dl, ml, 16)


# --------------------------------------------------------------------------- Q8_K


def _dequantize_q8_k(blocks: np.ndarray) -> np.ndarray:
    d = blocks[:, 0:4].copy().view("<f4").reshape(-1, 1).astype(np.float32)
    q = blocks[:, 4:260].view(np.int8).astype(np.float32)
    q *= d
    return q


DEQUANTIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Q2_K": _dequantize_q2_k,
    "Q4_K": _dequantize_q4_k,
    "Q5_K": _dequantize_q5_k,
    "Q8_K": _dequantize_q8_k,
}

QUANTIZE: dict[str, Callable[[np.ndarray, np.ndarray | None], np.ndarray]] = {
    "Q2_K": _chunked(_quantize_q2_k, 84),
    "Q4_K": _chunked(_quantize_q4_k, 144),
    "Q5_K": _chunked(_quantize_q5_k, 176),
}
