"""torch glue: dtype mapping through :mod:`weightsmith.dtypes`, zero-copy tensors.

torch is imported lazily (the first call of any function here).  F4 is the
one irregular type: torch holds it as ``float4_e2m1fn_x2``, one byte holding
two elements, so its torch shape has the last dimension halved compared with
the safetensors (logical) shape.  F6 types have no torch dtype.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import errors as E
from .._lazy import require
from ..dtypes import SAFETENSORS, DType

_cache: dict[str, Any] = {}


def torch():
    mod = _cache.get("torch")
    if mod is None:
        mod = _cache["torch"] = require("torch", "torch tensors")
    return mod


def _tables():
    tab = _cache.get("tables")
    if tab is None:
        t = torch()
        to_torch: dict[str, Any] = {}
        for d in SAFETENSORS.values():
            if d.torch is not None and hasattr(t, d.torch):
                to_torch[d.name] = getattr(t, d.torch)
        if hasattr(t, "float4_e2m1fn_x2"):
            to_torch["F4"] = t.float4_e2m1fn_x2
        from_torch = {v: SAFETENSORS[k] for k, v in to_torch.items()}
        tab = _cache["tables"] = (to_torch, from_torch)
    return tab


def view_plans() -> dict[str, tuple]:
    """code -> (numpy dtype to view the bytes as, torch dtype to view the
    result as or None, alignment) for the whole-byte types torch has."""
    plans = _cache.get("plans")
    if plans is None:
        to_torch = _tables()[0]
        plans = {}
        for code, td in to_torch.items():
            d = SAFETENSORS[code]
            if d.packed:
                continue
            if d.numpy.name in _NATIVE:
                plans[code] = (d.numpy, None, d.itemsize)
            else:
                plans[code] = (np.dtype(_UINT[d.itemsize]), td, d.itemsize)
        _cache["plans"] = plans
    return plans


def to_torch_dtype(dtype: DType):
    """The torch dtype of a safetensors dtype (UnsupportedDtype if none)."""
    td = _tables()[0].get(dtype.name)
    if td is None:
        raise E.UnsupportedDtype(f"torch has no dtype for safetensors {dtype.name}")
    return td


def from_torch_dtype(td) -> DType:
    """The safetensors dtype of a torch dtype."""
    d = _tables()[1].get(td)
    if d is None:
        raise E.UnsupportedDtype(f"torch dtype {td} has no safetensors dtype code")
    return d


def is_tensor(x) -> bool:
    t = _cache.get("torch")
    if t is None:
        # Only look if torch was already imported by the caller: a value can
        # not be a torch tensor otherwise.
        if "torch" not in sys.modules:
            return False
        t = torch()
    return isinstance(x, t.Tensor)


def logical_shape(t) -> tuple[int, ...]:
    """Safetensors shape of a torch tensor (F4 counts single elements)."""
    shape = tuple(t.shape)
    if t.dtype is _tables()[0].get("F4") and shape:
        shape = (*shape[:-1], shape[-1] * 2)
    return shape


def storage_shape(dtype: DType, shape: tuple[int, ...]) -> tuple[int, ...]:
    """torch shape for a safetensors shape (halves the last dim for F4)."""
    if dtype.name == "F4":
        if not shape or shape[-1] % 2:
            raise E.UnsupportedDtype(
                f"F4 tensor of shape {list(shape)} has an odd last dimension; torch's "
                "float4_e2m1fn_x2 needs pairs (read it with framework='np')"
            )
        return (*shape[:-1], shape[-1] // 2)
    return shape


def tensor_bytes(t) -> memoryview:
    """The raw bytes of a contiguous CPU tensor, without a copy.

    Goes through a uint8 numpy view so the memoryview keeps the tensor (and
    so its memory) alive, however temporary the tensor was.
    """
    if t.numel() == 0:
        return memoryview(b"")
    u8 = t.detach().reshape(-1).view(torch().uint8)
    return memoryview(u8.numpy())


def from_buffer(base: np.ndarray, offset: int, dtype: DType, shape: tuple[int, ...]):
    """A tensor over ``base[offset:]`` (a uint8 numpy array) without a copy.

    Going through numpy matters: the tensor then keeps the numpy array, and
    with it a buffer export of the underlying mmap, alive -- so the mapping
    cannot be unmapped under the tensor.  ``base`` must be writable (a
    copy-on-write mmap or a fresh buffer): torch has no read-only tensors.
    Misaligned data is copied, since torch kernels assume aligned elements.
    """
    t = torch()
    td = to_torch_dtype(dtype)
    sshape = storage_shape(dtype, shape)
    itemsize = max(1, dtype.itemsize)
    count = 1
    for d in sshape:
        count *= d
    if count == 0:
        return t.empty(sshape, dtype=td)
    raw = base[offset : offset + count * itemsize]
    if offset % itemsize or not raw.flags.writeable:
        raw = raw.copy()
    return t.from_numpy(raw.view(_UINT[itemsize])).view(td).reshape(sshape)


def from_numpy(arr: np.ndarray, dtype: DType):
    """A tensor sharing memory with a numpy array of whole-byte elements."""
    t = torch()
    td = to_torch_dtype(dtype)
    if arr.size == 0:
        return t.empty(storage_shape(dtype, arr.shape), dtype=td)
    if arr.dtype.kind == "V" or arr.dtype.name not in _NATIVE:
        # ml_dtypes (bfloat16, float8_*): reinterpret through a same-width int
        u = arr.view(_UINT[arr.dtype.itemsize])
        if any(s < 0 for s in u.strides):
            u = u.copy()  # C-contiguous can still carry a negative stride on a size-1 dim
        return t.from_numpy(u).view(td)
    if any(s < 0 for s in arr.strides):
        arr = arr.copy()
    return t.from_numpy(arr)


_NATIVE = {
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "float16",
    "int32",
    "uint32",
    "float32",
    "complex64",
    "float64",
    "int64",
    "uint64",
}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# --------------------------------------------------------------------------- shared storage


def storage_ptr(t) -> int:
    """Address of the storage under ``t`` (0 where there is none: meta, ...)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def storage_size(t) -> int:
    """Bytes of the storage under ``t`` (0 where there is none)."""
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return 0


