"""weightsmith.remote.inspect against a real nginx; requests asserted from its access log."""

from __future__ import annotations

import json
import struct
import time

import pytest

from support.nginx_fixture import TOKEN
from support.remote_oracles import gguf_counts, gguf_tensors, hf_counts, hf_tensors, hub_counts
from weightsmith import errors, remote
from weightsmith.inspection import SPECULATIVE, inspect_local


def _header_n(path) -> int:
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def _for(lines, path):
    return [ln for ln in lines if ln.path == path]


def _settle(nginx, n, which="log"):
    nginx.wait_logged(n, which)
    # a few ms more: a line that should not be there would land now
    time.sleep(0.1)
    return getattr(nginx, which)()


# --------------------------------------------------------------------------- safetensors


def test_small_header_is_one_request(nginx, remote_tree):
    local = remote_tree.files / "small.safetensors"
    assert 8 + _header_n(local) < SPECULATIVE < local.stat().st_size
    rep = remote.inspect(f"{nginx.url}/files/small.safetensors")
    assert rep.parameter_count == hf_counts(local)
    assert {t.name: (t.dtype, t.shape) for t in rep.tensors} == hf_tensors(local)
    assert rep.files[0].size == local.stat().st_size
    lines = _for(_settle(nginx, 1), "/files/small.safetensors")
    assert len(lines) == 1
    # inclusive range: bytes 0..102399 are exactly 100 KiB
    assert lines[0].range == f"bytes=0-{SPECULATIVE - 1}"
    assert lines[0].status == 206
    assert lines[0].bytes == SPECULATIVE
    assert rep.requests == 1 and rep.bytes_fetched == SPECULATIVE


def test_large_header_is_two_requests(nginx, remote_tree):
    local = remote_tree.files / "big.safetensors"
    n = _header_n(local)
    assert 8 + n > SPECULATIVE
    rep = remote.inspect(f"{nginx.url}/files/big.safetensors")
    assert rep.parameter_count == hf_counts(local)
    assert len(rep.tensors) == 2500
    lines = _for(_settle(nginx, 2), "/files/big.safetensors")
    assert [ln.range for ln in lines] == [
        f"bytes=0-{SPECULATIVE - 1}",
        f"bytes={SPECULATIVE}-{8 + n - 1}",
    ]
    assert [ln.status for ln in lines] == [206, 206]
    # nothing fetched twice, nothing past the header
    assert rep.bytes_fetched == 8 + n


def test_offsets_match_local_header(nginx, remote_tree):
    rep = remote.inspect(f"{nginx.url}/files/small.safetensors")
    loc = inspect_local(remote_tree.files / "small.safetensors")
    assert [(t.name, t.offset, t.nbytes) for t in rep.tensors] == [
        (t.name, t.offset, t.nbytes) for t in loc.tensors
    ]
    assert rep.files[0].metadata == {"format": "pt"}


def test_range_ignored_200_reads_only_what_it_needs(nginx, remote_tree):
    local = remote_tree.files / "small.safetensors"
    rep = remote.inspect(f"{nginx.url}/noranges/small.safetensors")
    assert rep.parameter_count == hf_counts(local)
    lines = _for(_settle(nginx, 1), "/noranges/small.safetensors")
    assert len(lines) == 1 and lines[0].status == 200
    # the client stopped reading after the speculative size
    assert rep.bytes_fetched <= SPECULATIVE < local.stat().st_size


def test_tiny_file(nginx):
    rep = remote.inspect(f"{nginx.url}/files/tiny.safetensors")
    assert rep.tensors == [] and rep.total_parameters == 0
    assert rep.files[0].size == 16
    assert len(_for(_settle(nginx, 1), "/files/tiny.safetensors")) == 1


def test_empty_file_is_a_named_error(nginx):
    with pytest.raises(errors.FileTooSmall):
        remote.inspect(f"{nginx.url}/files/empty.safetensors")
    assert len(_for(_settle(nginx, 1), "/files/empty.safetensors")) == 1


