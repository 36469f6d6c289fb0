"""Hypothesis round trip over random dtypes, shapes, names and metadata."""

from __future__ import annotations

import numpy as np
import safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import weightsmith
import weightsmith.numpy as ws_np
from weightsmith.dtypes import SAFETENSORS

CODES = list(SAFETENSORS)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def tensor(draw):
    code = draw(st.sampled_from(CODES))
    d = SAFETENSORS[code]
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    n = int(np.prod(shape, dtype=np.int64))
    if d.packed:
        group = 2 if d.bits == 4 else 4
        shape = (*shape, group)  # whole bytes: a multiple of the packing group
        n *= group
        data = np.frombuffer(draw(st.binary(min_size=n, max_size=n)), np.uint8) & (
            (1 << d.bits) - 1
        )
        return data.view(d.numpy).reshape(shape)
    if code == "BOOL":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)
    raw = draw(st.binary(min_size=n * d.itemsize, max_size=n * d.itemsize))
    return np.frombuffer(raw, d.numpy).reshape(shape)


files = st.dictionaries(text.filter(lambda s: s != "__metadata__"), tensor(), max_size=6)
metadatas = st.none() | st.dictionaries(text, text, max_size=4)


def _bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tensors=files, metadata=metadatas)
def test_round_trip(tmp_path, tensors, metadata):
    blob = ws_np.save(tensors, metadata)
    # HF parses and validates it, and sees the same tensors
    parsed = dict(safetensors.deserialize(blob))
    assert set(parsed) == set(tensors)
    for k, v in tensors.items():
        assert parsed[k]["dtype"] == weightsmith.dtypes.from_numpy(v.dtype).name
        assert list(parsed[k]["shape"]) == list(v.shape)
    # we read back exactly what we wrote, through every path
    p = tmp_path / "r.safetensors"
    p.write_bytes(blob)
    for mmap in (True, False):
        with weightsmith.safe_open(p, mmap=mmap) as f:
            assert f.metadata() == (dict(metadata) if metadata is not None else None)
            assert f.keys() == sorted(tensors)
            for k, v in tensors.items():
                got = f.get_tensor(k)
                assert got.dtype == v.dtype and got.shape == v.shape
                assert _bytes(got) == _bytes(v)
    # header is 8-byte aligned and the writer is deterministic
    n = int.from_bytes(blob[:8], "little")
    assert n % 8 == 0
    assert ws_np.save(dict(reversed(list(tensors.items()))), metadata) == blob
