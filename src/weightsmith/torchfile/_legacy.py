"""The legacy checkpoint layout (``torch.save(..., _use_new_zipfile_serialization=False)``).

Five pickles back to back, then the storages::

    pickle  magic number 0x1950a86a20f9469cfc6c
    pickle  protocol version 1001
    pickle  sys_info {"protocol_version", "little_endian", "type_sizes"}
    pickle  the object; storages are persistent ids
            ('storage', <type>, key, location, numel, view) where view is
            None or (view key, offset, numel) into the root storage `key`
    pickle  the storage keys, a list of str
    for each key, in that order:
        int64 little-endian element count n
        n * element size bytes, little endian (torch converts on write)

Storages are viewed in place from an mmap of the file.  (The older tar
format of torch < 0.4 is recognised and refused.)
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from .. import errors
from . import _pickle
from ._rebuild import numpy_dtype

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001


def is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


class LegacyLayout:
    """Access to the pickle and storages of a legacy checkpoint."""

    layout = "legacy"
    byteorder = "little"
    member = "pickle"

    def __init__(self, path: str | os.PathLike[str], buf: Any) -> None:
        self.path = os.fspath(path)
        self.buf = buf
        if is_tar(bytes(buf[:512])):
            raise errors.NotATorchFile(
                "tar checkpoints of torch < 0.4 are not supported",
                path=self.path,
                expected="zip or legacy checkpoint",
                found="tar archive",
            )
        pos = 0
        for label, want in (("magic number", MAGIC_NUMBER), ("protocol version", PROTOCOL_VERSION)):
            r = _pickle.load(buf, pos, path=self.path, member=f"{label} pickle")
            if r.value != want or isinstance(r.value, bool):
                raise errors.NotATorchFile(
                    f"bad {label}",
                    path=self.path,
                    offset=pos,
                    expected=hex(want),
                    found=type(r.value).__name__
                    if not isinstance(r.value, int)
                    else hex(r.value)[:40],
                )
            pos = r.end
        r = _pickle.load(buf, pos, path=self.path, member="sys_info pickle")
        self.sys_info, self.pickle_start = r.value, r.end
        self.main: _pickle.PickleResult | None = None
        self.spans: dict[str, tuple[int, int]] = {}

    def load_main(self) -> _pickle.PickleResult:
        """Interpret the object pickle and locate every storage after the keys list."""
        main = _pickle.load(self.buf, self.pickle_start, path=self.path, member="pickle")
        keys_res = _pickle.load(self.buf, main.end, path=self.path, member="storage keys pickle")
        keys = keys_res.value
        if not isinstance(keys, list) or not all(isinstance(k, (str, int)) for k in keys):
            raise errors.TorchFileError(
                "storage keys are not a list of str",
                path=self.path,
                field="storage keys pickle",
                expected="list of str",
                found=type(keys).__name__,
            )
        itemsize: dict[str, int] = {}
        for ref in main.storages:
            itemsize.setdefault(
                ref.key, numpy_dtype(ref.torch_dtype, path=self.path, field=ref.type_name).itemsize
            )
        pos, end = keys_res.end, len(self.buf)
        for key in map(str, keys):
            if key not in itemsize:
                raise errors.MissingRecord(
                    "storage listed but never used by the pickle",
                    path=self.path,
                    field=f"storage {key}",
                    offset=pos,
                    expected="a referenced key",
                    found=key,
                )
            if pos + 8 > end:
                raise errors.StorageSizeMismatch(
                    "file ends before a storage",
                    path=self.path,
                    field=f"storage {key}",
                    offset=pos,
                    expected="8-byte count",
                    found=f"{end - pos} bytes",
                )
            (n,) = struct.unpack_from("<q", self.buf, pos)
            nbytes = n * itemsize[key]
            if n < 0 or nbytes > end - pos - 8:
                raise errors.StorageSizeMismatch(
                    "storage runs past the end of the file",
                    path=self.path,
                    field=f"storage {key}",
                    offset=pos,
                    expected=f"at most {end - pos - 8} bytes",
                    found=nbytes,
                )
            self.spans[key] = (pos + 8, nbytes)
            pos += 8 + nbytes
        self.main = main
        return main

    def storage_span(self, key: str) -> tuple[int, int] | None:
        span = self.spans.get(key)
        if span is None:
            raise errors.MissingRecord(
                "storage not in the keys list",
                path=self.path,
                field=f"storage {key}",
                expected="a listed key",
                found=key,
            )
        return span

    def storage_raw(self, key: str) -> np.ndarray:
        start, n = self.storage_span(key)
        return np.frombuffer(self.buf, dtype=np.uint8, count=n, offset=start)

    def close(self) -> None:
        pass
