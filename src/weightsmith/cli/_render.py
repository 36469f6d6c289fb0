"""Human-readable rendering of an inspection :class:`~weightsmith.inspection.Report`.

The tensor table is a tree grouped by layer, like the Hugging Face file
viewer: top-level tensors as rows, each ``model.layers.N`` / ``blk.N`` as a
group row followed by its tensors (names relative to the group).  Runs of
layers that are identical in structure (same relative names, shapes and
dtypes) collapse to one line, unless ``all_layers`` is set.
"""

from __future__ import annotations

import re
from typing import Any

from ..inspection import (
    LayerGroup,
    Report,
    TensorEntry,
    filter_tensors,
    layer_groups,
    summarize_value,
)
from ._output import Out, human_bytes, human_count

_NUM_TAIL = re.compile(r"^(.*?)(\d+)$")

#: shown under a GGUF tensor table: the order differs from gguf-dump's
GGUF_SHAPE_NOTE = (
    "shapes are in numpy order, outermost first (as torch/safetensors show them): "
    "the reverse of gguf-dump's ne order"
)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _meta_lines(meta: dict[str, Any], width: int = 100) -> list[tuple[str, str]]:
    rows = []
    for k in sorted(meta):
        v = summarize_value(meta[k])
        if isinstance(v, dict) and "array_length" in v:
            text = f"[{v['array_length']} × {v['element_type']}] {v['head']} ..."
        else:
            text = v if isinstance(v, str) else repr(v)
        text = text.replace("\n", "\\n")
        if len(text) > width:
            text = text[: width - 3] + "..."
        rows.append((k, text))
    return rows


def _tensor_row(t: TensorEntry, name: str, multi_file: bool) -> list[Any]:
    row = [name, _shape(t.shape), t.dtype, human_bytes(t.nbytes), t.offset]
    if multi_file:
        row.append(t.file.rsplit("/", 1)[-1])
    return row


def _collapse(items: list[LayerGroup | TensorEntry]) -> list[Any]:
    """Merge runs of structurally identical consecutive layer groups."""
    out: list[Any] = []
    for item in items:
        prev = out[-1] if out else None
        if (
            isinstance(item, LayerGroup)
            and isinstance(prev, list)
            and _family(prev[0].name) == _family(item.name)
            and prev[0].signature() == item.signature()
        ):
            prev.append(item)
        elif isinstance(item, LayerGroup):
            out.append([item])
        else:
            out.append(item)
    return out


def _family(name: str) -> str:
    m = _NUM_TAIL.match(name)
    return m.group(1) if m else name


def tensor_tree_rows(report: Report, pattern: str | None, all_layers: bool) -> list[list[Any]]:
    tensors = filter_tensors(report.tensors, pattern)
    multi = len(report.files) > 1
    rows: list[list[Any]] = []
    for entry in _collapse(layer_groups(tensors)):
        if isinstance(entry, TensorEntry):
            rows.append(_tensor_row(entry, entry.name, multi))
            continue
        runs = [[g] for g in entry] if all_layers else [entry]
        for run in runs:
            g = run[0]
            params = sum(x.parameters for x in run)
            nbytes = sum(x.nbytes for x in run)
            if len(run) == 1:
                label = g.name
            else:
                last = _NUM_TAIL.match(run[-1].name)
                label = f"{g.name}–{last.group(2) if last else run[-1].name}"
            summary = f"{len(g.tensors)} tensors" + (
                f" × {len(run)} layers" if len(run) > 1 else ""
            )
            rows.append(
                [label, summary, "", human_bytes(nbytes), f"{human_count(params)} params"]
                + ([""] if multi else [])
            )
            cut = len(g.name) + 1
            for t in g.tensors:
                rows.append(_tensor_row(t, "  " + t.name[cut:], multi))
    return rows


def render_report(
    report: Report,
    out: Out,
    *,
    tensors: bool = True,
    pattern: str | None = None,
    all_layers: bool = False,
) -> None:
    n_files = len(report.files)
    total_size = sum(f.size or 0 for f in report.files)
    out.heading(
        f"{report.target}  ({report.format}, {n_files} file{'s' if n_files != 1 else ''}, "
        f"{human_bytes(total_size)} on disk)"
    )
    if n_files > 1:
        out.table(
            ["file", "size", "header", "tensors"],
            [
                [f.path, human_bytes(f.size), human_bytes(f.header_size), len(f.tensors)]
                for f in report.files
            ],
            right=(1, 2, 3),
            title="\nFiles",
        )
    if report.index_metadata:
        out.table(["key", "value"], _meta_lines(report.index_metadata), title="\nIndex metadata")
    seen: set[str] = set()
    for f in report.files:
        rows = [r for r in _meta_lines(f.metadata) if f"{r[0]}={r[1]}" not in seen]
        # split sets repeat most keys in every shard: show each key/value once
        seen.update(f"{r[0]}={r[1]}" for r in rows)
        if rows:
            title = "\nMetadata" + (f" ({f.path.rsplit('/', 1)[-1]})" if n_files > 1 else "")
            out.table(["key", "value"], rows, title=title)
    if tensors:
        cols = ["tensor", "shape", "dtype", "size", "offset"] + (["file"] if n_files > 1 else [])
        rows = tensor_tree_rows(report, pattern, all_layers)
        title = "\nTensors" + (f" matching {pattern!r}" if pattern else "") + " (grouped by layer)"
        out.table(cols, rows, right=(3, 4), title=title)
        if report.format == "gguf":
            out.line(GGUF_SHAPE_NOTE)
    counts = report.counts_by_dtype()
    total_p = report.total_parameters or 1
    rows = [
        [
            k,
            v["tensors"],
            f"{v['parameters']:,}",
            human_bytes(v["bytes"]),
            f"{100 * v['parameters'] / total_p:.1f}%",
        ]
        for k, v in counts.items()
    ]
    rows.append(
        [
            "total",
            len(report.tensors),
            f"{report.total_parameters:,}",
            human_bytes(report.total_bytes),
            "",
        ]
    )
    out.table(
        ["dtype", "tensors", "parameters", "bytes", "share"],
        rows,
        right=(1, 2, 3, 4),
        title="\nParameters by dtype",
    )
    out.line(
        f"\n{report.total_parameters:,} parameters ({human_count(report.total_parameters)}), "
        f"{report.total_bytes:,} bytes of tensor data ({human_bytes(report.total_bytes)}; "
        f"the files: {human_bytes(total_size)}), {report.bits_per_weight:.2f} bits per weight"
    )
    if report.remote:
        out.line(f"remote: {report.requests} request(s), {report.bytes_fetched:,} bytes fetched")
    for note in report.notes:
        out.line(f"note: {note}")
    for name in report.stray_files:
        out.line(f"stray: {name} is not named by the index (not counted)")
