"""The IQ ("importance") quant family of ggml: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL and IQ4_XS.

Every block type below is a packed C struct from ggml-common.h; integers are
little endian, ``d`` is an IEEE half.  ``QK_K`` = 256 values per block except
IQ4_NL (32).  Groups of 8 values are coded as an index into a *grid* of
8-vectors (or two indices into a grid of 4-vectors) plus 8 sign bits; the
grids and sign tables are format data kept in :mod:`._iq_tables`.

Layouts (offset: field), per block, ``ib`` = 32-value sub-block 0..7:

* IQ2_XXS (66 B): 0 d; 2 qs[32] u16.  Sub-block ``ib`` owns 8 bytes at
  2+8*ib: bytes 0..3 are iq2xxs_grid indices for its four 8-groups, the next
  u32 ``a`` holds four 7-bit ksigns_iq2xs indices (bits 7l..7l+6) and the
  scale in bits 28..31.  value = d*(0.5+s)*0.25 * grid * sign.
* IQ2_XS (74 B): 0 d; 2 qs[32] u16 (bits 0..8 iq2xs_grid index, 9..15
  ksigns index); 66 scales[8] (two 4-bit scales per sub-block, low nibble for
  groups 0-1, high for 2-3).  value = d*(0.5+s)*0.25 * grid * sign.
* IQ2_S (82 B): 0 d; 2 qs[32] low 8 bits of the iq2s_grid index per group;
  34 signs[32] one raw sign byte per group; 66 qh[8] bits 2l..2l+1 of qh[ib]
  are index bits 8..9 of group l; 74 scales[8] as IQ2_XS.
* IQ3_XXS (98 B): 0 d; 2 qs[64] iq3xxs_grid indices (one per 4 values);
  66 scales_and_signs[8] u32 (four 7-bit ksigns indices, scale in 28..31).
  value = d*(0.5+s)*0.5 * grid * sign.
* IQ3_S (110 B): 0 d; 2 qs[64] low 8 bits of iq3s_grid indices; 66 qh[8]
  bit k of qh[ib] is index bit 8 of 4-group k; 74 signs[32] raw sign bytes;
  106 scales[4] two 4-bit scales s per byte.  value = d*(1+2s) * grid * sign.
* IQ1_S (50 B): 0 d; 2 qs[32] low 8 bits of iq1s_grid indices; 34 qh[8] u16:
  bits 3l..3l+2 index bits 8..10 of group l, 12..14 scale s, 15 delta sign.
  value = d*(2s+1) * (grid ± 0.125).
* IQ1_M (56 B): 0 qs[32] as IQ1_S; 32 qh[16] (per group pair: index bits
  8..10 in bits 0..2 / 4..6, delta sign in bit 3 / 7); 48 scales[8] = four
  u16 holding 3-bit sub-scales (6 bits per sub-block), and in their top
  nibbles the 16 bits of the fp16 super-scale.
* IQ4_NL (18 B, 32 values): 0 d; 2 qs[16]: value j is kvalues_iq4nl[qs[j] &
  15], value j+16 is kvalues_iq4nl[qs[j] >> 4], times d.
* IQ4_XS (136 B): 0 d; 2 scales_h u16 (2 high bits of each 6-bit sub-scale);
  4 scales_l[4] (low nibbles, two per byte); 8 qs[128] as IQ4_NL per
  sub-block.  value = d*(ls-32) * kvalues_iq4nl[q].

Quantizers, every one bit for bit with ggml (float32 in ggml's operation
order, its tie-breaking, its ``nearest_int`` bit trick), compiled in
``csrc/iquants.c`` (:mod:`weightsmith._native.iquants`):

* IQ4_NL, IQ4_XS -- ``quantize_row_iq4_nl_impl`` (ntry=7 scale search);
* IQ3_XXS, IQ3_S, IQ2_S, IQ2_XXS, IQ2_XS -- scale trials over a grid with
  off-grid groups moved to their best precomputed neighbour (the
  ``iq3xs_init_impl`` / ``iq2xs_init_impl`` tables, which the C module
  derives from the grids below on first use);
* IQ1_S, IQ1_M -- exhaustive split search over the sorted values.

IQ2_XXS, IQ2_XS and IQ1_S need an importance matrix, as in ggml.  The grids,
sign tables and code book (:mod:`._iq_tables`) are handed to the C module
once, at import.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._native import iquants as _native
from ..dtypes import GGML
from ..errors import ImatrixRequired
from . import _iq_tables as _t
from ._kernels import row_kernel

__all__ = ["DEQUANTIZE", "KVALUES_IQ4NL", "QUANTIZE", "best_index_iq4nl"]

# every table the C module reads, by its name in _iq_tables
_TABLES = (
    "kvalues_iq4nl",
    "ksigns_iq2xs",
    "iq2xxs_grid",
    "iq2xs_grid",
    "iq2s_grid",
    "iq3xxs_grid",
    "iq3s_grid",
    "iq1s_grid",
)


def _table_bytes(name: str) -> bytes:
    """The little-endian bytes of one table of :mod:`._iq_tables`."""
    return bytes.fromhex(getattr(_t, name.upper() + "_HEX"))


for _name in _TABLES:
    _native.set_table(_name, _table_bytes(_name))

KVALUES_IQ4NL = np.frombuffer(_table_bytes("kvalues_iq4nl"), dtype=np.int8)
KVALUES_IQ4NL.setflags(write=False)

# ggml_quantize_requires_imatrix()
_NEEDS_IMATRIX = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S"})


def best_index_iq4nl(x: np.ndarray) -> np.ndarray:
    """ggml's best_index_int8(16, kvalues_iq4nl, x) for every element, uint8
    (the compiled lookup the IQ4 quantizers use)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint8)
    _native.iq4nl_index(x, out)
    return out


