"""weightsmith.flax / .tensorflow / .paddle / .mlx against HF's modules.

Each framework runs in its own process (tests/framework_cases.py): paddle
segfaults when imported after tensorflow.  The frameworks come from the
``frameworks`` extra, which scripts/test.sh installs: these tests do not skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).with_name("framework_cases.py")


@pytest.mark.parametrize("framework", ["flax", "tensorflow", "paddle", "mlx"])
def test_framework_against_hf(framework):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    out = subprocess.run(
        [sys.executable, str(CASES), framework],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0 and "all ok" in out.stdout, (
        f"rc={out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    )
