"""Quantizing on a real Ray cluster, and several types from one read of the source.

The cluster is real (``ray start`` head + a second node, on 127.0.0.1) and shut in
a network namespace with only loopback (tests/support/ray_cluster.py).  Every
file it writes must be byte-identical to the one made here on threads.
"""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pytest

from support.hf_models import mixtral
from support.ray_cluster import can_isolate, run_isolated
from support.recipe_models import write_nan_model
from weightsmith import gguf
from weightsmith.convert import hf_to_gguf
from weightsmith.errors import MissingDependencyError
from weightsmith.quant import file as qfile
from weightsmith.quant.file import batch_quantize, quantize_file, quantize_files

TYPES = ["Q4_K_M", "Q8_0", "IQ4_XS"]


def write_source(path, layers: int = 6, rows: int = 1024, n: int = 2048) -> None:
    """An F16 Llama-shaped GGUF: enough row spans that tasks spread over both nodes."""
    rng = np.random.default_rng(0)
    w = gguf.Writer(path)
    w.add("general.architecture", "llama")
    w.add("llama.block_count", layers, type="u32")
    w.add("llama.attention.head_count", 16, type="u32")
    tensors = [("token_embd.weight", (512, n)), ("output_norm.weight", (n,))]
    for i in range(layers):
        tensors += [(f"blk.{i}.ffn_up.weight", (rows, n)), (f"blk.{i}.ffn_down.weight", (n, rows))]
        tensors += [(f"blk.{i}.attn_norm.weight", (n,))]
    for name, shape in tensors:
        w.add_tensor_info(name, "F32" if len(shape) == 1 else "F16", shape)
    for name, shape in tensors:
        x = rng.standard_normal(shape, dtype=np.float32)
        w.write_tensor(name, x if len(shape) == 1 else x.astype(np.float16))
    w.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster") / "model-f16.gguf"
    write_source(path)
    return path


@pytest.fixture(scope="module")
def local(source, tmp_path_factory):
    """Each type quantized on its own, here, on one thread: the reference files."""
    out = tmp_path_factory.mktemp("local")
    for t in TYPES:
        quantize_file(source, out / f"{t}.gguf", t)
    return {t: (out / f"{t}.gguf").read_bytes() for t in TYPES}


def test_several_types_from_one_read_equal_separate_runs(source, local, tmp_path, monkeypatch):
    rows_done: dict[tuple[str, str], int] = {}
    batches = []
    quantize_spans = qfile.quantize_spans

    def counting(spans, workers):
        batches.append(len(spans))
        for s in spans:
            key = (s.name, s.type_name)
            rows_done[key] = rows_done.get(key, 0) + s.x.shape[0]
        return quantize_spans(spans, workers)

    monkeypatch.setattr(qfile, "quantize_spans", counting)
    results = quantize_files(source, {t: tmp_path / f"{t}.gguf" for t in TYPES}, workers=2)
    for t, result in zip(TYPES, results):
        assert (tmp_path / f"{t}.gguf").read_bytes() == local[t], t
        assert result.bits_per_weight > 0
    # one pass over the file: every row of every quantized tensor went to the pool
    # exactly once for each type, the three types of a window in the same batch
    f = gguf.read(source)
    expected = {t.name: t.shape[0] for t in f.tensors if len(t.shape) == 2}
    f.close()
    want: dict[tuple[str, str], int] = {}
    for r in results:  # two outputs may want the same type of a tensor
        for n, rows in expected.items():
            want[n, r[n]] = want.get((n, r[n]), 0) + rows
    assert rows_done == want
    assert len(batches) == 1  # the model fits one window


def test_batch_quantize_names_files_as_the_hub_does(source, local, tmp_path):
    results = batch_quantize(source, ["q4_k_m", "q8_0"], tmp_path / "out")
    names = sorted(p.rsplit("/", 1)[-1] for p in results)
    assert names == ["model-Q4_K_M.gguf", "model-Q8_0.gguf"]
    assert (tmp_path / "out" / "model-Q8_0.gguf").read_bytes() == local["Q8_0"]


