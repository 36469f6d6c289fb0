"""Lazy imports of optional dependencies, with a clear message when missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

# import name -> the extra (``pip install 'weightsmith[<extra>]'``) that provides it
_EXTRAS = {
    "torch": "torch",
    "rich": "cli",
    "httpx": "remote",
    "fsspec": "fsspec",
    "tokenizers": "tokenizers",
    "sentencepiece": "tokenizers",
}


def require(module: str, purpose: str = "") -> ModuleType:
    """Import an optional dependency or raise :class:`MissingDependencyError`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise MissingDependencyError(top, _EXTRAS.get(top, "all"), purpose) from None
