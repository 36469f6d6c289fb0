"""The format-neutral inspection model shared by local and remote ``inspect``.

A :class:`Report` describes one model: the files it is made of, each file's
metadata and tensor table, and the sums the CLI prints (parameters and bytes
per dtype, totals, bits per weight, a tree grouped by layer).  It is built
from headers only -- no tensor data is read -- through a tiny byte-source
protocol, so the same code reads a local file, an HTTP URL or an fsspec URL:

* ``source.name``  -- the path or URL shown to the user;
* ``source.size``  -- the file size in bytes (``None`` until known);
* ``source.prefix(n)`` -- the first ``min(n, size)`` bytes of the file.

Header reading strategy per format:

* safetensors: ``prefix(SPECULATIVE)`` covers the 8-byte length and the JSON
  header of most files in one read; a second read happens only when
  ``8 + N`` is larger.
* GGUF: read a chunk, parse; on :class:`~weightsmith.errors.NeedMoreData`
  grow as :func:`next_gguf_prefix` says (a little past the parser's estimate
  of the header end, within a bounded factor of what was read) and parse again
  (:func:`weightsmith.gguf.parse_gguf_prefix`, which ``gguf.read`` of a URL uses too).

Parsing and validation themselves belong to :mod:`weightsmith.safetensors`
and :mod:`weightsmith.gguf`; this module only adapts their results.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from . import dtypes, gguf, torchfile
from . import safetensors as st
from .byteio import CachedSource
from .convert import MetaCheckpoint, is_meta_dir
from .errors import (
    FormatError,
    InvalidIndex,
    MissingShard,
    SeveralWeightSets,
    UnknownTargetError,
)
from .gguf import parse_gguf_prefix
from .safetensors import SPECULATIVE

__all__ = [
    "SPECULATIVE",
    "CachedSource",
    "FileReport",
    "LayerGroup",
    "Report",
    "TensorEntry",
    "inspect_local",
    "layer_groups",
    "natural_key",
    "read_gguf",
    "read_safetensors",
    "validate_local",
]

#: arrays longer than this are summarised in reports (GGUF token lists ...).
ARRAY_SUMMARY = 16

_SPLIT_RE = re.compile(r"^(?P<base>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


class Source(Protocol):
    name: str
    size: int | None

    def prefix(self, n: int) -> bytes: ...


# --------------------------------------------------------------------------- model


@dataclass(slots=True)
class TensorEntry:
    """One tensor as listed by a header."""

    name: str
    dtype: str  # safetensors code ("BF16") or ggml type name ("Q4_K")
    shape: tuple[int, ...]
    n_elements: int
    nbytes: int
    offset: int | None  # absolute byte offset of the data in its file (None: in a pickle)
    file: str

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.n_elements if self.n_elements else 0.0


@dataclass
class FileReport:
    """One file of a model: where it is, its metadata and its tensors."""

    path: str
    format: str  # "safetensors" | "gguf" | "pytorch"
    size: int | None
    header_size: int | None
    metadata: dict[str, Any]
    tensors: list[TensorEntry]
    requests: int = 0
    bytes_fetched: int = 0


@dataclass
class LayerGroup:
    """Tensors that share a layer prefix such as ``model.layers.3`` or ``blk.3``."""

    name: str
    tensors: list[TensorEntry]

    @property
    def parameters(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def signature(self) -> tuple:
        """What makes two layers 'the same' (names relative to the group)."""
        cut = len(self.name) + 1
        return tuple((t.name[cut:], t.shape, t.dtype) for t in self.tensors)


@dataclass
class Report:
    """Everything ``inspect`` knows about one target."""

    target: str
    format: str
    files: list[FileReport]
    index_metadata: dict[str, Any] | None = None
    remote: bool = False
    notes: list[str] = field(default_factory=list)
    # a model whose files each hold part of every tensor (Meta's model-parallel shards):
    # the whole tensors, which the totals count instead of the files' pieces
    merged: list[TensorEntry] | None = None
    #: files in the folder that the index does not name (not counted)
    stray_files: list[str] = field(default_factory=list)

    @property
    def tensors(self) -> list[TensorEntry]:
        if self.merged is not None:
            return self.merged
        return [t for f in self.files for t in f.tensors]

    @property
    def requests(self) -> int:
        return sum(f.requests for f in self.files)

    @property
    def bytes_fetched(self) -> int:
        return sum(f.bytes_fetched for f in self.files)

    def counts_by_dtype(self) -> dict[str, dict[str, int]]:
        """``{dtype: {"tensors", "parameters", "bytes"}}``, largest first."""
        out: dict[str, dict[str, int]] = {}
        for t in self.tensors:
            row = out.setdefault(t.dtype, {"tensors": 0, "parameters": 0, "bytes": 0})
            row["tensors"] += 1
            row["parameters"] += t.n_elements
            row["bytes"] += t.nbytes
        return dict(sorted(out.items(), key=lambda kv: (-kv[1]["parameters"], kv[0])))

    @property
    def parameter_count(self) -> dict[str, int]:
        """Parameters per dtype, like huggingface_hub's ``parameter_count``."""
        return {k: v["parameters"] for k, v in self.counts_by_dtype().items()}

    @property
    def total_parameters(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def bits_per_weight(self) -> float:
        n = self.total_parameters
        return 8.0 * self.total_bytes / n if n else 0.0

    def to_dict(self, tensors: bool = True, pattern: str | None = None) -> dict[str, Any]:
        """The documented JSON form (docs/cli-json-schema.json)."""
        return _report_dict(self, tensors, pattern)


# --------------------------------------------------------------------------- helpers


def natural_key(name: str) -> tuple:
    """Sort key that puts ``layers.2`` before ``layers.10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


_GROUP_RE = re.compile(r"^((?:[^.]+\.)*?\d+)\.")


def layer_of(name: str) -> str | None:
    """The layer prefix of a tensor name: up to its first numeric component."""
    m = _GROUP_RE.match(name)
    return m.group(1) if m else None


def layer_groups(tensors: Iterable[TensorEntry]) -> list[LayerGroup | TensorEntry]:
    """Tensors in natural order, with each layer's tensors gathered in a group.

    Top-level tensors (``model.embed_tokens.weight``) stay single entries; a
    group sits where its first tensor would be in natural order.
    """
    items: list[LayerGroup | TensorEntry] = []
    groups: dict[str, LayerGroup] = {}
    for t in sorted(tensors, key=lambda t: natural_key(t.name)):
        key = layer_of(t.name)
        if key is None:
            items.append(t)
        elif key in groups:
            groups[key].tensors.append(t)
        else:
            groups[key] = LayerGroup(key, [t])
            items.append(groups[key])
    return items


def filter_tensors(tensors: Iterable[TensorEntry], pattern: str | None) -> list[TensorEntry]:
    """Tensors whose name matches a glob (``*`` ``?`` ``[``), else contains ``pattern``."""
    tensors = list(tensors)
    if not pattern:
        return tensors
    if any(c in pattern for c in "*?["):
        return [t for t in tensors if fnmatch.fnmatchcase(t.name, pattern)]
    return [t for t in tensors if pattern in t.name]


def summarize_value(value: Any) -> Any:
    """A JSON-friendly value, with long arrays cut to a head and a length."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        if len(value) > ARRAY_SUMMARY:
            head = [summarize_value(v) for v in value[:8]]
            kind = type(value[0]).__name__ if value else "none"
            return {"array_length": len(value), "element_type": kind, "head": head}
        return [summarize_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): summarize_value(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    # gguf summaries and enums from other modules: keep something readable
    for attr in ("to_dict", "_asdict"):
        if hasattr(value, attr):
            return summarize_value(getattr(value, attr)())
    if hasattr(value, "value"):
        return summarize_value(value.value)
    return str(value)


# --------------------------------------------------------------------------- sources


class LocalSource(CachedSource):
    """A local file as a byte source (reads are counted like requests)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        super().__init__(os.fspath(path), self.path.stat().st_size)

    def read_range(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)


# --------------------------------------------------------------------------- readers


def read_safetensors(src: Source) -> FileReport:
    """Header of one safetensors file: one read, two if the header is large."""
    buf = src.prefix(SPECULATIVE)
    size = src.size if src.size is not None else len(buf)
    n = st.read_header_size(buf[:8], size, src.name)
    if 8 + n > len(buf):
        buf = src.prefix(8 + n)
    # a view, not a copy: a big header is held once, beside its tables
    header = st.parse_header(memoryview(buf)[8 : 8 + n], size, src.name)
    start = int(header.data_start)
    name = src.name
    tensors = [
        TensorEntry(
            info.name,
            info.dtype.name,
            tuple(info.shape),
            info.n_elements,
            info.nbytes,
            start + info.data_offsets[0],
            name,
        )
        for info in header.tensors.values()
    ]
    return FileReport(
        path=src.name,
        format="safetensors",
        size=size,
        header_size=n,
        metadata=dict(header.metadata or {}),
        tensors=tensors,
        requests=getattr(src, "requests", 0),
        bytes_fetched=getattr(src, "bytes_fetched", 0),
    )


def _gguf_tensor(t: Any, path: str) -> TensorEntry:
    # weightsmith.gguf.TensorInfo: numpy-order shape, absolute offset
    return TensorEntry(
        name=t.name,
        dtype=dtypes.ggml_type(t.ggml_type).name,
        shape=tuple(int(s) for s in t.shape),
        n_elements=int(t.n_elements),
        nbytes=int(t.nbytes),
        offset=int(t.offset),
        file=path,
    )


def gguf_metadata(header: Any) -> dict[str, Any]:
    """GGUF KV pairs with long arrays summarised without converting them."""
    out: dict[str, Any] = {}
    for key, kv in header.kvs.items():
        if kv.type.type.name == "ARRAY" and len(kv.raw) > ARRAY_SUMMARY:
            arr = header.array(key)
            out[key] = {
                "array_length": len(arr),
                "element_type": str(kv.type.element),
                "head": [summarize_value(arr[i]) for i in range(8)],
            }
        else:
            out[key] = summarize_value(header.metadata[key])
    return out


def read_gguf(src: Source) -> FileReport:
    """Header (KV metadata and tensor infos) of one GGUF file."""
    header, _ = parse_gguf_prefix(src)
    return FileReport(
        path=src.name,
        format="gguf",
        size=src.size,
        header_size=int(header.data_start),
        metadata=gguf_metadata(header),
        tensors=[_gguf_tensor(t, src.name) for t in header.tensors],
        requests=getattr(src, "requests", 0),
        bytes_fetched=getattr(src, "bytes_fetched", 0),
    )


def read_pytorch(path: Path) -> FileReport:
    """Tensor infos of a ``.pth``/``.bin`` file through the pickle reader (never executed)."""
    infos: list[TensorEntry] = []
    with torchfile.open(path) as ck:
        for name, info in ck.tensors.items():
            dt = info.safetensors_dtype or info.torch_dtype
            infos.append(
                TensorEntry(
                    name, dt, tuple(info.shape), int(info.numel), int(info.nbytes), None, str(path)
                )
            )
        meta = dict(ck.metadata_strings())
    return FileReport(str(path), "pytorch", path.stat().st_size, None, meta, infos)


# --------------------------------------------------------------------------- local targets


def split_siblings(name: str) -> list[str] | None:
    """All shard names of a split GGUF set, from one shard's name, or None."""
    base = os.path.basename(name)
    m = _SPLIT_RE.match(base)
    if not m:
        return None
    n = int(m.group("n"))
    prefix = name[: len(name) - len(base)]
    return [f"{prefix}{m.group('base')}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]


def parse_index(data: bytes, path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``(metadata, weight_map)`` of a ``*.index.json`` shard index."""
    try:
        obj = json.loads(data)
    # ValueError: bad JSON or UTF-8, or an integer past int()'s digit limit
    except ValueError as e:
        raise InvalidIndex("not valid JSON", path=path, found=str(e)) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("weight_map"), dict):
        raise InvalidIndex(
            "", path=path, field="weight_map", expected="an object", found=type(obj).__name__
        )
    wm = obj["weight_map"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise InvalidIndex("", path=path, field="weight_map", expected="str -> str", found="other")
    for v in set(wm.values()):
        # shards live beside the index; a path could escape the folder or the repo
        parts = v.replace("\\", "/").split("/")
        if v.startswith("/") or ".." in parts:
            raise InvalidIndex("", path=path, field="weight_map", expected="a file name", found=v)
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return meta, wm


def _shard_order(weight_map: dict[str, str]) -> list[str]:
    return sorted(set(weight_map.values()), key=natural_key)


_SHARD_NAME_RE = re.compile(r"^(?P<base>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.safetensors$")


def weight_sets(files: Iterable[Path]) -> list[list[Path]]:
    """safetensors files grouped into weight sets: one per shard series
    (``X-0000i-of-0000N``), one per other file; in natural order."""
    sets: dict[tuple[str, str], list[Path]] = {}
    for p in sorted(files, key=lambda p: natural_key(p.name)):
        m = _SHARD_NAME_RE.match(p.name)
        key = (m.group("base"), m.group("n")) if m else (p.name, "")
        sets.setdefault(key, []).append(p)
    return list(sets.values())


def _several_sets(folder: Path, sets: list[list[str]]) -> SeveralWeightSets:
    def label(names: list[str]) -> str:
        return names[0] if len(names) == 1 else f"{names[0]} ... ({len(names)} files)"

    return SeveralWeightSets(
        "two weight sets in one folder (never summed): remove one, or name the file or index",
        path=str(folder),
        expected="one model.safetensors, or the shards of one index",
        found=" and ".join(label(s) for s in sets),
    )


def _safetensors_folder(folder: Path, index: Path | None) -> tuple[str, Any, list[str]]:
    """(kind, index or files, stray names) of a folder's safetensors weights.

    With an index, the model is what the index names; other shard files are
    stray (reported, not counted) -- but a ``model.safetensors`` beside an index
    is a second model (transformers would load it instead), an error.  Without
    an index, one weight set is the model and two are an error.
    """
    found = [p for p in folder.glob("*.safetensors") if p.is_file()]
    if index is not None:
        _, wm = parse_index(index.read_bytes(), str(index))
        named = set(wm.values())
        stray = sorted((p.name for p in found if p.name not in named), key=natural_key)
        if "model.safetensors" in stray:
            raise _several_sets(folder, [["model.safetensors"], [index.name]])
        return "index", index, stray
    sets = weight_sets(found)
    if len(sets) > 1:
        raise _several_sets(folder, [[p.name for p in s] for s in sets])
    return "safetensors", sets[0], []


def _folder_files(folder: Path) -> tuple[str, Any, list[str]]:
    """(kind, index path or files, stray file names) of a model folder."""
    index = folder / "model.safetensors.index.json"
    if index.is_file() or any(folder.glob("*.safetensors")):
        return _safetensors_folder(folder, index if index.is_file() else None)
    gg = sorted(folder.glob("*.gguf"), key=lambda p: natural_key(p.name))
    if gg:
        # one model per folder: a single file or one split set, never a mix of quantizations
        models = {tuple(split_siblings(str(p)) or [str(p)]) for p in gg}
        if len(models) > 1:
            names = ", ".join(sorted(os.path.basename(m[0]) for m in models))
            raise UnknownTargetError(f"{folder}: several GGUF models here ({names}); name one file")
        return "gguf", [Path(x) for x in next(iter(models))], []
    for idx in folder.glob("*.bin.index.json"):
        return "index", idx, []
    pt = sorted([*folder.glob("*.bin"), *folder.glob("*.pth"), *folder.glob("*.pt")])
    if pt:
        return "pytorch", pt, []
    raise UnknownTargetError(f"{folder}: no .safetensors, .gguf, .bin or .pth file in this folder")


def read_local_file(path: Path) -> FileReport:
    """One local file, by extension (or magic bytes when the name says nothing)."""
    name = path.name.lower()
    if name.endswith(".safetensors"):
        return read_safetensors(LocalSource(path))
    if name.endswith(".gguf"):
        return read_gguf(LocalSource(path))
    if name.endswith((".pth", ".pt", ".bin", ".ckpt")):
        return read_pytorch(path)
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic[:4] == b"GGUF":
        return read_gguf(LocalSource(path))
    if magic[:2] == b"PK" or magic[:1] == b"\x80":
        return read_pytorch(path)
    return read_safetensors(LocalSource(path))


def inspect_local(target: str | os.PathLike[str]) -> Report:
    """A :class:`Report` for a local file, index, split GGUF shard or model folder."""
    path = Path(target)
    if not path.exists():
        raise UnknownTargetError(f"{path}: no such file or folder")
    if path.is_dir() and is_meta_dir(path):
        return _inspect_meta(path, str(target))
    if path.is_dir():
        kind, found, stray = _folder_files(path)
        if kind == "index":
            report = _inspect_local_index(Path(found), str(target))
        else:
            report = Report(str(target), kind, [read_local_file(p) for p in found])
        report.stray_files = stray
        return report
    if path.name.endswith(".index.json"):
        return _inspect_local_index(path, str(target))
    siblings = split_siblings(str(path))
    if siblings:
        missing = [s for s in siblings if not os.path.exists(s)]
        if missing:
            raise FormatError(
                "split GGUF set is incomplete",
                path=str(path),
                field="split",
                found=f"missing {missing}",
            )
        return Report(str(target), "gguf", [read_gguf(LocalSource(s)) for s in siblings])
    fr = read_local_file(path)
    return Report(str(target), fr.format, [fr])


def validate_local(target: str | os.PathLike[str]) -> tuple[Report, int]:
    """Strict check of a local file or folder; returns its report and tensor count.

    Every header is parsed with full validation (:func:`inspect_local`), then
    every file is opened as its reader opens it: safetensors through
    ``safe_open`` / ``open_checkpoint`` (data coverage against the file size),
    GGUF through :func:`weightsmith.gguf.read`, PyTorch through the pickle
    scanner.  Raises the error of the first rule broken.
    """
    path = Path(target)
    report = inspect_local(path)
    n = len(report.tensors)
    if report.format == "safetensors":
        sharded = path.is_dir() or path.name.endswith(".index.json")
        opener = st.open_checkpoint if sharded else st.safe_open
        with opener(path, framework="np") as f:
            n = len(list(f.keys()))
    elif report.format == "gguf":
        for fr in report.files:
            gguf.read(fr.path).close()
    elif report.format == "pytorch":
        for fr in report.files:
            torchfile.scan(fr.path)
    return report, n


def _inspect_meta(folder: Path, target: str) -> Report:
    """Meta's original layout: every shard listed, the merged tensors counted once."""
    with MetaCheckpoint(folder) as ck:
        merged = [
            TensorEntry(
                t.meta_name,
                dtypes.from_numpy(t.dtype).name,
                t.shape,
                math.prod(t.shape),
                math.prod(t.shape) * t.dtype.itemsize,
                None,
                str(folder),
            )
            for t in ck.tensors
        ]
        files = [read_pytorch(p) for p in ck.shard_paths]
        note = (
            f"Meta original checkpoint, Llama {ck.generation}: {len(files)} model-parallel "
            "shard(s) merged; tensors and totals are the whole model's"
        )
    return Report(target, "meta", files, notes=[note], merged=merged)


def _inspect_local_index(index: Path, target: str) -> Report:
    meta, wm = parse_index(index.read_bytes(), str(index))
    files = []
    for shard in _shard_order(wm):
        p = index.parent / shard
        if not p.is_file():
            raise MissingShard(
                "", path=str(index), field=shard, expected="a shard file", found="none"
            )
        files.append(read_local_file(p))
    fmt = files[0].format if files else "safetensors"
    return Report(target, fmt, files, index_metadata=meta)


# --------------------------------------------------------------------------- JSON


SCHEMA_VERSION = 1


def _tensor_dict(t: TensorEntry) -> dict[str, Any]:
    return {
        "name": t.name,
        "dtype": t.dtype,
        "shape": list(t.shape),
        "parameters": t.n_elements,
        "bytes": t.nbytes,
        "offset": t.offset,
        "file": t.file,
    }


def _report_dict(r: Report, tensors: bool, pattern: str | None) -> dict[str, Any]:
    groups = []
    for item in layer_groups(r.tensors):
        if isinstance(item, LayerGroup):
            groups.append(
                {
                    "name": item.name,
                    "tensors": len(item.tensors),
                    "parameters": item.parameters,
                    "bytes": item.nbytes,
                }
            )
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "target": r.target,
        "format": r.format,
        "files": [
            {
                "path": f.path,
                "format": f.format,
                "size": f.size,
                "header_size": f.header_size,
                "tensors": len(f.tensors),
                "metadata": summarize_value(f.metadata),
            }
            for f in r.files
        ],
        "index_metadata": summarize_value(r.index_metadata)
        if r.index_metadata is not None
        else None,
        "dtypes": r.counts_by_dtype(),
        "totals": {
            "tensors": len(r.tensors),
            "parameters": r.total_parameters,
            "bytes": r.total_bytes,
            "bits_per_weight": round(r.bits_per_weight, 6),
        },
        "layers": groups,
        "remote": {"requests": r.requests, "bytes_fetched": r.bytes_fetched} if r.remote else None,
        "notes": list(r.notes),
        "stray_files": list(r.stray_files),
    }
    if tensors:
        out["tensors"] = [
            _tensor_dict(t)
            for t in sorted(filter_tensors(r.tensors, pattern), key=lambda t: natural_key(t.name))
        ]
    return out
