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

from ._common import f16_to_f32, f32_to_f16_bits

F32 = np.float32
QK_K = 256
GROUP_MAX_EPS = F32(1e-15)
_MAGIC = F32(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer in the mantissa
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
_QX_SLICE_ELEMS = 1 << 16  # make_qx_quants trial slice: its ~6 arrays of 256 KiB stay in L2

__all__ = ["DEQUANTIZE", "QUANTIZE", "make_q3_quants", "make_qx_quants"]


# --------------------------------------------------------------------------- numerics


def _nint(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int`` bit trick, reproduced bit for bit (int32).

    Identical to round-half-even inside +-2**22; outside that range (and for
    NaN/inf, which can reach it through ``x / d`` or ``x * sl2 / slx``) it
    yields the same wrapped value as the C code.
    """
    bits = (np.asarray(v, dtype=F32) + _MAGIC).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def _seqsum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0, adding a[0], a[1], ... in order as ggml's loops do.

    numpy's reduction over the *outer* axis of a C-contiguous array is a
    chain of element-wise adds (pairwise summation only applies along the
    contiguous inner axis), so this is the sequential float32 sum.
    """
    return np.add.reduce(np.ascontiguousarray(a), axis=0, dtype=F32)


def _signed_absmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    """:func:`_signed_absmax` as C's literal loop (used when NaN is present)."""
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
    return np.clip(_nint(v), lo, hi).astype(F32)


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
        scale, iscale = _qx_search(x, nmax, w)
        return scale, _qx_levels(x, iscale, nmax)


def _qx_levels(x: np.ndarray, iscale: np.ndarray, nmax: int) -> np.ndarray:
    """The search's stored levels ``L`` for the winning ``iscale`` (0 marks dead)."""
    bits = _nint(np.multiply(iscale, x))
    np.clip(bits, -nmax, nmax - 1, out=bits)
    bits += nmax
    bits[:, iscale == 0] = 0  # all-zero groups: C sets L = 0
    return bits.astype(np.uint8)


def _qx_search(x: np.ndarray, nmax: int, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants' search: (scale, winning iscale) per group of ``x [n, groups]``.

    Dead groups (``amax < GROUP_MAX_EPS``) get scale 0 and iscale 0.  The
    sums of every trial are computed slice by slice (so the ``[n, slice]``
    working set stays in L2) and the sequential accept/reject walk over the
    trials then runs once on whole ``[groups]`` vectors.
    """
    n, groups = x.shape
    amax, xmax = _signed_absmax(x)
    live = amax >= GROUP_MAX_EPS
    xmax[~live] = 1  # dead groups are reset at the end
    nums = [_qx_numerator(nmax, k) for k in _QX_TRIALS]
    sums = np.empty((2, len(nums), groups), dtype=F32)  # [sumlx|suml2, trial, group]
    step = min(groups, max(1, _QX_SLICE_ELEMS // max(1, n)))
    # One workspace for all slices: fresh large temporaries would page-fault.
    work = _QxWork(n, step)
    for s in range(0, groups, step):
        e = min(s + step, groups)
        _qx_trials(
            x[:, s:e], w if w is None else w[:, s:e], xmax[s:e], nums, nmax, sums[:, :, s:e], work
        )
    sumlx, suml2 = sums
    ratio = sumlx / suml2  # C: scale = sumlx/suml2
    cand = ratio * sumlx  # C: best = scale*sumlx, for the trial's own scale
    square = sumlx * sumlx
    accept = suml2 > 0
    scale0 = np.where(suml2[0] != 0, ratio[0], F32(0))
    best = scale0 * sumlx[0]
    best_t = np.zeros(groups, dtype=np.uint8)
    tmp = np.empty(groups, dtype=F32)
    better = np.empty(groups, dtype=bool)
    tag = np.empty(groups, dtype=np.uint8)
    for t in range(1, len(nums)):
        # C: if (suml2 > 0 && sumlx*sumlx > best*suml2) { scale = sumlx/suml2; best = scale*sumlx; }
        np.multiply(best, suml2[t], out=tmp)
        np.greater(square[t], tmp, out=better)
        better &= accept[t]
        np.copyto(best, cand[t], where=better)
        np.multiply(better, np.uint8(t), out=tag)
        np.maximum(best_t, tag, out=best_t)  # trials run in order: the last accepted wins
    scale = np.where(best_t == 0, scale0, ratio[best_t, np.arange(groups)])
    iscale = np.asarray(nums, dtype=F32)[best_t] / xmax
    scale[~live] = 0
    iscale[~live] = 0
    return scale, iscale


class _QxWork:
    """Reusable buffers for :func:`_qx_trials` on slices of up to ``m`` groups."""

    def __init__(self, n: int, m: int) -> None:
        self.wx2 = np.empty((2, n, m), dtype=F32)  # [w*x | w, i, group]
        self.x = np.empty((n, m), dtype=F32)
        self.t = np.empty((n, m), dtype=F32)
        self.prod = np.empty((2, n, m), dtype=F32)
        self.iscale = np.empty(m, dtype=F32)

    def view(self, m: int) -> tuple[np.ndarray, ...]:
        return (
            self.wx2[:, :, :m],
            self.x[:, :m],
            self.t[:, :m],
            self.prod[:, :, :m],
            self.iscale[:m],
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
    wx2, x, t, prod, iscale = work.view(xs.shape[1])
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
            if k >= 5:
                np.clip(t, -nmax, nmax - 1, out=t)
            elif k >= -5:
                np.minimum(t, nmax - 1, out=t)
        np.multiply(wx2, t, out=prod)
        np.multiply(prod[1], t, out=prod[1])
        np.add.reduce(prod, axis=1, out=out[:, i])


def make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``make_q3_quants(n, nmax, x, L, do_rmse=true)`` over many groups.

    Same layout and return values as :func:`make_qx_quants`.
    """
    x = np.ascontiguousarray(x, dtype=F32)
    scale, lv = _q3_search(x, nmax)
    return scale, _q3_levels(lv, nmax)


def _q3_levels(lv: np.ndarray, nmax: int) -> np.ndarray:
    """Stored levels ``L = l + nmax`` from :func:`_q3_search`'s signed ones."""
    dead = np.isnan(lv[0])  # all |x| < GROUP_MAX_EPS: C sets L = 0
    L = (np.where(dead, F32(-nmax), lv) + nmax).astype(np.uint8)
    return L


def _q3_search(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_q3_quants on ``x [n, groups]`` -> (scale, signed levels as float32).

    Dead groups get scale 0 and NaN levels.  The coordinate descent changes
    one level at a time, so it loops over the in-group index with every group
    in step.  A group whose pass changes nothing is final (its state would not
    change again: ggml ``break``s), so each later pass only revisits the
    groups that changed in the previous one.
    """
    with np.errstate(all="ignore"):
        x, w, wx, lv, sumlx, suml2, live, changed = _q3_first_pass(x, nmax)
        idx = np.flatnonzero(changed)
        for _ in range(4):
            if idx.size == 0:
                break
            sub = [np.ascontiguousarray(a[:, idx]) for a in (x, w, wx, lv)]
            slx, sl2 = sumlx[idx], suml2[idx]
            changed = _q3_pass(*sub, slx, sl2, nmax)
            lv[:, idx], sumlx[idx], suml2[idx] = sub[3], slx, sl2
            idx = idx[changed]
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    scale[~live] = 0
    lv[:, ~live] = np.nan
    return scale, lv


def _q3_first_pass(x: np.ndarray, nmax: int) -> tuple[np.ndarray, ...]:
    """Start make_q3_quants and run its first pass.

    Returns ``x, w, wx, lv, sumlx, suml2, live, changed`` for the later passes.
    """
    x = np.ascontiguousarray(x, dtype=F32)
    w = x * x
    wx = w * x
    amax, xmax = _signed_absmax(x)
    live = amax >= GROUP_MAX_EPS
    xmax[~live] = 1
    lv = np.multiply(F32(-nmax) / xmax, x)
    if np.isfinite(x).all():  # |iscale*x| <= nmax: rint is nearest_int
        np.rint(lv, out=lv)
        np.clip(lv, -nmax, nmax - 1, out=lv)
    else:
        lv[...] = _quant_clip(lv, -nmax, nmax - 1)
    own_lx = wx * lv
    own_l2 = w * lv
    own_l2 *= lv
    sumlx, suml2 = _seqsum(own_lx), _seqsum(own_l2)
    changed = _q3_pass(x, w, wx, lv, sumlx, suml2, nmax, own_lx, own_l2)
    return x, w, wx, lv, sumlx, suml2, live, changed


def _q3_pass(
    x: np.ndarray,
    w: np.ndarray,
    wx: np.ndarray,
    lv: np.ndarray,
    sumlx: np.ndarray,
    suml2: np.ndarray,
    nmax: int,
    own_lx: np.ndarray | None = None,
    own_l2: np.ndarray | None = None,
) -> np.ndarray:
    """One pass of make_q3_quants' descent; updates lv/sumlx/suml2 in place.

    Returns which groups changed.  ``lv`` holds the signed levels as float32.
    The 16 dependent steps work in preallocated ``[groups]`` buffers, so the
    loop allocates nothing; ``own_lx``/``own_l2`` (each level's own terms) may
    be passed in when the caller already has them.
    """
    n, groups = x.shape
    changed = np.zeros(groups, dtype=bool)
    slx0, sl20, t1, new_l = np.empty((4, groups), dtype=F32)
    bits = np.empty(groups, dtype=np.int32)
    cand = np.empty(groups, dtype=bool)
    cond = np.empty(groups, dtype=bool)
    lo, hi = 0x00400000 - nmax, 0x00400000 + nmax - 1
    # Each level's own terms: lv[i] only changes at step i, so these stay valid.
    if own_lx is None or own_l2 is None:
        own_lx = wx * lv
        own_l2 = w * lv
        own_l2 *= lv
    for i in range(n):
        li, xi = lv[i], x[i]
        # C: slx = sumlx - w*x[i]*L[i]; sl2 = suml2 - w*L[i]*L[i]
        np.subtract(sumlx, own_lx[i], out=slx0)
        np.subtract(suml2, own_l2[i], out=sl20)
        # new_l = MAX(-nmax, MIN(nmax-1, nearest_int(x[i] * sl2 / slx))), bit trick inline
        np.multiply(xi, sl20, out=t1)
        np.divide(t1, slx0, out=t1)
        np.add(t1, _MAGIC, out=t1)
        np.bitwise_and(t1.view(np.int32), 0x007FFFFF, out=bits)
        np.clip(bits, lo, hi, out=bits)
        np.subtract(bits, 0x00400000, out=new_l, casting="unsafe")
        # C: if (slx > 0) { ...; if (new_l != L[i]) { ... } } -- true for a few % of
        # the groups, so the rest of the step runs on those only.
        np.greater(slx0, 0, out=cand)
        cand &= np.not_equal(new_l, li, out=cond)
        c = np.flatnonzero(cand)
        if c.size == 0:
            continue
        nl, sx, s2 = new_l[c], sumlx[c], suml2[c]
        slx = slx0[c] + wx[i, c] * nl
        sl2 = w[i, c] * nl
        sl2 *= nl
        sl2 += sl20[c]
        # C: if (sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2) { L[i] = new_l; sumlx = slx; suml2 = sl2; }
        take = (sl2 > 0) & (slx * slx * s2 > sx * sx * sl2)
        u = c[take]
        li[u] = nl[take]
        sumlx[u] = slx[take]
        suml2[u] = sl2[take]
        changed[u] = True
    return changed


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
    scale, iscale_search = _qx_search(xg, 32, None if qw is None else _groups(qw))
    scales = scale.reshape(b, 16)
    max_abs, max_scale = _signed_absmax(scales.T)
    dead = max_abs < GROUP_MAX_EPS
    iscale = F32(-128) / np.where(dead, F32(1), max_scale)
    d16 = f32_to_f16_bits(F32(1) / iscale)
    sc = np.minimum(127, _nint(iscale[:, None] * scales)).astype(np.int8)
    d = f16_to_f32(d16)[:, None] * sc.astype(F32)

    def search_levels(idx: np.ndarray) -> np.ndarray:
        return _qx_levels(xg[:, idx], iscale_search[idx], 32).T

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
        scale, lv = _q3_search(_groups(xb), 4)
    scales = scale.reshape(b, 16)
    _, max_scale = _signed_absmax(scales.T)
    has = max_scale != 0  # C: if (max_scale)
    iscale = F32(-32) / np.where(has, max_scale, F32(1))
    ls = np.clip(_nint(iscale[:, None] * scales).astype(np.int8), -32, 31) + np.int8(32)
    d16 = np.where(has, f32_to_f16_bits(F32(1) / iscale), np.uint16(0))
    ls = np.where(has[:, None], ls, np.int8(0)).astype(np.uint8)
    return ls, d16, lambda idx: _q3_levels(lv[:, idx], 4).T


def _q3k_scales_impl(xb: np.ndarray, qw: np.ndarray) -> tuple[np.ndarray, np.ndarray, _Levels]:
    """quantize_row_q3_K_impl's scale step -> (6-bit scales, f16 d bits, search levels)."""
    b = xb.shape[0]
    x2 = xb * xb
    sigma2 = F32(2) * _seqsum(x2.T) / F32(QK_K)
    weight = qw * np.sqrt(sigma2[:, None] + x2)
    wg = _groups(weight)
    sw = _seqsum(wg)
    xg = _groups(xb)
    scale, iscale = _qx_search(xg, 4, wg)
    d_block, Ls = make_qx_quants(scale.reshape(b, 16).T, 32, sw.reshape(b, 16).T)
    return (
        np.ascontiguousarray(Ls.T),
        f32_to_f16_bits(d_block),
        lambda idx: _qx_levels(xg[:, idx], iscale[idx], 4).T,
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
