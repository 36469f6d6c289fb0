"""Whole GGUF files and their tensors: quantize a file to a llama-quantize file type
(what ``llama-quantize`` does), and dequantize any tensor of an open file.

Sits above :mod:`weightsmith.gguf` (which reads and writes the bytes and knows
nothing of the codecs) and uses the codecs of :mod:`weightsmith.quant`.

* the per-tensor types come from :func:`weightsmith.quant.recipes.plan`
  (llama.cpp's ``llama-quant.cpp`` rules for a file type such as Q4_K_M);
* the blocks from :func:`weightsmith.quant.quantize` (bit-exact with ggml);
* the file from :class:`weightsmith.gguf.Writer`.

What the output holds, as llama-quantize writes it: every KV of the input
(minus ``split.*``), then ``general.quantization_version`` = 2 and
``general.file_type`` moved to the end, then the ``quantize.imatrix.*`` keys
when an importance matrix was given; tensors in llama.cpp's loader order (by
layer number, then name); a tensor whose
planned type is its current type is copied byte for byte; other tensors
must be F32, F16 or BF16 (no requantizing of quantized data).

Importance matrices are read by :mod:`weightsmith.quant.imatrix`.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from .. import gguf
from ..byteio import RemoteOptions, is_url
from ..cluster import batches, map_tasks
from ..dtypes import GGML, ggml_type
from ..errors import ClusterSourceMismatch, ImatrixRequired, RequantizeRefused
from ..progress import ProgressFn
from . import dequantize, quantize, recipes
from ._engine import (
    Span,
    check_imatrix,
    chunk_rows,
    quantize_spans,
    spans,
    workers_count,
)
from .imatrix import Imatrix, for_tensor, read_imatrix
from .registry import codec

__all__ = [
    "batch_quantize",
    "cluster_task",
    "dequantize_tensor",
    "quantize_file",
    "quantize_files",
    "quantize_tensor",
]

QNT_VERSION = 2  # GGML_QNT_VERSION
# llama-quantize quantizes from the float types, F64 excepted
_FLOAT_SOURCES = {t.name for t in GGML.values() if t.is_float and t.name != "F64"}
_NEEDS_IMATRIX = {"IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S"}
_NO_IMATRIX_NEEDED = {"token_embd.weight", "per_layer_token_embd.weight", "output.weight"}
#: Output bytes that quantize_file's threads produce before they are written:
#: bounds its extra memory whatever the model size.
WINDOW_BYTES = 256 * 1024 * 1024
_NATIVE = "<" if sys.byteorder == "little" else ">"


_BLK = re.compile(r"blk\.\s*([+-]?\d+)")


def _loader_order(t) -> tuple[int, bytes]:
    """llama.cpp's weight_name_comparer: layer number (``blk.N``, else -1), then name."""
    m = _BLK.match(t.name)
    return (int(m.group(1)) if m else -1, t.name.encode())


def _int_kv(meta, key: str, default: Any) -> Any:
    """An integer KV as it is stored (a per-layer array stays a list: the recipe reads it)."""
    v = meta.get(key, default)
    return [int(x) for x in v] if isinstance(v, (list, tuple)) else None if v is None else int(v)


class QuantizeResult(dict):
    """What :func:`quantize_file` wrote: ``{tensor name: ggml type name}`` (a dict),
    plus ``fallbacks`` (``{name: (wanted type, type used)}`` for the tensors whose
    row length the recipe's type does not divide), ``parameters``, ``nbytes``
    (tensor data) and ``bits_per_weight`` of the output."""

    def __init__(self, types: dict[str, str], fallbacks: dict, parameters: int, nbytes: int):
        super().__init__(types)
        self.fallbacks: dict[str, tuple[str, str]] = dict(fallbacks)
        self.parameters = parameters
        self.nbytes = nbytes

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.parameters if self.parameters else 0.0

    def summary(self) -> str:
        """One line, e.g. ``180 of 272 tensor(s) required fallback quantization
        (Q4_K -> Q5_0: 150, Q6_K -> Q8_0: 30); 6.17 bits per weight``."""
        counts: dict[tuple[str, str], int] = {}
        for pair in self.fallbacks.values():
            counts[pair] = counts.get(pair, 0) + 1
        kinds = ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(counts.items()))
        fb = f"{len(self.fallbacks)} of {len(self)} tensor(s) required fallback quantization"
        fb += f" ({kinds})" if kinds else ""
        return f"{fb}; {self.bits_per_weight:.2f} bits per weight"

    def to_dict(self) -> dict[str, object]:
        return {
            "tensors": len(self),
            "parameters": self.parameters,
            "bytes": self.nbytes,
            "bits_per_weight": round(self.bits_per_weight, 6),
            "fallbacks": [
                {"name": n, "wanted": a, "used": b} for n, (a, b) in sorted(self.fallbacks.items())
            ],
            "types": dict(sorted(self.items())),
        }


