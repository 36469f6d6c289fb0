"""Compare two models: tensor sets and layouts (:func:`diff`), and the quality of a conversion (:func:`compare`).

:func:`diff` takes two inspection reports (headers only, any format) and
matches their tensors: by name, or, for a Hugging Face model against a GGUF of
an architecture in :mod:`weightsmith.convert.arch`, through the registry (HF
name -> GGUF name, shapes through the converter's transforms).  With
``values=True`` it also reads both sides and gives per-tensor RMSE, max abs
error and cosine.  Its :attr:`Diff.result` is the JSON of ``weightsmith diff
--json`` (schema: docs/cli-diff-json-schema.json).

``compare(src, dst)`` reads ``src`` (a Hugging Face folder, or another GGUF file) and
``dst`` (a GGUF written from it) one tensor at a time.  For an HF folder, each source
tensor gets the same transforms the converter applied (so both sides are in GGUF
layout); the GGUF side is dequantized with :func:`weightsmith.quant.dequantize`.
Per tensor: RMSE, max abs error, cosine similarity, type and bits per weight; per
file: sizes and the overall bits per weight.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors as E
from ..gguf import read as read_gguf
from ..quant.file import dequantize_tensor
from ..safetensors import safe_open
from ._hf_to_gguf import _read_config, _tensor_data, hf_input, plan_input
from .arch import Arch, by_gguf_arch

__all__ = ["CompareReport", "Diff", "TensorQuality", "compare", "diff"]


@dataclass
class TensorQuality:
    name: str
    type: str
    shape: tuple[int, ...]
    rmse: float
    max_abs: float
    cosine: float
    bits_per_weight: float


@dataclass
class CompareReport:
    src: str
    dst: str
    src_bytes: int
    dst_bytes: int
    tensors: list[TensorQuality] = field(default_factory=list)

    @property
    def bits_per_weight(self) -> float:
        n = sum(int(np.prod(t.shape)) for t in self.tensors)
        bits = sum(t.bits_per_weight * int(np.prod(t.shape)) for t in self.tensors)
        return bits / n if n else 0.0

    @property
    def types(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.type] = out.get(t.type, 0) + 1
        return out

    def worst(self, k: int = 5) -> list[TensorQuality]:
        return sorted(self.tensors, key=lambda t: t.cosine)[:k]

    def format(self) -> str:
        """A plain-text table."""
        lines = [
            f"{'tensor':<36} {'type':<7} {'bpw':>6} {'rmse':>10} {'max abs':>10} {'cosine':>9}"
        ]
        for t in self.tensors:
            lines.append(
                f"{t.name:<36} {t.type:<7} {t.bits_per_weight:6.2f} {t.rmse:10.3e} "
                f"{t.max_abs:10.3e} {t.cosine:9.6f}"
            )
        lines.append(
            f"source {self.src_bytes:,} bytes -> {self.dst_bytes:,} bytes; "
            f"{self.bits_per_weight:.2f} bits per weight; types "
            + ", ".join(f"{k} x{v}" for k, v in sorted(self.types.items()))
        )
        return "\n".join(lines)


def _dir_bytes(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    pats = ("*.safetensors", "*.bin", "*.pth")
    return sum(f.stat().st_size for pat in pats for f in p.glob(pat) if f.is_file())


def _quality(name: str, ref: np.ndarray, got: np.ndarray, type_: str, nbytes: int):
    a = ref.astype(np.float64).reshape(-1)
    b = got.astype(np.float64).reshape(-1)
    d = a - b
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cos = float(a @ b / (na * nb)) if na > 0 and nb > 0 else float(na == nb)
    return TensorQuality(
        name,
        type_,
        tuple(ref.shape),
        float(np.sqrt(np.mean(d * d))) if d.size else 0.0,
        float(np.max(np.abs(d))) if d.size else 0.0,
        cos,
        8.0 * nbytes / max(a.size, 1),
    )


def compare(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> CompareReport:
    """Per-tensor error of ``dst`` (GGUF) against ``src`` (HF folder or GGUF)."""
    s, d = Path(src), Path(dst)
    rep = CompareReport(str(s), str(d), _dir_bytes(s), sum(p.stat().st_size for p in [d]))
    with read_gguf(d) as g:
        if s.is_dir():
            source = _hf_source(s)
        else:
            source = _gguf_source(s)
        try:
            for t in g.tensors:
                ref = source.get(t.name)
                if ref is None:
                    continue
                got = dequantize_tensor(g, t.name)
                rep.tensors.append(_quality(t.name, ref, got, t.ggml_type.name, t.nbytes))
        finally:
            source.close()
    return rep


class _hf_source:
    """Source tensors in GGUF layout: the converter's plan, read lazily."""

    def __init__(self, d: Path) -> None:
        self._stack: list = []
        # the tokenizer only matters for the embedding rows some architectures cut; any
        # other tokenizer is not read (its pre-tokenizer need not be one llama.cpp knows)
        has_tok = (d / "tokenizer.model").is_file() or (d / "tokenizer.json").is_file()
        m = hf_input(d, self._stack)
        self._plan = plan_input(m, "f32", tokenizer=has_tok and bool(m.arch.vocab_rows))
        self._by = {tp.name: tp for tp in self._plan.tensors}

    def get(self, name: str) -> np.ndarray | None:
        tp = self._by.get(name)
        return None if tp is None else np.asarray(_tensor_data(tp, self._plan), dtype=np.float32)

    def close(self) -> None:
        for h in self._stack:
            h.close()


