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

__all__ = [
    "DEQUANTIZE",
    "QUANTIZE",
    "get_scale_min_k4",
    "make_qkx_quants",
    "make_qp_quants",
    "pack_scale_min_k4",
]

QK_K = 256
_MAGIC = F32(12582912.0)  # 1.5 * 2**23: adding it rounds a float to an integer
_GROUP_MAX_EPS = F32(1e-15)
_ZERO = F32(0.0)

# Blocks quantized per numpy pass: large enough to amortise per-call overhead,
# small enough that the ~8 working arrays of the scale search stay in L2.
_CHUNK_BLOCKS = 2048
# Elements per slice of the scale search: its five [n, M] float32 arrays
# (x, w and three scratch) stay inside a 2 MiB L2 cache.
_SEARCH_ELEMS = 65536
# |v| below this: np.rint(v) equals ggml's nearest_int(v) (exact up to 2**22).
_RINT_SAFE = F32(4.0e6)
# Ranges above this keep iscale = c / range finite for every c used (|c| < 64).
_TINY_RANGE = F32(1e-36)


# --------------------------------------------------------------------------- helpers


def _nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int bit for bit, out-of-range garbage included (int32)."""
    t = np.add(v, _MAGIC, dtype=np.float32).view(np.int32)
    t &= 0x7FFFFF
    t -= 0x400000
    return t


def _empty(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """An uninitialised array whose data starts on a 64-byte boundary.

    numpy only guarantees 16-byte alignment; with AVX-512 a misaligned
    operand splits every vector across two cache lines, and elementwise
    passes of the scale search run up to twice as slow.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + 64, dtype=np.uint8)
    off = -buf.ctypes.data % 64
    return buf[off : off + nbytes].view(dtype).reshape(shape)


def _aligned(a: np.ndarray) -> np.ndarray:
    """A 64-byte-aligned C-contiguous float32 copy of ``a``."""
    out = _empty(a.shape)
    out[...] = a
    return out


def _axis0_is_sequential() -> bool:
    """Does np.add.reduce over axis 0 add the rows one after another?

    It does (numpy only sums pairwise along the contiguous axis), and C's
    loops need exactly that order; this checks it on data where pairwise
    summation would give a different float.
    """
    a = np.full((64, 16), F32(2.0**-24), dtype=np.float32)
    a[0] = 1  # 1 + 2**-24 rounds back to 1 each time; pairwise it would not
    return bool((np.add.reduce(a, axis=0) == 1).all())


_SEQUENTIAL_AXIS0 = _axis0_is_sequential()