def quantize_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str,
    imatrix: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
    ray: str | None = None,
    remote: RemoteOptions | None = None,
) -> QuantizeResult:
    """Quantize a GGUF model to the llama.cpp file type ``type``; returns name -> ggml type
    (a :class:`QuantizeResult`, which also counts the fallbacks and the bits per weight).

    ``ray``: the address of a Ray cluster ("auto": the one this machine belongs to)
    whose nodes quantize the tensors, reading ``src`` themselves (a path every
    node sees); the file is byte-identical to the one made here.
    ``src`` may be a URL (``hf://``, ``http(s)://``, fsspec; ``remote=`` options): the
    header is read first, then each window of tensors is fetched by range while the
    previous one is quantized (each byte once); nothing of the source is written.
    """
    return quantize_files(src, {type: dst}, imatrix, progress, workers, ray, remote)[0]


def quantize_files(
    src: str | os.PathLike[str],
    outputs: Mapping[str, str | os.PathLike[str]],
    imatrix: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
    ray: str | None = None,
    remote: RemoteOptions | None = None,
) -> list[QuantizeResult]:
    """Quantize one GGUF model to several file types (``{type: dst}``) in one pass:
    every source tensor is read once and quantized to each type.  Each output
    is the file :func:`quantize_file` writes for its type.  Returns one
    :class:`QuantizeResult` per output, in order.
    """
    ftypes = [recipes.file_type(t) for t in outputs]
    im = read_imatrix(imatrix) if imatrix is not None else None
    f = gguf.read(src, remote=remote)
    try:
        meta = f.metadata
        arch = str(meta.get("general.architecture", "llama"))
        tensors = sorted(f.tensors, key=_loader_order)
        source_types = {t.name: t.ggml_type.name for t in tensors}
        plans = []
        for ftype in ftypes:  # every plan checked before any file is opened
            plan = recipes.plan(
                [(t.name, t.shape) for t in tensors],
                ftype,
                arch=arch,
                n_layer=_int_kv(meta, f"{arch}.block_count", None),
                n_head=_int_kv(meta, f"{arch}.attention.head_count", 1) or 1,
                n_head_kv=_int_kv(meta, f"{arch}.attention.head_count_kv", None),
                n_expert=_int_kv(meta, f"{arch}.expert_count", 0) or 0,
                has_imatrix=im is not None,
                source_types=source_types,
            )
            _check_plan(tensors, plan, source_types, im, ftype.name, src)
            plans.append(plan)
        # the nodes open the source themselves: a path they all see, or the same URL
        where = src if is_url(src) else os.path.abspath(src)
        cluster = None if ray is None else (ray, where, _source_size(f), remote)
        writers: list[gguf.Writer] = []
        try:
            for ftype, plan, dst in zip(ftypes, plans, outputs.values()):
                writers.append(_start(gguf.Writer(dst, alignment=f.alignment), f, tensors, plan))
                _tail(writers[-1], meta, ftype.id, im)
            total = sum(t.nbytes for t in tensors)
            done = 0
            data = _tensor_data(f, tensors, plans, im, workers, cluster)
            for i, (t, parts) in enumerate(data, 1):
                for w, part in zip(writers, parts):
                    w.write_tensor(t.name, part)
                done += t.nbytes
                if progress is not None:
                    progress(done, total, i, len(tensors))
            for w in writers:
                w.close()
        except BaseException:
            for w in writers:
                w.abort()
            raise
        return [
            QuantizeResult(
                plan,
                plan.fallbacks,
                sum(t.n_elements for t in tensors),
                sum(ggml_type(plan[t.name]).nbytes(t.n_elements) for t in tensors),
            )
            for plan in plans
        ]
    finally:
        f.close()


_PRECISION_SUFFIX = re.compile(r"[-_.](f32|f16|bf16)$", re.IGNORECASE)


