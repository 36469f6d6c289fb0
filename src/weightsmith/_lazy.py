"""Lazy imports: optional dependencies with a clear message when missing, and
module attributes resolved on first access (PEP 562)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from .errors import MissingDependencyError

# import name -> the extra (``pip install 'weightsmith[<extra>]'``) that provides it
_EXTRAS = {
    "torch": "torch",
    "rich": "cli",
    "httpx": "remote",
    "fsspec": "fsspec",
    "ray": "ray",
    "tokenizers": "tokenizers",
    "sentencepiece": "tokenizers",
    # the array frameworks of HF safetensors; all four in "frameworks"
    "jax": "jax",
    "tensorflow": "tensorflow",
    "paddle": "paddle",
    "mlx": "mlx",
}


def require(module: str, purpose: str = "") -> ModuleType:
    """Import an optional dependency or raise :class:`MissingDependencyError`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise MissingDependencyError(top, _EXTRAS.get(top, "all"), purpose) from None


def lazy_attributes(module: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``table[name]`` on first access.

    The value is then set on ``module``, so the lookup runs once per name.
    """

    def __getattr__(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
