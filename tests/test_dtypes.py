"""The one dtype table: lookups by code and by the spellings users type."""

from __future__ import annotations

import pytest

from weightsmith import dtypes


@pytest.mark.parametrize(
    ("name", "code"),
    [("bf16", "BF16"), ("BFloat16", "BF16"), ("half", "F16"), ("fp32", "F32"),
     ("F8_E5M2", "F8_E5M2"), ("float64", "F64"), ("U8", "U8")],
)  # fmt: skip
def test_dtype_by_name(name, code):
    assert dtypes.dtype_by_name(name) is dtypes.SAFETENSORS[code]


@pytest.mark.parametrize("name", ["q4_k", "float128", ""])
def test_dtype_by_name_unknown(name):
    with pytest.raises(KeyError):
        dtypes.dtype_by_name(name)
