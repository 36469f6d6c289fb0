"""A GGUF header read from growing prefixes of a file (remote files: few requests).

Read a first chunk, parse; on :class:`~weightsmith.errors.NeedMoreData` grow as
:func:`next_gguf_prefix` says (a little past the parser's estimate of the
header end, within a bounded factor of what was read) and parse again.  The
source is the byte-source protocol of :mod:`weightsmith.inspection`: ``name``,
``size`` and ``prefix(n)``.
"""

from __future__ import annotations

from typing import Any

from ..errors import FormatError, HeaderReadLimit, NeedMoreData
from ._parse import GGUFHeader, parse

__all__ = ["GGUF_FIRST_CHUNK", "GGUF_MAX_HEADER", "next_gguf_prefix", "parse_gguf_prefix"]

#: first chunk of a GGUF file; the KV section of most files fits in it.
GGUF_FIRST_CHUNK = 1024 * 1024
#: a GGUF header (KV + tensor infos) larger than this is refused, not fetched
GGUF_MAX_HEADER = 512 * 1024 * 1024
#: a GGUF prefix grows to this many times the parser's estimate of the header end ...
GGUF_SLACK = 1.2
#: ... and at least this factor, at most that one, times what it has
GGUF_GROW_MIN, GGUF_GROW_MAX = 1.5, 16


def next_gguf_prefix(have: int, needed: int, size: int) -> int:
    """How far to read a GGUF header next, after a ``have``-byte prefix fell short.

    ``needed`` is the parser's estimate of the header's end from what it parsed
    (the arrays still to come extrapolated from the strings actually scanned):
    read a little past it, since the KVs after it are unknown, but grow by a
    bounded factor of what was read, and never past the file.
    """
    want = max(int(needed * GGUF_SLACK), int(have * GGUF_GROW_MIN), needed)
    return min(size, max(have + 1, min(want, have * GGUF_GROW_MAX)))


def parse_gguf_prefix(src: Any, first: int = GGUF_FIRST_CHUNK) -> tuple[GGUFHeader, int]:
    """Parse a GGUF header from growing prefixes; returns (header, bytes used)."""
    buf = src.prefix(first)
    while True:
        size = src.size if src.size is not None else len(buf)
        try:
            return parse(buf, size, src.name), len(buf)
        except NeedMoreData as e:
            if len(buf) >= size:  # the whole file is here: the parser must decide
                raise FormatError(
                    "GGUF header runs past the end of the file",
                    path=src.name,
                    expected=f">= {e.needed} bytes",
                    found=size,
                ) from None
            if e.needed > GGUF_MAX_HEADER:
                raise HeaderReadLimit(
                    f"{src.name}: the GGUF header needs {e.needed:,} bytes, "
                    f"more than the {GGUF_MAX_HEADER:,} read for a header"
                ) from None
            buf = src.prefix(next_gguf_prefix(len(buf), e.needed, size))