@pytest.mark.parametrize("name", ["tiny.safetensors", "small.safetensors"])
def test_416_retries_without_range(nginx, remote_tree, name):
    local = remote_tree.files / name
    rep = remote.inspect(f"{nginx.url}/range416/{name}")
    assert rep.parameter_count == hf_counts(local)
    assert rep.files[0].size == local.stat().st_size
    lines = _for(_settle(nginx, 2), f"/range416/{name}")
    assert [(ln.status, bool(ln.range)) for ln in lines] == [(416, True), (200, False)]
    # the plain GET was cut at what was needed; the 416 error page is counted too
    assert rep.bytes_fetched <= SPECULATIVE + lines[0].bytes


def test_missing_file_is_remote_not_found(nginx):
    with pytest.raises(errors.RemoteNotFound):
        remote.inspect(f"{nginx.url}/files/nope.safetensors")


def test_sharded_index_each_shard_once(nginx, remote_tree):
    folder = remote_tree.files / "sharded"
    shards = sorted(folder.glob("*.safetensors"))
    rep = remote.inspect(f"{nginx.url}/files/sharded/model.safetensors.index.json", jobs=2)
    assert rep.parameter_count == hf_counts(*shards)
    assert [f.path.rsplit("/", 1)[-1] for f in rep.files] == [s.name for s in shards]
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert rep.index_metadata == index["metadata"]
    lines = _settle(nginx, 4)
    assert len(_for(lines, "/files/sharded/model.safetensors.index.json")) == 1
    for s in shards:
        assert len(_for(lines, f"/files/sharded/{s.name}")) == 1
    assert len(lines) == 4


# --------------------------------------------------------------------------- GGUF


def test_gguf_growing_chunks(nginx, remote_tree):
    local = remote_tree.files / "model.gguf"
    rep = remote.inspect(f"{nginx.url}/files/model.gguf")
    assert rep.parameter_count == gguf_counts(local)
    oracle = gguf_tensors(local)
    assert {t.name: (t.dtype, t.shape, t.offset) for t in rep.tensors} == oracle
    tokens = rep.files[0].metadata["tokenizer.ggml.tokens"]
    assert tokens["array_length"] == 15_000 and tokens["head"][0] == "tok0000000" + "x" * 100
    lines = _for(_settle(nginx, 2), "/files/model.gguf")
    assert len(lines) >= 2  # the KV section is larger than the first chunk
    # chunks are contiguous: each request starts where the last one ended
    ends = [0]
    for ln in lines:
        start, end = map(int, ln.range.removeprefix("bytes=").split("-"))
        assert start == ends[-1]
        ends.append(end + 1)
    assert rep.bytes_fetched < local.stat().st_size


def test_split_gguf_from_any_shard(nginx, remote_tree):
    shards = sorted((remote_tree.files / "split").glob("*.gguf"))
    assert len(shards) == 3
    rep = remote.inspect(f"{nginx.url}/files/split/{shards[1].name}")
    assert rep.parameter_count == gguf_counts(*shards)
    assert [f.path.rsplit("/", 1)[-1] for f in rep.files] == [s.name for s in shards]
    lines = _settle(nginx, 3)
    for s in shards:
        assert len(_for(lines, f"/files/split/{s.name}")) == 1


# --------------------------------------------------------------------------- fsspec


def test_fsspec_memory_url(remote_tree):
    import fsspec

    fs = fsspec.filesystem("memory")
    local = remote_tree.files / "small.safetensors"
    fs.pipe("/ws/small.safetensors", local.read_bytes())
    rep = remote.inspect("memory://ws/small.safetensors")
    assert rep.parameter_count == hf_counts(local)
    gg = remote_tree.files / "model.gguf"
    fs.pipe("/ws/model.gguf", gg.read_bytes())
    assert remote.inspect("memory://ws/model.gguf").parameter_count == gguf_counts(gg)


# --------------------------------------------------------------------------- Hub


