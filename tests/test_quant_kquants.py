"""The K-quant family (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K) against ggml.

Two oracles: the golden vectors in tests/data/golden (made by ggml's C code),
and ggml itself through tests/support/ggml_ref.py on fresh random and nasty inputs.
Quantized bytes must be identical; dequantized floats identical bit for bit,
with and without an importance matrix.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import ggml_ref
from support.golden import (
    as_blocks,
    assert_same_bytes,
    assert_same_floats,
    load_golden,
    load_inputs,
)
from weightsmith.dtypes import ggml_type
from weightsmith.quant import kquants

QTYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    return load_inputs()


@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imat"])
@pytest.mark.parametrize("dataset", ["w256", "w512"])
@pytest.mark.parametrize("name", QTYPES)
def test_golden_quantize(inputs, name, dataset, imat):
    gold = load_golden(name)
    suffix = "_imat" if imat else ""
    x = inputs[dataset]
    im = inputs[f"{dataset}.imatrix"] if imat else None
    got = kquants.QUANTIZE[name](x, im)
    assert_same_bytes(got, gold[f"{dataset}.q{suffix}"], name)


@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imat"])
@pytest.mark.parametrize("dataset", ["w256", "w512"])
@pytest.mark.parametrize("name", QTYPES)
def test_golden_dequantize(name, dataset, imat):
    gold = load_golden(name)
    suffix = "_imat" if imat else ""
    raw = gold[f"{dataset}.q{suffix}"]
    want = gold[f"{dataset}.deq{suffix}"]
    got = kquants.DEQUANTIZE[name](as_blocks(raw, name)).reshape(want.shape)
    assert_same_floats(got, want)


# --------------------------------------------------------------------------- against live ggml


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


def _nasty(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs that hit the early-outs, ties and overflow paths of the C code."""
    normal = (rng.standard_normal((8, 512)) * 0.02).astype(np.float32)
    outlier = normal.copy()
    outlier[:, ::97] = 50
    mixed = rng.standard_normal((4, 512)).astype(np.float32)
    mixed[:, 1::2] = -mixed[:, ::2]
    return {
        "normal": normal,
        "wide": (rng.standard_normal((3, 1024)) * 0.02).astype(np.float32),
        "zeros": np.zeros((2, 512), np.float32),
        "const": np.full((2, 512), 0.3, np.float32),
        "negconst": np.full((2, 512), -0.3, np.float32),
        "huge": (rng.standard_normal((4, 512)) * 1e30).astype(np.float32),
        "extreme": (rng.choice([-3.3e38, 3.3e38, 0.0, 1.0], (2, 512))).astype(np.float32),
        "tiny": (rng.standard_normal((4, 512)) * 1e-30).astype(np.float32),
        "subnormal": (rng.standard_normal((2, 512)) * 1e-40).astype(np.float32),
        "near_subnormal": (rng.standard_normal((2, 512)) * 1e-37).astype(np.float32),
        "outlier_low": np.where(
            np.arange(512) % 64 == 5, np.float32(-1e3), rng.random((2, 512)) * 1e-3
        ).astype(np.float32),
        "small": (rng.standard_normal((4, 512)) * 1e-6).astype(np.float32),
        "outlier": outlier,
        "positive": (np.abs(rng.standard_normal((4, 512))) + 5).astype(np.float32),
        "negative": (-np.abs(rng.standard_normal((4, 512))) - 5).astype(np.float32),
        "ints": rng.integers(-3, 4, (4, 512)).astype(np.float32),
        "halves": (rng.integers(-64, 64, (4, 512)) * 0.5).astype(np.float32),
        "sparse": (rng.standard_normal((4, 512)) * (rng.random((4, 512)) < 0.05)).astype(
            np.float32
        ),
        "cauchy": rng.standard_cauchy((4, 512)).astype(np.float32),
        "mixed": mixed * np.float32(1e4),
        "narrow": (np.float32(3e4) + rng.standard_normal((4, 512)) * 0.01).astype(np.float32),
        "onehot": np.eye(4, 512, k=3, dtype=np.float32),
        "f16edge": (rng.standard_normal((4, 512)) * 6e4).astype(np.float32),
        "edge_rows": _nasty_rows(rng, 512),
    }


