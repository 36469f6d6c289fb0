"""Drop-in mirror of ``safetensors.mlx``: save, save_file, load, load_file
for MLX arrays (``mlx.core.array``).

MLX copies on the way in (it has no way to wrap foreign memory).  bfloat16
round-trips (HF's module cannot); MLX has no float8 dtypes: those raise
UnsupportedDtype.
Imported lazily: importing this module needs no mlx; the first call
does, and raises :class:`weightsmith.errors.MissingDependencyError` naming
``pip install 'weightsmith[mlx]'`` if it is missing.  Unlike HF's, the
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

save, save_file, load, load_file = mirror("mlx")
