"""ggml quantization in numpy: every type dequantizes, the common ones quantize.

Public API::

    quantize(x, type, imatrix=None, *, workers=None)  -> uint8 [..., n / block * type_size]
    dequantize(raw, type, shape, *, workers=None)      -> float32 ndarray of ``shape``
    info(type)                                         -> QuantTypeInfo

``type`` is a ggml type name (any case), its number or a
:class:`weightsmith.dtypes.GGMLType`.  Results are bit-identical to ggml's C
reference (``ggml_quantize_chunk`` and the type's ``to_float``).

The codecs live in one module per family (plain, legacy, kquants, iquants,
ternary, fp4) and are merged by :mod:`.registry`; the scale searches they
share are in :mod:`._search`.

Memory: rows are processed in chunks whose size is chosen so that the
codec's temporaries stay within :data:`MEMORY_BUDGET` bytes (64 MiB) in
total, whatever the tensor size; only the output is allocated in full.
Cores: ``workers=k`` spreads the row chunks of one tensor over ``k`` workers
(``workers=0``: one per CPU).  ``backend="auto"`` (default) takes threads
where the codec is a few whole-array numpy operations (decoding; plain,
legacy, ternary and FP4 encoding without imatrix) and processes otherwise.
``backend="process"`` forks k - 1 children on Linux that inherit the input
copy-on-write and write into a shared output, so no tensor data is copied or
pickled; elsewhere it uses a persistent forkserver/spawn pool
(``backend="pool"``), which ships chunks through pipes.  ``backend="thread"``
uses threads (numpy releases the GIL in its loops, but the many small
operations of the scale searches then contend for it).
Results never depend on the workers, backend or chunk size.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.machinery
import math
import mmap
import multiprocessing as mp
import multiprocessing.connection
import os
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from ..dtypes import GGMLType
from ..errors import (
    ByteCountMismatch,
    DequantizeUnsupported,
    ImatrixLengthMismatch,
    ImatrixRequired,
    InvalidImatrix,
    InvalidQuantShape,
    InvalidWorkers,
    NonFiniteInput,
    QuantizeUnsupported,
    RowLengthNotMultiple,
)
from .registry import SELF_CHECKS_FINITE, Codec, QuantTypeInfo, codec, info, types

__all__ = [
    "MEMORY_BUDGET",
    "QuantTypeInfo",
    "dequantize",
    "info",
    "quantize",
    "types",
]

#: Bytes of temporaries all chunks in flight may use together.
MEMORY_BUDGET = 64 * 1024 * 1024
#: Elements a chunk is not cut below when spreading a tensor over workers:
#: smaller chunks would mean more numpy calls per element (for threads, more
#: handing over of the GIL).
MIN_CHUNK = 1 << 18
#: Elements a decoder chunk is not made larger than, whatever the budget
#: allows: a decoder's temporaries then stay in the caches (measured on a
#: 4M-element tensor, 1-worker dequantize took 5-25 % less time than with
#: 2.8M-element chunks), while a tensor up to this size is still one chunk,
#: returned without a copy.
DEQUANTIZE_CHUNK = 1 << 20
#: Families whose reference (no imatrix) encoders are a few whole-array numpy
#: operations per chunk: threads scale on them (numpy drops the GIL in its
#: loops) without the cost of forking.  The others issue many small numpy
#: calls per chunk and need processes.
THREAD_FAMILIES = frozenset({"plain", "legacy", "ternary", "fp4"})


# --------------------------------------------------------------------------- helpers


def _workers(workers: int | None) -> int:
    if workers is None:
        return 1
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
        raise InvalidWorkers(
            "bad workers", field="workers", expected="an integer >= 0", found=repr(workers)
        )
    return int(workers) or (os.cpu_count() or 1)


def _chunk_rows(n_per_row: int, workers: int, chunk_rows: int | None, temp_bytes: int = 64) -> int:
    """Rows per chunk: ``chunk_rows`` if given, else what fits the memory budget.

    ``temp_bytes`` is the codec's temporaries per element (see the registry).
    """
    if chunk_rows is not None:
        if (
            isinstance(chunk_rows, bool)
            or not isinstance(chunk_rows, (int, np.integer))
            or chunk_rows < 1
        ):
            raise InvalidQuantShape(
                "bad chunk_rows",
                field="chunk_rows",
                expected="an integer >= 1",
                found=repr(chunk_rows),
            )
        return int(chunk_rows)
    per_chunk = MEMORY_BUDGET // (workers * temp_bytes)
    return max(1, per_chunk // max(1, n_per_row))


def _spans(nrows: int, step: int, workers: int = 1, least: int = 1) -> list[tuple[int, int]]:
    """Spans of at most ``step`` rows covering ``nrows``.

    With several workers the spans shrink towards the end (each a quarter
    of what is left per worker, down to ``least`` rows, with no smaller
    piece left over), so that the workers finish together: equal spans
    leave one worker idle for up to a whole span at the end, and a tensor of
    a few spans is still split ``workers`` ways.
    """
    out = []
    r0 = 0
    while r0 < nrows:
        k = step
        if workers > 1:
            left = nrows - r0
            k = min(step, max(least, -(-left // (2 * workers))))
            if left - k < least:  # no piece below `least` at the end
                k = min(step, left)
        out.append((r0, min(nrows, r0 + k)))
        r0 += k
    return out


_pool_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_size = 0


def _process_pool(n: int) -> ProcessPoolExecutor:
    """A process pool of at least ``n`` workers, kept for later calls.

    forkserver (where available) forks workers from a clean server process
    that has already imported weightsmith.quant, so a worker starts fast and
    never inherits the caller's threads or locks.
    """
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < n:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            methods = mp.get_all_start_methods()
            ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
            if ctx.get_start_method() == "forkserver":
                ctx.set_forkserver_preload([__name__])
            _pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx)
            _pool_size = n
        return _pool


@contextlib.contextmanager
def _workers_skip_main() -> Iterator[None]:
    """Keep worker processes from re-running the caller's ``__main__`` script.

    spawn/forkserver children normally re-import the main script (which,
    without an ``if __name__ == "__main__"`` guard, would quantize again).
    Our tasks are functions of this module, so the children never need it:
    while workers are started, a script's ``__main__`` is given a spec named
    ``__main__``, which multiprocessing's child bootstrap skips.
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = None


