"""CI smoke run of the fuzz targets (fuzz/): every seed replayed in process,
then each target under atheris for a few seconds through fuzz/run.py.

Longer sessions: ``python fuzz/run.py --target NAME --seconds 600`` (figures
in docs/reliability.md).  A finding is any exception that is not a
WeightsmithError; the run reports it with its input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fuzz import seeds, targets  # noqa: E402

SMOKE_SECONDS = 10


@pytest.mark.parametrize("target", list(seeds.SEEDS))
def test_seeds_raise_only_named_errors(target):
    corpus = seeds.seeds(target)
    assert len(corpus) >= 15
    try:
        for _name, data in corpus.items():
            targets.check(target, data)  # anything but a WeightsmithError propagates
    finally:
        targets.cleanup()


@pytest.mark.parametrize("target", list(seeds.SEEDS))
def test_fuzz_smoke(tmp_path, target):
    report = tmp_path / "report.json"
    p = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "run.py"), "--target", target,
         "--seconds", str(SMOKE_SECONDS), "--workdir", str(tmp_path / "work"), "--json", str(report)],
        capture_output=True, text=True, timeout=SMOKE_SECONDS + 120,
    )  # fmt: skip
    rep = json.loads(report.read_text())
    assert rep["executions"] > 100, p.stdout + p.stderr[-2000:]
    assert rep["findings"] == [] and rep["libfuzzer_stops"] == [], p.stdout
    assert p.returncode == 0, p.stdout
