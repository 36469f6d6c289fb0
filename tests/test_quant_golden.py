"""Every golden vector made by ggml's C code must match, through the public API.

tests/data/golden/ (see its README.md) holds, per type and input set, ggml's
quantized bytes with and without an importance matrix and ggml's dequantized
floats.  Quantized bytes must be identical and dequantized floats equal bit
for bit (NaN included).  A type whose codec is not registered fails.  The
IQ1_*/IQ2_*/IQ3_* quantizers may come later, so for them the quantize case
runs only once a quantizer is registered.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import weightsmith.quant as Q

GOLDEN = Path(__file__).parent / "data" / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())["types"]
LATER = ("IQ1_", "IQ2_", "IQ3_")  # quantizers allowed to come later


@functools.cache
def _load(name: str) -> dict[str, np.ndarray]:
    return load_file(GOLDEN / f"{name}.safetensors")


def _cases():
    for t, meta in MANIFEST.items():
        names = set(_load(t))
        for s in meta["sets"]:
            for path, suf in (("plain", ""), ("imatrix", "_imat")):
                if f"{s}.q{suf}" not in names:
                    continue
                yield pytest.param(t, s, suf, "dequantize", id=f"{t}-{s}-{path}-dequantize")
                later = t.startswith(LATER) and not Q.info(t).can_quantize
                if not later:
                    yield pytest.param(t, s, suf, "quantize", id=f"{t}-{s}-{path}-quantize")


def test_golden_manifest_covers_every_file():
    files = {p.stem for p in GOLDEN.glob("*.safetensors")} - {"inputs"}
    assert files == set(MANIFEST)
    for t, meta in MANIFEST.items():
        info = Q.info(t)
        assert (info.id, info.block_size, info.type_size) == (
            meta["ggml_type"],
            meta["block_size"],
            meta["type_size"],
        )
        assert info.requires_imatrix == meta["requires_imatrix"]


@pytest.mark.parametrize(("qtype", "set_name", "suffix", "op"), list(_cases()))
def test_golden(qtype: str, set_name: str, suffix: str, op: str) -> None:
    gold = _load(qtype)
    inputs = _load("inputs")
    x = inputs[set_name]
    expected_q = gold[f"{set_name}.q{suffix}"]
    if op == "quantize":
        imatrix = inputs[f"{set_name}.imatrix"] if suffix else None
        got = Q.quantize(x, qtype, imatrix)
        assert got.dtype == np.uint8 and got.shape == expected_q.shape
        bad = np.argwhere(got != expected_q)
        assert bad.size == 0, f"{len(bad)} bytes differ, first at [row, byte] {bad[0].tolist()}"
    else:
        got = Q.dequantize(expected_q, qtype, x.shape)
        want = gold[f"{set_name}.deq{suffix}"]
        assert got.dtype == np.float32 and got.shape == want.shape
        bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
        assert bad.size == 0, (
            f"{len(bad)} floats differ, first at {bad[0].tolist()}: "
            f"{got[tuple(bad[0])]!r} vs {want[tuple(bad[0])]!r}"
        )
