"""weightsmith.convert.compare.diff as a library call (the CLI's ``diff`` prints it).

Oracles: HF ``safetensors`` writes the inputs and torch computes the expected
errors; the command-line behaviour is tested in tests/test_cli_diff.py.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file as hf_save

from weightsmith import errors as E
from weightsmith.convert.compare import Diff, diff
from weightsmith.inspection import inspect_local


@pytest.fixture
def two_files(tmp_path):
    g = torch.Generator().manual_seed(2)
    a = {"w": torch.randn(8, 16, generator=g), "n": torch.ones(16), "only_a": torch.zeros(2)}
    b = {"w": a["w"].clone(), "n": a["n"].to(torch.float16), "only_b": torch.zeros(3)}
    b["w"][1, 2] -= 0.25
    hf_save(a, str(tmp_path / "a.safetensors"))
    hf_save(b, str(tmp_path / "b.safetensors"))
    return str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"), a, b


def _diff(a: str, b: str, **kw) -> Diff:
    return diff(a, b, inspect_local(a), inspect_local(b), **kw)


def test_same_file_is_identical(two_files):
    a, _, _, _ = two_files
    d = _diff(a, a, values=True)
    assert not d.differs and d.arch is None and not d.cross
    assert d.result["common"] == 3
    assert all(
        v["max_abs"] == 0.0 and v["cosine"] == pytest.approx(1.0) for v in d.result["values"]
    )


def test_sets_dtypes_and_values_by_name(two_files):
    a, b, ta, tb = two_files
    d = _diff(a, b, values=True)
    r = d.result
    assert d.differs
    assert (r["a"], r["b"]) == (a, b)
    assert r["only_in_a"] == ["only_a"] and r["only_in_b"] == ["only_b"]
    assert r["dtype_differs"] == [{"name": "n", "a": "F32", "b": "F16"}]
    assert r["shape_differs"] == []
    rows = {v["name"]: v for v in r["values"]}
    x, y = ta["w"].double().ravel(), tb["w"].double().ravel()
    assert rows["w"]["max_abs"] == pytest.approx(0.25)
    assert rows["w"]["rmse"] == pytest.approx(float(torch.sqrt(torch.mean((x - y) ** 2))))
    cos = torch.nn.functional.cosine_similarity(x, y, dim=0)
    assert rows["w"]["cosine"] == pytest.approx(float(cos))
    assert rows["n"]["max_abs"] == 0.0


def test_without_values_nothing_is_read(two_files):
    a, b, _, _ = two_files
    r = _diff(a, b).result
    assert "values" not in r and r["common"] == 2


def test_values_of_a_pytorch_file_are_refused_by_name(tmp_path):
    torch.save({"w": torch.ones(4)}, tmp_path / "m.pth")
    p = str(tmp_path / "m.pth")
    with pytest.raises(E.UnsupportedComparison, match="safetensors and GGUF"):
        _diff(p, p, values=True)
    # headers alone are compared for any format
    assert _diff(p, p).result["common"] == 1


def test_different_shapes_are_listed_not_compared(tmp_path):
    hf_save({"w": torch.zeros(4, 8)}, str(tmp_path / "a.safetensors"))
    hf_save({"w": torch.zeros(8, 4)}, str(tmp_path / "b.safetensors"))
    r = _diff(str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"), values=True)
    assert r.result["shape_differs"] == [{"name": "w", "a": [4, 8], "b": [8, 4]}]
    assert r.result["values"] == [] and r.differs
    assert r.result["only_in_a"] == [] and r.result["only_in_b"] == []