def _reduce0(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in index order (C's order), starting from the first row."""
    if _SEQUENTIAL_AXIS0:
        return np.add.reduce(a, axis=0)
    s = a[0].copy()  # a numpy that reorders axis-0 reductions: add row by row
    for row in a[1:]:
        s += row
    return s


def _seqsum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in sequential order, starting from +0 as ``float s = 0``.

    numpy reduces a C-contiguous array over its first axis row by row (no
    pairwise summation), which is the C loop's order.  Adding +0 at the end
    turns an all-(-0) sum into +0, as C's ``0 + -0`` would.
    """
    s = _reduce0(a)
    s += _ZERO
    return s


def _to_sub(blocks: np.ndarray, sub: int) -> np.ndarray:
    """[B, 256] blocks -> [sub, B*256/sub]: in-sub-block index first."""
    return np.ascontiguousarray(blocks.reshape(-1, sub).T)


def _from_sub(a: np.ndarray, nblocks: int) -> np.ndarray:
    """Inverse of :func:`_to_sub`."""
    return np.ascontiguousarray(a.T).reshape(nblocks, QK_K)


# --------------------------------------------------------------------------- scale searches


def make_qkx_quants(
    x: np.ndarray,
    w: np.ndarray,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's make_qkx2_quants / make_qkx3_quants (identical when weights are given).

    ``x``, ``w``: float32 ``[n, M]``, one sub-block per column.  Fits
    ``x ~ scale * L - the_min`` with ``L`` in ``0..nmax`` by trying
    ``nstep + 1`` inverse scales and solving weighted least squares for each.
    Returns ``(L float32 [n, M], scale [M], the_min [M])``.
    """
    n, m = x.shape
    cols = max(256, _SEARCH_ELEMS // n)
    L = np.empty_like(x)
    scale = np.empty(m, dtype=np.float32)
    the_min = np.empty(m, dtype=np.float32)
    # Columns are independent: search cache-sized slices one after another.
    for c0 in range(0, m, cols):
        c1 = min(m, c0 + cols)
        # numpy copies a broadcast [M] operand through its iterator buffer
        # when the buffer is longer than a row; a buffer no longer than M
        # makes the per-column ops as fast as plain elementwise ones.
        old = np.setbufsize(max(16, min(8192, (c1 - c0) // 16 * 16)))
        try:
            L[:, c0:c1], scale[c0:c1], the_min[c0:c1] = _qkx_search(
                _aligned(x[:, c0:c1]), _aligned(w[:, c0:c1]), nmax, rmin, rdelta, nstep, use_mad
            )
        finally:
            np.setbufsize(old)
    return L, scale, the_min


def _qkx_search(x, w, nmax, rmin, rdelta, nstep, use_mad):
    """:func:`make_qkx_quants` on one cache-sized slice of columns."""
    fnmax = F32(nmax)
    xmin = np.min(x, axis=0)
    mx = np.max(x, axis=0)
    sum_w = _reduce0(w)  # C starts from weights[0]: no +0 fix
    sum_x = _reduce0(w * x)
    mn = np.where(xmin > 0, _ZERO, xmin)
    flat = mx == mn  # C returns early: all quants 0, scale 0
    # Flat columns are searched too (vectorised) but never win; a range of 1
    # keeps their arithmetic finite.
    top = np.where(flat, mn + F32(1.0), mx)
    cmax = max(abs(F32(rmin)), abs(F32(rmin) + F32(rdelta) * F32(nstep))) + fnmax
    t = _empty(x.shape)  # candidate quants of the current step
    u = _empty(x.shape)
    v = _empty(x.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rng = top - mn
        iscale = fnmax / rng
        scale = F32(1.0) / iscale
        fast = _rint_is_exact(rng, xmin, mn, cmax)
        lo = np.zeros(x.shape[1], dtype=np.float32)
        hi = np.full(x.shape[1], fnmax)
        _levels(x, mn, iscale, fnmax, t, fast, (lo, None))
        best = _weighted_error(t, scale, mn, x, w, use_mad, v)
        best[flat] = -np.inf  # C returned early for these: nothing may win
        # The winning quants are not copied at each step: the (iscale, min)
        # that produced them is kept and they are recomputed once at the end.
        win_iscale = iscale.copy()
        win_mn = mn.copy()

        for step in range(nstep + 1):
            c = F32(rmin) + F32(rdelta) * F32(step) + fnmax
            iscale = c / rng
            # iscale * (x - min) <= c * (1 + 2**-24)**2 when 0 < iscale
            _levels(x, mn, iscale, fnmax, t, fast, (lo, hi if c > fnmax + F32(0.49) else None))
            # C's sums start from +0; numpy's from the first term.  They can
            # differ only in the sign of an all-zero sum, which never reaches
            # the output (det > 0 needs non-zero sum_l and sum_l2, and a
            # zero scale or min rounds to level 0 whatever its sign).
            np.multiply(w, t, out=u)
            sum_l = _reduce0(u)
            np.multiply(u, x, out=v)
            sum_xl = _reduce0(v)
            u *= t
            sum_l2 = _reduce0(u)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            pos = this_min > 0
            if pos.any():
                this_min[pos] = _ZERO
                this_scale[pos] = sum_xl[pos] / sum_l2[pos]
            cur = _weighted_error(t, this_scale, this_min, x, w, use_mad, v)
            better = (det > 0) & (cur < best)
            if better.any():
                # in place: putmask costs half of np.where on these sizes
                np.putmask(best, better, cur)
                np.putmask(scale, better, this_scale)
                np.putmask(win_iscale, better, iscale)
                np.putmask(win_mn, better, mn)
                np.putmask(mn, better, this_min)
                rng = top - mn
                fast = _rint_is_exact(rng, xmin, mn, cmax)

        L = _levels(
            x, win_mn, win_iscale, fnmax, t, _rint_is_exact(top - win_mn, xmin, win_mn, cmax)
        )
    if flat.any():
        L[:, flat] = _ZERO
        scale[flat] = _ZERO
    return L, scale, -mn


def _rint_is_exact(rng, xmin, mn, cmax) -> bool:
    """True if every ``iscale * (x - min)`` of the coming steps is finite and < 2**22.

    There np.rint equals ggml's nearest_int.  ``iscale = c / range`` with
    ``|c| <= cmax``, and ``x - min`` lies in ``[xmin - min, range]``, so it is
    enough that ``min - xmin < range * (bound / cmax)`` -- which also fails
    for a range <= 0 (then min >= max >= xmin) or NaN -- and that the range
    is neither so small that ``cmax / range`` overflows nor infinite.  A positive range also
    lets _levels skip the upper clamp while c < nmax + 1/2.
    """
    r = rng * (_RINT_SAFE / cmax)
    return bool((mn - xmin < r).all() and rng.min() > _TINY_RANGE and r.max() < np.inf)


def _levels(x, mn, iscale, fnmax, out, fast: bool, bounds=None):
    """``clamp(nearest_int(iscale * (x - min)), 0, nmax)`` as float32, into ``out``.

    ``fast``: np.rint is exact here (see :func:`_rint_is_exact`).  ``bounds``:
    rows of 0 and of nmax (numpy's maximum/minimum are twice as fast against
    an array as against a scalar), the second None when ``iscale * (max -
    min)`` stays below nmax + 1/2 so that no upper clamp is needed.
    """
    if fast:
        np.subtract(x, mn, out=out)
        out *= iscale
        np.rint(out, out=out)
        if bounds is None:
            np.clip(out, _ZERO, fnmax, out=out)
        else:
            np.maximum(out, bounds[0], out=out)
            if bounds[1] is not None:
                np.minimum(out, bounds[1], out=out)
        return out
    # ggml's own rounding trick: NaN and out-of-range products give the same
    # (garbage) levels as in C.
    q = _nearest_int((x - mn) * iscale)
    np.clip(q, 0, int(fnmax), out=q)
    out[...] = q
    return out


def _weighted_error(
    q: np.ndarray,
    scale: np.ndarray,
    mn: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    use_mad: bool,
    u: np.ndarray,
) -> np.ndarray:
    """Sequential sum of ``w * |scale*q + mn - x|`` (or its square) per column."""
    np.multiply(q, scale, out=u)
    u += mn
    u -= x
    if use_mad:
        np.abs(u, out=u)
    else:
        u *= u
    u *= w
    return _reduce0(u)  # only compared: the sign of a zero is moot


def make_qp_quants(x: np.ndarray, qw: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's make_qp_quants: quantize positive values ``x ~ d * L``, ``L <= nmax``.

    ``x``, ``qw``: float32 ``[n, B]`` (one group per column).  Returns
    ``(d float32 [B], L int64 [n, B])`` where ``L`` holds the *stored* uint8
    values (C keeps them in ``uint8_t``, so a negative level wraps).
    """
    n = x.shape[0]
    fnmax = F32(nmax)
    xmax = np.max(x, axis=0)
    zero = ~(xmax >= _GROUP_MAX_EPS)  # "all zero" early-out (also NaN-safe)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = fnmax / xmax
        L = _nearest_int(x * iscale).astype(np.int64) & 0xFF
        scale = F32(1.0) / iscale
        diff = x - scale * L.astype(np.float32)
        best = _seqsum(qw * diff * diff)
        for k in (-4, -3, -2, -1, 1, 2, 3, 4):
            iscale_k = (F32(0.1) * F32(k) + fnmax) / xmax
            scale_k = F32(1.0) / iscale_k
            lk = np.minimum(_nearest_int(iscale_k * x), nmax).astype(np.float32)
            diff = x - scale_k * lk
            mse = _seqsum(qw * diff * diff)
            better = mse < best
            best = np.where(better, mse, best)
            iscale = np.where(better, iscale_k, iscale)

        l0 = np.minimum(_nearest_int(iscale * x), nmax)
        L = l0.astype(np.int64) & 0xFF
        lf = l0.astype(np.float32)
        wx = qw * x
        sumlx = _seqsum(wx * lf)
        suml2 = _seqsum(qw * lf * lf)
        # Coordinate descent; sequential over i, vectorised over groups.  C
        # stops a group after a pass without changes; such a pass leaves the
        # state as it was, so the next one would change nothing either: all
        # groups can run until a pass changes no group at all.
        live = ~zero
        for _ in range(5):
            changed = False
            for i in range(n):
                w = qw[i]
                li = L[i].astype(np.float32)
                slx = sumlx - wx[i] * li
                sl2 = suml2 - w * li * li
                ok = (slx > 0) & (sl2 > 0) & live
                new_l = np.minimum(_nearest_int(x[i] * sl2 / slx), nmax)
                ok &= new_l != L[i]
                nf = new_l.astype(np.float32)
                slx = slx + wx[i] * nf
                sl2 = sl2 + w * nf * nf
                ok &= slx * slx * suml2 > sumlx * sumlx * sl2
                if ok.any():
                    changed = True
                    L[i] = np.where(ok, new_l.astype(np.int64) & 0xFF, L[i])
                    sumlx = np.where(ok, slx, sumlx)
                    suml2 = np.where(ok, sl2, suml2)
            if not changed:
                break
        d = np.where(suml2 > 0, sumlx / suml2, _ZERO)
    d = np.where(zero, _ZERO, d).astype(np.float32)
    L[:, zero] = 0
    return d, L


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
    return F32(factor) * _seqsum(xb * xb) / F32(QK_K)


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
        av_x = np.sqrt(_seqsum(x * x) / F32(32))
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
        sw = _seqsum(w)
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
        sw = _seqsum(w)
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
