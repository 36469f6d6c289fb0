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


_LEAK_PROBE = """
import sys
import atheris
sys.path.insert(0, {root!r})
from fuzz import cmp_hook
with atheris.instrument_imports(include=["probe_mod"]):
    import probe_mod
n = [0]
def one(data):
    if {hook}:
        cmp_hook.install()
    probe_mod.compare(data)
    n[0] += 1
    if n[0] in (20000, 220000):
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                print("RSS", n[0], line.split()[1], flush=True)
# -rss_limit_mb=0: libFuzzer would judge the peak RSS inherited from pytest (GBs after
# the conversion tests); the growth is measured here instead
atheris.Setup([sys.argv[0], "-runs=220000", "-seed=1", "-rss_limit_mb=0"], one)
atheris.Fuzz()
"""


def _rss_growth_kib(tmp_path, hook: bool) -> int:
    (tmp_path / "probe_mod.py").write_text(
        "import numpy as np\n"
        "def compare(data):\n"
        "    a = np.frombuffer(data + b'x', np.uint8)\n"
        "    return int((a > 3).sum()) + int(len(data) > 2)\n"
    )
    script = tmp_path / "probe.py"
    script.write_text(_LEAK_PROBE.format(root=str(ROOT), hook=hook))
    p = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
        cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    rss = dict(line.split()[1:] for line in p.stdout.splitlines() if line.startswith("RSS"))
    assert set(rss) == {"20000", "220000"}, p.stdout + p.stderr[-2000:]
    return int(rss["220000"]) - int(rss["20000"])


def test_cmp_hook_stops_atheris_leak_on_array_comparisons(tmp_path):
    # atheris' native compare hook keeps ~180 B per numpy comparison: 200,000
    # calls grow the process by ~35 MB; with fuzz/cmp_hook.py it stays flat.
    leaky = _rss_growth_kib(tmp_path, hook=False)
    fixed = _rss_growth_kib(tmp_path, hook=True)
    assert leaky > 20_000, leaky  # the leak is real (if atheris fixes it, drop the hook)
    assert fixed < 4_000, fixed