class _gguf_source:
    def __init__(self, p: Path) -> None:
        self._f = read_gguf(p)

    def get(self, name: str) -> np.ndarray | None:
        return dequantize_tensor(self._f, name) if name in self._f else None

    def close(self) -> None:
        self._f.close()


# --------------------------------------------------------------------------- diff


@dataclass
class Diff:
    """What :func:`diff` found.

    ``result`` is the ``weightsmith diff --json`` object; ``arch`` the GGUF
    architecture whose registry entry matched the names (None: matched by
    name); ``cross`` whether the two sides are of different formats (then a
    dtype change is the point of the conversion, not a difference).
    """

    result: dict[str, Any]
    arch: str | None
    cross: bool

    @property
    def differs(self) -> bool:
        r = self.result
        d = bool(r["only_in_a"] or r["only_in_b"] or r["shape_differs"])
        d = d or bool(r["dtype_differs"] and not self.cross)
        return d or any(v["max_abs"] != 0 for v in r.get("values", []))


def diff(a: str, b: str, report_a: Any, report_b: Any, *, values: bool = False) -> Diff:
    """Match the tensors of two models given as inspection reports (A and B as named by the user).

    ``report_a`` / ``report_b`` are :class:`weightsmith.inspection.Report`
    objects (headers only); ``values`` reads the tensors too, which needs
    local safetensors or GGUF files.
    """
    pair = _registry_pair(a, b, report_a, report_b)
    if pair is not None:
        return Diff(_registry_diff(a, b, pair, values), pair.arch.gguf_arch, True)
    cross = report_a.format != report_b.format
    return Diff(_plain_diff(a, b, report_a, report_b, values), None, cross)


def _plain_diff(a: str, b: str, ra: Any, rb: Any, values: bool) -> dict[str, Any]:
    """Same-format diff (or cross-format with equal names): tensors matched by name."""
    ta = {t.name: t for t in ra.tensors}
    tb = {t.name: t for t in rb.tensors}
    common = sorted(set(ta) & set(tb))
    # every reader reports numpy order (outermost first), GGUF included
    shape_diff = [n for n in common if tuple(ta[n].shape) != tuple(tb[n].shape)]
    dtype_diff = [n for n in common if ta[n].dtype != tb[n].dtype]
    result: dict[str, Any] = {
        "a": a,
        "b": b,
        "only_in_a": sorted(set(ta) - set(tb)),
        "only_in_b": sorted(set(tb) - set(ta)),
        "shape_differs": [
            {"name": n, "a": list(ta[n].shape), "b": list(tb[n].shape)} for n in shape_diff
        ],
        "dtype_differs": [{"name": n, "a": ta[n].dtype, "b": tb[n].dtype} for n in dtype_diff],
        "common": len(common),
    }
    if values:
        result["values"] = _value_diff(ra, rb, [n for n in common if n not in shape_diff])
    return result