@atexit.register
def _shutdown_pool() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


def _fork_available() -> bool:
    return sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()


def _plan(backend: str, workers: int, nspans: int) -> str:
    """The runner actually used: "serial", "fork", "pool" or "thread"."""
    if workers <= 1 or nspans <= 1:
        return "serial"
    if backend == "process":
        return "fork" if _fork_available() else "pool"
    return backend


def _empty(shape: tuple[int, ...], dtype, plan: str) -> np.ndarray:
    """The output array; in shared memory when forked workers write into it."""
    if plan != "fork":
        return np.empty(shape, dtype)
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    buf = mmap.mmap(-1, max(1, nbytes))  # anonymous MAP_SHARED: children write, we read
    return np.frombuffer(buf, dtype=dtype, count=math.prod(shape)).reshape(shape)


def _run_forked(
    spans: list[tuple[int, int]],
    load: Callable[[int, int], tuple],
    task: Callable[..., np.ndarray],
    store: Callable[[int, int, np.ndarray], None],
    workers: int,
) -> None:
    """Fork ``workers - 1`` children; they and this process take spans from a shared counter.

    The children inherit the input (copy-on-write, nothing is copied or
    pickled) and store straight into the shared output, so no data crosses a
    pipe.  Each child reports on its own pipe when its last store is done (or
    sends its exception); this process goes on then, without waiting for the
    child's exit (tearing down a forked address space takes milliseconds):
    multiprocessing reaps it later.  Used on Linux.
    """
    ctx = mp.get_context("fork")
    counter = ctx.Value("q", 0)

    def work() -> None:
        while True:
            with counter.get_lock():
                i = counter.value
                counter.value = i + 1
            if i >= len(spans):
                return
            try:
                store(*spans[i], task(*load(*spans[i])))
            except BaseException:  # stop the others early
                with counter.get_lock():
                    counter.value = len(spans)
                raise

    def child(conn) -> None:
        try:
            work()
            conn.send(None)
        except BaseException as exc:
            try:
                conn.send(exc)
            except Exception:  # an exception that does not pickle
                conn.send(RuntimeError(f"{type(exc).__name__}: {exc}"))

    links = []
    with warnings.catch_warnings():
        # Python >= 3.12 warns about fork() in a threaded process; the children
        # only run numpy on inherited arrays and exit.
        warnings.simplefilter("ignore", DeprecationWarning)
        for _ in range(workers - 1):
            reader, writer = ctx.Pipe(duplex=False)
            ch = ctx.Process(target=child, args=(writer,), daemon=True)
            ch.start()
            writer.close()
            links.append((reader, ch))
    try:
        work()
    finally:
        reports = [_child_report(reader, ch) for reader, ch in links]
        mp.active_children()  # reap the children that have exited already
    for exc in reports:
        if exc is not None:
            raise exc


