"""Opening PyTorch checkpoints: layout detection, flattening, storage sharing.

A checkpoint is presented as a read-only mapping ``name -> numpy array``.
Arrays are built on first access, as views of an mmap of the file where the
layout allows (uncompressed zip records, legacy storages, native byte order).

Flattening: dicts and lists/tuples nest; their keys/indices are joined with
``.`` (``{"model": {"fc": {"weight": t}}}`` -> ``model.fc.weight``).  A
checkpoint that is a single tensor is named ``tensor``.  Leaves that are not
tensors (ints, strings, the optimizer step, a flat list of numbers) are kept
in :attr:`TorchCheckpoint.non_tensors`, never dropped; attributes that BUILD
set on an ``OrderedDict`` (``nn.Module``'s ``_metadata``) in ``dict_state``.

Sharing: tensors that are the *same* view of one storage (tied weights) are
listed in :attr:`aliases` (later name -> first name); other tensors whose
views share a storage are grouped in :attr:`shared`.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors
from ..dtypes import torch_dtype
from . import _pickle
from ._legacy import LegacyLayout
from ._pickle import StateDict, TensorRef
from ._rebuild import check_bounds, numpy_dtype, typed_storage, view
from ._zip import ZipLayout, is_zip

ROOT_TENSOR_NAME = "tensor"


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives: its storage, offset, shape and strides (in elements)."""

    name: str
    dtype: np.dtype
    torch_dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage: str  # root storage key
    offset: int  # element offset into the root storage
    parameter: bool

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def safetensors_dtype(self) -> str | None:
        entry = torch_dtype(self.torch_dtype)[1]
        return entry.name if entry is not None else None

    def signature(self) -> tuple:
        item = self.dtype.itemsize
        return (
            self.storage,
            self.offset * item,
            self.shape,
            tuple(s * item for s in self.stride),
            self.torch_dtype,
        )

    def byte_range(self) -> tuple[int, int]:
        """[first, last] byte of the storage the view touches (empty: (0, -1))."""
        if self.numel == 0:
            return (0, -1)
        item = self.dtype.itemsize
        last = self.offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride))
        return (self.offset * item, last * item + item - 1)


def _join(prefix: str, key: Any) -> str:
    if isinstance(key, bytes):
        key = key.decode("latin-1")
    k = key if isinstance(key, str) else str(key)
    return f"{prefix}.{k}" if prefix else k


def _is_leaf_sequence(v: Any) -> bool:
    """A list/tuple of plain scalars is one leaf (Adam's betas), not many."""
    return all(isinstance(x, (int, float, str, bool, bytes, type(None), complex)) for x in v)


def flatten(
    root: Any, path: Any, limit: int = 1 << 24
) -> tuple[dict[str, TensorRef], dict[str, Any], dict[str, dict]]:
    """Dotted names for every tensor and non-tensor leaf; iterative (no recursion).

    A container reachable twice is flattened under both names (as torch.load
    would return it twice); ``limit`` caps the entries visited so that a
    pickle of shared containers cannot make the walk exponential.
    """
    tensors: dict[str, TensorRef] = {}
    others: dict[str, Any] = {}
    state: dict[str, dict] = {}
    stack: list[tuple[str, Any]] = [("", root)]
    visited = 0
    while stack:
        name, v = stack.pop()
        visited += 1
        if visited > limit:
            raise errors.PickleTooDeep(
                "shared containers expand to too many entries",
                path=path,
                field=name,
                expected=f"at most {limit}",
                found="more",
            )
        if isinstance(v, TensorRef):
            target, value = tensors, v
            name = name or ROOT_TENSOR_NAME
        elif isinstance(v, dict) and v:
            if isinstance(v, StateDict) and v.attrs:
                state[name] = dict(v.attrs)
            stack.extend(reversed([(_join(name, k), x) for k, x in v.items()]))
            continue
        elif isinstance(v, (list, tuple)) and v and not _is_leaf_sequence(v):
            stack.extend(reversed([(_join(name, i), x) for i, x in enumerate(v)]))
            continue
        else:
            if isinstance(v, StateDict) and v.attrs:
                state[name] = dict(v.attrs)
            target, value = others, v
        if name in tensors or name in others:
            raise errors.FlatNameCollision(
                "two entries flatten to one name",
                path=path,
                field=name,
                expected="unique dotted names",
                found="a duplicate",
            )
        target[name] = value
    return tensors, others, state


