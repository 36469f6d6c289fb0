"""K-quant family (Q2_K, Q4_K, Q5_K, Q8_K) against ggml.

Two oracles: the golden vectors in tests/data/golden (made by ggml's C code),
and ggml itself through tests/ggml_ref.py on fresh random and nasty inputs.
Quantized bytes must be identical; dequantized floats identical bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from weightsmith.dtypes import ggml_type
from weightsmith.quant import _search, kquants

GOLDEN = Path(__file__).parent / "data" / "golden"
QTYPES = ["Q2_K", "Q4_K", "Q5_K"]


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    return load_file(GOLDEN / "inputs.safetensors")


def _golden(name: str) -> dict[str, np.ndarray]:
    return load_file(GOLDEN / f"{name}.safetensors")


def _blocks(raw: np.ndarray, name: str) -> np.ndarray:
    return np.ascontiguousarray(raw).reshape(-1, ggml_type(name).type_size)


def _assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (
        f"{bad.size} floats differ, first at {bad[0]}: {got.flat[bad[0]]!r} vs {want.flat[bad[0]]!r}"
    )


def _assert_same_bytes(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.dtype == np.uint8 and got.shape == want.shape
    rows = np.flatnonzero((got != want).any(axis=1))
    assert rows.size == 0, f"{name}: rows {rows.tolist()[:10]} differ"


@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imat"])
@pytest.mark.parametrize("dataset", ["w256", "w512"])
@pytest.mark.parametrize("name", QTYPES)
def test_golden_quantize(inputs, name, dataset, imat):
    gold = _golden(name)
    suffix = "_imat" if imat else ""
    x = inputs[dataset]
    im = inputs[f"{dataset}.imatrix"] if imat else None
    got = kquants.QUANTIZE[name](x, im)
    _assert_same_bytes(got, gold[f"{dataset}.q{suffix}"], name)


@pytest.mark.parametrize("imat", [False, True], ids=["plain", "imat"])
@pytest.mark.parametrize("dataset", ["w256", "w512"])
@pytest.mark.parametrize("name", QTYPES)
def test_golden_dequantize(name, dataset, imat):
    gold = _golden(name)
    suffix = "_imat" if imat else ""
    raw = gold[f"{dataset}.q{suffix}"]
    want = gold[f"{dataset}.deq{suffix}"]
    got = kquants.DEQUANTIZE[name](_blocks(raw, name)).reshape(want.shape)
    _assert_same_floats(got, want)


# --------------------------------------------------------------------------- against live ggml


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
    }


@pytest.mark.parametrize("imat", ["none", "random", "squares", "tiny", "some_zero", "huge"])
@pytest.mark.parametrize("name", QTYPES)
def test_matches_ggml(name, imat):
    import ggml_ref  # tests/ggml_ref.py: ctypes over libggml-base

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
        }[imat]
        want = ggml_ref.quantize(x, name, im)
        got = kquants.QUANTIZE[name](x, im)
        _assert_same_bytes(got, want, f"{name}/{label}")
        deq = kquants.DEQUANTIZE[name](_blocks(want, name)).reshape(-1)
        _assert_same_floats(deq, ggml_ref.dequantize(want, name, x.size))


def test_q8_k_dequantize_matches_ggml():
    # Q8_K has no to_float in ggml's type traits; its exported
    # quantize_row_q8_K_ref / dequantize_row_q8_K are called directly.
    import ctypes

    import ggml_ref

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
    _assert_same_floats(got, want)


@pytest.mark.parametrize("name", QTYPES)
def test_golden_without_sequential_axis0_reduce(inputs, monkeypatch, name):
    # The fallback for a numpy whose axis-0 reduction is not row by row.
    monkeypatch.setattr(_search, "_SEQUENTIAL_AXIS0", False)
    gold = _golden(name)
    for suffix, im in (("", None), ("_imat", inputs["w256.imatrix"])):
        got = kquants.QUANTIZE[name](inputs["w256"], im)
        _assert_same_bytes(got, gold[f"w256.q{suffix}"], name)


@pytest.mark.parametrize("name", [*QTYPES, "Q8_K"])
def test_empty_inputs(name):
    ts = ggml_type(name).type_size
    assert kquants.DEQUANTIZE[name](np.zeros((0, ts), np.uint8)).shape == (0, 256)
    if name in kquants.QUANTIZE:
        for im in (None, np.ones(512, np.float32)):
            out = kquants.QUANTIZE[name](np.zeros((0, 512), np.float32), im)
            assert out.shape == (0, 2 * ts) and out.dtype == np.uint8


@pytest.mark.parametrize("name", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_single_block_with_imatrix_matches_ggml(name):
    # One super-block per chunk puts a single column into the searches'
    # axis-0 sums, which numpy would add pairwise (not in C's order).
    import ggml_ref
    from weightsmith.quant.registry import codec

    quantize = codec(name).quantize
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((1, 256)) * rng.uniform(0.001, 10)).astype(np.float32)
        x[0, rng.integers(0, 256, 20)] *= 30
        im = (rng.random(256) ** 4).astype(np.float32)
        _assert_same_bytes(quantize(x, im), ggml_ref.quantize(x, name, im), f"{name} seed {seed}")
