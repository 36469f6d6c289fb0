"""The progress helper: rich bars on a terminal only, a plain callback for the library."""

from __future__ import annotations

import io

from weightsmith.cli.progress import ProgressBar, accepts_progress, call_with_progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_draws_bytes_tensors_on_a_terminal():
    stream = FakeTTY()
    with ProgressBar("convert", stream=stream) as bar:
        assert bar.enabled
        for i in range(1, 5):
            bar(i * 1024 * 1024, 4 * 1024 * 1024, i, 4)
    text = stream.getvalue()
    assert "convert" in text
    assert "4/4 tensors" in text
    assert "4.0/4.0 MiB" in text
    assert bar.last == (4 * 1024 * 1024, 4 * 1024 * 1024, 4, 4)


def test_bar_is_silent_off_a_terminal_and_when_quiet():
    stream = io.StringIO()
    with ProgressBar("x", stream=stream) as bar:
        bar(1, 2, 1, 2)
    assert not bar.enabled and stream.getvalue() == ""
    tty = FakeTTY()
    with ProgressBar("x", stream=tty, enabled=False) as bar:
        bar(1, 2)
    assert tty.getvalue() == "" and bar.calls == 1


def test_call_with_progress_only_when_accepted():
    seen = []

    def with_progress(a, *, progress=None):
        progress(10, 20, 1, 2)
        seen.append(a)
        return "done"

    def without(a):
        seen.append(a)
        return "plain"

    assert accepts_progress(with_progress) and not accepts_progress(without)
    assert call_with_progress(with_progress, 1, quiet=True) == "done"
    assert call_with_progress(without, 2) == "plain"
    assert seen == [1, 2]


def test_spinner_only_on_a_terminal():
    from weightsmith.cli.progress import Spinner

    tty = FakeTTY()
    with Spinner("merge", stream=tty) as sp:
        assert sp.enabled
    assert "merge" in tty.getvalue()
    plain = io.StringIO()
    with Spinner("merge", stream=plain) as sp:
        assert not sp.enabled
    assert plain.getvalue() == ""
