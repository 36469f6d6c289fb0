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
"""

from __future__ import annotations

import numpy as np

from ._common import decoder, f16_to_f32, f32_to_bf16_bits, f32_to_f16_bits


def _cast(dtype: str):
    dt = np.dtype(dtype).newbyteorder("<")

    def dequantize(blocks: np.ndarray) -> np.ndarray:
        return blocks.reshape(-1).view(dt).astype(np.float32).reshape(-1, 1)

    dequantize.__name__ = f"_dequantize_{dt.name}"
    return dequantize


_TWO_112 = np.float32(2.0**112)
_KEEP_SIGN = np.int32(-0x70000001)  # 0x8FFFFFFF: sign, exponent and mantissa bits
_PLAIN_CHUNK = 1 << 19  # elements per step: input and output of a step stay in L2


def _fill_f16(blocks: np.ndarray, out: np.ndarray) -> None:
    """IEEE half -> float32 by bit moves and one multiply (numpy's cast is a scalar loop).

    ``h << 16`` as int32, arithmetically shifted right by 3, puts sign, exponent
    and mantissa where a float32 has them (with copies of the sign in bits
    28-30, which the mask clears); that float is the half's value times 2**-112,
    exactly, subnormals included.  Infinities and NaNs (exponent 31) would come
    out finite, so a chunk holding one takes the reference path.
    """
    h = blocks.reshape(-1).view("<u2")
    o = out.reshape(-1)
    w = o.view(np.int32)
    np.left_shift(h, 16, out=o.view(np.uint32), dtype=np.uint32)
    w >>= 3
    w &= _KEEP_SIGN
    o *= _TWO_112
    if np.max(h << 1) >= 0xF800:  # exponent 31 somewhere
        o[...] = f16_to_f32(h)


_dequantize_f16 = decoder(1, _fill_f16, _PLAIN_CHUNK)


def _fill_bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    h = blocks.reshape(-1).view("<u2")
    np.left_shift(h, 16, out=out.reshape(-1).view(np.uint32), dtype=np.uint32)


_dequantize_bf16 = decoder(1, _fill_bf16, _PLAIN_CHUNK)


def _quantize_f32(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix
    return rows.astype("<f4").view(np.uint8).reshape(rows.shape[0], -1)


def _quantize_f16(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix
    return f32_to_f16_bits(rows).astype("<u2").view(np.uint8).reshape(rows.shape[0], -1)


def _quantize_bf16(rows: np.ndarray, imatrix: np.ndarray | None) -> np.ndarray:
    del imatrix
    return f32_to_bf16_bits(rows).astype("<u2").view(np.uint8).reshape(rows.shape[0], -1)


DEQUANTIZE = {
    "F32": _cast("float32"),
    "F16": _dequantize_f16,
    "BF16": _dequantize_bf16,
    "F64": _cast("float64"),
    "I8": _cast("int8"),
    "I16": _cast("int16"),
    "I32": _cast("int32"),
    "I64": _cast("int64"),
}

QUANTIZE = {
    "F32": _quantize_f32,
    "F16": _quantize_f16,
    "BF16": _quantize_bf16,
}
