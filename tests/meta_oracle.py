"""transformers' own Meta -> HF converter, the oracle of tests/test_convert_meta.py.

transformers 5 no longer ships ``convert_llama_weights_to_hf.py``; the last wheel that
did is 4.47.1.  scripts/test.sh downloads that wheel once and takes out this one file
into ``$WEIGHTSMITH_TRANSFORMERS_ORACLE`` (default ~/.cache/weightsmith/transformers-oracle);
it runs here against the installed transformers, torch and tokenizers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ORACLE_VERSION = "4.47.1"


def oracle_script() -> Path:
    base = Path(
        os.environ.get(
            "WEIGHTSMITH_TRANSFORMERS_ORACLE", Path.home() / ".cache/weightsmith/transformers-oracle"
        )
    )
    script = base / ORACLE_VERSION / "convert_llama_weights_to_hf.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"{script} not found; scripts/test.sh takes it from the transformers "
            f"{ORACLE_VERSION} wheel"
        )
    return script


def run_oracle(src: Path, dst: Path, generation: str, shards: int) -> Path:
    """Convert ``src`` with transformers' script; return ``dst``."""
    version = {"3.3": "3.1"}.get(generation, generation)  # the script predates 3.3
    cmd = [
        sys.executable, str(oracle_script()), "--input_dir", str(src), "--output_dir", str(dst),
        "--num_shards", str(shards), "--llama_version", version,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"oracle failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return dst
