"""Quality report of a conversion: source tensors vs the dequantized GGUF tensors.

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

import numpy as np

from ..gguf import read
from ..quant.file import dequantize_tensor
from ._hf_to_gguf import _plan, _tensor_data

__all__ = ["CompareReport", "TensorQuality", "compare"]


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
    with read(d) as g:
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
        # the tokenizer only matters for the embedding rows some architectures cut
        has_tok = (d / "tokenizer.model").is_file() or (d / "tokenizer.json").is_file()
        self._plan = _plan(d, "f32", self._stack, tokenizer=has_tok)
        self._by = {tp.name: tp for tp in self._plan.tensors}
        self._data = _tensor_data

    def get(self, name: str) -> np.ndarray | None:
        tp = self._by.get(name)
        return None if tp is None else np.asarray(self._data(tp, self._plan), dtype=np.float32)

    def close(self) -> None:
        for h in self._stack:
            h.close()


class _gguf_source:
    def __init__(self, p: Path) -> None:
        self._f = read(p)

    def get(self, name: str) -> np.ndarray | None:
        return dequantize_tensor(self._f, name) if name in self._f else None

    def close(self) -> None:
        self._f.close()