@pytest.fixture
def hub(nginx, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", nginx.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return nginx


def test_hub_single_repo(hub, remote_tree, tmp_path):
    rep = remote.inspect("org/single")
    local = remote_tree.root / "org/single/resolve/main/model.safetensors"
    assert rep.parameter_count == hf_counts(local)
    assert _for(_settle(hub, 1), "/org/single/resolve/main/model.safetensors")[0].status == 206
    assert len(hub.log()) == 1
    assert rep.parameter_count == hub_counts(hub.url, "org/single", "model.safetensors", tmp_path)


def test_hub_big_header_matches_huggingface_hub(hub, remote_tree, tmp_path):
    rep = remote.inspect("hf://org/bigrepo/model.safetensors")
    assert len(_settle(hub, 2)) == 2
    assert rep.parameter_count == hub_counts(hub.url, "org/bigrepo", "model.safetensors", tmp_path)


def test_hub_sharded_repo_probes_then_index(hub, remote_tree, tmp_path):
    rep = remote.inspect("hf://org/sharded")
    shards = sorted((remote_tree.files / "sharded").glob("*.safetensors"))
    assert rep.parameter_count == hf_counts(*shards)
    lines = _settle(hub, 5)
    probe = _for(lines, "/org/sharded/resolve/main/model.safetensors")
    assert [ln.status for ln in probe] == [404]
    assert len(_for(lines, "/org/sharded/resolve/main/model.safetensors.index.json")) == 1
    for s in shards:
        assert len(_for(lines, f"/org/sharded/resolve/main/{s.name}")) == 1
    assert rep.parameter_count == hub_counts(hub.url, "org/sharded", None, tmp_path)


def test_hub_gguf_repo_from_listing(hub, remote_tree):
    rep = remote.inspect("org/ggufrepo")
    split = sorted((remote_tree.files / "split").glob("*.gguf"))
    assert rep.format == "gguf"
    assert rep.parameter_count == gguf_counts(*split)
    assert any("hf://org/ggufrepo/model.gguf" in n for n in rep.notes)
    lines = _settle(hub, 6)
    assert len(_for(lines, "/api/models/org/ggufrepo")) == 1
    rep2 = remote.inspect("hf://org/ggufrepo@main/model.gguf")
    assert rep2.parameter_count == gguf_counts(remote_tree.files / "model.gguf")


def test_hub_repo_without_weights(hub):
    with pytest.raises(errors.NoWeightsFound):
        remote.inspect("org/empty")


def test_token_required(hub):
    with pytest.raises(errors.RemoteAuthError):
        remote.inspect("org/privsame")
    rep = remote.inspect("org/privsame", token=TOKEN)
    assert rep.total_parameters > 0
    lines = hub.log()
    assert [ln.status for ln in lines] == [401, 206]
    assert lines[1].auth == f"Bearer {TOKEN}"


def test_token_from_env(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert remote.inspect("org/privsame").total_parameters > 0


def test_token_never_sent_to_another_origin(hub, remote_tree):
    rep = remote.inspect("org/private", token=TOKEN)
    assert rep.parameter_count == hf_counts(remote_tree.files / "small.safetensors")
    first = _settle(hub, 1)
    target = _settle(hub, 1, "log2")
    assert [(ln.status, ln.auth) for ln in first] == [(302, f"Bearer {TOKEN}")]
    assert len(target) == 1 and target[0].status == 206
    assert target[0].auth == ""  # the redirect target (another port) never saw it
    assert target[0].range == f"bytes=0-{SPECULATIVE - 1}"  # the Range header survives the hop


def test_redirect_without_token(hub, remote_tree):
    rep = remote.inspect("org/redirected")
    assert rep.parameter_count == hf_counts(remote_tree.files / "small.safetensors")
    assert [ln.status for ln in _settle(hub, 1, "log2")] == [206]


def test_same_origin_redirect_keeps_token(hub):
    rep = remote.inspect("org/renamed", token=TOKEN)
    assert rep.total_parameters > 0
    lines = _settle(hub, 2)
    assert [(ln.status, ln.auth) for ln in lines] == [
        (302, f"Bearer {TOKEN}"),
        (206, f"Bearer {TOKEN}"),
    ]
    assert hub.log2() == []


def test_plain_url_token_stays_on_its_origin(nginx):
    # a token for a plain URL is for that URL's origin only: not for the CDN
    rep = remote.inspect(f"{nginx.url}/org/private/resolve/main/model.safetensors", token=TOKEN)
    assert rep.total_parameters > 0
    assert _settle(nginx, 1, "log2")[0].auth == ""


# --------------------------------------------------------------------------- refs


@pytest.mark.parametrize(
    ("target", "repo", "rev", "path"),
    [
        ("hf://org/repo", "org/repo", "main", None),
        ("hf://org/repo@v1.0/sub/model.gguf", "org/repo", "v1.0", "sub/model.gguf"),
        ("org/repo", "org/repo", "main", None),
        ("hf://org/repo/model.safetensors", "org/repo", "main", "model.safetensors"),
    ],
)
def test_parse_hub_ref(target, repo, rev, path):
    ref = remote.parse_hub_ref(target)
    assert (ref.repo, ref.revision, ref.path) == (repo, rev, path)


def test_range_header_is_inclusive():
    s = remote.Session()
    try:
        assert s._headers("http://x/", (0, 102400))["Range"] == "bytes=0-102399"
        assert s._headers("http://x/", (102400, 102408))["Range"] == "bytes=102400-102407"
    finally:
        s.close()


def test_gguf_header_read_is_capped(nginx, remote_tree, monkeypatch):
    from weightsmith.gguf import _prefix

    monkeypatch.setattr(_prefix, "GGUF_MAX_HEADER", 64 * 1024)
    with pytest.raises(errors.HeaderReadLimit):
        remote.inspect(f"{nginx.url}/files/model.gguf")
    # it stopped at the first chunk: nothing more was asked for
    assert len(_for(_settle(nginx, 1), "/files/model.gguf")) == 1


def test_bare_repo_with_revision_and_blob_url(hub, remote_tree):
    ref = remote.parse_hub_ref("org/single@main")
    assert (ref.repo, ref.revision) == ("org/single", "main")
    rep = remote.inspect(f"{hub.url}/org/single/blob/main/model.safetensors")
    assert rep.parameter_count == hf_counts(remote_tree.files / "small.safetensors")
    assert [ln.path for ln in _settle(hub, 1)] == ["/org/single/resolve/main/model.safetensors"]


def test_remote_pickle_is_refused_clearly(nginx):
    with pytest.raises(errors.UnknownTargetError, match="local copy"):
        remote.inspect(f"{nginx.url}/files/pytorch_model.bin")
    assert nginx.log() == []  # refused before any request


def test_5xx_is_retried_then_named(nginx):
    with pytest.raises(errors.RemoteHTTPError) as info:
        remote.inspect(f"{nginx.url}/flaky/model.safetensors")
    assert info.value.status == 503
    lines = _settle(nginx, 3)
    assert [ln.status for ln in lines] == [503, 503, 503]  # the first try and two retries


def test_retry_then_success(remote_tree):
    import httpx

    data = (remote_tree.files / "small.safetensors").read_bytes()
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("range"))
        if len(seen) == 1:
            return httpx.Response(503, headers={"retry-after": "0"})
        if len(seen) == 2:
            raise httpx.ConnectError("reset", request=request)
        start, end = map(int, request.headers["range"].removeprefix("bytes=").split("-"))
        body = data[start : end + 1]
        cr = f"bytes {start}-{start + len(body) - 1}/{len(data)}"
        return httpx.Response(206, headers={"content-range": cr}, content=body)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    s = remote.Session(client=client, retries=2)
    src = remote.HTTPSource("http://mock/model.safetensors", s)
    from weightsmith.inspection import read_safetensors

    rep = read_safetensors(src)
    assert seen == [f"bytes=0-{SPECULATIVE - 1}"] * 3
    assert len(rep.tensors) == len(hf_tensors(remote_tree.files / "small.safetensors"))


def test_gguf_when_range_is_ignored(nginx, remote_tree):
    local = remote_tree.files / "model.gguf"
    rep = remote.inspect(f"{nginx.url}/noranges/model.gguf")
    assert rep.parameter_count == gguf_counts(local)
    lines = _for(_settle(nginx, 2), "/noranges/model.gguf")
    assert len(lines) >= 2 and all(ln.status == 200 for ln in lines)
    # each 200 was cut off once the prefix it needed had arrived
    assert rep.bytes_fetched < len(lines) * local.stat().st_size


def test_shard_reads_are_bounded(monkeypatch):
    import threading

    from weightsmith.remote import _inspect

    active, peak, lock = [0], [0], threading.Lock()

    def fake_read(src):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return src

    monkeypatch.setattr(_inspect, "_read_file", fake_read)
    out = _inspect._read_many(lambda n: n, [f"s{i}" for i in range(12)], jobs=3)
    assert out == [f"s{i}" for i in range(12)]  # order kept
    assert 1 < peak[0] <= 3


# --------------------------------------------------------------------------- HF_TOKEN on plain URLs


def test_hf_token_goes_with_a_pasted_resolve_url_of_the_endpoint(hub, monkeypatch, remote_tree):
    # HF_ENDPOINT is the nginx fixture (the `hub` fixture): a gated repo's resolve URL
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    rep = remote.inspect(f"{hub.url}/org/privsame/resolve/main/model.safetensors")
    assert rep.total_parameters > 0
    assert [(ln.status, ln.auth) for ln in _settle(hub, 1)] == [(206, f"Bearer {TOKEN}")]


def test_hf_token_never_goes_to_another_origin(hub, monkeypatch, remote_tree):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    # the second port is another origin than HF_ENDPOINT: no token, so 401 there would show it;
    # it serves the file openly, and its log must show no Authorization header
    rep = remote.inspect(f"{hub.url2}/cdn/redirected/model.safetensors")
    assert rep.total_parameters > 0
    assert [ln.auth for ln in _settle(hub, 1, "log2")] == [""]
    # nor a redirect from the endpoint to another origin (the CDN case)
    hub.clear()
    remote.inspect(f"{hub.url}/org/private/resolve/main/model.safetensors")
    assert [(ln.status, ln.auth) for ln in _settle(hub, 1)] == [(302, f"Bearer {TOKEN}")]
    assert [ln.auth for ln in _settle(hub, 1, "log2")] == [""]


# --------------------------------------------------------------------------- big-vocab GGUF headers


@pytest.fixture(scope="module")
def big_vocab(remote_tree):
    """A Gemma-like GGUF (262,144 tokens, ~7.9 MB header) at its own size and as a sparse
    40 GB file with the same header, served by nginx."""
    import os

    from support import gguf_big_vocab

    d = remote_tree.root / "bigvocab"
    d.mkdir(exist_ok=True)
    small = d / "gemma.gguf"
    header, size = gguf_big_vocab.write(small)
    big = d / "gemma-40g.gguf"
    with open(small, "rb") as f, open(big, "wb") as out:
        out.write(f.read(header))
    os.truncate(big, 40 * 10**9)
    # what was written (gguf-py's reader takes minutes over 262,144 token fields)
    want = gguf_big_vocab.expected_tensors(header)
    yield {"header": header, "sizes": {small.name: size, big.name: 40 * 10**9}, "want": want}
    small.unlink()
    big.unlink()


@pytest.mark.parametrize("name", ["gemma.gguf", "gemma-40g.gguf"])
def test_gguf_header_fetch_is_bounded_by_the_header(nginx, big_vocab, name):
    header = big_vocab["header"]
    rep = remote.inspect(f"{nginx.url}/bigvocab/{name}")
    lines = _settle(nginx, 1)
    assert [ln.status for ln in lines] == [206] * len(lines)
    fetched = sum(ln.bytes for ln in lines)
    # the target: at most 1.25 x the header + 1 MiB, in at most 4 requests
    assert len(lines) <= 4 and rep.requests == len(lines)
    assert fetched == rep.bytes_fetched <= 1.25 * header + (1 << 20)
    assert rep.files[0].size == big_vocab["sizes"][name]
    assert rep.files[0].header_size == header
    tokens = rep.files[0].metadata["tokenizer.ggml.tokens"]
    assert tokens["array_length"] == 262_144
    got = {t.name: (t.dtype, t.shape, t.offset) for t in rep.tensors}
    assert got == big_vocab["want"]
