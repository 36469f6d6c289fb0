"""Drop-in mirror of ``safetensors.torch``: save, save_file, load, load_file,
save_model and load_model, plus the helpers downstream code imports from it
(``storage_ptr``, ``storage_size``, ``_find_shared_tensors``,
``_remove_duplicate_names``, ``_is_complete``, ``_end_ptr``) with HF's
return formats.

torch is imported on first use.  Tensors sharing memory are refused by
``save``/``save_file`` with :class:`weightsmith.errors.SharedTensorsError`
(a RuntimeError, as HF's) listing the names; ``save_model``/``load_model``
keep one name per shared group exactly as ``safetensors.torch`` does
(recording dropped names in the metadata).  Non-contiguous tensors are
saved correctly instead of refused.  Loaded tensors are zero-copy views of a
private (copy-on-write) memory map: writing to them never changes the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from . import safetensors as st
from ._lazy import require
from .errors import UnsupportedLayout
from .frameworks import torch as _tg
from .safetensors import TensorSpec, deserialize, safe_open, serialize, serialize_file

# With HF's top-level names, which HF's module re-exports too.
__all__ = [
    "TensorSpec",
    "deserialize",
    "load",
    "load_file",
    "load_model",
    "safe_open",
    "save",
    "save_file",
    "save_model",
    "serialize",
    "serialize_file",
    "storage_ptr",
    "storage_size",
]


def _require() -> Any:
    return require("torch", "weightsmith.torch")


def _check(tensors: Mapping[str, Any]) -> None:
    torch = _require()
    if not isinstance(tensors, Mapping):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
    sparse = [k for k, v in tensors.items() if v.layout != torch.strided]
    if sparse:
        # HF's message word for word: code written for HF matches on it
        raise UnsupportedLayout(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not "
            "support. You can make it a dense tensor before saving with `.to_dense()` but be "
            "aware this might make a much larger file than needed."
        )


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors``."""
    _check(tensors)
    return st.save(tensors, metadata)


def save_file(
    tensors: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` to ``filename`` (atomically)."""
    _check(tensors)
    st.save_file(tensors, filename, metadata)


def load(data: bytes) -> dict[str, Any]:
    """Tensors of a safetensors file held in memory (copied out)."""
    _require()
    return st.load(data, "pt")


def load_file(
    filename: str | os.PathLike[str],
    device: str | int = "cpu",
    *,
    backend: str = "mmap",
) -> dict[str, Any]:
    """Every tensor of a file, on ``device``."""
    _require()
    dev = f"cuda:{device}" if isinstance(device, int) else device
    return st.load_file(filename, "pt", dev, backend=backend)


def save_model(
    model: Any,
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    force_contiguous: bool = True,
) -> None:
    """Save ``model.state_dict()``, keeping one name per group of shared tensors."""
    state_dict = model.state_dict()
    for kept, dropped in _tg.duplicate_names(state_dict).items():
        for name in dropped:
            if metadata is None:
                metadata = {}
            metadata.setdefault(name, kept)  # never override the caller's keys
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    save_file(state_dict, filename, metadata=metadata)


def load_model(
    model: Any,
    filename: str | os.PathLike[str],
    strict: bool = True,
    device: str | int = "cpu",
    *,
    backend: str = "mmap",
) -> tuple[set[str], list[str]]:
    """Load a file saved by :func:`save_model` into ``model``.

    Returns ``(missing, unexpected)``, a set and a list as HF's; with
    ``strict`` raises RuntimeError if either is non-empty, like
    ``safetensors.torch.load_model``.
    """
    state_dict = load_file(filename, device=device, backend=backend)
    model_state = model.state_dict()
    to_removes = _tg.duplicate_names(model_state, preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    unexpected = list(unexpected)
    for group in to_removes.values():
        for name in group:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(missing)
            )
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(unexpected)
            )
        raise RuntimeError(error)
    return missing, unexpected


# --------------------------------------------------------------------------- HF's helpers
# Public in HF (transformers imports them) or private but imported downstream;
# same names, arguments and return formats as safetensors.torch.


def storage_ptr(tensor: Any) -> int:
    """Address of the storage under ``tensor`` (0 if it has none)."""
    return _tg.storage_ptr(tensor)


def storage_size(tensor: Any) -> int:
    """Bytes of the storage under ``tensor`` (0 if it has none)."""
    return _tg.storage_size(tensor)


def _end_ptr(tensor: Any) -> int:
    """One past the last byte any element of ``tensor`` reaches."""
    return _tg.area(tensor)[1]


def _is_complete(tensor: Any) -> bool:
    """True if ``tensor`` covers its whole storage."""
    return _tg.is_complete(tensor)


def _find_shared_tensors(state_dict: Mapping[str, Any]) -> list[set[str]]:
    """Every name once, in sets of names sharing memory (HF's format)."""
    return _tg.find_shared(dict(state_dict))


def _remove_duplicate_names(
    state_dict: Mapping[str, Any],
    *,
    preferred_names: Any = None,
    discard_names: Any = None,
) -> dict[str, list[str]]:
    """Name kept -> names to drop, per shared group; RuntimeError if a
    group (or a lone tensor) does not cover its storage."""
    return _tg.duplicate_names(
        dict(state_dict), preferred_names=preferred_names, discard_names=discard_names, lone=True
    )
