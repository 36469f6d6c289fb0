"""ggml quantization: every type dequantizes, the common ones quantize.

Public API::

    quantize(x, type, imatrix=None, *, workers=None)  -> uint8 [..., n / block * type_size]
    dequantize(raw, type, shape, *, workers=None)      -> float32 ndarray of ``shape``
    info(type)                                         -> QuantTypeInfo
    types(quantize=False)                              -> names of the supported types

``type`` is a ggml type name (any case), its number or a
:class:`weightsmith.dtypes.GGMLType`.  Results are bit-identical to ggml's C
reference (``ggml_quantize_chunk`` and the type's ``to_float``).

The codecs live in one module per family (plain, legacy, kquants, iquants,
ternary, fp4), merged by :mod:`.registry`; compiled kernels come from
``weightsmith._native``.  ``workers=k`` runs the work on ``k`` threads in this
process (``workers=0``: one per CPU): the calling thread and the kernel core's
one thread pool, with the GIL released for the whole call.  Results never
depend on the number of workers or the chunk size.  Memory: the codec's temporaries stay within
:data:`MEMORY_BUDGET` bytes (64 MiB) whatever the tensor size; only the output
is allocated in full.  How: :mod:`._engine`.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import GGMLType
from . import _engine
from ._engine import MEMORY_BUDGET
from .registry import QuantTypeInfo, info, types

__all__ = [
    "MEMORY_BUDGET",
    "QuantTypeInfo",
    "dequantize",
    "info",
    "quantize",
    "types",
]


def quantize(
    x: np.ndarray,
    type: str | int | GGMLType,
    imatrix: np.ndarray | None = None,
    *,
    workers: int | None = None,
    name: str | None = None,
    chunk_rows: int | None = None,
    backend: str = "auto",
) -> np.ndarray:
    """Quantize float rows ``x[..., n]`` to ggml ``type`` -> uint8 ``[..., n/block*type_size]``.

    ``imatrix`` is ggml's importance matrix: one non-negative weight per column.
    ``workers`` spreads row chunks over threads (0 = all CPUs).  ``name`` is
    used in error messages.  ``chunk_rows`` overrides the memory-derived
    chunk size.  ``backend``: "auto" or "thread", both the kernels' thread pool
    (the only one; any other value is InvalidWorkers).
    """
    return _engine.quantize(x, type, imatrix, workers, name, chunk_rows, backend)


def dequantize(
    raw,
    type: str | int | GGMLType,
    shape,
    *,
    workers: int | None = None,
    name: str | None = None,
    chunk_rows: int | None = None,
    backend: str = "auto",
) -> np.ndarray:
    """Decode ggml ``type`` bytes into a float32 array of ``shape``.

    ``raw`` is a uint8 array (any shape; read in order) or any bytes-like
    object, e.g. a slice of a memory map -- only one chunk of it is touched
    at a time.  ``workers``, ``chunk_rows`` and ``backend`` as for :func:`quantize`.
    """
    return _engine.dequantize(raw, type, shape, workers, name, chunk_rows, backend)
