"""The FP4 (E2M1) ggml types: MXFP4 and NVFP4.

Both store 4-bit E2M1 codes looked up in ``kvalues_mxfp4`` (twice the E2M1
value: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives; code 8 is -0 -> 0) and a
per-group power-of-two-ish scale::

    MXFP4   32 values, 17 B:  e:u8 (E8M0) | qs[16]
            value = kvalues[q] * 2**(e - 128)      (ggml's E8M0 "half")
    NVFP4   64 values, 36 B:  d:u8[4] (UE4M3, one per 16 values) | qs[32]
            value = kvalues[q] * ue4m3(d[s]) / 2

``qs[j]`` holds element ``j`` of the group in its low nibble and element
``j + group/2`` in its high nibble (per 16-value sub-block for NVFP4, whose
sub-block ``s`` owns ``qs[8s:8s+8]``).

Quantization follows ``quantize_row_mxfp4_ref`` / ``quantize_row_nvfp4_ref``:
the scale comes from the group's max |x| (MXFP4: ``floor(log2(amax)) - 2``;
NVFP4: ``amax / 6`` rounded to UE4M3 by ggml's own round-half-up), then each
value takes the first code with the smallest ``|kvalue * d - x|``.  ggml
ignores the importance matrix for both types, and so do we.

The kernels are in ``csrc/fp4.c``.
"""

from __future__ import annotations

from .._native import fp4 as _kernels
from ._kernels import codecs

DEQUANTIZE, QUANTIZE = codecs(_kernels, ("MXFP4", "NVFP4"))
