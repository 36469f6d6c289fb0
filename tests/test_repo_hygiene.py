"""Repository hygiene: libFuzzer artifacts are never written to, nor committed at, the root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("slow-unit", "crash", "oom", "timeout")

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout"
)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_no_fuzz_artifact_is_committed():
    tracked = _git("ls-files").stdout.splitlines()
    found = [p for p in tracked if Path(p).name.startswith(tuple(k + "-" for k in KINDS))]
    assert found == []


@pytest.mark.parametrize("kind", KINDS)
def test_artifacts_at_the_root_are_ignored(kind):
    name = f"{kind}-08719b267519991c1169c411d46e006da6478561"
    assert _git("check-ignore", "-q", name).returncode == 0


def test_fuzz_runs_write_artifacts_into_an_ignored_folder_under_fuzz():
    from fuzz import ARTIFACTS, with_artifact_prefix

    args = with_artifact_prefix("safetensors_header", ["-max_len=10"])
    prefix = Path(args[-1].split("=", 1)[1])
    assert args[-1].startswith("-artifact_prefix=") and prefix.is_dir()
    assert prefix.resolve().is_relative_to(ARTIFACTS) and ARTIFACTS.parent == ROOT / "fuzz"
    artifact = prefix / "crash-0123"
    assert _git("check-ignore", "-q", str(artifact.relative_to(ROOT))).returncode == 0
    # an explicit prefix is kept
    assert with_artifact_prefix("x", ["-artifact_prefix=/tmp/a/"]) == ["-artifact_prefix=/tmp/a/"]
    # both entry points use it
    assert "with_artifact_prefix(TARGET" in (ROOT / "fuzz" / "driver.py").read_text()
    assert "artifact_prefix(target)" in (ROOT / "fuzz" / "run.py").read_text()
