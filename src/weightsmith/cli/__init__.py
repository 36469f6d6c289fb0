"""The ``weightsmith`` console script (``weightsmith.cli:main``).

Subcommands: demo, inspect, validate, diff, convert, quantize, edit, split,
merge, scan.  See ``weightsmith --help`` and the README's CLI section.
"""

from __future__ import annotations

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
