"""The IQ ("importance") quant family of ggml: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL and IQ4_XS.

Every block type below is a packed C struct from ggml-common.h; integers are
little endian, ``d`` is an IEEE half.  ``QK_K`` = 256 values per block except
IQ4_NL (32).  Groups of 8 values are coded as an index into a *grid* of
8-vectors (or two indices into a grid of 4-vectors) plus 8 sign bits; the
grids and sign tables are format data kept in :mod:`._iq_tables`.

Layouts (offset: field), per block, ``ib`` = 32-value sub-block 0..7:

* IQ2_XXS (66 B): 0 d; 2 qs[32] u16.  Sub-block ``ib`` owns 8 bytes at
  2+8*ib: bytes 0..3 are iq2xxs_grid indices for its four 8-groups, the next
  u32 ``a`` holds four 7-bit ksigns_iq2xs indices (bits 7l..7l+6) and the
  scale in bits 28..31.  value = d*(0.5+s)*0.25 * grid * sign.
* IQ2_XS (74 B): 0 d; 2 qs[32] u16 (bits 0..8 iq2xs_grid index, 9..15
  ksigns index); 66 scales[8] (two 4-bit scales per sub-block, low nibble for
  groups 0-1, high for 2-3).  value = d*(0.5+s)*0.25 * grid * sign.
* IQ2_S (82 B): 0 d; 2 qs[32] low 8 bits of the iq2s_grid index per group;
  34 signs[32] one raw sign byte per group; 66 qh[8] bits 2l..2l+1 of qh[ib]
  are index bits 8..9 of group l; 74 scales[8] as IQ2_XS.
* IQ3_XXS (98 B): 0 d; 2 qs[64] iq3xxs_grid indices (one per 4 values);
  66 scales_and_signs[8] u32 (four 7-bit ksigns indices, scale in 28..31).
  value = d*(0.5+s)*0.5 * grid * sign.
* IQ3_S (110 B): 0 d; 2 qs[64] low 8 bits of iq3s_grid indices; 66 qh[8]
  bit k of qh[ib] is index bit 8 of 4-group k; 74 signs[32] raw sign bytes;
  106 scales[4] two 4-bit scales s per byte.  value = d*(1+2s) * grid * sign.
* IQ1_S (50 B): 0 d; 2 qs[32] low 8 bits of iq1s_grid indices; 34 qh[8] u16:
  bits 3l..3l+2 index bits 8..10 of group l, 12..14 scale s, 15 delta sign.
  value = d*(2s+1) * (grid ± 0.125).
* IQ1_M (56 B): 0 qs[32] as IQ1_S; 32 qh[16] (per group pair: index bits
  8..10 in bits 0..2 / 4..6, delta sign in bit 3 / 7); 48 scales[8] = four
  u16 holding 3-bit sub-scales (6 bits per sub-block), and in their top
  nibbles the 16 bits of the fp16 super-scale.
* IQ4_NL (18 B, 32 values): 0 d; 2 qs[16]: value j is kvalues_iq4nl[qs[j] &
  15], value j+16 is kvalues_iq4nl[qs[j] >> 4], times d.
* IQ4_XS (136 B): 0 d; 2 scales_h u16 (2 high bits of each 6-bit sub-scale);
  4 scales_l[4] (low nibbles, two per byte); 8 qs[128] as IQ4_NL per
  sub-block.  value = d*(ls-32) * kvalues_iq4nl[q].

Quantizers, every one bit for bit with ggml (float32 intermediates, sums in
C's order over the in-block index with blocks vectorised, ggml's
tie-breaking, its ``nearest_int`` bit trick):

* IQ4_NL, IQ4_XS -- ``quantize_row_iq4_nl_impl`` (ntry=7 scale search);
* IQ3_XXS, IQ3_S, IQ2_S, IQ2_XXS, IQ2_XS -- scale trials over a grid with
  off-grid groups moved to their best precomputed neighbour
  (``iq3xs_init_impl`` / ``iq2xs_init_impl`` tables, rebuilt here lazily);
* IQ1_S, IQ1_M -- exhaustive split search over the sorted values.

IQ2_XXS, IQ2_XS and IQ1_S need an importance matrix, as in ggml.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..errors import ImatrixRequired
from . import _iq_tables as _t
from ._common import (
    F32,
    block_f16,
    block_field,
    decoder,
    f16_to_f32,
    f32_to_f16_bits,
    inv_or_zero,
    nibble_lookup,
    nibble_table,
    pack_nibbles,
    quantize_blocks,
    scale_rows,
)
from ._common import GROUP_MAX_EPS as _GROUP_MAX_EPS
from ._search import make_qp_quants, nearest_int
from ._search import seqsum as _seqsum  # C's ``float s = 0; s += a[j]`` over axis 0

QK_K = 256
QK4_NL = 32
_IQ1_DELTA = F32(0.125)  # IQ1S_DELTA == IQ1M_DELTA


def _table(name: str) -> np.ndarray:
    """One table of :mod:`._iq_tables` decoded to its numpy dtype."""
    hexstr = getattr(_t, name.upper() + "_HEX")
    dtype = np.dtype(getattr(_t, name.upper() + "_DTYPE"))
    arr = np.frombuffer(bytes.fromhex(hexstr), dtype=dtype)
    arr.setflags(write=False)
    return arr


def _grid_f32(name: str, width: int, signed: bool = False) -> np.ndarray:
    """A grid as float32 [entries, width]: the bytes of each entry in memory order."""
    raw = _table(name).view(np.int8 if signed else np.uint8)
    return np.ascontiguousarray(raw.reshape(-1, width).astype(np.float32))


KVALUES_IQ4NL = _table("kvalues_iq4nl")
KSIGNS_IQ2XS = _table("ksigns_iq2xs")
KMASK_IQ2XS = _table("kmask_iq2xs")

IQ2XXS_GRID = _grid_f32("iq2xxs_grid", 8)
IQ2XS_GRID = _grid_f32("iq2xs_grid", 8)
IQ2S_GRID = _grid_f32("iq2s_grid", 8)
IQ3XXS_GRID = _grid_f32("iq3xxs_grid", 4)
IQ3S_GRID = _grid_f32("iq3s_grid", 4)
IQ1S_GRID = _grid_f32("iq1s_grid", 8, signed=True)
# IQ1 grid entry plus its delta, row 2*i for +delta and 2*i+1 for -delta
# (int8 + 0.125 is exact in float32, as ggml's ``grid[j] + delta``)
_IQ1S_GD = np.stack([IQ1S_GRID + _IQ1_DELTA, IQ1S_GRID - _IQ1_DELTA], axis=1).reshape(-1, 8)

# sign byte -> eight factors of +-1 (bit j set = negative), as ggml's kmask test
_BYTE_SIGNS = np.where(
    (np.arange(256, dtype=np.uint8)[:, None] & KMASK_IQ2XS[None, :]) != 0, F32(-1), F32(1)
).astype(np.float32)
# 7-bit ksigns index -> eight factors of +-1 (the 8th bit is the parity bit)
_KSIGNS = np.ascontiguousarray(_BYTE_SIGNS[KSIGNS_IQ2XS])

# Signed grids: grid value times sign, for each (grid index, sign index).
# Negation is exact, so db * (g * s) == (db * g) * s as ggml computes it.
_IQ2XXS_SG = (IQ2XXS_GRID[:, None, :] * _KSIGNS[None, :, :]).reshape(-1, 8)
_IQ2XS_SG = (IQ2XS_GRID[:, None, :] * _KSIGNS[None, :, :]).reshape(-1, 8)
_NIBBLE_SIGNS = np.ascontiguousarray(_BYTE_SIGNS[:16, :4])
_IQ3XXS_SG = (IQ3XXS_GRID[:, None, :] * _NIBBLE_SIGNS[None, :, :]).reshape(-1, 4)
_IQ3S_SG = (IQ3S_GRID[:, None, :] * _NIBBLE_SIGNS[None, :, :]).reshape(-1, 4)

_KV_F32 = KVALUES_IQ4NL.astype(np.float32)
_KV_PAIRS = nibble_table(KVALUES_IQ4NL)  # byte -> (kvalues[lo nibble], kvalues[hi nibble])

_CHUNK_BLOCKS = 4096  # blocks per dequantization step: keeps temporaries in cache


def _chunked(fn: Callable[[np.ndarray], np.ndarray], block_size: int):
    """Wrap a block dequantizer so that it runs over cache-sized chunks."""

    def run(blocks: np.ndarray) -> np.ndarray:
        nb = blocks.shape[0]
        if nb <= _CHUNK_BLOCKS:
            return fn(blocks)
        out = np.empty((nb, block_size), dtype=np.float32)
        for s in range(0, nb, _CHUNK_BLOCKS):
            out[s : s + _CHUNK_BLOCKS] = fn(blocks[s : s + _CHUNK_BLOCKS])
        return out

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


_d16 = block_f16  # the fp16 field at byte ``off`` of every block, as float32 [nb]


def _u32(raw: np.ndarray) -> np.ndarray:
    """[..., 4k] uint8 -> [..., k] little-endian uint32."""
    return np.ascontiguousarray(raw).view("<u4")


def _u16(raw: np.ndarray) -> np.ndarray:
    """[..., 2k] uint8 -> [..., k] little-endian uint16."""
    return np.ascontiguousarray(raw).view("<u2")


# ---------------------------------------------------------------- dequantize


def _scale_xxs(d: np.ndarray, a: np.ndarray, last: np.float32) -> np.ndarray:
    """ggml's ``d * (0.5f + (a >> 28)) * last`` for the XXS sub-block scales."""
    return (d[:, None] * (F32(0.5) + (a >> 28).astype(np.float32))) * last