# ---- HF model against GGUF: names and layouts through the architecture registry


@dataclass
class _Pair:
    """An HF model (folder, or one safetensors file of it) and a GGUF of a registry arch."""

    hf_dir: Path
    hf: Any
    gguf: Any
    arch: Arch
    hf_is_a: bool


def _hf_dir_of(target: str) -> Path | None:
    p = Path(target[7:] if target.startswith("file://") else target)
    d = p if p.is_dir() else p.parent
    return d if (d / "config.json").is_file() else None


def _registry_pair(a: str, b: str, ra: Any, rb: Any) -> _Pair | None:
    """The pair when A/B are an HF model and a GGUF the registry knows; else None
    (then tensors are matched by name, e.g. a safetensors file of GGUF-named tensors)."""
    if ra.remote or rb.remote or {ra.format, rb.format} != {"safetensors", "gguf"}:
        return None
    hf_is_a = ra.format == "safetensors"
    hf, gg = (ra, rb) if hf_is_a else (rb, ra)
    hf_dir = _hf_dir_of(a if hf_is_a else b)
    if hf_dir is None:
        return None
    md = gg.files[0].metadata
    arch = by_gguf_arch(str(md.get("general.architecture", "")), metadata=md)
    if arch is None:
        return None
    return _Pair(hf_dir, hf, gg, arch, hf_is_a)


def _n_vocab(gguf_report: Any) -> int | None:
    tokens = gguf_report.files[0].metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, dict):
        return tokens.get("array_length")
    return len(tokens) if isinstance(tokens, list) else None


def _registry_diff(a: str, b: str, pair: _Pair, values: bool) -> dict[str, Any]:
    """Tensor sets and shapes in GGUF terms: each HF tensor gets the registry's GGUF
    name and the shape its transforms give; values come from :func:`compare`, which
    puts the HF tensors through the converter's own transforms (Q/K permutation,
    Gemma's norm + 1, ...) and dequantizes the GGUF side."""
    arch = pair.arch
    cfg = _read_config(pair.hf_dir)  # a named error for a bad config.json
    ctx = {"n_vocab": _n_vocab(pair.gguf)}
    hf_of: dict[str, Any] = {}  # GGUF name -> HF tensor entry
    unmapped: list[str] = []
    for t in pair.hf.tensors:
        if arch.skipped(t.name):
            continue
        g = arch.gguf_name(t.name)
        if g is None:
            unmapped.append(t.name)
        else:
            hf_of[g] = t
    gg = {t.name: t for t in pair.gguf.tensors}
    derived = sorted(n for n in gg if n in arch.extra and n not in hf_of)
    common = sorted(set(hf_of) & set(gg))
    only_hf = sorted(unmapped + [hf_of[g].name for g in set(hf_of) - set(gg)])
    only_gguf = sorted(n for n in set(gg) - set(hf_of) if n not in derived)

    def shape_in_gguf(t: Any) -> tuple[int, ...]:
        shape = tuple(t.shape)
        for tr in arch.transforms_for(t.name):
            if tr.shape is not None:
                shape = tuple(tr.shape(shape, cfg, ctx))
        return shape

    def named(g: str) -> tuple[str, str]:
        """(name in A, name in B) of a matched pair."""
        h = hf_of[g].name
        return (h, g) if pair.hf_is_a else (g, h)

    def side(hf_val: Any, gguf_val: Any) -> tuple[Any, Any]:
        return (hf_val, gguf_val) if pair.hf_is_a else (gguf_val, hf_val)

    shape_diff, dtype_diff = [], []
    for g in common:
        hs, gs = shape_in_gguf(hf_of[g]), tuple(gg[g].shape)
        na, nb = named(g)
        if hs != gs:
            va, vb = side(list(hf_of[g].shape), list(gs))
            shape_diff.append({"name": na, "name_b": nb, "a": va, "b": vb})
        if hf_of[g].dtype != gg[g].dtype:
            va, vb = side(hf_of[g].dtype, gg[g].dtype)
            dtype_diff.append({"name": na, "name_b": nb, "a": va, "b": vb})
    only_a, only_b = side(only_hf, only_gguf)
    result: dict[str, Any] = {
        "a": a,
        "b": b,
        "matched_by": f"architecture registry ({arch.gguf_arch})",
        "only_in_a": only_a,
        "only_in_b": only_b,
        "shape_differs": shape_diff,
        "dtype_differs": dtype_diff,
        "derived": derived,
        "common": len(common),
    }
    if values and shape_diff:
        # compare() puts the whole folder through the converter's plan, which needs
        # every layout to fit; with a shape mismatch there is no value comparison to make
        result["values"] = []
        result["values_skipped"] = "shapes differ: values are compared only for matching layouts"
    elif values:
        result["values"] = _registry_values(pair, common, named)
    return result


