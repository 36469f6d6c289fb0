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

Quantizers (IQ4_NL, IQ4_XS) follow ggml's ``quantize_row_iq4_nl_impl``
bit for bit: float32 intermediates, sequential sums over the in-block index
(vectorised across blocks), ggml's tie-breaking.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _iq_tables as _t
from ._common import F32, f16_to_f32

QK_K = 256
QK4_NL = 32
_GROUP_MAX_EPS = F32(1e-15)
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

# byte -> (kvalues[lo nibble], kvalues[hi nibble]) as float32
_KV_F32 = KVALUES_IQ4NL.astype(np.float32)
_KV_LO = _KV_F32[np.arange(256) & 15]
_KV_HI = _KV_F32[np.arange(256) >> 4]

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


def _d16(blocks: np.ndarray, off: int = 0) -> np.ndarray:
    """The fp16 field at byte ``off`` of every block, as float32 [nb]."""
    return f16_to_f32(blocks[:, off : off + 2].copy().view("<u2")[:, 0])


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
    vals = _IQ2XXS_SG[idx]  # [nb, 8, 4, 8]
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
    vals = _IQ2XS_SG[idx]  # [nb, 8, 2, 2, 8]
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
    vals = IQ2S_GRID[qs | hi]  # [nb, 8, 4, 8]
    vals *= _BYTE_SIGNS[signs]
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
    vals = _IQ3XXS_SG[qs * 16 + nib]  # [nb, 8, 4, 2, 4]
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
    vals = _IQ3S_SG[(qs | hi) * 16 + nib]  # [nb, 8, 8, 4]
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
    delta = np.where(qh & 0x8000, -_IQ1_DELTA, _IQ1_DELTA).astype(np.float32)
    idx = qs | (((qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.intp)) & 7) << 8)
    vals = IQ1S_GRID[idx].reshape(nb, 8, 32)
    vals += delta[:, :, None]
    vals *= dl[:, :, None]
    return vals.reshape(nb, QK_K)


def dequantize_iq1_m(blocks: np.ndarray) -> np.ndarray:
    """IQ1_M blocks [nb, 56] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    qs = blocks[:, 0:32].reshape(nb, 8, 2, 2).astype(np.intp)  # [ib, pair, l%2]
    qh = blocks[:, 32:48].reshape(nb, 8, 2).astype(np.intp)  # [ib, pair]
    sc = _u16(blocks[:, 48:56]).astype(np.intp)  # [nb, 4]
    u = (
        (sc[:, 0] >> 12)
        | ((sc[:, 1] >> 8) & 0x00F0)
        | ((sc[:, 2] >> 4) & 0x0F00)
        | (sc[:, 3] & 0xF000)
    )
    d = f16_to_f32(u.astype(np.uint16))
    sub = sc[:, np.arange(8) // 2] >> (6 * (np.arange(8) % 2))  # [nb, 8]
    s = np.stack([sub & 7, (sub >> 3) & 7], axis=-1)  # [nb, 8, 2] -> dl1, dl2
    dl = d[:, None, None] * (2 * s + 1).astype(np.float32)
    hsh = np.array([8, 4], dtype=np.intp)
    idx = qs | ((qh[:, :, :, None] << hsh) & 0x700)
    neg = (qh[:, :, :, None] & np.array([0x08, 0x80], dtype=np.intp)) != 0
    delta = np.where(neg, -_IQ1_DELTA, _IQ1_DELTA).astype(np.float32)  # [nb, 8, 2, 2]
    vals = IQ1S_GRID[idx]  # [nb, 8, 2, 2, 8]
    vals += delta[..., None]
    vals *= dl[:, :, :, None, None]
    return vals.reshape(nb, QK_K)


def dequantize_iq4_nl(blocks: np.ndarray) -> np.ndarray:
    """IQ4_NL blocks [nb, 18] -> float32 [nb, 32]."""
    nb = blocks.shape[0]
    d = _d16(blocks)[:, None]
    qs = blocks[:, 2:18]
    out = np.empty((nb, 2, 16), dtype=np.float32)
    np.multiply(_KV_LO[qs], d, out=out[:, 0])
    np.multiply(_KV_HI[qs], d, out=out[:, 1])
    return out.reshape(nb, QK4_NL)


def dequantize_iq4_xs(blocks: np.ndarray) -> np.ndarray:
    """IQ4_XS blocks [nb, 136] -> float32 [nb, 256]."""
    nb = blocks.shape[0]
    d = _d16(blocks)
    sh = _u16(blocks[:, 2:4])  # [nb, 1]
    sl = blocks[:, 4:8]
    lo = np.stack([sl & 15, sl >> 4], axis=-1).reshape(nb, 8).astype(np.int32)
    hi = ((sh >> np.arange(0, 16, 2, dtype=np.uint16)) & 3).astype(np.int32)
    dl = (d[:, None] * ((lo | (hi << 4)) - 32).astype(np.float32))[:, :, None]
    qs = blocks[:, 8:136].reshape(nb, 8, 16)
    out = np.empty((nb, 8, 2, 16), dtype=np.float32)
    np.multiply(_KV_LO[qs], dl, out=out[:, :, 0])
    np.multiply(_KV_HI[qs], dl, out=out[:, :, 1])
    return out.reshape(nb, QK_K)


DEQUANTIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "IQ2_XXS": _chunked(dequantize_iq2_xxs, QK_K),
    "IQ2_XS": _chunked(dequantize_iq2_xs, QK_K),
    "IQ2_S": _chunked(dequantize_iq2_s, QK_K),
    "IQ3_XXS": _chunked(dequantize_iq3_xxs, QK_K),
    "IQ3_S": _chunked(dequantize_iq3_s, QK_K),
    "IQ1_S": _chunked(dequantize_iq1_s, QK_K),
    "IQ1_M": _chunked(dequantize_iq1_m, QK_K),
    "IQ4_NL": _chunked(dequantize_iq4_nl, QK4_NL),
    "IQ4_XS": _chunked(dequantize_iq4_xs, QK_K),
}

QUANTIZE: dict[str, Callable[[np.ndarray, np.ndarray | None], np.ndarray]] = {}