def dequantize_iq2_xxs(blocks: np.ndarray) -> np.ndarray:
    """IQ2_XXS blocks [nb, 66] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    q = blocks[:, 2:].reshape(nb, 8, 8)
    a = _u32(q[:, :, 4:8])[:, :, 0]  # [nb, 8]
    db = _scale_xxs(_d16(blocks), a, F32(0.25))
    sidx = (a[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127
    idx = q[:, :, 0:4].astype(np.intp) * 128 + sidx  # [nb, 8, 4]
    vals = np.take(_IQ2XXS_SG, idx, axis=0)  # [nb, 8, 4, 8]
    vals *= db[:, :, None, None]
    return vals.reshape(nb, QK_K)


def _scale_pairs(blocks: np.ndarray, off: int, d: np.ndarray) -> np.ndarray:
    """IQ2_XS/IQ2_S sub-block scales [nb, 8, 2]: d*(0.5f + nibble)*0.25f."""
    sc = blocks[:, off : off + 8]
    nib = np.stack([sc & 15, sc >> 4], axis=-1).astype(np.float32)
    return (d[:, None, None] * (F32(0.5) + nib)) * F32(0.25)


def dequantize_iq2_xs(blocks: np.ndarray) -> np.ndarray:
    """IQ2_XS blocks [nb, 74] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    qs = _u16(blocks[:, 2:66]).reshape(nb, 8, 2, 2)  # [ib, half, l%2]
    db = _scale_pairs(blocks, 66, _d16(blocks))  # [nb, 8, 2]
    idx = (qs & 511).astype(np.intp) * 128 + (qs >> 9)
    vals = np.take(_IQ2XS_SG, idx, axis=0)  # [nb, 8, 2, 2, 8]
    vals *= db[:, :, :, None, None]
    return vals.reshape(nb, QK_K)


def dequantize_iq2_s(blocks: np.ndarray) -> np.ndarray:
    """IQ2_S blocks [nb, 82] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    qs = blocks[:, 2:34].reshape(nb, 8, 4).astype(np.intp)
    signs = blocks[:, 34:66].reshape(nb, 8, 4)
    qh = blocks[:, 66:74].astype(np.intp)
    db = _scale_pairs(blocks, 74, _d16(blocks))  # [nb, 8, 2]
    hi = (qh[:, :, None] << np.array([8, 6, 4, 2], dtype=np.intp)) & 0x300
    vals = np.take(IQ2S_GRID, qs | hi, axis=0)  # [nb, 8, 4, 8]
    vals *= np.take(_BYTE_SIGNS, signs, axis=0)
    vals = vals.reshape(nb, 8, 2, 16)
    vals *= db[:, :, :, None]
    return vals.reshape(nb, QK_K)


def dequantize_iq3_xxs(blocks: np.ndarray) -> np.ndarray:
    """IQ3_XXS blocks [nb, 98] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    qs = blocks[:, 2:66].reshape(nb, 8, 4, 2).astype(np.intp)  # [ib, l, half]
    a = _u32(blocks[:, 66:98])  # [nb, 8]
    db = _scale_xxs(_d16(blocks), a, F32(0.5))
    sbyte = KSIGNS_IQ2XS[(a[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127]
    nib = np.stack([sbyte & 15, sbyte >> 4], axis=-1)  # [nb, 8, 4, 2]
    vals = np.take(_IQ3XXS_SG, qs * 16 + nib, axis=0)  # [nb, 8, 4, 2, 4]
    vals = vals.reshape(nb, 8, 32)
    vals *= db[:, :, None]
    return vals.reshape(nb, QK_K)


def dequantize_iq3_s(blocks: np.ndarray) -> np.ndarray:
    """IQ3_S blocks [nb, 110] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    qs = blocks[:, 2:66].reshape(nb, 8, 8).astype(np.intp)
    qh = blocks[:, 66:74].astype(np.intp)
    signs = blocks[:, 74:106].reshape(nb, 8, 4)
    sc = blocks[:, 106:110]
    d = _d16(blocks)
    s = np.stack([sc & 15, sc >> 4], axis=-1).reshape(nb, 8).astype(np.int32)
    db = d[:, None] * (1 + 2 * s).astype(np.float32)  # [nb, 8]
    hi = ((qh[:, :, None] >> np.arange(8, dtype=np.intp)) & 1) << 8
    nib = np.stack([signs & 15, signs >> 4], axis=-1).reshape(nb, 8, 8)
    vals = np.take(_IQ3S_SG, (qs | hi) * 16 + nib, axis=0)  # [nb, 8, 8, 4]
    vals = vals.reshape(nb, 8, 32)
    vals *= db[:, :, None]
    return vals.reshape(nb, QK_K)


def dequantize_iq1_s(blocks: np.ndarray) -> np.ndarray:
    """IQ1_S blocks [nb, 50] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    qs = blocks[:, 2:34].reshape(nb, 8, 4).astype(np.intp)
    qh = _u16(blocks[:, 34:50]).astype(np.intp)  # [nb, 8]
    d = _d16(blocks)
    dl = d[:, None] * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)
    idx = qs | (((qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.intp)) & 7) << 8)
    vals = np.take(_IQ1S_GD, idx * 2 + (qh[:, :, None] >> 15), axis=0).reshape(nb, 8, 32)
    vals *= dl[:, :, None]
    return vals.reshape(nb, QK_K)


_IQ1M_SHIFTS = (0, 3, 6, 9)  # the four 3-bit sub-scales of each scales word


