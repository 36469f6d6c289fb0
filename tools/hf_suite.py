"""Run HF safetensors' own Python tests against weightsmith, served as ``safetensors``.

Usage::

    python tools/hf_suite.py PATH/TO/safetensors/bindings/python/tests [--hf] [pytest args]

``PATH`` is a checkout of https://github.com/huggingface/safetensors (this
script fetches nothing and the repository holds none of its code).  The
tests are copied into a temporary folder (they write ``./tests/data/*``
relative to the working directory) and run with pytest in this process.

Without ``--hf``, an import hook placed first on ``sys.meta_path`` answers
``import safetensors`` and ``import safetensors.X`` with the modules
``weightsmith`` and ``weightsmith.X`` themselves (the same objects, so
classes and exceptions are ours).  With ``--hf`` the installed HF package is
used: the baseline to compare against.  The last line printed is the count.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

# The files named by issue 17; the framework comparisons are run with --all.
CORE_FILES = [
    "test_simple.py",
    "test_pt_comparison.py",
    "test_pt_model.py",
    "test_threadable.py",
    "test_multithreaded.py",
    "test_pread_backend.py",
]
# Each runs in a process of its own (--all): paddle 3.3 segfaults when
# imported after tensorflow 2.21, and HF's paddle safe_open can abort the
# process ("The deleter of the pointer is not found").
FRAMEWORK_FILES = [
    "test_flax_comparison.py",
    "test_paddle_comparison.py",
    "test_tf_comparison.py",
    "test_mlx_comparison.py",
]


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``safetensors[.X]`` -> the already importable ``weightsmith[.X]``."""

    def find_spec(self, name, path, target=None):
        if name == "safetensors" or name.startswith("safetensors."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module("weightsmith" + spec.name[len("safetensors") :])
        self._spec = module.__spec__  # the import system overwrites it next
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec


class _Count:
    """pytest plugin: tally outcomes of the call phase (and setup errors)."""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.broken: list[str] = []  # files that failed to import

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.broken.append(report.nodeid)

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" or (report.when == "setup" and not report.passed):
            bucket = (
                self.passed if report.passed else self.skipped if report.skipped else self.failed
            )
            bucket.append(report.nodeid)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", type=Path, help="HF safetensors' bindings/python/tests folder")
    ap.add_argument("--hf", action="store_true", help="run against the installed HF package")
    ap.add_argument("--all", action="store_true", help="also the framework comparison files")
    ap.add_argument("--file", action="append", help="run only these test files")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)
    if args.all:
        return _run_all(args)

    import pytest

    files = args.file or CORE_FILES
    work = Path(tempfile.mkdtemp(prefix="hf_suite_"))
    shutil.copytree(args.tests, work / "tests")
    if not args.hf:
        sys.meta_path.insert(0, _Alias())
        for name in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
            del sys.modules[name]
    count = _Count()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        pytest.main(
            [
                "-q",
                "-p",
                "no:cacheprovider",
                "--continue-on-collection-errors",
                "--rootdir",
                str(work),
                *[f"tests/{f}" for f in files],
                *args.pytest_args,
            ],
            plugins=[count],
        )
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)
    side = "HF safetensors" if args.hf else "weightsmith as safetensors"
    for nodeid in count.failed:
        print("failed:", nodeid)
    for nodeid in count.broken:
        print("not importable (its tests are not counted):", nodeid)
    run = len(count.passed) + len(count.failed)
    print(f"{side}: {len(count.passed)} of {run} passed, {len(count.skipped)} skipped")
    return 0 if not (count.failed or count.broken) else 1


def _run_all(args) -> int:
    """The core files in one child process, each framework file in another."""
    import subprocess

    rc = 0
    for group in [CORE_FILES, *([f] for f in FRAMEWORK_FILES)]:
        cmd = [sys.executable, __file__, str(args.tests), *(["--hf"] if args.hf else [])]
        cmd += [x for f in group for x in ("--file", f)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        lines = out.stdout.strip().splitlines()
        summary = [
            ln for ln in lines if ln.startswith(("failed:", "not importable", "HF ", "weight"))
        ]
        if out.returncode not in (0, 1) or not summary:
            summary.append(f"{', '.join(group)}: the process died (exit code {out.returncode})")
            rc = 1
        print("\n".join(summary))
        rc |= out.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
