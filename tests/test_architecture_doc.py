"""docs/architecture.md names files, not line numbers: every path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# `path/like/this.py` or `folder/` in backticks, rooted at a top-level folder
_PATH = re.compile(r"`((?:src|tests|docs|csrc|benchmarks|fuzz)/[^`\s]*)`|`(pyproject\.toml)`")


def named_paths(text: str) -> list[str]:
    return [a or b for a, b in _PATH.findall(text)]


def test_every_named_path_exists():
    paths = named_paths(DOC.read_text(encoding="utf-8"))
    assert len(paths) > 20, "the map should name the files it points to"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_no_line_numbers():
    text = DOC.read_text(encoding="utf-8")
    assert not re.search(r"\.py:\d+|\bline \d+", text), "name files, not line numbers"


def test_the_check_can_fail():
    assert named_paths("see `src/weightsmith/nope.py` and `docs/`") == [
        "src/weightsmith/nope.py",
        "docs/",
    ]
    assert not (ROOT / "src/weightsmith/nope.py").exists()
