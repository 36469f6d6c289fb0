"""Split and merge GGUF files the way llama.cpp's ``gguf-split`` does.

Layout of each shard is ordinary GGUF (:mod:`weightsmith.gguf._spec`).  As in
``tools/gguf-split/gguf-split.cpp``:

* shards are named ``<prefix>-00001-of-00003.gguf`` (1-based, 5 digits);
* the first shard holds all the metadata; every shard holds ``split.no``
  (u16, 0-based), ``split.tensors.count`` (i32, tensors in the whole set) and
  ``split.count`` (u16), in that order at the end of its KVs (llama.cpp's
  set-value moves a re-set key to the end, hence count after tensors.count);
* tensors stay in file order; with ``max_tensors`` (default 128) a new shard
  starts every ``max_tensors`` tensors, with ``max_size`` when the padded
  tensor bytes would exceed it (sizes take decimal ``M``/``G`` suffixes);
* tensor infos store ``ggml_n_dims`` dims (trailing 1s dropped);
* :func:`merge` writes the first shard's metadata with ``split.count`` reset
  to 0 (moved to the end), then every shard's tensors.

One deliberate difference: with a custom ``general.alignment`` gguf-split
lays out the first shard with 32 anyway (a file its own reader rejects); here
each shard is laid out with the alignment its metadata states.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .. import errors as E
from .._atomic import atomic_files
from ._edit import copy_tensors, raw_kvs
from ._file import GGUFFile, _Mapped, shard_paths
from ._spec import (
    DEFAULT_ALIGNMENT,
    KEY_SPLIT_COUNT,
    KEY_SPLIT_NO,
    KEY_SPLIT_TENSORS,
    VT,
    ggml_n_dims,
    pad,
)
from ._writer import Writer

__all__ = ["merge", "parse_size", "shard_prefix", "split"]

_SPLIT_KEYS = (KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS)


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as ``"500M"`` / ``"2G"`` (decimal units, like gguf-split)."""
    if isinstance(size, int):
        n = size
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", str(size), re.IGNORECASE)
        if m is None:
            raise E.InvalidSize(f"cannot parse size {size!r}; use bytes or a number with K, M or G")
        n = int(m[1]) * {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}[m[2].upper()]
    if n <= 0:
        raise E.InvalidSize(f"size must be positive, got {size!r}")
    return n


def split(
    path: str | os.PathLike[str],
    max_size: int | str | None = None,
    max_tensors: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    dst: str | os.PathLike[str] | None = None,
    no_tensor_first_split: bool = False,
) -> list[Path]:
    """Split ``path`` into llama.cpp-compatible shards; returns their paths in order.

    Where they go: ``dst`` as :func:`shard_prefix` reads it (``out/prefix`` ->
    ``out/prefix-00001-of-0000N.gguf``), else ``out_dir`` / ``path``'s folder with
    ``path``'s name.  The set appears at once: the shards are renamed into
    place only after all are written, the first one last.
    """
    path = Path(path)
    if max_size is not None and max_tensors is not None:
        raise ValueError("give max_size or max_tensors, not both (as gguf-split)")
    limit_size = parse_size(max_size) if max_size is not None else None
    if limit_size is None:
        max_tensors = 128 if max_tensors is None else int(max_tensors)
        if max_tensors <= 0:
            raise ValueError(f"max_tensors must be positive, got {max_tensors}")
    src = _Mapped(path)
    try:
        h = src.header
        if h.metadata.get(KEY_SPLIT_COUNT, 0) not in (0, 1):
            raise E.GGUFSplitError(
                "file is already a shard; merge it first",
                path=path,
                field=KEY_SPLIT_COUNT,
                expected="0 or absent",
                found=h.metadata[KEY_SPLIT_COUNT],
            )
        groups: list[list] = [[]]
        if no_tensor_first_split:
            groups.append([])
        curr = 0
        for i, t in enumerate(h.tensors):
            n = pad(t.nbytes, DEFAULT_ALIGNMENT)
            if limit_size is not None:
                new = curr + n > limit_size
                curr = n if new else curr + n
            else:
                new = 0 < i < len(h.tensors) and i % max_tensors == 0
            if new:
                if not groups[-1]:
                    raise E.GGUFSplitError(
                        "a shard would hold no tensors; the size or tensor limit is too small",
                        path=path,
                        field=f"tensor {t.name!r}",
                        expected=f"<= {limit_size} bytes",
                        found=n,
                    )
                groups.append([])
            groups[-1].append(t)
        n_split = len(groups)
        stem = path.name[:-5] if path.name.endswith(".gguf") else path.name
        if dst is not None:
            prefix = shard_prefix(path, dst)
        else:
            prefix = Path(out_dir) / stem if out_dir is not None else path.with_name(stem)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        outs = shard_paths(prefix, n_split)
        kvs = [kv for kv in raw_kvs(h, src.mm) if kv[0] not in _SPLIT_KEYS]
        with atomic_files(outs) as tmps:
            for k, (group, out) in enumerate(zip(groups, tmps)):
                w = Writer(out, byte_order=h.byte_order)
                try:
                    if k == 0:
                        for key, t, d in kvs:
                            w.add_encoded(key, t, d)
                    w.add(KEY_SPLIT_NO, k, VT.UINT16)
                    w.add(KEY_SPLIT_TENSORS, len(h.tensors), VT.INT32)
                    w.add(KEY_SPLIT_COUNT, n_split, VT.UINT16)
                    for t in group:
                        w.add_tensor_info(t.name, t.ggml_type, (), dims=ggml_n_dims(t.dims))
                    copy_tensors(w, src.mm, group)
                    w.close()
                except BaseException:
                    w.abort()
                    raise
        return outs
    finally:
        src.close()


_FIRST_SHARD_RE = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


def shard_prefix(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """The shard name prefix that ``split SRC DST`` means.

    An existing folder, or a ``dst`` ending in a path separator, gets ``src``'s
    name (``shards/`` -> ``shards/model``); otherwise the last part of ``dst`` is
    the file prefix (``out/part`` -> ``out/part-00001-of-0000N.gguf``), with a
    trailing ``.gguf`` or ``-00001-of-0000N.gguf`` (a first shard's name) dropped.
    """
    text = os.fspath(dst)
    src = Path(src)
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        stem = src.name[:-5] if src.name.lower().endswith(".gguf") else src.name
        return Path(text) / stem
    d = Path(text)
    name = _FIRST_SHARD_RE.sub("", d.name)
    if name.lower().endswith(".gguf"):
        name = name[:-5]
    return d.with_name(name)


def merge(first_shard: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Merge a split set (given any of its shards) into one file ``out``."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists (gguf-split refuses to overwrite too)")
    with GGUFFile(first_shard) as g:
        if len(g.paths) < 2 and g.metadata.get(KEY_SPLIT_COUNT) is None:
            raise E.GGUFSplitError(
                "not a split file",
                path=first_shard,
                field=KEY_SPLIT_COUNT,
                expected="a split.count key",
                found="none",
            )
        first = g._files[0]
        kvs = [kv for kv in raw_kvs(first.header, first.mm) if kv[0] != KEY_SPLIT_COUNT]
        w = Writer(out, byte_order=g.byte_order)
        try:
            for key, t, d in kvs:
                w.add_encoded(key, t, d)
            w.add(KEY_SPLIT_COUNT, 0, VT.UINT16)
            for t in g.tensors:
                w.add_tensor_info(t.name, t.ggml_type, (), dims=ggml_n_dims(t.dims))
            for f in g._files:
                copy_tensors(w, f.mm, f.header.tensors)
            w.close()
        except BaseException:
            w.abort()
            raise
    return out
