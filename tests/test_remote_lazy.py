"""Lazy remote reads (issue 19, section 1): safe_open / open_checkpoint / gguf.read of URLs.

Against the real nginx of the remote tests (request and byte counts from its
access log) and a fault-injecting proxy of our own in front of it
(tests/support/fault_proxy.py).  Values are checked against HF safetensors and
gguf-py reading the same files locally.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
import time

import numpy as np
import pytest
import torch
from safetensors import safe_open as hf_safe_open
from safetensors.torch import save_file

from support.fault_proxy import FaultProxy
from support.nginx_fixture import TOKEN
from weightsmith import errors, gguf
from weightsmith.byteio import RemoteOptions
from weightsmith.byteio import _http as byteio_http
from weightsmith.safetensors import SPECULATIVE, open_checkpoint, safe_open


def _settle(server, n, which="log"):
    server.wait_logged(n, which)
    time.sleep(0.1)  # a line that should not be there would land now
    return getattr(server, which)()


def _ranges(lines):
    out = []
    for ln in lines:
        a, b = ln.range.removeprefix("bytes=").split("-")
        out.append((int(a), int(b) + 1))
    return out


@pytest.fixture(scope="module")
def lazy(remote_tree):
    """lazy/model.safetensors (HF safetensors.torch) with one 4 MiB tensor, served by nginx."""
    d = remote_tree.root / "lazy"
    d.mkdir(exist_ok=True)
    g = torch.Generator().manual_seed(1)
    tensors = {
        "big": torch.randn(1024, 2048, generator=g).to(torch.bfloat16),  # 4 MiB
        "mid": torch.randn(300, 256, generator=g).to(torch.float16),
        "col": torch.randn(16, 64, generator=g),
        "ids": torch.arange(10, dtype=torch.int64),
    }
    path = d / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    pristine = path.read_bytes()
    yield {"path": path, "url_path": "/lazy/model.safetensors", "bytes": pristine}
    shutil.rmtree(d)


def _oracle(path, name):
    with hf_safe_open(str(path), "pt") as f:
        return f.get_tensor(name)


def _span(path, name):
    """(start, stop) of a tensor's bytes in the file, from HF's own header."""
    import json
    import struct

    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8 : 8 + n])
    a, b = h[name]["data_offsets"]
    return 8 + n + a, 8 + n + b


# --------------------------------------------------------------------------- safe_open


def test_header_only_then_tensor_bytes_on_demand(nginx, lazy):
    url = nginx.url + lazy["url_path"]
    with safe_open(url, framework="pt") as f:
        lines = _settle(nginx, 1)
        assert [ln.range for ln in lines] == [f"bytes=0-{SPECULATIVE - 1}"]
        assert sorted(f.keys()) == ["big", "col", "ids", "mid"]
        nginx.clear()
        got = f.get_tensor("big")
        a, b = _span(lazy["path"], "big")
        lo = max(a, SPECULATIVE)  # its first bytes came with the header request
        lines = _settle(nginx, 2)
        # parts of at most 2 MiB that tile the rest of the 4 MiB tensor, nothing else
        spans = sorted(_ranges(lines))
        assert spans[0][0] == lo and spans[-1][1] == b and len(spans) == 2
        assert all(x[1] == y[0] for x, y in itertools.pairwise(spans))
        assert [ln.status for ln in lines] == [206, 206]
        assert sum(ln.bytes for ln in lines) == b - lo
        assert f.remote.requests == 3
    assert torch.equal(got, _oracle(lazy["path"], "big"))


def test_slice_fetches_only_its_byte_ranges(nginx, lazy):
    url = nginx.url + lazy["url_path"]
    with safe_open(url, framework="np") as f:
        nginx.clear()
        rows = f.get_slice("big")[100:103]
        a, _ = _span(lazy["path"], "big")
        row = 2048 * 2
        assert a + 100 * row > SPECULATIVE
        assert _ranges(_settle(nginx, 1)) == [(a + 100 * row, a + 103 * row)]
        nginx.clear()
        cols = f.get_slice("big")[200:204, 8:24]
        lines = _settle(nginx, 4)
        want = [(a + r * row + 16, a + r * row + 48) for r in range(200, 204)]
        assert sorted(_ranges(lines)) == want  # 4 runs of 16 bf16 values, nothing else
        assert sum(ln.bytes for ln in lines) == 4 * 16 * 2
    big = _oracle(lazy["path"], "big").view(torch.int16).numpy()
    assert np.array_equal(rows.view(np.int16), big[100:103])
    assert np.array_equal(cols.view(np.int16), big[200:204, 8:24])


def test_get_tensors_fetches_each_byte_once(nginx, lazy):
    url = nginx.url + lazy["url_path"]
    opts = RemoteOptions(part_size=1 << 20, window=3)
    with safe_open(url, framework="pt", remote=opts) as f:
        got = f.get_tensors()
        n = f.remote.requests
    lines = _settle(nginx, n)
    assert len(lines) == n
    spans = sorted(_ranges(lines))
    # the header request, then disjoint parts of <= 1 MiB that tile the rest of the file
    assert spans[0][0] == 0 and spans[-1][1] == lazy["path"].stat().st_size
    assert all(x[1] == y[0] for x, y in itertools.pairwise(spans))
    assert all(b - a <= 1 << 20 for a, b in spans[1:])
    assert sum(ln.bytes for ln in lines) == lazy["path"].stat().st_size
    for name, t in got.items():
        assert torch.equal(t, _oracle(lazy["path"], name)), name


def test_parallel_window_is_bounded(nginx, lazy, monkeypatch):
    active, peak, lock = [0], [0], threading.Lock()
    real = byteio_http.HTTPSource.fetch

    def fetch(self, start, stop):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.02)
            return real(self, start, stop)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(byteio_http.HTTPSource, "fetch", fetch)
    with safe_open(
        nginx.url + lazy["url_path"], remote=RemoteOptions(part_size=256 << 10, window=3)
    ) as f:
        got = f.get_tensor("big")  # 16 parts
    assert peak[0] == 3
    assert np.array_equal(
        got.view(np.int16), _oracle(lazy["path"], "big").view(torch.int16).numpy()
    )


def test_server_ignoring_range_still_gives_the_right_bytes(nginx, remote_tree):
    local = remote_tree.files / "small.safetensors"
    with safe_open(f"{nginx.url}/noranges/small.safetensors", framework="pt") as f:
        for name in f.keys():  # noqa: SIM118
            assert torch.equal(f.get_tensor(name), _oracle(local, name)), name


# --------------------------------------------------------------------------- checkpoints, GGUF


@pytest.fixture
def hub(nginx, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", nginx.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return nginx


def test_open_checkpoint_of_a_hub_repo(hub, remote_tree):
    local = remote_tree.files / "sharded"
    with open_checkpoint("hf://org/sharded", framework="pt") as ck:
        lines = _settle(hub, 5)
        # model.safetensors probed (404), the index, one header request per shard
        assert sorted(ln.path.rsplit("/", 1)[-1] for ln in lines) == sorted(
            ["model.safetensors", "model.safetensors.index.json"]
            + [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
        )
        assert [ln.status for ln in lines if ln.path.endswith("/model.safetensors")] == [404]
        names = ck.keys()
        for name in names:
            shard = ck.weight_map()[name]
            assert torch.equal(ck.get_tensor(name), _oracle(local / shard, name)), name
    assert len(names) == 16


def test_gguf_read_of_a_url(nginx, remote_tree):
    import gguf as gguf_py

    local = remote_tree.files / "model.gguf"
    ref = {t.name: bytes(t.data.tobytes()) for t in gguf_py.GGUFReader(str(local)).tensors}
    with gguf.read(f"{nginx.url}/files/model.gguf") as f:
        n_header = f.remote[0].requests
        nginx.clear()
        for t in f.tensors:
            assert f.tensor_bytes(t.name).tobytes() == ref[t.name], t.name
        assert f.numpy("output_norm.weight").tolist() == [1.0] * 64
        lines = _settle(nginx, len(f.tensors))
    # past the header, one request per tensor not already in the header's prefix
    assert n_header <= 3
    assert all(ln.status == 206 for ln in lines)
    assert sum(ln.bytes for ln in lines) <= sum(len(v) for v in ref.values())


def test_gguf_read_of_a_split_set_url(nginx, remote_tree):
    import gguf as gguf_py

    split = sorted((remote_tree.files / "split").iterdir())
    ref = {}
    for p in split:
        ref.update({t.name: t.data.tobytes() for t in gguf_py.GGUFReader(str(p)).tensors})
    with gguf.read(f"{nginx.url}/files/split/{split[1].name}") as f:
        assert len(f.paths) == len(split)
        assert {t.name: f.tensor_bytes(t.name).tobytes() for t in f.tensors} == ref


# --------------------------------------------------------------------------- tokens


def test_hf_token_to_the_endpoint_only_and_dropped_on_cross_origin_redirect(hub, monkeypatch, lazy):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    local = hub.root2 / "cdn/private/model.safetensors"
    with safe_open("hf://org/private/model.safetensors", framework="pt") as f:
        t = f.get_tensor("lm_head.weight")
    with hf_safe_open(str(local), "pt") as ref:
        assert torch.equal(t, ref.get_tensor("lm_head.weight"))
    # the endpoint saw the token once (the 302); the other origin never did
    assert [(ln.status, ln.auth) for ln in _settle(hub, 1)] == [(302, f"Bearer {TOKEN}")]
    lines2 = _settle(hub, 2, "log2")
    assert len(lines2) == 2 and all(ln.auth == "" and ln.status == 206 for ln in lines2)


def test_explicit_token_goes_only_to_the_url_given(nginx, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    opts = RemoteOptions(token=TOKEN)
    with safe_open(f"{nginx.url}/org/private/resolve/main/model.safetensors", remote=opts) as f:
        f.get_tensor("lm_head.weight")
    assert [(ln.status, ln.auth) for ln in _settle(nginx, 1)] == [(302, f"Bearer {TOKEN}")]
    assert {ln.auth for ln in _settle(nginx, 2, "log2")} == {""}


# --------------------------------------------------------------------------- block cache


def test_block_cache_serves_repeats_stays_bounded_and_writes_nowhere_else(
    nginx, lazy, tmp_path, monkeypatch
):
    home, work, cache = tmp_path / "home", tmp_path / "work", tmp_path / "cache"
    for d in (home, work):
        d.mkdir()
    for var in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "HF_HOME"):
        monkeypatch.setenv(var, str(home))
    monkeypatch.chdir(work)
    url = nginx.url + lazy["url_path"]
    block = 256 << 10
    opts = RemoteOptions(cache_dir=cache, cache_max_bytes=6 * block, block_size=block)
    with safe_open(url, framework="np", remote=opts) as f:
        mid = f.get_tensor("mid")
    first = _settle(nginx, 2)
    nginx.clear()
    assert opts.cache().misses > 0 and opts.cache().hits == 0
    # a new process would open the folder afresh: a new options object, a new BlockCache
    opts2 = RemoteOptions(cache_dir=cache, cache_max_bytes=6 * block, block_size=block)
    with safe_open(url, framework="np", remote=opts2) as f:
        again = f.get_tensor("mid")
    lines = _settle(nginx, 1)
    assert len(lines) == 1  # the header only: the tensor came from the cache
    assert opts2.cache().hits > 0 and opts2.cache().misses == 0
    assert np.array_equal(again, mid)
    assert np.array_equal(mid, _oracle(lazy["path"], "mid").numpy())
    assert len(first) == 2
    # a 4 MiB tensor through a 1.5 MiB cache: right values, cache kept under its limit
    with safe_open(url, framework="np", remote=opts) as f:
        big = f.get_tensor("big")
    assert np.array_equal(
        big.view(np.int16), _oracle(lazy["path"], "big").view(torch.int16).numpy()
    )
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".blk" for p in files)
    assert sum(p.stat().st_size for p in files) == opts.cache().nbytes <= 6 * block
    assert list(home.rglob("*")) == [] and list(work.rglob("*")) == []


# --------------------------------------------------------------------------- faults


@pytest.fixture(scope="module")
def proxy(nginx_server):
    p = FaultProxy(nginx_server.url, stall_seconds=1.5).start()
    yield p
    p.stop()


def _sleeps(monkeypatch):
    waited: list[float] = []
    monkeypatch.setattr(byteio_http, "_sleep", waited.append)
    return waited


def test_retries_500_429_truncated_and_timeout_then_right_bytes(proxy, lazy, monkeypatch):
    url = proxy.url + lazy["url_path"]
    opts = RemoteOptions(retries=5, timeout=0.5, part_size=8 << 20)  # one request at a time
    with safe_open(url, framework="pt", remote=opts) as f:
        waited = _sleeps(monkeypatch)
        proxy.queue([500, 429, "truncate", "stall", "short"])
        got = f.get_tensor("big")
    assert torch.equal(got, _oracle(lazy["path"], "big"))
    assert [s for s, _ in proxy.seen] == ["500", "429", "truncate", "stall", "short", "pass"]
    assert len({r for _, r in proxy.seen}) == 1  # the same range each time
    # backoff doubles from 0.5 s; the 429's Retry-After (1 s) replaces its step
    assert waited[:2] == [0.5, 1.0]
    assert len(waited) == 5


def test_persistent_truncation_is_a_named_error(proxy, lazy, monkeypatch):
    opts = RemoteOptions(retries=2, part_size=8 << 20)
    with safe_open(proxy.url + lazy["url_path"], remote=opts) as f:
        _sleeps(monkeypatch)
        proxy.queue(["truncate"] * 20)
        with pytest.raises(errors.RemoteConnectionError):
            f.get_tensor("big")
        proxy.queue(["short"] * 20)
        with pytest.raises(errors.RemoteShortRead, match="received"):
            f.get_tensor("big")
        proxy.queue([503] * 20)
        with pytest.raises(errors.RemoteHTTPError, match="503"):
            f.get_tensor("big")


@pytest.fixture
def mutable(remote_tree, lazy):
    """A copy of lazy/model.safetensors that a test may change; put back afterwards."""
    path = remote_tree.root / "lazy" / "changing.safetensors"
    path.write_bytes(lazy["bytes"])
    os.utime(path, (1_700_000_000, 1_700_000_000))
    yield path
    path.unlink()


def test_file_changed_between_header_and_data(nginx, mutable):
    url = f"{nginx.url}/lazy/changing.safetensors"
    with safe_open(url) as f:
        data = bytearray(mutable.read_bytes())
        data[-1] ^= 0xFF  # same size, new content, new mtime -> new ETag
        mutable.write_bytes(bytes(data))
        os.utime(mutable, (1_700_000_100, 1_700_000_100))
        with pytest.raises(errors.RemoteFileChanged, match="ETag"):
            f.get_tensor("big")


def test_file_changed_during_a_multipart_read(nginx, mutable, monkeypatch):
    real = byteio_http.HTTPSource.fetch
    calls = [0]

    def fetch(self, start, stop):
        out = real(self, start, stop)
        calls[0] += 1
        if calls[0] == 2:  # after the first data part: the file grows
            with open(mutable, "ab") as fh:
                fh.write(b"\0" * 64)
        return out

    url = f"{nginx.url}/lazy/changing.safetensors"
    with safe_open(url, remote=RemoteOptions(part_size=512 << 10, window=1)) as f:
        monkeypatch.setattr(byteio_http.HTTPSource, "fetch", fetch)
        with pytest.raises(errors.RemoteFileChanged):
            f.get_tensor("big")


# --------------------------------------------------------------------------- fsspec


def test_fsspec_url(lazy, remote_tree):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/ws-lazy/model.safetensors", lazy["bytes"])
    fs.pipe("/ws-lazy/model.gguf", (remote_tree.files / "model.gguf").read_bytes())
    try:
        with safe_open("memory://ws-lazy/model.safetensors", framework="pt") as f:
            assert f.remote.requests == 2  # info() and the header prefix
            big = f.get_tensor("big")
            part = f.get_slice("mid")[5:7]
        assert torch.equal(big, _oracle(lazy["path"], "big"))
        assert torch.equal(part, _oracle(lazy["path"], "mid")[5:7])
        with (
            gguf.read("memory://ws-lazy/model.gguf") as g,
            gguf.read(remote_tree.files / "model.gguf") as ref,
        ):
            for t in ref.tensors:
                assert np.array_equal(g.tensor_bytes(t.name), ref.tensor_bytes(t.name)), t.name
    finally:
        fs.rm("/ws-lazy", recursive=True)
