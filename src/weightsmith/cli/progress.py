"""Progress bars for long operations, without the library importing rich.

The library's side is :data:`weightsmith.progress.ProgressFn`; the CLI passes
a :class:`ProgressBar` as that callable.  :func:`call_with_progress` passes it
only to functions whose signature has a ``progress`` parameter, and shows a
spinner for the others.

On a terminal, with rich installed and without ``--quiet``, the bar shows
bytes and tensors, a rate and the time left; otherwise it draws nothing.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, TextIO


class ProgressBar:
    """A context manager that is also the ``progress`` callback."""

    def __init__(
        self, description: str, *, enabled: bool = True, stream: TextIO | None = None
    ) -> None:
        self.description = description
        self.stream = stream or sys.stderr
        self._progress: Any = None
        self._task: Any = None
        self.calls = 0
        self.last: tuple[int, int | None, int | None, int | None] | None = None
        self.enabled = enabled and _terminal(self.stream) and _have_rich()

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            # optional dependency (the cli extra)
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TextColumn("{task.fields[tensors]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(self.description, total=None, tensors="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def __call__(
        self,
        bytes_done: int,
        bytes_total: int | None = None,
        tensors_done: int | None = None,
        tensors_total: int | None = None,
    ) -> None:
        self.calls += 1
        self.last = (bytes_done, bytes_total, tensors_done, tensors_total)
        if self._progress is None:
            return
        tensors = ""
        if tensors_done is not None:
            tensors = (
                f"{tensors_done}/{tensors_total} tensors"
                if tensors_total
                else f"{tensors_done} tensors"
            )
        self._progress.update(self._task, completed=bytes_done, total=bytes_total, tensors=tensors)


class Spinner:
    """An elapsed-time spinner for operations that cannot report progress."""

    def __init__(
        self, description: str, *, enabled: bool = True, stream: TextIO | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.description = description
        self.enabled = enabled and _terminal(self.stream) and _have_rich()
        self._progress: Any = None

    def __enter__(self) -> Spinner:
        if self.enabled:
            # optional dependency (the cli extra)
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                console=Console(file=self.stream), transient=True,
            )  # fmt: skip
            self._progress.__enter__()
            self._progress.add_task(self.description, total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None


def _terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _have_rich() -> bool:
    try:
        import rich.progress  # noqa: F401 -- optional dependency (the cli extra)
    except ImportError:
        return False
    return True


def accepts_progress(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "progress" in params


def call_with_progress(
    fn: Callable[..., Any], *args: Any, description: str = "", quiet: bool = False, **kwargs: Any
) -> Any:
    """Call ``fn``, giving it a progress bar when it takes a ``progress`` argument."""
    if not accepts_progress(fn):
        # the library part reports nothing yet: a spinner with the elapsed time at least
        with Spinner(description or getattr(fn, "__name__", ""), enabled=not quiet):
            return fn(*args, **kwargs)
    with ProgressBar(description or getattr(fn, "__name__", ""), enabled=not quiet) as bar:
        return fn(*args, progress=bar, **kwargs)
