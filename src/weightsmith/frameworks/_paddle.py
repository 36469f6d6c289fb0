"""PaddlePaddle adapter (``safe_open(framework="paddle")``, :mod:`weightsmith.paddle`).

Tensors are copies (``paddle.to_tensor``).  Not zero-copy on purpose:
paddle 3.3's DLPack import aborts the process ("The deleter of the pointer
is not found", SIGABRT) when two tensors wrapping the same address are
freed -- which reading one tensor twice from a mapping does.  ml_dtypes'
types cross as same-width integers and are reinterpreted with
``Tensor.view(dtype)`` (int16 for bfloat16: paddle has no view kernel for
uint16).  Paddle's ``numpy()`` gives
bfloat16 as uint16 (and float8 as uint8): ``to_numpy`` puts the registry's
ml_dtypes type back.  Paddle has no uint16/32/64, float8 fnuz/e8m0 or F4/F6:
those raise UnsupportedDtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import errors as E
from .._lazy import require
from ..dtypes import SAFETENSORS, DType

TENSOR = "paddle.Tensor"

# safetensors code -> paddle dtype name
_PADDLE = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
# same-width integer types to carry ml_dtypes' types (int16: paddle reads a
# numpy uint16 as bfloat16, and has no view kernel for uint16)
_CARRIER = {1: np.uint8, 2: np.int16}


def module():
    return require("paddle", "weightsmith.paddle")


def is_tensor(x: Any) -> bool:
    return isinstance(x, module().Tensor)


def _paddle_dtype(dtype: DType):
    name = _PADDLE.get(dtype.name)
    if name is None:
        raise E.UnsupportedDtype(f"paddle has no dtype for safetensors {dtype.name}")
    return getattr(module(), name)


def from_numpy(arr: np.ndarray, dtype: DType, device: str = "cpu") -> Any:
    paddle = module()
    pd = _paddle_dtype(dtype)
    bitcast = arr.dtype.kind == "V" or arr.dtype.type.__module__.startswith("ml_dtypes")
    if arr.size == 0:
        out = paddle.empty(list(arr.shape), dtype=pd)
    else:
        src = arr.view(_CARRIER[arr.dtype.itemsize]) if bitcast else arr
        out = paddle.to_tensor(src, place="cpu")
        if out.dtype != pd:
            out = out.view(pd)
    if device != "cpu":
        out = out.to(device)
    return out


def to_numpy(x: Any) -> np.ndarray:
    name = str(x.dtype).split(".")[-1]
    code = next((k for k, v in _PADDLE.items() if v == name), None)
    if code is None:
        raise E.UnsupportedDtype(f"paddle dtype {x.dtype} has no safetensors dtype code")
    d = SAFETENSORS[code]
    if not x.place.is_cpu_place():
        x = x.cpu()
    a = x.numpy()
    if a.dtype != d.numpy:
        a = a.view(d.numpy)  # bfloat16 / float8 come out as same-width integers
    return a
