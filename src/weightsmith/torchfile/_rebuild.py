"""Storages + (offset, size, stride) -> numpy arrays, the way torch rebuilds tensors.

A storage is a flat run of bytes.  Its element type is the tensor's dtype
(``TypedStorage`` classes name it; an ``UntypedStorage`` takes it from
``_rebuild_tensor_v3``'s dtype argument).  A tensor is the strided view::

    element (i0, i1, ...) = storage[offset + i0*stride0 + i1*stride1 + ...]

with offset and strides counted in elements.  Storages are written in the
byte order of the ``byteorder`` record (zip) -- little endian when absent and
always little endian in legacy files; big-endian data is byte-swapped per
element (per component for complex numbers), as ``torch.load`` does.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import errors
from ..dtypes import torch_dtype
from ._pickle import TensorRef

MAX_ELEMENTS = 1 << 62  # keeps numel * itemsize inside int64


def numpy_dtype(name: str, *, path: Any = None, field: str | None = None) -> np.dtype:
    """numpy dtype of a torch dtype name, or UnsupportedStorage."""
    try:
        return torch_dtype(name)[0]
    except KeyError:
        raise errors.UnsupportedStorage(
            "dtype has no numpy equivalent",
            path=path,
            field=field,
            expected="a dense dtype",
            found=name,
        ) from None


def typed_storage(
    raw: np.ndarray, dtype: np.dtype, byteorder: str, *, path: Any = None, field: str | None = None
) -> np.ndarray:
    """View (or, for foreign byte order, copy) the uint8 ``raw`` as a 1-D array of ``dtype``."""
    if raw.nbytes % dtype.itemsize:
        raise errors.StorageSizeMismatch(
            "storage is not a whole number of elements",
            path=path,
            field=field,
            expected=f"a multiple of {dtype.itemsize} bytes",
            found=raw.nbytes,
        )
    if byteorder == sys.byteorder or dtype.itemsize == 1:
        return raw.view(dtype)
    # foreign order: swap each scalar (each half of a complex number) into native order
    unit = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    return raw.view(f"u{unit}").byteswap().view(dtype)  # byteswap() copies


def check_bounds(
    t: TensorRef, storage_numel: int, *, path: Any = None, name: str | None = None
) -> int:
    """Check the view stays inside the storage; return its element count."""
    numel = 1
    for s in t.size:
        numel *= s
    if numel > MAX_ELEMENTS:
        raise errors.StorageOutOfBounds(
            "tensor has too many elements", path=path, field=name, expected="< 2**62", found=numel
        )
    if numel == 0:
        return 0
    last = t.offset + sum((s - 1) * st for s, st in zip(t.size, t.stride))
    if last >= storage_numel:
        raise errors.StorageOutOfBounds(
            "offset, size and stride reach past the end of the storage",
            path=path,
            field=name,
            expected=f"last element index < {storage_numel}",
            found=f"{last} (offset {t.offset}, size {list(t.size)}, stride {list(t.stride)})",
        )
    return numel


def view(
    storage: np.ndarray, t: TensorRef, *, path: Any = None, name: str | None = None
) -> np.ndarray:
    """The tensor as a read-only strided view of ``storage`` (bounds checked first)."""
    numel = check_bounds(t, storage.shape[0], path=path, name=name)
    if numel == 0:
        return np.empty(t.size, dtype=storage.dtype)
    item = storage.dtype.itemsize
    # as_strided goes through __array_interface__, which cannot spell ml_dtypes
    # types (bfloat16, float8): stride opaque bytes, then re-type the view
    base = storage[t.offset :].view(f"V{item}")
    strides = tuple(st * item for st in t.stride)
    out = np.lib.stride_tricks.as_strided(base, shape=t.size, strides=strides, writeable=False)
    return out.view(storage.dtype)
