"""PyTorch checkpoint (``.pth`` / ``.pt`` / ``.bin``, shards) -> safetensors, without torch.

The checkpoint is read by :mod:`weightsmith.torchfile` (nothing in it runs)
and streamed tensor by tensor into :class:`weightsmith.safetensors.StreamWriter`:
each tensor goes from the mmap of the source straight to its place in the
output, and its pages are then released, so peak memory stays near the
largest tensor whatever the checkpoint size.

Sharing (safetensors cannot express views):

* tensors that are the same view of one storage (tied weights) -- by default
  the first name is written and the others recorded as aliases, in the
  returned report and in ``__metadata__["aliases"]`` (JSON ``{alias: kept}``),
  the way transformers' ``save_pretrained`` drops tied duplicates;
  ``share="copy"`` writes every name;
* distinct views of one storage (slices, transposes) are each written as
  their own contiguous copy, and reported in ``shared``.

With ``max_shard_size``, shards are named like transformers' (``model.safetensors``
-> ``model-00001-of-00003.safetensors`` + ``model.safetensors.index.json``); a
folder as ``dst`` means ``dst/model.safetensors``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import errors, torchfile
from .._atomic import atomic_output

__all__ = ["ConversionReport", "torch_to_safetensors"]

DEFAULT_NAME = "model.safetensors"


@dataclass
class ConversionReport:
    """What was written, and everything that was not written as a tensor of its own."""

    files: list[str] = field(default_factory=list)
    tensors: int = 0
    aliases: dict[str, str] = field(default_factory=dict)  # dropped name -> kept name
    shared: list[list[str]] = field(default_factory=list)  # views of one storage, copied
    non_tensors: dict[str, str] = field(default_factory=dict)  # name -> value as text
    non_tensors_in_metadata: bool = False
    dict_state: list[str] = field(default_factory=list)  # OrderedDicts with BUILD attributes


def _shard_names(dst: Path, n: int) -> tuple[list[Path], Path | None]:
    if n == 1:
        return [dst], None
    stem = dst.name.removesuffix(".safetensors")
    files = [dst.with_name(f"{stem}-{k + 1:05d}-of-{n:05d}.safetensors") for k in range(n)]
    return files, dst.with_name(dst.name + ".index.json")


def _split(sizes: list[tuple[str, int]], limit: int) -> list[list[str]]:
    """Greedy, in checkpoint order; a tensor above the limit gets a shard of its own."""
    shards: list[list[str]] = []
    current: list[str] = []
    used = 0
    for name, size in sizes:
        if current and used + size > limit:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current or not shards:
        shards.append(current)
    return shards


def torch_to_safetensors(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    max_shard_size: int | str | None = None,
    *,
    share: str = "alias",
    non_tensors: str = "report",
    metadata: dict[str, str] | None = None,
) -> ConversionReport:
    """Convert a PyTorch checkpoint to safetensors; return a :class:`ConversionReport`.

    ``share``: ``"alias"`` (default) writes one name per identical tied tensor,
    ``"copy"`` writes them all.  ``non_tensors``: ``"report"`` (default) lists
    them in the report only, ``"metadata"`` also stores them as strings in
    ``__metadata__``.  ``metadata`` is added to every file's ``__metadata__``
    (after ``{"format": "pt"}``, which transformers checks).
    """
    from ..safetensors import StreamWriter, parse_size

    if share not in ("alias", "copy"):
        raise ValueError(f"share must be 'alias' or 'copy', not {share!r}")
    if non_tensors not in ("report", "metadata"):
        raise ValueError(f"non_tensors must be 'report' or 'metadata', not {non_tensors!r}")
    out = Path(dst)
    if out.is_dir():
        out = out / DEFAULT_NAME
    with torchfile.open(src) as ck:
        report = ConversionReport(
            shared=[list(g) for g in ck.shared], dict_state=list(ck.dict_state)
        )
        report.non_tensors = ck.metadata_strings()
        if share == "alias":
            report.aliases = dict(ck.aliases)
        names = [n for n in ck if n not in report.aliases]
        src_bytes = _source_bytes(ck)
        entries = []
        for name in names:
            info = ck.tensors[name]
            if info.nbytes > src_bytes:
                # only overlapping views (stride 0) can outgrow the file: refuse to blow them up
                raise errors.TensorLargerThanFile(
                    "tensor would be larger than the whole checkpoint",
                    path=ck.path,
                    field=name,
                    expected=f"<= {src_bytes} bytes",
                    found=info.nbytes,
                )
            code = info.safetensors_dtype
            if code is None:
                raise errors.UnconvertibleDtype(
                    "no safetensors dtype for this tensor",
                    path=ck.path,
                    field=name,
                    expected="a safetensors dtype",
                    found=info.torch_dtype,
                )
            entries.append((name, code, info.shape, info.nbytes))
        meta = {"format": "pt"}
        if non_tensors == "metadata":
            meta.update(report.non_tensors)
            report.non_tensors_in_metadata = True
        if report.aliases:
            meta["aliases"] = json.dumps(report.aliases, sort_keys=True)
        meta.update(metadata or {})
        limit = parse_size(max_shard_size) if max_shard_size is not None else None
        groups = (
            _split([(e[0], e[3]) for e in entries], limit) if limit else [[e[0] for e in entries]]
        )
        files, index_path = _shard_names(out, len(groups))
        by_name = {e[0]: e for e in entries}
        for path, group in zip(files, groups):
            with StreamWriter(path, [by_name[n][:3] for n in group], metadata=meta) as w:
                for name in group:
                    w.write(name, ck[name])
                    ck.release(name)  # keep RSS near one tensor, not the whole file
            report.files.append(os.fspath(path))
        report.tensors = len(entries)
        if index_path is not None:
            _write_index(index_path, files, groups, entries)
            report.files.append(os.fspath(index_path))
    return report


def _source_bytes(ck: Any) -> int:
    shards = getattr(ck, "shards", None)
    paths = [c.path for c in shards.values()] if shards else [ck.path]
    return sum(os.path.getsize(p) for p in paths)


def _write_index(
    index_path: Path, files: list[Path], groups: list[list[str]], entries: list[Any]
) -> None:
    sizes = {e[0]: e[3] for e in entries}
    params = 0
    for e in entries:
        n = 1
        for d in e[2]:
            n *= d
        params += n
    index = {
        "metadata": {"total_parameters": params, "total_size": sum(sizes.values())},
        "weight_map": {n: f.name for f, g in zip(files, groups) for n in g},
    }
    with atomic_output(index_path, "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
