"""The one table of every element type weightsmith knows.

Two families live here, and nothing else in the package keeps a dtype list:

* :data:`SAFETENSORS` -- the safetensors dtype codes, in the order of the
  ``Dtype`` enum of HF's ``safetensors`` crate.  That order is also the
  alignment order the writer sorts by (larger first), so it is part of the
  byte-exact output and must not be shuffled.
* :data:`GGML` -- the ggml tensor types by name and number, with block size
  (elements per block) and type size (bytes per block), as in ``ggml.h`` /
  ``ggml.c``'s type traits.

Sub-byte safetensors types (F4, F6_*) are stored *packed*: element ``i``
occupies bits ``[i*bits, (i+1)*bits)`` of the tensor's byte span, least
significant bit first.  Their ``numpy`` dtype is the one-element-per-byte
ml_dtypes type used once unpacked.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = [
    "GGML",
    "SAFETENSORS",
    "DType",
    "GGMLType",
    "dtype_by_name",
    "from_numpy",
    "ggml_type",
    "safetensors_dtype",
]


@dataclass(frozen=True)
class DType:
    """One safetensors dtype code."""

    name: str
    bits: int
    order: int
    numpy: np.dtype | None
    torch: str | None  # attribute name in the torch module, if torch has it
    is_float: bool = False  # an IEEE-style float that casts go to and from

    @property
    def packed(self) -> bool:
        """True for sub-byte types stored several to a byte."""
        return self.bits < 8

    @property
    def itemsize(self) -> int:
        """Bytes per element for whole-byte types (0 for packed ones)."""
        return self.bits // 8 if self.bits % 8 == 0 else 0

    def nbytes(self, n_elements: int) -> int:
        """Byte span of ``n_elements`` elements (ceil for packed types)."""
        return (n_elements * self.bits + 7) // 8


def _dt(name: str | None) -> np.dtype | None:
    if name is None:
        return None
    if hasattr(np, name):
        return np.dtype(getattr(np, name))
    return np.dtype(getattr(ml_dtypes, name))


# name, bits, numpy / ml_dtypes name, torch name, float.  Order == HF's enum order.
# float: an IEEE-style float that values are cast to and from (F8_E8M0, an
# exponent-only scale, the FNUZ variants without inf and the packed F4/F6
# types are not).
_SAFETENSORS_ROWS = [
    ("BOOL", 8, "bool_", "bool", False),
    ("F4", 4, "float4_e2m1fn", None, False),
    ("F6_E2M3", 6, "float6_e2m3fn", None, False),
    ("F6_E3M2", 6, "float6_e3m2fn", None, False),
    ("U8", 8, "uint8", "uint8", False),
    ("I8", 8, "int8", "int8", False),
    ("F8_E5M2", 8, "float8_e5m2", "float8_e5m2", True),
    ("F8_E4M3", 8, "float8_e4m3fn", "float8_e4m3fn", True),
    ("F8_E8M0", 8, "float8_e8m0fnu", "float8_e8m0fnu", False),
    ("F8_E4M3FNUZ", 8, "float8_e4m3fnuz", "float8_e4m3fnuz", False),
    ("F8_E5M2FNUZ", 8, "float8_e5m2fnuz", "float8_e5m2fnuz", False),
    ("I16", 16, "int16", "int16", False),
    ("U16", 16, "uint16", "uint16", False),
    ("F16", 16, "float16", "float16", True),
    ("BF16", 16, "bfloat16", "bfloat16", True),
    ("I32", 32, "int32", "int32", False),
    ("U32", 32, "uint32", "uint32", False),
    ("F32", 32, "float32", "float32", True),
    ("C64", 64, "complex64", "complex64", False),
    ("F64", 64, "float64", "float64", True),
    ("I64", 64, "int64", "int64", False),
    ("U64", 64, "uint64", "uint64", False),
]

SAFETENSORS: dict[str, DType] = {
    name: DType(name, bits, i, _dt(np_name), torch_name, is_float)
    for i, (name, bits, np_name, torch_name, is_float) in enumerate(_SAFETENSORS_ROWS)
}

_BY_NUMPY: dict[np.dtype, DType] = {d.numpy: d for d in SAFETENSORS.values() if d.numpy is not None}


def safetensors_dtype(code: str) -> DType:
    """The entry for a safetensors dtype code (case-sensitive); KeyError if unknown."""
    return SAFETENSORS[code]


def from_numpy(dtype: np.dtype | type) -> DType:
    """The safetensors entry for a numpy / ml_dtypes dtype (byte order ignored)."""
    dt = np.dtype(dtype)
    if dt.byteorder not in ("=", "|"):
        dt = dt.newbyteorder("=")
    try:
        return _BY_NUMPY[dt]
    except KeyError:
        raise TypeError(f"numpy dtype {dt} has no safetensors dtype code") from None


# How people spell float dtypes on command lines and in configs -> safetensors code.
_FLOAT_SPELLINGS = {
    "f16": "F16", "fp16": "F16", "float16": "F16", "half": "F16",
    "bf16": "BF16", "bfloat16": "BF16",
    "f32": "F32", "fp32": "F32", "float32": "F32", "float": "F32",
    "f64": "F64", "fp64": "F64", "float64": "F64", "double": "F64",
    "fp8": "F8_E4M3",
}  # fmt: skip


def dtype_by_name(name: str) -> DType:
    """A safetensors code (``"BF16"``) or a common spelling (``"bf16"``, ``"float16"``, ``"half"``).

    Raises KeyError for anything else; callers turn it into their own named error.
    """
    key = str(name).strip()
    code = _FLOAT_SPELLINGS.get(key.lower(), key.upper())
    return SAFETENSORS[code]


# --------------------------------------------------------------------------- ggml


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type."""

    name: str
    id: int
    block_size: int
    type_size: int
    numpy: np.dtype | None  # plain (non-block) types only
    safetensors: str | None  # the matching safetensors code, if any

    @property
    def quantized(self) -> bool:
        return self.block_size > 1

    @property
    def is_float(self) -> bool:
        """A plain float type (F32, F16, BF16, F64): the flag of its safetensors code."""
        return self.safetensors is not None and SAFETENSORS[self.safetensors].is_float

    @property
    def bits_per_weight(self) -> float:
        return self.type_size * 8 / self.block_size

    def nbytes(self, n_elements: int) -> int:
        """Bytes of ``n_elements`` elements; n_elements must be whole blocks."""
        return n_elements // self.block_size * self.type_size