@pytest.mark.parametrize(
    "imat",
    ["none", "random", "squares", "tiny", "some_zero", "huge", "zero", "subnormal", "mixed"],
)
@pytest.mark.parametrize("name", QTYPES)
def test_matches_ggml(name, imat):
    rng = np.random.default_rng(abs(hash((name, imat))) % 2**32)
    for label, x in _nasty(rng).items():
        n = x.shape[1]
        im = {
            "none": None,
            "random": (rng.random(n) * 10 + 1e-3).astype(np.float32),
            "squares": (rng.standard_normal(n) ** 2).astype(np.float32),
            "tiny": np.full(n, 1e-20, np.float32),
            "some_zero": np.where(rng.random(n) < 0.3, 0, rng.random(n)).astype(np.float32),
            "huge": np.full(n, 1e30, np.float32),
            "zero": np.zeros(n, np.float32),
            "subnormal": np.full(n, 1e-40, np.float32),
            "mixed": np.where(rng.random(n) < 0.5, 1e-40, 1e25).astype(np.float32),
        }[imat]
        _check_live(x, name, im, f"{name}/{label}")


def _imatrices(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [
        (rng.random(n) ** 3 * 100).astype(np.float32),
        np.ones(n, dtype=np.float32),
        np.where(rng.random(n) < 0.3, 0.0, rng.random(n)).astype(np.float32),  # zero weights
    ]


def _check_live(x: np.ndarray, name: str, im: np.ndarray | None, what: str) -> None:
    want = ggml_ref.quantize(x, name, im)
    assert_same_bytes(kquants.QUANTIZE[name](x, im), want, what)
    deq = kquants.DEQUANTIZE[name](as_blocks(want, name)).reshape(-1)
    assert_same_floats(deq, ggml_ref.dequantize(want, name, x.size))


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("shape", [(1, 256), (7, 512), (33, 768), (4, 4096)])
def test_live_random(name: str, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape) + len(name))
    x = (rng.standard_normal(shape) * rng.choice([0.02, 1.0, 30.0], (shape[0], 1))).astype(
        np.float32
    )
    _check_live(x, name, None, f"{name} {shape} plain")
    for k, im in enumerate(_imatrices(rng, shape[1])):
        _check_live(x, name, im, f"{name} {shape} imatrix #{k}")


@pytest.mark.parametrize("name", QTYPES)
def test_live_many_blocks(name: str) -> None:
    """More super-blocks than one internal chunk, so chunk seams are covered."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((600, 1024)) * 0.05).astype(np.float32)
    im = (rng.random(1024) + 0.01).astype(np.float32)
    _check_live(x, name, None, f"{name} many plain")
    _check_live(x, name, im, f"{name} many imatrix")


def test_live_dequantize_random_bytes() -> None:
    """Arbitrary block bytes (any scale, any f16 d but NaN) decode like ggml."""
    rng = np.random.default_rng(3)
    for name, d_offset in (("Q2_K", 80), ("Q3_K", 108), ("Q4_K", 0), ("Q5_K", 0), ("Q6_K", 208)):
        size = ggml_type(name).type_size
        raw = rng.integers(0, 256, (64, size), dtype=np.uint8)
        nd = 2 if name in ("Q2_K", "Q4_K", "Q5_K") else 1  # d (and dmin)
        d = rng.standard_normal((64, nd)).astype(np.float16).view(np.uint8).reshape(64, 2 * nd)
        raw[:, d_offset : d_offset + 2 * nd] = d
        y = kquants.DEQUANTIZE[name](raw)
        assert_same_floats(y.reshape(-1), ggml_ref.dequantize(raw, name, 64 * 256))


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(QTYPES),
    seed=st.integers(0, 2**32 - 1),
    log_scale=st.integers(-40, 30),
    sparsity=st.floats(0.0, 1.0),
    use_imatrix=st.booleans(),
)
def test_live_hypothesis(
    name: str, seed: int, log_scale: int, sparsity: float, use_imatrix: bool
) -> None:
    """Random magnitudes from 1e-40 to 1e30, random zero patterns, with or without imatrix."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 512)) * 10.0**log_scale
    x[rng.random(x.shape) < sparsity] = 0
    x = x.astype(np.float32)
    im = (rng.random(512) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) if use_imatrix else None
    _check_live(x, name, im, f"{name} 1e{log_scale} sparsity {sparsity:.2f}")


