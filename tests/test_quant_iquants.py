"""IQ family (IQ1_S ... IQ4_XS) against ggml.

Oracles: the golden vectors in tests/data/golden (made by ggml's C code) and
ggml itself through tests/support/ggml_ref.py on fresh random inputs.  Dequantized
floats must be identical bit for bit; IQ4_NL/IQ4_XS quantized bytes must be
identical, with and without an importance matrix (also for the grid-search
types IQ3_XXS, IQ3_S, IQ2_S, and IQ2_XXS/IQ2_XS, which require one).
"""

from __future__ import annotations

import numpy as np
import pytest

from support import ggml_ref
from support.golden import (
    as_blocks,
    assert_same_bytes,
    assert_same_floats,
    load_golden,
    load_inputs,
)
from support.iq_blocks import random_iq_blocks
from weightsmith.dtypes import ggml_type
from weightsmith.errors import ImatrixRequired
from weightsmith.quant import iquants

DEQ_TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS"]
Q_TYPES = ["IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_S", "IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"]
NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ1_S"}  # ggml asserts an imatrix for these
# the grid-search types are slow (in ggml too): smaller random matrices
SHAPES = {"IQ4_NL": [(5, 256), (48, 768), (2, 4096)], "IQ4_XS": [(5, 256), (48, 768), (2, 4096)]}
GRID_SHAPES = [(5, 256), (6, 768), (1, 2048)]


def _cases() -> list[tuple[str, tuple[int, int], str | None]]:
    out = []
    for name in Q_TYPES:
        imats = (
            ["random", "with_zeros"] if name in NEEDS_IMATRIX else [None, "random", "with_zeros"]
        )
        out += [(name, sh, im) for sh in SHAPES.get(name, GRID_SHAPES) for im in imats]
    return out


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    return load_inputs()


def _golden_pairs(name: str) -> list[str]:
    """The quantized tensors of a golden file (``<set>.q`` / ``<set>.q_imat``)."""
    return sorted(k for k in load_golden(name) if ".q" in k)


@pytest.mark.parametrize(("name", "key"), [(n, k) for n in DEQ_TYPES for k in _golden_pairs(n)])
def test_golden_dequantize(name, key):
    gold = load_golden(name)
    want = gold[key.replace(".q", ".deq")]
    got = iquants.DEQUANTIZE[name](as_blocks(gold[key], name))
    assert_same_floats(got.reshape(want.shape), want)


def test_golden_covers_every_type_and_path():
    # IQ2_XXS, IQ2_XS and IQ1_S exist only with an imatrix (ggml refuses without)
    for name in DEQ_TYPES:
        keys = _golden_pairs(name)
        assert any(k.endswith(".q_imat") for k in keys), name
        assert len(keys) >= 2, name
    assert set(iquants.DEQUANTIZE) == set(DEQ_TYPES)
    assert set(iquants.QUANTIZE) == set(Q_TYPES)


@pytest.mark.parametrize(("name", "key"), [(n, k) for n in Q_TYPES for k in _golden_pairs(n)])
def test_golden_quantize(inputs, name, key):
    dataset = key.split(".")[0]
    im = inputs[f"{dataset}.imatrix"] if key.endswith("_imat") else None
    got = iquants.QUANTIZE[name](inputs[dataset], im)
    assert_same_bytes(got, load_golden(name)[key], name)


def test_golden_quantize_covers_both_paths():
    for name in Q_TYPES:
        keys = _golden_pairs(name)
        want = {"q_imat"} if name in NEEDS_IMATRIX else {"q", "q_imat"}
        assert {k.split(".")[1] for k in keys} == want, name


# ---------------------------------------------------------------- real ggml


