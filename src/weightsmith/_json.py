"""JSON shared by the formats: read a file or raise a named error; keep every key pair.

:func:`read_json` turns every way a JSON file can fail to load (missing,
unreadable, not UTF-8, not JSON, an integer past ``int()``'s digit limit,
nesting past the recursion limit) into the caller's error class, so each
format names its own rule (``InvalidIndex``, ``InvalidModelConfig``,
``TokenizerInconsistent``).  With ``pairs=True`` objects come back as
:class:`Pairs`, where a repeated key is still visible.

``safetensors/_header.py`` keeps its own pair-keeping decoder: it is tuned
for the header hot path (a dict unless a key repeats) and belongs to that
parser.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

from .errors import FormatError

__all__ = ["Pairs", "plain", "read_json"]


class Pairs(list):
    """A JSON object kept as its list of (key, value) pairs, duplicates included."""

    __slots__ = ()


def plain(value: Any) -> Any:
    """``value`` with every :class:`Pairs` turned into a dict (the last key wins)."""
    if isinstance(value, Pairs):
        return {k: plain(x) for k, x in value}
    if isinstance(value, list):
        return [plain(x) for x in value]
    return value


def read_json(
    path: str | os.PathLike[str],
    error: type[FormatError],
    what: str,
    *,
    pairs: bool = False,
    expected: str = "a JSON file",
    data: bytes | None = None,
) -> Any:
    """The JSON value in ``path``, or ``error`` naming the file and what went wrong.

    ``path`` may also be a :class:`zipfile.Path` (a file held in memory).  ``data``: the
    file's bytes when they are already in memory (a remote file fetched whole); ``path``
    then only names it in errors.
    """
    try:
        if data is None and isinstance(path, zipfile.Path):
            data = path.read_bytes()
        elif data is None:
            with open(path, "rb") as f:
                data = f.read()
        return json.loads(bytes(data).decode("utf-8"), object_pairs_hook=Pairs if pairs else None)
    # ValueError: bad JSON or UTF-8, or an integer past int()'s digit limit
    except (OSError, ValueError, RecursionError) as exc:
        raise error(f"cannot read {what}", path=path, expected=expected, found=str(exc)) from None
