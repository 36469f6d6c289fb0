"""Convert and quantize straight from a remote model (issue 19, section 2).

nginx serves a Hub-layout tree (``/org/tiny/resolve/main/...`` plus the
``/api/models/org/tiny`` listing) and ``HF_ENDPOINT`` points at it.  Each
remote run is compared byte for byte with the same run on a local copy, and
nginx's access log shows that every source byte was fetched exactly once.
"""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import time

import pytest

from support import hf_models
from support.remote_data import write_sharded
from weightsmith import gguf
from weightsmith.byteio import _ranged
from weightsmith.convert import _hf_to_gguf, hf_to_gguf
from weightsmith.quant.file import quantize_file


def _settle(server, n):
    server.wait_logged(n)
    time.sleep(0.1)
    return server.log()


@pytest.fixture(scope="module")
def tiny(remote_tree, tmp_path_factory):
    """A tiny Llama (bf16, three shards + index) as a local folder and as Hub repo org/tiny."""
    from safetensors.torch import load_file

    local = tmp_path_factory.mktemp("tinysrc") / "tiny"  # a downloaded copy is named like the repo
    local.mkdir()
    hf_models.llama(local, dtype="bfloat16")
    tensors = load_file(str(local / "model.safetensors"))
    (local / "model.safetensors").unlink()
    write_sharded(local, tensors, 3)
    (local / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny\n")
    repo = remote_tree.root / "org/tiny/resolve/main"
    shutil.copytree(local, repo)
    listing = {
        "id": "org/tiny",
        "siblings": [{"rfilename": p.name} for p in sorted(local.iterdir())],
    }
    (remote_tree.root / "api/models/org/tiny").write_text(json.dumps(listing))
    # an F16 GGUF of it for `quantize` from remote
    f16 = remote_tree.root / "org/tiny/resolve/main/model-f16.gguf"
    hf_to_gguf(local, f16, "f16")
    yield {"local": local, "f16": f16}
    shutil.rmtree(remote_tree.root / "org/tiny")
    (remote_tree.root / "api/models/org/tiny").unlink()


@pytest.fixture
def hub(nginx, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", nginx.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return nginx


def _per_file(lines):
    out: dict[str, list] = {}
    for ln in lines:
        out.setdefault(ln.path.rsplit("/", 1)[-1], []).append(ln)
    return out


def test_convert_from_the_hub_is_the_local_conversion_and_fetches_each_byte_once(
    hub, tiny, tmp_path, monkeypatch
):
    want = tmp_path / "local" / "out.gguf"
    hf_to_gguf(tiny["local"], want, "q4_k_m")
    out_dir = tmp_path / "remote"
    hub.clear()
    # what is on disk while tensors are encoded: the output being written, nothing else
    # (the small files are held in memory, tensors streamed)
    seen: list[list[str]] = []
    real_encode = _hf_to_gguf._encode

    def encode(*a, **kw):
        seen.append(sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")))
        return real_encode(*a, **kw)

    monkeypatch.setattr(_hf_to_gguf, "_encode", encode)
    res = hf_to_gguf("hf://org/tiny", out_dir / "out.gguf", "q4_k_m")
    assert (out_dir / "out.gguf").read_bytes() == want.read_bytes()
    assert res.type == "q4_k_m"
    assert seen
    for listing in seen:
        during = [p for p in listing if p.startswith("remote/")]
        # the writer's temp file beside the target (it is renamed into place at the end)
        assert during == [] or (len(during) == 1 and during[0].endswith(".wstmp")), during
    assert [p.name for p in out_dir.iterdir()] == ["out.gguf"]
    files = _per_file(_settle(hub, 6))
    shards = sorted(n for n in files if n.endswith(".safetensors"))
    assert len(shards) == 3
    for name in shards:
        size = (tiny["local"] / name).stat().st_size
        assert all(ln.status == 206 for ln in files[name])
        assert sum(ln.bytes for ln in files[name]) == size, name  # each byte once
        spans = sorted(
            tuple(int(x) for x in ln.range.removeprefix("bytes=").split("-")) for ln in files[name]
        )
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))  # no overlap, no gap
    # the small files: one request each; the listing replaced every probe
    for name in ("config.json", "tokenizer.model", "model.safetensors.index.json", "README.md"):
        assert len(files[name]) == 1, name
    assert "tiny" in files  # the listing /api/models/org/tiny
    assert not any(ln.status == 404 for lns in files.values() for ln in lns)


def test_convert_from_an_https_folder_probes_and_matches(nginx, tiny, tmp_path):
    want = tmp_path / "want.gguf"
    hf_to_gguf(tiny["local"], want, "q8_0")
    url = f"{nginx.url}/org/tiny/resolve/main"  # no listing: each small file is probed
    hf_to_gguf(url, tmp_path / "out" / "out.gguf", "q8_0")
    assert (tmp_path / "out" / "out.gguf").read_bytes() == want.read_bytes()
    files = _per_file(_settle(nginx, 6))
    for name in [p.name for p in tiny["local"].iterdir() if p.suffix == ".safetensors"]:
        assert sum(ln.bytes for ln in files[name]) == (tiny["local"] / name).stat().st_size
    assert files["tokenizer.json"][0].status == 404  # probed, absent, skipped


def test_download_overlaps_quantization(hub, tiny, tmp_path, monkeypatch):
    events: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    real_read, real_encode = _ranged.RemoteFile.read_many, _hf_to_gguf._encode

    def read_many(self, reads):
        t0 = time.perf_counter()
        real_read(self, reads)
        with lock:
            events.append(("fetch", t0, time.perf_counter()))

    def encode(*a, **k):
        t0 = time.perf_counter()
        try:
            return real_encode(*a, **k)
        finally:
            with lock:
                events.append(("quant", t0, time.perf_counter()))

    monkeypatch.setattr(_ranged.RemoteFile, "read_many", read_many)
    monkeypatch.setattr(_hf_to_gguf, "_encode", encode)
    hf_to_gguf("hf://org/tiny", tmp_path / "out.gguf", "q4_k_m")
    fetches = [e for e in events if e[0] == "fetch"]
    quants = [e for e in events if e[0] == "quant"]
    # some tensor was being fetched while another was being quantized
    assert any(f[1] < q[2] and q[1] < f[2] for f in fetches for q in quants)
    # and the fetches ran on the prefetch thread, ahead of the writer: the first
    # fetch of the data starts before the first quantization ends
    assert min(f[1] for f in fetches) < min(q[2] for q in quants)


def test_cli_convert_and_quantize_from_remote(hub, tiny, tmp_path):
    from support.cli_helpers import run

    env = {"HF_ENDPOINT": hub.url}
    want = tmp_path / "want.gguf"
    hf_to_gguf(tiny["local"], want, "q4_k_m")
    cache = tmp_path / "cache"
    p = run(
        "convert", "hf://org/tiny", tmp_path / "out.gguf", "--type", "q4_k_m",
        "--cache-dir", cache, "--cache-size", "64MB", env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out.gguf").read_bytes() == want.read_bytes()
    blocks = [x for x in cache.rglob("*") if x.is_file()]
    assert blocks and all(x.suffix == ".blk" for x in blocks)  # the weights' blocks, only
    # a second run is served by the cache: no byte of the weights is fetched again
    hub.clear()
    p = run(
        "convert", "hf://org/tiny", tmp_path / "out2.gguf", "--type", "q4_k_m",
        "--cache-dir", cache, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out2.gguf").read_bytes() == want.read_bytes()
    shard_lines = [ln for ln in _settle(hub, 3) if ln.path.endswith(".safetensors")]
    assert len(shard_lines) == 3  # the three header requests only
    # quantize an F16 GGUF served by the Hub: the same bytes as quantizing the file itself
    qwant = tmp_path / "qwant.gguf"
    quantize_file(tiny["f16"], qwant, "q4_k_m")
    hub.clear()
    p = run(
        "quantize", "hf://org/tiny/model-f16.gguf", tmp_path / "q.gguf", "--type", "q4_k_m", env=env
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "q.gguf").read_bytes() == qwant.read_bytes()
    lines = [ln for ln in _settle(hub, 2) if ln.path.endswith("model-f16.gguf")]
    assert all(ln.status == 206 for ln in lines)
    spans = sorted(
        tuple(int(x) for x in ln.range.removeprefix("bytes=").split("-")) for ln in lines
    )
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # no byte fetched twice
    with gguf.read(tiny["f16"]) as f:
        tensor_bytes, header = sum(t.nbytes for t in f.tensors), f.data_start
    # every tensor byte, the header, and nothing else (alignment padding is skipped)
    assert tensor_bytes + header - 32 <= sum(ln.bytes for ln in lines)
    assert sum(ln.bytes for ln in lines) <= tiny["f16"].stat().st_size


# --------------------------------------------------------------------------- S3 (moto server)


@pytest.fixture(scope="module")
def s3(tiny, remote_tree):
    """A moto S3 server on 127.0.0.1 with bucket ``models``: the tiny repo and lazy files."""
    import fsspec

    from support.moto_s3 import MotoS3

    server = MotoS3().start()
    try:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket="models")
        fs = fsspec.filesystem("s3", **server.storage_options)
        for p in sorted(tiny["local"].iterdir()):
            fs.pipe(f"models/tiny/{p.name}", p.read_bytes())
        fs.pipe("models/f16/model-f16.gguf", tiny["f16"].read_bytes())
        yield server
    finally:
        server.stop()


def test_convert_safe_open_and_quantize_from_s3(s3, tiny, tmp_path):
    import torch
    from safetensors import safe_open as hf_safe_open

    from weightsmith.byteio import RemoteOptions
    from weightsmith.safetensors import open_checkpoint

    opts = RemoteOptions(storage_options=s3.storage_options)
    want = tmp_path / "want.gguf"
    hf_to_gguf(tiny["local"], want, "q4_k_m")
    hf_to_gguf("s3://models/tiny", tmp_path / "out" / "out.gguf", "q4_k_m", remote=opts)
    assert (tmp_path / "out" / "out.gguf").read_bytes() == want.read_bytes()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["out.gguf"]
    with open_checkpoint("s3://models/tiny", framework="pt", remote=opts) as ck:
        name = "model.layers.1.mlp.down_proj.weight"
        shard = ck.weight_map()[name]
        with hf_safe_open(str(tiny["local"] / shard), "pt") as ref:
            assert torch.equal(ck.get_tensor(name), ref.get_tensor(name))
    qwant = tmp_path / "qwant.gguf"
    quantize_file(tiny["f16"], qwant, "q4_k_m")
    quantize_file("s3://models/f16/model-f16.gguf", tmp_path / "q.gguf", "q4_k_m", remote=opts)
    assert (tmp_path / "q.gguf").read_bytes() == qwant.read_bytes()


def test_batch_quantize_reads_the_remote_source_once(hub, tiny, tmp_path):
    from support.cli_helpers import run

    types = ["q4_k_m", "q5_k_m", "q8_0", "q6_k", "q4_0"]
    hub.clear()
    p = run(
        "batch-quantize", "hf://org/tiny/model-f16.gguf", "--types", ",".join(types),
        "--out", tmp_path / "out", env={"HF_ENDPOINT": hub.url},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == sorted(
        f"model-{t.upper()}.gguf" for t in types
    )
    lines = _settle(hub, 2)
    assert {ln.path.rsplit("/", 1)[-1] for ln in lines} == {"model-f16.gguf"}
    spans = sorted(
        tuple(int(x) for x in ln.range.removeprefix("bytes=").split("-")) for ln in lines
    )
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # every byte read once
    assert sum(ln.bytes for ln in lines) <= tiny["f16"].stat().st_size
    for t in types:  # each output is what a run of its own writes
        want = tmp_path / f"want-{t}.gguf"
        quantize_file(tiny["f16"], want, t)
        assert (tmp_path / "out" / f"model-{t.upper()}.gguf").read_bytes() == want.read_bytes(), t