def test_ray_missing_is_named(source, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingDependencyError, match=r"weightsmith\[ray\]"):
        quantize_file(source, tmp_path / "x.gguf", "Q8_0", ray="127.0.0.1:1")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def cluster_run(source, tmp_path_factory):
    """The jobs of tests/support/ray_job.py on a 2-node cluster in a namespace."""
    if not can_isolate():
        pytest.fail("this machine cannot make a network namespace (unshare --net as root)")
    work = tmp_path_factory.mktemp("ray")
    (work / "src.gguf").symlink_to(source)
    write_nan_model(work / "nan.gguf")
    mixtral(work / "mixtral")
    r = run_isolated(["-m", "support.ray_job", str(work)], timeout=900)
    results_file = work / "results.json"
    assert results_file.exists(), f"the job wrote no results:\n{r.stdout}\n{r.stderr}"
    results = json.loads(results_file.read_text())
    assert "error" not in results, results["error"]
    return work, results


def test_cluster_has_two_nodes_on_loopback_only(cluster_run):
    _, results = cluster_run
    assert results["nodes"] == 2
    assert results["node_ips"] == ["127.0.0.1"]


def test_cluster_file_is_byte_identical(cluster_run, local):
    work, _ = cluster_run
    assert (work / "out" / "q4_k_m.gguf").read_bytes() == local["Q4_K_M"]


def test_killed_worker_is_retried_and_the_file_is_unchanged(cluster_run, local):
    work, results = cluster_run
    assert len(results["killed"]) == 1, "no worker was caught mid-task"
    assert (work / "out" / "q4_k_m.killed.gguf").read_bytes() == local["Q4_K_M"]


def test_task_error_is_named_and_nothing_is_written(cluster_run):
    _, results = cluster_run
    name, message = results["nan"]
    assert name == "NonFiniteInput"
    assert "row 41, column 7" in message
    assert results["nan_written"] == []


def test_cli_quantize_and_batch_on_the_cluster(cluster_run, local):
    work, results = cluster_run
    for name in ("cli_quantize", "cli_batch", "cli_convert"):
        rc, out, err = results[name]
        assert rc == 0, f"{name}: {out}\n{err}"
    assert (work / "out" / "q8_0.gguf").read_bytes() == local["Q8_0"]
    for t in TYPES:
        assert (work / "out" / "batch" / f"src-{t}.gguf").read_bytes() == local[t], t


def test_hf_to_gguf_on_the_cluster_is_byte_identical(cluster_run, tmp_path):
    work, _ = cluster_run
    for t in ("q4_k_m", "f16"):  # f16: written by the command line
        hf_to_gguf(work / "mixtral", tmp_path / f"{t}.gguf", t)
        ours = (work / "out" / f"mixtral-{t}.gguf").read_bytes()
        assert ours == (tmp_path / f"{t}.gguf").read_bytes(), t


def test_ray_is_refused_where_it_does_not_apply(source, tmp_path, capsys):
    from weightsmith.cli import main

    assert main(["convert", str(source), str(tmp_path / "out"), "--ray", "auto"]) == 1
    assert "UsageError: convert: --ray applies to HF folder -> GGUF" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_nodes_read_a_url_source_with_ranges_each_byte_once(cluster_run, local, source):
    work, results = cluster_run
    assert (work / "out" / "q4_k_m.url.gguf").read_bytes() == local["Q4_K_M"]
    f = gguf.read(source)
    data = [(t.offset, t.offset + t.nbytes) for t in f.tensors]
    f.close()
    fetched = []
    for status, rng, nbytes in results["url_requests"]:
        assert status == 206, (status, rng)
        lo, hi = (int(v) for v in rng.removeprefix("bytes=").split("-"))
        assert hi - lo + 1 == nbytes
        fetched.append((lo, hi + 1))
    # every process that opened the file fetched a prefix (header plus the first
    # tensor bytes, which that process then reuses); past those, no byte was fetched
    # twice, and together they cover every tensor byte
    start, end = min(lo for lo, _ in data), data[-1][1]
    prefixes = [r for r in fetched if r[0] == 0]
    body = sorted(r for r in fetched if r[0] != 0)
    assert 1 <= len(prefixes) <= 8, prefixes
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(body)), "a byte fetched twice"
    covered = sorted([*body, (0, max(hi for _, hi in prefixes))])
    reach = start
    for lo, hi in covered:
        assert lo <= reach, f"bytes {reach}..{lo} never fetched"
        reach = max(reach, hi)
    assert reach >= end
