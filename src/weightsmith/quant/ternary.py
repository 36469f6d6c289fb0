"""Ternary and binary ggml types: TQ1_0, TQ2_0, Q1_0, Q2_0.

All four store a single fp16 scale ``d`` per block and small integer codes
``q`` with ``value = (q - 1) * d`` (Q1_0: ``+d``/``-d``).  Q1_0 and Q2_0 live
here rather than with the legacy types because their numerics are the
BitNet-style ones of this family -- a scale taken straight from the block
(mean |x| for Q1_0, max |x| for Q2_0), codes ``roundf(x/d) + 1`` and no
scale search -- not the ``-8``/``-16`` offsets and searches of Q4_0..Q5_1.

Byte layouts (little-endian)::

    TQ1_0  256 values, 54 B:  qs[48] | qh[4] | d:f16
        qs[0:32]   byte m: trits of elements m + 32*n, n = 0..4
        qs[32:48]  byte m: trits of elements 160 + m + 16*n, n = 0..4
        qh[0:4]    byte j: trits of elements 240 + j + 4*n, n = 0..3 (then *3)
        a byte holds ceil(t * 256 / 243) where t is the base-3 number whose
        most significant trit is the first element; trit k is recovered as
        ((uint8)(byte * 3**k) * 3) >> 8
    TQ2_0  256 values, 66 B:  qs[64] | d:f16
        byte 32*c + m, bits 2n..2n+1: element 128*c + 32*n + m
    Q1_0   128 values, 18 B:  d:f16 | qs[16]   bit j of the block: x_j >= 0
    Q2_0    64 values, 18 B:  d:f16 | qs[16]   bits 2(j%4) of byte j//4: q_j

Quantization follows the ``quantize_row_*_ref`` functions of ggml-quants.c.
ggml ignores the importance matrix for all four types (TQ*: ``(void)
quant_weights``; Q1_0/Q2_0: the imatrix path calls the same reference row
function), so the imatrix is accepted and ignored here too.

The kernels are in ``csrc/ternary.c``.
"""

from __future__ import annotations

from .._native import ternary as _kernels
from ._kernels import codecs

DEQUANTIZE, QUANTIZE = codecs(_kernels, ("TQ1_0", "TQ2_0", "Q1_0", "Q2_0"))
