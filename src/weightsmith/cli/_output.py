"""Terminal output: rich tables on a terminal when rich is installed, plain text otherwise."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def error_line(exc: BaseException) -> str:
    """The one line an error prints as: ``error: <ErrorClass>: <first line of the message>``."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"error: {type(exc).__name__}: {msg}" if msg else f"error: {type(exc).__name__}"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{int(x)} B" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{n} B"


def human_count(n: int) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def use_rich(stream: TextIO | None = None) -> bool:
    """rich only on a terminal, only when installed, never with NO_COLOR=...-style opt outs."""
    stream = stream or sys.stdout
    if os.environ.get("WEIGHTSMITH_PLAIN"):
        return False
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    try:
        import rich  # noqa: F401 -- optional dependency (the cli extra)
    except ImportError:
        return False
    return True


class Out:
    """Tables and lines, to rich or plain text (same content either way)."""

    def __init__(
        self, stream: TextIO | None = None, rich: bool | None = None, width: int | None = None
    ) -> None:
        self.stream = stream or sys.stdout
        self.rich = use_rich(self.stream) if rich is None else rich
        self._console: Any = None
        if self.rich:
            from rich.console import Console  # optional dependency (the cli extra)

            self._console = Console(file=self.stream, highlight=False, width=width)

    def line(self, text: str = "", style: str | None = None) -> None:
        if self._console is not None:
            self._console.print(text, style=style, markup=False)
        else:
            print(text, file=self.stream)

    def heading(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, style="bold", markup=False)
        else:
            print(text, file=self.stream)

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        right: Sequence[int] = (),
        title: str | None = None,
    ) -> None:
        rows = [[("" if c is None else str(c)) for c in r] for r in rows]
        if title and title.startswith("\n"):
            self.line()
            title = title.lstrip("\n")
        if self._console is not None:
            from rich.table import Table  # optional dependency (the cli extra)

            t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
            for i, c in enumerate(columns):
                t.add_column(c, justify="right" if i in right else "left", overflow="fold")
            for r in rows:
                t.add_row(*r)
            self._console.print(t)
            return
        if title:
            print(title, file=self.stream)
        widths = [len(c) for c in columns]
        for r in rows:
            for i, c in enumerate(r):
                widths[i] = max(widths[i], len(c))

        def fmt(cells: Sequence[str]) -> str:
            out = []
            for i, c in enumerate(cells):
                out.append(c.rjust(widths[i]) if i in right else c.ljust(widths[i]))
            return "  " + "  ".join(out).rstrip()

        print(fmt(list(columns)), file=self.stream)
        for r in rows:
            print(fmt(r), file=self.stream)
