"""Numeric helpers shared by every codec family.

ggml computes in float32 scalar arithmetic without FMA; these helpers keep
every intermediate float32 so that vectorised numpy matches it bit for bit.
Codec families append shared pieces here rather than writing them twice.

Conventions used by the block helpers below:

* a batch of blocks is a float32 array ``x[B, n]`` (B blocks of n values);
* sums that ggml runs sequentially are done with :func:`seq_sum`
  (``np.add.accumulate`` is sequential by definition; ``np.sum`` is pairwise
  and differs in the last bit);
* "first maximum" semantics of ggml's ``if (v > best) best = v`` loops are
  reproduced exactly, including the sign of zero.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32

# ggml's GROUP_MAX_EPS: below this a group counts as all zero.
GROUP_MAX_EPS = F32(1e-15)


# --------------------------------------------------------------------------- fp16 / bf16


def f16_to_f32(bits: np.ndarray) -> np.ndarray:
    """IEEE half bit patterns (uint16, any shape) -> float32 values, as ggml.

    ggml's ``ggml_compute_fp16_to_fp32`` multiplies by 2**-112 in float32,
    which quiets a signalling NaN; numpy keeps it signalling, so set the quiet
    bit on NaNs to match.
    """
    b = np.ascontiguousarray(bits).view(np.uint16)
    out = b.view(np.float16).astype(np.float32)
    if out.size and np.isnan(np.max(out)):  # max propagates NaN: one cheap pass, no mask
        u = out.view(np.uint32)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        u[nan] |= 0x00400000
    return out


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits as ``ggml_compute_fp32_to_fp16``.

    Round to nearest even, overflow to inf, and every NaN becomes
    ``sign | 0x7E00`` (ggml drops the payload).
    """
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        h = np.array(h, copy=True)
        sign = (x.view(np.uint32)[nan] >> 16).astype(np.uint16) & np.uint16(0x8000)
        h[nan] = sign | np.uint16(0x7E00)
    return h


def f32_to_f16_to_f32(x: np.ndarray) -> np.ndarray:
    """Round float32 through fp16 and back (what a stored scale becomes)."""
    return f16_to_f32(f32_to_f16_bits(x))


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits as ``ggml_compute_fp32_to_bf16``.

    Round to nearest even on the bit pattern (so overflow goes to inf), and a
    NaN keeps its top 16 bits with the quiet bit (0x40) forced on.
    """
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 64).astype(np.uint16)
    return rounded


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits -> float32 (a plain shift, NaN payloads kept)."""
    out = np.ascontiguousarray(bits).view(np.uint16).astype(np.uint32)
    out <<= 16  # in place: one widening pass and one shift, no second array
    return out.view(np.float32)


# --------------------------------------------------------------------------- rounding


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: round half to even (the 12582912.f trick), as int32."""
    return np.rint(np.asarray(x, dtype=np.float32)).astype(np.int32)


_HALF_DOWN_BITS = np.uint32(0x3EFFFFFF)  # 0.49999997f, nextafter(0.5f, 0)


def _half_down_signed(x: np.ndarray) -> np.ndarray:
    """copysign(0.49999997f, x) through the bits (np.copysign is ~3x slower)."""
    s = x.view(np.uint32) & np.uint32(0x80000000)
    s |= _HALF_DOWN_BITS
    return s.view(np.float32)


def round_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``/``lroundf``: round half away from zero, float32 result.

    ``trunc(x + copysign(0.49999997f, x))`` is exact for every float32 in
    round-to-nearest-even: ties (x = n + 0.5) land on n + 0.99999997, which
    rounds up to n + 1, while 0.49999997 itself stays below 1 (the naive
    ``floor(x + 0.5)`` gets that one wrong).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    t = _half_down_signed(x)
    t += x
    return np.trunc(t, out=t)


def round_away_int(x: np.ndarray, dtype=np.int8) -> np.ndarray:
    """``(int8_t)roundf(x)`` and friends: the float->int cast truncates, as in C."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    t = _half_down_signed(x)
    t += x
    return t.astype(dtype)


# --------------------------------------------------------------------------- reductions


