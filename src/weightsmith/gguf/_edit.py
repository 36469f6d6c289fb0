"""Metadata editing of GGUF files (layout in :mod:`weightsmith.gguf._spec`).

:func:`edit` changes, adds or removes KVs without decoding tensor data:

* when the new header still ends inside the old padding (same padded size,
  e.g. a same-size KV section) and the bytes that change lie within one
  4 KiB page, only those bytes are rewritten in place, with a single
  ``pwrite`` -- a process killed mid-edit leaves the old or the new page,
  never a mix (readers that map the file see the new value);
* otherwise the file is rewritten by streaming: new header, then the tensor
  data copied in chunks and re-padded to the (possibly new) alignment, to a
  temp file renamed over the target.

Untouched KVs are copied as raw bytes, so their exact types survive.  A new
value for an existing key keeps that key's type (and element type) unless it
comes with its own type as ``GGUFValue(value, type)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .. import errors as E
from .._atomic import want_fsync
from ._file import _Mapped
from ._parse import GGUFHeader
from ._spec import KEY_ALIGNMENT, VT, MetaType, pad
from ._writer import Writer, _Enc, resolve_type

__all__ = ["GGUFValue", "copy_tensors", "edit", "raw_kvs"]

CHUNK = 64 << 20


class GGUFValue(NamedTuple):
    """A value with an explicit GGUF type, for :func:`edit` (``type`` as Writer.add takes it)."""

    value: Any
    type: Any


def raw_kvs(h: GGUFHeader, mm: Any) -> list[tuple[str, MetaType, bytes]]:
    """Every KV as (key, type, value bytes in the file's byte order), v3 encoding."""
    out = []
    lw = 4 if h.version == 1 else 8
    enc = _Enc(h.byte_order) if h.version == 1 else None
    for key, kv in h.kvs.items():
        if enc is not None:  # v1 lengths are u32: re-encode with v3 widths
            data = enc.value(h.metadata[key], kv.type, key)
        else:
            vstart = kv.start + lw + len(key.encode("utf-8")) + 4
            data = bytes(mm[vstart : kv.end])
        out.append((key, kv.type, data))
    return out


def copy_tensors(w: Writer, mm: Any, tensors: Iterable[Any]) -> None:
    """Stream each tensor's bytes from ``mm`` into ``w`` in chunks (never decoded)."""
    view = memoryview(mm)
    try:
        for t in tensors:
            if t.nbytes == 0:
                continue
            for a in range(t.offset, t.offset + t.nbytes, CHUNK):
                w.write_tensor_chunk(t.name, view[a : min(a + CHUNK, t.offset + t.nbytes)])
    finally:
        view.release()


def edit(
    path: str | os.PathLike[str],
    set: Mapping[str, Any] | None = None,
    remove: Iterable[str] = (),
    out: str | os.PathLike[str] | None = None,
) -> Path:
    """Set and remove metadata keys of ``path`` (written to ``out`` if given); returns the path written."""
    path = Path(path)
    set = dict(set or {})
    remove = list(remove)
    src = _Mapped(path)
    try:
        h = src.header
        enc = _Enc(h.byte_order)
        kvs = {k: (t, d) for k, t, d in raw_kvs(h, src.mm)}
        for key in remove:
            if key not in kvs:
                raise KeyError(f"{path}: no metadata key {key!r} to remove")
            del kvs[key]
        for key, value in set.items():
            if isinstance(value, GGUFValue):
                mt = resolve_type(value.value, value.type)
                value = value.value
            elif key in kvs:
                mt = kvs[key][0]
            else:
                mt = resolve_type(value, VT.UINT32 if key == KEY_ALIGNMENT else None)
            kvs[key] = (mt, enc.value(value, mt, key))
        alignment = h.alignment
        if KEY_ALIGNMENT in kvs:
            t, d = kvs[KEY_ALIGNMENT]
            a = int.from_bytes(d, "little" if h.byte_order == "<" else "big") if len(d) == 4 else 0
            if t != MetaType(VT.UINT32) or a <= 0 or a & (a - 1):
                raise E.GGUFInvalidAlignment(
                    path=path,
                    field=KEY_ALIGNMENT,
                    expected="a u32 power of two",
                    found=f"{a} ({t})",
                )
            alignment = a
        else:
            alignment = 32
        kv_bytes = b"".join(enc.string(k) + enc.u32.pack(t.type) + d for k, (t, d) in kvs.items())
        new_end = h.kv_start + len(kv_bytes) + (h.header_end - h.kv_end)
        in_place = (
            out is None
            and h.version in (2, 3)
            and alignment == h.alignment
            and pad(new_end, alignment) == h.data_start
            and (h.tensors or new_end <= h.file_size)
        )
        if in_place:
            infos = bytes(src.mm[h.kv_end : h.header_end])
            count = enc.u64.pack(len(kvs))
            body = count + kv_bytes + infos
            body += bytes(pad(new_end, alignment) - new_end) if h.tensors else b""
            at = h.kv_start - 8
            span = _changed_span(bytes(src.mm[at : at + len(body)]), body)
            # Only a patch inside one page is written in place: a multi-page
            # write can be torn by a kill between pages (found by the
            # crash-safe-write harness); those edits take the atomic rewrite.
            if span is None or (at + span[0]) // _PAGE == (at + span[1] - 1) // _PAGE:
                src.close()
                if span is not None:
                    _patch(path, at + span[0], body[span[0] : span[1]])
                return path
        target = Path(out) if out is not None else path
        w = Writer(target, byte_order=h.byte_order)
        try:
            for k, (t, d) in kvs.items():
                w.add_encoded(k, t, d)
            for t in h.tensors:
                w.add_tensor_info(t.name, t.ggml_type, (), dims=t.dims)
            copy_tensors(w, src.mm, h.tensors)
            w.close()
        except BaseException:
            w.abort()
            raise
        return target
    finally:
        src.close()


def kv_types(path: str | os.PathLike[str]) -> dict[str, MetaType]:
    """The value type of every KV of one GGUF file (this file only, not its split set)."""
    src = _Mapped(Path(path))
    try:
        return {k: kv.type for k, kv in src.header.kvs.items()}
    finally:
        src.close()


_PAGE = 4096


def _changed_span(old: bytes, new: bytes) -> tuple[int, int] | None:
    """[first, last + 1) of the bytes where ``new`` differs from ``old``; None if equal."""
    if old == new:
        return None
    diff = np.flatnonzero(np.frombuffer(old, np.uint8) != np.frombuffer(new, np.uint8))
    return int(diff[0]), int(diff[-1]) + 1


def _patch(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if os.pwrite(fd, data, offset) != len(data):  # a regular file never writes short here
            raise E.WriteError(f"{path}: short write while patching metadata in place")
        if want_fsync():  # the same durability policy as atomic_output
            os.fsync(fd)
    finally:
        os.close(fd)
