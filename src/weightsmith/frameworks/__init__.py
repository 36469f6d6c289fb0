"""Glue to array frameworks other than numpy, each imported lazily.

``weightsmith.frameworks._torch`` maps safetensors dtypes to torch dtypes
through :mod:`weightsmith.dtypes` and builds tensors without copies; it
imports torch on first use only.

The other frameworks of HF safetensors (jax/flax, tensorflow, mlx, paddle)
each have an *adapter* module here, found by :func:`adapter` from the
framework's canonical name in ``safe_open`` (``"flax"``, ``"tf"``,
``"mlx"``, ``"paddle"``).  The contract of an adapter:

* ``NAME``: the framework's name in messages, ``TENSOR``: its tensor type's.
* ``module()``: the framework, imported on first use, or
  :class:`~weightsmith.errors.MissingDependencyError` naming the extra.
* ``from_numpy(arr, dtype, device)``: a tensor with the values of ``arr``
  (the numpy form of safetensors dtype ``dtype``: ml_dtypes for bfloat16
  and float8), zero-copy where the framework can wrap the memory;
  :class:`~weightsmith.errors.UnsupportedDtype` for a dtype the framework
  does not have.  ``arr`` may be a view of a copy-on-write mapping: the
  tensor keeps it alive.
* ``to_numpy(x)``: the numpy form of a tensor for the writer (dtype from
  the registry, zero-copy where possible).
* ``is_tensor(x)``.

The save/load functions every framework module shares are
:func:`save`, :func:`save_file`, :func:`load` and :func:`load_file` here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["adapter", "load", "load_file", "save", "save_file"]

# safe_open's canonical framework name -> adapter module
_ADAPTERS = {"flax": "_jax", "tf": "_tf", "mlx": "_mlx", "paddle": "_paddle"}


def adapter(framework: str) -> ModuleType:
    """The adapter module of a framework (``"flax"``, ``"tf"``, ``"mlx"``, ``"paddle"``)."""
    return importlib.import_module(f"{__name__}.{_ADAPTERS[framework]}")


def _numpy_dict(framework: str, tensors: Mapping[str, Any]) -> dict[str, Any]:
    ad = adapter(framework)
    ad.module()  # MissingDependencyError before anything else
    if not isinstance(tensors, Mapping):
        raise ValueError(f"Expected a dict of [str, {ad.TENSOR}] but received {type(tensors)}")
    out = {}
    for k, v in tensors.items():
        if not ad.is_tensor(v):
            raise ValueError(f"Key `{k}` is invalid, expected {ad.TENSOR} but received {type(v)}")
        out[k] = ad.to_numpy(v)
    return out


def save(framework: str, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None) -> bytes:
    """The bytes of a safetensors file holding a framework's tensors."""
    from .. import safetensors

    return safetensors.save(_numpy_dict(framework, tensors), metadata)


def save_file(
    framework: str,
    tensors: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None,
) -> None:
    """Write a framework's tensors to ``filename`` (atomically)."""
    from .. import safetensors

    safetensors.save_file(_numpy_dict(framework, tensors), filename, metadata)


def load(framework: str, data: bytes, device: str = "cpu") -> dict[str, Any]:
    """A framework's tensors from the bytes of a safetensors file."""
    from .. import safetensors

    adapter(framework).module()
    return safetensors.load(data, framework, device)


def load_file(
    framework: str, filename: str | os.PathLike[str], device: str = "cpu", backend: str = "mmap"
) -> dict[str, Any]:
    """Every tensor of a file, as the framework's tensors."""
    from .. import safetensors

    adapter(framework).module()
    return safetensors.load_file(filename, framework, device, backend=backend)