def batch_quantize(
    src: str | os.PathLike[str],
    types: Sequence[str],
    out_dir: str | os.PathLike[str],
    imatrix: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    workers: int | None = None,
    ray: str | None = None,
    remote: RemoteOptions | None = None,
) -> dict[str, QuantizeResult]:
    """Several quantizations of one model into ``out_dir``, the source read once:
    ``model-f16.gguf`` with types ``q4_k_m, q8_0`` gives ``model-Q4_K_M.gguf`` and
    ``model-Q8_0.gguf`` (the usual Hub naming).  Returns {path: result}."""
    stem = _PRECISION_SUFFIX.sub("", os.fspath(src).rsplit("/", 1)[-1].removesuffix(".gguf"))
    names = [recipes.file_type(t).name for t in types]
    paths = [os.path.join(out_dir, f"{stem}-{name}.gguf") for name in names]
    os.makedirs(out_dir, exist_ok=True)
    outputs = dict(zip(names, paths))
    results = quantize_files(src, outputs, imatrix, progress, workers, ray, remote)
    return dict(zip(paths, results))


def _start(w: gguf.Writer, f: gguf.GGUFFile, tensors, plan) -> gguf.Writer:
    """Every KV of the input but ``split.*``, and the output's tensor infos."""
    for key in f.metadata:
        if not key.startswith("split."):
            w.add(key, f.metadata[key], type=f.metadata_type(key))
    for t in tensors:  # stored as libllama stores them: trailing 1s dropped
        w.add_tensor_info(t.name, plan[t.name], (), dims=gguf.ggml_n_dims(t.dims))
    return w


def _tail(w: gguf.Writer, meta, ftype_id: int, im: Imatrix | None) -> None:
    """The keys llama-quantize sets last (gguf_set_val_*: remove, then append)."""
    for key, value, vtype in _tail_kvs(ftype_id, im):
        if key in meta:
            w.remove(key)
        w.add(key, value, type=vtype)


def _tensor_data(
    f, tensors, plans, im: Imatrix | None, workers: int | None, cluster
) -> Iterator[tuple]:
    """(tensor, bytes to write per output) in file order: copied, or quantized to
    each plan's type.

    Consecutive tensors are quantized together, a window of at most
    :data:`WINDOW_BYTES` of output at a time: all of them go to the kernels'
    pool (or the cluster) at once, so a model of many small tensors keeps every
    thread busy (one tensor at a time could not).
    """
    nw = workers_count(workers)

    def out_bytes(t) -> int:  # every plan that quantizes t holds its own output
        types = [p[t.name] for p in plans if p[t.name] != t.ggml_type.name]
        return sum(ggml_type(new).nbytes(t.n_elements) for new in types)

    windows = batches(tensors, out_bytes, WINDOW_BYTES)
    if not f.remote or not windows or cluster is not None:
        # mapped: views, read as the kernels touch them; on a cluster the nodes read
        # what they quantize, and here only the tensors copied as they are
        for window in windows:
            views = _views(f, window, plans, with_values=cluster is None)
            yield from _quantize_window(f, window, plans, im, nw, cluster, views)
        return
    # remote: the next window's bytes are fetched (each byte once, in parallel ranges)
    # while this one is quantized -- download overlaps quantization
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ws-prefetch") as pool:
        ahead = pool.submit(_views, f, windows[0], plans)
        for i, window in enumerate(windows):
            data = ahead.result()
            if i + 1 < len(windows):
                ahead = pool.submit(_views, f, windows[i + 1], plans)
            yield from _quantize_window(f, window, plans, im, nw, cluster, data)
            del data


class _Data(NamedTuple):
    """One tensor of a window: its file bytes (for outputs that copy it) and its values
    (for those that quantize it); None where no output needs them."""

    raw: np.ndarray | None
    values: np.ndarray | None


def _views(f, window, plans, with_values: bool = True) -> dict[str, _Data]:
    """The window's tensors: views of a mapped file, or fetched once from a remote one
    (``with_values=False``: only those some output copies as they are)."""
    out = {}
    for t in window:
        copied = [p[t.name] == t.ggml_type.name for p in plans]
        if all(copied) or not with_values:
            out[t.name] = _Data(f.tensor_bytes(t.name) if any(copied) else None, None)
            continue
        values = f.numpy(t.name)
        raw = None
        if any(copied):  # a fetched tensor in native byte order: its values are its bytes
            fetched = f.remote and f.byte_order == _NATIVE
            raw = values.reshape(-1).view(np.uint8) if fetched else f.tensor_bytes(t.name)
        out[t.name] = _Data(raw, values)
    return out


