"""``quantize_file`` with workers: the same bytes as one worker, errors named as with one."""

from __future__ import annotations

import numpy as np
import pytest

from support.recipe_models import ModelSpec, llama_quantize, write_model, write_nan_model
from weightsmith.errors import NonFiniteInput
from weightsmith.quant import file as _file
from weightsmith.quant.file import quantize_file

SPEC = ModelSpec("tiny", "llama", 2, 256, 512, 4, 2)


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("qfile") / "f32.gguf"
    write_model(SPEC, path)
    return path


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q5_0", "Q8_0"])
def test_workers_write_the_same_file(f32_model, tmp_path, ftype) -> None:
    one = tmp_path / "one.gguf"
    plan = quantize_file(f32_model, one, ftype)
    for workers in (2, 3):
        many = tmp_path / f"w{workers}.gguf"
        assert quantize_file(f32_model, many, ftype, workers=workers) == plan
        assert many.read_bytes() == one.read_bytes()


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_sources_match_llama_quantize(tmp_path, dtype) -> None:
    """f16 / bf16 tensors go to the pool as they are (widened there, unit by unit):
    the file llama.cpp writes from the same source, with any thread count."""
    src = tmp_path / f"{dtype}.gguf"
    write_model(SPEC, src, dtype=dtype)
    llama_quantize(src, tmp_path / "ref.gguf", "Q4_K_M")
    for workers in (1, 2):
        quantize_file(src, tmp_path / f"w{workers}.gguf", "Q4_K_M", workers=workers)
        assert (tmp_path / f"w{workers}.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()


def test_small_windows_write_the_same_file(f32_model, tmp_path, monkeypatch) -> None:
    one = tmp_path / "one.gguf"
    quantize_file(f32_model, one, "Q4_K_M")
    monkeypatch.setattr(_file, "WINDOW_BYTES", 40_000)  # a window every tensor or two
    many = tmp_path / "many.gguf"
    quantize_file(f32_model, many, "Q4_K_M", workers=2)
    assert many.read_bytes() == one.read_bytes()


def test_progress_reports_every_tensor(f32_model, tmp_path) -> None:
    calls = []
    quantize_file(f32_model, tmp_path / "p.gguf", "Q4_0", workers=2,
                  progress=lambda *a: calls.append(a))  # fmt: skip
    n = len(SPEC.tensors())
    assert [c[2] for c in calls] == list(range(1, n + 1))
    assert calls[-1][0] == calls[-1][1]


def test_nan_is_named_with_workers(tmp_path) -> None:
    src = tmp_path / "nan.gguf"
    write_nan_model(src)
    for workers in (1, 2):
        with pytest.raises(NonFiniteInput, match="row 41, column 7"):
            quantize_file(src, tmp_path / f"out{workers}.gguf", "Q4_K_M", workers=workers)


def test_imatrix_with_workers(f32_model, tmp_path) -> None:
    import gguf as gguf_py  # gguf-py writes the importance matrix, as llama-imatrix does

    rng = np.random.default_rng(3)
    imatrix = tmp_path / "imatrix.gguf"
    w = gguf_py.GGUFWriter(str(imatrix), "imatrix")
    w.add_array("imatrix.datasets", ["wiki.train.raw"])
    w.add_uint32("imatrix.chunk_count", 7)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, shape in SPEC.tensors():
        if len(shape) == 2:
            w.add_tensor(f"{name}.in_sum2", rng.uniform(0.1, 4.0, shape[-1]).astype(np.float32))
            w.add_tensor(f"{name}.counts", np.array([7.0], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    one, two = tmp_path / "one.gguf", tmp_path / "two.gguf"
    quantize_file(f32_model, one, "IQ4_XS", imatrix=imatrix)
    quantize_file(f32_model, two, "IQ4_XS", imatrix=imatrix, workers=2)
    assert two.read_bytes() == one.read_bytes()
