"""Concurrency: many threads reading one open file, handles closed under a
reader, and files rewritten by another process while mapped here."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from weightsmith import errors as E
from weightsmith import gguf, quant
from weightsmith import safetensors as st
from weightsmith.quant.file import dequantize_tensor

THREADS = 8
ROUNDS = 300  # reads per thread


def _arrays(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.standard_normal((64, 96)).astype(np.float32),
        "b": rng.integers(-100, 100, (7, 5, 33)).astype(np.int16),
        "c": rng.standard_normal((1000,)).astype(np.float64),
        "d": rng.standard_normal((3, 4, 5, 6)).astype(np.float16),
    }


def _random_key(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple:
    key = []
    for d in shape:
        kind = rng.integers(4)
        if kind == 0:
            key.append(slice(None))
        elif kind == 1:
            lo = int(rng.integers(0, d))
            key.append(slice(lo, int(rng.integers(lo, d + 1)), int(rng.integers(1, 4))))
        elif kind == 2:
            key.append(int(rng.integers(0, d)))
        else:
            key.append(slice(None, None, -1))
    return tuple(key)


def _hammer(read_one, n_threads: int = THREADS) -> list[BaseException]:
    """Run ``read_one(rng)`` ROUNDS times in each of n threads; return failures."""
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        start.wait()
        try:
            for _ in range(ROUNDS):
                read_one(rng)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


# --------------------------------------------------------------------------- shared handles


@pytest.mark.parametrize("use_mmap", [True, False])
def test_threads_share_one_safetensors_handle(tmp_path, use_mmap):
    want = _arrays(0)
    p = tmp_path / "m.safetensors"
    st.save_file(want, p)
    names = sorted(want)
    with st.safe_open(p, mmap=use_mmap) as f:

        def read_one(rng):
            name = names[rng.integers(len(names))]
            if rng.integers(2):
                np.testing.assert_array_equal(f.get_tensor(name), want[name])
            else:
                key = _random_key(rng, want[name].shape)
                np.testing.assert_array_equal(f.get_slice(name)[key], want[name][key])

        assert _hammer(read_one) == []


def _gguf_file(path: Path) -> dict[str, np.ndarray]:
    """A GGUF with plain and block tensors; returns each tensor's expected float32 values."""
    rng = np.random.default_rng(1)
    plain = {"f32": rng.standard_normal((8, 64)).astype(np.float32),
             "f16": rng.standard_normal((4, 32)).astype(np.float16)}  # fmt: skip
    blocks = {
        name: quant.quantize(rng.standard_normal((4, 256)).astype(np.float32), name)
        for name in ("Q8_0", "Q4_K", "Q6_K")
    }
    w = gguf.Writer(path)
    w.add("general.architecture", "llama")
    w.add("tokens", [f"t{i}" for i in range(500)])
    for k, a in plain.items():
        w.add_tensor_info(k, k.upper(), a.shape)
    for k in blocks:
        w.add_tensor_info(k, k, (4, 256))
    w.write_header()
    for k, a in plain.items():
        w.write_tensor(k, a)
    for k, raw in blocks.items():
        w.write_tensor(k, raw)
    w.close()
    want = {k: a.astype(np.float32) for k, a in plain.items()}
    want.update({k: quant.dequantize(raw, k, (4, 256)) for k, raw in blocks.items()})
    return want


def test_threads_share_one_gguf_handle(tmp_path):
    p = tmp_path / "m.gguf"
    want = _gguf_file(p)
    names = sorted(want)
    with gguf.read(p) as f:
        tokens = list(f.metadata["tokens"])

        def read_one(rng):
            name = names[rng.integers(len(names))]
            np.testing.assert_array_equal(dequantize_tensor(f, name), want[name])
            if name == "f32":
                key = _random_key(rng, want[name].shape)
                np.testing.assert_array_equal(f.numpy(name)[key], want[name][key])
            i = int(rng.integers(len(tokens)))
            assert f.metadata["tokens"][i] == tokens[i]

        assert _hammer(read_one) == []


# --------------------------------------------------------------------------- close under a reader


