"""Drop-in mirror of ``safetensors.paddle``: save, save_file, load, load_file
for PaddlePaddle tensors (``paddle.Tensor``).

Loaded CPU tensors are zero-copy (DLPack) where paddle allows it.
bfloat16, float8_e4m3fn and float8_e5m2 are supported; ``device`` places
the tensors (``"cpu"``, ``"gpu:0"``, ...).
Imported lazily: importing this module needs no paddlepaddle; the first call
does, and raises :class:`weightsmith.errors.MissingDependencyError` naming
``pip install 'weightsmith[paddle]'`` if it is missing.  Unlike HF's, the
dict passed to ``save``/``save_file`` is left unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from . import frameworks as _fw
from .safetensors import TensorSpec, deserialize, safe_open, serialize, serialize_file

# With HF's top-level names, which HF's module re-exports too.
__all__ = [
    "TensorSpec",
    "deserialize",
    "load",
    "load_file",
    "safe_open",
    "save",
    "save_file",
    "serialize",
    "serialize_file",
]

_NAME = "paddle"


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors``."""
    return _fw.save(_NAME, tensors, metadata)


def save_file(
    tensors: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` to ``filename`` (atomically)."""
    _fw.save_file(_NAME, tensors, filename, metadata)


def load(data: bytes, device: str = "cpu") -> dict[str, Any]:
    """Tensors of a safetensors file held in memory."""
    return _fw.load(_NAME, data, device)


def load_file(
    filename: str | os.PathLike[str],
    device: str = "cpu",
    *,
    backend: str = "mmap",
) -> dict[str, Any]:
    """Every tensor of a file; ``backend`` is ``"mmap"`` or ``"pread"``."""
    return _fw.load_file(_NAME, filename, device, backend)
