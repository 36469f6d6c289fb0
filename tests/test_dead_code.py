"""No dead code in src: vulture finds nothing beyond tests/support/vulture_allowlist.py.

The package, the tests and the benchmarks are scanned together, so a public
name that only the tests or benchmarks use counts as used.  Names reached by
string (``cmd_<command>``, the pickle machine's ``op_<OPCODE>`` and
``call_<name>``, module ``__getattr__``, the IQ tables' ``*_HEX`` /
``*_DTYPE`` read by name) are ignored by pattern.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = "cmd_*,op_*,call_*,__getattr__,*_HEX,*_DTYPE"


def _vulture(*paths: str) -> list[str]:
    p = subprocess.run(
        [sys.executable, "-m", "vulture", *paths, "--ignore-names", IGNORE,
         "--exclude", "tests/data"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stderr  # 3: dead code found
    return [line for line in p.stdout.splitlines() if line.startswith("src/")]


def test_no_dead_code_in_src():
    found = _vulture("src/weightsmith", "tests", "benchmarks", "tests/support/vulture_allowlist.py")
    assert not found, "unused code in src:\n" + "\n".join(found)


def test_the_check_can_fail(tmp_path):
    # without the tests and the allowlist, public names only tests use are reported
    found = _vulture("src/weightsmith")
    assert found
