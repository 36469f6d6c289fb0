"""Glue to array frameworks other than numpy, each imported lazily.

``weightsmith.frameworks.torch`` maps safetensors dtypes to torch dtypes
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

The public modules (:mod:`weightsmith.flax`, ``.tensorflow``, ``.paddle``,
``.mlx``) are each made by :func:`mirror`: HF's four functions, ``save``,
``save_file``, ``load`` and ``load_file``, for one framework.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, NamedTuple

__all__ = ["Mirror", "adapter", "mirror"]

# safe_open's canonical framework name -> adapter module
_ADAPTERS = {"flax": "_jax", "tf": "_tf", "mlx": "_mlx", "paddle": "_paddle"}
# ... and its public module, weightsmith.<name>
_MODULES = {"flax": "flax", "tf": "tensorflow", "mlx": "mlx", "paddle": "paddle"}


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


class Mirror(NamedTuple):
    """HF's four functions of ``safetensors.<framework>``, for one framework."""

    save: Callable[..., bytes]
    save_file: Callable[..., None]
    load: Callable[..., dict[str, Any]]
    load_file: Callable[..., dict[str, Any]]


def mirror(framework: str) -> Mirror:
    """``save``, ``save_file``, ``load``, ``load_file`` with HF's signatures
    (plus ``device`` everywhere: HF's paddle module has it, the others give
    an error for anything but ``"cpu"``)."""

    def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
        """The bytes of a safetensors file holding ``tensors``."""
        from .. import safetensors

        return safetensors.save(_numpy_dict(framework, tensors), metadata)

    def save_file(
        tensors: Mapping[str, Any],
        filename: str | os.PathLike[str],
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Write ``tensors`` to ``filename`` (atomically)."""
        from .. import safetensors

        safetensors.save_file(_numpy_dict(framework, tensors), filename, metadata)

    def load(data: bytes, device: str = "cpu") -> dict[str, Any]:
        """Tensors of a safetensors file held in memory."""
        from .. import safetensors

        adapter(framework).module()
        return safetensors.load(data, framework, device)

    def load_file(
        filename: str | os.PathLike[str], device: str = "cpu", *, backend: str = "mmap"
    ) -> dict[str, Any]:
        """Every tensor of a file; ``backend`` is ``"mmap"`` or ``"pread"``."""
        from .. import safetensors

        adapter(framework).module()
        return safetensors.load_file(filename, framework, device, backend=backend)

    functions = (save, save_file, load, load_file)
    for fn in functions:  # help() and tracebacks name the public module
        fn.__module__ = f"weightsmith.{_MODULES[framework]}"
        fn.__qualname__ = fn.__name__
    return Mirror(*functions)
