"""Streaming GGUF writer (always version 3; layout in :mod:`weightsmith.gguf._spec`).

Use it in three steps, in order::

    with Writer("out.gguf", arch="llama") as w:
        w.add("llama.context_length", 4096, "u32")     # 1. typed metadata
        w.add_tensor_info("tok_embd.weight", "F32", (256, 64))  # 2. tensor infos
        w.write_tensor("tok_embd.weight", array)        # 3. data, in declared order

The header is written when the first tensor arrives; each tensor is padded
with zeros to the alignment, so peak memory is one tensor (or one chunk, with
:meth:`Writer.write_tensor_chunk`), never the model.  The output appears only
when :meth:`Writer.close` succeeds (temp file + rename).  For the same KVs and
tensors the bytes equal those of gguf-py's ``GGUFWriter``: ``arch`` is written
first as ``general.architecture``, a non-default alignment is then written as
``general.alignment`` (u32), like ``GGUFWriter.add_custom_alignment``.

Type inference when ``type`` is not given (as gguf-py's ``get_type``):

========================  ==========================================
Python value              GGUF type
========================  ==========================================
``bool``                  BOOL
``int``                   INT32 (pass ``"u32"``, ``"u64"``, ``"i64"``... otherwise)
``float``                 FLOAT32 (pass ``"f64"`` for doubles)
``str`` / ``bytes``       STRING
numpy scalar              its own type (``np.uint64`` -> UINT64, ...)
numpy 1-D array           ARRAY of its dtype's type
list / tuple              ARRAY of the first element's type (all must match)
========================  ==========================================

``type`` may be a :class:`GGUFValueType`, its number or short name (``"u64"``),
a :class:`MetaType` (what :meth:`GGUFFile.metadata_type` returns, so a value
read and written again keeps its exact type), or, for a list value, the
element type alone (``add("x", [1, 2], "u64")``).
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import errors as E
from .._atomic import atomic_output
from ..dtypes import GGMLType
from ..dtypes import ggml_type as _lookup_ggml
from ._parse import StringArray
from ._spec import (
    DEFAULT_ALIGNMENT,
    FROM_NUMPY,
    INT64_MAX,
    KEY_ALIGNMENT,
    KEY_ARCHITECTURE,
    MAGIC,
    MAX_DIMS,
    MAX_NAME,
    NUMPY,
    STRUCT_CODE,
    VT,
    GGUFValueType,
    MetaType,
    pad,
    value_type,
)

__all__ = ["Writer", "encode_value", "resolve_type"]

_NATIVE = "<" if sys.byteorder == "little" else ">"


# --------------------------------------------------------------------------- types


def infer_type(value: Any) -> MetaType:
    """The GGUF type the writer gives ``value`` when none is given (see module doc)."""
    if isinstance(value, (bool, np.bool_)):
        return MetaType(VT.BOOL)
    if isinstance(value, np.generic):
        return MetaType(_from_dtype(value.dtype))
    if isinstance(value, int):
        return MetaType(VT.INT32)
    if isinstance(value, float):
        return MetaType(VT.FLOAT32)
    if isinstance(value, (str, bytes, bytearray)):
        return MetaType(VT.STRING)
    if isinstance(value, StringArray):
        return MetaType(VT.ARRAY, MetaType(VT.STRING))
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "USO":
            return MetaType(VT.ARRAY, MetaType(VT.STRING))
        return MetaType(VT.ARRAY, MetaType(_from_dtype(value.dtype)))
    if isinstance(value, (list, tuple)):
        if not value:
            raise E.GGUFInvalidValue(
                "an empty array needs an explicit element type",
                expected="type=...",
                found="[]",
            )
        return MetaType(VT.ARRAY, infer_type(value[0]))
    raise E.GGUFInvalidValue(
        "no GGUF type for this value",
        expected="bool, int, float, str, list",
        found=type(value).__name__,
    )


def _from_dtype(dt: np.dtype) -> GGUFValueType:
    try:
        return FROM_NUMPY[(dt.kind, dt.itemsize)]
    except KeyError:
        raise E.GGUFInvalidValue(
            "no GGUF type for numpy dtype", expected="u1..u8, i1..i8, f4, f8, bool", found=str(dt)
        ) from None


def resolve_type(value: Any, type: Any = None) -> MetaType:
    """Turn a ``type=`` argument (or None) into a full MetaType for ``value``."""
    if type is None:
        return infer_type(value)
    if isinstance(type, MetaType):
        return type
    if isinstance(type, tuple):
        outer = value_type(type[0])
        if outer is VT.ARRAY and len(type) > 1:
            return MetaType(VT.ARRAY, resolve_type(value[0] if len(value) else None, type[1]))
        type = outer
    t = value_type(type)
    is_seq = isinstance(value, (list, tuple, np.ndarray, StringArray))
    if t is VT.ARRAY:
        return infer_type(value)
    if is_seq:
        return MetaType(VT.ARRAY, MetaType(t))
    return MetaType(t)


# --------------------------------------------------------------------------- encoding


class _Enc:
    """Encoders for one byte order."""

    def __init__(self, order: str) -> None:
        self.order = order
        self.s = {t: struct.Struct(order + c) for t, c in STRUCT_CODE.items()}
        self.s[VT.BOOL] = struct.Struct("?")
        self.u32 = self.s[VT.UINT32]
        self.u64 = self.s[VT.UINT64]

    def string(self, v: Any, key: str = "") -> bytes:
        if isinstance(v, str):
            b = v.encode("utf-8", "surrogateescape")
        elif isinstance(v, (bytes, bytearray, memoryview)):
            b = bytes(v)
        else:
            raise E.GGUFInvalidValue(field=key, expected="str", found=type(v).__name__)
        return self.u64.pack(len(b)) + b

    def scalar(self, v: Any, t: GGUFValueType, key: str) -> bytes:
        if t is VT.STRING:
            return self.string(v, key)
        try:
            if t is VT.BOOL:
                return self.s[t].pack(bool(v))
            if t in (VT.FLOAT32, VT.FLOAT64):
                return self.s[t].pack(float(v))
            if isinstance(v, (float, np.floating, str, bytes)):
                raise struct.error("not an integer")
            return self.s[t].pack(int(v))
        except (struct.error, TypeError, ValueError, OverflowError) as exc:
            raise E.GGUFInvalidValue(
                f"cannot store as {t.name} ({exc})", field=key, expected=t.name, found=repr(v)[:80]
            ) from None

    def value(self, v: Any, mt: MetaType, key: str) -> bytes:
        """The value's bytes, without its type tag."""
        if mt.type is not VT.ARRAY:
            return self.scalar(v, mt.type, key)
        return self.array(v, mt.element, key)

    def array(self, v: Any, et: MetaType | None, key: str) -> bytes:
        if isinstance(v, (str, bytes, bytearray)) or not isinstance(v, (Sequence, np.ndarray)):
            raise E.GGUFInvalidValue(
                "array value must be a sequence", field=key, expected="list", found=type(v).__name__
            )
        if et is None:
            et = infer_type(v[0]) if len(v) else None
            if et is None:
                raise E.GGUFInvalidValue(
                    "an empty array needs an explicit element type",
                    field=key,
                    expected="type",
                    found="[]",
                )
        head = self.u32.pack(et.type) + self.u64.pack(len(v))
        t = et.type
        if t is VT.STRING:
            if isinstance(v, StringArray):
                v = v.tolist()
            pk = self.u64.pack
            parts = []
            for s in v:
                b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else bytes(s)
                parts.append(pk(len(b)))
                parts.append(b)
            return head + b"".join(parts)
        if t is VT.ARRAY:
            return head + b"".join(self.array(x, et.element, key) for x in v)
        try:
            arr = self._numeric(v, t)
        except (OverflowError, ValueError, TypeError) as exc:
            raise E.GGUFInvalidValue(
                f"cannot store array as {t.name} ({exc})",
                field=key,
                expected=t.name,
                found=f"{len(v)} values",
            ) from None
        return head + arr.tobytes()

    def _numeric(self, v: Any, t: GGUFValueType) -> np.ndarray:
        if not isinstance(v, np.ndarray):
            kinds = {type(x) for x in v}
            if any(
                issubclass(k, (str, bytes, bytearray, list, tuple, dict)) or k is type(None)
                for k in kinds
            ):
                raise TypeError("array elements must all be numbers")
            if t not in (VT.FLOAT32, VT.FLOAT64) and any(
                issubclass(k, (float, np.floating)) for k in kinds
            ):
                raise TypeError("float value in an integer array")
        if t is VT.BOOL:
            return np.asarray(v).astype(bool).astype(np.uint8)
        dt = NUMPY[t].newbyteorder(self.order)
        if t in (VT.FLOAT32, VT.FLOAT64):
            return np.asarray(v, dtype=np.float64).astype(dt)
        if not isinstance(v, np.ndarray):
            return np.asarray(v, dtype=dt)  # numpy refuses out-of-range Python ints
        if v.dtype.kind not in "iub":
            raise TypeError(f"{v.dtype} values in an integer array")
        lo, hi = _int_range(t)
        if v.size and (int(v.min()) < lo or int(v.max()) > hi):
            raise OverflowError(f"values outside {lo}..{hi}")
        return v.astype(dt)

    def kv(self, key: str, v: Any, mt: MetaType) -> bytes:
        return self.string(key) + self.u32.pack(mt.type) + self.value(v, mt, key)


