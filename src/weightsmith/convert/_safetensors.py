"""safetensors -> safetensors: dtype cast and (re)sharding.

Reads through ``safe_open`` / ``open_checkpoint`` (lazy, one tensor at a
time), casts floating tensors with numpy / ml_dtypes (round to nearest even,
as torch's ``.to()``), and writes either one file with the streaming writer
(constant memory) or a transformers-style sharded folder with
``save_sharded``.  Integer and bool tensors keep their dtype, as
``transformers`` does when it changes ``torch_dtype``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes
from .. import safetensors as st
from ..errors import UnsupportedTargetDtype

# float codes a cast may target or change: the dtype table's float flag
_FLOATS = {d.name for d in dtypes.SAFETENSORS.values() if d.is_float}


def target_dtype(name: str | None) -> str | None:
    """The safetensors code a cast goes to (``"bf16"`` -> ``"BF16"``); None for no cast."""
    if name is None:
        return None
    try:
        code = dtypes.dtype_by_name(name).name
    except KeyError:
        code = None
    if code not in _FLOATS:
        raise UnsupportedTargetDtype(
            "cannot cast to this type", field="dtype", expected=sorted(_FLOATS), found=name
        )
    return code


def _open(src: str):
    p = Path(src)
    if p.is_dir() or p.name.endswith(".index.json"):
        return st.open_checkpoint(p, framework="np")
    return st.safe_open(p, framework="np")


class _Cast(Mapping):
    """A lazy mapping name -> cast array, reading one tensor at a time."""

    def __init__(
        self, f: Any, names: list[str], out: dict[str, str], progress: Callable | None
    ) -> None:
        self.f, self.names, self.out, self.progress = f, names, out, progress
        self.done_bytes, self.done = 0, 0
        self.total = 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, name: str) -> np.ndarray:
        arr = np.asarray(self.f.get_tensor(name))
        code = self.out[name]
        want = dtypes.SAFETENSORS[code].numpy
        if want is not None and arr.dtype != want:
            arr = arr.astype(want)
        self.done += 1
        self.done_bytes += arr.nbytes
        if self.progress is not None:
            self.progress(self.done_bytes, self.total or None, self.done, len(self.names))
        return arr


def safetensors_to_safetensors(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    dtype: str | None = None,
    max_shard_size: int | str | None = None,
    progress: Callable | None = None,
) -> list[str]:
    """Copy a safetensors file or checkpoint, casting floats to ``dtype`` and resharding."""
    code = target_dtype(dtype)
    dst = Path(dst)
    with _open(os.fspath(src)) as f:
        names = sorted(f.keys())
        # a checkpoint's metadata() is its index's (total_size ...): keep str -> str only
        meta = {k: v for k, v in dict(f.metadata() or {}).items() if isinstance(v, str)}
        src_codes = {n: str(f.get_slice(n).get_dtype()) for n in names}
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in names}
        out = {n: code if code and src_codes[n] in _FLOATS else src_codes[n] for n in names}
        lazy = _Cast(f, names, out, progress)
        lazy.total = sum(
            dtypes.SAFETENSORS[out[n]].nbytes(int(np.prod(shapes[n], dtype=np.int64)))
            for n in names
        )
        if max_shard_size is None and dst.suffix == ".safetensors":
            w = st.StreamWriter(dst, [(n, out[n], shapes[n]) for n in names], metadata=meta or None)
            try:
                for n in names:
                    w.write(n, lazy[n])
            except BaseException:
                w.abort()
                raise
            w.close()
            return [str(dst)]
        dst.mkdir(parents=True, exist_ok=True)
        return st.save_sharded(
            lazy, dst, max_shard_size=max_shard_size or "5GB", metadata=meta or None
        )
