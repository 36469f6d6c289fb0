"""scan(): what a checkpoint's pickles would do, found without running them.

Every pickle of the file is walked by the restricted interpreter in scan mode:
refusals are recorded instead of raised, and the walk goes on with a
stand-in value, so one report lists *every* global, opcode class and reason.
Zip files: every ``*.pkl`` member (not only ``data.pkl``).  Other files: the
pickles at the start of the file, one after the other (the legacy layout has
five; a bare pickle has one).

safetensors and GGUF files hold no code at all (a JSON or typed key/value
header, then raw tensor bytes; no reader of either format calls anything the
file names): they are recognised by their first bytes -- ``GGUF``, or a
little-endian u64 header length followed by ``{`` -- and reported as safe with
layout ``"safetensors"`` / ``"gguf"``, without reading further (``validate``
checks their structure).  A folder is scanned file by file (:class:`FolderScan`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import errors
from . import _pickle
from ._legacy import is_tar
from ._zip import ZipLayout, is_zip

LEGACY_PICKLES = 5

#: layouts of formats that cannot hold code
CODE_FREE = ("safetensors", "gguf")

#: file name endings ``scan`` looks at in a folder
WEIGHT_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".pkl", ".pickle", ".safetensors", ".gguf")


@dataclass
class PickleScan:
    """One pickle's inventory."""

    member: str
    protocol: int | None
    opcodes: dict[str, int]
    globals: list[_pickle.GlobalUse]
    findings: list[errors.PickleError]

    @property
    def opcode_classes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, n in self.opcodes.items():
            c = _pickle.opcode_class(name)
            out[c] = out.get(c, 0) + n
        return out


@dataclass
class ScanReport:
    """The verdict on a file: ``safe`` (weights-only) and, if not, ``reasons``."""

    path: str
    layout: str
    pickles: list[PickleScan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # container-level problems

    @property
    def globals(self) -> list[str]:
        """Every distinct global the pickles name, in order of first use."""
        seen: dict[str, None] = {}
        for p in self.pickles:
            for g in p.globals:
                seen.setdefault(g.name)
        return list(seen)

    @property
    def opcode_classes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pickles:
            for c, n in p.opcode_classes.items():
                out[c] = out.get(c, 0) + n
        return out

    @property
    def reasons(self) -> list[str]:
        """Why the file is not weights-only safe (empty when it is)."""
        out = list(self.problems)
        for p in self.pickles:
            out += [str(f) for f in p.findings if isinstance(f, errors.UnsafePickleError)]
        return out

    @property
    def holds_code(self) -> bool:
        """False for formats that cannot hold code (safetensors, GGUF)."""
        return self.layout not in CODE_FREE

    @property
    def safe(self) -> bool:
        return not self.reasons and (bool(self.pickles) or not self.holds_code)

    @property
    def supported(self) -> bool:
        """Safe, and weightsmith can rebuild every tensor in it."""
        return self.safe and not any(f for p in self.pickles for f in p.findings)

    def __str__(self) -> str:
        if not self.holds_code:
            return f"{self.path}: {self.layout} file, holds no code (safe to load)"
        lines = [
            f"{self.path}: {self.layout} checkpoint, {'weights-only safe' if self.safe else 'NOT weights-only safe'}"
        ]
        for p in self.pickles:
            lines.append(f"  {p.member}: protocol {p.protocol}, opcode classes {p.opcode_classes}")
            for g in p.globals:
                lines.append(f"    {g.verdict:<11} {g.name} ({g.opcode} at offset {g.offset})")
        lines += [f"  reason: {r}" for r in self.reasons]
        lines += [
            f"  unsupported: {f}"
            for p in self.pickles
            for f in p.findings
            if not isinstance(f, errors.UnsafePickleError)
        ]
        return "\n".join(lines)


def _inventory(member: str, r: _pickle.PickleResult) -> PickleScan:
    return PickleScan(member, r.protocol, dict(r.opcodes), r.globals, r.findings)


@dataclass
class FolderScan:
    """:func:`scan` of a folder: one report per weight file in it (sorted by path)."""

    path: str
    files: list[ScanReport]

    @property
    def safe(self) -> bool:
        return all(r.safe for r in self.files)

    @property
    def reasons(self) -> list[str]:
        return [f"{r.path}: {why}" for r in self.files for why in r.reasons]

    def __str__(self) -> str:
        if not self.files:
            return f"{self.path}: folder holds no weight files ({', '.join(WEIGHT_SUFFIXES)})"
        verdict = "every file safe" if self.safe else "NOT weights-only safe"
        head = f"{self.path}: folder, {len(self.files)} weight file(s), {verdict}"
        return "\n".join([head, *(str(r) for r in self.files)])


def _code_free_layout(head: bytes) -> str | None:
    """``"gguf"`` / ``"safetensors"`` when ``head`` starts as such a file does, else None."""
    if head[:4] == b"GGUF":
        return "gguf"
    if len(head) > 8 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") < 1 << 40:
        return "safetensors"
    return None


def scan(path: str | os.PathLike[str]) -> ScanReport | FolderScan:
    """List every global and opcode class the file's pickles use, without executing them.

    A folder gives a :class:`FolderScan` of every weight file under it.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        found = sorted(
            p
            for p in Path(path).rglob("*")
            if p.is_file() and p.name.lower().endswith(WEIGHT_SUFFIXES)
        )
        return FolderScan(path, [scan(p) for p in found])
    data = Path(path).read_bytes() if os.path.getsize(path) < (1 << 20) else None
    with open(path, "rb") as fh:
        head = fh.read(512)
        if is_zip(head):
            return _scan_zip(path, fh)
    layout = _code_free_layout(head)
    if layout is not None:
        return ScanReport(path, layout)
    if data is None:
        # pickles come first in the legacy layout; storages follow
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return _scan_sequential(path, mm, head)
        finally:
            _close(mm)
    return _scan_sequential(path, data, head)


def _scan_zip(path: str, fh) -> ScanReport:
    report = ScanReport(path, "zip")
    try:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            layout = ZipLayout(path, mm, fh)
            members = layout.pickle_members()
            if layout.member not in dict(members):
                report.problems.append(f"no {layout.member} in the archive")
            for name, blob in members:
                report.pickles.append(_inventory(name, _pickle.scan(blob, path=path, member=name)))
        finally:
            _close(mm)
    except errors.TorchFileError as e:
        report.problems.append(str(e))
    return report


def _close(mm: mmap.mmap) -> None:
    # The findings keep views of the pickle bytes (an error's context, a
    # result's memo); the mapping is then freed with the last of them.
    with contextlib.suppress(BufferError):
        mm.close()


def _scan_sequential(path: str, data, head: bytes) -> ScanReport:
    report = ScanReport(path, "legacy")
    if is_tar(head):
        report.layout = "tar"
        report.problems.append("tar checkpoint (torch < 0.4): not read by weightsmith")
        return report
    pos = 0
    for i in range(LEGACY_PICKLES):
        if pos >= len(data) or data[pos] != 0x80:  # every torch pickle starts with PROTO
            if i == 0:
                report.layout = "unknown"
                report.problems.append("does not start with a pickle or a zip archive")
            elif i < LEGACY_PICKLES:
                report.layout = "pickle"
            break
        r = _pickle.scan(data, pos, path=path, member=f"pickle {i}")
        report.pickles.append(_inventory(f"pickle {i} (offset {pos})", r))
        if r.findings and isinstance(r.findings[-1], errors.MalformedPickle):
            break
        pos = r.end
    return report