def describe(value: Any) -> str:
    """A non-tensor leaf as a metadata string."""
    if isinstance(value, str):
        return value
    if isinstance(value, _pickle.Global):
        return repr(value)
    if isinstance(value, (bool, int, float, type(None))):
        return json.dumps(value)
    return repr(value)


class _Base(Mapping):
    """What single-file and sharded checkpoints share."""

    path: str
    tensors: dict[str, TensorInfo]
    non_tensors: dict[str, Any]
    dict_state: dict[str, dict]
    aliases: dict[str, str]
    shared: list[list[str]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def metadata_strings(self) -> dict[str, str]:
        """Non-tensor leaves as ``name -> str``, for a safetensors ``__metadata__``."""
        return {k: describe(v) for k, v in self.non_tensors.items()}

    def __enter__(self) -> _Base:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        pass


class TorchCheckpoint(_Base):
    """One ``.pth`` / ``.pt`` / ``.bin`` file (zip or legacy layout)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fh = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        try:
            self._open()
        except BaseException:
            self._fh.close()
            raise

    def _open(self) -> None:
        size = os.fstat(self._fh.fileno()).st_size
        if size == 0:
            raise errors.NotATorchFile(
                "empty file", path=self.path, expected="a checkpoint", found="0 bytes"
            )
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        head = self._mm[:512]
        if is_zip(head):
            self._layout: ZipLayout | LegacyLayout = ZipLayout(self.path, self._mm, self._fh)
            data = self._layout.pickle_bytes()
            result = _pickle.load(data, path=self.path, member=self._layout.member)
        else:
            if head[:1] != b"\x80":
                raise errors.NotATorchFile(
                    "not a PyTorch checkpoint",
                    path=self.path,
                    offset=0,
                    expected="a zip archive or a pickle",
                    found=head[:8],
                )
            self._layout = LegacyLayout(self.path, self._mm)
            result = self._layout.load_main()
        self.layout = self._layout.layout
        self.byteorder = self._layout.byteorder
        limit = _pickle.expansion_limit(result)
        refs, self.non_tensors, self.dict_state = flatten(result.value, self.path, limit)
        self._storages = self._check_storages(result.storages)
        self.tensors = {name: self._info(name, t) for name, t in refs.items()}
        self.aliases, self.shared = _sharing(self.tensors)
        self._typed: dict[tuple[str, str], np.ndarray] = {}

    # ------------------------------------------------------------------ storages
    def _check_storages(self, refs: list[_pickle.StorageRef]) -> dict[str, tuple[str, int]]:
        """Root key -> (storage type, bytes); checks every use agrees and records fit."""
        seen: dict[str, tuple[str, int]] = {}
        for ref in refs:
            item = (
                1
                if ref.type_name == "UntypedStorage"
                else numpy_dtype(ref.torch_dtype, path=self.path, field=ref.type_name).itemsize
            )
            nbytes = ref.numel * item
            old = seen.setdefault(ref.key, (ref.type_name, nbytes))
            if old != (ref.type_name, nbytes):
                raise errors.StorageDtypeMismatch(
                    "storage used with two types or sizes",
                    path=self.path,
                    field=f"storage {ref.key}",
                    offset=ref.offset,
                    expected=f"{old[0]} of {old[1]} bytes",
                    found=f"{ref.type_name} of {nbytes} bytes",
                )
        for key, (_, nbytes) in seen.items():
            have = self._record_size(key)
            if have != nbytes:
                raise errors.StorageSizeMismatch(
                    "storage record size differs from its persistent id",
                    path=self.path,
                    field=f"storage {key}",
                    expected=f"{nbytes} bytes",
                    found=f"{have} bytes",
                )
        return seen

    def _record_size(self, key: str) -> int:
        if isinstance(self._layout, ZipLayout):
            self._layout.storage_span(key)  # validates the local header when stored
            return self._layout._info(f"data/{key}", "storage record").file_size
        return self._layout.storage_span(key)[1]

    def _info(self, name: str, t: TensorRef) -> TensorInfo:
        dtype = numpy_dtype(t.dtype, path=self.path, field=name)
        item = dtype.itemsize
        root_bytes = self._storages[t.storage.key][1]
        offset, limit = t.offset, root_bytes // item
        if t.storage.view is not None:  # legacy storage view: a slice of the root storage
            _, v_off, v_numel = t.storage.view
            s_item = numpy_dtype(t.storage.torch_dtype, path=self.path, field=name).itemsize
            if (v_off + v_numel) * s_item > root_bytes or (v_off * s_item) % item:
                raise errors.StorageOutOfBounds(
                    "storage view outside its root storage",
                    path=self.path,
                    field=name,
                    expected=f"<= {root_bytes} bytes",
                    found=f"offset {v_off}, numel {v_numel}",
                )
            offset += v_off * s_item // item
            limit = (v_off + v_numel) * s_item // item
        if root_bytes % item:
            raise errors.StorageSizeMismatch(
                "storage is not a whole number of elements",
                path=self.path,
                field=name,
                expected=f"a multiple of {item}",
                found=root_bytes,
            )
        rebased = TensorRef(t.storage, offset, t.size, t.stride, t.dtype)
        check_bounds(rebased, limit, path=self.path, name=name)
        return TensorInfo(
            name, dtype, t.dtype, t.size, t.stride, t.storage.key, offset, t.parameter
        )

    def _storage(self, info: TensorInfo) -> np.ndarray:
        key = (info.storage, info.torch_dtype)
        arr = self._typed.get(key)
        if arr is None:
            raw = self._layout.storage_raw(info.storage)
            arr = typed_storage(
                raw, info.dtype, self.byteorder, path=self.path, field=f"storage {info.storage}"
            )
            self._typed[key] = arr
        return arr

    # ------------------------------------------------------------------ mapping
    def __getitem__(self, name: str) -> np.ndarray:
        info = self.tensors.get(name)
        if info is None:
            raise errors.TensorNotFound(f"{self.path}: no tensor named {name!r}")
        t = TensorRef(None, info.offset, info.shape, info.stride, info.torch_dtype)  # type: ignore[arg-type]
        return view(self._storage(info), t, path=self.path, name=name)

    def release(self, name: str) -> None:
        """Let the OS drop the pages of ``name``'s storage from this process (RSS).

        Arrays already handed out stay valid: the pages fault back in from the file.
        """
        info = self.tensors.get(name)
        if info is None:
            return
        for key in [k for k in self._typed if k[0] == info.storage]:
            del self._typed[key]
        span = self._layout.storage_span(info.storage)
        if span is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        start, n = span
        page = mmap.PAGESIZE
        lo, hi = start - start % page, start + n
        with contextlib.suppress(OSError, ValueError):
            self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def close(self) -> None:
        self._typed = {}
        with contextlib.suppress(AttributeError):
            self._layout.close()
        with contextlib.suppress(AttributeError, BufferError):
            self._mm.close()  # BufferError: arrays still use it; they keep it alive
        self._fh.close()


def _sharing(tensors: dict[str, TensorInfo]) -> tuple[dict[str, str], list[list[str]]]:
    """Aliases (identical views) and groups of distinct views that overlap in one storage."""
    aliases: dict[str, str] = {}
    first: dict[tuple, str] = {}
    by_storage: dict[str, list[TensorInfo]] = {}
    for name, info in tensors.items():
        if info.numel == 0:
            continue
        sig = info.signature()
        if sig in first:
            aliases[name] = first[sig]
            continue
        first[sig] = name
        by_storage.setdefault(info.storage, []).append(info)
    shared = []
    for infos in by_storage.values():
        if len(infos) < 2:
            continue
        # union of overlapping byte ranges, in order of first byte
        infos = sorted(infos, key=lambda i: i.byte_range())
        group, hi = [infos[0].name], infos[0].byte_range()[1]
        for info in infos[1:]:
            lo2, hi2 = info.byte_range()
            if lo2 <= hi:
                group.append(info.name)
                hi = max(hi, hi2)
            else:
                if len(group) > 1:
                    shared.append(group)
                group, hi = [info.name], hi2
        if len(group) > 1:
            shared.append(group)
    return aliases, shared


class ShardedCheckpoint(_Base):
    """transformers-style ``pytorch_model-0000i-of-0000n.bin`` shards with their index."""

    layout = "sharded"

    def __init__(self, index_path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(index_path)
        try:
            index = json.loads(Path(self.path).read_text(encoding="utf-8"))
        # ValueError: bad JSON or UTF-8, or an integer past int()'s digit limit
        except (OSError, ValueError) as e:
            raise errors.InvalidIndex(
                "unreadable index", path=self.path, expected="JSON", found=str(e)[:80]
            ) from None
        wmap = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wmap, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()
        ):
            raise errors.InvalidIndex(
                "no weight_map of str -> str",
                path=self.path,
                field="weight_map",
                expected="object",
                found=type(wmap).__name__,
            )
        self.index_metadata = index.get("metadata") or {}
        folder = Path(self.path).parent
        files: dict[str, list[str]] = {}
        for name, fname in wmap.items():
            if "/" in fname or "\\" in fname or fname in ("", ".", ".."):
                raise errors.InvalidIndex(
                    "shard name is not a plain file name",
                    path=self.path,
                    field=name,
                    expected="a file name",
                    found=fname,
                )
            files.setdefault(fname, []).append(name)
        self.shards: dict[str, TorchCheckpoint] = {}
        self.tensors, self.non_tensors, self.dict_state = {}, {}, {}
        self.aliases, self.shared = {}, []
        self._where: dict[str, TorchCheckpoint] = {}
        try:
            for fname, names in files.items():
                self._add_shard(folder, fname, names)
        except BaseException:
            self.close()
            raise

    def _add_shard(self, folder: Path, fname: str, names: list[str]) -> None:
        p = folder / fname
        if not p.is_file():
            raise errors.MissingShard(
                "shard listed in the index is missing",
                path=self.path,
                field=fname,
                expected="a file",
                found="none",
            )
        ck = TorchCheckpoint(p)
        self.shards[fname] = ck
        if set(ck.tensors) != set(names):
            extra = sorted(set(ck.tensors) - set(names))[:3]
            missing = sorted(set(names) - set(ck.tensors))[:3]
            raise errors.ShardTensorMismatch(
                "shard does not hold the tensors the index assigns to it",
                path=self.path,
                field=fname,
                expected=f"index names (missing {missing})",
                found=f"extra {extra}",
            )
        for name in ck.tensors:
            if name in self.tensors:
                raise errors.DuplicateShardTensor(
                    "tensor in two shards",
                    path=self.path,
                    field=name,
                    expected="one shard",
                    found=fname,
                )
            self.tensors[name] = ck.tensors[name]
            self._where[name] = ck
        self.non_tensors.update({f"{fname}:{k}": v for k, v in ck.non_tensors.items()})
        self.dict_state.update({f"{fname}:{k}": v for k, v in ck.dict_state.items()})
        self.aliases.update(ck.aliases)
        self.shared.extend(ck.shared)

    def __getitem__(self, name: str) -> np.ndarray:
        ck = self._where.get(name)
        if ck is None:
            raise errors.TensorNotFound(f"{self.path}: no tensor named {name!r}")
        return ck[name]

    def release(self, name: str) -> None:
        ck = self._where.get(name)
        if ck is not None:
            ck.release(name)

    def close(self) -> None:
        for ck in self.shards.values():
            ck.close()


def open_checkpoint(path: str | os.PathLike[str]) -> TorchCheckpoint | ShardedCheckpoint:
    """Open a checkpoint file, a shard index (``*.index.json``) or a folder holding one."""
    p = Path(path)
    if p.is_dir():
        indexes = sorted(p.glob("*.index.json"))
        if len(indexes) == 1:
            return ShardedCheckpoint(indexes[0])
        singles = [q for q in sorted(p.iterdir()) if q.suffix in (".bin", ".pt", ".pth", ".ckpt")]
        if not indexes and len(singles) == 1:
            return TorchCheckpoint(singles[0])
        raise errors.NotATorchFile(
            "folder does not hold exactly one checkpoint or one index",
            path=p,
            expected="one",
            found=f"{len(indexes)} indexes, {len(singles)} files",
        )
    if p.name.endswith(".index.json"):
        return ShardedCheckpoint(p)
    return TorchCheckpoint(p)
