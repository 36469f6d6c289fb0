"""``weightsmith quantize`` against llama.cpp's own llama_model_quantize (via llama-cpp-python).

The oracle file is written by libllama from the same f32 GGUF; ours must be
byte-identical (same per-tensor types from the recipe, same blocks, same KV
order), with and without an importance matrix.
"""

from __future__ import annotations

import ctypes
import struct

import gguf
import numpy as np
import pytest

from support.cli_helpers import assert_one_line_error, run
from support.recipe_models import ModelSpec, llama_quantize, write_model

SPEC = ModelSpec("tiny", "llama", 2, 256, 256, 4, 2)


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("quantize") / "f32.gguf"
    write_model(SPEC, path)
    return path


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_K_M", "Q5_0"])
def test_byte_identical_to_llama_quantize(f32_model, tmp_path, ftype):
    llama_quantize(f32_model, tmp_path / "ref.gguf", ftype)
    p = run("quantize", f32_model, tmp_path / "ours.gguf", "--type", ftype.lower())
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "ours.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()


def _imatrix_values(rng) -> dict[str, np.ndarray]:
    return {
        name: rng.uniform(0.1, 4.0, shape[-1]).astype(np.float32)
        for name, shape in SPEC.tensors()
        if len(shape) == 2
    }


def _write_gguf_imatrix(path, sums: dict[str, np.ndarray], count: float) -> None:
    w = gguf.GGUFWriter(str(path), "imatrix")
    w.add_array("imatrix.datasets", ["wiki.train.raw"])
    w.add_uint32("imatrix.chunk_count", 7)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, s in sums.items():
        w.add_tensor(f"{name}.in_sum2", s)
        w.add_tensor(f"{name}.counts", np.array([count], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _llama_quantize_with(src, dst, ftype, weights: dict[str, np.ndarray]) -> None:
    """llama_model_quantize with exactly these (already normalised) importance weights."""
    import llama_cpp

    from weightsmith.quant.recipes import file_type

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = 2
    params.ftype = file_type(ftype).id
    arr = (llama_cpp.llama_model_imatrix_data * (len(weights) + 1))()
    keep = []
    for i, (name, data) in enumerate(weights.items()):
        data = np.ascontiguousarray(data, dtype=np.float32)
        keep.append(data)
        arr[i].name = name.encode()
        arr[i].data = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        arr[i].size = data.size
    arr[len(weights)].name = None
    params.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0


def _tensors(path) -> dict[str, tuple[str, bytes]]:
    r = gguf.GGUFReader(str(path))
    return {t.name: (t.tensor_type.name, t.data.tobytes()) for t in r.tensors}


@pytest.mark.parametrize("ftype", ["IQ4_XS", "Q4_K_M"])
def test_gguf_imatrix_matches_llama_quantize(f32_model, tmp_path, ftype):
    rng = np.random.default_rng(5)
    sums = _imatrix_values(rng)
    count = 3.0
    _write_gguf_imatrix(tmp_path / "imatrix.gguf", sums, count)
    # llama-quantize divides the sums by the (rounded) count, in float32
    _llama_quantize_with(
        f32_model, tmp_path / "ref.gguf", ftype, {k: v / np.float32(count) for k, v in sums.items()}
    )
    p = run(
        "quantize",
        f32_model,
        tmp_path / "ours.gguf",
        "--type",
        ftype,
        "--imatrix",
        tmp_path / "imatrix.gguf",
    )
    assert p.returncode == 0, p.stderr
    assert _tensors(tmp_path / "ours.gguf") == _tensors(tmp_path / "ref.gguf")
    f = gguf.GGUFReader(str(tmp_path / "ours.gguf")).fields
    keys = list(f)
    assert keys[-6:] == [
        "general.quantization_version", "general.file_type", "quantize.imatrix.file",
        "quantize.imatrix.dataset", "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count",
    ]  # fmt: skip
    assert f["quantize.imatrix.dataset"].contents() == "wiki.train.raw"
    assert f["quantize.imatrix.entries_count"].contents() == len(sums)
    assert f["quantize.imatrix.chunks_count"].contents() == 7


def test_legacy_imatrix(f32_model, tmp_path):
    rng = np.random.default_rng(6)
    sums = _imatrix_values(rng)
    ncall = 4
    blob = bytearray(struct.pack("<i", len(sums)))
    for name, s in sums.items():
        blob += (
            struct.pack("<i", len(name))
            + name.encode()
            + struct.pack("<ii", ncall, s.size)
            + s.tobytes()
        )
    blob += struct.pack("<i", 9) + struct.pack("<i", 4) + b"data"
    (tmp_path / "imatrix.dat").write_bytes(bytes(blob))
    _llama_quantize_with(
        f32_model,
        tmp_path / "ref.gguf",
        "IQ4_NL",
        {k: v / np.float32(ncall) for k, v in sums.items()},
    )
    p = run(
        "quantize",
        f32_model,
        tmp_path / "ours.gguf",
        "--type",
        "IQ4_NL",
        "--imatrix",
        tmp_path / "imatrix.dat",
    )
    assert p.returncode == 0, p.stderr
    assert _tensors(tmp_path / "ours.gguf") == _tensors(tmp_path / "ref.gguf")


def test_refusals_are_named(f32_model, tmp_path):
    llama_quantize(f32_model, tmp_path / "q8.gguf", "Q8_0")
    # quantized sources are not requantized
    assert_one_line_error(
        run("quantize", tmp_path / "q8.gguf", tmp_path / "x.gguf", "--type", "q4_0"),
        "RequantizeRefused",
    )
    assert_one_line_error(
        run("quantize", f32_model, tmp_path / "x.gguf", "--type", "nope"), "UnknownFileType"
    )
    # very low-bit types need an importance matrix
    assert_one_line_error(
        run("quantize", f32_model, tmp_path / "x.gguf", "--type", "iq2_xxs"), "ImatrixRequired"
    )
    assert not (tmp_path / "x.gguf").exists()
    bad = tmp_path / "bad.dat"
    bad.write_bytes(
        struct.pack("<i", 1)
        + struct.pack("<i", 3)
        + b"abc"
        + struct.pack("<ii", 1, 2)
        + b"\0\0\xc0\x7f" * 2
    )
    assert_one_line_error(
        run("quantize", f32_model, tmp_path / "x.gguf", "--type", "q4_0", "--imatrix", bad),
        "InvalidImatrix",
    )


def test_trailing_unit_dims_dropped_as_llama_quantize(tmp_path):
    """A tensor stored as [n, 1] (Mamba 2's ssm_norm with one group, as the converter writes
    it) comes out of llama-quantize 1-D: libllama keeps ggml_n_dims dims.  Ours too."""
    src = tmp_path / "f32.gguf"
    write_model(SPEC, src, unit_dim=frozenset({"output_norm.weight"}))
    llama_quantize(src, tmp_path / "ref.gguf", "Q4_K_M")
    p = run("quantize", src, tmp_path / "ours.gguf", "--type", "q4_k_m")
    assert p.returncode == 0, p.stderr
    ref = gguf.GGUFReader(str(tmp_path / "ref.gguf"))
    assert [t.shape.tolist() for t in ref.tensors if t.name == "output_norm.weight"] == [[256]]
    del ref
    assert (tmp_path / "ours.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()
