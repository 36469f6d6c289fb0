"""Dequantize on read: checkpoints whose ``config.json`` says ``quantization_config``.

``quant_method: fp8`` (DeepSeek-V3, Qwen3-FP8, GLM-4.5-FP8, ...): a quantized linear
weight ``X.weight`` is stored as float8 (``F8_E4M3``) beside ``X.weight_scale_inv``,
float32, one scale per block of ``weight_block_size`` (``[128, 128]``: the scale is
``[ceil(rows / 128), ceil(cols / 128)]``; the last blocks may be partial).  Without a
block size the scale broadcasts over the weight's trailing axes (per tensor, per row).
The value is ``float32(w) * float32(scale of its block)`` -- llama.cpp's
``dequant_simple``: one correctly rounded float32 product per element, so the
converted bytes agree exactly.  Scales and the unused ``*activation_scale`` tensors
are not written; the weight keeps its place in the read order.  Mistral's own layout
names the scale ``X.qscale_weight`` (beside ``X.weight``, with an unused
``X.qscale_act``): the reference pairs those too, under the same config (its
``MistralModel`` turns params.json's ``quantization`` into ``quant_method: fp8``
without a block size), and so do we.

Streaming: a weight is dequantized when it is read, in place in its float32 copy,
one row block at a time; the scale (one float per 16 Ki elements) is the only
extra memory.  Shapes are checked from the headers before anything is written.
DeepSeek-V4's own layout (no ``quantization_config`` needed, the registry entry says
``e8m0_scales``): a float8 ``X.weight`` beside ``X.scale``, E8M0 (a power of two,
``2 ** (byte - 127)``), one per 128 x 128 block: the same product, exact in float32.
The weight keeps its source dtype (the entry's types read it).

Other ``quant_method`` values are not handled here: their tensors (``qweight``,
``blocks``, ...) are refused by the registry as unmapped, or read by the entry.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from .. import errors as E

__all__ = ["dequantize_sources", "e8m0_dequantize_sources", "fp8_dequantize"]

_SCALE = "_scale_inv"
_MISTRAL_SCALE = ".qscale_weight"  # Mistral's layout: X.qscale_weight scales X.weight
_UNUSED = (".activation_scale", "_activation_scale", ".qscale_act")


def _scaled_weight(name: str) -> str | None:
    """The weight a scale tensor ``name`` scales, or None if it is no fp8 scale."""
    if name.endswith(_SCALE):
        return name[: -len(_SCALE)]
    if name.endswith(_MISTRAL_SCALE):
        return name[: -len(_MISTRAL_SCALE)] + ".weight"
    return None


def _block_size(qc: dict, path: Path) -> tuple[int, ...] | None:
    bs = qc.get("weight_block_size")
    if bs is None:
        return None
    if (
        not isinstance(bs, list)
        or not bs
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in bs)
    ):
        raise E.InvalidModelConfig(
            "weight_block_size is not a list of positive integers",
            path=path,
            field="quantization_config.weight_block_size",
            expected="e.g. [128, 128]",
            found=bs,
        )
    return tuple(bs)


def _scale_shape_ok(w: tuple[int, ...], s: tuple[int, ...], block: tuple[int, ...] | None) -> bool:
    if block is None:  # broadcast: the scale's axes lead, ones or equal sizes
        if len(s) > len(w):
            return False
        return all(a in (1, b) for a, b in zip(s, w[: len(s)]))
    off = len(s) - len(block)
    if off < 0 or len(s) != len(w):
        return False
    want = tuple(w[:off]) + tuple(math.ceil(n / b) for n, b in zip(w[off:], block))
    return tuple(s) == want


def fp8_dequantize(w: np.ndarray, scale: np.ndarray, block: tuple[int, ...] | None) -> np.ndarray:
    """``w`` (any float type) times its block scales, in float32 (``dequant_simple``)."""
    x = np.array(w, dtype=np.float32)  # a private copy, multiplied in place
    s = np.asarray(scale, dtype=np.float32)
    if block is None:
        s = s.reshape(s.shape + (1,) * (x.ndim - s.ndim))
        np.multiply(x, s, out=x)
        return x
    off = s.ndim - len(block)
    if len(block) == 1:
        (b,) = block
        for j in range(s.shape[-1]):
            x[..., j * b : (j + 1) * b] *= s[..., j : j + 1]
        return x
    # the last two axes are blocked (the others, if any, indexed one by one): one row
    # block at a time, its scales repeated along the columns
    *lead_b, b0, b1 = block
    if lead_b:
        rep = s
        for i, b in enumerate(lead_b):
            rep = np.repeat(rep, b, axis=off + i)
        s = rep[tuple(slice(0, n) for n in x.shape[: s.ndim - 2])]
    cols = x.shape[-1]
    for idx in np.ndindex(*x.shape[:-2]):
        xi, si = x[idx], s[idx]
        for i in range(si.shape[0]):
            xi[i * b0 : (i + 1) * b0] *= np.repeat(si[i], b1)[:cols]
    return x


def dequantize_sources(sources: list, cfg: dict, path: Path) -> list:
    """``sources`` with fp8 weights dequantized on load and their scales left out.

    ``sources`` are the converter's source records (dataclasses with ``name``,
    ``shape`` and ``load``).  Unchanged unless ``cfg["quantization_config"]
    ["quant_method"]`` is ``fp8``.
    """
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict) or qc.get("quant_method") != "fp8":
        return sources
    block = _block_size(qc, path / "config.json")
    by_name = {s.name: s for s in sources}
    scales = {w: s for s in sources if (w := _scaled_weight(s.name)) is not None}
    for wname, sc in scales.items():
        w = by_name.get(wname)
        if w is None:
            raise E.UnmappedTensor(
                "fp8 scale without its weight",
                path=path,
                field=f"tensor {sc.name!r}",
                expected=f"a tensor {wname!r}",
                found="no such tensor",
            )
        if not _scale_shape_ok(w.shape, sc.shape, block):
            raise E.TensorShapeMismatch(
                "fp8 scale does not fit its weight and weight_block_size",
                path=path,
                field=f"tensor {sc.name!r}",
                expected=f"one scale per block {list(block or [])} of {list(w.shape)}",
                found=list(sc.shape),
            )
    drop = {s.name for s in scales.values()} | {s.name for s in sources if s.name.endswith(_UNUSED)}
    return _scaled(sources, scales, block, drop)


def _scaled(sources: list, scales: dict, block: tuple[int, ...] | None, drop: set[str]) -> list:
    """``sources`` without the ``drop`` names, each weight with a scale in ``scales`` (by
    the weight's name) dequantized on load."""
    out = []
    for s in sources:
        if s.name in drop:
            continue
        sc = scales.get(s.name)
        if sc is not None:
            load = lambda w=s.load, c=sc.load: fp8_dequantize(w(), c(), block)  # noqa: E731
            s = dataclasses.replace(s, load=load)
        out.append(s)
    return out


_E8M0_BLOCK = (128, 128)


def e8m0_dequantize_sources(sources: list, path: Path) -> list:
    """``sources`` with float8 weights beside an E8M0 ``.scale`` (DeepSeek-V4) dequantized
    on load and those scales left out; other ``.scale`` tensors (MXFP4 experts') stay."""
    by_name = {s.name: s for s in sources}
    scales = {}
    for s in sources:
        w = by_name.get(s.name[: -len(".scale")] + ".weight") if s.name.endswith(".scale") else None
        if w is None or not w.dtype.startswith(("F8_E4M3", "F8_E5M2")):
            continue
        if not _scale_shape_ok(w.shape, s.shape, _E8M0_BLOCK):
            raise E.TensorShapeMismatch(
                "E8M0 scale does not fit its float8 weight",
                path=path,
                field=f"tensor {s.name!r}",
                expected=f"one scale per block {list(_E8M0_BLOCK)} of {list(w.shape)}",
                found=list(s.shape),
            )
        scales[w.name] = s
    return _scaled(sources, scales, _E8M0_BLOCK, {s.name for s in scales.values()})
