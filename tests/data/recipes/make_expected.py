"""Regenerate expected.json: llama.cpp's own type choice for every model and file type.

Run from the repository root: ``python tests/data/recipes/make_expected.py``.
The tests also run llama-quantize live for a few file types, so this frozen
table cannot drift from the library in CI unnoticed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from support.recipe_models import FILE_TYPES, MODELS, llama_quantize, write_model  # noqa: E402


def main() -> None:
    expected: dict[str, dict[str, dict[str, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in MODELS.items():
            src = Path(tmp) / f"{name}.gguf"
            write_model(spec, src)
            expected[name] = {}
            for ft in FILE_TYPES:
                expected[name][ft] = llama_quantize(src, Path(tmp) / f"{name}-{ft}.gguf", ft)
                (Path(tmp) / f"{name}-{ft}.gguf").unlink()
                print(name, ft, flush=True)
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