def seq_sum(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sum along ``axis`` in index order starting from +0.0f, as a C loop does.

    ``0.0f + p0 + p1 + ...``.  Short axes (blocks) are summed column by
    column, which numpy runs ~3x faster than ``np.add.accumulate`` along a
    short last axis; long axes (whole rows) use the accumulate.  Both are
    sequential, unlike ``np.sum``'s pairwise order.
    """
    p = np.asarray(p, dtype=np.float32)
    p = np.moveaxis(p, axis, -1)
    n = p.shape[-1]
    if n <= 64:
        acc = np.zeros(p.shape[:-1], np.float32)
        for i in range(n):
            acc += p[..., i]
        return acc
    return np.add.accumulate(p, axis=-1, dtype=np.float32)[..., -1] + F32(0)


def _tree(x: np.ndarray, op) -> np.ndarray:
    """op-reduce the last axis by halving (exact for max/min, any order)."""
    n = x.shape[-1]
    if n & (n - 1) or n < 2:
        return op.reduce(x, axis=-1)
    m = op(x[..., : n // 2], x[..., n // 2 :])
    while m.shape[-1] > 1:
        h = m.shape[-1] // 2
        m = op(m[..., :h], m[..., h:])
    return m[..., 0]


def row_max(x: np.ndarray) -> np.ndarray:
    """max over the last axis; ~2x faster than ``np.max(axis=-1)`` on short blocks."""
    return _tree(np.asarray(x), np.maximum)


def row_min(x: np.ndarray) -> np.ndarray:
    """min over the last axis (see :func:`row_max`)."""
    return _tree(np.asarray(x), np.minimum)


def row_absmax(x: np.ndarray) -> np.ndarray:
    """``amax = 0; amax = MAX(amax, fabsf(v))`` over the last axis: +0.0 for zero rows."""
    return np.abs(np.maximum(row_max(x), -row_min(x)))


def first_extreme(x: np.ndarray, kind: str = "absmax") -> tuple[np.ndarray, np.ndarray]:
    """ggml's "first strict improvement" scans over the last axis.

    ``absmax``: ``amax = 0; max = 0; if (amax < |v|) {amax = |v|; max = v;}``
    returns (amax, max) -- max keeps the sign, +0.0 when every value is zero.
    ``min`` / ``max``: ``m = x[0]; if (v < m) m = v`` -- returns (m, m); the
    first element equal to the extreme is taken, which fixes the sign of zero.

    Fast path: plain min/max reductions; only the rows where the first
    occurrence matters (a +v/-v tie for absmax, a zero extreme for min/max)
    are rescanned with argmax.
    """
    x = np.asarray(x, dtype=np.float32)
    if kind == "absmax":
        hi = row_max(x)
        lo = row_min(x)
        neg = -lo
        amax = np.abs(np.maximum(hi, neg))  # +0.0, never -0.0, for all-zero rows
        mx = np.where(neg > hi, lo, hi)
        tie = (neg == hi) & (hi > 0)
        if tie.any():
            rows = x[tie]
            idx = np.argmax(np.abs(rows), axis=-1)
            mx[tie] = np.take_along_axis(rows, idx[..., None], -1)[..., 0]
        mx[amax == 0] = 0  # every value zero: max stays +0.0
        return amax, mx
    m = row_min(x) if kind == "min" else row_max(x)
    zero = m == 0
    if zero.any():
        rows = x[zero]
        idx = np.argmax(rows == 0, axis=-1)
        m[zero] = np.take_along_axis(rows, idx[..., None], -1)[..., 0]
    return m, m


def row_sigma2(rows: np.ndarray) -> np.ndarray:
    """``sum_x2 / n_per_row`` over each row with ggml's sequential sum -> f32 [nrows]."""
    rows = np.asarray(rows, dtype=np.float32)
    return seq_sum(rows * rows, axis=-1) / F32(rows.shape[-1])


def imatrix_weights(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """``qw[j] * sqrtf(sigma2 + x[j]*x[j])``: the legacy/K imatrix weights.

    x [..., n] blocks, qw broadcastable to x, sigma2 broadcastable to x
    (one value per row, e.g. ``sigma2[:, None, None]``).
    """
    return (qw * np.sqrt(sigma2 + x * x)).astype(np.float32)


# --------------------------------------------------------------------------- scale searches
#
# Both searches take blocks as x[B, n] but work on the transposed [n, B]
# layout: every per-block sum is then n additions of contiguous rows (in
# ggml's order), and every per-block scalar broadcasts along the fast axis.


def _rows_sum(p: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Sequential sum over axis 0 of p[n, B]: ``start + p[0] + p[1] + ...`` (+0.0 default)."""
    acc = np.zeros(p.shape[1], np.float32) if start is None else start.astype(np.float32)
    for row in p:
        acc += row
    return acc


def _absmax_t(xt: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """first_extreme(x, "absmax") computed on xt = x.T."""
    hi, lo = np.max(xt, axis=0), np.min(xt, axis=0)
    amax = np.abs(np.maximum(hi, -lo))
    mx = np.where(-lo > hi, lo, hi)
    tie = (-lo == hi) & (hi > 0)
    if tie.any():
        rows = x[tie]
        mx[tie] = rows[np.arange(len(rows)), np.argmax(np.abs(rows), axis=1)]
    mx[amax == 0] = 0
    return amax, mx


def make_qx_quants(
    x: np.ndarray, nmax: int, rmse_type: int, qw: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``make_qx_quants`` over blocks ``x[B, n]`` (qw: [B, n] or [n]).

    Returns (scale f32[B], L uint8[B, n]) with L in [0, 2*nmax).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    xt = np.ascontiguousarray(x.T)
    amax, mx = _absmax_t(xt, x)
    zero = amax < GROUP_MAX_EPS
    mx = np.where(zero, F32(1), mx)
    lo, hi = F32(-nmax), F32(nmax - 1)
    fn = F32(nmax)

    def levels(iscale: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(iscale * xt), lo, hi)

    def done(scale: np.ndarray, lt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        L = (lt + fn).astype(np.uint8).T
        L[zero] = 0
        return np.where(zero, F32(0), scale).astype(np.float32), np.ascontiguousarray(L)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-nmax) / mx).astype(np.float32)
        lt = levels(iscale)
        if rmse_type == 0:
            return done(F32(1) / iscale, lt)
        early = rmse_type < 0
        rt = -rmse_type if early else rmse_type
        if qw is not None:
            wt = np.ascontiguousarray(np.broadcast_to(np.asarray(qw, np.float32), x.shape).T)
        elif rt == 1:
            wt = xt * xt
        elif rt == 2:
            wt = np.ones_like(xt)
        elif rt == 3:
            wt = np.abs(xt)
        else:
            wt = np.sqrt(np.abs(xt))
        wx = wt * xt
        sumlx = _rows_sum(wx * lt)
        suml2 = _rows_sum(wt * lt * lt)
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(np.float32)
        if early:
            inv = F32(1) / iscale
            return done(np.where(suml2 > 0, F32(0.5) * (scale + inv), inv), lt)
        best = scale * sumlx
        for i_s in range(-9, 10):
            if i_s == 0:
                continue
            isc = (-(fn + F32(0.1) * F32(i_s)) / mx).astype(np.float32)
            lt2 = levels(isc)
            slx = _rows_sum(wx * lt2)
            sl2 = _rows_sum(wt * lt2 * lt2)
            better = (sl2 > 0) & (slx * slx > best * sl2)
            if better.any():
                cols = np.flatnonzero(better)  # np.where over [n, B] is ~10x slower
                lt[:, cols] = lt2[:, cols]
                scale = np.where(better, slx / sl2, scale).astype(np.float32)
                best = np.where(better, scale * slx, best).astype(np.float32)
    return done(scale, lt)


def make_qkx3_quants(
    x: np.ndarray,
    weights: np.ndarray | None,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised ``make_qkx3_quants`` over blocks ``x[B, n]`` (weights: [B, n] or [n]).

    Returns (scale f32[B], the_min f32[B], L uint8[B, n]); like ggml the
    second value is ``-min`` (positive), ready to be stored as the block min.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    xt = np.ascontiguousarray(x.T)
    if weights is None:
        wt = xt * xt
    else:
        wt = np.ascontiguousarray(np.broadcast_to(np.asarray(weights, np.float32), x.shape).T)
    mn, _ = first_extreme(x, "min")
    mx, _ = first_extreme(x, "max")
    # sum_w starts at w[0] and sum_x at w[0]*x[0] (not at 0)
    wx = wt * xt
    sum_w = _rows_sum(wt[1:], wt[0])
    sum_x = _rows_sum(wx[1:], wx[0])
    mn = np.where(mn > 0, F32(0), mn).astype(np.float32)
    flat = mx <= mn
    rng = np.where(flat, F32(1), mx - mn).astype(np.float32)
    xm = xt - mn
    fn = F32(nmax)

    def err(scale: np.ndarray, lt: np.ndarray, m: np.ndarray) -> np.ndarray:
        diff = scale * lt
        diff += m
        diff -= xt
        diff = np.abs(diff, out=diff) if use_mad else np.multiply(diff, diff, out=diff)
        return _rows_sum(wt * diff)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (fn / rng).astype(np.float32)
        scale = (F32(1) / iscale).astype(np.float32)
        lt = np.clip(np.rint(iscale * xm), F32(0), fn)
        best_mad = err(scale, lt, mn)
        # ggml overwrites ``min`` when a step wins, and later steps use the new
        # value in both ``max - min`` and ``x - min``: keep that quirk.
        for i_s in range(nstep + 1 if nstep >= 1 else 0):
            isc = ((F32(rmin) + F32(rdelta) * F32(i_s) + fn) / rng).astype(np.float32)
            la = np.clip(np.rint(isc * xm), F32(0), fn)
            wl = wt * la
            sum_l = _rows_sum(wl)
            sum_l2 = _rows_sum(wl * la)
            sum_xl = _rows_sum(wl * xt)
            D = sum_w * sum_l2 - sum_l * sum_l
            ok = (D > 0) & ~flat
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_min = np.where(pos, F32(0), this_min).astype(np.float32)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale).astype(np.float32)
            mad = err(this_scale, la, this_min)
            better = ok & (mad < best_mad)
            if better.any():
                cols = np.flatnonzero(better)
                lt[:, cols] = la[:, cols]
                best_mad = np.where(better, mad, best_mad)
                scale = np.where(better, this_scale, scale).astype(np.float32)
                mn = np.where(better, this_min, mn).astype(np.float32)
                rng = np.where(flat, F32(1), mx - mn).astype(np.float32)
                xm = xt - mn
    L = lt.astype(np.uint8).T
    L[flat] = 0
    scale = np.where(flat, F32(0), scale).astype(np.float32)
    return scale, (-mn).astype(np.float32), np.ascontiguousarray(L)
