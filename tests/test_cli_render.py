"""The inspect renderer with rich (as on a terminal) and as plain text: same content."""

from __future__ import annotations

import io

from weightsmith.cli._output import Out
from weightsmith.cli._render import render_report
from weightsmith.inspection import inspect_local


def _render(report, rich: bool, **kw) -> str:
    stream = io.StringIO()
    render_report(report, Out(stream, rich=rich, width=200), **kw)
    return stream.getvalue()


def test_rich_and_plain_show_the_same_rows(remote_tree):
    report = inspect_local(remote_tree.files / "small.safetensors")
    plain, fancy = _render(report, False), _render(report, True)
    for text in (plain, fancy):
        assert "model.layers.0–2" in text
        assert "self_attn.q_proj.weight" in text
        assert "model.rotary.inv_freq" in text and "I64" in text
        assert f"{report.total_parameters:,}" in text
    assert "bits per weight" in fancy


def test_gguf_tree_groups_blk(remote_tree):
    report = inspect_local(remote_tree.files / "model.gguf")
    text = _render(report, False, all_layers=True)
    assert "\n  blk.0 " in text and "\n  blk.1 " in text
    assert "\n    attn_q.weight " in text and "Q8_0" in text
    assert "token_embd.weight" in text