def _close_race(open_handle, read_all, rounds: int = 40) -> tuple[int, int]:
    """Readers loop over a handle that the main thread closes mid-read.

    Every read returns correct data or raises ClosedFileError; anything
    else (TypeError on a dropped buffer, OSError on a closed fd, ValueError
    on a closed mmap, a crash) fails.  Returns (reads ok, named errors).
    """
    ok = named = 0
    lock = threading.Lock()
    bad: list[BaseException] = []
    for r in range(rounds):
        h = open_handle()
        go = threading.Event()

        def reader(h=h, go=go):
            nonlocal ok, named
            go.wait()
            while True:
                try:
                    read_all(h)
                except E.ClosedFileError:
                    with lock:
                        named += 1
                    return
                except BaseException as e:
                    bad.append(e)
                    return
                with lock:
                    ok += 1

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        go.set()
        threading.Event().wait(0.0005 * (r % 10))
        h.close()
        for t in threads:
            t.join()
    assert bad == [], [f"{type(e).__name__}: {e}" for e in bad[:5]]
    return ok, named


@pytest.mark.parametrize("use_mmap", [True, False])
def test_safetensors_closed_while_reading(tmp_path, use_mmap):
    want = _arrays(2)
    p = tmp_path / "m.safetensors"
    st.save_file(want, p)

    def read_all(h):
        for name, a in want.items():
            np.testing.assert_array_equal(h.get_tensor(name), a)
            np.testing.assert_array_equal(h.get_slice(name)[1:], a[1:])

    _ok, named = _close_race(lambda: st.safe_open(p, mmap=use_mmap), read_all)
    assert named == 40 * 4  # every reader ends on the named error


def test_gguf_closed_while_reading(tmp_path):
    p = tmp_path / "m.gguf"
    want = _gguf_file(p)

    def read_all(h):
        for name, a in want.items():
            np.testing.assert_array_equal(dequantize_tensor(h, name), a)

    _ok, named = _close_race(lambda: gguf.read(p), read_all)
    assert named == 40 * 4


# --------------------------------------------------------------------------- rewritten while mapped

WRITER = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import test_reliability_concurrency as t
from weightsmith import safetensors as st, gguf
kind, path = sys.argv[1], sys.argv[2]
for seed in range(10, 16):
    if kind == "safetensors":
        st.save_file(t._arrays(seed), path)
    else:
        g = gguf.Writer(path)
        g.add("general.architecture", "other%d" % seed)
        g.add("tokens", ["x%d" % seed] * 500)
        a = np.full((8, 64), seed, np.float32)
        g.add_tensor_info("f32", "F32", a.shape)
        g.write_header()
        g.write_tensor("f32", a)
        g.close()
"""


def _rewrite_in_other_process(kind: str, path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", WRITER, kind, str(path), str(Path(__file__).parent)],
        check=True,
        timeout=120,
    )


def test_safetensors_rewritten_while_mapped(tmp_path):
    want = _arrays(3)
    p = tmp_path / "m.safetensors"
    st.save_file(want, p)
    handles = [st.safe_open(p), st.safe_open(p, framework="pt")]
    views = {k: handles[0].get_tensor(k) for k in want}  # zero-copy views of the map
    _rewrite_in_other_process("safetensors", p)
    for k, a in want.items():
        np.testing.assert_array_equal(views[k], a)
        np.testing.assert_array_equal(handles[0].get_tensor(k), a)
        np.testing.assert_array_equal(handles[0].get_slice(k)[1:], a[1:])
        np.testing.assert_array_equal(handles[1].get_tensor(k).numpy(), a)
    for h in handles:
        h.close()
    with st.safe_open(p) as f:  # a new open sees the last version
        np.testing.assert_array_equal(f.get_tensor("a"), _arrays(15)["a"])


def test_gguf_rewritten_while_mapped(tmp_path):
    p = tmp_path / "m.gguf"
    want = _gguf_file(p)
    f = gguf.read(p)
    view = f.numpy("f32")
    _rewrite_in_other_process("gguf", p)
    # metadata values are decoded lazily from the map: still the old ones
    assert f.metadata["general.architecture"] == "llama"
    assert list(f.metadata["tokens"])[:3] == ["t0", "t1", "t2"]
    np.testing.assert_array_equal(view, want["f32"])
    for name, a in want.items():
        np.testing.assert_array_equal(dequantize_tensor(f, name), a)
    f.close()
    with gguf.read(p) as g:
        assert g.metadata["general.architecture"] == "other15"
