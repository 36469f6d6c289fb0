"""Read a GGUF file with ggml's own C reader (libggml-base from llama-cpp-python), fast.

gguf-py's GGUFReader builds a Python object per array element, which takes about ten
seconds per file for a 150k-token vocabulary; ggml's ``gguf_init_from_file`` is the
reference parser and takes milliseconds.  Returns every KV as ``key -> (type, element
type, value)`` in file order and every tensor as ``(name, type id, ggml dims, bytes)``.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from . import ggml_ref


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


@functools.cache
def _so() -> ctypes.CDLL:
    so = ctypes.CDLL(str(ggml_ref._find_library()))
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    sigs = {
        "gguf_init_from_file": (vp, [ctypes.c_char_p, _InitParams]),
        "gguf_free": (None, [vp]),
        "gguf_get_n_kv": (i64, [vp]),
        "gguf_get_key": (ctypes.c_char_p, [vp, i64]),
        "gguf_get_kv_type": (ctypes.c_int, [vp, i64]),
        "gguf_get_arr_type": (ctypes.c_int, [vp, i64]),
        "gguf_get_arr_n": (ctypes.c_size_t, [vp, i64]),
        "gguf_get_arr_data": (vp, [vp, i64]),
        "gguf_get_arr_str": (ctypes.c_char_p, [vp, i64, ctypes.c_size_t]),
        "gguf_get_val_data": (vp, [vp, i64]),
        "gguf_get_val_str": (ctypes.c_char_p, [vp, i64]),
        "gguf_get_n_tensors": (i64, [vp]),
        "gguf_get_tensor_name": (ctypes.c_char_p, [vp, i64]),
        "gguf_get_tensor_type": (ctypes.c_int, [vp, i64]),
        "gguf_get_tensor_offset": (ctypes.c_size_t, [vp, i64]),
        "gguf_get_tensor_size": (ctypes.c_size_t, [vp, i64]),
        "gguf_get_data_offset": (ctypes.c_size_t, [vp]),
        "ggml_get_tensor": (vp, [vp, ctypes.c_char_p]),
        "ggml_n_dims": (ctypes.c_int, [vp]),
        "ggml_free": (None, [vp]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(so, name)
        f.restype, f.argtypes = res, args
    return so


# GGUF value type -> numpy scalar type
_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
       6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip
STRING, ARRAY = 8, 9


def read(path: str | Path) -> tuple[dict, list]:
    so = _so()
    ctx = ctypes.c_void_p()
    g = so.gguf_init_from_file(str(path).encode(), _InitParams(True, ctypes.pointer(ctx)))
    assert g, f"ggml cannot read {path}"
    try:
        kvs: dict = {}
        for i in range(so.gguf_get_n_kv(g)):
            key = so.gguf_get_key(g, i).decode()
            t = so.gguf_get_kv_type(g, i)
            if t == STRING:
                kvs[key] = (t, None, so.gguf_get_val_str(g, i))
            elif t == ARRAY:
                et = so.gguf_get_arr_type(g, i)
                n = so.gguf_get_arr_n(g, i)
                if et == STRING:
                    v = tuple(so.gguf_get_arr_str(g, i, j) for j in range(n))
                else:
                    dt = np.dtype(_NP[et])
                    ptr = so.gguf_get_arr_data(g, i)
                    v = ctypes.string_at(ptr, n * dt.itemsize) if n else b""
                kvs[key] = (t, et, v)
            else:
                dt = np.dtype(_NP[t])
                kvs[key] = (t, None, ctypes.string_at(so.gguf_get_val_data(g, i), dt.itemsize))
        base = so.gguf_get_data_offset(g)
        tensors = []
        with open(path, "rb") as f:
            for i in range(so.gguf_get_n_tensors(g)):
                name = so.gguf_get_tensor_name(g, i)
                tp = so.ggml_get_tensor(ctx, name)
                nd = so.ggml_n_dims(tp)
                # struct ggml_tensor: enum type; (pad); buffer pointer; int64_t ne[4]
                ne = np.frombuffer(ctypes.string_at(tp + 16, 32), dtype=np.int64)[:nd].tolist()
                f.seek(base + so.gguf_get_tensor_offset(g, i))
                data = f.read(so.gguf_get_tensor_size(g, i))
                tensors.append((name.decode(), so.gguf_get_tensor_type(g, i), ne, data))
        return kvs, tensors
    finally:
        so.gguf_free(g)
        if ctx.value:
            so.ggml_free(ctx)
