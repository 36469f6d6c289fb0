"""The public quantization API: type lookup, info, named errors, chunking, workers.

Bit-exactness itself is covered by test_quant_golden.py and test_quant_ggml.py;
here the oracle for "chunked" and "threaded" results is ggml on the whole
tensor at once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest

import weightsmith.quant as Q
from support import ggml_ref
from weightsmith.dtypes import GGML, ggml_type
from weightsmith.errors import (
    ByteCountMismatch,
    ImatrixLengthMismatch,
    ImatrixRequired,
    InvalidImatrix,
    InvalidQuantShape,
    InvalidWorkers,
    NonFiniteInput,
    QuantError,
    RowLengthNotMultiple,
    UnknownQuantType,
    UnsupportedDequantizeType,
    UnsupportedQuantizeType,
    WeightsmithError,
)


def _x(rows: int, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, n)).astype(np.float32) * 0.02


# --------------------------------------------------------------------------- lookup and info


@pytest.mark.parametrize("spec", ["Q4_K", "q4_k", "Q4_k", 12, np.int32(12), GGML["Q4_K"]])
def test_type_lookup_by_name_number_or_entry(spec) -> None:
    assert Q.info(spec).name == "Q4_K"


def test_info_fields() -> None:
    i = Q.info("IQ4_XS")
    assert (i.name, i.id, i.block_size, i.type_size) == ("IQ4_XS", 23, 256, 136)
    assert i.bits_per_weight == 4.25
    assert i.can_dequantize and i.can_quantize and not i.requires_imatrix
    assert Q.info("Q8_1").can_quantize is False and Q.info("Q8_1").can_dequantize
    assert Q.info("iq2_xxs").requires_imatrix


def test_every_ggml_type_dequantizes() -> None:
    assert set(Q.types()) == set(GGML)


ISSUE_QUANTIZE = [
    "F16",
    "BF16",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
    "TQ1_0",
    "TQ2_0",
    "MXFP4",
    "NVFP4",
    "Q1_0",
    "Q2_0",
]


def test_issue_quantize_list_is_registered() -> None:
    assert set(ISSUE_QUANTIZE) <= set(Q.types(quantize=True))


# --------------------------------------------------------------------------- named errors


@pytest.mark.parametrize("bad", ["Q4_Z", 999, -1, 3.5, None, "", True])
def test_unknown_type(bad) -> None:
    with pytest.raises(UnknownQuantType) as e:
        Q.info(bad)
    assert isinstance(e.value, QuantError) and isinstance(e.value, ValueError)
    assert isinstance(e.value, WeightsmithError)
    with pytest.raises(UnknownQuantType):
        Q.quantize(_x(1, 32), bad)
    with pytest.raises(UnknownQuantType):
        Q.dequantize(np.zeros(18, np.uint8), bad, (32,))


def test_row_length_not_multiple() -> None:
    with pytest.raises(RowLengthNotMultiple) as e:
        Q.quantize(_x(2, 48), "Q4_0", name="blk.0.attn_q.weight")
    msg = str(e.value)
    assert "blk.0.attn_q.weight" in msg and "multiple of 32" in msg and "48" in msg
    with pytest.raises(RowLengthNotMultiple):
        Q.quantize(_x(2, 128), "Q4_K")
    with pytest.raises(RowLengthNotMultiple):
        Q.dequantize(np.zeros(144, np.uint8), "Q4_K", (2, 128))


@pytest.mark.parametrize("nbytes", [0, 17, 19, 36 + 1, 18 * 3])
def test_byte_count_mismatch(nbytes: int) -> None:
    with pytest.raises(ByteCountMismatch) as e:
        Q.dequantize(np.zeros(nbytes, np.uint8), "Q4_0", (2, 32))
    assert "36" in str(e.value) and str(nbytes) in str(e.value)


def test_dequantize_raw_not_bytes() -> None:
    with pytest.raises(ByteCountMismatch):
        Q.dequantize(12345, "Q4_0", (32,))


@pytest.mark.parametrize("shape", [(-32,), (2, "32"), 2.0, None, (True, 32)])
def test_bad_shape(shape) -> None:
    with pytest.raises(InvalidQuantShape):
        Q.dequantize(np.zeros(36, np.uint8), "Q4_0", shape)


def test_quantize_scalar_or_non_numeric() -> None:
    with pytest.raises(InvalidQuantShape):
        Q.quantize(np.float32(1), "F16")
    with pytest.raises(InvalidQuantShape):
        Q.quantize(np.array([["a"] * 32]), "Q4_0")


@pytest.mark.parametrize("length", [31, 33, 0])
def test_imatrix_wrong_length(length: int) -> None:
    with pytest.raises(ImatrixLengthMismatch) as e:
        Q.quantize(_x(2, 32), "Q4_0", np.ones(length, np.float32))
    assert "(32,)" in str(e.value)
    with pytest.raises(ImatrixLengthMismatch):
        Q.quantize(_x(2, 32), "Q4_0", np.ones((1, 32), np.float32))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, -1.0])
def test_imatrix_bad_values(value: float) -> None:
    im = np.ones(64, np.float32)
    im[40] = value
    with pytest.raises(InvalidImatrix) as e:
        Q.quantize(_x(2, 64), "Q4_0", im)
    assert "column 40" in str(e.value)


def test_imatrix_required(monkeypatch) -> None:
    """IQ2_XXS/IQ2_XS/IQ1_S need an imatrix; checked before any quantizer runs."""
    from dataclasses import replace

    from weightsmith.quant import registry

    calls = []
    table = dict(registry._table())
    for name in registry.REQUIRES_IMATRIX:
        table[name] = replace(table[name], quantize=lambda rows, im: calls.append(im))
    monkeypatch.setattr(registry, "_codecs", table)
    for name in sorted(registry.REQUIRES_IMATRIX):
        with pytest.raises(ImatrixRequired, match=name):
            Q.quantize(_x(1, 256), name)
    assert calls == []


@pytest.mark.parametrize("qtype", ["Q8_1", "Q8_K"])
def test_quantize_unsupported(qtype: str) -> None:
    with pytest.raises(UnsupportedQuantizeType):
        Q.quantize(_x(1, 256), qtype)


def test_dequantize_unsupported_is_a_named_error() -> None:
    # every ggml type has a dequantizer today; the class exists for the registry contract
    assert issubclass(UnsupportedDequantizeType, QuantError)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(
    "qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS", "TQ1_0", "MXFP4"]
)
def test_non_finite_input(qtype: str, value: float) -> None:
    x = _x(3, 256)
    x[2, 77] = value
    with pytest.raises(NonFiniteInput) as e:
        Q.quantize(x, qtype, name="tok_embd")
    assert "row 2, column 77" in str(e.value) and "tok_embd" in str(e.value)


@pytest.mark.parametrize("qtype", ["F16", "BF16", "F32"])
def test_float_types_keep_nan_and_inf(qtype: str) -> None:
    x = np.array([[np.nan, np.inf, -np.inf, 1e6, -0.0, 1.0]], np.float32)
    got = Q.quantize(x, qtype)
    assert np.array_equal(got, ggml_ref.quantize(x, qtype))


@pytest.mark.parametrize("workers", [-1, 1.5, "2", True])
def test_invalid_workers(workers) -> None:
    with pytest.raises(InvalidWorkers):
        Q.quantize(_x(4, 32), "Q4_0", workers=workers)


def test_errors_pickle() -> None:
    import pickle

    err = NonFiniteInput("x", field="t", expected="finite values", found="nan")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is NonFiniteInput and str(back) == str(err)


# --------------------------------------------------------------------------- shapes and inputs


def test_leading_dims_and_dtypes() -> None:
    x = _x(6, 64).reshape(2, 3, 64)
    got = Q.quantize(x, "Q4_0")
    assert got.shape == (2, 3, 36)
    assert np.array_equal(got.reshape(6, 36), ggml_ref.quantize(x.reshape(6, 64), "Q4_0"))
    # float64 input is rounded to float32 first, as ggml takes float*
    assert np.array_equal(Q.quantize(x.astype(np.float64), "Q4_0"), got)
    back = Q.dequantize(got, "Q4_0", (2, 3, 64))
    assert back.shape == (2, 3, 64) and back.dtype == np.float32
    assert np.array_equal(Q.dequantize(got.tobytes(), "q4_0", [2, 3, 64]), back)
    assert np.array_equal(Q.dequantize(memoryview(got.tobytes()), 2, (6, 64)), back.reshape(6, 64))


@pytest.mark.parametrize(
    "qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "TQ1_0", "MXFP4"]
)
@pytest.mark.parametrize("blocks", [1, 8193])  # a 1-block tile's transpose is already contiguous
def test_quantize_leaves_the_input_unchanged(qtype: str, blocks: int) -> None:
    bs = Q.info(qtype).block_size
    x = _x(1, bs * blocks)
    before = x.copy()
    Q.quantize(x, qtype)
    assert np.array_equal(x, before)


def test_non_contiguous_input() -> None:
    base = _x(64, 10)
    xt = base.T  # [10, 64], Fortran order
    assert not xt.flags.c_contiguous
    want = ggml_ref.quantize(np.ascontiguousarray(xt), "Q8_0")
    assert np.array_equal(Q.quantize(xt, "Q8_0", chunk_rows=3), want)
    assert np.array_equal(Q.quantize(xt, "Q8_0", chunk_rows=3, workers=2), want)
    strided = _x(8, 128)[:, ::2]
    assert np.array_equal(
        Q.quantize(strided, "Q4_1"), ggml_ref.quantize(np.ascontiguousarray(strided), "Q4_1")
    )


def test_empty_tensors() -> None:
    assert Q.quantize(np.zeros((0, 256), np.float32), "Q4_K").shape == (0, 144)
    assert Q.dequantize(np.zeros(0, np.uint8), "Q4_K", (0, 256)).shape == (0, 256)


def test_input_untouched() -> None:
    x = _x(4, 256)
    im = np.ones(256, np.float32)
    x0, im0 = x.copy(), im.copy()
    Q.quantize(x, "Q4_K", im)
    Q.quantize(x, "Q4_1", im)
    assert np.array_equal(x, x0) and np.array_equal(im, im0)


# --------------------------------------------------------------------------- chunks and workers

CHUNK_TYPES = [
    "F16",
    "BF16",
    "Q4_0",
    "Q4_1",
    "Q5_1",
    "Q8_0",
    "Q4_K",
    "Q6_K",
    "IQ4_XS",
    "TQ1_0",
    "NVFP4",
]


@pytest.mark.parametrize("qtype", CHUNK_TYPES)
def test_chunk_size_does_not_change_the_result(qtype: str) -> None:
    x = _x(23, 512, seed=5)
    im = np.random.default_rng(6).random(512, dtype=np.float32) + np.float32(0.01)
    want = ggml_ref.quantize(x, qtype, im)
    for chunk_rows in (1, 2, 7, 23, 100):
        got = Q.quantize(x, qtype, im, chunk_rows=chunk_rows)
        assert np.array_equal(got, want), chunk_rows
        back = Q.dequantize(got, qtype, x.shape, chunk_rows=chunk_rows)
        assert np.array_equal(
            back.view(np.uint32), Q.dequantize(got, qtype, x.shape).view(np.uint32)
        )


@pytest.mark.parametrize(
    "qtype", ["F16", "Q4_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K", "IQ4_NL", "MXFP4", "TQ1_0"]
)
def test_threads_give_the_single_thread_result(qtype: str) -> None:
    """Bytes and floats never depend on the thread count, with default or tiny chunks."""
    x = _x(40, 256, seed=9)
    one = Q.quantize(x, qtype)
    back = Q.dequantize(one, qtype, x.shape)
    assert np.array_equal(one, ggml_ref.quantize(x, qtype))
    for workers in (2, 3, 0):
        for kw in ({}, {"chunk_rows": 3}):
            assert np.array_equal(Q.quantize(x, qtype, workers=workers, **kw), one), (workers, kw)
            got = Q.dequantize(one, qtype, x.shape, workers=workers, **kw)
            assert np.array_equal(got.view(np.uint32), back.view(np.uint32)), (workers, kw)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0", "IQ4_XS", "F16", "BF16", "TQ2_0"])
def test_half_and_other_inputs_give_the_float32_result(qtype: str) -> None:
    """float16 / bfloat16 rows are widened in the pool's threads, other dtypes and byte
    orders converted first: the bytes of the same values as float32, any thread count."""
    import ml_dtypes

    x = _x(48, 512, seed=5)
    for dtype in (np.float16, ml_dtypes.bfloat16, np.dtype(">f4"), np.float64):
        y = x.astype(dtype)
        want = Q.quantize(y.astype(np.float32), qtype)
        for workers in (1, 2):
            assert np.array_equal(Q.quantize(y, qtype, workers=workers), want), (dtype, workers)
    strided = x.astype(np.float16)[::2]
    assert np.array_equal(Q.quantize(strided, qtype), Q.quantize(strided.astype(np.float32), qtype))
    ints = (x * 1000).astype(np.int16)
    assert np.array_equal(Q.quantize(ints, qtype), Q.quantize(ints.astype(np.float32), qtype))


def test_one_pool_batch_of_mixed_spans() -> None:
    """A batch of spans of several types and source dtypes, on 1-3 threads and with
    one-row units: each span's bytes are those of quantize() alone; the index of the
    first span holding NaN comes back whatever the timing; bad spans are refused
    before anything runs."""
    import ml_dtypes

    from weightsmith._native import pool
    from weightsmith.quant._engine import Span, pool_source, quantize_spans
    from weightsmith.quant.registry import codec

    x = _x(96, 512, seed=12)
    im = np.linspace(0.5, 2.0, 512, dtype=np.float32)
    jobs = [("Q4_K", x, None), ("Q5_0", x.astype(np.float16), im), ("IQ4_XS", x, im),
            ("Q8_0", x.astype(ml_dtypes.bfloat16), None), ("F16", x[:7], None)]  # fmt: skip
    want = [Q.quantize(v, t, w) for t, v, w in jobs]
    for workers in (1, 2, 3):
        outs = [np.empty_like(w) for w in want]
        quantize_spans([Span(t, v, o, w, t) for (t, v, w), o in zip(jobs, outs)], workers)
        assert all(np.array_equal(o, w) for o, w in zip(outs, want)), workers
        entries = []
        for (t, v, w), o in zip(jobs, outs):
            src, kind = pool_source(v)
            entries.append((codec(t).quantize.kernel(), src, kind, o, 512, w))
        assert pool.quantize(entries, workers, unit_rows=1) == -1
        assert all(np.array_equal(o, w) for o, w in zip(outs, want)), workers
    bad = x.copy()
    bad[50, 7] = np.inf
    k = codec("Q4_0").quantize.kernel()
    out = np.empty((96, 16 * 18), np.uint8)
    spans = [(k, x, 0, out.copy(), 512, None), (k, bad, 0, out.copy(), 512, None),
             (k, bad, 0, out.copy(), 512, None)]  # fmt: skip
    for workers in (1, 2, 3):
        assert pool.quantize(spans, workers, unit_rows=3) == 1
    with pytest.raises(NonFiniteInput, match="row 50, column 7"):
        quantize_spans([Span("Q4_K", x, np.empty_like(want[0]), None, "w"),
                        Span("Q4_K", bad, np.empty_like(want[0]), None, "w")], 2)  # fmt: skip
    for entry, error in (
        ((k, x, 0, out[:95], 512, None), ValueError),  # output too small
        ((k, x, 0, out, 500, None), ValueError),  # row length not a block multiple
        ((k, x, 3, out, 512, None), ValueError),  # unknown source type
        ((k, x, 0, out, 512, im[:100]), ValueError),  # imatrix length
        (
            (codec("IQ2_XS").quantize.kernel(), x, 0, np.empty((96, 2 * 74), np.uint8), 512, None),
            ValueError,
        ),  # an imatrix is required
        (("not a kernel", x, 0, out, 512, None), (TypeError, ValueError)),
        ((k, x, 0, out.tobytes(), 512, None), (TypeError, BufferError)),  # read-only output
    ):
        with pytest.raises(error):
            pool.quantize([(k, x, 0, out, 512, None), entry], 2)


def test_threads_on_a_large_tensor_match_one_thread() -> None:
    """Several kernel chunks per thread on 2 and 3 threads: the same bytes as 1 thread."""
    x = _x(512, 512, seed=11)
    for qtype in ("Q4_0", "Q8_0", "NVFP4", "Q2_0"):
        one = Q.quantize(x, qtype)
        for workers in (2, 3):
            assert np.array_equal(Q.quantize(x, qtype, workers=workers), one), (qtype, workers)
            assert np.array_equal(
                Q.dequantize(one, qtype, x.shape, workers=workers).view(np.uint32),
                Q.dequantize(one, qtype, x.shape).view(np.uint32),
            )


def _kernel_threads() -> int:
    """Threads of this process named by the kernels' pool (csrc/ws_threads.h)."""
    names = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            names.append(comm.read_text().strip())
    return names.count("weightsmith-qnt")


