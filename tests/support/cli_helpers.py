"""Run the ``weightsmith`` console script in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema

from . import hf_models

WEIGHTSMITH = shutil.which("weightsmith")
_DOCS = Path(__file__).resolve().parents[2] / "docs"
SCHEMA = json.loads((_DOCS / "cli-json-schema.json").read_text())
DIFF_SCHEMA = json.loads((_DOCS / "cli-diff-json-schema.json").read_text())


def run(
    *args: str, env: dict | None = None, cwd=None, timeout: float = 300
) -> subprocess.CompletedProcess:
    assert WEIGHTSMITH, "the weightsmith console script is not on PATH (pip install -e .)"
    full_env = {**os.environ, "WEIGHTSMITH_PLAIN": "1", **(env or {})}
    return subprocess.run(
        [WEIGHTSMITH, *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


def run_json(*args: str, env: dict | None = None) -> dict:
    """``weightsmith inspect ... --json``: exit 0, and output valid against the schema."""
    p = run(*args, "--json", env=env)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    jsonschema.validate(data, SCHEMA, cls=jsonschema.Draft202012Validator)
    return data


def diff_json(p: subprocess.CompletedProcess) -> dict:
    """The output of ``weightsmith diff ... --json``, valid against its schema."""
    data = json.loads(p.stdout)
    jsonschema.validate(data, DIFF_SCHEMA, cls=jsonschema.Draft202012Validator)
    return data


def assert_one_line_error(p: subprocess.CompletedProcess, name: str) -> None:
    """Exit 1, one line ``error: <name>: ...`` on stderr, no traceback."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"error: {name}: "), p.stderr
    assert "Traceback" not in p.stderr


def build_hf_llama(root: Path) -> Path:
    """A tiny Llama folder ``root/hf`` (SentencePiece tokenizer) and its f32 and q8_0
    GGUFs ``root/m-<type>.gguf``, made by the CLI."""
    src = hf_models.build("llama", root / "hf")
    for t in ("f32", "q8_0"):
        p = run("convert", src, root / f"m-{t}.gguf", "--type", t)
        assert p.returncode == 0, p.stderr
        assert f"wrote {root / f'm-{t}.gguf'}" in p.stdout
    return root
