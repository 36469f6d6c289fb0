"""The hand-vectorised x86 kernels and the portable ones write the same bytes.

The kernels pick their AVX-512 paths at run time (csrc/ws_x86.h); the other
exactness tests check whichever path this machine takes.  Here a child process
with WEIGHTSMITH_NO_AVX512=1 (the portable C only) quantizes and decodes the
same data, and every byte must agree with this process's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from weightsmith.quant import dequantize, quantize, types

_CHILD = """
import sys
import numpy as np
from weightsmith.quant import dequantize, quantize, types

data = np.load(sys.argv[1])
x, im = data["x"], data["im"]
out = {}
for t in types(quantize=True):
    for weights in (None, im):
        try:
            q = quantize(x, t, weights, workers=2)
        except Exception as e:  # the same refusal on both paths (e.g. imatrix required)
            out[f"{t}/{weights is None}"] = np.frombuffer(type(e).__name__.encode(), np.uint8)
            continue
        out[f"{t}/{weights is None}"] = q
        out[f"{t}/{weights is None}/dec"] = dequantize(q, t, x.shape).view(np.uint8)
np.savez(sys.argv[2], **out)
"""


def test_portable_path_writes_the_bytes_of_the_vectorised_one(tmp_path):
    rng = np.random.default_rng(11)
    # scales over many orders of magnitude, zero rows and ties to round: the cases
    # where a different order of operations would show
    x = rng.standard_normal((48, 512)).astype(np.float32)
    x *= np.logspace(-6, 6, 48, dtype=np.float32)[:, None]
    x[5] = 0.0
    x[9, ::7] = 0.5
    im = rng.uniform(0.0, 3.0, 512).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, im=im)
    for avx512_off, name in (("1", "plain"), ("0", "auto")):
        env = {**os.environ, "WEIGHTSMITH_NO_AVX512": avx512_off}
        args = [sys.executable, "-c", _CHILD, str(tmp_path / "in.npz"), str(tmp_path / name)]
        subprocess.run(args, env=env, check=True, timeout=600)
    plain = np.load(tmp_path / "plain.npz")
    auto = np.load(tmp_path / "auto.npz")
    assert sorted(plain.files) == sorted(auto.files)
    assert len(plain.files) > 2 * len(types(quantize=True))
    differ = [k for k in plain.files if not np.array_equal(plain[k], auto[k])]
    assert not differ, f"portable and vectorised kernels disagree on {differ}"
    # and this process (whatever path it took) agrees with both
    q = quantize(x, "Q4_0")
    assert np.array_equal(q, auto["Q4_0/True"])
    assert np.array_equal(dequantize(q, "Q4_0", x.shape).view(np.uint8), auto["Q4_0/True/dec"])
