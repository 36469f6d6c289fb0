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

Both directions run in the compiled kernels of ``weightsmith._native.kquants``
(csrc/kquants.c), bit-exact with ggml's C reference: ``quantize_row_*_ref``
without an importance matrix, ``quantize_row_*_impl`` with one, and
``dequantize_row_*``.  The kernels release the GIL and write into the buffers
this module hands them; numpy here only shapes and allocates arrays.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._native import kquants as _kernels
from ..dtypes import ggml_type
from ._kernels import row_kernel

__all__ = ["DEQUANTIZE", "QUANTIZE"]

QK_K = 256


def _decoder(name: str) -> Callable[..., np.ndarray]:
    """``DEQUANTIZE[name]``: blocks uint8 [nb, type_size] -> float32 [nb, 256] (or into ``out``)."""

    def dequantize(
        blocks: np.ndarray, out: np.ndarray | None = None, threads: int = 1
    ) -> np.ndarray:
        blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
        if out is None:
            out = np.empty((blocks.shape[0], QK_K), dtype=np.float32)
        _kernels.dequantize(name, blocks, out, threads)
        return out

    dequantize.fills_out = True  # type: ignore[attr-defined]
    dequantize.__name__ = f"dequantize_{name.lower()}"
    dequantize.__doc__ = f"{name} blocks [nb, {ggml_type(name).type_size}] -> float32 [nb, 256]."
    return dequantize


def _encoder(name: str) -> Callable[..., np.ndarray]:
    """``QUANTIZE[name]``: rows float32 [nrows, n] (n % 256 == 0) -> uint8 [nrows, n/256*type_size]."""
    type_size = ggml_type(name).type_size

    def quantize(
        rows: np.ndarray,
        imatrix: np.ndarray | None = None,
        out: np.ndarray | None = None,
        threads: int = 1,
    ) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nrows, n = rows.shape
        if out is None:
            out = np.empty((nrows, n // QK_K * type_size), dtype=np.uint8)
        if out.size:
            im = None if imatrix is None else np.ascontiguousarray(imatrix, dtype=np.float32)
            _kernels.quantize(name, rows, n, im, out, threads)
        return out

    quantize.fills_out = True  # type: ignore[attr-defined]
    quantize.kernel = row_kernel(_kernels.kernel, name)  # type: ignore[attr-defined]
    quantize.__name__ = f"quantize_{name.lower()}"
    quantize.__doc__ = (
        f"float32 rows -> {name} blocks (ggml_quantize_chunk; imatrix: one weight per column)."
    )
    return quantize


_ENCODED = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

DEQUANTIZE: dict[str, Callable[..., np.ndarray]] = {
    name: _decoder(name) for name in (*_ENCODED, "Q8_K")
}

QUANTIZE: dict[str, Callable[[np.ndarray, np.ndarray | None], np.ndarray]] = {
    name: _encoder(name) for name in _ENCODED
}