def test_threads_are_one_pool_in_this_process() -> None:
    """workers=k runs on threads of this process: no child process is started."""
    import multiprocessing

    x = _x(64, 4096, seed=2)
    Q.quantize(x, "Q4_K", workers=2)
    Q.dequantize(Q.quantize(x, "Q8_0"), "Q8_0", x.shape, workers=2)
    assert multiprocessing.active_children() == []
    assert _kernel_threads() >= 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_threads_work_in_a_forked_child() -> None:
    """A child forked after the pool started gets a pool of its own: its threads run
    (the parent's do not exist there), with the same bytes and no hang."""
    import time
    import warnings

    x = _x(64, 4096, seed=3)
    want = Q.quantize(x, "Q4_0", workers=2)  # the pool's threads exist now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # child: exit 0 only if the result is right and came from a live helper
        ok = np.array_equal(Q.quantize(x, "Q4_0", workers=2), want)
        os._exit(0 if ok and _kernel_threads() >= 1 else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("quantize with workers=2 hung in a forked child")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_error_in_a_worker_is_raised(workers: int) -> None:
    x = _x(40, 256)
    x[37, 3] = np.nan
    for qtype in ("Q4_K", "Q4_0", "MXFP4"):
        with pytest.raises(NonFiniteInput, match="row 37, column 3"):
            Q.quantize(x, qtype, workers=workers, chunk_rows=4)


def test_invalid_backend() -> None:
    with pytest.raises(InvalidWorkers):
        Q.quantize(_x(4, 32), "Q4_0", workers=2, backend="gpu")


def test_process_backends_are_gone() -> None:
    """The fork and process-pool backends were removed (issue 16): naming one is an
    error that says so, not a silent switch to threads."""
    x = _x(8, 64)
    want = Q.quantize(x, "Q4_0")
    for backend in ("auto", "thread"):
        assert np.array_equal(Q.quantize(x, "Q4_0", workers=2, backend=backend), want)
    for backend in ("process", "pool"):
        with pytest.raises(InvalidWorkers, match="process backends were removed"):
            Q.quantize(x, "Q4_0", workers=2, backend=backend)
        with pytest.raises(InvalidWorkers, match="process backends were removed"):
            Q.dequantize(want, "Q4_0", x.shape, backend=backend)


def test_default_chunks_follow_the_memory_budget() -> None:
    from weightsmith.quant import MEMORY_BUDGET
    from weightsmith.quant._engine import chunk_rows
    from weightsmith.quant.registry import codec

    for name in ("Q4_K", "MXFP4", "F16"):
        per_elem = codec(name).quantize_temp_bytes
        rows = chunk_rows(4096, 1, None, per_elem)
        assert rows * 4096 * per_elem <= MEMORY_BUDGET
        assert chunk_rows(4096, 2, None, per_elem) * 2 <= rows
        assert chunk_rows(10**7, 1, None, per_elem) == 1  # at least one whole row
    assert ggml_type("Q4_K").nbytes(256) == 144


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0", "MXFP4", "TQ2_0", "F16"])
def test_one_huge_row_is_cut_into_bounded_pieces(qtype: str, monkeypatch) -> None:
    """A single row longer than a chunk is split at block boundaries: same bytes, bounded chunks."""
    from weightsmith.quant import _engine as quant
    from weightsmith.quant.registry import codec

    x = _x(2, 3 * 7 * 1024, seed=3)  # rows of 21504 values (672 blocks of 32)
    want = ggml_ref.quantize(x, qtype)
    seen = []
    real = quant.quantize_spans

    def spy(spans, workers):
        seen.extend(s.x.shape for s in spans)
        return real(spans, workers)

    monkeypatch.setattr(quant, "MEMORY_BUDGET", 4096 * codec(qtype).quantize_temp_bytes)
    monkeypatch.setattr(quant, "quantize_spans", spy)
    assert np.array_equal(Q.quantize(x, qtype), want)
    assert max(r * n for r, n in seen) <= 4096
    x[1, 20000] = np.nan
    if qtype != "F16":
        with pytest.raises(NonFiniteInput, match="row 1, column 20000"):
            Q.quantize(x, qtype)


def test_dequantize_chunks_by_blocks_inside_one_row(monkeypatch) -> None:
    from weightsmith.quant import _engine as quant
    from weightsmith.quant.registry import codec

    x = _x(1, 64 * 1024, seed=4)
    raw = ggml_ref.quantize(x, "Q4_K")
    want = ggml_ref.dequantize(raw, "Q4_K", x.size).reshape(x.shape)
    seen = []
    real = quant.dequantize_task

    def spy(type_name, blocks, *out):  # out: the output slice a decoder writes into
        seen.append(blocks.shape[0])
        return real(type_name, blocks, *out)

    monkeypatch.setattr(quant, "MEMORY_BUDGET", 8192 * codec("Q4_K").dequantize_temp_bytes)
    monkeypatch.setattr(quant, "dequantize_task", spy)
    got = Q.dequantize(raw, "Q4_K", x.shape)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert len(seen) > 1 and max(seen) * 256 <= 8192


@pytest.mark.parametrize("qtype", ["Q4_0", "Q5_1", "Q8_0", "MXFP4", "TQ1_0", "F16", "Q4_K"])
def test_unaligned_buffers(qtype: str) -> None:
    """Inputs at odd addresses (e.g. inside a file mapping) give the same bytes and floats."""
    x = _x(8, 256, seed=7)
    xu = np.frombuffer(b"\0" * 4 + x.tobytes(), dtype=np.float32, offset=4).reshape(8, 256)
    want = ggml_ref.quantize(x, qtype)
    assert np.array_equal(Q.quantize(xu, qtype), want)
    raw = np.frombuffer(b"\0" + want.tobytes(), np.uint8, offset=1)
    got = Q.dequantize(raw, qtype, x.shape)
    if ggml_ref.has_to_float(qtype):
        ref = ggml_ref.dequantize(want, qtype, x.size).reshape(x.shape)
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    else:
        assert np.array_equal(got, x)