def area(t) -> tuple[int, int]:
    """``(first byte, one past the last byte)`` any element of ``t`` can reach."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    # strides may be non-contiguous: the furthest element bounds the span
    span = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    return start, start + (span + 1) * t.element_size()


def find_shared(tensors: dict[str, Any]) -> list[set[str]]:
    """Every name once, grouped with the names it shares memory with.

    Same rule and order as ``safetensors.torch._find_shared_tensors``: names
    on one storage (same device, address and size) whose byte ranges
    overlap form a group, unshared tensors are groups of one, groups come in
    the order of their storage's first tensor; tensors without storage
    (meta, empty) are left out.
    """
    t = torch()
    meta = t.device("meta")
    by_storage: dict[Any, list[str]] = {}
    for name, v in tensors.items():
        if v.device == meta:
            continue
        ptr, size = storage_ptr(v), storage_size(v)
        if ptr and size:
            by_storage.setdefault((v.device, ptr, size), []).append(name)
    groups: list[set[str]] = []
    for names in by_storage.values():
        areas = sorted((*area(tensors[n]), n) for n in names)
        stop = areas[0][1]
        groups.append({areas[0][2]})
        for a, b, n in areas[1:]:
            if a < stop:
                groups[-1].add(n)
            else:
                groups.append({n})
            stop = max(stop, b)
    return groups


def shared_groups(tensors: dict[str, Any]) -> list[list[str]]:
    """The groups of :func:`find_shared` of two or more names, each sorted."""
    return sorted(sorted(g) for g in find_shared(tensors) if len(g) > 1)


def check_shared(tensors: dict[str, Any]) -> None:
    """Raise SharedTensorsError listing every group of tensors sharing memory."""
    groups = shared_groups(tensors)
    if groups:
        listed = "; ".join("[" + ", ".join(repr(n) for n in g) + "]" for g in groups)
        raise E.SharedTensorsError(
            f"these tensors share memory and would be duplicated on disk: {listed}. "
            "Save a copy (.clone()) of all but one, or use weightsmith.torch.save_model, "
            "which keeps one name per shared group"
        )


def is_complete(t) -> bool:
    """True if ``t`` covers its whole storage, from its first byte."""
    return t.data_ptr() == storage_ptr(t) and t.numel() * t.element_size() == storage_size(t)


def duplicate_names(
    state_dict: dict[str, Any],
    *,
    preferred_names: Any = None,
    discard_names: Any = None,
    lone: bool = False,
) -> dict[str, list[str]]:
    """For each shared group: the name kept -> the names dropped (sorted).

    The kept name covers the whole storage; among several, the preferred
    one, else one not discarded, else the first in sorted order -- the rule
    of ``safetensors.torch._remove_duplicate_names``.  A group in which no
    tensor covers the storage is refused (SharedTensorsError, a
    RuntimeError).  ``lone=True`` applies that refusal to unshared tensors
    too, as HF's function does; ``save_model`` does not need it, since only
    a tensor's own bytes are written.
    """
    preferred = set(preferred_names or ())
    discard = set(discard_names or ())
    out: dict[str, list[str]] = {}
    for group in find_shared(state_dict):
        if len(group) < 2 and not lone:
            continue
        complete = sorted(n for n in group if is_complete(state_dict[n]))
        if not complete:
            raise E.SharedTensorsError(
                f"tensors {sorted(group)} share a storage but none covers all of it; "
                "refusing to save a larger storage than the tensors need"
            )
        keep = complete[0]
        not_discarded = [n for n in complete if n not in discard]
        if not_discarded:
            keep = not_discarded[0]
        pref = [n for n in complete if n in preferred]
        if pref:
            keep = pref[0]
        dropped = sorted(n for n in group if n != keep)
        if dropped:
            out[keep] = dropped
    return out
