"""weightsmith.quant against live ggml (libggml-base via tests/support/ggml_ref.py).

Fresh random tensors of several shapes, for every type with a registered
quantizer (with and without an importance matrix) and every registered
dequantizer (on our own output and on random bytes).  Bytes must be
identical and floats equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import weightsmith.quant as Q
from support import ggml_ref
from weightsmith.dtypes import ggml_type
from weightsmith.errors import ImatrixRequired

QUANTIZE = Q.types(quantize=True)
DEQUANTIZE = Q.types()
# per block size: row lengths to try (several blocks per row, odd row counts)
SHAPES = [(3, 1), (5, 2), (1, 16), (33, 8)]  # (rows, blocks per row)


def _weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Typical weights with heavier tails, a few outliers and an exact-zero run."""
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(0.02)
    x *= np.exp(rng.standard_normal((*shape[:-1], 1)).astype(np.float32))  # per-row scale
    flat = x.reshape(-1)
    k = max(1, flat.size // 97)
    flat[rng.integers(0, flat.size, k)] *= np.float32(25)
    flat[: min(8, flat.size)] = 0
    return x


def _row_len(name: str, blocks: int) -> int:
    bs = ggml_type(name).block_size
    return bs * blocks if bs > 1 else 64 * blocks


def _same_bytes(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.uint8 and got.shape == want.shape
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} bytes differ, first at {bad[0].tolist()}"


def _same_floats(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (
        f"{bad.size} floats differ, first at {bad[0]}: {got.flat[bad[0]]!r} vs {want.flat[bad[0]]!r}"
    )


@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imatrix"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}blk")
@pytest.mark.parametrize("name", QUANTIZE)
def test_quantize_matches_ggml(name: str, shape: tuple[int, int], imat: bool) -> None:
    info = Q.info(name)
    if info.requires_imatrix and not imat:
        with pytest.raises(ImatrixRequired):
            Q.quantize(np.zeros((1, info.block_size), np.float32), name)
        return
    rng = np.random.default_rng([info.id, *shape, imat])
    n = _row_len(name, shape[1])
    x = _weights(rng, (shape[0], n))
    im = (rng.random(n, dtype=np.float32) ** 2 + np.float32(1e-3)) if imat else None
    got = Q.quantize(x, name, im)
    want = ggml_ref.quantize(x, name, im)
    _same_bytes(got, want)
    _same_floats(Q.dequantize(got, name, x.shape), _oracle_dequantize(want, name, x.shape))


@pytest.mark.parametrize("name", QUANTIZE)
def test_quantize_leading_dims_and_edge_rows(name: str) -> None:
    """A 3-d tensor whose rows include all-zero, constant, tiny and one-sign rows."""
    info = Q.info(name)
    rng = np.random.default_rng(info.id + 1000)
    n = _row_len(name, 2)
    x = _weights(rng, (2, 4, n))
    x[0, 0] = 0
    x[0, 1] = np.float32(0.125)
    x[0, 2] = rng.standard_normal(n).astype(np.float32) * np.float32(1e-30)
    x[0, 3] = np.abs(x[0, 3])
    x[1, 0] = -np.abs(x[1, 0])
    x[1, 1] = np.where(np.arange(n) % 2, np.float32(0.5), np.float32(-0.5))
    im = rng.random(n, dtype=np.float32) + np.float32(0.1)
    for imatrix in [im] if info.requires_imatrix else [None, im]:
        got = Q.quantize(x, name, imatrix)
        assert got.shape == (2, 4, info.type_size * n // info.block_size)
        _same_bytes(got.reshape(8, -1), ggml_ref.quantize(x.reshape(8, n), name, imatrix))


@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_float_types_quantize_every_kind_of_float32(name: str) -> None:
    """Random float32 bit patterns (NaN with payloads, inf, subnormals, odd lengths)
    round as in ggml: the vector paths must handle every lane like the scalar tail."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 2**32, (3, 1000), dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[0, :100] = rng.standard_normal(100).astype(np.float32) * np.float32(1e-40)  # subnormal
    _same_bytes(Q.quantize(x, name), ggml_ref.quantize(x, name))


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"])
def test_blocks_near_powers_of_two_and_ties(name: str) -> None:
    """Block maxima at, just below and just above powers of two over the whole float
    range (MXFP4 takes its exponent from the bits except near 2**k), values on the
    MXFP4 rounding midpoints, and blocks whose largest |v| occurs with both signs."""
    rng = np.random.default_rng(8)
    k = rng.integers(-140, 127, (64, 1))
    p = np.ldexp(np.float32(1), k).astype(np.float32)
    top = np.where(
        k % 3 == 0,
        p,
        np.where(k % 3 == 1, np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(np.inf))),
    )
    mids = np.array([0.5, 1.5, 2.5, 3.5, 5, 7, 10, 12, 0, 1, 2, 3, 4, 6, 8], np.float32)
    x = rng.choice(mids, (64, 256)) * np.ldexp(np.float32(1), k - 4).astype(np.float32)
    x *= np.where(rng.random((64, 256)) < 0.5, np.float32(1), np.float32(-1))
    x[:, ::32] = top  # every block's max |v|
    x[::2, 5::32] = -top[::2]  # both signs: the first one decides
    x = x.astype(np.float32)
    _same_bytes(Q.quantize(x, name), ggml_ref.quantize(x, name))


@pytest.mark.parametrize("name", DEQUANTIZE)
def test_dequantize_random_bytes_matches_ggml(name: str) -> None:
    """Random bytes (any scale, including fp16 inf/NaN and subnormals) decode as in ggml."""
    t = ggml_type(name)
    rng = np.random.default_rng(t.id + 2000)
    n = _row_len(name, 3)
    raw = rng.integers(0, 256, (4, t.nbytes(n)), dtype=np.uint8)
    got = Q.dequantize(raw, name, (4, n))
    _same_floats(got, _oracle_dequantize(raw, name, (4, n)))


def _oracle_dequantize(raw: np.ndarray, name: str, shape: tuple[int, int]) -> np.ndarray:
    """ggml's to_float; for the few types ggml-base cannot decode, the format itself."""
    t = ggml_type(name)
    if ggml_ref.has_to_float(name):
        return ggml_ref.dequantize(raw, name, raw.size // t.type_size * t.block_size).reshape(shape)
    blocks = np.ascontiguousarray(raw).reshape(-1, t.type_size)
    with np.errstate(all="ignore"):
        if name == "Q8_1":  # d:f16 | s:f16 | qs:i8[32]   (ggml-common.h block_q8_1)
            d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)
            out = blocks[:, 4:].view(np.int8).astype(np.float32) * d
        elif name == "Q8_K":  # d:f32 | qs:i8[256] | bsums:i16[16]   (block_q8_K)
            d = blocks[:, 0:4].copy().view("<f4")
            out = blocks[:, 4:260].view(np.int8).astype(np.float32) * d
        else:  # plain F32/F64/I*: a numeric cast (ggml has no converter for them)
            out = raw.view(t.numpy.newbyteorder("<")).astype(np.float32)
    return out.reshape(shape)
