"""Where llama.cpp's own sources are: the unpacked llama-cpp-python sdist.

scripts/test.sh downloads the sdist of the installed llama-cpp-python version and
points WEIGHTSMITH_LLAMA_SDIST at its cache folder; the conversion tests use
llama.cpp's convert_hf_to_gguf.py, gguf-py and models/ggml-vocab-*.gguf from it.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path


def llama_cpp_root() -> Path:
    """``vendor/llama.cpp`` inside the unpacked sdist matching the installed version."""
    version = importlib.metadata.version("llama-cpp-python")
    base = Path(
        os.environ.get("WEIGHTSMITH_LLAMA_SDIST", Path.home() / ".cache/weightsmith/llama-sdist")
    )
    root = base / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (root / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(
            f"llama.cpp sources not found at {root}; run scripts/test.sh, which downloads the "
            f"llama-cpp-python {version} sdist there"
        )
    return root