@pytest.mark.parametrize("name", DEQ_TYPES)
def test_dequantize_random_blocks_vs_ggml(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    t = ggml_type(name)
    nb = 5000  # more than one internal chunk
    raw = random_iq_blocks(name, nb, rng, 10)
    want = ggml_ref.dequantize(raw, name, nb * t.block_size).reshape(nb, t.block_size)
    assert_same_floats(iquants.DEQUANTIZE[name](raw), want)


def _matrix(kind: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)
    if kind == "heavy":
        return rng.standard_t(2, size=shape).astype(np.float32)
    if kind == "halves":  # many values on ggml's rounding ties
        return (rng.integers(-40, 41, size=shape) / 2).astype(np.float32)
    if kind == "sparse":
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) < 0.9] = 0
        return x
    if kind == "zero_subblocks":  # whole 32-blocks of zeros (IQ3_S slot quirk)
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1, 32)[rng.random(x.size // 32) < 0.3] = 0
        return x
    if kind == "positive":  # one sign only
        return np.abs(rng.standard_normal(shape)).astype(np.float32)
    if kind == "tiny":
        return (rng.standard_normal(shape) * 1e-20).astype(np.float32)
    if kind == "big":
        return (rng.standard_normal(shape) * 1e4).astype(np.float32)
    raise AssertionError(kind)


KINDS = ["normal", "heavy", "halves", "sparse", "zero_subblocks", "positive", "tiny", "big"]


@pytest.mark.parametrize(("name", "shape", "imat"), _cases())
def test_quantize_random_vs_ggml(name, shape, imat):
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    if imat is None:
        im = None
    elif imat == "random":
        im = (rng.random(shape[1]) * 10).astype(np.float32)
    else:
        im = rng.integers(0, 4, size=shape[1]).astype(np.float32)
    for kind in KINDS:
        x = _matrix(kind, shape, rng)
        want = ggml_ref.quantize(x, name, im)
        got = iquants.QUANTIZE[name](x, im)
        assert_same_bytes(got, want, f"{name} {kind}")
        # and the round trip through both dequantizers agrees
        n = x.size
        assert_same_floats(
            iquants.DEQUANTIZE[name](as_blocks(got, name)).reshape(n),
            ggml_ref.dequantize(want, name, n),
        )


@pytest.mark.parametrize("name", Q_TYPES)
def test_quantize_single_block_rows_vs_ggml(name):
    # one block per call: the sequential sums then run over one column
    bs = ggml_type(name).block_size
    rng = np.random.default_rng(11)
    for kind in KINDS:
        x = _matrix(kind, (1, bs), rng)
        im = (rng.random(bs) + 0.5).astype(np.float32)
        for imat in (im,) if name in NEEDS_IMATRIX else (None, im):
            assert_same_bytes(
                iquants.QUANTIZE[name](x, imat), ggml_ref.quantize(x, name, imat), kind
            )


def test_quantize_large_matrix_spans_chunks_vs_ggml():
    # more rows than one internal chunk, imatrix rows repeat per row
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((300, 1024)) * 0.05).astype(np.float32)
    im = (rng.random(1024) + 0.01).astype(np.float32)
    for name in ("IQ4_NL", "IQ4_XS", "IQ3_S"):
        assert_same_bytes(iquants.QUANTIZE[name](x, im), ggml_ref.quantize(x, name, im), name)


@pytest.mark.parametrize("name", ["IQ4_NL", "IQ4_XS"])
def test_quantize_huge_and_nonfinite_values_vs_ggml(name):
    # x*x overflows to inf inside ggml's search; inf inputs (which the public
    # API rejects) still give ggml's bytes: NaN scales, clamped indices.
    rng = np.random.default_rng(9)
    mags = np.float32(10.0) ** rng.integers(-40, 38, (4, 512))
    cases = [
        (rng.standard_normal((4, 512)) * 1e20).astype(np.float32),
        (rng.standard_normal((4, 512)) * mags).astype(np.float32),
        np.full((4, 512), 3.4e38, np.float32),
        np.where(rng.random((4, 512)) < 0.05, np.float32(np.inf), np.float32(1.0)),
    ]
    im = (rng.random(512) + 0.1).astype(np.float32)
    with np.errstate(all="ignore"):
        for x in cases:
            for imat in (None, im):
                assert_same_bytes(
                    iquants.QUANTIZE[name](x, imat), ggml_ref.quantize(x, name, imat), name
                )


@pytest.mark.parametrize("name", Q_TYPES)
def test_quantize_nonfinite_input_does_not_crash(name):
    # ggml aborts on these for the grid types; the codec must still return
    # well-formed bytes (the public API rejects non-finite input earlier)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    x[0, 3], x[1, 100], x[2, ::7] = np.nan, np.inf, -np.inf
    im = (rng.random(512) + 0.1).astype(np.float32)
    t = ggml_type(name)
    with np.errstate(all="ignore"):
        q = iquants.QUANTIZE[name](x, im)
    assert q.dtype == np.uint8 and q.shape == (3, 512 // t.block_size * t.type_size)


@pytest.mark.parametrize("name", sorted(NEEDS_IMATRIX))
def test_quantize_without_imatrix_is_a_named_error(name):
    x = np.ones((1, 256), dtype=np.float32)
    with pytest.raises(ImatrixRequired):
        iquants.QUANTIZE[name](x, None)


# ----------------------------------------------- best_index_int8 transcription
# The compiled IQ4 quantizers look the index up from floor(2x); this pins that
# table against a literal transcription of ggml's binary search.


def _ggml_best_index(x: np.float32) -> int:
    """Literal transcription of ggml's best_index_int8 over kvalues_iq4nl."""
    v = iquants.KVALUES_IQ4NL.astype(np.float32)
    if x <= v[0]:
        return 0
    if x >= v[-1]:
        return len(v) - 1
    ml, mu = 0, len(v) - 1
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < v[mav]:
            mu = mav
        else:
            ml = mav
    return mu - 1 if x - v[mu - 1] < v[mu] - x else mu


def test_best_index_matches_ggml_search_around_every_decision_point():
    v = iquants.KVALUES_IQ4NL.astype(np.float64)
    pts = []
    for mid in (v[:-1] + v[1:]) / 2:
        p = np.float32(mid)
        for _ in range(40):  # 40 float32 neighbours on either side
            p = np.nextafter(p, np.float32(-np.inf))
        for _ in range(81):
            pts.append(p)
            p = np.nextafter(p, np.float32(np.inf))
    extra = [0.0, -0.0, 1e-45, -1e-45, 1e30, -1e30, np.inf, -np.inf, *v.tolist()]
    x = np.array(pts + extra, dtype=np.float32)
    want = np.array([_ggml_best_index(a) for a in x])
    got = iquants.best_index_iq4nl(x)
    assert np.array_equal(got, want)


# ---------------------------------------------------------------- contract


@pytest.mark.parametrize("name", Q_TYPES)
def test_quantize_contract_shapes_and_inputs_untouched(name):
    t = ggml_type(name)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    im = rng.random(512).astype(np.float32)
    x0, im0 = x.copy(), im.copy()
    x.setflags(write=False)
    q = iquants.QUANTIZE[name](x, im)
    assert q.dtype == np.uint8
    assert q.shape == (3, 512 // t.block_size * t.type_size)
    assert np.array_equal(x, x0) and np.array_equal(im, im0)
    y = iquants.DEQUANTIZE[name](as_blocks(q, name))
    assert y.dtype == np.float32 and y.shape == (3 * 512 // t.block_size, t.block_size)
