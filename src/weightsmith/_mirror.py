"""HF's four functions of ``safetensors.<framework>`` (``save``, ``save_file``,
``load``, ``load_file``) for one framework: what :mod:`weightsmith.flax`,
``.tensorflow``, ``.paddle`` and ``.mlx`` are made of.

The tensors go through the framework's adapter
(:func:`weightsmith.frameworks.adapter`) to and from numpy, and through
:mod:`weightsmith.safetensors` to and from the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from . import safetensors
from .frameworks import MODULES, adapter

__all__ = ["Mirror", "mirror"]


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
        return safetensors.save(_numpy_dict(framework, tensors), metadata)

    def save_file(
        tensors: Mapping[str, Any],
        filename: str | os.PathLike[str],
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Write ``tensors`` to ``filename`` (atomically)."""
        safetensors.save_file(_numpy_dict(framework, tensors), filename, metadata)

    def load(data: bytes, device: str = "cpu") -> dict[str, Any]:
        """Tensors of a safetensors file held in memory."""
        adapter(framework).module()
        return safetensors.load(data, framework, device)

    def load_file(
        filename: str | os.PathLike[str], device: str = "cpu", *, backend: str = "mmap"
    ) -> dict[str, Any]:
        """Every tensor of a file; ``backend`` is ``"mmap"`` or ``"pread"``."""
        adapter(framework).module()
        return safetensors.load_file(filename, framework, device, backend=backend)

    functions = (save, save_file, load, load_file)
    for fn in functions:  # help() and tracebacks name the public module
        fn.__module__ = f"weightsmith.{MODULES[framework]}"
    return Mirror(*functions)
