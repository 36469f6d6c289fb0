"""Random IQ-family blocks for the tests and benchmarks that compare against ggml.

Random bytes are a valid IQ block except for the fp16 super-scale, which must
be finite (NaN payloads are not compared).  Shared by tests/test_quant_iquants.py
and benchmarks/bench_iquants.py so both build blocks the same way.
"""

from __future__ import annotations

import numpy as np

from weightsmith.dtypes import ggml_type


def random_iq_blocks(name: str, nb: int, rng: np.random.Generator, scale: float) -> np.ndarray:
    """``nb`` random ``name`` blocks [nb, type_size] with fp16 scales ~ N(0, scale)."""
    ts = ggml_type(name).type_size
    raw = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
    d = (rng.standard_normal(nb) * scale).astype(np.float16).view(np.uint16)
    if name == "IQ1_M":  # the super-scale is spread over the top nibbles of 4 u16
        sc = raw[:, 48:56].copy().view("<u2")
        sc &= 0x0FFF
        for i in range(4):
            sc[:, i] |= ((d >> (4 * i)) & 15) << 12
        raw[:, 48:56] = sc.view(np.uint8)
    else:
        raw[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    return raw
