"""The scale searches of ggml-quants.c, written once for every codec family.

Each search fits a block (or sub-block) of float32 values with integer
levels times a scale (and, for make_qkx_quants, minus a min), bit for bit as
ggml's C code: float32 intermediates, no fused multiply-add, sums in C's
sequential order, C's tie-breaking comparisons and early-outs.

All searches take the *transposed* layout ``x[n, M]``: one group per column,
the in-group index first.  Every C loop over the in-group index then becomes
one vector operation across all groups, and a reduction over axis 0 adds the
terms in C's order (:func:`reduce0`).

* :func:`make_qkx_quants` -- make_qkx3_quants (Q4_1 and Q5_1 with an
  importance matrix);
* :func:`make_qp_quants` -- positive values (IQ super-block scales);
* :func:`make_qx_quants` -- symmetric levels, rmse_type 1 (Q4_0 and Q5_0 with
  an importance matrix).

The K-quants run their searches in C (csrc/kquants.c).
"""

from __future__ import annotations

import numpy as np

from ._common import F32, GROUP_MAX_EPS

__all__ = [
    "make_qkx_quants",
    "make_qp_quants",
    "make_qx_quants",
    "nearest_int",
    "reduce0",
    "seqsum",
    "signed_absmax",
]

MAGIC = F32(12582912.0)  # 1.5 * 2**23: adding it rounds a float to an integer
_ZERO = F32(0.0)
# Elements per slice of make_qkx_quants: its five [n, M] float32 arrays
# (x, w and three scratch) stay inside a 2 MiB L2 cache.
_SEARCH_ELEMS = 65536
# |v| below this: np.rint(v) equals ggml's nearest_int(v) (exact up to 2**22).
_RINT_SAFE = F32(4.0e6)
# Ranges above this keep iscale = c / range finite for every c used (|c| < 64).
_TINY_RANGE = F32(1e-36)
# make_qx_quants trial slice: its ~8 arrays of 128 KiB stay in L2 (256 KiB
# arrays measured ~8% slower).
_QX_SLICE_ELEMS = 1 << 15
# Fewer columns than this: reduce0 adds row by row (see there).
_MIN_REDUCE_COLS = 4


# --------------------------------------------------------------------------- numerics


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int`` bit trick, bit for bit (int32).

    Identical to round-half-even inside +-2**22; outside that range (and for
    NaN/inf, which the searches can produce) it yields the same wrapped value
    as the C code.
    """
    t = np.add(v, MAGIC, dtype=np.float32).view(np.int32)
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


def reduce0(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Sum over axis 0 of ``a [n, M]`` in index order (C's order), starting from the first row.

    With a single column (one block in a chunk) axis 0 is the contiguous
    axis, which numpy sums pairwise; such narrow arrays, and a numpy that
    reorders axis-0 reductions, are added row by row.  ``out``: an ``[M]``
    float32 array to sum into.
    """
    a = np.ascontiguousarray(a)
    if _SEQUENTIAL_AXIS0 and a.shape[1] >= _MIN_REDUCE_COLS:
        return np.add.reduce(a, axis=0, out=out)
    if out is None:
        out = np.empty(a.shape[1:], dtype=a.dtype)
    out[...] = a[0]
    for row in a[1:]:
        out += row
    return out


