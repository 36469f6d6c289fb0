"""Registry entries (see :mod:`.registry`) made from a compiled family module.

A module of :mod:`weightsmith._native` (``csrc/<family>.c``) exports
``dequantize(type, blocks, out)``, ``quantize(type, rows, out, n_per_row,
imatrix)`` on caller buffers, ``kernel(type)`` and ``TYPES``.  :func:`codecs`
wraps them as the family's ``DEQUANTIZE`` and ``QUANTIZE`` entries: numpy only
allocates the output and hands over contiguous buffers; the kernel does all
the work with the GIL released, on ``threads`` threads of the kernel core's
one pool (``weightsmith._native.pool``).  Every encoder also carries
``kernel()``: its row kernel for batches on that pool (:func:`row_kernel`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType

import numpy as np

from ..dtypes import ggml_type
from ..errors import NonFiniteInput


def _decoder(kernels: ModuleType, name: str, block_size: int) -> Callable[..., np.ndarray]:
    def dequantize(
        blocks: np.ndarray, out: np.ndarray | None = None, threads: int = 1
    ) -> np.ndarray:
        blocks = np.ascontiguousarray(blocks)
        if out is None:
            out = np.empty((blocks.shape[0], block_size), np.float32)
        kernels.dequantize(name, blocks, out, threads)
        return out

    dequantize.fills_out = True  # type: ignore[attr-defined]
    dequantize.__name__ = f"dequantize_{name.lower()}"
    return dequantize


def _encoder(kernels: ModuleType, name: str, type_size: int, block_size: int):
    def quantize(
        rows: np.ndarray,
        imatrix: np.ndarray | None,
        out: np.ndarray | None = None,
        threads: int = 1,
    ) -> np.ndarray:
        rows = np.require(rows, np.float32, "CA")  # ggml takes aligned float*
        nrows, n = rows.shape
        if out is None:
            out = np.empty((nrows, n // block_size * type_size), np.uint8)
        if imatrix is not None:
            imatrix = np.require(imatrix, np.float32, "CA")
        if not kernels.quantize(name, rows, out, n, imatrix, threads):
            raise NonFiniteInput(f"{name} cannot hold NaN or inf")
        return out

    quantize.fills_out = True  # type: ignore[attr-defined]
    quantize.kernel = row_kernel(kernels.kernel, name)  # type: ignore[attr-defined]
    quantize.__name__ = f"quantize_{name.lower()}"
    return quantize


def row_kernel(make: Callable[[object], object], key: object) -> Callable[[], object]:
    """``kernel()`` of an encoder: ``make(key)``, the module's row-kernel capsule for
    ``weightsmith._native.pool.quantize``, made on first use (an IQ type builds its
    grid tables then, not at import)."""
    return functools.cache(lambda: make(key))


def codecs(kernels: ModuleType, quantizable: tuple[str, ...]) -> tuple[dict, dict]:
    """(DEQUANTIZE, QUANTIZE) of every type of ``kernels``; encoders for ``quantizable``."""
    deq, qua = {}, {}
    for name in kernels.TYPES:
        t = ggml_type(name)
        deq[name] = _decoder(kernels, name, t.block_size)
        if name in quantizable:
            qua[name] = _encoder(kernels, name, t.type_size, t.block_size)
    return deq, qua