def _child_report(reader, ch) -> BaseException | None:
    """What a forked child sent when done: None or its exception (also if it died)."""
    with reader:
        mp.connection.wait([reader, ch.sentinel])
        if reader.poll():
            try:
                return reader.recv()
            except EOFError:
                pass
        ch.join()
        return RuntimeError(f"a quantization worker process died (exit code {ch.exitcode})")


def _run_threads(
    spans: list[tuple[int, int]],
    load: Callable[[int, int], tuple],
    task: Callable[..., np.ndarray],
    store: Callable[[int, int, np.ndarray], None],
    workers: int,
) -> None:
    """This thread and ``workers - 1`` helpers take spans in turn; each stores its own result.

    Exactly ``workers`` threads run (no dispatcher thread competing for a
    core), and a result is copied into the output by the thread that made it,
    while it is still in that core's cache.
    """
    it = iter(spans)
    lock = threading.Lock()
    failed: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                span = None if failed else next(it, None)
            if span is None:
                return
            try:
                store(*span, task(*load(*span)))
            except BaseException as exc:  # report, and stop the others early
                with lock:
                    failed.append(exc)
                return

    helpers = [_helper_pool(workers - 1).submit(work) for _ in range(workers - 1)]
    work()
    for fut in helpers:
        fut.result()
    if failed:
        raise failed[0]


_helpers_lock = threading.Lock()
_helpers: ThreadPoolExecutor | None = None
_helpers_size = 0


def _helper_pool(n: int) -> ThreadPoolExecutor:
    """A pool of at least ``n`` helper threads, kept for later calls.

    Starting threads for every call costs ~0.2 ms, a few percent of a
    fast codec's call.  Concurrent callers share the pool: a helper that
    starts late finds its call's spans taken and returns.
    """
    global _helpers, _helpers_size
    with _helpers_lock:
        if _helpers is None or _helpers_size < n:
            if _helpers is not None:
                _helpers.shutdown(wait=False)
            _helpers = ThreadPoolExecutor(max_workers=n, thread_name_prefix="weightsmith-quant")
            _helpers_size = n
        return _helpers


def _forget_helpers() -> None:
    """In a forked child the pool's threads do not exist: start afresh."""
    global _helpers, _helpers_lock, _helpers_size
    _helpers, _helpers_size, _helpers_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _run(
    spans: list[tuple[int, int]],
    load: Callable[[int, int], tuple],
    task: Callable[..., np.ndarray],
    store: Callable[[int, int, np.ndarray], None],
    workers: int,
    backend: str,
) -> None:
    """For every span: ``store(r0, r1, task(*load(r0, r1)))``, on ``workers`` workers.

    At most ``workers`` (threads, fork) or ``2 * workers`` (pool) chunks are
    in flight, so memory stays bounded by the chunk size whatever the tensor
    size.  The first error is re-raised.
    """
    plan = _plan(backend, workers, len(spans))
    if plan == "serial":
        for span in spans:
            store(*span, task(*load(*span)))
        return
    if plan == "fork":
        _run_forked(spans, load, task, store, workers)
        return
    if plan == "thread":
        _run_threads(spans, load, task, store, workers)
        return
    pending: deque[tuple[int, int, Future]] = deque()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_workers_skip_main())
        executor = _process_pool(workers)
        try:
            for r0, r1 in spans:
                if len(pending) >= 2 * workers:
                    a, b, fut = pending.popleft()
                    store(a, b, fut.result())
                pending.append((r0, r1, executor.submit(task, *load(r0, r1))))
            while pending:
                a, b, fut = pending.popleft()
                store(a, b, fut.result())
        except BrokenProcessPool:
            _shutdown_pool()  # a worker died (e.g. killed): start afresh next time
            raise
        finally:
            for _, _, fut in pending:
                fut.cancel()