def seqsum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in sequential order, starting from +0 as ``float s = 0``.

    numpy reduces a C-contiguous array over its first axis row by row (no
    pairwise summation), which is the C loop's order.  Adding +0 at the end
    turns an all-(-0) sum into +0, as C's ``0 + -0`` would.
    """
    s = reduce0(a)
    s += _ZERO
    return s


# --------------------------------------------------------------------------- qkx, qp


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
    m = x.shape[1]
    xmin = _first_min(x)
    mx = np.max(x, axis=0)
    sum_w = reduce0(w)  # C starts from weights[0]: no +0 fix
    sum_x = reduce0(w * x)
    mn = np.where(xmin > 0, _ZERO, xmin)
    flat = mx == mn  # C returns early: all quants 0, scale 0
    # Flat columns are searched too (vectorised) but never win; a range of 1
    # keeps their arithmetic finite.
    top = np.where(flat, mn + F32(1.0), mx)
    cmax = max(abs(F32(rmin)), abs(F32(rmin) + F32(rdelta) * F32(nstep))) + fnmax
    t = _empty(x.shape)  # candidate quants of the current step
    u = _empty(x.shape)
    v = _empty(x.shape)
    steps = nstep + 1 if nstep >= 1 else 0  # C: nstep < 1 returns early
    # Row 0: the first guess, row 1 + s: step s.  The winner of each column
    # is picked from these at the end instead of being copied at every step
    # (np.putmask on [M] vectors cost as much as a plane operation).
    hist_iscale, hist_mn, hist_scale = _empty((3, steps + 1, m))
    det, this_min, tmp, sum_l, sum_xl, sum_l2 = _empty((6, m))
    better, pos = np.empty((2, m), dtype=bool)
    tag = np.empty(m, dtype=np.uint8)
    win = np.zeros(m, dtype=np.uint8)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rng = top - mn
        iscale = hist_iscale[0]
        np.divide(fnmax, rng, out=iscale)
        np.divide(F32(1.0), iscale, out=hist_scale[0])
        hist_mn[0] = mn
        fast = _rint_is_exact(rng, xmin, mn, cmax)
        lo = np.zeros(m, dtype=np.float32)
        hi = np.full(m, fnmax)
        _levels(x, mn, iscale, fnmax, t, fast, (lo, None))
        best = _weighted_error(t, hist_scale[0], mn, x, w, use_mad, v)
        best[flat] = -np.inf  # C returned early for these: nothing may win
        cs = [F32(rmin) + F32(rdelta) * F32(step) + fnmax for step in range(steps)]

        for step, c in enumerate(cs, 1):
            iscale = hist_iscale[step]
            np.divide(c, rng, out=iscale)
            # iscale * (x - min) <= c * (1 + 2**-24)**2 when 0 < iscale
            _levels(x, mn, iscale, fnmax, t, fast, (lo, hi if c > fnmax + F32(0.49) else None))
            # C's sums start from +0; numpy's from the first term.  They can
            # differ only in the sign of an all-zero sum, which never reaches
            # the output (det > 0 needs non-zero sum_l and sum_l2, and a
            # zero scale or min rounds to level 0 whatever its sign).
            np.multiply(w, t, out=u)
            reduce0(u, out=sum_l)
            np.multiply(u, x, out=v)
            reduce0(v, out=sum_xl)
            u *= t
            reduce0(u, out=sum_l2)
            # C: D = sum_w * sum_l2 - sum_l * sum_l
            np.multiply(sum_w, sum_l2, out=det)
            det -= np.multiply(sum_l, sum_l, out=tmp)
            # C: this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_scale = hist_scale[step]
            np.multiply(sum_w, sum_xl, out=this_scale)
            this_scale -= np.multiply(sum_x, sum_l, out=tmp)
            this_scale /= det
            # C: this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            np.multiply(sum_l2, sum_x, out=this_min)
            this_min -= np.multiply(sum_l, sum_xl, out=tmp)
            this_min /= det
            # C: if (this_min > 0) { this_min = 0; this_scale = sum_xl / sum_l2; }
            np.greater(this_min, 0, out=pos)
            if pos.any():  # copyto(where=) on a sparse mask beats boolean indexing
                np.copyto(this_scale, np.divide(sum_xl, sum_l2, out=tmp), where=pos)
                np.copyto(this_min, _ZERO, where=pos)
            cur = _weighted_error(t, this_scale, this_min, x, w, use_mad, v)
            np.greater(det, 0, out=better)
            better &= cur < best
            if better.any():
                # in place: putmask costs half of np.where on these sizes
                np.putmask(best, better, cur)
                hist_mn[step] = mn
                np.multiply(better, np.uint8(step), out=tag)
                np.maximum(win, tag, out=win)  # steps run in order: the last better one wins
                np.putmask(mn, better, this_min)
                np.subtract(top, mn, out=rng)
                # Only the changed columns can turn the fast path off.
                cols = np.flatnonzero(better) if fast else slice(None)
                fast = _rint_is_exact(rng[cols], xmin[cols], mn[cols], cmax)

        pick = win.astype(np.intp)
        pick *= m
        pick += np.arange(m)
        scale = hist_scale.reshape(-1)[pick]
        win_iscale = hist_iscale.reshape(-1)[pick]
        win_mn = hist_mn.reshape(-1)[pick]
        L = _levels(
            x, win_mn, win_iscale, fnmax, t, _rint_is_exact(top - win_mn, xmin, win_mn, cmax)
        )
    if flat.any():
        L[:, flat] = _ZERO
        scale[flat] = _ZERO
    return L, scale, -mn


def _first_min(x: np.ndarray) -> np.ndarray:
    """C's ``min = x[0]; if (x[i] < min) min = x[i]`` per column.

    Equal to np.min except for the sign of a zero minimum, which C takes from
    the first zero of the column (Q4_1/Q5_1 store the min as it is).
    """
    m = np.min(x, axis=0)
    zero = np.flatnonzero(m == 0)
    if zero.size:
        cols = x[:, zero]
        m[zero] = cols[np.argmax(cols == 0, axis=0), np.arange(zero.size)]
    return m


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
    q = nearest_int((x - mn) * iscale)
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
    return reduce0(u)  # only compared: the sign of a zero is moot


def make_qp_quants(x: np.ndarray, qw: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's make_qp_quants: quantize positive values ``x ~ d * L``, ``L <= nmax``.

    ``x``, ``qw``: float32 ``[n, B]`` (one group per column).  Returns
    ``(d float32 [B], L int64 [n, B])`` where ``L`` holds the *stored* uint8
    values (C keeps them in ``uint8_t``, so a negative level wraps).
    """
    fnmax = F32(nmax)
    xmax = np.max(x, axis=0)
    zero = ~(xmax >= GROUP_MAX_EPS)  # "all zero" early-out (also NaN-safe)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = fnmax / xmax
        L = nearest_int(x * iscale).astype(np.int64) & 0xFF
        scale = F32(1.0) / iscale
        diff = x - scale * L.astype(np.float32)
        best = seqsum(qw * diff * diff)
        for k in (-4, -3, -2, -1, 1, 2, 3, 4):
            iscale_k = (F32(0.1) * F32(k) + fnmax) / xmax
            scale_k = F32(1.0) / iscale_k
            lk = np.minimum(nearest_int(iscale_k * x), nmax).astype(np.float32)
            diff = x - scale_k * lk
            mse = seqsum(qw * diff * diff)
            better = mse < best
            best = np.where(better, mse, best)
            iscale = np.where(better, iscale_k, iscale)

        l0 = np.minimum(nearest_int(iscale * x), nmax)
        L = l0.astype(np.int64) & 0xFF
        lf = l0.astype(np.float32)
        wx = qw * x
        sumlx = seqsum(wx * lf)
        suml2 = seqsum(qw * lf * lf)
        # Coordinate descent; sequential over i, vectorised over groups.  C
        # stops a group after a pass without changes (that state is final),
        # so each pass only revisits the groups the previous one changed.
        idx = np.flatnonzero(~zero)
        for _ in range(5):
            if idx.size == 0:
                break
            la, sx, s2 = L[:, idx], sumlx[idx], suml2[idx]
            changed = _qp_pass(x[:, idx], qw[:, idx], wx[:, idx], la, sx, s2, nmax)
            L[:, idx], sumlx[idx], suml2[idx] = la, sx, s2
            idx = idx[changed]
        d = np.where(suml2 > 0, sumlx / suml2, _ZERO)
    d = np.where(zero, _ZERO, d).astype(np.float32)
    L[:, zero] = 0
    return d, L


