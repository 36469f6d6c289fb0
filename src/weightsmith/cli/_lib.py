"""Find a library function by name, or say clearly that it is not in this build."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import NotAvailableError


def lib(module: str, *names: str, what: str) -> Any:
    """The first of ``names`` found in ``weightsmith.<module>``, else NotAvailableError.

    The CLI is wired to library parts that land independently; a missing part
    must end in one clear line, not an AttributeError.
    """
    try:
        mod = importlib.import_module(f"weightsmith.{module}")
    except ImportError as e:
        if "weightsmith" in str(e):
            raise NotAvailableError(f"{what} is not available yet in this build") from None
        raise
    for n in names:
        fn = getattr(mod, n, None)
        if fn is not None:
            return fn
    raise NotAvailableError(
        f"{what} is not available yet in this build (needs weightsmith.{module}.{names[0]})"
    )


def lib_or_none(module: str, *names: str) -> Any:
    """Like :func:`lib`, but None when the part is not there."""
    try:
        return lib(module, *names, what="")
    except NotAvailableError:
        return None
