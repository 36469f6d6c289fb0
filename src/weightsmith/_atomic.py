"""Crash-safe output files: write to a temp file beside the target, then rename.

Every writer in weightsmith (safetensors, GGUF, shards, edits) goes through
:func:`atomic_output`, so the target path only ever holds a complete old file
or a complete new one.  ``os.replace`` is atomic on POSIX within a folder, and
a reader that has the old file mmapped keeps its (now unlinked) inode.

Durability: a killed writer (SIGKILL, an exception, Ctrl-C) can never leave a
half-written target, because the target only changes at the rename and the
kernel keeps the temp file's written pages whatever happens to the process.
Surviving a *power loss* as well needs an ``fsync`` before the rename, which
makes every save wait for the disk (about 2x the time of a 1 GiB save on a
virtio disk).  Like ``torch.save``, ``numpy.save`` and HF safetensors, we do
not fsync by default; pass ``fsync=True`` to the safetensors ``save_file`` or
``StreamWriter``, or set ``WEIGHTSMITH_FSYNC=1`` for every writer in the process.  (On ext4 with its
default ``auto_da_alloc``, and on btrfs, a rename that replaces an existing
file already forces the new file's data out first.)

Preallocation: a writer that knows its output size passes ``size``; on
Linux the temp file's blocks are then reserved with ``fallocate(2)`` before
the first byte is written.  A full disk fails at once, before any data is
copied, and the writes that follow skip the filesystem's per-page block
allocation (a 1 GiB save is ~10 % faster on ext4).  Filesystems without
``fallocate`` simply skip the step.

Outputs of several files: :func:`atomic_folder` builds a whole folder (an HF
model folder, shards + index) as ``.<name>.<pid>.<random>.wstmp/`` beside the
target and renames it into place; an existing target folder is first renamed
aside and deleted only after the new one is in place, so the target is always
the complete old folder or the complete new one (a crash between the two
renames leaves the old folder under its ``.wsold`` name, never a mix).  It is
replaced only when it looks like a model folder of files (no subfolders, only
the files a model folder holds) and does not hold the input.  :func:`atomic_files`
writes a set of files into an existing folder (a split GGUF set): every file is
written under a temp name, and they are renamed into place only once all are
complete, the entry point (the first shard) last.

Cleanup rule for temp files left by a killed writer: a temp file is named
``.<target name>.<pid>.<random>.wstmp``.  After each successful write to a
target, temp files for that same target whose ``pid`` is no longer a running
process are removed.  A live writer's temp file is never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .errors import OutputFolderRefused

SUFFIX = ".wstmp"


def temp_path_for(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{SUFFIX}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(target: Path) -> None:
    """Remove temp files of ``target`` left behind by writers that died."""
    prefix = f".{target.name}."
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(SUFFIX)):
            continue
        middle = name[len(prefix) : -len(SUFFIX)].split(".")
        if len(middle) != 2 or not middle[0].isdigit():
            continue
        if int(middle[0]) != os.getpid() and not _pid_alive(int(middle[0])):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def want_fsync(fsync: bool | None = None) -> bool:
    """Resolve a writer's ``fsync`` argument: None means ``$WEIGHTSMITH_FSYNC``."""
    if fsync is not None:
        return bool(fsync)
    return os.environ.get("WEIGHTSMITH_FSYNC", "").strip().lower() not in ("", "0", "false", "no")


#: Below this many bytes the fallocate call costs more than it saves.
PREALLOCATE_MIN = 1 << 20


