"""The layers contract of pyproject.toml ([tool.importlinter]) holds: imports point down.

import-linter builds the import graph of ``src/weightsmith`` (imports inside
functions included) and fails on any import from a lower layer to a higher
one, or between siblings; a cycle between layers is such a back edge.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(config: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # this checkout's sources, whatever weightsmith the environment has installed
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--config", str(config), "--no-cache"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_layers_contract_is_kept():
    p = _lint(ROOT / "pyproject.toml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 kept, 0 broken" in p.stdout, p.stdout


def test_a_back_edge_fails(tmp_path):
    # the same contract with gguf above quant: quant/file.py's import of gguf
    # is then a back edge, and the run must say so
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    formats = '    "weightsmith.safetensors | weightsmith.gguf | weightsmith.torchfile",\n'
    quant = '    "weightsmith.quant",\n'
    assert formats in text and quant in text
    swapped = text.replace(quant, "@@").replace(formats, quant).replace("@@", formats)
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text(swapped, encoding="utf-8")
    p = _lint(cfg)
    assert p.returncode != 0, p.stdout
    assert "weightsmith.quant.file -> weightsmith.gguf" in p.stdout, p.stdout
