"""Differential checks of weightsmith.{flax,tensorflow,paddle,mlx} against HF's
safetensors.{flax,tensorflow,paddle,mlx}: the same files, the same tensors,
byte-identical saves.

Run as ``python tests/framework_cases.py FRAMEWORK`` (one framework per
process: paddle segfaults when imported after tensorflow, measured with
paddlepaddle 3.3.1 and tensorflow-cpu 2.21).  Prints one line per check and
exits non-zero on the first failure; tests/test_compat_frameworks.py runs it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

# --------------------------------------------------------------------------- per framework
# make(values: np.ndarray, dtype_name) -> tensor; raw(tensor) -> (dtype str, shape, bytes)
# computed with the framework's own API, never weightsmith's adapters.


def _jax():
    import jax.numpy as jnp

    def make(a, dt):
        return jnp.asarray(a.astype(getattr(ml_dtypes, dt, None) or np.dtype(dt)))

    def raw(x):
        a = np.asarray(x)
        return str(x.dtype), tuple(x.shape), a.tobytes()

    dtypes = ["float32", "float16", "bfloat16", "int32", "uint8", "int8", "bool", "complex64",
              "float8_e4m3fn", "float8_e5m2", "uint16"]  # fmt: skip
    return make, raw, dtypes, "jax.numpy"


def _tf():
    import tensorflow as tf

    def make(a, dt):
        return tf.convert_to_tensor(a.astype(getattr(ml_dtypes, dt, None) or np.dtype(dt)))

    def raw(x):
        return str(x.dtype), tuple(x.shape), x.numpy().tobytes()

    dtypes = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool",
              "complex64", "float8_e4m3fn", "float8_e5m2", "uint16"]  # fmt: skip
    return make, raw, dtypes, "tensorflow"


def _paddle():
    import paddle

    def make(a, dt):
        return paddle.to_tensor(a.astype(np.float32)).astype(getattr(paddle, dt)) if dt in (
            "bfloat16", "float8_e4m3fn", "float8_e5m2") else paddle.to_tensor(a.astype(dt))  # fmt: skip

    def raw(x):
        return str(x.dtype), tuple(x.shape), x.numpy().tobytes()

    dtypes = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "uint8",
              "int8", "bool", "float8_e4m3fn", "float8_e5m2"]  # fmt: skip
    return make, raw, dtypes, "paddle"


def _mlx():
    import mlx.core as mx

    def make(a, dt):
        return mx.array(a.astype(np.float32)).astype(getattr(mx, "bool_" if dt == "bool" else dt))

    def raw(x):
        y = x.view(mx.uint16) if x.dtype == mx.bfloat16 else x
        return str(x.dtype), tuple(x.shape), np.asarray(y).tobytes()

    dtypes = ["float32", "float16", "int32", "int64", "uint8", "uint32", "int8", "bool",
              "complex64", "bfloat16"]  # fmt: skip
    return make, raw, dtypes, "mlx.core"


FRAMEWORKS = {
    "flax": (_jax, "flax", "jax"),
    "tensorflow": (_tf, "tensorflow", "tf"),
    "paddle": (_paddle, "paddle", "paddle"),
    "mlx": (_mlx, "mlx", "mlx"),
}
# dtypes HF's module itself fails on (measured, safetensors 0.8.0), checked on
# our side only: saving (HF_CANNOT_SAVE) or loading (HF_CANNOT_LOAD)
HF_CANNOT_SAVE = {
    "mlx": {"t_bfloat16"},  # HF's _mx2np: numpy has no bfloat16 buffer format
    "tensorflow": {"scalar"},  # HF's _tf2np: a 0-d tensor's .numpy() is a numpy scalar
}
HF_CANNOT_LOAD = {
    # HF looks the float8 types up on the numpy module, which has none
    "flax": {"t_float8_e4m3fn", "t_float8_e5m2"},
    "tensorflow": {"t_float8_e4m3fn", "t_float8_e5m2"},
    "paddle": {"zero_sized"},  # HF: "strides[0] must be 1 to view uint8 as float32"
}
# HF's paddle pread backend fails on every tensor ("Could not find module"):
# our pread is compared with HF's mmap there
HF_PREAD_BROKEN = {"paddle"}
# HF's paddle safe_open aborts the process (SIGABRT, "The deleter of the
# pointer is not found") after get_tensor + get_slice on mmap: our safe_open
# is compared with HF's load_file (which works) and paddle's own slicing
HF_SAFE_OPEN_BROKEN = {"paddle"}
# HF's load(bytes) goes through safetensors.numpy, which has no BF16 either
_NUMPY_LACKS = {"t_bfloat16", "t_float8_e4m3fn", "t_float8_e5m2"}
HF_CANNOT_LOAD_BYTES = {"flax": _NUMPY_LACKS, "tensorflow": _NUMPY_LACKS, "mlx": _NUMPY_LACKS}


def check(name: str, ok: bool, detail: str = "") -> None:
    print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""))
    if not ok:
        sys.exit(1)


def same_tensors(label, raw, a: dict, b: dict) -> None:
    check(f"{label}: names", sorted(a) == sorted(b), f"{sorted(a)} vs {sorted(b)}")
    for k in a:
        ra, rb = raw(a[k]), raw(b[k])
        check(f"{label}: {k}", ra == rb, f"{ra[:2]} vs {rb[:2]}")


def run(fw: str) -> None:
    maker, hf_name, open_name = FRAMEWORKS[fw]
    make, raw, dtypes, _ = maker()
    hf = importlib.import_module(f"safetensors.{hf_name}")
    import safetensors as hf_top

    import weightsmith as ws

    ours = importlib.import_module(f"weightsmith.{hf_name}")
    rng = np.random.default_rng(0)
    values = rng.standard_normal((4, 6)).astype(np.float32) * 4
    tensors = {f"t_{dt}": make(values if dt != "bool" else values > 0, dt) for dt in dtypes}
    tensors["zero_sized"] = make(np.zeros((2, 0), np.float32), "float32")
    tensors["scalar"] = make(np.array(1.5, np.float32), "float32")
    both = {k: v for k, v in tensors.items() if k not in HF_CANNOT_SAVE.get(fw, ())}
    loadable = {k: v for k, v in both.items() if k not in HF_CANNOT_LOAD.get(fw, ())}
    md = {"format": "x"}

    # saves: byte-identical (HF's save may replace the dict's values: give it a copy)
    hb = hf.save(dict(both), metadata=md)
    wb = ours.save(both, metadata=md)
    check("save bytes identical", hb == wb)
    tmp = Path(tempfile.mkdtemp())
    hf.save_file(dict(both), tmp / "hf.safetensors", metadata=md)
    ours.save_file(both, tmp / "ws.safetensors", metadata=md)
    check(
        "save_file bytes identical",
        (tmp / "hf.safetensors").read_bytes() == (tmp / "ws.safetensors").read_bytes(),
    )
    check("save leaves the caller's dict alone", all(both[k] is tensors[k] for k in both))

    # loads: same tensors from the same file
    hl = hf.save(dict(loadable))
    (tmp / "hl.safetensors").write_bytes(hl)
    for backend in ("mmap", "pread"):
        hf_backend = "mmap" if fw in HF_PREAD_BROKEN else backend
        h = hf.load_file(tmp / "hl.safetensors", backend=hf_backend)
        w = ours.load_file(tmp / "hl.safetensors", backend=backend)
        same_tensors(f"load_file backend={backend}", raw, h, w)
        w = ours.load_file(tmp / "hf.safetensors", backend=backend)
        same_tensors(f"load_file backend={backend} vs input, all dtypes", raw, both, w)
    lb = hf.save({k: v for k, v in loadable.items() if k not in HF_CANNOT_LOAD_BYTES.get(fw, ())})
    same_tensors("load(bytes)", raw, hf.load(lb), ours.load(lb))
    same_tensors("load(bytes) vs input, all dtypes", raw, both, ours.load(hb))

    # safe_open(framework=...) on both, every name, and slices
    if fw in HF_SAFE_OPEN_BROKEN:
        ref = hf.load_file(tmp / "hl.safetensors")
        for backend in ("mmap", "pread"):
            with ws.safe_open(tmp / "hl.safetensors", framework=open_name, backend=backend) as f:
                same_tensors(f"safe_open({open_name}) get_tensor backend={backend} vs HF load_file",
                             raw, ref, {k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118  # fmt: skip
                for key in (slice(1, 3), (slice(None), 2)):
                    got, want = raw(f.get_slice("t_float32")[key]), raw(ref["t_float32"][key])
                    check(
                        f"get_slice[{key}] backend={backend}",
                        got == want,
                        f"{got[:2]} vs {want[:2]}",
                    )
                got = raw(f.get_slice("t_float32")[[]])
                check(f"get_slice[[]] backend={backend}", got[:2] == ("paddle.float32", (0, 6)))
        backends: tuple[str, ...] = ()
    else:
        backends = ("mmap", "pread")
    for backend in backends:
        hf_backend = "mmap" if fw in HF_PREAD_BROKEN else backend
        with (
            hf_top.safe_open(tmp / "hl.safetensors", framework=open_name, backend=hf_backend) as fh,
            ws.safe_open(tmp / "hl.safetensors", framework=open_name, backend=backend) as fw_,
        ):
            check(
                f"safe_open({open_name}) keys/metadata",
                (fh.keys(), fh.metadata()) == (fw_.keys(), fw_.metadata()),
            )
            same_tensors(f"safe_open({open_name}) get_tensor backend={backend}", raw,
                         {k: fh.get_tensor(k) for k in fh.keys()}, {k: fw_.get_tensor(k) for k in fw_.keys()})  # noqa: SIM118  # fmt: skip
            for key in (slice(1, 3), (slice(None), 2), []):
                hs, ws_ = fh.get_slice("t_float32")[key], fw_.get_slice("t_float32")[key]
                check(
                    f"get_slice[{key}] backend={backend}",
                    raw(hs) == raw(ws_),
                    f"{raw(hs)[:2]} vs {raw(ws_)[:2]}",
                )
    if open_name == "flax":
        with ws.safe_open(tmp / "hf.safetensors", framework="jax") as f:
            check(
                "framework='jax' is flax", raw(f.get_tensor("t_float32")) == raw(both["t_float32"])
            )

    # beyond HF: dtypes its module cannot take round-trip through ours
    for k in set(tensors) - set(both):
        data = ours.save({k: tensors[k]})
        check(f"ours round-trips {k}", raw(ours.load(data)[k]) == raw(tensors[k]))


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """Address ranges where this process maps ``path`` (Linux /proc/self/maps)."""
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(str(path)):
            lo, hi = line.split()[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


def zero_copy_jax() -> None:
    """A tensor whose data is 64-byte aligned in the file is a view of the map."""
    import jax.numpy as jnp

    import weightsmith as ws
    from weightsmith import flax

    tmp = Path(tempfile.mkdtemp()) / "aligned.safetensors"
    x = jnp.arange(4096, dtype=jnp.float32)
    for pad in range(64):  # metadata length that puts the data start on 64 bytes
        data = flax.save({"x": x}, metadata={"pad": "p" * pad})
        if (8 + int.from_bytes(data[:8], "little")) % 64 == 0:
            break
    tmp.write_bytes(data)
    with ws.safe_open(tmp, framework="flax") as f:
        y = f.get_tensor("x")
        ranges = _mapped_ranges(tmp)
        ptr = y.unsafe_buffer_pointer()
        check("jax: aligned tensor is zero-copy", any(lo <= ptr < hi for lo, hi in ranges))
        check("jax: same values", bool((y == x).all()))


def missing_dependency(fw: str) -> None:
    """Import blocked: a MissingDependencyError naming the extra, nothing written."""
    _, hf_name, _ = FRAMEWORKS[fw]
    top = {"flax": "jax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}[fw]
    code = f"""
import sys, tempfile, os
sys.modules[{top!r}] = None
import numpy as np
from weightsmith import {hf_name} as m, errors
d = tempfile.mkdtemp()
try:
    m.save_file({{"a": np.zeros(2)}}, os.path.join(d, "x.safetensors"))
except errors.MissingDependencyError as e:
    assert "weightsmith[" in str(e) and isinstance(e, ImportError), e
    assert os.listdir(d) == [], os.listdir(d)
    print("missing ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    check(
        "MissingDependencyError without the framework",
        "missing ok" in out.stdout,
        out.stderr[-500:],
    )


if __name__ == "__main__":
    name = sys.argv[1]
    run(name)
    if name == "flax":
        zero_copy_jax()
    missing_dependency(name)
    print("all ok")
