"""ctypes wrapper over ggml's C reference quantizers (the test oracle).

``libggml-base.so`` ships inside the ``llama_cpp`` package built by
llama-cpp-python (``site-packages/llama_cpp/lib/``).  It exports
``ggml_quantize_chunk`` (quantize whole rows, optionally with an importance
matrix) and ``ggml_get_type_traits`` whose ``to_float`` member dequantizes.
``WEIGHTSMITH_GGML_LIB`` may point at another build of the library.

Used by tests/test_quant_ggml.py and benchmarks/bench_quant.py::

    from support import ggml_ref
    q = ggml_ref.quantize(x, "Q4_K", imatrix)      # uint8 [nrows, row_bytes]
    y = ggml_ref.dequantize(q, "Q4_K", x.size)     # float32 [n_elements]
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path

import numpy as np

from weightsmith.dtypes import ggml_type

__all__ = [
    "dequantize",
    "has_to_float",
    "lib",
    "quantize",
    "requires_imatrix",
    "row_size",
    "type_id",
]


class _TypeTraits(ctypes.Structure):
    # struct ggml_type_traits in ggml.h of llama.cpp as vendored by
    # llama-cpp-python 0.3.36 (7 members; the vec_dot members moved to the CPU backend).
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_lib: ctypes.CDLL | None = None


def _find_library() -> Path:
    env = os.environ.get("WEIGHTSMITH_GGML_LIB")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llama-cpp-python is not installed (pip install llama-cpp-python)")
    for loc in spec.submodule_search_locations:
        for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
            for cand in (Path(loc) / "lib" / name, Path(loc) / name):
                if cand.exists():
                    return cand
    raise ImportError("libggml-base not found inside the llama_cpp package")


def lib() -> ctypes.CDLL:
    """The loaded libggml-base, with argument types declared (loaded once)."""
    global _lib
    if _lib is None:
        so = ctypes.CDLL(str(_find_library()))
        so.ggml_quantize_chunk.restype = ctypes.c_size_t
        so.ggml_quantize_chunk.argtypes = [
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_void_p,
        ]
        so.ggml_quantize_init.argtypes = [ctypes.c_int]
        so.ggml_quantize_init.restype = None
        so.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
        so.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
        so.ggml_get_type_traits.argtypes = [ctypes.c_int]
        so.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
        so.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        so.ggml_row_size.restype = ctypes.c_size_t
        _lib = so
    return _lib


def type_id(name: str) -> int:
    """ggml's enum value for a type name (case-insensitive)."""
    return ggml_type(name).id


def requires_imatrix(name: str) -> bool:
    return bool(lib().ggml_quantize_requires_imatrix(type_id(name)))


def row_size(name: str, n_per_row: int) -> int:
    return int(lib().ggml_row_size(type_id(name), n_per_row))


def has_to_float(name: str) -> bool:
    """True if ggml has a to_float (dequantizer) for the type."""
    return bool(lib().ggml_get_type_traits(type_id(name)).contents.to_float)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def quantize(x: np.ndarray, type_name: str, imatrix: np.ndarray | None = None) -> np.ndarray:
    """Quantize f32 rows [nrows, n] with ggml_quantize_chunk -> uint8 [nrows, row_bytes]."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    nrows, n = x.shape
    tid = type_id(type_name)
    so = lib()
    so.ggml_quantize_init(tid)
    rb = row_size(type_name, n)
    out = np.zeros((nrows, rb), dtype=np.uint8)
    im = None
    if imatrix is not None:
        im = np.ascontiguousarray(imatrix, dtype=np.float32)
        if im.shape != (n,):
            raise ValueError(f"imatrix must have shape ({n},), got {im.shape}")
    written = so.ggml_quantize_chunk(
        tid, _ptr(x), _ptr(out), 0, nrows, n, None if im is None else _ptr(im)
    )
    if written != out.nbytes:
        raise RuntimeError(f"ggml wrote {written} bytes, expected {out.nbytes}")
    return out


def dequantize(raw: np.ndarray, type_name: str, n_elements: int) -> np.ndarray:
    """Dequantize raw bytes with the type's to_float -> float32 [n_elements]."""
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    t = ggml_type(type_name)
    if raw.size != t.nbytes(n_elements) or n_elements % t.block_size:
        raise ValueError(f"{raw.size} bytes do not hold {n_elements} {t.name} elements")
    traits = lib().ggml_get_type_traits(t.id).contents
    if not traits.to_float:
        raise NotImplementedError(f"ggml has no to_float for {t.name}")
    out = np.empty(n_elements, dtype=np.float32)
    _TO_FLOAT(traits.to_float)(_ptr(raw), _ptr(out), n_elements)
    return out
