"""MLX adapter (``safe_open(framework="mlx")``, :mod:`weightsmith.mlx`).

``mx.array`` copies (MLX cannot wrap foreign memory).  MLX does not know the
ml_dtypes types, so bfloat16 crosses as its uint16 bit pattern and is
reinterpreted on the other side (``view``), both ways; MLX has no float8 or
float4 dtypes, which raise UnsupportedDtype.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .. import errors as E
from .._lazy import require
from ..dtypes import DType

TENSOR = "mlx.core.array"

# safetensors codes MLX holds through a same-width integer
_BITCAST = {"BF16": ("bfloat16", np.uint16, "uint16")}


def module():
    return require("mlx.core", "weightsmith.mlx")


def is_tensor(x: Any) -> bool:
    return isinstance(x, module().array)


def from_numpy(arr: np.ndarray, dtype: DType, device: str = "cpu") -> Any:
    mx = module()
    cast = _BITCAST.get(dtype.name)
    if cast is not None:
        return mx.array(np.asarray(arr, order="C").view(cast[1])).view(getattr(mx, cast[0]))
    if arr.dtype.kind == "V" or dtype.packed or dtype.name.startswith("F8"):
        raise E.UnsupportedDtype(f"mlx has no dtype for safetensors {dtype.name}")
    return mx.array(arr)


def to_numpy(x: Any) -> np.ndarray:
    mx = module()
    if x.dtype == mx.bfloat16:
        return np.asarray(x.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.asarray(x)
