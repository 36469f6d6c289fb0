"""Child process of the resource-bounds harness (tests/test_reliability_bounds.py).

``python reliability_child.py EXTRA_BYTES CPU_SECONDS KIND PATH [PATH ...]``

Sets RLIMIT_AS to the address space already in use plus ``EXTRA_BYTES`` and
RLIMIT_CPU to ``CPU_SECONDS``, then opens each file with the reader of
``KIND`` and prints one JSON line per file: the exception class and whether
it is a WeightsmithError, the elapsed time and the peak address space.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from weightsmith import errors as E
from weightsmith import gguf, quant, torchfile
from weightsmith import safetensors as st
from weightsmith.quant.file import dequantize_tensor


def _vm(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _safetensors(path: str) -> None:
    with st.safe_open(path) as f:
        for name in f:
            f.get_tensor(name)


def _gguf(path: str) -> None:
    with gguf.read(path) as f:
        for key in f.metadata:
            f.metadata[key]
        for t in f.tensors:
            dequantize_tensor(f, t.name)


def _torch(path: str) -> None:
    torchfile.scan(path)
    with torchfile.open(path) as ckpt:
        for name in ckpt:
            ckpt[name]


def _dequant(path: str) -> None:
    with open(path, "rb") as f:
        raw = f.read()
    t = raw[0]
    quant.dequantize(raw[1:], t, (len(raw) - 1,))


def _inspect(path: str) -> None:
    from weightsmith.inspection import inspect_local  # what `weightsmith inspect` runs

    inspect_local(path)


OPENERS = {
    "safetensors": _safetensors,
    "inspect": _inspect,
    "gguf": _gguf,
    "torch": _torch,
    "dequant": _dequant,
}


def main() -> None:
    extra, cpu, kind, *paths = sys.argv[1:]
    # the readers need the address space already mapped (interpreter, numpy)
    # plus what the file can justify: the limit is relative to this process
    base = _vm("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (base + int(extra),) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 5))
    for path in paths:
        t0 = time.perf_counter()
        err = None
        try:
            OPENERS[kind](path)
        except BaseException as e:
            err = e
        print(
            json.dumps(
                {
                    "path": os.path.basename(path),
                    "error": type(err).__name__ if err else None,
                    "ours": isinstance(err, E.WeightsmithError),
                    "message": str(err)[:300] if err else "",
                    "seconds": time.perf_counter() - t0,
                    "peak_extra": _vm("VmPeak") - base,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