# name, id, block size, type size, numpy name, safetensors code
_GGML_ROWS = [
    ("F32", 0, 1, 4, "float32", "F32"),
    ("F16", 1, 1, 2, "float16", "F16"),
    ("Q4_0", 2, 32, 18, None, None),
    ("Q4_1", 3, 32, 20, None, None),
    ("Q5_0", 6, 32, 22, None, None),
    ("Q5_1", 7, 32, 24, None, None),
    ("Q8_0", 8, 32, 34, None, None),
    ("Q8_1", 9, 32, 36, None, None),
    ("Q2_K", 10, 256, 84, None, None),
    ("Q3_K", 11, 256, 110, None, None),
    ("Q4_K", 12, 256, 144, None, None),
    ("Q5_K", 13, 256, 176, None, None),
    ("Q6_K", 14, 256, 210, None, None),
    ("Q8_K", 15, 256, 292, None, None),
    ("IQ2_XXS", 16, 256, 66, None, None),
    ("IQ2_XS", 17, 256, 74, None, None),
    ("IQ3_XXS", 18, 256, 98, None, None),
    ("IQ1_S", 19, 256, 50, None, None),
    ("IQ4_NL", 20, 32, 18, None, None),
    ("IQ3_S", 21, 256, 110, None, None),
    ("IQ2_S", 22, 256, 82, None, None),
    ("IQ4_XS", 23, 256, 136, None, None),
    ("I8", 24, 1, 1, "int8", "I8"),
    ("I16", 25, 1, 2, "int16", "I16"),
    ("I32", 26, 1, 4, "int32", "I32"),
    ("I64", 27, 1, 8, "int64", "I64"),
    ("F64", 28, 1, 8, "float64", "F64"),
    ("IQ1_M", 29, 256, 56, None, None),
    ("BF16", 30, 1, 2, "bfloat16", "BF16"),
    ("TQ1_0", 34, 256, 54, None, None),
    ("TQ2_0", 35, 256, 66, None, None),
    ("MXFP4", 39, 32, 17, None, None),
    ("NVFP4", 40, 64, 36, None, None),
    ("Q1_0", 41, 128, 18, None, None),
    ("Q2_0", 42, 64, 18, None, None),
]

GGML: dict[str, GGMLType] = {
    name: GGMLType(name, tid, bs, ts, _dt(np_name), st)
    for name, tid, bs, ts, np_name, st in _GGML_ROWS
}
GGML_BY_ID: dict[int, GGMLType] = {t.id: t for t in GGML.values()}


def ggml_type(t: str | int | GGMLType) -> GGMLType:
    """Look a ggml type up by name (case-insensitive), number or entry.

    Raises KeyError for an unknown type; callers turn it into their own
    named error with the file and offset they know.
    """
    if isinstance(t, GGMLType):
        return t
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        return GGML_BY_ID[int(t)]
    if isinstance(t, str):
        return GGML[t.upper()]
    raise KeyError(t)


# --------------------------------------------------------------------------- torch
# torch dtypes are named by the ``torch`` field of the safetensors rows above.
# Two extras: complex128 has no safetensors code (readable, not convertible),
# and torch's legacy typed-storage classes name a dtype by class name.
TORCH_EXTRA: dict[str, np.dtype] = {"complex128": np.dtype(np.complex128)}

TORCH_STORAGE_CLASSES: dict[str, str] = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}

_BY_TORCH: dict[str, DType] = {d.torch: d for d in SAFETENSORS.values() if d.torch is not None}


def torch_dtype(name: str) -> tuple[np.dtype, DType | None]:
    """numpy dtype and safetensors entry (None if it has none) of a torch dtype name.

    ``name`` is the attribute name in the torch module (``"float32"``,
    ``"float8_e4m3fn"``); KeyError for a dtype we cannot hold in numpy.
    """
    entry = _BY_TORCH.get(name)
    if entry is not None and entry.numpy is not None and not entry.packed:
        return entry.numpy, entry
    return TORCH_EXTRA[name], None