def test_q8_k_dequantize_matches_ggml():
    # Q8_K has no to_float in ggml's type traits; its exported
    # quantize_row_q8_K_ref / dequantize_row_q8_K are called directly.
    import ctypes

    lib = ggml_ref.lib()
    rng = np.random.default_rng(8)
    nb = 64
    x = (rng.standard_normal((nb, 256)) * rng.uniform(1e-3, 1e3, (nb, 1))).astype(np.float32)
    x[0] = 0.0
    x[1] = 7.0
    raw = np.zeros((nb, 292), np.uint8)
    lib.quantize_row_q8_K_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.quantize_row_q8_K_ref(x.ctypes.data, raw.ctypes.data, x.size)
    raw[2, 4:260] = rng.integers(0, 256, 256, dtype=np.uint8)  # any bytes decode
    want = np.empty(x.size, np.float32)
    lib.dequantize_row_q8_K.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.dequantize_row_q8_K(raw.ctypes.data, want.ctypes.data, x.size)
    got = kquants.DEQUANTIZE["Q8_K"](raw).reshape(-1)
    assert_same_floats(got, want)


@pytest.mark.parametrize("name", [*QTYPES, "Q8_K"])
def test_empty_inputs(name):
    ts = ggml_type(name).type_size
    assert kquants.DEQUANTIZE[name](np.zeros((0, ts), np.uint8)).shape == (0, 256)
    if name in kquants.QUANTIZE:
        for im in (None, np.ones(512, np.float32)):
            out = kquants.QUANTIZE[name](np.zeros((0, 512), np.float32), im)
            assert out.shape == (0, 2 * ts) and out.dtype == np.uint8


@pytest.mark.parametrize("name", QTYPES)
def test_single_block_with_imatrix_matches_ggml(name):
    # One super-block per chunk puts a single column into the searches'
    # axis-0 sums, which numpy would add pairwise (not in C's order).
    from weightsmith.quant.registry import codec

    quantize = codec(name).quantize
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((1, 256)) * rng.uniform(0.001, 10)).astype(np.float32)
        x[0, rng.integers(0, 256, 20)] *= 30
        im = (rng.random(256) ** 4).astype(np.float32)
        assert_same_bytes(quantize(x, im), ggml_ref.quantize(x, name, im), f"{name} seed {seed}")


def test_kernels_check_sizes_before_touching_memory():
    from weightsmith._native import kquants as kernels

    x = np.zeros((2, 512), np.float32)
    out = np.empty(2 * 2 * 144, np.uint8)
    bad_calls = [
        (
            ValueError,
            lambda: kernels.dequantize("Q4_K", np.zeros(143, np.uint8), np.empty(0, np.float32)),
        ),
        (
            ValueError,
            lambda: kernels.dequantize("Q4_K", np.zeros(144, np.uint8), np.empty(255, np.float32)),
        ),
        (
            TypeError,
            lambda: kernels.dequantize("Q4_K", np.zeros(144, np.uint8), np.empty(256, np.float64)),
        ),
        (
            ValueError,
            lambda: kernels.dequantize("Q9_K", np.zeros(144, np.uint8), np.empty(256, np.float32)),
        ),
        (TypeError, lambda: kernels.quantize("Q4_K", x.astype(np.float64), 512, None, out)),
        (ValueError, lambda: kernels.quantize("Q4_K", x, 500, None, out)),
        (ValueError, lambda: kernels.quantize("Q4_K", x, 384, None, out)),  # not whole rows
        (ValueError, lambda: kernels.quantize("Q4_K", x, 512, np.ones(256, np.float32), out)),
        (ValueError, lambda: kernels.quantize("Q4_K", x, 512, None, out[:-1])),
        (ValueError, lambda: kernels.quantize("Q8_K", x, 512, None, out)),  # decode only
    ]
    for exc, call in bad_calls:
        with pytest.raises(exc):
            call()
    ro = np.zeros(2 * 2 * 144, np.uint8)
    ro.flags.writeable = False
    with pytest.raises((BufferError, TypeError, ValueError)):
        kernels.quantize("Q4_K", x, 512, None, ro)
    assert not ro.any()


@pytest.mark.parametrize("name", QTYPES)
def test_concurrent_threads_give_the_serial_bytes(name):
    # The kernels release the GIL and keep all state on their own stack.
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    parts = [(rng.standard_normal((16, 1024)) * 0.05).astype(np.float32) for _ in range(4)]
    im = (rng.random(1024) + 0.01).astype(np.float32)
    quantize = kquants.QUANTIZE[name]
    want = [quantize(p, im) for p in parts]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda p: quantize(p, im), parts))
    for g, w in zip(got, want, strict=True):
        assert_same_bytes(g, w, name)
