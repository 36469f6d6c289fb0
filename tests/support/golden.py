"""Shared helpers for the codec tests that compare against ggml's golden vectors.

The golden files in tests/data/golden were written by ggml's C code (see the
README there); these helpers load them and compare results bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from weightsmith.dtypes import ggml_type

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def load_inputs() -> dict[str, np.ndarray]:
    """The shared float inputs and importance matrices (``inputs.safetensors``)."""
    return load_file(GOLDEN / "inputs.safetensors")


def load_golden(name: str) -> dict[str, np.ndarray]:
    """ggml's quantized/dequantized tensors for one type (``<name>.safetensors``)."""
    return load_file(GOLDEN / f"{name}.safetensors")


def as_blocks(raw: np.ndarray, name: str) -> np.ndarray:
    """Raw bytes reshaped to one row per ggml block of type ``name``."""
    return np.ascontiguousarray(raw).reshape(-1, ggml_type(name).type_size)


def assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """float32 arrays identical bit for bit (so -0.0 and NaN payloads count)."""
    assert got.dtype == np.float32 and got.shape == want.shape
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (
        f"{bad.size} floats differ, first at {bad[0]}: {got.flat[bad[0]]!r} vs {want.flat[bad[0]]!r}"
    )


def assert_same_bytes(got: np.ndarray, want: np.ndarray, name: str) -> None:
    """Block arrays identical; the message lists the first differing rows."""
    assert got.dtype == np.uint8 and got.shape == want.shape
    rows = np.flatnonzero((got != want).any(axis=1))
    assert rows.size == 0, f"{name}: rows {rows.tolist()[:10]} differ"