def _fill_iq1_m(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ1_M: 32 groups of 8 per block, ``dl * (grid[idx] +- delta)``.

    Group g takes qs[g] and the nibble g % 2 of qh[g // 2] (3 index bits and
    the delta sign); sub-block scale s covers groups 2s, 2s+1.  Everything
    runs on flat arrays; the 8-value rows are gathered straight into ``out``.
    """
    nb = blocks.shape[0]
    qs = block_field(blocks, 0, "V32").view(np.uint8).reshape(-1)  # [nb * 32]
    qh = block_field(blocks, 32, "V16").view(np.uint8).reshape(-1)  # [nb * 16]
    sc = block_field(blocks, 48, "V8").view("<u2").reshape(-1)  # [nb * 4]
    nib = np.empty(nb * 32, dtype=np.uint8)
    np.bitwise_and(qh, 15, out=nib[0::2])
    np.right_shift(qh, 4, out=nib[1::2])
    # row of _IQ1S_GD: 2 * (qs | (nibble & 7) << 8) + (nibble >> 3)
    row = qs.astype(np.intp)
    row <<= 1
    row |= _IQ1M_NIBBLE_ROW[nib]
    np.take(_IQ1S_GD, row, axis=0, out=out.reshape(-1, 8), mode="wrap")
    w = sc.reshape(nb, 4)
    u = (w[:, 0] >> 12) | ((w[:, 1] >> 8) & 0x00F0) | ((w[:, 2] >> 4) & 0x0F00) | (w[:, 3] & 0xF000)
    sub = np.empty(nb * 16, dtype=np.uint16)
    for k, sh in enumerate(_IQ1M_SHIFTS):
        np.right_shift(sc, sh, out=sub[k::4])
    sub &= 7
    sub <<= 1
    sub += 1
    dl = np.repeat(f16_to_f32(u.astype(np.uint16)), 16) * sub.astype(np.float32)
    out.reshape(-1)[...] *= np.repeat(dl, 16)


# nibble (3 index bits, delta sign) -> its part of the _IQ1S_GD row number
_IQ1M_NIBBLE_ROW = ((np.arange(16) & 7) << 9 | (np.arange(16) >> 3)).astype(np.intp)


dequantize_iq1_m = decoder(QK_K, _fill_iq1_m)


def _fill_iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_NL blocks [nb, 18] -> float32 [nb, 32]: ``d * kvalues[q]``."""
    q = nibble_lookup(block_field(blocks, 2, "V16").view(np.uint8).reshape(-1, 16), _KV_PAIRS)
    scale_rows(out, q, _d16(blocks))


dequantize_iq4_nl = decoder(QK4_NL, _fill_iq4_nl)


def _fill_iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_XS blocks [nb, 136] -> float32 [nb, 256]: ``d * (sc - 32) * kvalues[q]`` per 32."""
    nb = blocks.shape[0]
    d = _d16(blocks)
    sh = _u16(blocks[:, 2:4])  # [nb, 1]
    sl = blocks[:, 4:8]
    lo = np.stack([sl & 15, sl >> 4], axis=-1).reshape(nb, 8).astype(np.int32)
    hi = ((sh >> np.arange(0, 16, 2, dtype=np.uint16)) & 3).astype(np.int32)
    dl = d[:, None] * ((lo | (hi << 4)) - 32).astype(np.float32)  # [nb, 8]
    qs = block_field(blocks, 8, "V128").view(np.uint8).reshape(nb * 8, 16)
    scale_rows(out.reshape(nb * 8, 32), nibble_lookup(qs, _KV_PAIRS), dl)


dequantize_iq4_xs = decoder(QK_K, _fill_iq4_xs)


DEQUANTIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "IQ2_XXS": _chunked(dequantize_iq2_xxs, QK_K),
    "IQ2_XS": _chunked(dequantize_iq2_xs, QK_K),
    "IQ2_S": _chunked(dequantize_iq2_s, QK_K),
    "IQ3_XXS": _chunked(dequantize_iq3_xxs, QK_K),
    "IQ3_S": _chunked(dequantize_iq3_s, QK_K),
    "IQ1_S": _chunked(dequantize_iq1_s, QK_K),
    "IQ1_M": dequantize_iq1_m,
    "IQ4_NL": dequantize_iq4_nl,  # chunks itself
    "IQ4_XS": dequantize_iq4_xs,
}


# ------------------------------------------------------------------ quantize
#
# ggml's best_index_int8(16, kvalues_iq4nl, x) returns the nearest code-book
# entry, ties going up.  The decision points (v[k-1]+v[k])/2 are all
# half-integers and ggml's float32 comparison ``x - v[k-1] < v[k] - x`` flips
# exactly there (checked exhaustively around each point by the tests), so the
# index is a function of floor(2x): one table lookup instead of a search.

_LUT_HALF = 512  # floor(2x) in [-512, 512): covers |x| <= 256
_THRESH2 = (KVALUES_IQ4NL[:-1].astype(np.int32) + KVALUES_IQ4NL[1:]).astype(np.int32)  # 2*midpoint


def _floor2_tables() -> tuple[np.ndarray, np.ndarray]:
    """floor(2x) -> (index, value) tables, laid out for negative-index wraparound."""
    f = np.arange(-_LUT_HALF, _LUT_HALF)
    idx = np.searchsorted(_THRESH2, f, side="right")  # number of thresholds <= f
    order = np.argsort(f % (2 * _LUT_HALF))  # position p holds f == p (mod 1024)
    return idx[order].astype(np.uint8), _KV_F32[idx[order]]


_F2_INDEX, _F2_VALUE = _floor2_tables()


def _floor2(al: np.ndarray, clip: bool) -> np.ndarray:
    """floor(2*al) as intp; exact because doubling a float32 is exact."""
    a2 = al * F32(2)
    np.floor(a2, out=a2)
    if clip:  # only the final passes can leave [-256, 256): inf, NaN, huge ratios
        # fmin/fmax send NaN to the top code, as ggml's binary search does
        np.fmax(np.fmin(a2, _LUT_HALF - 1, out=a2), -_LUT_HALF, out=a2)
    return a2.astype(np.intp)


def best_index_iq4nl(x: np.ndarray) -> np.ndarray:
    """ggml's best_index_int8(16, kvalues_iq4nl, x) for every element, uint8."""
    return _F2_INDEX[_floor2(np.asarray(x, dtype=np.float32), clip=True)]


def _trial(
    X: np.ndarray, W: np.ndarray, id2: np.ndarray, safe: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """One scale trial over sub-blocks (columns): (sum w*q*x, sum w*q*q).

    ``id2`` is twice the inverse scale; 2*fl(id*x) == fl(2*id*x) exactly.
    For finite inputs |x*id| <= 134, so the table index needs no clipping;
    ``safe`` clips for inputs holding inf/NaN (NaN -> top code, as ggml).
    """
    a2 = X * id2
    np.floor(a2, out=a2)
    if safe:
        np.fmax(np.fmin(a2, _LUT_HALF - 1, out=a2), -_LUT_HALF, out=a2)
    q = _F2_VALUE[a2.astype(np.intp)]
    wq = W * q
    sumqx = _seqsum(wq * X)
    wq *= q
    sumq2 = _seqsum(wq)
    return sumqx, sumq2


def _subblock_scales(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """The ntry=7 scale search of quantize_row_iq4_nl_impl for every
    32-value sub-block (the columns of ``X`` [32, m]); 0 for all-tiny blocks."""
    m = X.shape[1]
    ax = np.abs(X)
    safe = not np.isfinite(ax).all()  # only reachable by calling the codec directly
    if safe:
        ax = np.where(ax == ax, ax, F32(-1))  # ggml's ``>`` never picks a NaN
    jmax = np.argmax(ax, axis=0)  # first maximum, as ggml's strict ``>``
    cols = np.arange(m)
    amax = ax[jmax, cols]
    valid = amax >= _GROUP_MAX_EPS
    mx = np.where(valid, X[jmax, cols], F32(1))

    d = -mx / F32(KVALUES_IQ4NL[0])
    sumqx, sumq2 = _trial(X, W, (F32(1) / d) * F32(2), safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        pos = sumq2 > 0
        d = np.where(pos, sumqx / sumq2, F32(0))
        best = d * sumqx
        for itry in range(-7, 8):
            idt = F32(itry + int(KVALUES_IQ4NL[0])) / mx
            sqx, sq2 = _trial(X, W, idt * F32(2), safe)
            upd = (sq2 > 0) & (sqx * sqx > best * sq2)
            if upd.any():
                dn = sqx / sq2
                d = np.where(upd, dn, d)
                best = np.where(upd, dn * sqx, best)
    return np.where(valid, d, F32(0)).astype(np.float32)


def _cint(x: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int`` bit for bit, as int64: add 1.5*2^23 in float32
    and keep the low mantissa bits.  Round-half-even for |x| < 2^22, and the
    same deterministic garbage as ggml otherwise (NaN -> 0, inf -> -2^22)."""
    return nearest_int(x).astype(np.int64)


def _c_max(S: np.ndarray) -> np.ndarray:
    """ggml's running ``m = MAX(m, s)`` from 0 over the columns of S [c, n]:
    order-dependent with NaN (a NaN is taken, then dropped by the next s)."""
    m = np.zeros(S.shape[0], dtype=np.float32)
    for j in range(S.shape[1]):
        m = np.where(m > S[:, j], m, S[:, j])
    return m


_inverse = inv_or_zero  # ggml's ``v ? 1/v : 0``


def _iq4_chunk(x: np.ndarray, qw: np.ndarray | None, sb: int) -> np.ndarray:
    """Quantize super-blocks ``x`` [c, sb] (sb = 32: IQ4_NL, 256: IQ4_XS) -> bytes."""
    c = x.shape[0]
    nb = sb // 32
    m = c * nb
    X = np.ascontiguousarray(x.reshape(m, 32).T)  # [32, m]: one sub-block per column
    if qw is None:
        W = X * X
    else:
        # sigma2 runs over the whole super-block, in element order
        xs = np.ascontiguousarray(x.T)
        sigma2 = _seqsum(xs * xs) * F32(2.0 / sb)
        QW = np.ascontiguousarray(qw.reshape(m, 32).T)
        W = QW * np.sqrt(np.repeat(sigma2, nb)[None, :] + X * X)
    scales = _subblock_scales(X, W)

    if nb == 1:  # IQ4_NL: the block scale is the sub-block scale
        out = np.empty((c, 18), dtype=np.uint8)
        out[:, 0:2] = f32_to_f16_bits(scales).reshape(c, 1).view(np.uint8)
        L = best_index_iq4nl(X * _inverse(scales)[None, :]).T
        out[:, 2:] = pack_nibbles(L)
        return out

    # IQ4_XS: 6-bit sub-block scales relative to a super-block scale
    S = scales.reshape(c, nb)
    aS = np.abs(S)
    j = np.argmax(np.where(aS == aS, aS, F32(-1)), axis=1)  # ggml's ``>`` skips NaN
    rows = np.arange(c)
    max_scale = np.where(aS[rows, j] > 0, S[rows, j], F32(0))
    d = -max_scale / F32(32)
    ls = np.clip(_cint(_inverse(d)[:, None] * S), -32, 31).astype(np.int32)  # [c, nb]
    dl = d[:, None] * ls.astype(np.float32)
    L = best_index_iq4nl(X * _inverse(dl).reshape(m)[None, :]).T.reshape(c, sb)
    u = (ls + 32).astype(np.uint16)
    out = np.empty((c, 136), dtype=np.uint8)
    out[:, 0:2] = f32_to_f16_bits(d).reshape(c, 1).view(np.uint8)
    sh = np.bitwise_or.reduce((u >> 4) << (2 * np.arange(nb, dtype=np.uint16)), axis=1)
    out[:, 2:4] = sh.astype("<u2").reshape(c, 1).view(np.uint8)
    lo = (u & 15).astype(np.uint8)
    out[:, 4:8] = lo[:, 0::2] | (lo[:, 1::2] << 4)
    out[:, 8:] = pack_nibbles(L)
    return out


_CHUNK_ELEMS = 1 << 16  # elements per quantization step (temporaries stay in L2)


def _quantize_rows(
    rows: np.ndarray,
    imatrix: np.ndarray | None,
    sb: int,
    tsize: int,
    chunk_fn: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
) -> np.ndarray:
    """Run ``chunk_fn`` (super-blocks [c, sb], their imatrix slices) over
    cache-sized chunks of rows [nrows, n]; returns bytes [nrows, n/sb*tsize]."""
    return quantize_blocks(rows, imatrix, sb, tsize, chunk_fn, max(1, _CHUNK_ELEMS // sb))


def quantize_iq4_nl(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 32k] -> IQ4_NL bytes [nrows, 18k], as ggml's quantize_iq4_nl."""
    return _quantize_rows(rows, imatrix, QK4_NL, 18, lambda x, w: _iq4_chunk(x, w, QK4_NL))


def quantize_iq4_xs(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] -> IQ4_XS bytes [nrows, 136k], as ggml's quantize_iq4_xs."""
    return _quantize_rows(rows, imatrix, QK_K, 136, lambda x, w: _iq4_chunk(x, w, QK_K))


# ------------------------------------------- IQ3_XXS / IQ3_S / IQ2_S quantize
#
# ggml's quantize_row_iq3_xxs_impl, quantize_row_iq3_s_impl and
# quantize_row_iq2_s_impl share one search.  A group of ``dim`` levels l
# (value 2l+1; dim 4 with 3-bit levels for IQ3, dim 8 with 2-bit levels for
# IQ2_S) is packed as u = sum l_i << (bits*i); ``map[u]`` is its grid index,
# or -1 when the point is not on the grid, in which case the best of its
# precomputed neighbours (iq3xs_init_impl / iq2xs_init_impl) is taken.  The
# level grids are the dequantization grids renumbered by level.


_NB_STEP = 8  # neighbour-list positions searched per vectorised step


class _NeighbourGrid:
    """Grid, map and neighbour lists of ggml's iq3xs/iq2xs_init_impl."""

    def __init__(self, grid: np.ndarray, nwant: int, kmax: int) -> None:
        n, self.dim = grid.shape
        self.bits = 3 if self.dim == 4 else 2
        self.kmax = kmax  # quantizers clip levels to 0..kmax-1
        self.shifts = self.bits * np.arange(self.dim)
        levels = np.unique(grid)  # the distinct byte values, in level order
        self.levels = np.searchsorted(levels, grid).astype(np.int64)  # [n, dim]
        self.q_t = np.ascontiguousarray((2 * self.levels + 1).T.astype(np.float32))
        self.levels_t = np.ascontiguousarray(self.levels.T)
        size = 1 << (self.bits * self.dim)
        self.map = np.full(size, -1, dtype=np.int64)
        self.map[(self.levels << self.shifts).sum(axis=1)] = np.arange(n)
        # Neighbours of every reachable off-grid point: the grid points within
        # its ``nwant`` smallest distinct squared distances, ordered by
        # (distance, index) -- ggml's qsort of pairs, i.e. a stable sort.
        reach = np.arange(size)
        reach = reach[(((reach[:, None] >> self.shifts) & ((1 << self.bits) - 1)) < kmax).all(1)]
        off = reach[self.map[reach] < 0]
        gq = (2 * self.levels + 1).astype(np.int32)
        cols: list[np.ndarray] = []
        counts = np.zeros(size, dtype=np.int64)
        for s0 in range(0, len(off), 512):
            pts = off[s0 : s0 + 512]
            pos = 2 * ((pts[:, None] >> self.shifts) & ((1 << self.bits) - 1)) + 1
            d2 = ((gq[None, :, :] - pos[:, None, :].astype(np.int32)) ** 2).sum(axis=-1)
            order = np.argsort(d2, axis=1, kind="stable")
            ds = np.take_along_axis(d2, order, axis=1)
            rank = np.cumsum(np.diff(ds, axis=1, prepend=-1) != 0, axis=1)
            keep = rank <= nwant  # a prefix of each row
            counts[pts] = keep.sum(axis=1)
            cols.append(order)
        width = int(counts.max())
        self.nb_count = counts
        # compact rows: only the reachable off-grid points get a column
        self.off_id = np.full(size, -1, dtype=np.int64)
        self.off_id[off] = np.arange(len(off))
        self.nb_cols = np.zeros((width, len(off)), dtype=np.int32)  # row j: j-th neighbour
        for s0, order in zip(range(0, len(off), 512), cols):
            pts = off[s0 : s0 + 512]
            self.nb_cols[:, self.off_id[pts]] = order[:, :width].T

    def best_neighbours(
        self,
        u: np.ndarray,
        xv: list[np.ndarray],
        wv: list[np.ndarray],
        scale: np.ndarray,
        values: np.ndarray | None = None,
    ) -> np.ndarray:
        """ggml's iq*_find_best_neighbour for off-grid points ``u`` [g] with
        values ``xv``/weights ``wv`` (``dim`` arrays [g]) at ``scale`` [g]:
        the chosen grid indices [g].  A level l stands for 2l+1, or for
        ``values[point, l]`` when given (iq1_find_best_neighbour2).

        Candidates are visited in list order with ggml's strict ``<``, one
        candidate position at a time; points are sorted by list length so
        that the points still searching at position j are a prefix."""
        cnt = self.nb_count[u]
        ui = self.off_id[u]
        order = np.argsort(-cnt, kind="stable")
        u, ui, cnt, scale = u[order], ui[order], cnt[order], scale[order]
        xv = [a[order] for a in xv]
        wv = [a[order] for a in wv]
        g = len(u)
        if values is not None:
            nl = values.shape[1]
            vflat = values[order].reshape(-1)
            rows = np.arange(g) * nl
        best = np.full(g, np.finfo(np.float32).max, dtype=np.float32)  # FLT_MAX
        choice = np.zeros(g, dtype=np.intp)
        inf = np.float32(np.inf)
        for j0 in range(0, int(cnt.max()), _NB_STEP):
            # positions j0..j0+step-1 at once for the points still searching
            n = int(np.searchsorted(-cnt, -j0, side="left"))  # points with cnt > j0
            cand = np.take(self.nb_cols[j0 : j0 + _NB_STEP], ui[:n], axis=1).astype(np.intp)
            live = np.arange(j0, j0 + cand.shape[0])[:, None] < cnt[None, :n]
            s = scale[:n]
            d2 = np.zeros(cand.shape, dtype=np.float32)
            for i in range(self.dim):  # d2 += w*diff*diff, in element order
                if values is None:
                    q = self.q_t[i][cand]
                else:
                    q = vflat[rows[:n] + self.levels_t[i][cand]]
                diff = s * q - xv[i][:n]
                term = wv[i][:n] * diff
                term *= diff
                d2 += term
            d2 = np.where(live, d2, inf)
            k = np.argmin(d2, axis=0)  # first minimum = ggml's strict ``<`` in list order
            cols = np.arange(n)
            dmin = d2[k, cols]
            upd = dmin < best[:n]
            best[:n] = np.where(upd, dmin, best[:n])
            choice[:n] = np.where(upd, cand[k, cols], choice[:n])
        out = np.empty(g, dtype=np.intp)
        out[order] = choice
        return out

    def pack(self, lv: np.ndarray) -> np.ndarray:
        """Levels [ngroups*dim, m] -> packed points u [ngroups, m]."""
        l3 = lv.reshape(-1, self.dim, lv.shape[-1])
        u = l3[:, 0].copy()
        for i in range(1, self.dim):
            u |= l3[:, i] << (self.bits * i)
        return u


@functools.cache
def _grid(name: str) -> _NeighbourGrid:
    """The neighbour tables, built on first use (they take a moment)."""
    if name == "IQ3_XXS":
        return _NeighbourGrid(IQ3XXS_GRID, nwant=2, kmax=8)
    if name == "IQ3_S":
        return _NeighbourGrid(IQ3S_GRID, nwant=3, kmax=8)
    if name == "IQ2_XXS":
        return _NeighbourGrid(IQ2XXS_GRID, nwant=2, kmax=3)
    if name == "IQ2_XS":
        return _NeighbourGrid(IQ2XS_GRID, nwant=2, kmax=3)
    if name == "IQ1":
        return _NeighbourGrid(IQ1S_GRID, nwant=3, kmax=3)
    return _NeighbourGrid(IQ2S_GRID, nwant=1, kmax=3)


def _grid_levels(
    g: _NeighbourGrid,
    X: np.ndarray,
    Wa: np.ndarray,
    idv: np.ndarray,
    scale: np.ndarray,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Levels [rows, m] of every group (rows dim*k..dim*k+dim-1) at inverse
    scale ``idv`` [m], moving off-grid groups to their best neighbour at
    ``scale``; also the on-grid flags [groups, m].  ``groups`` limits the
    neighbour search (the others keep their rounded levels)."""
    a = (X * idv - F32(1)) * F32(0.5)
    lv = np.clip(_cint(a), 0, g.kmax - 1)
    u = g.pack(lv)
    on = g.map[u] >= 0
    off = ~on if groups is None else (~on & groups)
    kk, mm = np.nonzero(off)
    if kk.size:
        m, dim = X.shape[1], g.dim
        base = (dim * m) * kk + mm  # flat index of element 0 of each group
        Xf, Wf = X.reshape(-1), Wa.reshape(-1)
        xv = [Xf[base + i * m] for i in range(dim)]
        wv = [Wf[base + i * m] for i in range(dim)]
        gi = g.best_neighbours(u[kk, mm], xv, wv, scale[mm])
        lv.reshape(-1, dim, m)[kk, :, mm] = g.levels[gi]
    return lv, on


def _grid_sums(WX: np.ndarray, W: np.ndarray, lv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sum (w*x)*q, sum (w*q)*q) over the rows, q = 2l+1, in element order."""
    q = (2 * lv + 1).astype(np.float32)
    sumqx = _seqsum(WX * q)
    wq = W * q
    wq *= q
    return sumqx, _seqsum(wq)


def _grid_subblocks(
    g: _NeighbourGrid,
    X: np.ndarray,
    W: np.ndarray,
    mx: np.ndarray,
    tries: int,
    step: np.float32,
    on_init: bool,
    final: str,
    scale0: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The per-sub-block scale search shared by the grid quantizers for the
    columns of the magnitudes ``X`` [rows, m] (weights ``W``): trial inverse
    scales (2*kmax-1 + is*step)/mx, then a final re-quantization at the best
    scale -- ``final`` = "offgrid" (only groups that were off the grid, if
    any), "all" (every group, if any was off) or "always" (every group).
    ``scale0`` is the scale kept when no trial improves (default mx/(2kmax-1)).
    Returns (scale [m], levels [rows, m])."""
    rows, m = X.shape
    ngroups = rows // g.dim
    top = F32(2 * g.kmax - 1)
    Wa = np.sqrt(W)
    WX = W * X
    best = np.zeros(m, dtype=np.float32)
    scale = (mx / top) if scale0 is None else scale0.astype(np.float32)
    L = np.zeros((rows, m), dtype=np.int64)
    on = np.full((ngroups, m), on_init)
    with np.errstate(divide="ignore", invalid="ignore"):
        for is_ in range(-tries, tries + 1):
            idv = (top + F32(is_) * step) / mx
            lv, on_aux = _grid_levels(g, X, Wa, idv, F32(1) / idv)
            sumqx, sumq2 = _grid_sums(WX, W, lv)
            upd = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
            if upd.any():
                sc = sumqx / sumq2
                scale = np.where(upd, sc, scale)
                best = np.where(upd, sc * sumqx, best)
                L[:, upd] = lv[:, upd]
                on[:, upd] = on_aux[:, upd]
        fin = scale > 0
        if final != "always":
            fin &= (~on).any(axis=0)
        if fin.any():
            f = np.flatnonzero(fin)
            sc = scale[f]
            groups = ~on[:, f] if final == "offgrid" else None
            lv, _ = _grid_levels(g, X[:, f], Wa[:, f], F32(1) / sc, sc, groups)
            if groups is None:
                L[:, f] = lv
            else:
                keep = np.repeat(groups, g.dim, axis=0)
                L[:, f] = np.where(keep, lv, L[:, f])
            sumqx, sumq2 = _grid_sums(WX[:, f], W[:, f], L[:, f])
            scale[f] = np.where(sumq2 > 0, sumqx / sumq2, sc)
    return scale, L


def _grid_prepare(
    x: np.ndarray, qw: np.ndarray | None, sub: int, plain_sigma: bool, two: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Sub-blocks [c*256/sub, sub] of super-blocks x [c, 256] and their
    importance weights: qw*sqrt(sigma2 + x*x) with an imatrix, else x*x
    (IQ3) or 0.25*sigma2 + x*x (IQ2_S, ``plain_sigma``)."""
    c = x.shape[0]
    nsub = QK_K // sub
    xs = np.ascontiguousarray(x.T)
    sumx2 = _seqsum(xs * xs)
    # 2*sumx2/QK_K for IQ3/IQ2_S, sumx2/QK_K for IQ2_XXS/IQ2_XS
    sigma2 = ((F32(2) * sumx2) if two else sumx2) / F32(QK_K)
    sig = np.repeat(sigma2, nsub)[:, None]
    xb = x.reshape(c * nsub, sub)
    if qw is not None:
        return xb, qw.reshape(c * nsub, sub) * np.sqrt(sig + xb * xb)
    if plain_sigma:
        return xb, F32(0.25) * sig + xb * xb
    return xb, xb * xb


def _superblock_scales(S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sub-block scales S [c, n] -> (max_scale, d = max/31, 4-bit codes [c, n])."""
    max_scale = _c_max(S)
    d = max_scale / F32(31)
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.clip(_cint((((F32(1) / d)[:, None] * S) - F32(1)) * F32(0.5)), 0, 15)
    return max_scale, d, ls.astype(np.uint32)


def _parity_signs(xb: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Magnitudes [m, sub] and 7-bit sign codes [m, sub/8] of sub-blocks ``xb``.

    The ksigns tables hold 7 sign bits plus parity, so an 8-group with an odd
    number of negatives has the sign of its least important element (first
    minimum of w*x*x) flipped -- that element's magnitude becomes negative.
    """
    m, sub = xb.shape
    x8 = xb.reshape(m, sub // 8, 8)
    neg = x8 < 0
    xval = np.where(neg, -x8, x8)
    bits = (neg.astype(np.int64) << np.arange(8)).sum(axis=-1)
    odd = (neg.sum(axis=-1) % 2) == 1
    imin = np.argmin((W.reshape(x8.shape) * x8) * x8, axis=-1)  # first minimum
    oi, ok = np.nonzero(odd)
    xval[oi, ok, imin[oi, ok]] *= F32(-1)
    bits[oi, ok] ^= 1 << imin[oi, ok]
    return xval.reshape(m, sub), bits & 127


def _parity_subblocks(
    x: np.ndarray, qw: np.ndarray | None, sub: int, eps: np.float32, two: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Set-up shared by the ksigns-parity types (IQ3_XXS, IQ2_XXS, IQ2_XS):
    magnitudes, weights, 7-bit sign codes and maxima of the ``sub``-value
    sub-blocks, and the indices of those worth searching (max >= ``eps``)."""
    xb, W = _grid_prepare(x, qw, sub, plain_sigma=False, two=two)
    xval, signs = _parity_signs(xb, W)
    mx = xval.max(axis=1)
    return xval, W, signs, mx, np.flatnonzero(mx >= eps)


def _columns(xval: np.ndarray, W: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sub-blocks ``v`` of magnitudes and weights, transposed to the [sub, n]
    layout _grid_subblocks searches in (contiguous, so its sums vectorise)."""
    return np.ascontiguousarray(xval[v].T), np.ascontiguousarray(W[v].T)


def _positive_scales(sc: np.ndarray, sg: np.ndarray, mask: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml stores only positive sub-block scales: where the search found a
    negative one ("should never happen" there), flip every sign bit of that
    sub-block instead.  ``mask`` keeps the stored sign bits (255, or 127 when
    the 8th bit is implied by parity).  ``sg`` is a copy; returns (|sc|, sg)."""
    flip = sc < 0
    sg[flip] = ~sg[flip] & mask
    return np.where(flip, -sc, sc), sg


def _iq3_xxs_chunk(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ3_XXS blocks [c, 98]."""
    c = x.shape[0]
    m = c * 8
    g = _grid("IQ3_XXS")
    # GROUP_MAX_EPS_IQ3_XXS; other sub-blocks stay all-zero
    xval, W, signs, mx, v = _parity_subblocks(x, qw, 32, F32(1e-8), two=True)

    scales = np.zeros(m, dtype=np.float32)
    gidx = np.zeros((m, 8), dtype=np.int64)
    sas = np.zeros(m, dtype=np.uint32)
    if v.size:
        X, Wt = _columns(xval, W, v)
        sc, L = _grid_subblocks(g, X, Wt, mx[v], 15, F32(0.2), True, "offgrid")
        sc, sg = _positive_scales(sc, signs[v], 127)
        gidx[v] = g.map[g.pack(L)].T
        sas[v] = (sg << np.array([0, 7, 14, 21])).sum(axis=1).astype(np.uint32)
        scales[v] = sc

    max_scale, d, ls = _superblock_scales(scales.reshape(c, 8))
    sas = sas.reshape(c, 8) | (ls << 28)
    out = np.zeros((c, 98), dtype=np.uint8)
    out[:, 0:2] = f32_to_f16_bits(d * F32(1.0125)).reshape(c, 1).view(np.uint8)
    out[:, 2:66] = gidx.reshape(c, 64)
    out[:, 66:98] = sas.astype("<u4").view(np.uint8).reshape(c, 32)
    out[max_scale == 0] = 0  # ggml clears the whole block
    return out


def _iq3_s_chunk(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ3_S blocks [c, 110]."""
    c = x.shape[0]
    m = c * 8
    g = _grid("IQ3_S")
    xb, W = _grid_prepare(x, qw, 32, plain_sigma=False)
    neg = xb < 0
    xval = np.where(neg, -xb, xb)
    signs = np.packbits(neg.reshape(m, 4, 8), axis=-1, bitorder="little")[..., 0]  # [m, 4]
    mx = xval.max(axis=1)
    valid = mx != 0

    scales = np.zeros(m, dtype=np.float32)
    gidx = np.zeros((m, 8), dtype=np.int64)
    v = np.flatnonzero(valid)
    if v.size:
        X, Wt = _columns(xval, W, v)
        sc, L = _grid_subblocks(g, X, Wt, mx[v], 9, F32(0.2), False, "all")
        sc, signs[v] = _positive_scales(sc, signs[v], 255)
        gidx[v] = g.map[g.pack(L)].T
        scales[v] = sc

    out = np.zeros((c, 110), dtype=np.uint8)
    # ggml does not advance its qs/signs pointers past an all-zero sub-block,
    # so later sub-blocks land in earlier slots; qh is indexed by sub-block.
    vm = valid.reshape(c, 8)
    slot = np.cumsum(vm, axis=1) - vm  # destination slot of each sub-block
    rr, ib = np.nonzero(vm)
    qs = np.zeros((c, 8, 8), dtype=np.uint8)
    sg = np.zeros((c, 8, 4), dtype=np.uint8)
    g8 = gidx.reshape(c, 8, 8)
    qs[rr, slot[rr, ib]] = (g8[rr, ib] & 255).astype(np.uint8)
    sg[rr, slot[rr, ib]] = signs.reshape(c, 8, 4)[rr, ib]
    qh = ((g8 >> 8) << np.arange(8)).sum(axis=-1).astype(np.uint8)
    out[:, 2:66] = qs.reshape(c, 64)
    out[:, 66:74] = qh
    out[:, 74:106] = sg.reshape(c, 32)

    max_scale, d, ls = _superblock_scales(scales.reshape(c, 8))
    ls = ls.astype(np.uint8)
    nz = max_scale != 0  # otherwise ggml leaves d and the scales at zero
    out[nz, 0:2] = f32_to_f16_bits(d[nz] * F32(1.033)).reshape(-1, 1).view(np.uint8)
    out[nz, 106:110] = (ls[:, 0::2] | (ls[:, 1::2] << 4))[nz]
    return out


def _iq2_s_chunk(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ2_S blocks [c, 82] (16-value sub-blocks)."""
    c = x.shape[0]
    m = c * 16
    g = _grid("IQ2_S")
    xb, W = _grid_prepare(x, qw, 16, plain_sigma=True)
    neg = xb < 0
    xval = np.where(neg, -xb, xb)
    signs = np.packbits(neg.reshape(m, 2, 8), axis=-1, bitorder="little")[..., 0]  # [m, 2]
    mx = xval.max(axis=1)
    valid = mx >= F32(1e-8)  # GROUP_MAX_EPS_IQ2_S; others stay all-zero

    scales = np.zeros(m, dtype=np.float32)
    gidx = np.zeros((m, 2), dtype=np.int64)
    v = np.flatnonzero(valid)
    if v.size:
        X, Wt = _columns(xval, W, v)
        sc, L = _grid_subblocks(g, X, Wt, mx[v], 9, F32(0.1), True, "offgrid")
        sc, signs[v] = _positive_scales(sc, signs[v], 255)
        gidx[v] = g.map[g.pack(L)].T
        scales[v] = sc
    signs[~valid] = 0

    out = np.zeros((c, 82), dtype=np.uint8)
    g32 = gidx.reshape(c, 32)  # i8 = 2*ib + k
    out[:, 2:34] = (g32 & 255).astype(np.uint8)
    out[:, 34:66] = signs.reshape(c, 32)
    out[:, 66:74] = (
        ((g32 >> 8).reshape(c, 8, 4) << (2 * np.arange(4))).sum(axis=-1).astype(np.uint8)
    )
    max_scale, d, ls = _superblock_scales(scales.reshape(c, 16))
    ls = ls.astype(np.uint8)
    nz = max_scale != 0  # otherwise ggml leaves d and the scales at zero
    out[nz, 0:2] = f32_to_f16_bits(d[nz] * F32(0.9875)).reshape(-1, 1).view(np.uint8)
    out[nz, 74:82] = (ls[:, 0::2] | (ls[:, 1::2] << 4))[nz]
    return out


def _iq2_xxs_chunk(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ2_XXS blocks [c, 66] (imatrix required)."""
    c = x.shape[0]
    m = c * 8
    g = _grid("IQ2_XXS")
    xval, W, signs, _, v = _parity_subblocks(x, qw, 32, _GROUP_MAX_EPS, two=False)
    scales = np.zeros(m, dtype=np.float32)
    gidx = np.zeros((m, 4), dtype=np.int64)
    words = np.zeros(m, dtype=np.uint32)
    if v.size:
        X, Wt = _columns(xval, W, v)
        # the trials start from make_qp_quants' scale (levels 0..3)
        sc0, _ = make_qp_quants(X, Wt, 4)
        eff = sc0 * F32(3)
        ok = eff > 0  # otherwise the sub-block stays all-zero
        v, X, Wt, sc0, eff = v[ok], X[:, ok], Wt[:, ok], sc0[ok], eff[ok]
    if v.size:
        sc, L = _grid_subblocks(g, X, Wt, eff, 6, F32(0.1), True, "always", scale0=sc0)
        sc, sg = _positive_scales(sc, signs[v], 127)
        gidx[v] = g.map[g.pack(L)].T
        words[v] = (sg << np.array([0, 7, 14, 21])).sum(axis=1).astype(np.uint32)
        scales[v] = sc

    max_scale, d, ls = _superblock_scales(scales.reshape(c, 8))
    out = np.zeros((c, 8, 8), dtype=np.uint8)  # per sub-block: 4 indices, u32 signs|scale
    out[:, :, 0:4] = gidx.reshape(c, 8, 4)
    words = words.reshape(c, 8) | (ls << 28)
    out[:, :, 4:8] = words.astype("<u4").view(np.uint8).reshape(c, 8, 4)
    blocks = np.zeros((c, 66), dtype=np.uint8)
    blocks[:, 0:2] = f32_to_f16_bits(d).reshape(c, 1).view(np.uint8)
    blocks[:, 2:] = out.reshape(c, 64)
    blocks[max_scale == 0] = 0  # ggml zeroes qs and leaves d = 0
    return blocks


def _iq2_xs_chunk(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ2_XS blocks [c, 74] (imatrix required)."""
    c = x.shape[0]
    m = c * 16
    g = _grid("IQ2_XS")
    xval, W, signs, mx, v = _parity_subblocks(x, qw, 16, _GROUP_MAX_EPS, two=False)
    scales = np.zeros(m, dtype=np.float32)
    q2 = np.zeros((m, 2), dtype=np.uint16)
    if v.size:
        X, Wt = _columns(xval, W, v)
        sc, L = _grid_subblocks(g, X, Wt, mx[v], 9, F32(0.1), True, "offgrid")
        sc, sg = _positive_scales(sc, signs[v], 127)
        q2[v] = (g.map[g.pack(L)].T | (sg << 9)).astype(np.uint16)
        scales[v] = sc

    max_scale, d, ls = _superblock_scales(scales.reshape(c, 16))
    ls = ls.astype(np.uint8)
    out = np.zeros((c, 74), dtype=np.uint8)
    nz = max_scale != 0  # otherwise ggml leaves everything at zero
    out[nz, 0:2] = f32_to_f16_bits(d[nz]).reshape(-1, 1).view(np.uint8)
    out[nz, 2:66] = q2.reshape(c, 32).astype("<u2").view(np.uint8)[nz]
    out[nz, 66:74] = (ls[:, 0::2] | (ls[:, 1::2] << 4))[nz]
    return out


def _need_imatrix(name: str, imatrix: np.ndarray | None) -> np.ndarray:
    if imatrix is None:
        raise ImatrixRequired(
            f"{name} cannot be quantized without an importance matrix (ggml asserts one)",
            field="imatrix",
            expected="float32 [n_per_row]",
            found="None",
        )
    return imatrix


def quantize_iq2_xxs(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] + imatrix -> IQ2_XXS bytes [nrows, 66k], as ggml's quantize_iq2_xxs."""
    return _quantize_rows(rows, _need_imatrix("IQ2_XXS", imatrix), QK_K, 66, _iq2_xxs_chunk)


def quantize_iq2_xs(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] + imatrix -> IQ2_XS bytes [nrows, 74k], as ggml's quantize_iq2_xs."""
    return _quantize_rows(rows, _need_imatrix("IQ2_XS", imatrix), QK_K, 74, _iq2_xs_chunk)


def quantize_iq3_xxs(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] -> IQ3_XXS bytes [nrows, 98k], as ggml's quantize_iq3_xxs."""
    return _quantize_rows(rows, imatrix, QK_K, 98, _iq3_xxs_chunk)


def quantize_iq2_s(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] -> IQ2_S bytes [nrows, 82k], as ggml's quantize_iq2_s."""
    return _quantize_rows(rows, imatrix, QK_K, 82, _iq2_s_chunk)


def quantize_iq3_s(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] -> IQ3_S bytes [nrows, 110k], as ggml's quantize_iq3_s."""
    return _quantize_rows(rows, imatrix, QK_K, 110, _iq3_s_chunk)


# ------------------------------------------------------------ IQ1_S quantize
#
# ggml's quantize_row_iq1_s_impl: three values per element (-1, 0, 1, all
# shifted by +-IQ1S_DELTA); the best two split points of the sorted values are
# found exhaustively, then off-grid 8-groups move to the nearest grid point.

_IQ1_XP = np.array([-1 + 0.125, 0.125, 1 + 0.125], dtype=np.float32)
_IQ1_XM = np.array([-1 - 0.125, -0.125, 1 - 0.125], dtype=np.float32)


def _iq1_split_search(
    sx: np.ndarray, sw: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The exhaustive (i1, i2, shift) search over prefix sums sx, sw [n+1, m]
    of the sorted values: (scale, i1, i2, shift) per column, shift 0 = none."""
    n, m = sx.shape[0] - 1, sx.shape[1]
    best = np.full(m, -np.finfo(np.float32).max, dtype=np.float32)  # -FLT_MAX
    scale = np.zeros(m, dtype=np.float32)
    bi1 = np.full(m, -1, dtype=np.int64)
    bi2 = np.full(m, -1, dtype=np.int64)
    shift = np.zeros(m, dtype=np.int64)
    sq = [(_IQ1_XP, 1), (_IQ1_XM, -1)]
    for i1 in range(n + 1):
        a_x, a_w = sx[i1] - sx[0], sw[i1] - sw[0]
        for i2 in range(i1, n + 1):
            b_x, b_w = sx[i2] - sx[i1], sw[i2] - sw[i1]
            c_x, c_w = sx[n] - sx[i2], sw[n] - sw[i2]
            for xv, sh in sq:
                sumqx = (a_x * xv[0] + b_x * xv[1]) + c_x * xv[2]
                sumq2 = ((a_w * xv[0]) * xv[0] + (b_w * xv[1]) * xv[1]) + (c_w * xv[2]) * xv[2]
                upd = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
                if upd.any():
                    with np.errstate(divide="ignore", invalid="ignore"):
                        sc = sumqx / sumq2
                    scale = np.where(upd, sc, scale)
                    best = np.where(upd, sc * sumqx, best)
                    bi1 = np.where(upd, i1, bi1)
                    bi2 = np.where(upd, i2, bi2)
                    shift = np.where(upd, sh, shift)
    return scale, bi1, bi2, shift


def _iq1_s_chunk(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ1_S blocks [c, 50] (imatrix required)."""
    c = x.shape[0]
    m = c * 8
    g = _grid("IQ1")
    xb, W = _grid_prepare(x, qw, 32, plain_sigma=False)
    mx = np.abs(xb).max(axis=1)
    valid = mx >= F32(1e-12)  # GROUP_MAX_EPS_IQ1_S
    scales = np.zeros(m, dtype=np.float32)
    shifts = np.ones(m, dtype=np.int64)
    index = np.zeros((m, 4), dtype=np.int64)
    v = np.flatnonzero(valid)
    if v.size:
        xs, ws = xb[v], W[v]
        # ggml's qsort of (value, index) pairs on the value is a stable merge
        # sort in glibc for 32 pairs, so ties keep their index order
        order = np.argsort(xs, axis=1, kind="stable")
        xo = np.take_along_axis(xs, order, axis=1).T  # [32, mv]
        wo = np.take_along_axis(ws, order, axis=1).T
        wx = wo * xo
        sx = np.zeros((33, len(v)), dtype=np.float32)
        sw = np.zeros((33, len(v)), dtype=np.float32)
        for j in range(32):  # prefix sums in sorted order
            sx[j + 1] = sx[j] + wx[j]
            sw[j + 1] = sw[j] + wo[j]
        with np.errstate(over="ignore", invalid="ignore"):
            sc, i1, i2, sh = _iq1_split_search(sx, sw)
        ok = (i1 >= 0) & (i2 >= 0) & (sh != 0)
        # levels by sorted position: 0 below i1, 1 below i2, else 2
        pos = np.arange(32)[:, None]
        lsorted = np.where(pos < i1, 0, np.where(pos < i2, 1, 2))  # [32, mv]
        L = np.empty_like(lsorted)
        np.put_along_axis(L, order.T, lsorted, axis=0)
        neg = sc < 0
        L = np.where(neg, 2 - L, L)
        sc = np.where(neg, -sc, sc)
        sh = np.where(neg, -sh, sh)
        vals = np.where((sh == 1)[:, None], _IQ1_XP, _IQ1_XM)  # [mv, 3]
        u = g.pack(L)  # [4, mv]
        gi = g.map[u]
        kk, mm = np.nonzero(gi < 0)
        if kk.size:
            Xt, Wt = np.ascontiguousarray(xs.T), np.ascontiguousarray(ws.T)
            xv = [Xt[8 * kk + i, mm] for i in range(8)]
            wv = [Wt[8 * kk + i, mm] for i in range(8)]
            gi[kk, mm] = g.best_neighbours(u[kk, mm], xv, wv, sc[mm], vals[mm])
            # re-fit the scale on the final levels where a group moved
            moved = np.zeros(len(v), dtype=bool)
            moved[mm] = True
            lev = g.levels[gi.T].reshape(len(v), 32)  # [mv, 32]
            q = np.take_along_axis(vals, lev, axis=1).T  # [32, mv]
            wq = Wt * q
            sumqx = _seqsum(wq * Xt)
            wq *= q
            sumq2 = _seqsum(wq)
            refit = moved & (sumqx > 0) & (sumq2 > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                sc = np.where(refit, sumqx / sumq2, sc)
        ok_v = v[ok]
        index[ok_v] = gi.T[ok]
        scales[ok_v] = sc[ok]
        shifts[ok_v] = sh[ok]
        valid[v[~ok]] = False

    out = np.zeros((c, 50), dtype=np.uint8)
    idx = index.reshape(c, 8, 4)
    out[:, 2:34] = (idx & 255).astype(np.uint8).reshape(c, 32)
    qh = ((idx >> 8) << np.array([0, 3, 6, 9])).sum(axis=-1)  # [c, 8]
    S = scales.reshape(c, 8)
    max_scale = _c_max(S)
    d = max_scale / F32(15)
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.clip(_cint((((F32(1) / d)[:, None] * S) - F32(1)) * F32(0.5)), 0, 7)
    ls = ls | np.where(shifts.reshape(c, 8) == -1, 8, 0)
    nz = max_scale != 0  # otherwise ggml leaves d and the scale bits at zero
    qh = np.where(nz[:, None], qh | (ls << 12), qh)
    out[:, 34:50] = qh.astype("<u2").view(np.uint8).reshape(c, 16)
    out[nz, 0:2] = f32_to_f16_bits(d[nz] * F32(1.125)).reshape(-1, 1).view(np.uint8)
    return out


def quantize_iq1_s(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] + imatrix -> IQ1_S bytes [nrows, 50k], as ggml's quantize_iq1_s."""
    return _quantize_rows(rows, _need_imatrix("IQ1_S", imatrix), QK_K, 50, _iq1_s_chunk)


# ------------------------------------------------------------ IQ1_M quantize
#
# ggml's quantize_row_iq1_m_impl: as IQ1_S on 16-value sub-blocks, but each
# 8-half picks its own delta sign (4 combinations), and the super-block scale
# is re-fitted over all 256 values at the end.

_IQ1M_MASKS = np.array([0x00, 0x80, 0x08, 0x88], dtype=np.int64)
_IQ1M_FLIP = np.array([3, 2, 1, 0], dtype=np.int64)


def _iq1_m_split_search(
    px: np.ndarray, pw: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The exhaustive (i1, i2, sign combination) search of IQ1_M over the
    per-half prefix sums px, pw [2, 17, m]: (scale, i1, i2, k) per column."""
    n, m = px.shape[1] - 1, px.shape[2]
    p2, m2 = _IQ1_XP[2], _IQ1_XM[2]
    cp1 = _IQ1_XP[0] * _IQ1_XP[0] - _IQ1_XP[1] * _IQ1_XP[1]
    cp2 = _IQ1_XP[1] * _IQ1_XP[1] - _IQ1_XP[2] * _IQ1_XP[2]
    cm1 = _IQ1_XM[0] * _IQ1_XM[0] - _IQ1_XM[1] * _IQ1_XM[1]
    cm2 = _IQ1_XM[1] * _IQ1_XM[1] - _IQ1_XM[2] * _IQ1_XM[2]
    txs, tws = px[:, n], pw[:, n]  # [2, m] totals per half
    tqp, tqm = txs * p2, txs * m2
    t2p, t2m = (tws * p2) * p2, (tws * m2) * m2
    best = np.full(m, -np.finfo(np.float32).max, dtype=np.float32)  # -FLT_MAX
    scale = np.zeros(m, dtype=np.float32)
    bi1 = np.full(m, -1, dtype=np.int64)
    bi2 = np.full(m, -1, dtype=np.int64)
    bk = np.full(m, -1, dtype=np.int64)
    for i1 in range(n + 1):
        for i2 in range(i1, n + 1):
            sx = px[:, i1] + px[:, i2]  # [2, m]
            qx_p, qx_m = tqp - sx, tqm - sx
            q2_p = (t2p + pw[:, i1] * cp1) + pw[:, i2] * cp2
            q2_m = (t2m + pw[:, i1] * cm1) + pw[:, i2] * cm2
            combos = (
                (qx_p[0] + qx_p[1], q2_p[0] + q2_p[1]),
                (qx_p[0] + qx_m[1], q2_p[0] + q2_m[1]),
                (qx_m[0] + qx_p[1], q2_m[0] + q2_p[1]),
                (qx_m[0] + qx_m[1], q2_m[0] + q2_m[1]),
            )
            for k, (sumqx, sumq2) in enumerate(combos):
                upd = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
                if upd.any():
                    sc = sumqx / sumq2
                    scale = np.where(upd, sc, scale)
                    best = np.where(upd, sc * sumqx, best)
                    bi1 = np.where(upd, i1, bi1)
                    bi2 = np.where(upd, i2, bi2)
                    bk = np.where(upd, k, bk)
    return scale, bi1, bi2, bk


def _iq1_m_values(shift: np.ndarray) -> np.ndarray:
    """Level values [m, 2 halves, 3] for IQ1_M sign combinations ``shift``."""
    first = np.where((shift < 2)[:, None], _IQ1_XP, _IQ1_XM)
    second = np.where((shift % 2 == 0)[:, None], _IQ1_XP, _IQ1_XM)
    return np.stack([first, second], axis=1)


def _iq1_m_chunk(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    """Super-blocks x [c, 256] -> IQ1_M blocks [c, 56]."""
    c = x.shape[0]
    m = c * 16
    g = _grid("IQ1")
    xb, W = _grid_prepare(x, qw, 16, plain_sigma=False)
    mx = np.abs(xb).max(axis=1)
    valid = mx >= F32(1e-7)  # GROUP_MAX_EPS_IQ1_M
    scales = np.zeros(m, dtype=np.float32)
    shifts = np.zeros(m, dtype=np.int64)
    index = np.zeros((m, 2), dtype=np.int64)
    v = np.flatnonzero(valid)
    if v.size:
        xs, ws = xb[v], W[v]
        order = np.argsort(xs, axis=1, kind="stable")  # glibc's stable merge sort
        xo = np.take_along_axis(xs, order, axis=1).T  # [16, mv]
        wo = np.take_along_axis(ws, order, axis=1).T
        half = (order >= 8).T  # [16, mv]: which half each sorted value is in
        wx = wo * xo
        mv = len(v)
        px = np.zeros((2, 17, mv), dtype=np.float32)
        pw = np.zeros((2, 17, mv), dtype=np.float32)
        for j in range(16):  # per-half prefix sums in sorted order
            for h in (0, 1):
                mine = half[j] == bool(h)
                px[h, j + 1] = np.where(mine, px[h, j] + wx[j], px[h, j])
                pw[h, j + 1] = np.where(mine, pw[h, j] + wo[j], pw[h, j])
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            sc, i1, i2, bk = _iq1_m_split_search(px, pw)
        ok = (i1 >= 0) & (i2 >= 0) & (bk >= 0)
        pos = np.arange(16)[:, None]
        lsorted = np.where(pos < i1, 0, np.where(pos < i2, 1, 2))
        L = np.empty_like(lsorted)
        np.put_along_axis(L, order.T, lsorted, axis=0)
        neg = sc < 0
        L = np.where(neg, 2 - L, L)
        sc = np.where(neg, -sc, sc)
        bk = np.where(neg & (bk >= 0), _IQ1M_FLIP[np.clip(bk, 0, 3)], bk)
        vals = _iq1_m_values(bk)  # [mv, 2, 3]
        u = g.pack(L)  # [2, mv]
        gi = g.map[u]
        kk, mm = np.nonzero(gi < 0)
        if kk.size:
            Xt, Wt = np.ascontiguousarray(xs.T), np.ascontiguousarray(ws.T)
            xv = [Xt[8 * kk + i, mm] for i in range(8)]
            wv = [Wt[8 * kk + i, mm] for i in range(8)]
            gi[kk, mm] = g.best_neighbours(u[kk, mm], xv, wv, sc[mm], vals[mm, kk])
            moved = np.zeros(mv, dtype=bool)
            moved[mm] = True
            lev = g.levels[gi.T]  # [mv, 2, 8]
            q = np.take_along_axis(vals, lev, axis=2).reshape(mv, 16).T  # [16, mv]
            wq = Wt * q
            sumqx = _seqsum(wq * Xt)
            wq *= q
            sumq2 = _seqsum(wq)
            refit = moved & (sumqx > 0) & (sumq2 > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                sc = np.where(refit, sumqx / sumq2, sc)
        ok_v = v[ok]
        index[ok_v] = gi.T[ok]
        scales[ok_v] = sc[ok]
        shifts[ok_v] = bk[ok]

    out = np.zeros((c, 56), dtype=np.uint8)
    idx = index.reshape(c, 16, 2)
    out[:, 0:32] = (idx & 255).astype(np.uint8).reshape(c, 32)
    qh = (idx[:, :, 0] >> 8) | ((idx[:, :, 1] >> 8) << 4)  # [c, 16]
    S = scales.reshape(c, 16)
    max_scale = _c_max(S)
    nz = max_scale != 0  # otherwise ggml leaves the scales and sign masks at zero
    d = max_scale / F32(15)
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.clip(_cint((((F32(1) / d)[:, None] * S) - F32(1)) * F32(0.5)), 0, 7)  # [c, 16]
    sh = shifts.reshape(c, 16)
    qh = np.where(nz[:, None], qh | _IQ1M_MASKS[sh], qh)
    out[:, 32:48] = qh.astype(np.uint8)
    # re-fit the super-block scale over all 256 values, in element order
    lev = g.levels[index].reshape(c, 16, 2, 8)
    vals = _iq1_m_values(shifts).reshape(c, 16, 2, 3)
    q = np.take_along_axis(vals, lev, axis=3)  # [c, 16, 2, 8]
    q = q * (2 * ls + 1).astype(np.float32)[:, :, None, None]
    Q = np.ascontiguousarray(q.reshape(c, QK_K).T)
    Wt = np.ascontiguousarray(W.reshape(c, QK_K).T)
    Xt = np.ascontiguousarray(x.T)
    wq = Wt * Q
    sumqx = _seqsum(wq * Xt)
    wq *= Q
    sumq2 = _seqsum(wq)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(sumq2 > 0, sumqx / sumq2, d)
    dbits = f32_to_f16_bits(d * F32(1.1125)).astype(np.int64)  # [c]
    sc16 = (ls.reshape(c, 4, 4) << (3 * np.arange(4))).sum(axis=2)  # [c, 4]
    top = np.stack(
        [(dbits & 0x000F) << 12, (dbits & 0x00F0) << 8, (dbits & 0x0F00) << 4, dbits & 0xF000],
        axis=1,
    )
    sc16 = np.where(nz[:, None], sc16 | top, 0)
    out[:, 48:56] = sc16.astype("<u2").view(np.uint8).reshape(c, 8)
    return out


def quantize_iq1_m(rows: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """float32 rows [nrows, 256k] -> IQ1_M bytes [nrows, 56k], as ggml's quantize_iq1_m."""
    return _quantize_rows(rows, imatrix, QK_K, 56, _iq1_m_chunk)


QUANTIZE: dict[str, Callable[[np.ndarray, np.ndarray | None], np.ndarray]] = {
    "IQ4_NL": quantize_iq4_nl,
    "IQ4_XS": quantize_iq4_xs,
    "IQ3_XXS": quantize_iq3_xxs,
    "IQ3_S": quantize_iq3_s,
    "IQ2_S": quantize_iq2_s,
    "IQ2_XXS": quantize_iq2_xxs,
    "IQ2_XS": quantize_iq2_xs,
    "IQ1_S": quantize_iq1_s,
    "IQ1_M": quantize_iq1_m,
}
