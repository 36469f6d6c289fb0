"""Inputs that once raised something other than a WeightsmithError, or broke
a crash-safety rule (found by the fuzzers or the reliability harnesses);
each stays fixed.  Deterministic versions of what the harnesses found."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from weightsmith import gguf, torchfile
from weightsmith import safetensors as st
from weightsmith.safetensors import _sharded


def test_scan_of_a_legacy_checkpoint_over_1_mib(tmp_path):
    # torchfile.scan maps files >= 1 MiB; closing the map while the scan
    # result still held views of it raised BufferError.
    p = tmp_path / "legacy.pt"
    torch.save({"w": torch.zeros(400_000)}, p, _use_new_zipfile_serialization=False)
    assert p.stat().st_size > 1 << 20
    report = torchfile.scan(p)
    assert report.layout == "legacy" and report.pickles


def test_scan_of_a_huge_long_over_1_mib(tmp_path):
    big = b"\x8b" + (1 << 20).to_bytes(4, "little") + b"\x01" * (1 << 20)
    p = tmp_path / "big_long.pt"
    p.write_bytes(b"\x80\x02}(X\x01\x00\x00\x00a" + big + b"u.")
    report = torchfile.scan(p)
    assert type(report.pickles[0].findings[-1]).__name__ == "PickleLengthOutOfBounds"


def _tensors(v: int) -> dict[str, np.ndarray]:
    return {f"t{i}": np.full((64, 64), v * 10 + i, np.float32) for i in range(4)}


def _read(folder) -> dict[str, np.ndarray]:
    with st.open_checkpoint(folder) as c:
        return {k: np.array(c.get_tensor(k)) for k in c}


def test_sharded_resave_dying_between_shards_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    # same shard count: the new save reuses the shard names; dying after the
    # first shard used to leave an index naming one new and one old shard
    st.save_sharded(_tensors(1), tmp_path, max_shard_size=40_000)
    calls = []
    real = _sharded.save_file

    def dying(tensors, path, metadata=None):
        if calls:
            raise KeyboardInterrupt  # stands for the kill
        calls.append(path)
        real(tensors, path, metadata)

    monkeypatch.setattr(_sharded, "save_file", dying)
    with pytest.raises(KeyboardInterrupt):
        st.save_sharded(_tensors(2), tmp_path, max_shard_size=40_000)
    got = _read(tmp_path)
    for k, a in _tensors(1).items():
        np.testing.assert_array_equal(got[k], a)
    monkeypatch.setattr(_sharded, "save_file", real)
    st.save_sharded(_tensors(3), tmp_path, max_shard_size=40_000)
    got = _read(tmp_path)
    for k, a in _tensors(3).items():
        np.testing.assert_array_equal(got[k], a)
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".wsold", ".wstmp"))]


def test_sharded_save_over_a_single_file_removes_it(tmp_path):
    st.save_sharded(_tensors(1), tmp_path)
    assert (tmp_path / st.WEIGHTS_NAME).exists()
    st.save_sharded(_tensors(2), tmp_path, max_shard_size=40_000)
    assert not (tmp_path / st.WEIGHTS_NAME).exists()  # transformers would load it first
    np.testing.assert_array_equal(_read(tmp_path)["t0"], _tensors(2)["t0"])


def test_edit_spanning_pages_is_not_patched_in_place(tmp_path):
    p = tmp_path / "m.gguf"
    w = gguf.Writer(p)
    w.add("a", "x" * 6000)  # the KV section spans pages
    w.add("b", 1)
    w.add_tensor_info("t", "F32", (4,))
    w.write_header()
    w.write_tensor("t", np.arange(4, dtype=np.float32))
    w.close()
    ino = os.stat(p).st_ino
    gguf.edit(p, set={"a": "y" * 6000})  # same size, changes over two pages
    assert os.stat(p).st_ino != ino  # atomic rewrite, not a multi-page patch
    ino = os.stat(p).st_ino
    gguf.edit(p, set={"b": 2})  # a one-page change is still patched in place
    assert os.stat(p).st_ino == ino
    with gguf.read(p) as f:
        assert f.metadata["a"] == "y" * 6000 and f.metadata["b"] == 2


@pytest.mark.parametrize(
    "header",
    [
        b'{"a":{"dtype":"U8","shape":[1;2],"data_offsets":[0,2]}}',
        b'{"a":{"dtype":"U8","shape":[;],"data_offsets":[0,2]}}',
        b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0;2]}}',
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[;1],"data_offsets":[1,2]}}',
    ],
)
def test_semicolon_inside_a_number_list_is_invalid_json(header):
    # found by the safetensors fuzz smoke run: the fast header path joins the
    # shape lists with ';' and counted an item's own ';' as a separator
    # (IndexError in _check_fast)
    from weightsmith import errors as E

    data = len(header).to_bytes(8, "little") + header + b"xx"
    with pytest.raises(E.InvalidHeaderJSON):
        st.load(data)


def test_quantize_of_huge_rows_never_crashes():
    # ggml's C quantizers abort the process on these (GGML_ASSERT) for several
    # IQ types; ours must return bytes of the right size or a named error
    from weightsmith import errors as E
    from weightsmith import quant
    from weightsmith.dtypes import GGML
    from weightsmith.quant.registry import codec

    rng = np.random.default_rng(1)
    for name in sorted(n for n in GGML if codec(n).quantize is not None and GGML[n].block_size > 1):
        t = GGML[name]
        n = max(t.block_size, 256)
        x = (rng.standard_normal((2, n)) * 1e20).astype(np.float32)
        im = (rng.random(n) + 0.1).astype(np.float32)
        try:
            raw = np.asarray(quant.quantize(x, name, im))
        except E.WeightsmithError:
            continue
        assert raw.nbytes == 2 * t.nbytes(n), name
        assert quant.dequantize(raw, name, x.shape).shape == x.shape


def test_zip_needing_a_newer_zip_version_is_not_a_torch_file(tmp_path):
    # found by the pickle fuzz smoke run: zipfile raises NotImplementedError
    # ("zip file version 6.4") for a central directory entry whose "version
    # needed to extract" it does not support
    import io

    from weightsmith import errors as E

    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buf)
    data = bytearray(buf.getvalue())
    at = data.index(b"PK\x01\x02")  # first central directory entry
    data[at + 6 : at + 8] = (64).to_bytes(2, "little")  # version needed: 6.4
    p = tmp_path / "v64.pt"
    p.write_bytes(bytes(data))
    with pytest.raises(E.NotATorchFile):
        torchfile.open(p)
    assert torchfile.scan(p).problems
