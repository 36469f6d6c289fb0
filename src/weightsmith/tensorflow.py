"""Drop-in mirror of ``safetensors.tensorflow``: save, save_file, load, load_file
for TensorFlow tensors (``tf.Tensor``).

bfloat16 and the float8 types TensorFlow has (e4m3fn, e5m2) come through
ml_dtypes; the others raise UnsupportedDtype.
Imported lazily: importing this module needs no tensorflow; the first call
does, and raises :class:`weightsmith.errors.MissingDependencyError` naming
``pip install 'weightsmith[tensorflow]'`` if it is missing.  Unlike HF's, the
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

save, save_file, load, load_file = mirror("tf")
