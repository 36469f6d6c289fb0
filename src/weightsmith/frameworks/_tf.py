"""TensorFlow adapter (``safe_open(framework="tf")``, :mod:`weightsmith.tensorflow`).

TensorFlow's numpy types for bfloat16 and float8 (e4m3fn, e5m2) are the
ml_dtypes ones, so those arrays convert directly; safetensors dtypes TF has
no type for (the fnuz and e8m0 float8s, F4, F6) raise UnsupportedDtype.
``tf.convert_to_tensor`` may share an aligned CPU buffer rather than copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import errors as E
from .._lazy import require
from ..dtypes import DType

TENSOR = "tf.Tensor"


def module():
    return require("tensorflow", "weightsmith.tensorflow")


def is_tensor(x: Any) -> bool:
    tf = module()
    return isinstance(x, (tf.Tensor, tf.Variable))


def from_numpy(arr: np.ndarray, dtype: DType, device: str = "cpu") -> Any:
    tf = module()
    try:
        tf.dtypes.as_dtype(arr.dtype)
    except TypeError:
        raise E.UnsupportedDtype(f"tensorflow has no dtype for safetensors {dtype.name}") from None
    return tf.convert_to_tensor(arr)


def to_numpy(x: Any) -> np.ndarray:
    return x.numpy()
