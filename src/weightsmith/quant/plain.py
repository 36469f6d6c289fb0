"""The plain (one value per "block") ggml types.

Byte layout: a little-endian array of one scalar per element::

    F32 4 B | F16 2 B (IEEE half) | BF16 2 B (top half of an f32)
    F64 8 B | I8 1 B | I16 2 B | I32 4 B | I64 8 B

Decoding follows ggml's converters: F16 via ``ggml_compute_fp16_to_fp32``
(signalling NaNs come out quiet), BF16 by a 16-bit shift (payload kept),
the others by an ordinary numeric cast to float32.

Encoding exists for F32 (copy), F16 (``ggml_fp32_to_fp16_row``: round to
nearest even, overflow to inf, NaN -> ``sign|0x7E00``) and BF16
(``ggml_fp32_to_bf16_row_ref``: round to nearest even on the bits, NaN kept
with the quiet bit forced).  None of them uses an importance matrix.

The kernels are in ``csrc/plain.c``.
"""

from __future__ import annotations

from .._native import plain as _kernels
from ._kernels import codecs

DEQUANTIZE, QUANTIZE = codecs(_kernels, ("F32", "F16", "BF16"))