def _registry_values(pair: _Pair, wanted: list[str], named: Any) -> list[dict[str, Any]]:
    keep = set(wanted)
    rows: dict[str, dict[str, Any]] = {}
    for f in pair.gguf.files:  # each shard of a split GGUF on its own
        for q in compare(pair.hf_dir, f.path).tensors:
            if q.name in keep:
                na, nb = named(q.name)
                rows[q.name] = {
                    "name": na,
                    "name_b": nb,
                    "type": q.type,
                    "rmse": q.rmse,
                    "max_abs": q.max_abs,
                    "cosine": q.cosine,
                }
    missing = sorted(keep - set(rows))
    if missing:
        raise E.UnmappedTensor(
            f"the converter's plan gives no values for {len(missing)} tensor(s)",
            path=pair.hf_dir,
            field=missing[0],
        )
    return [rows[g] for g in wanted]


class _Loader:
    """Tensors of a local file as float64 arrays (dequantizing GGUF)."""

    def __init__(self, report: Any) -> None:
        self.report = report
        self.by_name = {t.name: t for t in report.tensors}
        self._open: dict[str, Any] = {}

    def get(self, name: str) -> np.ndarray:
        t = self.by_name[name]
        f = self._open.get(t.file)
        if f is None:
            if self.report.format not in ("safetensors", "gguf"):
                raise E.UnsupportedComparison(
                    "values are compared for safetensors and GGUF files only",
                    path=t.file,
                    expected="safetensors or gguf",
                    found=self.report.format,
                )
            if self.report.format == "safetensors":
                f = safe_open(t.file, framework="np").__enter__()
            else:
                f = read_gguf(t.file)
            self._open[t.file] = f
        arr = (
            f.get_tensor(name)
            if self.report.format == "safetensors"
            else dequantize_tensor(f, name)
        )
        return np.asarray(arr).astype(np.float64).reshape(t.shape)

    def close(self) -> None:
        for f in self._open.values():
            f.__exit__(None, None, None)


def _value_diff(ra: Any, rb: Any, names: list[str]) -> list[dict[str, Any]]:
    if ra.remote or rb.remote:
        raise E.UnsupportedComparison(
            "values need local files (remote reads are headers only)",
            path=(ra if ra.remote else rb).target,
            expected="a local file or folder",
            found="a remote target",
        )
    la, lb = _Loader(ra), _Loader(rb)
    rows = []
    try:
        for n in names:
            a, b = la.get(n).ravel(), lb.get(n).ravel()
            d = a - b
            na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
            cos = float(a @ b) / (na * nb) if na and nb else (1.0 if na == nb else 0.0)
            rows.append(
                {
                    "name": n,
                    "rmse": float(np.sqrt(np.mean(d * d))) if d.size else 0.0,
                    "max_abs": float(np.max(np.abs(d))) if d.size else 0.0,
                    "cosine": cos,
                }
            )
    finally:
        la.close()
        lb.close()
    return rows
