"""Quantize a GGUF file to a llama-quantize file type (what ``llama-quantize`` does).

* the per-tensor types come from :func:`weightsmith.quant.recipes.plan`
  (llama.cpp's ``llama-quant.cpp`` rules for a file type such as Q4_K_M);
* the blocks from :func:`weightsmith.quant.quantize` (bit-exact with ggml);
* the file from :class:`weightsmith.gguf.Writer`.

What the output holds, as llama-quantize writes it: every KV of the input
(minus ``split.*``), then ``general.quantization_version`` = 2 and
``general.file_type`` moved to the end, then the ``quantize.imatrix.*`` keys
when an importance matrix was given; tensors in llama.cpp's loader order (by
layer number, then name); a tensor whose
planned type is its current type is copied byte for byte; other tensors
must be F32, F16 or BF16 (no requantizing of quantized data).

Importance matrices are read by :mod:`weightsmith.quant.imatrix`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import numpy as np

from ..errors import ImatrixRequired, RequantizeRefused
from .imatrix import Imatrix, for_tensor, read_imatrix

QNT_VERSION = 2  # GGML_QNT_VERSION
_FLOAT_SOURCES = {"F32", "F16", "BF16"}
_NEEDS_IMATRIX = {"IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S"}
_NO_IMATRIX_NEEDED = {"token_embd.weight", "per_layer_token_embd.weight", "output.weight"}


_BLK = re.compile(r"blk\.\s*([+-]?\d+)")


def _loader_order(t) -> tuple[int, bytes]:
    """llama.cpp's weight_name_comparer: layer number (``blk.N``, else -1), then name."""
    m = _BLK.match(t.name)
    return (int(m.group(1)) if m else -1, t.name.encode())


def _int_kv(meta, key: str, default: int | None) -> int | None:
    if key not in meta:
        return default
    v = meta[key]
    if isinstance(v, (list, tuple)):
        v = max(v) if v else default
    return int(v) if v is not None else default


def quantize_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str,
    imatrix: str | os.PathLike[str] | None = None,
    progress: Callable | None = None,
    workers: int | None = None,
) -> dict[str, str]:
    """Quantize a GGUF model to the llama.cpp file type ``type``; returns name -> ggml type."""
    from .. import gguf
    from . import recipes

    ftype = recipes.file_type(type)
    im = read_imatrix(imatrix) if imatrix is not None else None
    f = gguf.read(src)
    try:
        meta = f.metadata
        arch = str(meta.get("general.architecture", "llama"))
        tensors = sorted(f.tensors, key=_loader_order)
        source_types = {t.name: t.ggml_type.name for t in tensors}
        plan = recipes.plan(
            [(t.name, t.shape) for t in tensors],
            ftype,
            arch=arch,
            n_layer=_int_kv(meta, f"{arch}.block_count", None),
            n_head=_int_kv(meta, f"{arch}.attention.head_count", 1) or 1,
            n_head_kv=_int_kv(meta, f"{arch}.attention.head_count_kv", None),
            n_expert=_int_kv(meta, f"{arch}.expert_count", 0) or 0,
            has_imatrix=im is not None,
            source_types=source_types,
        )
        _check_plan(tensors, plan, source_types, im, ftype.name)
        w = gguf.Writer(dst, alignment=f.alignment)
        try:
            for key in meta:
                if key.startswith("split."):
                    continue
                w.add(key, meta[key], type=f.metadata_type(key))
            for key, value, vtype in _tail_kvs(ftype.id, im):
                if key in meta:  # gguf_set_val_*: remove, then append at the end
                    w.remove(key)
                w.add(key, value, type=vtype)
            for t in tensors:
                w.add_tensor_info(t.name, plan[t.name], t.shape)
            total = sum(t.nbytes for t in tensors)
            done = 0
            for i, t in enumerate(tensors, 1):
                new = plan[t.name]
                if new == t.ggml_type.name:
                    w.write_tensor(t.name, f.tensor_bytes(t.name))
                else:
                    x = np.asarray(f.dequantize(t.name), dtype=np.float32)
                    w.write_tensor(t.name, quantize_tensor(x, new, t.name, im, workers))
                done += t.nbytes
                if progress is not None:
                    progress(done, total, i, len(tensors))
            w.close()
        except BaseException:
            w.abort()
            raise
        return plan
    finally:
        f.close()


def _tail_kvs(ftype_id: int, im: Imatrix | None) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = [
        ("general.quantization_version", QNT_VERSION, "u32"),
        ("general.file_type", ftype_id, "u32"),
    ]
    return out + (im.gguf_rows() if im is not None else [])


def _check_plan(tensors, plan, source_types, im: Imatrix | None, ftype_name: str) -> None:
    """Refuse before writing anything: requantizing, or a low-bit type without an imatrix."""
    for t in tensors:
        new, cur = plan[t.name], source_types[t.name]
        if new == cur:
            continue
        if cur not in _FLOAT_SOURCES:
            raise RequantizeRefused(
                "requantizing is disabled", field=t.name, expected="F32, F16 or BF16", found=cur
            )
        needs = t.name not in _NO_IMATRIX_NEEDED and (
            new in _NEEDS_IMATRIX or (new == "Q2_K" and ftype_name == "Q2_K_S")
        )
        if needs and (im is None or for_tensor(t.name, t.shape, im) is None):
            raise ImatrixRequired(
                f"{new} in a {ftype_name} file needs an importance matrix",
                field=t.name,
                expected="an importance matrix entry",
                found="none",
            )


def quantize_tensor(
    x: np.ndarray, new: str, name: str, im: Imatrix | None, workers: int | None = None
) -> np.ndarray:
    """Quantize one GGUF tensor (2-D, or 3-D experts) with its slice of an importance matrix."""
    from . import quantize

    e = None if im is None else for_tensor(name, x.shape, im)
    if x.ndim == 3:  # experts: each has its own slice of the importance matrix
        parts = [
            quantize(x[k], new, None if e is None else e[k], name=name, workers=workers)
            for k in range(x.shape[0])
        ]
        return np.stack(parts)
    return quantize(x, new, None if e is None else e[0], name=name, workers=workers)
