"""jax adapter (``safe_open(framework="flax"|"jax")``, :mod:`weightsmith.flax`).

jax takes ml_dtypes arrays natively (bfloat16, every float8, float4), so the
numpy form of each safetensors dtype goes in as it is.  ``jax.device_put``
on the CPU wraps a numpy buffer without copying when it is 64-byte aligned
(measured with jax 0.10: 8-, 16- and 32-byte aligned buffers are copied);
safetensors aligns data to 8 bytes only, so a tensor is zero-copy when its
offset in the file happens to be a multiple of 64.  jax arrays are
immutable, and the buffer is a private copy-on-write mapping nobody else
writes.  As with HF's module (``jnp.array``), 64-bit types become 32-bit
unless ``jax_enable_x64`` is set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import errors as E
from .._lazy import require
from ..dtypes import DType

TENSOR = "jax.Array"


def module():
    return require("jax", "weightsmith.flax")


def is_tensor(x: Any) -> bool:
    return isinstance(x, module().Array)


def from_numpy(arr: np.ndarray, dtype: DType, device: str = "cpu") -> Any:
    jax = module()
    try:
        return jax.device_put(arr)
    except TypeError as exc:  # a dtype this jax does not have
        raise E.UnsupportedDtype(f"jax cannot hold safetensors {dtype.name}: {exc}") from None


def to_numpy(x: Any) -> np.ndarray:
    return np.asarray(x)