def _qp_pass(x, qw, wx, L, sumlx, suml2, nmax) -> np.ndarray:
    """One pass of make_qp_quants' descent over the groups given; updates
    ``L`` (stored uint8 values as int64), ``sumlx``, ``suml2`` in place and
    returns which groups changed."""
    changed = np.zeros(x.shape[1], dtype=bool)
    for i in range(x.shape[0]):
        w = qw[i]
        li = L[i].astype(np.float32)
        slx = sumlx - wx[i] * li
        sl2 = suml2 - w * li * li
        ok = (slx > 0) & (sl2 > 0)
        new_l = np.minimum(nearest_int(x[i] * sl2 / slx), nmax)
        ok &= new_l != L[i]
        nf = new_l.astype(np.float32)
        slx = slx + wx[i] * nf
        sl2 = sl2 + w * nf * nf
        ok &= slx * slx * suml2 > sumlx * sumlx * sl2
        if ok.any():
            changed |= ok
            L[i] = np.where(ok, new_l.astype(np.int64) & 0xFF, L[i])
            np.copyto(sumlx, slx, where=ok)
            np.copyto(suml2, sl2, where=ok)
    return changed


# --------------------------------------------------------------------------- qx, q3


def signed_absmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``x [n, N]``: (largest |x|, the x that has it).

    Same result as C's ``if (ax > amax) { amax = ax; max = x; }`` walk: the
    first of equal magnitudes wins, NaN never wins, and an all-zero column
    keeps the starting ``max = 0``.
    """
    hi = x.max(axis=0)
    lo = x.min(axis=0)
    if np.isnan(hi).any() or np.isnan(lo).any():
        return _signed_absmax_walk(x)
    amax = np.maximum(hi, -lo)
    xmax = np.where(hi >= -lo, hi, lo)
    xmax[amax == 0] = 0  # +0 even if the column holds -0
    tie = np.flatnonzero((hi == -lo) & (amax > 0))
    if tie.size:  # both +m and -m present: the first one wins
        first = np.abs(x[:, tie]).argmax(axis=0)
        xmax[tie] = x[first, tie]
    return amax, xmax


def _signed_absmax_walk(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`signed_absmax` as C's literal loop (used when NaN is present)."""
    amax = np.zeros(x.shape[1], dtype=F32)
    xmax = np.zeros(x.shape[1], dtype=F32)
    for row in x:
        ax = np.abs(row)
        better = ax > amax
        amax = np.where(better, ax, amax)
        xmax = np.where(better, row, xmax)
    return amax, xmax


