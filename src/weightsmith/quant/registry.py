"""The one registry of ggml codecs: which family module encodes/decodes a type.

Every family module (``plain``, ``legacy``, ``kquants``, ``iquants``,
``ternary``, ``fp4``) exports two dicts keyed by ggml type name:

* ``DEQUANTIZE[name](blocks: uint8 [nblocks, type_size], out=None, threads=1)
  -> float32 [nblocks, block_size]``; a decoder with the attribute
  ``fills_out = True`` writes into ``out`` (a C-contiguous float32
  [nblocks, block_size]) when given
* ``QUANTIZE[name](rows: float32 [nrows, n], imatrix: float32 [n] | None, out=None,
  threads=1) -> uint8 [nrows, n // block_size * type_size]``; an encoder with
  ``fills_out = True`` writes into ``out`` (a C-contiguous uint8 array of that
  shape) when given
* ``threads``: the kernel splits the call over that many threads of the kernel
  core's one pool (``weightsmith._native.pool``); the bytes never depend on it
* every encoder also has ``kernel()``: its row-kernel capsule, which
  ``weightsmith._native.pool.quantize`` runs in batches (see ``_engine.quantize_spans``);
  in a batch NaN/inf is refused for every block type (by its kernel, or by the
  pool before it when the capsule asks) and stored by the plain float types

This module merges them (a type claimed twice is a bug and fails loudly) and
adds what the families do not know: which types need an importance matrix.  Type sizes come from :mod:`weightsmith.dtypes`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..dtypes import GGML, GGMLType, ggml_type
from ..errors import UnknownQuantType

__all__ = ["FAMILIES", "Codec", "QuantTypeInfo", "codec", "info", "types"]

FAMILIES = ("plain", "legacy", "kquants", "iquants", "ternary", "fp4")

# ggml_quantize_requires_imatrix(): ggml asserts an imatrix for these.
REQUIRES_IMATRIX = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S"})

# Bytes of temporaries per element a codec needs while working on a chunk
# (upper bounds; benchmarks/bench_quant.py --section memory measures them with
# tracemalloc); the API sizes its chunks from these so that all chunks in
# flight fit 64 MiB.  Since every codec is a C kernel (issue 16) the kernels
# allocate nothing per element (the IQ grid codecs build lookup tables once,
# up to ~4 MiB, which they keep); what is left is the API's float32 copy of a
# span of non-float32 input (4 B/elem) and, for the types without a
# self-checking kernel, numpy's isfinite mask of the span (1-2 B/elem).  The
# defaults keep a margin over that (they were 64 / 24 B for the numpy codecs).
# A codec that needs more than the default must be listed here, or the
# 64 MiB bound breaks.
QUANTIZE_TEMP_BYTES_DEFAULT = 16
DEQUANTIZE_TEMP_BYTES_DEFAULT = 8
QUANTIZE_TEMP_BYTES: dict[str, int] = {}
DEQUANTIZE_TEMP_BYTES: dict[str, int] = {}

Dequantizer = Callable[[np.ndarray], np.ndarray]
Quantizer = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]


@dataclass(frozen=True)
class Codec:
    """A ggml type with the functions that encode and decode it."""

    type: GGMLType
    family: str | None
    dequantize: Dequantizer | None
    quantize: Quantizer | None

    @property
    def requires_imatrix(self) -> bool:
        return self.type.name in REQUIRES_IMATRIX

    @property
    def quantize_temp_bytes(self) -> int:
        return QUANTIZE_TEMP_BYTES.get(self.type.name, QUANTIZE_TEMP_BYTES_DEFAULT)

    @property
    def dequantize_temp_bytes(self) -> int:
        return DEQUANTIZE_TEMP_BYTES.get(self.type.name, DEQUANTIZE_TEMP_BYTES_DEFAULT)


@dataclass(frozen=True)
class QuantTypeInfo:
    """What :func:`weightsmith.quant.info` reports about one ggml type."""

    name: str
    id: int
    block_size: int
    type_size: int
    bits_per_weight: float
    family: str | None
    can_quantize: bool
    can_dequantize: bool
    requires_imatrix: bool


_lock = threading.Lock()
_codecs: dict[str, Codec] | None = None


def _build() -> dict[str, Codec]:
    deq: dict[str, tuple[str, Dequantizer]] = {}
    qua: dict[str, tuple[str, Quantizer]] = {}
    for fam in FAMILIES:
        mod = importlib.import_module(f"{__package__}.{fam}")
        for table, into in ((mod.DEQUANTIZE, deq), (mod.QUANTIZE, qua)):
            for name, fn in table.items():
                if name not in GGML:
                    raise RuntimeError(f"quant.{fam} registers unknown ggml type {name!r}")
                if name in into and into[name][0] != fam:
                    raise RuntimeError(f"{name} is registered by both {into[name][0]} and {fam}")
                into[name] = (fam, fn)
    out = {}
    for name, t in GGML.items():
        fam = (deq.get(name) or qua.get(name) or (None,))[0]
        out[name] = Codec(
            t,
            fam,
            deq[name][1] if name in deq else None,
            qua[name][1] if name in qua else None,
        )
    return out


def _table() -> dict[str, Codec]:
    global _codecs
    if _codecs is None:
        with _lock:
            if _codecs is None:
                _codecs = _build()
    return _codecs


def lookup_type(t: str | int | GGMLType) -> GGMLType:
    """The ggml type for a name (any case), number or entry; UnknownQuantType if none."""
    try:
        return ggml_type(t)
    except (KeyError, AttributeError, TypeError):
        raise UnknownQuantType(
            "unknown ggml type",
            field="type",
            expected="a ggml type name or number (e.g. 'Q4_K' or 12)",
            found=repr(t),
        ) from None


def codec(t: str | int | GGMLType) -> Codec:
    """The registered codec of a ggml type (functions may be None)."""
    return _table()[lookup_type(t).name]


def info(t: str | int | GGMLType) -> QuantTypeInfo:
    """Name, number, block and type size, bits per weight and capabilities of a type."""
    c = codec(t)
    return QuantTypeInfo(
        name=c.type.name,
        id=c.type.id,
        block_size=c.type.block_size,
        type_size=c.type.type_size,
        bits_per_weight=c.type.bits_per_weight,
        family=c.family,
        can_quantize=c.quantize is not None,
        can_dequantize=c.dequantize is not None,
        requires_imatrix=c.requires_imatrix,
    )


def types(*, quantize: bool = False) -> list[str]:
    """Names of every type with a dequantizer (or, with ``quantize=True``, a quantizer)."""
    return [
        n for n, c in _table().items() if (c.quantize if quantize else c.dequantize) is not None
    ]
