"""Drop-in mirror of ``safetensors.flax``: save, save_file, load, load_file
for jax arrays (``jax.Array``).

Loaded arrays are zero-copy where jax allows it (CPU, aligned data): they
share the pages of a private copy-on-write mapping of the file.  bfloat16 and
the float8 types come through ml_dtypes, which jax uses natively.
Imported lazily: importing this module needs no jax; the first call
does, and raises :class:`weightsmith.errors.MissingDependencyError` naming
``pip install 'weightsmith[jax]'`` if it is missing.  Unlike HF's, the
dict passed to ``save``/``save_file`` is left unchanged.
"""

from __future__ import annotations

from ._mirror import mirror
from .safetensors import TensorSpec, deserialize, safe_open, serialize, serialize_file

# With HF's top-level names, which HF's modules re-export too.
__all__ = [
    "TensorSpec",
    "deserialize",
    "load",
    "load_file",
    "safe_open",
    "save",
    "save_file",
    "serialize",
    "serialize_file",
]

save, save_file, load, load_file = mirror("flax")
