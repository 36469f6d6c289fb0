"""weightsmith: safetensors and GGUF, and the road between them.

The top level exposes the everyday entry points lazily, so that
``import weightsmith`` stays cheap and pulls in nothing optional.
"""

from __future__ import annotations

from ._lazy import lazy_attributes

__version__ = "0.1.0"

# name -> module that defines it; resolved on first access (PEP 562).
_LAZY = {
    "safe_open": "weightsmith.safetensors",
    "open_checkpoint": "weightsmith.safetensors",
    "save_sharded": "weightsmith.safetensors",
    "load_file": "weightsmith.safetensors",
    "save_file": "weightsmith.safetensors",
    "StreamWriter": "weightsmith.safetensors",
    "read_index": "weightsmith.safetensors",
    # HF safetensors' top level, under the same names (a drop-in)
    "serialize": "weightsmith.safetensors",
    "serialize_file": "weightsmith.safetensors",
    "deserialize": "weightsmith.safetensors",
    "TensorSpec": "weightsmith.safetensors",
    "SafetensorError": "weightsmith.errors",
}

__all__ = ["__version__", *_LAZY]

__getattr__ = lazy_attributes(__name__, _LAZY)
