"""The legacy ggml block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q8_1 decode).

Every block holds 32 values; fields are little-endian, in this order::

    Q4_0  18 B  d:f16 | qs[16]             value = (q - 8) * d
    Q4_1  20 B  d:f16 | m:f16 | qs[16]     value = q * d + m
    Q5_0  22 B  d:f16 | qh:u32 | qs[16]    value = (q - 16) * d
    Q5_1  24 B  d:f16 | m:f16 | qh:u32 | qs[16]    value = q * d + m
    Q8_0  34 B  d:f16 | qs:i8[32]          value = q * d
    Q8_1  36 B  d:f16 | s:f16 | qs:i8[32]  value = q * d   (s = d * sum(q))

``qs[j]`` holds element ``j`` in its low nibble and element ``j + 16`` in its
high nibble; for the 5-bit types bit ``j`` of ``qh`` is the fifth bit of
element ``j`` (bits 0-15 for the low half, 16-31 for the high half).

Quantization follows ggml-quants.c: without an importance matrix the
``quantize_row_*_ref`` round-trip of the block's extreme value; with one,
``quantize_row_*_impl`` weights each value by ``qw * sqrt(sigma2 + x^2)``
(sigma2 = mean square of the row) and searches the scale with
``make_qx_quants`` (Q4_0, Q5_0) or ``make_qkx3_quants`` (Q4_1, Q5_1).
Q8_0 ignores the importance matrix, as ggml does.

The kernels are in ``csrc/legacy.c``.
"""

from __future__ import annotations

from .._native import legacy as _kernels
from ._kernels import codecs

DEQUANTIZE, QUANTIZE = codecs(_kernels, ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"))
