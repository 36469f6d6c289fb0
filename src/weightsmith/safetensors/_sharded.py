"""Sharded checkpoints, laid out as transformers lays them out.

A checkpoint folder holds either one ``model.safetensors``, or the shards
``model-00001-of-0000N.safetensors`` ... and an index
``model.safetensors.index.json``::

    {
      "metadata": {
        "total_parameters": <elements in all tensors>,
        "total_size": <bytes of tensor data in all shards>
      },
      "weight_map": {
        "<tensor name>": "model-00001-of-0000N.safetensors",
        ...
      }
    }

written with ``json.dumps(index, indent=2, sort_keys=True) + "\\n"`` (so the
weight map is sorted).  Tensors are assigned to shards in the order given,
starting a new shard when the next tensor would push the current one past
``max_shard_size``; a tensor larger than the limit gets a shard of its own
(huggingface_hub's ``split_state_dict_into_shards_factory``).  One shard
means a plain ``model.safetensors`` and no index, as in transformers.

Atomicity of a save over an existing checkpoint: the checkpoint is what its
entry point names -- ``model.safetensors`` if present (transformers looks
there first, and so does :func:`open_checkpoint`), else the index (every
shard it maps).  A reader opening the checkpoint through the entry
point sees the complete old or the complete new checkpoint whenever the
writer is killed, because the entry point is only ever replaced atomically
and never names a shard that is being written:

1. old shards whose names the new save reuses are first hard-linked to
   backup names (``.<name>.<random>.wsold``) and the old index is atomically
   rewritten to name the backups -- still the complete old checkpoint;
2. the new shards are written (each through ``atomic_output``);
3. the new index replaces the old one (the commit; over a single-file
   checkpoint, the commit is step 4's unlink of ``model.safetensors``);
4. what the new checkpoint does not use is deleted: an old
   ``model.safetensors`` first, then backups and shards of other counts.

Remote checkpoints (``hf://ORG/REPO[@REV][/FOLDER]``, an ``http(s)://`` folder
URL such as ``.../resolve/main``, an index or a file URL, or an fsspec URL):
looked up in the same order (``model.safetensors``, then the index, fetched
whole); every shard's header is fetched once, in parallel, and its handle kept
open, so tensor data is then fetched lazily by range (see
:mod:`weightsmith.safetensors._reader`).

For one shard, ``model.safetensors`` is written atomically (the commit) and
then the old index and shards are deleted.
Cleanup rule: every successful ``save_sharded`` deletes backups, temp files
of dead writers (see :mod:`weightsmith._atomic`) and shards of earlier saves
that the new index does not name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import _atomic
from .. import errors as E
from .._atomic import atomic_output
from .._json import Pairs, plain, read_json
from ..byteio import RemoteOptions, fetch_whole, is_url, sibling_url, url_name
from ._header import TensorInfo
from ._reader import SafeSlice, safe_open
from ._writer import _check_metadata, _prepare, save_file

__all__ = [
    "INDEX_NAME",
    "WEIGHTS_NAME",
    "Checkpoint",
    "open_checkpoint",
    "parse_size",
    "read_index",
    "save_sharded",
]

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
_SHARD_RE = re.compile(r"(.*?)-\d{5}-of-\d{5}")

_UNITS = {
    "TIB": 2**40,
    "GIB": 2**30,
    "MIB": 2**20,
    "KIB": 2**10,
    "TB": 10**12,
    "GB": 10**9,
    "MB": 10**6,
    "KB": 10**3,
    "B": 1,
}
_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


def parse_size(size: int | str) -> int:
    """Bytes in ``"5GB"`` (5 * 10**9), ``"5GiB"`` (5 * 2**30), ``"500MB"``,
    ``"1.5GB"`` or an int.  As in transformers, a lowercase final ``b`` after a
    decimal prefix (``"5Gb"``) means bits."""
    if isinstance(size, bool):
        raise E.InvalidSize(f"invalid size {size!r}: expected an int or a string like '5GB'")
    if isinstance(size, int):
        if size <= 0:
            raise E.InvalidSize(f"invalid size {size}: expected a positive number of bytes")
        return size
    if not isinstance(size, str):
        raise E.InvalidSize(f"invalid size {size!r}: expected an int or a string like '5GB'")
    m = _SIZE_RE.fullmatch(size)
    unit = m.group(2).upper() if m else None
    if m is None or (unit and unit not in _UNITS):
        raise E.InvalidSize(
            f"invalid size {size!r}: expected a number and a unit among "
            "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
        )
    value = float(m.group(1)) * _UNITS[unit or "B"]
    raw_unit = m.group(2)
    if len(raw_unit) == 2 and raw_unit.endswith("b"):
        value /= 8  # "Gb" = gigabits
    out = int(value)
    if out <= 0:
        raise E.InvalidSize(f"invalid size {size!r}: expected a positive number of bytes")
    return out


def split_shards(sizes: list[tuple[str, int]], limit: int) -> list[list[str]]:
    """Group ``(name, nbytes)`` in order into shards of at most ``limit`` bytes.

    As huggingface_hub does it: a tensor larger than the limit gets a shard of
    its own, and never an empty list (a checkpoint with no tensors has one
    empty shard).
    """
    shards: list[list[str]] = []
    current: list[str] = []
    current_size = 0
    for name, size in sizes:
        if size > limit:
            shards.append([name])
            continue
        if current_size + size > limit:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current or not shards:
        shards.append(current)
    return shards


def shard_names(n: int, stem: str = "model") -> list[str]:
    """``model.safetensors`` for one shard, ``model-0000i-of-0000n.safetensors`` for more."""
    if n == 1:
        return [f"{stem}.safetensors"]
    return [f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def write_index(
    path: str | os.PathLike[str],
    weight_map: Mapping[str, str],
    total_size: int,
    total_parameters: int,
) -> None:
    """Write a transformers-style ``*.safetensors.index.json`` atomically."""
    index = {
        "metadata": {"total_parameters": total_parameters, "total_size": total_size},
        "weight_map": dict(weight_map),
    }
    with atomic_output(path, "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


def save_sharded(
    tensors: Mapping[str, Any],
    folder: str | os.PathLike[str],
    max_shard_size: int | str = "5GB",
    metadata: Mapping[str, str] | None = None,
) -> list[str]:
    """Write ``tensors`` as a transformers-style checkpoint in ``folder``.

    ``metadata`` goes into every shard's header (default ``{"format": "pt"}``,
    what transformers writes and checks).  Returns the file names written.
    Shards of an earlier save that the new one does not use are removed.
    """
    limit = parse_size(max_shard_size)
    if metadata is None:
        metadata = {"format": "pt"}
    _check_metadata(metadata)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    items = _prepare(tensors)  # validates names, dtypes, shared storage
    sizes = {}
    for t in items:
        n = 1
        for d in t.shape:
            n *= d
        sizes[t.name] = (n, n * t.dtype.bits // 8)
    shards = split_shards([(t.name, sizes[t.name][1]) for t in items], limit)
    n = len(shards)
    names = shard_names(n)
    if n > 1:
        _protect_live(folder, set(names))
    for fname, members in zip(names, shards):
        save_file({k: tensors[k] for k in members}, folder / fname, metadata)
    written = list(names)
    if n > 1:
        write_index(
            folder / INDEX_NAME,
            {k: fname for fname, members in zip(names, shards) for k in members},
            total_size=sum(v[1] for v in sizes.values()),
            total_parameters=sum(v[0] for v in sizes.values()),
        )
        written.append(INDEX_NAME)
    _remove_stale(folder, set(names), single=n == 1)
    return written


_BACKUP = ".wsold"


def _protect_live(folder: Path, reused: set[str]) -> None:
    """Step 1 of an atomic sharded save (module docstring): make the live
    index name backups (hard links) instead of the shard names about to be reused."""
    index_path = folder / INDEX_NAME
    try:
        index = read_index(index_path)
    except E.WeightsmithError:
        return  # no (valid) index: nothing reads the old shards through one
    wm = index["weight_map"]
    clash = sorted(set(wm.values()) & reused)
    if not clash:
        return
    backups = {}
    for name in clash:
        backup = f".{name}.{secrets.token_hex(4)}{_BACKUP}"
        try:
            os.link(folder / name, folder / backup)
        except FileNotFoundError:
            continue  # the index already names a missing shard: nothing to keep
        except OSError:  # no hard links here: copy
            shutil.copyfile(folder / name, folder / backup)
        backups[name] = backup
    raw = json.loads(index_path.read_text(encoding="utf-8"))
    raw["weight_map"] = {k: backups.get(v, v) for k, v in raw["weight_map"].items()}
    with atomic_output(index_path, "w") as f:
        f.write(json.dumps(raw, indent=2, sort_keys=True) + "\n")


def _remove_stale(folder: Path, keep: set[str], single: bool) -> None:
    """Delete shards (and a now-wrong index or single file) left by an earlier
    save, backups of a committed save and temp files of dead writers."""
    if single:
        with contextlib.suppress(OSError):
            os.unlink(folder / INDEX_NAME)
    else:  # the commit over a single-file checkpoint: before anything else goes
        with contextlib.suppress(OSError):
            os.unlink(folder / WEIGHTS_NAME)
    for entry in os.scandir(folder):
        name = entry.name
        if name in keep or not entry.is_file():
            continue
        stem = name[: -len(".safetensors")] if name.endswith(".safetensors") else None
        stale = (stem and name.startswith("model-") and _SHARD_RE.fullmatch(stem)) or (
            name.startswith(".") and name.endswith(_BACKUP)
        )
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    # temp files of shard names this save did not write are not covered by
    # atomic_output's own cleanup (it sweeps only the target it wrote)
    for entry in os.scandir(folder):
        name = entry.name
        if name.startswith(".") and name.endswith(_atomic.SUFFIX):
            target = name[1:].rsplit(".", 3)[0]
            _atomic.cleanup_stale(folder / target)


# --------------------------------------------------------------------------- reading


def read_index(path: str | os.PathLike[str], data: bytes | None = None) -> dict[str, Any]:
    """Load and check an index file: ``{"metadata": {...}, "weight_map": {...}}``.

    A tensor mapped twice (even to the same shard) raises DuplicateShardTensor.
    ``data``: the index's bytes, already fetched (``path`` then names it).
    """
    path = os.fspath(path)
    top = read_json(
        path, E.InvalidIndex, "the index", pairs=True, expected="a JSON object", data=data
    )
    if not isinstance(top, Pairs):
        raise E.InvalidIndex("index is not a JSON object", path=path, expected="an object")
    top_d = dict(top)
    wm = top_d.get("weight_map")
    if not isinstance(wm, Pairs):
        raise E.InvalidIndex(
            "index has no weight_map object",
            path=path,
            field="weight_map",
            expected="an object of tensor name -> shard file",
            found=type(wm).__name__ if wm is not None else "none",
        )
    weight_map: dict[str, str] = {}
    for name, shard in wm:
        if name in weight_map:
            raise E.DuplicateShardTensor(
                "tensor listed twice in the index",
                path=path,
                field=f"weight_map[{name!r}]",
                expected="each tensor once",
                found=f"{weight_map[name]!r} and {shard!r}",
            )
        if not isinstance(shard, str) or not shard or os.path.basename(shard) != shard:
            raise E.InvalidIndex(
                "shard must be a file name in the same folder",
                path=path,
                field=f"weight_map[{name!r}]",
                expected="a file name",
                found=repr(shard),
            )
        weight_map[name] = shard
    md = top_d.get("metadata")
    metadata = plain(md) if isinstance(md, Pairs) else md
    return {"metadata": metadata, "weight_map": weight_map}


class Checkpoint:
    """One lazy view over all the shards of a checkpoint.

    Shard headers are read and validated when the checkpoint is opened
    (cheap: two preads each); shard data is mapped only when a tensor of
    that shard is first requested.  Use as a context manager, or ``close()``.
    """

    def __init__(
        self,
        files: list[Path | str],
        *,
        index: dict[str, Any] | None = None,
        index_path: Path | str | None = None,
        framework: str = "np",
        device: str = "cpu",
        mmap: bool = True,
        remote: RemoteOptions | None = None,
    ) -> None:
        self._files = files
        self._index = index
        self._index_path = index_path
        self._opts: dict[str, Any] = {"framework": framework, "device": device, "mmap": mmap}
        self._remote = remote
        if any(is_url(p) for p in files):
            self._opts["remote"] = self._remote = remote or RemoteOptions()
        self._handles: dict[Path | str, safe_open] = {}
        self._where: dict[str, tuple[Path, TensorInfo]] = {}
        self._closed = False
        try:
            self._scan()
        except BaseException:
            self.close()
            raise

    def _remote_headers(self) -> dict[Path | str, Any]:
        """Open every remote shard (header fetches in parallel), keeping the handles."""
        urls = [p for p in self._files if is_url(p)]
        if not urls:
            return {}

        def one(url: str) -> safe_open:
            try:
                return safe_open(url, **self._opts)
            except E.RemoteNotFound:
                if self._index_path is None:
                    raise  # no index names it: a plain 404 (open_checkpoint probes with it)
                raise E.MissingShard(
                    "shard file not found",
                    path=self._index_path or url,
                    field=_name(url),
                    expected="the file to exist",
                    found="HTTP 404",
                ) from None

        jobs = max(1, min(len(urls), self._remote.window if self._remote else 8))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {u: pool.submit(one, u) for u in urls}
        failed = None
        for u, f in futures.items():
            if f.exception() is not None:
                failed = failed or f.exception()
            else:
                self._handles[u] = f.result()
        if failed is not None:
            raise failed
        return {u: h.header for u, h in self._handles.items()}

    def _scan(self) -> None:
        remote_headers = self._remote_headers()
        for p in self._files:
            if isinstance(p, str) and is_url(p):
                continue
            if not p.is_file():
                raise E.MissingShard(
                    "shard file not found",
                    path=self._index_path or p,
                    field=p.name,
                    expected="the file to exist",
                    found="nothing",
                )
        for p in self._files:
            header = remote_headers.get(p)
            if header is None:
                with safe_open(p, mmap=False) as h:
                    header = h.header
            for name, info in header.tensors.items():
                if name in self._where:
                    raise E.DuplicateShardTensor(
                        "tensor present in two shards",
                        path=p,
                        field=f"tensor {name!r}",
                        expected="each tensor in one shard",
                        found=f"{_name(self._where[name][0])} and {_name(p)}",
                    )
                self._where[name] = (p, info)
        if self._index is not None:
            for name, shard in self._index["weight_map"].items():
                got = self._where.get(name)
                if got is None:
                    raise E.InvalidIndex(
                        "tensor listed in the index is missing from its shard",
                        path=self._index_path,
                        field=f"weight_map[{name!r}]",
                        expected=f"tensor in {shard}",
                        found="no such tensor",
                    )
                if _name(got[0]) != shard:
                    raise E.InvalidIndex(
                        "tensor found in another shard than the index says",
                        path=self._index_path,
                        field=f"weight_map[{name!r}]",
                        expected=shard,
                        found=_name(got[0]),
                    )

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        handles, self._handles = self._handles, {}
        for h in handles.values():
            h.close()

    def _check(self) -> None:
        if self._closed:
            raise E.ClosedFileError("checkpoint is closed")

    # ------------------------------------------------------------------ queries
    @property
    def files(self) -> list[Path | str]:
        return list(self._files)

    def keys(self) -> list[str]:
        self._check()
        return sorted(self._where)

    def __contains__(self, name: object) -> bool:
        self._check()
        return name in self._where

    def __len__(self) -> int:
        self._check()
        return len(self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def metadata(self) -> dict[str, Any] | None:
        """The index's metadata (or the single file's header metadata)."""
        self._check()
        if self._index is not None:
            return self._index["metadata"]
        if self._files:
            return self._handle(self._files[0]).metadata()
        return None

    def weight_map(self) -> dict[str, str]:
        self._check()
        return {name: _name(p) for name, (p, _info) in sorted(self._where.items())}

    def info(self, name: str) -> TensorInfo:
        return self._locate(name)[1]

    def _locate(self, name: str) -> tuple[Path | str, TensorInfo]:
        self._check()
        try:
            return self._where[name]
        except KeyError:
            raise E.TensorNotFound(f"checkpoint has no tensor named {name!r}") from None

    def _handle(self, p: Path | str) -> safe_open:
        h = self._handles.get(p)
        if h is None:
            h = self._handles[p] = safe_open(p, **self._opts)
        return h

    def get_tensor(self, name: str) -> Any:
        p, _ = self._locate(name)
        return self._handle(p).get_tensor(name)

    def get_slice(self, name: str) -> SafeSlice:
        p, _ = self._locate(name)
        return self._handle(p).get_slice(name)

    def get_tensors(self) -> dict[str, Any]:
        self._check()
        out: dict[str, Any] = {}
        for p in self._files:
            out.update(self._handle(p).get_tensors())
        return out


def open_checkpoint(
    folder_or_index: str | os.PathLike[str],
    framework: str = "np",
    device: str = "cpu",
    *,
    mmap: bool = True,
    remote: RemoteOptions | None = None,
) -> Checkpoint:
    """Open a checkpoint folder, an index file, or a single .safetensors file.

    A folder is looked up in transformers' order: ``model.safetensors``;
    ``model.safetensors.index.json``; otherwise every ``*.safetensors`` file
    in it.  (The same order as transformers is what makes a save over an
    existing checkpoint atomic for both: see the module docstring.)
    Remote targets (module docstring) take ``remote=`` options.
    """
    if is_url(folder_or_index):
        return _open_remote(str(folder_or_index), framework, device, remote or RemoteOptions())
    p = Path(folder_or_index)
    kw = {"framework": framework, "device": device, "mmap": mmap}
    if p.is_dir():
        if (p / WEIGHTS_NAME).is_file():
            return Checkpoint([p / WEIGHTS_NAME], **kw)
        if (p / INDEX_NAME).is_file():
            p = p / INDEX_NAME
        else:
            indexes = sorted(p.glob("*.safetensors.index.json"))
            if len(indexes) == 1:
                p = indexes[0]
            else:
                files = sorted(x for x in p.glob("*.safetensors") if x.is_file())
                if not files:
                    raise E.MissingShard(
                        "no safetensors file in folder",
                        path=p,
                        expected="model.safetensors or an index",
                        found="none",
                    )
                return Checkpoint(files, **kw)
    if p.name.endswith(".json"):
        index = read_index(p)
        shards = list(dict.fromkeys(index["weight_map"].values()))
        return Checkpoint([p.parent / s for s in shards], index=index, index_path=p, **kw)
    if not p.exists():
        raise E.MissingShard(
            "checkpoint not found", path=p, expected="a file or folder", found="nothing"
        )
    return Checkpoint([p], **kw)


#: a remote index is fetched whole, up to this size
MAX_REMOTE_INDEX = 64 * 1024 * 1024


def _name(p: Path | str) -> str:
    """The file name of a shard path or URL."""
    return url_name(p) if isinstance(p, str) and is_url(p) else Path(p).name


def _open_remote(url: str, framework: str, device: str, options: RemoteOptions) -> Checkpoint:
    kw: dict[str, Any] = {"framework": framework, "device": device, "remote": options}
    name = _name(url)
    if name.endswith(".safetensors"):
        return Checkpoint([url], **kw)
    if not name.endswith(".json"):  # a folder: model.safetensors first, then the index
        folder = url.rstrip("/") + "/"
        try:
            return Checkpoint([sibling_url(folder, WEIGHTS_NAME)], **kw)
        except E.RemoteNotFound:
            url = sibling_url(folder, INDEX_NAME)
    index = read_index(url, data=fetch_whole(url, options, MAX_REMOTE_INDEX))
    shards = list(dict.fromkeys(index["weight_map"].values()))
    return Checkpoint([sibling_url(url, s) for s in shards], index=index, index_path=url, **kw)
