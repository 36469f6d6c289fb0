"""Packing of sub-byte safetensors types (F4, F6_E2M3, F6_E3M2).

Layout: element ``i`` of a packed tensor occupies bits ``[i*b, (i+1)*b)`` of
the byte span read as one little-endian bit string (least significant bit of
byte 0 first).  So for ``b = 4`` element 0 is the low nibble of byte 0, and for
``b = 6`` four elements fill three bytes::

    byte 0 = e0[0:6] | e1[0:2] << 6
    byte 1 = e1[2:6] | e2[0:4] << 4
    byte 2 = e2[4:6] | e3[0:6] << 2

Unpacked, each element is one byte holding its bit pattern in the low bits,
which is exactly the storage of the matching ml_dtypes type (float4_e2m1fn,
float6_e2m3fn, float6_e3m2fn).  A *group* is the smallest run of whole
elements that fills whole bytes: 2 elements / 1 byte for F4, 4 / 3 for F6.
"""

from __future__ import annotations

import numpy as np

__all__ = ["group", "pack", "unpack"]


def group(bits: int) -> tuple[int, int]:
    """(elements, bytes) of one byte-aligned group."""
    if bits == 4:
        return 2, 1
    if bits == 6:
        return 4, 3
    raise ValueError(f"not a packed width: {bits}")


def unpack(raw, bits: int, count: int, skip: int = 0) -> np.ndarray:
    """Elements ``skip .. skip+count`` of packed bytes ``raw`` (which start on
    a group boundary), as a uint8 array of bit patterns."""
    b = np.frombuffer(raw, np.uint8)
    ge, gb = group(bits)
    total = skip + count
    n_groups = -(-total // ge)
    b = b[: n_groups * gb]
    if bits == 4:
        out = np.empty(b.size * 2, np.uint8)
        np.bitwise_and(b, 0x0F, out=out[0::2])
        np.right_shift(b, 4, out=out[1::2])
    else:
        g = b.reshape(-1, 3)
        b0, b1, b2 = g[:, 0], g[:, 1], g[:, 2]
        out = np.empty((g.shape[0], 4), np.uint8)
        np.bitwise_and(b0, 0x3F, out=out[:, 0])
        out[:, 1] = (b0 >> 6) | ((b1 & 0x0F) << 2)
        out[:, 2] = (b1 >> 4) | ((b2 & 0x03) << 4)
        np.right_shift(b2, 2, out=out[:, 3])
        out = out.reshape(-1)
    return out[skip:total]


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack a flat array of bit patterns (a whole number of groups) to bytes."""
    c = np.ascontiguousarray(codes).reshape(-1).view(np.uint8)
    ge, _gb = group(bits)
    if c.size % ge:
        raise ValueError(f"{c.size} elements of {bits} bits do not fill whole bytes")
    mask = (1 << bits) - 1
    if bits == 4:
        return (c[0::2] & mask) | ((c[1::2] & mask) << 4)
    e = (c & mask).reshape(-1, 4)
    out = np.empty((e.shape[0], 3), np.uint8)
    out[:, 0] = e[:, 0] | (e[:, 1] << 6)
    out[:, 1] = (e[:, 1] >> 2) | (e[:, 2] << 4)
    out[:, 2] = (e[:, 2] >> 4) | (e[:, 3] << 2)
    return out.reshape(-1)
