"""Converters between weight formats.

Each converter lives in its own module and is imported on first use
(PEP 562), so ``import weightsmith.convert`` pulls in nothing.  Comparing two
models (tensor matching, conversion quality) is :mod:`weightsmith.convert.compare`;
the architecture registry is :mod:`weightsmith.convert.arch`.
"""

from __future__ import annotations

from .._lazy import lazy_attributes

# public name -> module that defines it
_LAZY = {
    "torch_to_safetensors": "weightsmith.convert._torch",
    "ConversionReport": "weightsmith.convert._torch",
    "safetensors_to_safetensors": "weightsmith.convert._safetensors",
    "gguf_to_hf": "weightsmith.convert._gguf_to_hf",
    "hf_to_gguf": "weightsmith.convert._hf_to_gguf",
    "plan_conversion": "weightsmith.convert._hf_to_gguf",
    "meta_to_hf": "weightsmith.convert._meta_to_hf",
    "meta_to_gguf": "weightsmith.convert._meta_to_hf",
    "MetaConversion": "weightsmith.convert._meta_to_hf",
    "MetaCheckpoint": "weightsmith.convert._meta",
    "is_meta_dir": "weightsmith.convert._meta",
    "mistral_to_gguf": "weightsmith.convert._mistral",
    "is_mistral_dir": "weightsmith.convert._mistral",
}

__all__ = list(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