def _int_range(t: GGUFValueType) -> tuple[int, int]:
    bits = NUMPY[t].itemsize * 8
    if NUMPY[t].kind == "u":
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def encode_value(
    value: Any, type: Any = None, byte_order: str = "<", key: str = ""
) -> tuple[MetaType, bytes]:
    """(type, bytes) of a KV value as stored after its type tag."""
    mt = resolve_type(value, type)
    return mt, _Enc(byte_order).value(value, mt, key)


# --------------------------------------------------------------------------- writer


class _TInfo:
    __slots__ = ("dims", "done", "gt", "name", "nbytes", "rel")

    def __init__(self, name: str, gt: GGMLType, dims: tuple[int, ...], nbytes: int) -> None:
        self.name, self.gt, self.dims, self.nbytes = name, gt, dims, nbytes
        self.rel = 0
        self.done = 0


class Writer:
    """Streaming GGUF v3 writer; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        arch: str | None = None,
        alignment: int = DEFAULT_ALIGNMENT,
        byte_order: str = "<",
    ) -> None:
        if byte_order not in ("<", ">"):
            raise ValueError(f"byte_order must be '<' or '>', not {byte_order!r}")
        self.path = os.fspath(path)
        self.byte_order = byte_order
        self.alignment = DEFAULT_ALIGNMENT
        self._enc = _Enc(byte_order)
        self._kv: dict[str, tuple[MetaType, bytes]] = {}
        self._tensors: dict[str, _TInfo] = {}
        self._order: list[_TInfo] = []
        self._next = 0
        self._stack: contextlib.ExitStack | None = None
        self._f: Any = None
        self._state = "meta"
        if arch is not None:
            self.add(KEY_ARCHITECTURE, arch, VT.STRING)
        if alignment != DEFAULT_ALIGNMENT:
            self.add(KEY_ALIGNMENT, alignment, VT.UINT32)

    # -- step 1: metadata -----------------------------------------------------

    def _check_meta(self) -> None:
        if self._state != "meta":
            raise E.WriteError(
                f"{self.path}: metadata and tensor infos must come before tensor data"
            )

    def add(self, key: str, value: Any, type: Any = None) -> None:
        """Add (or replace, keeping its place) a KV; ``type`` as in the module docstring."""
        self._check_meta()
        if not isinstance(key, str) or not key:
            raise E.GGUFEmptyKey(
                path=self.path, field="key", expected="a non-empty str", found=repr(key)
            )
        if type is None and key == KEY_ALIGNMENT:
            type = VT.UINT32  # the only type general.alignment may have
        mt = resolve_type(value, type)
        data = self._enc.value(value, mt, key)
        if key == KEY_ALIGNMENT:
            self._set_alignment(value, mt)
        self._kv[key] = (mt, data)

    def add_encoded(self, key: str, mtype: MetaType, data: bytes) -> None:
        """Add a KV whose value bytes (after the type tag, in this file's byte order) are ready."""
        self._check_meta()
        if key == KEY_ALIGNMENT:
            self._set_alignment(
                struct.unpack(self.byte_order + "I", data)[0] if len(data) == 4 else None, mtype
            )
        self._kv[key] = (mtype, bytes(data))

    def remove(self, key: str) -> None:
        self._check_meta()
        del self._kv[key]
        if key == KEY_ALIGNMENT:
            self.alignment = DEFAULT_ALIGNMENT

    def _set_alignment(self, value: Any, mt: MetaType) -> None:
        if (
            mt != MetaType(VT.UINT32)
            or not isinstance(value, (int, np.integer))
            or value <= 0
            or value & (value - 1)
        ):
            raise E.GGUFInvalidAlignment(
                path=self.path,
                field=KEY_ALIGNMENT,
                expected="a u32 power of two",
                found=f"{value!r} ({mt})",
            )
        if self._tensors:
            raise E.WriteError(f"{self.path}: set the alignment before declaring tensors")
        self.alignment = int(value)

    # -- step 2: tensor infos -------------------------------------------------

    def add_tensor_info(
        self,
        name: str,
        ggml_type: str | int | GGMLType,
        shape: Sequence[int],
        *,
        dims: Sequence[int] | None = None,
    ) -> None:
        """Declare a tensor: name, ggml type, numpy shape (outermost first).

        ``dims`` (ggml order, as stored) may be given instead of ``shape`` to
        keep a stored layout exactly, trailing 1s included.
        """
        self._check_meta()
        try:
            gt = ggml_type if isinstance(ggml_type, GGMLType) else _lookup_ggml(ggml_type)
        except KeyError:
            raise E.GGUFUnknownGGMLType(
                path=self.path,
                field=f"tensor {name!r} type",
                expected="a ggml type",
                found=ggml_type,
            ) from None
        d = tuple(int(x) for x in (dims if dims is not None else reversed(tuple(shape))))
        self._validate_tensor(name, gt, d)
        nbytes = gt.nbytes(math.prod(d))
        info = _TInfo(name, gt, d, nbytes)
        if self._order:
            last = self._order[-1]
            info.rel = last.rel + pad(last.nbytes, self.alignment)
        self._tensors[name] = info
        self._order.append(info)

    def _validate_tensor(self, name: str, gt: GGMLType, d: tuple[int, ...]) -> None:
        f = f"tensor {name!r}"
        b = name.encode("utf-8")
        if len(b) >= MAX_NAME:
            raise E.GGUFTensorNameTooLong(
                path=self.path, field=f, expected=f"< {MAX_NAME} bytes", found=len(b)
            )
        if name in self._tensors:
            raise E.GGUFDuplicateTensor(
                path=self.path, field=f, expected="unique tensor names", found=name
            )
        if len(d) > MAX_DIMS:
            raise E.GGUFTooManyDims(
                path=self.path, field=f, expected=f"<= {MAX_DIMS} dims", found=len(d)
            )
        n = 1
        for x in d:
            if x <= 0 or x > INT64_MAX:
                raise E.GGUFInvalidDim(path=self.path, field=f, expected="dims >= 1", found=d)
            n *= x
        if n > INT64_MAX:
            raise E.GGUFSizeOverflow(
                path=self.path, field=f, expected="<= 2**63-1 elements", found=n
            )
        if d and d[0] % gt.block_size:
            raise E.GGUFRowNotBlockMultiple(
                path=self.path,
                field=f,
                expected=f"row length multiple of {gt.block_size}",
                found=d[0],
            )

    # -- step 3: data ---------------------------------------------------------

    def _header(self) -> bytes:
        enc = self._enc
        parts = [
            MAGIC,
            enc.u32.pack(3),
            enc.u64.pack(len(self._order)),
            enc.u64.pack(len(self._kv)),
        ]
        for key, (mt, data) in self._kv.items():
            parts += [enc.string(key), enc.u32.pack(mt.type), data]
        for t in self._order:
            parts += [
                enc.string(t.name),
                enc.u32.pack(len(t.dims)),
                struct.pack(self.byte_order + "Q" * len(t.dims), *t.dims),
                enc.u32.pack(t.gt.id),
                enc.u64.pack(t.rel),
            ]
        head = b"".join(parts)
        return head + bytes(pad(len(head), self.alignment) - len(head))

    def write_header(self) -> None:
        """Open the temp file and write magic, KVs, tensor infos and padding (done automatically)."""
        if self._state != "meta":
            return
        head = self._header()
        last = self._order[-1] if self._order else None
        size = len(head) + (last.rel + pad(last.nbytes, self.alignment) if last else 0)
        self._size = size
        self._stack = contextlib.ExitStack()
        self._f = self._stack.enter_context(atomic_output(self.path, size=size))
        self._state = "data"
        self._f.write(head)

    def _current(self, name: str) -> _TInfo:
        self.write_header()
        if self._state != "data" or self._next >= len(self._order):
            raise E.WriteError(f"{self.path}: tensor {name!r} was not declared or is written twice")
        t = self._order[self._next]
        if t.name != name:
            raise E.WriteError(
                f"{self.path}: expected tensor {t.name!r} next (declared order), got {name!r}"
            )
        return t

    def _as_bytes(self, t: _TInfo, data: Any) -> Any:
        if not isinstance(data, np.ndarray):
            return memoryview(data).cast("B")
        arr = data
        want = t.gt.numpy
        if want is None or arr.dtype == np.uint8:
            return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)  # raw bytes, as given
        base = arr.dtype.newbyteorder("=") if arr.dtype.kind in "iufcb" else arr.dtype
        if base != want:
            arr = arr.astype(want, casting="same_kind")
        if arr.dtype.itemsize > 1:
            # value-preserving move to the file's byte order, done on same-size
            # unsigned ints so that ml_dtypes types (bfloat16) work too
            src = _NATIVE if arr.dtype.byteorder in "=|" else arr.dtype.byteorder
            if src != self.byte_order:
                u = np.dtype(f"u{arr.dtype.itemsize}")
                arr = np.ascontiguousarray(arr).view(u.newbyteorder(src))
                arr = arr.astype(u.newbyteorder(self.byte_order))
        arr = np.ascontiguousarray(arr)
        return arr.reshape(-1).view(np.uint8)

    def write_tensor_chunk(self, name: str, data: Any) -> None:
        """Append part of tensor ``name``'s bytes; padding follows when it is complete."""
        t = self._current(name)
        b = self._as_bytes(t, data)
        n = len(b)
        if t.done + n > t.nbytes:
            self.abort()
            raise E.WriteError(
                f"{self.path}: tensor {name!r} gets {t.done + n} bytes, declared {t.nbytes}"
            )
        self._f.write(b)
        t.done += n
        if t.done == t.nbytes:
            self._f.write(bytes(pad(t.nbytes, self.alignment) - t.nbytes))
            self._next += 1

    def write_tensor(self, name: str, data: Any) -> None:
        """Write the whole of tensor ``name`` (the next declared one): numpy array or bytes."""
        t = self._current(name)
        if t.done:
            raise E.WriteError(f"{self.path}: tensor {name!r} was started with write_tensor_chunk")
        b = self._as_bytes(t, data)
        if len(b) != t.nbytes:
            raise E.WriteError(
                f"{self.path}: tensor {name!r} has {len(b)} bytes, declared {t.nbytes}"
            )
        self.write_tensor_chunk(name, b)

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Check every tensor was written, then move the file into place."""
        if self._state == "closed":
            return
        self.write_header()
        if self._next != len(self._order):
            missing = self._order[self._next].name
            self.abort()
            raise E.WriteError(f"{self.path}: closed before tensor {missing!r} was written")
        if self._f.tell() != self._size:  # preallocated: a short file would read as zeros
            found = self._f.tell()
            self.abort()
            raise E.WriteError(f"{self.path}: wrote {found} bytes, planned {self._size}")
        self._state = "closed"
        assert self._stack is not None
        self._stack.close()

    def abort(self) -> None:
        """Drop the temp file; the target is left as it was."""
        if self._stack is not None and self._state != "closed":
            self._state = "closed"
            with contextlib.suppress(E.WriteError):
                self._stack.__exit__(E.WriteError, E.WriteError("aborted"), None)
        self._state = "closed"

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
