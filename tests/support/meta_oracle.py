"""transformers' own Meta -> HF converter, the oracle of tests/test_convert_meta.py.

transformers 5 no longer ships ``convert_llama_weights_to_hf.py``; the last release that
did is 4.47.1.  scripts/test.sh installs that release (with the tokenizers and hub it
needs) into its own folder under ``$WEIGHTSMITH_TRANSFORMERS_ORACLE`` (default
~/.cache/weightsmith/transformers-oracle/4.47.1/site) and takes the script from it; the
script runs on the transformers it was written for, because transformers 5 changed the
tokenizer classes it calls.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import pyfork

ORACLE_VERSION = "4.47.1"


def oracle_script() -> Path:
    base = Path(
        os.environ.get(
            "WEIGHTSMITH_TRANSFORMERS_ORACLE",
            Path.home() / ".cache/weightsmith/transformers-oracle",
        )
    )
    script = base / ORACLE_VERSION / "convert_llama_weights_to_hf.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"{script} not found; scripts/test.sh installs transformers {ORACLE_VERSION} there"
        )
    return script


def oracle_env() -> dict[str, str]:
    """The environment of a subprocess that imports transformers 4.47.1 (its own
    tokenizers and hub first; torch, sentencepiece and tiktoken are this environment's)."""
    site = os.pathsep.join([str(oracle_script().parent / "site"), os.environ.get("PYTHONPATH", "")])
    # USE_TF/USE_FLAX: 4.47 imports any framework it finds, and only torch is wanted
    return {**os.environ, "PYTHONPATH": site, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "USE_TF": "0", "USE_FLAX": "0", "USE_JAX": "0", "USE_TORCH": "1"}  # fmt: skip


def run_oracle(src: Path, dst: Path, generation: str, shards: int) -> Path:
    """Convert ``src`` with transformers' script under transformers 4.47.1; return ``dst``."""
    version = {"3.3": "3.1"}.get(generation, generation)  # the script predates 3.3
    script = oracle_script()
    cmd = [
        sys.executable, str(script), "--input_dir", str(src), "--output_dir", str(dst),
        "--num_shards", str(shards), "--llama_version", version,
    ]  # fmt: skip
    proc = pyfork.run(cmd, env=oracle_env(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"oracle failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return dst
