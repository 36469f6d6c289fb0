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
    if ((b & 0x7C00) == 0x7C00).any():
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
    b = np.ascontiguousarray(bits).view(np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


# --------------------------------------------------------------------------- rounding


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: round half to even (the 12582912.f trick), as int32."""
    return np.rint(np.asarray(x, dtype=np.float32)).astype(np.int32)


def round_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``/``lroundf``: round half away from zero, float32 result.

    ``trunc`` and ``x - trunc(x)`` are exact, so the tie test is exact too
    (``floor(x + 0.5)`` is not: 0.49999997 + 0.5 rounds up to 1).
    """
    x = np.asarray(x, dtype=np.float32)
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= F32(0.5), t + np.sign(x), t).astype(np.float32)


# --------------------------------------------------------------------------- reductions


def seq_sum(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sum along ``axis`` in index order starting from +0.0f, as a C loop does.

    ``0.0f + p0 + p1 + ...``: the result equals the sequential prefix sum;
    adding +0 at the end reproduces C's ``+0`` when every term is ``-0``.
    """
    p = np.asarray(p, dtype=np.float32)
    if p.shape[axis] == 0:
        return np.zeros(np.delete(p.shape, axis if axis >= 0 else p.ndim + axis), np.float32)
    acc = np.add.accumulate(p, axis=axis, dtype=np.float32)
    return np.take(acc, -1, axis=axis) + F32(0)


def first_extreme(x: np.ndarray, kind: str = "absmax") -> tuple[np.ndarray, np.ndarray]:
    """ggml's "first strict improvement" scans over the last axis.

    ``absmax``: ``amax = 0; max = 0; if (amax < |v|) {amax = |v|; max = v;}``
    returns (amax, max) -- max keeps the sign, +0.0 when every value is zero.
    ``min`` / ``max``: ``m = x[0]; if (v < m) m = v`` -- returns (m, m); the
    first element equal to the extreme is taken, which fixes the sign of zero.
    """
    if kind == "absmax":
        ax = np.abs(x)
        idx = np.argmax(ax, axis=-1)
        amax = np.take_along_axis(ax, idx[..., None], -1)[..., 0]
        mx = np.take_along_axis(x, idx[..., None], -1)[..., 0]
        mx = np.where(amax > 0, mx, F32(0)).astype(np.float32)
        return amax, mx
    m = np.min(x, axis=-1) if kind == "min" else np.max(x, axis=-1)
    idx = np.argmax(x == m[..., None], axis=-1)
    v = np.take_along_axis(x, idx[..., None], -1)[..., 0]
    return v, v


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


def make_qx_quants(
    x: np.ndarray, nmax: int, rmse_type: int, qw: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``make_qx_quants`` over blocks ``x[B, n]``.

    Returns (scale f32[B], L uint8[B, n]) with L in [0, 2*nmax).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    amax, mx = first_extreme(x, "absmax")
    zero = amax < GROUP_MAX_EPS
    mx = np.where(zero, F32(1), mx)
    lo, hi = F32(-nmax), F32(nmax - 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-nmax) / mx).astype(np.float32)
        lf = np.clip(np.rint(iscale[:, None] * x), lo, hi)
        if rmse_type == 0:
            L = np.where(zero[:, None], 0, lf + F32(nmax)).astype(np.uint8)
            return np.where(zero, F32(0), F32(1) / iscale).astype(np.float32), L
        early = rmse_type < 0
        rt = -rmse_type if early else rmse_type
        if qw is not None:
            w = np.broadcast_to(np.asarray(qw, dtype=np.float32), x.shape)
        elif rt == 1:
            w = x * x
        elif rt == 2:
            w = np.ones_like(x)
        elif rt == 3:
            w = np.abs(x)
        else:
            w = np.sqrt(np.abs(x))
        wx = w * x
        sumlx = seq_sum(wx * lf)
        suml2 = seq_sum(w * lf * lf)
        L = (lf + F32(nmax)).astype(np.uint8)
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(np.float32)
        if early:
            res = np.where(suml2 > 0, F32(0.5) * (scale + F32(1) / iscale), F32(1) / iscale).astype(
                np.float32
            )
            return np.where(zero, F32(0), res).astype(np.float32), np.where(zero[:, None], 0, L)
        best = scale * sumlx
        for i_s in range(-9, 10):
            if i_s == 0:
                continue
            isc = (-(F32(nmax) + F32(0.1) * F32(i_s)) / mx).astype(np.float32)
            lf = np.clip(np.rint(isc[:, None] * x), lo, hi)
            slx = seq_sum(wx * lf)
            sl2 = seq_sum(w * lf * lf)
            better = (sl2 > 0) & (slx * slx > best * sl2)
            if better.any():
                L = np.where(better[:, None], (lf + F32(nmax)).astype(np.uint8), L)
                scale = np.where(better, slx / sl2, scale).astype(np.float32)
                best = np.where(better, scale * slx, best).astype(np.float32)
    return np.where(zero, F32(0), scale).astype(np.float32), np.where(zero[:, None], 0, L).astype(
        np.uint8
    )


def make_qkx3_quants(
    x: np.ndarray,
    weights: np.ndarray | None,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised ``make_qkx3_quants`` over blocks ``x[B, n]``.

    Returns (scale f32[B], the_min f32[B], L uint8[B, n]); like ggml the
    second value is ``-min`` (positive), ready to be stored as the block min.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    w = x * x if weights is None else np.broadcast_to(np.asarray(weights, np.float32), x.shape)
    mn, _ = first_extreme(x, "min")
    mx, _ = first_extreme(x, "max")
    # sum_w starts at w[0] and sum_x at w[0]*x[0] (not at 0): accumulate as is.
    sum_w = np.add.accumulate(w, axis=-1, dtype=np.float32)[:, -1]
    sum_x = np.add.accumulate(w * x, axis=-1, dtype=np.float32)[:, -1]
    mn = np.where(mn > 0, F32(0), mn).astype(np.float32)
    flat = mx <= mn
    rng = np.where(flat, F32(1), mx - mn).astype(np.float32)
    xm = x - mn[:, None]
    fn = F32(nmax)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (fn / rng).astype(np.float32)
        scale = (F32(1) / iscale).astype(np.float32)
        L = np.clip(np.rint(iscale[:, None] * xm), F32(0), fn)
        diff = scale[:, None] * L + mn[:, None] - x
        diff = np.abs(diff) if use_mad else diff * diff
        best_mad = seq_sum(w * diff)
        # ggml overwrites ``min`` when a step wins, and later steps use the new
        # value in both ``max - min`` and ``x - min``: keep that quirk.
        for i_s in range(nstep + 1 if nstep >= 1 else 0):
            isc = ((F32(rmin) + F32(rdelta) * F32(i_s) + fn) / rng).astype(np.float32)
            la = np.clip(np.rint(isc[:, None] * xm), F32(0), fn)
            wl = w * la
            sum_l = seq_sum(wl)
            sum_l2 = seq_sum(wl * la)
            sum_xl = seq_sum(wl * x)
            D = sum_w * sum_l2 - sum_l * sum_l
            ok = (D > 0) & ~flat
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_min = np.where(pos, F32(0), this_min)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
            d = this_scale[:, None] * la + this_min[:, None] - x
            d = np.abs(d) if use_mad else d * d
            mad = seq_sum(w * d)
            better = ok & (mad < best_mad)
            if better.any():
                L = np.where(better[:, None], la, L)
                best_mad = np.where(better, mad, best_mad)
                scale = np.where(better, this_scale, scale).astype(np.float32)
                mn = np.where(better, this_min, mn).astype(np.float32)
                rng = np.where(flat, F32(1), mx - mn).astype(np.float32)
                xm = x - mn[:, None]
    L = np.where(flat[:, None], F32(0), L).astype(np.uint8)
    scale = np.where(flat, F32(0), scale).astype(np.float32)
    return scale, (-mn).astype(np.float32), L
