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
from weightsmith.quant import kquants

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
