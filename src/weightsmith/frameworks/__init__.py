"""Glue to array frameworks other than numpy, each imported lazily.

``weightsmith.frameworks.torch`` maps safetensors dtypes to torch dtypes
through :mod:`weightsmith.dtypes` and builds tensors without copies; it
imports torch on first use only.

The other frameworks of HF safetensors (jax/flax, tensorflow, mlx, paddle)
each have an *adapter* module here, found by :func:`adapter` from the
framework's canonical name in ``safe_open`` (``"flax"``, ``"tf"``,
``"mlx"``, ``"paddle"``).  The contract of an adapter:

* ``TENSOR``: the name of its tensor type, for messages.
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
``.mlx``) get HF's four functions from :func:`weightsmith._mirror.mirror`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MODULES", "adapter"]

# safe_open's canonical framework name -> adapter module
_ADAPTERS = {"flax": "_jax", "tf": "_tf", "mlx": "_mlx", "paddle": "_paddle"}
# ... and its public module, weightsmith.<name>
MODULES = {"flax": "flax", "tf": "tensorflow", "mlx": "mlx", "paddle": "paddle"}


def adapter(framework: str) -> ModuleType:
    """The adapter module of a framework (``"flax"``, ``"tf"``, ``"mlx"``, ``"paddle"``)."""
    return importlib.import_module(f"{__name__}.{_ADAPTERS[framework]}")