def _decoder(name: str) -> Callable[..., np.ndarray]:
    t = GGML[name]

    def dequantize(
        blocks: np.ndarray, out: np.ndarray | None = None, threads: int = 1
    ) -> np.ndarray:
        blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
        nb = blocks.size // t.type_size
        if out is None:
            out = np.empty((nb, t.block_size), dtype=np.float32)
        _native.dequantize(t.id, blocks, out, threads)  # checks every size first
        return out

    dequantize.fills_out = True  # type: ignore[attr-defined]
    dequantize.__name__ = f"dequantize_{name.lower()}"
    dequantize.__doc__ = f"{name} blocks [nb, {t.type_size}] -> float32 [nb, {t.block_size}]."
    return dequantize


def _quantizer(name: str) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    t = GGML[name]

    def quantize(
        rows: np.ndarray,
        imatrix: np.ndarray | None = None,
        out: np.ndarray | None = None,
        threads: int = 1,
    ) -> np.ndarray:
        if imatrix is None and name in _NEEDS_IMATRIX:
            raise ImatrixRequired(
                f"{name} cannot be quantized without an importance matrix (ggml asserts one)",
                field="imatrix",
                expected="float32 [n_per_row]",
                found="None",
            )
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nrows, n = rows.shape
        if out is None:
            out = np.empty((nrows, n // t.block_size * t.type_size), dtype=np.uint8)
        im = None if imatrix is None else np.ascontiguousarray(imatrix, dtype=np.float32)
        _native.quantize(t.id, rows, out, n, im, threads)  # checks every size first
        return out

    quantize.fills_out = True  # type: ignore[attr-defined]
    quantize.kernel = row_kernel(_native.kernel, t.id)  # type: ignore[attr-defined]
    quantize.__name__ = f"quantize_{name.lower()}"
    quantize.__doc__ = (
        f"float32 rows [nrows, {t.block_size}k] -> {name} bytes [nrows, {t.type_size}k],"
        f" as ggml's quantize_{name.lower()}."
    )
    return quantize


_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS")

DEQUANTIZE: dict[str, Callable[..., np.ndarray]] = {n: _decoder(n) for n in _TYPES}
QUANTIZE: dict[str, Callable[[np.ndarray, np.ndarray | None], np.ndarray]] = {
    n: _quantizer(n) for n in _TYPES
}