def libc_function(name: str, argtypes: list) -> Any:
    """The Linux libc function ``name`` (returning int, errno kept), or False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return False
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


_fallocate: Any = None  # resolved on first use: the libc function, or False


def _libc_fallocate() -> Any:
    global _fallocate
    if _fallocate is None:
        _fallocate = libc_function("fallocate", [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 2)
    return _fallocate


def preallocate(fd: int, size: int, path: str | os.PathLike[str] | None = None) -> bool:
    """Reserve ``size`` bytes of blocks for the open file ``fd`` (Linux ``fallocate``).

    Returns whether it did.  ``ENOSPC`` (and any error other than "not
    supported here") is raised as :class:`OSError` naming ``path``; the glibc
    ``posix_fallocate`` is not used because where the filesystem lacks the
    call it falls back to writing zeros, which would double the write.
    """
    if size < PREALLOCATE_MIN:
        return False
    fn = _libc_fallocate()
    if not fn:
        return False
    if fn(fd, 0, 0, size) == 0:
        return True
    err = ctypes.get_errno()
    # not supported by this filesystem / file, or interrupted: just write without
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV, errno.EINTR):
        return False
    raise OSError(err, f"cannot reserve {size} bytes: {os.strerror(err)}", os.fspath(path or ""))


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str],
    mode: str = "wb",
    *,
    fsync: bool | None = None,
    size: int | None = None,
) -> Iterator[BinaryIO]:
    """Open a temp file for writing; on success rename it onto ``path``.

    With ``fsync`` (see :func:`want_fsync`) the data reaches the disk before
    the rename.  ``size``: the exact number of bytes the caller will write,
    if known; the temp file's blocks are then reserved up front (see
    :func:`preallocate`).  On any exception the temp file is removed and
    ``path`` is left untouched.
    """
    durable = want_fsync(fsync)
    target = Path(path)
    tmp = temp_path_for(target)
    f = open(tmp, mode)  # noqa: SIM115 - closed below on every path
    try:
        if size is not None:
            preallocate(f.fileno(), size, tmp)
        yield f
        f.flush()
        if durable:
            os.fsync(f.fileno())
        f.close()
        os.replace(tmp, target)
    except BaseException:
        f.close()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    cleanup_stale(target)


#: what a model folder may hold for :func:`atomic_folder` to replace it as a whole
MODEL_FOLDER_SUFFIXES = (
    ".safetensors", ".json", ".gguf", ".model", ".txt", ".bin", ".pth", ".pt", ".md",
    ".jinja", ".tiktoken", ".wstmp",
)  # fmt: skip


def _st_module(path: str) -> bool:
    """A sentence-transformers module folder (``1_Pooling``) holding model files only."""
    name = os.path.basename(path)
    if not (name[:1].isdigit() and "_" in name):
        return False
    return all(
        e.is_file() and e.name.lower().endswith(MODEL_FOLDER_SUFFIXES) for e in os.scandir(path)
    )


def _check_replaceable(target: Path, inputs: tuple[Path, ...]) -> None:
    tgt = target.resolve()
    for src in inputs:
        if src.resolve() == tgt or tgt in src.resolve().parents:
            raise OutputFolderRefused(
                f"{target}: the output folder holds the input {src}; it is replaced as a "
                "whole, so give another folder"
            )
    if not target.exists():
        return
    if not target.is_dir():
        raise OutputFolderRefused(f"{target}: exists and is not a folder")
    for entry in os.scandir(target):
        if entry.is_dir() and _st_module(entry.path):
            continue
        if entry.is_dir() or not entry.name.lower().endswith(MODEL_FOLDER_SUFFIXES):
            raise OutputFolderRefused(
                f"{target}: the output folder is replaced as a whole, and it holds "
                f"{entry.name!r}, which is not a model file; give a new or empty folder"
            )


@contextlib.contextmanager
def atomic_folder(
    path: str | os.PathLike[str], *, inputs: tuple[str | os.PathLike[str], ...] = ()
) -> Iterator[Path]:
    """Build a folder in a temp folder beside ``path``; on success rename it into place.

    An existing folder at ``path`` is replaced as a whole: it is renamed aside, the
    new one renamed in, and only then is the old one removed, so ``path`` holds the
    complete old folder or the complete new one, never a mix.  On any exception the
    temp folder is removed and ``path`` is left untouched.  Checked before anything
    is written: an existing ``path`` must look like a model folder and no path of
    ``inputs`` may lie inside it (:class:`~weightsmith.errors.OutputFolderRefused`).
    """
    target = Path(path)
    _check_replaceable(target, tuple(Path(p) for p in inputs))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(target)
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():
            old = temp_path_for(target)
            os.replace(target, old)
            try:
                os.replace(tmp, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_files(paths: list[Path]) -> Iterator[list[Path]]:
    """Temp paths for ``paths`` (one set of files); all renamed into place on success.

    The renames happen only after every file is complete, ``paths[0]`` (the
    entry point a reader opens) last; on any exception every temp file is removed.
    """
    tmps = [temp_path_for(p) for p in paths]
    try:
        yield tmps
        for tmp, p in reversed(list(zip(tmps, paths))):
            os.replace(tmp, p)
    except BaseException:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
