"""The zip checkpoint layout (``torch.save`` since torch 1.6).

A plain zip archive whose members all live under one folder, the *archive
name*, which may be anything (``torch.save`` uses the file's stem)::

    <archive>/data.pkl              the pickled object (see _pickle.py)
    <archive>/byteorder             "little" or "big" (absent: little)
    <archive>/data/<key>            one storage's raw bytes, key from the pickle
    <archive>/version               serialization version, e.g. "3"
    <archive>/.format_version, .storage_alignment, .data/serialization_id

As in torch's reader, the archive name is the part of the *first* member's
name before its first ``/``.  ``torch.save`` writes members uncompressed
(STORED) with the data 64-byte aligned, so a storage is the byte range
``[local header + 30 + len(name) + len(extra), + size)`` of the file and is
viewed in place from an mmap; a compressed member (re-zipped file) is
inflated into memory instead.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from typing import Any

import numpy as np

from .. import errors

LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... name length, extra length
PICKLE_LIMIT = 1 << 30  # a data.pkl this large is not a checkpoint


def is_zip(head: bytes) -> bool:
    return head[:4] in (b"PK\x03\x04", b"PK\x05\x06")


class ZipLayout:
    """Access to the records of a zip checkpoint."""

    layout = "zip"

    def __init__(self, path: str | os.PathLike[str], mm: mmap.mmap, fh: Any) -> None:
        self.path = os.fspath(path)
        self.mm = mm
        try:
            self.zf = zipfile.ZipFile(fh)
        # zipfile reports some malformed directories as NotImplementedError
        # ("zip file version 6.4"), EOFError or struct.error
        except (
            zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, struct.error
        ) as e:  # fmt: skip
            raise errors.NotATorchFile(
                "not a readable zip archive",
                path=self.path,
                expected="a zip checkpoint",
                found=str(e),
            ) from None
        infos = self.zf.infolist()
        if not infos:
            raise errors.MissingRecord(
                "empty archive", path=self.path, expected="data.pkl", found="no members"
            )
        first = infos[0].filename
        self.archive = first.split("/", 1)[0] if "/" in first else ""
        self.prefix = f"{self.archive}/" if "/" in first else ""
        self.infos = {i.filename: i for i in infos}
        self.member = self.prefix + "data.pkl"
        self.byteorder = self._byteorder()

    # ------------------------------------------------------------------ records
    def _info(self, name: str, what: str) -> zipfile.ZipInfo:
        info = self.infos.get(self.prefix + name)
        if info is None:
            raise errors.MissingRecord(
                f"missing {what}",
                path=self.path,
                field=self.prefix + name,
                expected="a zip member",
                found="none",
            )
        return info

    def read_record(self, info: zipfile.ZipInfo, limit: int = PICKLE_LIMIT) -> bytes:
        if info.compress_type != zipfile.ZIP_STORED:
            # deflate expands at most ~1032x: a bigger claim is a zip bomb
            limit = min(limit, info.compress_size * 1032 + 4096)
        if info.file_size > limit:
            raise errors.TorchFileError(
                "record too large",
                path=self.path,
                field=info.filename,
                expected=f"<= {limit} bytes",
                found=info.file_size,
            )
        try:
            with self.zf.open(info) as f:
                data = f.read(info.file_size + 1)
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, RuntimeError) as e:
            raise errors.TorchFileError(
                "unreadable zip member",
                path=self.path,
                field=info.filename,
                expected="a readable member",
                found=str(e),
            ) from None
        return data

    def pickle_bytes(self) -> bytes:
        return self.read_record(self._info("data.pkl", "the pickle (data.pkl)"))

    def pickle_members(self) -> list[tuple[str, bytes]]:
        """Every ``*.pkl`` member, for scan(): a pickle we never run is still reported."""
        return [(n, self.read_record(i)) for n, i in self.infos.items() if n.endswith(".pkl")]

    def _byteorder(self) -> str:
        info = self.infos.get(self.prefix + "byteorder")
        if info is None:
            return "little"  # torch's default for files without the record
        value = self.read_record(info, 16)
        if value not in (b"little", b"big"):
            raise errors.UnknownByteOrder(
                "bad byteorder record",
                path=self.path,
                field=info.filename,
                expected="little or big",
                found=value[:16],
            )
        return value.decode()

    # ------------------------------------------------------------------ storages
    def storage_span(self, key: str) -> tuple[int, int] | None:
        """(file offset, length) of an uncompressed storage record, else None."""
        info = self._info(f"data/{key}", "storage record")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            return None
        at = info.header_offset
        if at + LOCAL_HEADER.size > len(self.mm):
            raise errors.TorchFileError(
                "local header outside the file",
                path=self.path,
                field=info.filename,
                offset=at,
                expected="a header",
                found="end of file",
            )
        sig, nlen, xlen = LOCAL_HEADER.unpack_from(self.mm, at)
        if sig != b"PK\x03\x04":
            raise errors.TorchFileError(
                "bad local header signature",
                path=self.path,
                field=info.filename,
                offset=at,
                expected=b"PK\x03\x04",
                found=sig,
            )
        start = at + LOCAL_HEADER.size + nlen + xlen
        if start + info.file_size > len(self.mm):
            raise errors.StorageSizeMismatch(
                "storage record runs past the end of the file",
                path=self.path,
                field=info.filename,
                offset=start,
                expected=f"{info.file_size} bytes",
                found=f"{len(self.mm) - start}",
            )
        return start, info.file_size

    def storage_raw(self, key: str) -> np.ndarray:
        """The record's bytes as uint8: a view of the mmap when stored, else a copy."""
        span = self.storage_span(key)
        if span is None:
            info = self._info(f"data/{key}", "storage record")
            data = self.read_record(info, len(self.mm) * 1032 + 4096)
            if len(data) != info.file_size:
                raise errors.StorageSizeMismatch(
                    "record size differs from its directory entry",
                    path=self.path,
                    field=info.filename,
                    expected=info.file_size,
                    found=len(data),
                )
            return np.frombuffer(data, dtype=np.uint8)
        start, n = span
        return np.frombuffer(self.mm, dtype=np.uint8, count=n, offset=start)

    def close(self) -> None:
        self.zf.close()
