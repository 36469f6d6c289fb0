"""Drop-in mirror of ``safetensors.paddle``: save, save_file, load, load_file
for PaddlePaddle tensors (``paddle.Tensor``).

Loaded CPU tensors are zero-copy (DLPack) where paddle allows it.
bfloat16, float8_e4m3fn and float8_e5m2 are supported; ``device`` places
the tensors (``"cpu"``, ``"gpu:0"``, ...).
Imported lazily: importing this module needs no paddlepaddle; the first call
does, and raises :class:`weightsmith.errors.MissingDependencyError` naming
``pip install 'weightsmith[paddle]'`` if it is missing.  Unlike HF's, the
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

save, save_file, load, load_file = mirror("paddle")
