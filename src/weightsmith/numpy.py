"""Drop-in mirror of ``safetensors.numpy``: save, save_file, load, load_file.

Differences from HF, all deliberate: non-contiguous, Fortran-ordered and
big-endian arrays are written correctly (HF 0.8 writes non-contiguous
arrays' raw memory); metadata keys are written sorted; every dtype of
:mod:`weightsmith.dtypes` works, ml_dtypes ones included (bfloat16, float8,
and the packed float4/float6 types); ``load_file`` returns zero-copy,
read-only views of a memory map instead of copies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from . import safetensors as st
from .safetensors import TensorSpec, deserialize, safe_open, serialize, serialize_file

# With HF's top-level names, which HF's module re-exports too (paddle itself
# does ``from safetensors.numpy import safe_open``).
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


def save(tensor_dict: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file holding ``tensor_dict``."""
    return st.save(tensor_dict, metadata)


def save_file(
    tensor_dict: Mapping[str, np.ndarray],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensor_dict`` to ``filename`` (atomically)."""
    st.save_file(tensor_dict, filename, metadata)


def load(data: bytes) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file held in memory."""
    return st.load(data, "np")


def load_file(filename: str | os.PathLike[str], *, backend: str = "mmap") -> dict[str, np.ndarray]:
    """Every tensor of a file; ``backend`` is ``"mmap"`` or ``"pread"``."""
    return st.load_file(filename, "np", backend=backend)
