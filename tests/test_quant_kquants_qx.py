"""Q3_K and Q6_K (weightsmith.quant.kquants_qx) against ggml.

Two oracles: the golden vectors in tests/data/golden (made by ggml's C code)
and, at a larger scale, ggml itself through tests/ggml_ref.py on fresh random
and adversarial matrices.  Matching means identical quantized bytes and
bit-identical dequantized floats, with and without an importance matrix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file

import ggml_ref
from weightsmith.quant.kquants_qx import DEQUANTIZE, QUANTIZE

GOLDEN = Path(__file__).parent / "data" / "golden"
TYPES = {"Q3_K": 110, "Q6_K": 210}


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    return load_file(GOLDEN / "inputs.safetensors")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _assert_same_bytes(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    assert ours.dtype == np.uint8 and ours.shape == theirs.shape, what
    rows = np.nonzero((ours != theirs).any(axis=1))[0]
    assert rows.size == 0, f"{what}: rows {rows[:10].tolist()} differ"


def _assert_same_floats(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    assert ours.dtype == np.float32 and ours.shape == theirs.shape, what
    bad = np.nonzero(_bits(ours) != _bits(theirs))
    assert bad[0].size == 0, f"{what}: {bad[0].size} values differ, first at {bad[0][0]}"


# --------------------------------------------------------------------------- golden


@pytest.mark.parametrize("type_name", sorted(TYPES))
@pytest.mark.parametrize("set_name", ["w256", "w512"])
@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imat"])
def test_golden_quantize(inputs, type_name: str, set_name: str, imat: bool) -> None:
    golden = load_file(GOLDEN / f"{type_name}.safetensors")
    suffix = "_imat" if imat else ""
    x = inputs[set_name]
    im = inputs[f"{set_name}.imatrix"] if imat else None
    q = QUANTIZE[type_name](x, im)
    _assert_same_bytes(q, golden[f"{set_name}.q{suffix}"], f"{type_name} {set_name}{suffix}")


@pytest.mark.parametrize("type_name", sorted(TYPES))
@pytest.mark.parametrize("set_name", ["w256", "w512"])
@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imat"])
def test_golden_dequantize(type_name: str, set_name: str, imat: bool) -> None:
    golden = load_file(GOLDEN / f"{type_name}.safetensors")
    suffix = "_imat" if imat else ""
    raw = golden[f"{set_name}.q{suffix}"]
    expected = golden[f"{set_name}.deq{suffix}"]
    y = DEQUANTIZE[type_name](raw.reshape(-1, TYPES[type_name]))
    _assert_same_floats(y.reshape(expected.shape), expected, f"{type_name} {set_name}{suffix}")


# --------------------------------------------------------------------------- live ggml


def _nasty_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows that stress early-outs, ties, float32 overflow and underflow."""
    rows = [
        np.zeros(n),
        np.full(n, 0.37),
        np.full(n, -1e-3),
        rng.standard_normal(n) * 1e-30,  # below GROUP_MAX_EPS
        rng.standard_normal(n) * 1e-14,  # just above it in places
        rng.standard_normal(n) * 3e4,
        rng.standard_normal(n) * 1e9,
        rng.standard_normal(n) * 1e15,  # x*x*x overflows: the sums turn inf/NaN
        np.abs(rng.standard_normal(n)) * 1e20,
        np.clip(rng.standard_normal(n) * 3e38, -3.4e38, 3.4e38),
        rng.standard_normal(n) * 1e-40,  # float32 subnormals
        np.where(np.arange(n) % 2 == 0, 0.5, -0.5),
        np.round(rng.standard_normal(n) * 8) / 2,  # many ties
        np.abs(rng.standard_normal(n)),
        -np.abs(rng.standard_normal(n)) * 0.02,
        rng.standard_cauchy(n) * 0.01,
    ]
    spike = rng.standard_normal(n) * 0.02
    spike[rng.integers(0, n)] = 50.0  # one outlier dominates a whole super-block
    rows.append(spike)
    sparse = np.zeros(n)
    sparse[::37] = rng.standard_normal(sparse[::37].size)  # mostly-empty sub-blocks
    rows.append(sparse)
    one = np.zeros(n)
    one[n // 2 + 3] = -2.5
    rows.append(one)
    with np.errstate(over="ignore"):
        return np.asarray(rows, dtype=np.float32)


def _imatrices(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [
        (rng.random(n) ** 3 * 100).astype(np.float32),
        np.ones(n, dtype=np.float32),
        np.where(rng.random(n) < 0.3, 0.0, rng.random(n)).astype(np.float32),  # zero weights
    ]


def _check_live(x: np.ndarray, type_name: str, im: np.ndarray | None, what: str) -> None:
    expected = ggml_ref.quantize(x, type_name, im)
    q = QUANTIZE[type_name](x, im)
    _assert_same_bytes(q, expected, what)
    y = DEQUANTIZE[type_name](q.reshape(-1, TYPES[type_name]))
    _assert_same_floats(y.reshape(-1), ggml_ref.dequantize(q, type_name, x.size), what)


@pytest.mark.parametrize("type_name", sorted(TYPES))
@pytest.mark.parametrize("shape", [(1, 256), (7, 512), (33, 768), (4, 4096)])
def test_live_random(type_name: str, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape) + len(type_name))
    x = (rng.standard_normal(shape) * rng.choice([0.02, 1.0, 30.0], (shape[0], 1))).astype(
        np.float32
    )
    _check_live(x, type_name, None, f"{type_name} {shape} plain")
    for k, im in enumerate(_imatrices(rng, shape[1])):
        _check_live(x, type_name, im, f"{type_name} {shape} imatrix #{k}")


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_live_nasty(type_name: str) -> None:
    rng = np.random.default_rng(7)
    x = _nasty_rows(rng, 512)
    _check_live(x, type_name, None, f"{type_name} nasty plain")
    for k, im in enumerate(_imatrices(rng, 512)):
        _check_live(x, type_name, im, f"{type_name} nasty imatrix #{k}")


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_live_many_blocks(type_name: str) -> None:
    """More super-blocks than one internal chunk, so chunk seams are covered."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((600, 1024)) * 0.05).astype(np.float32)
    im = (rng.random(1024) + 0.01).astype(np.float32)
    _check_live(x, type_name, None, f"{type_name} many plain")
    _check_live(x, type_name, im, f"{type_name} many imatrix")


def test_live_dequantize_random_bytes() -> None:
    """Arbitrary block bytes (any scale, any f16 d but NaN) decode like ggml."""
    rng = np.random.default_rng(3)
    for type_name, size in TYPES.items():
        raw = rng.integers(0, 256, (64, size), dtype=np.uint8)
        d = rng.standard_normal(64).astype(np.float16).view(np.uint8).reshape(64, 2)
        raw[:, size - 2 :] = d
        y = DEQUANTIZE[type_name](raw)
        _assert_same_floats(y.reshape(-1), ggml_ref.dequantize(raw, type_name, 64 * 256), type_name)


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_live_extreme_imatrix(type_name: str) -> None:
    """Importance weights that are zero, subnormal, huge or mixed."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 512)) * 0.02).astype(np.float32)
    for name, im in {
        "zero": np.zeros(512),
        "subnormal": np.full(512, 1e-40),
        "huge": np.full(512, 1e30),
        "mixed": np.where(rng.random(512) < 0.5, 1e-40, 1e25),
    }.items():
        _check_live(x, type_name, im.astype(np.float32), f"{type_name} imatrix {name}")


@settings(max_examples=40, deadline=None)
@given(
    type_name=st.sampled_from(sorted(TYPES)),
    seed=st.integers(0, 2**32 - 1),
    log_scale=st.integers(-40, 30),
    sparsity=st.floats(0.0, 1.0),
    use_imatrix=st.booleans(),
)
def test_live_hypothesis(
    type_name: str, seed: int, log_scale: int, sparsity: float, use_imatrix: bool
) -> None:
    """Random magnitudes from 1e-40 to 1e30, random zero patterns, with or without imatrix."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 512)) * 10.0**log_scale
    x[rng.random(x.shape) < sparsity] = 0
    x = x.astype(np.float32)
    im = (rng.random(512) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) if use_imatrix else None
    _check_live(x, type_name, im, f"{type_name} 1e{log_scale} sparsity {sparsity:.2f}")