def _quantize_task(
    type_name: str,
    rows: np.ndarray,
    im: np.ndarray | None,
    r0: int,
    name: str | None,
    split: int = 1,
) -> np.ndarray:
    """Quantize one chunk of rows (in the caller, a thread or a worker process).

    ``split`` > 1: the rows are pieces of tensor rows cut ``split`` ways
    (only used to report where a NaN/inf sits).
    """
    c = codec(type_name)
    self_check = im is None and c.type.name in SELF_CHECKS_FINITE
    if not c.holds_nonfinite and not self_check:
        _check_finite(rows, r0, name, c.type, split)
    try:
        with np.errstate(all="ignore"):
            return c.quantize(rows, im)
    except NonFiniteInput:
        # a self-checking codec saw NaN/inf: locate it for the message
        _check_finite(rows, r0, name, c.type, split)
        raise


def _dequantize_task(type_name: str, blocks: np.ndarray, out: np.ndarray | None = None):
    with np.errstate(all="ignore"):
        if out is None:
            return codec(type_name).dequantize(blocks)
        return codec(type_name).dequantize(blocks, out=out)  # writes into ``out``


def _backend(backend: str) -> str:
    if backend not in ("auto", "process", "thread", "pool"):
        raise InvalidWorkers(
            "bad backend",
            field="backend",
            expected="'auto', 'process', 'thread' or 'pool'",
            found=repr(backend),
        )
    return backend


def _rows_getter(x: np.ndarray, n: int) -> Callable[[int, int], np.ndarray]:
    """A function giving rows [r0, r1) of x as C-contiguous float32 [k, n] without a full copy."""
    lead = x.shape[:-1]
    if x.flags.c_contiguous:
        flat = x.reshape(-1, n)  # a view: no copy of the tensor
        return lambda r0, r1: np.ascontiguousarray(flat[r0:r1], dtype=np.float32)

    def gather(r0: int, r1: int) -> np.ndarray:
        idx = np.unravel_index(np.arange(r0, r1), lead)
        return np.ascontiguousarray(x[idx], dtype=np.float32)

    return gather


def _check_finite(rows: np.ndarray, r0: int, name: str | None, t: GGMLType, split: int = 1) -> None:
    ok = np.isfinite(rows)
    if ok.all():
        return
    r, c = np.argwhere(~ok)[0]
    piece = r0 + int(r)  # rows may be pieces of tensor rows cut `split` ways
    row, col = piece // split, (piece % split) * rows.shape[1] + int(c)
    raise NonFiniteInput(
        f"{t.name} cannot hold NaN or inf",
        field=name or "x",
        expected="finite values",
        found=f"{rows[r, c]} at row {row}, column {col}",
    )


def _check_imatrix(imatrix, n: int, t: GGMLType, name: str | None) -> np.ndarray | None:
    if imatrix is None:
        return None
    im = np.asarray(imatrix)
    if im.shape != (n,):
        raise ImatrixLengthMismatch(
            "importance matrix has the wrong shape",
            field=name or "imatrix",
            expected=f"shape ({n},), one weight per column",
            found=f"shape {im.shape}",
        )
    im = np.ascontiguousarray(im, dtype=np.float32)
    bad = ~np.isfinite(im) | (im < 0)
    if bad.any():
        j = int(np.argmax(bad))
        raise InvalidImatrix(
            "importance matrix weight out of range",
            field=name or "imatrix",
            expected="finite weights >= 0",
            found=f"{im[j]} at column {j}",
        )
    return im