def _quant_clip(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """MAX(lo, MIN(hi, nearest_int(v))) as float32 (exact small integers)."""
    return np.clip(nearest_int(v), lo, hi).astype(F32)


def _qx_numerator(nmax: int, k: int) -> np.float32:
    """C's ``-(nmax + 0.1f*is)``: the trial ``iscale`` times ``max``."""
    return -(F32(nmax) + F32(0.1) * F32(k))


_QX_TRIALS = (0, *range(-9, 0), *range(1, 10))  # C: the first guess, then is = -9..9


def make_qx_quants(
    x: np.ndarray, nmax: int, w: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_qx_quants(n, nmax, x, L, rmse_type=1, qw)`` over many groups.

    ``x`` is ``[n, groups]`` float32 (in-group index first), ``w`` the weights
    in the same layout (``None``: ggml's ``x*x`` for rmse_type 1).  Returns the
    scale per group ``[groups]`` and the stored levels ``L = l + nmax``
    (``[n, groups]`` uint8; all 0 for an all-zero group, as in C).
    """
    x = np.ascontiguousarray(x, dtype=F32)
    with np.errstate(all="ignore"):
        scale, iscale = qx_search(x, nmax, w)
        return scale, qx_levels(x, iscale, nmax)


def qx_levels(x: np.ndarray, iscale: np.ndarray, nmax: int) -> np.ndarray:
    """The search's stored levels ``L`` for the winning ``iscale`` (NaN marks dead).

    A live group can have ``iscale == 0`` (an infinite max, as the Q3_K
    imatrix path produces from overflowing scales): C then rounds
    ``0 * inf = NaN`` to level 0 and stores ``L = nmax``, so 0 cannot be the
    marker.
    """
    bits = nearest_int(np.multiply(iscale, x))
    np.clip(bits, -nmax, nmax - 1, out=bits)
    bits += nmax
    bits[:, np.isnan(iscale)] = 0  # all-zero groups: C sets L = 0
    return bits.astype(np.uint8)


def qx_search(x: np.ndarray, nmax: int, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants' search: (scale, winning iscale) per group of ``x [n, groups]``.

    Dead groups (``amax < GROUP_MAX_EPS``) get scale 0 and iscale NaN.  The
    sums of every trial are computed slice by slice (so the ``[n, slice]``
    working set stays in L2) and the sequential accept/reject walk over the
    trials then runs once on whole ``[groups]`` vectors.
    """
    n, groups = x.shape
    amax, xmax = signed_absmax(x)
    live = amax >= GROUP_MAX_EPS
    xmax[~live] = 1  # dead groups are reset at the end
    nums = [_qx_numerator(nmax, k) for k in _QX_TRIALS]
    sums = _empty((2, len(nums), groups))  # [sumlx | suml2, trial, group]
    step = min(groups, max(1, _QX_SLICE_ELEMS // max(1, n)))
    # One workspace for all slices: fresh large temporaries would page-fault.
    work = _QxWork(n, step, nmax)
    # A numpy buffer no longer than the slice width lets the per-group
    # [slice] operands broadcast over [n, slice] at plain elementwise speed.
    old = np.setbufsize(max(16, min(8192, step // 16 * 16)))
    try:
        for s in range(0, groups, step):
            e = min(s + step, groups)
            _qx_trials(
                x[:, s:e],
                w if w is None else w[:, s:e],
                xmax[s:e],
                nums,
                nmax,
                sums[:, :, s:e],
                work,
            )
    finally:
        np.setbufsize(old)
    sumlx, suml2 = sums
    scale0 = np.where(suml2[0] != 0, sumlx[0] / suml2[0], F32(0))
    best = scale0 * sumlx[0]
    best_bits = best.view(np.int32)
    best_t = np.zeros(groups, dtype=np.uint8)
    square, tmp, cand = _empty((3, groups))
    better, cond = np.empty((2, groups), dtype=bool)
    mask, flip = _empty((2, groups), np.int32)
    tag = np.empty(groups, dtype=np.uint8)
    for t in range(1, len(nums)):
        # C: if (suml2 > 0 && sumlx*sumlx > best*suml2) { scale = sumlx/suml2; best = scale*sumlx; }
        lx, l2 = sumlx[t], suml2[t]
        np.multiply(lx, lx, out=square)
        np.multiply(best, l2, out=tmp)
        np.greater(square, tmp, out=better)
        better &= np.greater(l2, 0, out=cond)
        np.divide(lx, l2, out=cand)
        cand *= lx
        # best = better ? cand : best, as a bit select: copyto(where=) and
        # putmask branch on every element and run ~7x slower here.
        np.copyto(mask, better)
        np.negative(mask, out=mask)
        np.bitwise_xor(cand.view(np.int32), best_bits, out=flip)
        np.bitwise_and(flip, mask, out=flip)
        np.bitwise_xor(best_bits, flip, out=best_bits)
        np.multiply(better, np.uint8(t), out=tag)
        np.maximum(best_t, tag, out=best_t)  # trials run in order: the last accepted wins
    pick = best_t.astype(np.intp)
    pick *= groups
    pick += np.arange(groups)
    scale = np.where(best_t == 0, scale0, sumlx.reshape(-1)[pick] / suml2.reshape(-1)[pick])
    iscale = np.asarray(nums, dtype=F32)[best_t] / xmax
    scale[~live] = 0
    iscale[~live] = np.nan
    return scale, iscale


class _QxWork:
    """Reusable buffers for :func:`_qx_trials` on slices of up to ``m`` groups.

    Each buffer is flat and 64-byte aligned: numpy's AVX-512 loops run about
    2.5x slower into a misaligned output (np.empty only aligns to 16 bytes),
    and a narrower last slice gets contiguous views from the front.
    """

    def __init__(self, n: int, m: int, nmax: int) -> None:
        self.n, self.nmax = n, nmax
        self.wx2 = _empty((2 * n * m,))  # [w*x | w, i, group]
        self.x = _empty((n * m,))
        self.t = _empty((n * m,))
        self.prod = _empty((2 * n * m,))
        self.iscale = _empty((m,))
        # numpy's minimum/maximum are twice as fast against a row (broadcast
        # with qx_search's buffer size) as against a scalar
        self.lo = np.full(m, F32(-nmax))
        self.hi = np.full(m, F32(nmax - 1))

    def view(self, m: int) -> tuple[np.ndarray, ...]:
        n = self.n
        return (
            self.wx2[: 2 * n * m].reshape(2, n, m),
            self.x[: n * m].reshape(n, m),
            self.t[: n * m].reshape(n, m),
            self.prod[: 2 * n * m].reshape(2, n, m),
            self.iscale[:m],
            self.lo[:m],
            self.hi[:m],
        )


def _qx_trials(
    xs: np.ndarray,
    ws: np.ndarray | None,
    xmax: np.ndarray,
    nums: list[np.float32],
    nmax: int,
    out: np.ndarray,
    work: _QxWork,
) -> None:
    """Fill ``out[0, t]`` / ``out[1, t]`` with sumlx / suml2 of every trial.

    For finite ``x``, ``|iscale*x| <= |nmax + 0.1k|`` (plus rounding), so
    ``rint`` equals nearest_int and the clip is only needed on the side the
    trial can reach: none for ``k <= -6``, the top for ``k <= 4``.
    """
    wx2, x, t, prod, iscale, lo, hi = work.view(xs.shape[1])
    np.copyto(x, xs)
    exact = not np.isfinite(x).all()  # inf/NaN: take nearest_int's literal path
    # C evaluates w*x[i]*l as (w*x[i])*l and w*l*l as (w*l)*l.
    if ws is None:
        np.multiply(x, x, out=wx2[1])
    else:
        np.copyto(wx2[1], ws)
    np.multiply(wx2[1], x, out=wx2[0])
    for i, (k, num) in enumerate(zip(_QX_TRIALS, nums, strict=True)):
        np.divide(num, xmax, out=iscale)
        np.multiply(iscale, x, out=t)
        if exact:
            t[...] = _quant_clip(t, -nmax, nmax - 1)
        else:
            np.rint(t, out=t)
            if k >= -5:
                np.minimum(t, hi, out=t)
            if k >= 5:
                np.maximum(t, lo, out=t)
        np.multiply(wx2, t, out=prod)
        np.multiply(prod[1], t, out=prod[1])
        if prod.shape[2] >= _MIN_REDUCE_COLS:
            np.add.reduce(prod, axis=1, out=out[:, i])
        else:  # one group: axis 1 is contiguous and numpy would sum it pairwise
            acc = out[:, i]
            acc[...] = prod[:, 0]
            for j in range(1, prod.shape[1]):
                acc += prod[:, j]
