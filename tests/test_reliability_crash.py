"""Crash-safe writes: SIGKILL the writer at random points, >= 100 times.

Each scenario forks a child that writes a new version of a target over the
current one and kills it with SIGKILL after a random delay drawn from
[0, the measured write time of a forked child] (so kills land before, during and after
the write: while the header goes out, during the data, in fsync, around the
rename).  After every kill the target must be byte-identical to the complete
old or the complete new version -- never a mix, never truncated.  After the
kills, one successful write must leave no temp file behind (cleanup rule in
weightsmith._atomic; for sharded saves, weightsmith.safetensors._sharded).

Scenarios: save_file (default, and with fsync=True), StreamWriter, the GGUF Writer, gguf.edit (in-place
patches and rewrites) and save_sharded (1, 2 and 3 shards alternating; the
checkpoint is read through its entry point, as ours and transformers read it).
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from weightsmith import gguf
from weightsmith import safetensors as st

KILLS = {
    "save_file": 24,
    "save_file_fsync": 12,
    "stream": 24,
    "gguf_writer": 24,
    "gguf_edit": 24,
    "sharded": 40,
}
assert sum(KILLS.values()) >= 100
MB = 1 << 20


@functools.lru_cache(maxsize=8)  # made in the parent, so a child spends its time writing
def tensors(v: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(v)
    return {f"t{i}": rng.standard_normal((1024, 1024)).astype(np.float32) for i in range(4)}


# --------------------------------------------------------------------------- writers (run in the child)


def w_save_file(folder: Path, v: int) -> None:
    st.save_file(tensors(v), folder / "m.safetensors", {"v": str(v)})


def w_save_file_fsync(folder: Path, v: int) -> None:
    # the opt-in durable path: fsync (and early writeback) before the rename
    st.save_file(tensors(v), folder / "m.safetensors", {"v": str(v)}, fsync=True)


def w_stream(folder: Path, v: int) -> None:
    ts = tensors(v)
    spec = [(k, "F32", a.shape) for k, a in ts.items()]
    with st.StreamWriter(folder / "m.safetensors", spec, {"v": str(v)}) as w:
        for k in reversed(list(ts)):  # out of file order, in pieces
            a = ts[k]
            for i in range(0, a.shape[0], 64):
                w.write_chunk(k, a[i : i + 64])


def w_gguf(folder: Path, v: int) -> None:
    ts = tensors(v)
    w = gguf.Writer(folder / "m.gguf")
    w.add("general.architecture", "llama")
    w.add("v", v)
    w.add("tokens", [f"tok{i}" for i in range(2000 + 100 * (v % 3))])
    for k, a in ts.items():
        w.add_tensor_info(k, "F32", a.shape)
    w.write_header()
    for k, a in ts.items():
        w.write_tensor(k, a)
    w.close()


def w_gguf_edit(folder: Path, v: int) -> None:
    # lengths alternate in pairs: 2k -> 2k+1 keeps the length (in-place
    # patch), 2k+1 -> 2k+2 changes it (streamed rewrite through a temp file)
    note = ("abcdefgh"[v % 8]) * (8 if (v // 2) % 2 else 3000)
    gguf.edit(folder / "m.gguf", set={"note": note, "v": v})


def w_sharded(folder: Path, v: int) -> None:
    limit = [64 * MB, 8 * MB + 1, 4 * MB + 1][v % 3]  # 1, 2 or 4 shards of 4 MiB tensors
    st.save_sharded(tensors(v), folder / "ckpt", max_shard_size=limit)


# --------------------------------------------------------------------------- state fingerprints


def fp_file(name: str) -> Callable[[Path], str]:
    def fp(folder: Path) -> str:
        p = folder / name
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else "missing"

    return fp


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode() + np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()


def fp_checkpoint(folder: Path) -> str:
    """What a reader sees through the entry point: ours (open_checkpoint) and
    transformers' rule (model.safetensors if present, else the index) must
    both see the same complete version, so the fingerprint joins them."""
    ck = folder / "ckpt"
    if not ck.exists():
        return "missing"
    with st.open_checkpoint(ck) as c:
        ours = _digest({k: np.array(c.get_tensor(k)) for k in c})
    single = ck / st.WEIGHTS_NAME  # transformers: model.safetensors first
    if single.exists():
        theirs = _digest(st.load_file(single))
    else:
        idx = st.read_index(ck / st.INDEX_NAME)
        arrays = {}
        for shard in set(idx["weight_map"].values()):
            arrays.update(st.load_file(ck / shard))
        theirs = _digest({k: arrays[k] for k in idx["weight_map"]})
    return ours + "|" + theirs


SCENARIOS = {
    "save_file": (w_save_file, fp_file("m.safetensors"), None),
    "save_file_fsync": (w_save_file_fsync, fp_file("m.safetensors"), None),
    "stream": (w_stream, fp_file("m.safetensors"), None),
    "gguf_writer": (w_gguf, fp_file("m.gguf"), None),
    "gguf_edit": (w_gguf_edit, fp_file("m.gguf"), w_gguf),
    "sharded": (w_sharded, fp_checkpoint, None),
}


def scratch_copy(folder: Path, scratch: Path) -> Path:
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(folder, scratch)
    return scratch


def _fork_and_kill(write, folder: Path, v: int, delay: float, wait: bool = False) -> bool:
    """Run ``write(folder, v)`` in a forked child, SIGKILL it after ``delay`` s
    (or let it finish if ``wait``); True if it finished first."""
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            write(folder, v)
            code = 0
        finally:
            os._exit(code)
    time.sleep(delay)
    done, status = os.waitpid(pid, os.WNOHANG)
    deadline = time.monotonic() + 120
    while wait and done == 0 and time.monotonic() < deadline:
        time.sleep(0.005)  # bounded: a child that hangs must fail the test, not CI
        done, status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert not wait, "the writer child hung"
        return False
    assert os.waitstatus_to_exitcode(status) == 0
    return True


def _strays(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob(".*")
        if p.name.endswith((".wstmp", ".wsold"))
    )


def _expected_after(write, fingerprint, folder: Path, v: int, scratch: Path) -> str:
    """Fingerprint of the state after ``write(v)`` completes on a copy of ``folder``."""
    write(scratch_copy(folder, scratch), v)
    return fingerprint(scratch)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sigkill_leaves_old_or_new(tmp_path, name):
    write, fingerprint, setup = SCENARIOS[name]
    folder = tmp_path / "target"
    folder.mkdir()
    scratch = tmp_path / "scratch"
    (setup or write)(folder, 0)
    write(folder, 1)
    # the write time as the child sees it (fork, page faults and all)
    tensors(2)
    times = []
    for _ in range(3):
        scratch_copy(folder, scratch)
        t0 = time.perf_counter()
        assert _fork_and_kill(write, scratch, 2, 0.0, wait=True)
        times.append(time.perf_counter() - t0)
    duration = min(times)
    rng = random.Random(f"{name}-{os.getpid()}")
    v, mid_write, finished, became_new, kills = 1, 0, 0, 0, 0
    # At least KILLS[name] kills, and more (bounded) until three of them landed mid-write.
    while kills < KILLS[name] or (mid_write < 3 and kills < 4 * KILLS[name]):
        old = fingerprint(folder)
        new = _expected_after(write, fingerprint, folder, v + 1, scratch)
        assert new != old
        before = set(_strays(folder))
        done = _fork_and_kill(write, folder, v + 1, rng.uniform(0, duration))
        landed = bool(set(_strays(folder)) - before)
        mid_write += landed
        now = fingerprint(folder)
        assert now in (old, new), f"{name}: a kill left neither the old nor the new version"
        if now == new:
            v += 1
            became_new += 1
        finished += done
        kills += 1
        # The child's speed moves with the machine's load: keep the kill window on the
        # write, shrinking it when the writer finished first, widening it when the
        # kill came before the writer had started.
        if done:
            duration *= 0.8
        elif not landed and now == old:
            duration *= 1.1
    # kills landed mid-write (a new temp file left behind)
    assert mid_write >= 3, (mid_write, finished)
    # the next successful write leaves nothing behind
    write(folder, v + 1)
    assert _strays(folder) == []
    print(
        f"{name}: {kills} kills, {mid_write} left a temp file, {became_new} left the new "
        f"version, {finished} finished before the kill"
    )
