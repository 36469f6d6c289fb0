"""Fuzz targets, seeds and the atheris driver (see fuzz/run.py).

libFuzzer writes the input of a crash, timeout, out-of-memory or slow unit to
``<artifact_prefix><kind>-<sha1>``; without a prefix that is the current folder,
which is how such a file once got committed at the repository root.  Every run
therefore writes them under :data:`ARTIFACTS` (ignored by git).
"""

from __future__ import annotations

from pathlib import Path

#: fuzz/artifacts/: libFuzzer's crash-*, timeout-*, oom-*, slow-unit-* files (git-ignored)
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def artifact_prefix(target: str) -> str:
    """The ``-artifact_prefix=`` value for ``target``: a folder under :data:`ARTIFACTS`."""
    folder = ARTIFACTS / target
    folder.mkdir(parents=True, exist_ok=True)
    return f"{folder}/"


def with_artifact_prefix(target: str, args: list[str]) -> list[str]:
    """libFuzzer ``args`` with an ``-artifact_prefix`` under :data:`ARTIFACTS` unless one is given."""
    if any(a.startswith("-artifact_prefix=") for a in args):
        return list(args)
    return [*args, f"-artifact_prefix={artifact_prefix(target)}"]
