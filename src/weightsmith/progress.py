"""The progress protocol of long library operations.

Functions that take a while (converting, quantizing, splitting) accept an
optional ``progress`` callable and call it as they go::

    progress(bytes_done, bytes_total, tensors_done, tensors_total)

with absolute values (not increments), all ints; totals may be ``None`` when
unknown.  The CLI passes a bar (:mod:`weightsmith.cli.progress`); a script may
pass any function or nothing.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ProgressFn"]

ProgressFn = Callable[[int, "int | None", "int | None", "int | None"], None]
