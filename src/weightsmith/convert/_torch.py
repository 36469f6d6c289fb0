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
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import errors, torchfile
from .._atomic import atomic_files
from ..safetensors import StreamWriter, parse_size, shard_names, split_shards, write_index

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


def _shard_paths(dst: Path, n: int) -> tuple[list[Path], Path | None]:
    """``dst`` for one shard; ``<stem>-0000i-of-0000n.safetensors`` and an index for more."""
    if n == 1:
        return [dst], None
    stem = dst.name.removesuffix(".safetensors")
    files = [dst.with_name(name) for name in shard_names(n, stem)]
    return files, dst.with_name(dst.name + ".index.json")


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
    if share not in ("alias", "copy"):
        raise ValueError(f"share must be 'alias' or 'copy', not {share!r}")
    if non_tensors not in ("report", "metadata"):
        raise ValueError(f"non_tensors must be 'report' or 'metadata', not {non_tensors!r}")
    out = Path(dst)
    if out.is_dir() or not out.suffix:  # a folder, existing or to be made
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
                raise errors.UnsupportedTorchDtype(
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
            split_shards([(e[0], e[3]) for e in entries], limit)
            if limit
            else [[e[0] for e in entries]]
        )
        files, index_path = _shard_paths(out, len(groups))
        by_name = {e[0]: e for e in entries}
        out.parent.mkdir(parents=True, exist_ok=True)
        # the shards and the index appear together once all are written, the index last
        entry_first = [index_path, *files] if index_path is not None else files
        with atomic_files(entry_first) as tmps:
            tmp_of = dict(zip(entry_first, tmps))
            for path, group in zip(files, groups):
                specs = [by_name[n][:3] for n in group]
                with StreamWriter(tmp_of[path], specs, metadata=meta) as w:
                    for name in group:
                        w.write(name, ck[name])
                        ck.release(name)  # keep RSS near one tensor, not the whole file
            if index_path is not None:
                write_index(
                    tmp_of[index_path],
                    {n: f.name for f, g in zip(files, groups) for n in g},
                    total_size=sum(e[3] for e in entries),
                    total_parameters=sum(math.prod(e[2]) for e in entries),
                )
        report.files += [os.fspath(p) for p in files]
        report.tensors = len(entries)
        if index_path is not None:
            report.files.append(os.fspath(index_path))
    return report


def _source_bytes(ck: Any) -> int:
    shards = getattr(ck, "shards", None)
    paths = [c.path for c in shards.values()] if shards else [ck.path]
    return sum(os.path.getsize(p) for p in paths)
