"""HF safetensors' low-level API: ``TensorSpec``, ``serialize``, ``serialize_file``,
``deserialize``.

These are the functions HF's framework modules (and some downstream code)
build on: a tensor is described by a dtype *name*, a shape and a raw memory
address with a length.

* ``TensorSpec(*, dtype, shape, data_ptr, data_len)``: ``dtype`` is one of
  HF's names (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``,
  ``"float4_e2m1fn_x2"``, ...: the torch attribute names);
  :class:`~weightsmith.errors.InvalidTensorSpec` for another, or for a
  ``data_len`` that does not match the shape.  For ``float4_e2m1fn_x2``
  (two elements a byte) the last dimension is doubled to the logical
  element count, as HF does.  ``spec.dtype`` is the header code (``"F32"``).
* ``serialize(specs, metadata=None) -> bytes`` and
  ``serialize_file(specs, filename, metadata=None)`` write exactly what the
  writer of :mod:`._writer` writes for the same tensors (HF's layout); a
  raw dict instead of a TensorSpec is a TypeError, as in HF >= 0.8.
* ``deserialize(data) -> [(name, {"shape", "dtype", "data"})]`` with
  ``data`` a bytearray copy of the tensor's bytes, in file order.

The caller keeps the memory behind ``data_ptr`` alive during the call (the
same contract as HF's).  Nothing is copied on the way to the file.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import errors as E
from ..dtypes import SAFETENSORS, DType
from . import _subbyte, _writer
from ._header import parse_header, read_header_size

__all__ = ["TensorSpec", "deserialize", "serialize", "serialize_file"]

# HF's dtype names (torch's attribute names) -> safetensors dtype
_BY_NAME: dict[str, DType] = {d.torch: d for d in SAFETENSORS.values() if d.torch is not None}
_BY_NAME["float4_e2m1fn_x2"] = SAFETENSORS["F4"]


class TensorSpec:
    """One tensor to serialize: dtype name, shape, and the bytes at ``data_ptr``."""

    __slots__ = ("_dtype", "data_len", "data_ptr", "shape")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        try:
            d = _BY_NAME[dtype]
        except (KeyError, TypeError):
            raise E.InvalidTensorSpec(
                f"unknown dtype {dtype!r}: expected one of {', '.join(_BY_NAME)}"
            ) from None
        shape = [int(s) for s in shape]
        if any(s < 0 for s in shape):
            raise E.InvalidTensorSpec(f"shape {shape} has a negative dimension")
        if d.packed and shape:
            shape[-1] *= 2  # float4_e2m1fn_x2: the storage shape counts byte pairs
        n = 1
        for s in shape:
            n *= s
        if d.nbytes(n) != data_len:
            raise E.InvalidTensorSpec(
                f"{dtype} tensor of shape {shape} needs {d.nbytes(n)} bytes, data_len is {data_len}"
            )
        if data_len and not data_ptr:
            raise E.InvalidTensorSpec(f"data_ptr is 0 for {data_len} bytes of data")
        self._dtype = d
        self.shape = shape
        self.data_ptr = int(data_ptr)
        self.data_len = int(data_len)

    @property
    def dtype(self) -> str:
        """The safetensors header code, e.g. ``"F32"``."""
        return self._dtype.name

    def __repr__(self) -> str:
        return (
            f"TensorSpec(dtype={self.dtype!r}, shape={self.shape}, "
            f"data_ptr={self.data_ptr}, data_len={self.data_len})"
        )

    def array(self) -> np.ndarray:
        """A numpy array over the memory at ``data_ptr`` (no copy for whole-byte types)."""
        d = self._dtype
        if not self.data_len:
            return np.empty(self.shape, d.numpy)
        raw = np.ctypeslib.as_array((ctypes.c_ubyte * self.data_len).from_address(self.data_ptr))
        if d.packed:
            n = int(np.prod(self.shape, dtype=np.int64))
            return _subbyte.unpack(raw, d.bits, n).view(d.numpy).reshape(self.shape)
        return raw.view(d.numpy).reshape(self.shape)


def _arrays(tensor_dict: Mapping[str, TensorSpec]) -> dict[str, np.ndarray]:
    if not isinstance(tensor_dict, Mapping):
        raise TypeError(
            f"expected a dict of name -> TensorSpec, found {type(tensor_dict).__name__}"
        )
    out = {}
    for name, spec in tensor_dict.items():
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"tensor {name!r}: expected a TensorSpec, found {type(spec).__name__}")
        out[name] = spec.array()
    return out


def serialize(
    tensor_dict: Mapping[str, TensorSpec], metadata: Mapping[str, str] | None = None
) -> bytes:
    """The bytes of a safetensors file holding the tensors described."""
    return _writer.save(_arrays(tensor_dict), metadata)


def serialize_file(
    tensor_dict: Mapping[str, TensorSpec],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write the tensors described to ``filename`` (atomically)."""
    _writer.save_file(_arrays(tensor_dict), filename, metadata)


def deserialize(data: bytes | bytearray | memoryview) -> list[tuple[str, dict[str, Any]]]:
    """``[(name, {"shape": [...], "dtype": "F32", "data": bytearray})]`` in file order."""
    mv = memoryview(data).cast("B")
    n = read_header_size(mv[:8], len(mv))
    header = parse_header(mv[8 : 8 + n], len(mv))
    start = header.data_start
    out = []
    for t in sorted(header.tensors.values(), key=lambda t: t.data_offsets):
        b, e = t.data_offsets
        item = {
            "shape": list(t.shape),
            "dtype": t.dtype.name,
            "data": bytearray(mv[start + b : start + e]),
        }
        out.append((t.name, item))
    return out