# --------------------------------------------------------------------------- quantize


def quantize(
    x: np.ndarray,
    type: str | int | GGMLType,
    imatrix: np.ndarray | None = None,
    *,
    workers: int | None = None,
    name: str | None = None,
    chunk_rows: int | None = None,
    backend: str = "auto",
) -> np.ndarray:
    """Quantize float rows ``x[..., n]`` to ggml ``type`` -> uint8 ``[..., n/block*type_size]``.

    ``imatrix`` is ggml's importance matrix: one non-negative weight per column.
    ``workers`` spreads row chunks over threads (0 = all CPUs).  ``name`` is
    used in error messages.  ``chunk_rows`` overrides the memory-derived
    chunk size (the result never depends on it).
    """
    c: Codec = codec(type)
    t = c.type
    if c.quantize is None:
        raise QuantizeUnsupported(
            f"no quantizer for {t.name}",
            field=name or "type",
            expected="a type with a quantizer: " + ", ".join(types(quantize=True)),
            found=t.name,
        )
    x = np.asarray(x)
    if x.ndim == 0:
        raise InvalidQuantShape(
            "cannot quantize a scalar",
            field=name or "x",
            expected="at least 1 dimension",
            found="0-d",
        )
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise InvalidQuantShape(
            "not a real-valued array",
            field=name or "x",
            expected="float values",
            found=str(x.dtype),
        )
    n = x.shape[-1]
    if n % t.block_size:
        raise RowLengthNotMultiple(
            f"row length is not a multiple of the {t.name} block size",
            field=name or "x",
            expected=f"a multiple of {t.block_size}",
            found=n,
        )
    im = _check_imatrix(imatrix, n, t, name)
    if im is None and c.requires_imatrix:
        raise ImatrixRequired(
            f"{t.name} cannot be quantized without an importance matrix",
            field=name or "imatrix",
            expected="an importance matrix",
            found=None,
        )
    row_bytes = t.nbytes(n)
    lead = x.shape[:-1]
    nrows = math.prod(lead)
    if nrows == 0 or n == 0:
        return np.empty((*lead, row_bytes), dtype=np.uint8)
    nw = _workers(workers)
    be = _backend(backend)
    if be == "auto":  # whole-array codecs release the GIL; scale searches do not
        be = "thread" if im is None and c.family in THREAD_FAMILIES else "process"
    # Codecs whose blocks do not depend on the rest of the row may have a long
    # row cut into block-aligned pieces, so that even one huge row is
    # processed in bounded chunks (the bytes are the same: blocks are contiguous).
    seg = n
    if im is None and c.family in THREAD_FAMILIES and x.flags.c_contiguous and chunk_rows is None:
        seg = _segment(n, t.block_size, MEMORY_BUDGET // (nw * c.quantize_temp_bytes))
    split = n // seg
    xs = x.reshape(-1, seg) if split > 1 else x
    get_rows = _rows_getter(xs, seg)
    step = _chunk_rows(seg, nw, chunk_rows, c.quantize_temp_bytes)
    spans = _spans(
        nrows * split, step, nw, max(1, MIN_CHUNK // seg) if chunk_rows is None else step
    )
    seg_bytes = t.nbytes(seg)
    out = _empty((nrows * split, seg_bytes), np.uint8, _plan(be, nw, len(spans)))

    def load(r0: int, r1: int) -> tuple:
        return (t.name, get_rows(r0, r1), im, r0, name, split)

    def store(r0: int, r1: int, q: np.ndarray) -> None:
        out[r0:r1] = q

    _run(spans, load, _quantize_task, store, nw, be)
    return out.reshape(*lead, row_bytes)


def _segment(n: int, block: int, max_elems: int) -> int:
    """The longest block-aligned piece length dividing ``n`` that fits ``max_elems``."""
    if n <= max_elems:
        return n
    nb = n // block
    k = max(1, max_elems // block)
    while nb % k:
        k -= 1
    return k * block


# --------------------------------------------------------------------------- dequantize


def _as_bytes(raw, name: str | None) -> np.ndarray:
    if isinstance(raw, np.ndarray):
        if not raw.flags.c_contiguous:
            raw = np.ascontiguousarray(raw)
        return raw.reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(raw, dtype=np.uint8)
    except TypeError:
        raise ByteCountMismatch(
            "raw data is not a byte buffer",
            field=name or "raw",
            expected="a uint8 array or a bytes-like object",
            found=type(raw).__name__,
        ) from None


def _shape(shape, name: str | None) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise InvalidQuantShape(
            "bad shape",
            field=name or "shape",
            expected="a tuple of non-negative integers",
            found=repr(shape),
        )
    return tuple(int(d) for d in dims)


def dequantize(
    raw,
    type: str | int | GGMLType,
    shape,
    *,
    workers: int | None = None,
    name: str | None = None,
    chunk_rows: int | None = None,
    backend: str = "auto",
) -> np.ndarray:
    """Decode ggml ``type`` bytes into a float32 array of ``shape``.

    ``raw`` is a uint8 array (any shape; read in order) or any bytes-like
    object, e.g. a slice of a memory map -- only one chunk of it is touched
    at a time.
    """
    c: Codec = codec(type)
    t = c.type
    if c.dequantize is None:
        raise DequantizeUnsupported(
            f"no dequantizer for {t.name}",
            field=name or "type",
            expected="a known type",
            found=t.name,
        )
    dims = _shape(shape, name)
    data = _as_bytes(raw, name)
    n = dims[-1] if dims else 1
    if n % t.block_size:
        raise RowLengthNotMultiple(
            f"row length is not a multiple of the {t.name} block size",
            field=name or "shape",
            expected=f"a multiple of {t.block_size}",
            found=n,
        )
    count = math.prod(dims)
    want = t.nbytes(count)
    if data.size != want:
        raise ByteCountMismatch(
            f"byte count does not match {count} {t.name} elements",
            field=name or "raw",
            expected=want,
            found=data.size,
        )
    if count == 0:
        return np.empty(dims, dtype=np.float32)
    nrows = count // n
    bpr = n // t.block_size  # blocks per row
    blocks = data.reshape(nrows * bpr, t.type_size)
    nw = _workers(workers)
    be = _backend(backend)
    if be == "auto":  # every decoder is a handful of whole-array operations
        be = "thread"
    if chunk_rows is not None:
        step = _chunk_rows(n, nw, chunk_rows) * bpr  # in blocks
    else:  # blocks decode independently: chunk by blocks, even inside one huge row
        per_chunk = min(MEMORY_BUDGET // (nw * c.dequantize_temp_bytes), DEQUANTIZE_CHUNK)
        step = max(1, per_chunk // t.block_size)
    spans = _spans(
        nrows * bpr, step, nw, max(1, MIN_CHUNK // t.block_size) if chunk_rows is None else step
    )
    if len(spans) == 1:  # one chunk: the codec's own result is the output, no copy
        y = _dequantize_task(t.name, np.ascontiguousarray(blocks))
        return np.ascontiguousarray(y, dtype=np.float32).reshape(dims)
    plan = _plan(be, nw, len(spans))
    out = _empty((count,), np.float32, plan)
    outb = out.reshape(nrows * bpr, t.block_size)
    # in this process, a decoder that can write into its slice of the output
    # does so: no chunk result is copied
    direct = plan in ("serial", "thread") and getattr(c.dequantize, "fills_out", False)

    def load(b0: int, b1: int) -> tuple:
        blk = np.ascontiguousarray(blocks[b0:b1])
        return (t.name, blk, outb[b0:b1]) if direct else (t.name, blk)

    def store(b0: int, b1: int, y: np.ndarray) -> None:
        if not direct:
            outb[b0:b1] = y

    _run(spans, load, _dequantize_task, store, nw, be)
    return out.reshape(dims)
