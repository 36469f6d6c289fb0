"""Numeric helpers shared by every codec family.

ggml computes in float32 scalar arithmetic without FMA; these helpers keep
every intermediate float32 so that vectorised numpy matches it bit for bit.
Codec families append shared pieces here rather than writing them twice.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def f16_to_f32(bits: np.ndarray) -> np.ndarray:
    """IEEE half bit patterns (uint16, any shape) -> float32 values."""
    return np.ascontiguousarray(bits).view(np.float16).astype(np.float32)


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits, round-to-nearest-even, overflow to inf (as ggml)."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: round half to even (the 12582912.f trick), as int32."""
    return np.rint(np.asarray(x, dtype=np.float32)).astype(np.int32)