def _quantize_window(
    f, window, plans, im: Imatrix | None, nw: int, cluster, data: Mapping[str, _Data]
) -> Iterator[tuple]:
    """Quantize the tensors of ``window`` to every plan's type, on ``nw`` threads or on
    the cluster; yield all of them in order.

    Here the whole window is one call of the kernels' pool: one span per tensor
    (expert), target type, read straight from the file's float16/bfloat16/float32
    values; the pool's threads take rows of all of them in turn.
    """
    local: list[Span] = []
    cluster_spans: list[_Span] = []
    outs: dict[tuple[int, int], np.ndarray] = {}  # (tensor, plan) -> its output bytes
    for j, t in enumerate(window):
        targets = [(i, p[t.name]) for i, p in enumerate(plans) if p[t.name] != t.ggml_type.name]
        if not targets:
            continue
        n = t.shape[-1]
        experts = t.shape[0] if len(t.shape) == 3 else 1
        rows = math.prod(t.shape[:-1]) // experts
        e = None if im is None else for_tensor(t.name, t.shape, im)
        weights = []
        for k in range(experts):  # quantize()'s checks, before anything is computed
            ek = None if e is None else e[k]
            for _, new in targets:
                quantize(np.zeros((0, n), np.float32), new, ek, name=t.name)
            weights.append(check_imatrix(ek, n, t.name))
        for i, new in targets:
            outs[j, i] = np.empty((experts * rows, ggml_type(new).nbytes(n)), np.uint8)
        if cluster is None:
            values = data[t.name].values.reshape(experts, rows, n)
            local += [
                Span(new, values[k], outs[j, i][k * rows : (k + 1) * rows], weights[k], t.name)
                for k in range(experts)
                for i, new in targets
            ]
            continue
        # tasks of about CLUSTER_TASK_ELEMENTS, within the memory budget
        temp = max(codec(new).quantize_temp_bytes for _, new in targets)
        step = max(1, min(chunk_rows(n, 1, None, temp), CLUSTER_TASK_ELEMENTS // n))
        cluster_spans += [
            _Span(j, t.name, t.shape, t.ggml_type.name, k, rows, r0, r1, targets, weights[k])
            for k in range(experts)
            for r0, r1 in spans(rows, step)
        ]
    if cluster is None:
        quantize_spans(local, nw)
    else:
        _run_on_cluster(cluster, cluster_spans, outs)
    for j, t in enumerate(window):
        yield (
            t,
            [
                data[t.name].raw if (j, i) not in outs else outs[j, i].reshape(-1)
                for i in range(len(plans))
            ],
        )


class _Span(NamedTuple):
    """Rows [r0, r1) of expert k of one tensor, to quantize to every target type."""

    tensor: int  # index in the window
    name: str
    shape: tuple[int, ...]
    source_type: str
    expert: int
    rows: int  # rows per expert
    r0: int
    r1: int
    targets: list[tuple[int, str]]  # (output, ggml type)
    weights: np.ndarray | None  # the expert's importance-matrix weights

    def slices(self, outs: Mapping[tuple[int, int], np.ndarray]) -> list[np.ndarray]:
        """This span's rows of each target's output."""
        return [
            outs[self.tensor, i][self.lo : self.lo + self.r1 - self.r0] for i, _ in self.targets
        ]

    @property
    def lo(self) -> int:
        """First row in the tensor's flat [rows of all experts, n] view."""
        return self.expert * self.rows + self.r0

    def quantize(self, values: np.ndarray, dests: list[np.ndarray], first: int = 0) -> None:
        """Read this span's rows of ``values`` (the tensor's, from row ``first`` on) once;
        quantize them to each target type, into ``dests``."""
        src = values.reshape(-1, self.shape[-1])  # a view: only these rows are read
        lo = self.lo - first
        x = src[lo : lo + self.r1 - self.r0]
        work = [
            Span(new, x, dest, self.weights, self.name, self.r0)
            for (_, new), dest in zip(self.targets, dests)
        ]
        quantize_spans(work, 1)


#: Elements of source per cluster task: big enough that a task's work dwarfs
#: Ray's per-task cost (~1 ms), small enough that a window spreads over many nodes.
CLUSTER_TASK_ELEMENTS = 1 << 22


def _run_on_cluster(cluster, spans_: list[_Span], outs) -> None:
    """The window's spans as cluster tasks of about CLUSTER_TASK_ELEMENTS each;
    every result is copied into its slice of ``outs``, whatever the order they
    arrive in."""
    address, path, size, remote = cluster
    groups = batches(spans_, lambda s: (s.r1 - s.r0) * s.shape[-1], CLUSTER_TASK_ELEMENTS)
    args = [(path, size, remote, group) for group in groups]
    for g, results in map_tasks(address, cluster_task, args):
        for s, out in zip(groups[g], results):
            for dest, q in zip(s.slices(outs), out):
                dest[...] = q


_worker_file: dict[tuple[str, int], gguf.GGUFFile] = {}


def _source_size(f: gguf.GGUFFile) -> int:
    """Bytes of the (first) file: what driver and nodes compare."""
    return f.remote[0].size if f.remote else os.path.getsize(f.paths[0])


def cluster_task(
    path: str, size: int, remote: RemoteOptions | None, group: list[_Span]
) -> list[list[np.ndarray]]:
    """What a cluster node runs: quantize ``group``'s spans of the GGUF at ``path`` (a
    path or URL; it must be the ``size``-byte file the driver planned), reading only
    their rows; one array per span and target type."""
    f = _worker_file.get((path, size))
    if f is None:
        for old in _worker_file.values():
            old.close()
        _worker_file.clear()
        f = gguf.read(path, remote=remote)
        found = _source_size(f)
        if found != size:
            f.close()
            raise ClusterSourceMismatch(
                "the worker sees another file than the driver",
                path=path,
                field="file size",
                expected=size,
                found=found,
            )
        _worker_file[path, size] = f
    results = []
    for s in group:
        t = f.tensor(s.name)
        if t.shape != s.shape or t.ggml_type.name != s.source_type:
            raise ClusterSourceMismatch(
                "the worker sees another tensor than the driver",
                path=path,
                field=f"tensor {s.name!r}",
                expected=f"{s.source_type} {s.shape}",
                found=f"{t.ggml_type.name} {t.shape}",
            )
        dests = [
            np.empty((s.r1 - s.r0, ggml_type(new).nbytes(s.shape[-1])), np.uint8)
            for _, new in s.targets
        ]
        s.quantize(f.numpy(s.name, rows=(s.lo, s.lo + s.r1 - s.r0)), dests, first=s.lo)
        results.append(dests)
    return results


def _tail_kvs(ftype_id: int, im: Imatrix | None) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = [
        ("general.quantization_version", QNT_VERSION, "u32"),
        ("general.file_type", ftype_id, "u32"),
    ]
    return out + (im.gguf_rows() if im is not None else [])


def _check_plan(
    tensors, plan, source_types, im: Imatrix | None, ftype_name: str, src: str | os.PathLike[str]
) -> None:
    """Refuse before writing anything: requantizing, or a low-bit type without an imatrix."""
    for t in tensors:
        new, cur = plan[t.name], source_types[t.name]
        if new == cur:
            continue
        if cur not in _FLOAT_SOURCES:
            raise RequantizeRefused(
                f"already quantized, and requantizing would compound the error: quantize from "
                f"the F16/BF16/F32 GGUF instead (or convert the HF model with --type "
                f"{ftype_name.lower()})",
                path=src,
                field=f"tensor {t.name!r}",
                expected="F32, F16 or BF16",
                found=cur,
            )
        needs = t.name not in _NO_IMATRIX_NEEDED and (
            new in _NEEDS_IMATRIX or (new == "Q2_K" and ftype_name == "Q2_K_S")
        )
        if needs and (im is None or for_tensor(t.name, t.shape, im) is None):
            raise ImatrixRequired(
                f"{new} in a {ftype_name} file needs an importance matrix",
                path=src,
                field=t.name,
                expected="an importance matrix entry",
                found="none",
            )


def quantize_tensor(
    x: np.ndarray, new: str, name: str, im: Imatrix | None, workers: int | None = None
) -> np.ndarray:
    """Quantize one GGUF tensor (2-D, or 3-D experts) with its slice of an importance matrix."""
    e = None if im is None else for_tensor(name, x.shape, im)
    if x.ndim == 3:  # experts: each has its own slice of the importance matrix
        parts = [
            quantize(x[k], new, None if e is None else e[k], name=name, workers=workers)
            for k in range(x.shape[0])
        ]
        return np.stack(parts)
    return quantize(x, new, None if e is None else e[0], name=name, workers=workers)


def dequantize_tensor(f: gguf.GGUFFile, name: str) -> np.ndarray:
    """float32 values of any tensor of an open GGUF file, dequantizing block types."""
    t = f.tensor(name)
    if t.ggml_type.numpy is not None:
        return f.numpy(name).astype(np.float32)
    return dequantize(f.tensor_bytes(name), t.ggml_type, t.shape)
