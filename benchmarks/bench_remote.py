"""Remote header reads: weightsmith.remote.inspect vs huggingface_hub, against a local nginx.

Both sides read the same Hub-style repos served by nginx on 127.0.0.1
(HF_ENDPOINT points at it), in one process, alternating, median of --runs.
Requests are counted from nginx's access log.  The network is loopback, so
the figures show the client overhead and the number of round trips, not
WAN latency (where each saved request is worth a round trip, ~20-100 ms).

    python benchmarks/bench_remote.py [--runs 5] [--shards 24]
    python benchmarks/bench_remote.py --gguf [--runs 5]

``--gguf``: remote GGUF header reads of a Gemma-like file with a 262,144-token
vocabulary (tests/support/gguf_big_vocab.py), at its own size and as a sparse 40 GB file
with the same header, against issue 17's target: at most 1.25 x the header
+ 1 MiB fetched, in at most 4 requests.  No other library reads GGUF headers
over HTTP, so the anchor is the header size itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument("--gguf", action="store_true", help="the big-vocabulary GGUF header reads")
    args = ap.parse_args()
    if args.gguf:
        gguf_headers(args.runs)
        return

    import torch

    from support.nginx_fixture import Nginx
    from support.remote_data import build, write_sharded

    base = Path(tempfile.mkdtemp(prefix="bench_remote_"))
    tree = build(base / "data")
    # a many-shard repo: 24 shards of 400 small tensors each (~30 KB headers)
    tensors = {
        f"model.layers.{i // 40}.mlp.experts.{i % 40}.w.weight": torch.zeros(4, 4)
        for i in range(400 * args.shards)
    }
    repo = tree.root / "org/manyshards/resolve/main"
    repo.mkdir(parents=True)
    write_sharded(repo, tensors, args.shards)

    server = Nginx(base / "nginx", tree.root, tree.root2).start()
    os.environ["HF_ENDPOINT"] = server.url
    os.environ["HF_HOME"] = str(base / "hf_home")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub import HfApi

    from weightsmith import remote

    api = HfApi()
    cases = [
        ("single file, 9 KB header", "org/single",
         lambda: remote.inspect("org/single"),
         lambda: api.parse_safetensors_file_metadata("org/single", "model.safetensors")),
        ("single file, 230 KB header", "org/bigrepo",
         lambda: remote.inspect("org/bigrepo"),
         lambda: api.parse_safetensors_file_metadata("org/bigrepo", "model.safetensors")),
        (f"{args.shards} shards + index", "org/manyshards",
         lambda: remote.inspect("org/manyshards"),
         lambda: api.get_safetensors_metadata("org/manyshards")),
    ]  # fmt: skip
    rows = []
    try:
        for title, _, ours, theirs in cases:
            times: dict[str, list[float]] = {"ws": [], "hf": []}
            reqs: dict[str, int] = {}
            for _ in range(args.runs):
                for side, fn in (("ws", ours), ("hf", theirs)):
                    server.clear()
                    t0 = time.perf_counter()
                    fn()
                    times[side].append(time.perf_counter() - t0)
                    time.sleep(0.1)
                    reqs[side] = len(server.log())
            ws, hf = statistics.median(times["ws"]), statistics.median(times["hf"])
            rows.append((title, ws, reqs["ws"], hf, reqs["hf"]))
    finally:
        server.stop()
    print(
        "| repo | weightsmith.remote.inspect | requests | huggingface_hub | requests | time ratio |"
    )
    print("|---|---|---|---|---|---|")
    for title, ws, rw, hf, rh in rows:
        print(f"| {title} | {ws * 1e3:.1f} ms | {rw} | {hf * 1e3:.1f} ms | {rh} | {ws / hf:.2f}x |")


def gguf_headers(runs: int) -> None:
    from support import gguf_big_vocab
    from support.nginx_fixture import Nginx
    from weightsmith import remote

    base = Path(tempfile.mkdtemp(prefix="bench_remote_gguf_"))
    root = base / "root"
    (root / "bigvocab").mkdir(parents=True)
    (base / "root2").mkdir()
    small = root / "bigvocab" / "gemma.gguf"
    header, size = gguf_big_vocab.write(small)
    big = root / "bigvocab" / "gemma-40g.gguf"
    with open(small, "rb") as f, open(big, "wb") as out:
        out.write(f.read(header))
    os.truncate(big, 40 * 10**9)
    server = Nginx(base / "nginx", root, base / "root2").start()
    rows = []
    try:
        for path, fsize in ((small, size), (big, 40 * 10**9)):
            url = f"{server.url}/bigvocab/{path.name}"
            wall, cpu = [], []
            for _ in range(runs):
                server.clear()
                t0, c0 = time.perf_counter(), time.process_time()
                rep = remote.inspect(url)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                time.sleep(0.1)
                lines = server.log()
            fetched = sum(ln.bytes for ln in lines)
            assert fetched == rep.bytes_fetched and len(lines) == rep.requests
            rows.append((path.name, fsize, len(lines), fetched, statistics.median(wall),
                         statistics.median(cpu)))  # fmt: skip
    finally:
        server.stop()
        small.unlink()
        big.unlink()
    limit = 1.25 * header + (1 << 20)
    print(f"header {header:,} bytes; target: <= {limit:,.0f} bytes in <= 4 requests")
    print("| file | file size | requests | bytes fetched | / header | within target | wall | CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for name, fsize, n, fetched, w, c in rows:
        ok = "yes" if n <= 4 and fetched <= limit else "NO"
        print(f"| {name} | {fsize:,} | {n} | {fetched:,} | {fetched / header:.2f}x | {ok} | "
              f"{w * 1e3:.0f} ms | {c * 1e3:.0f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
