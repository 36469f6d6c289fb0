"""Remote header reads: weightsmith.remote.inspect vs huggingface_hub, against a local nginx.

Both sides read the same Hub-style repos served by nginx on 127.0.0.1
(HF_ENDPOINT points at it), in one process, alternating, median of --runs.
Requests are counted from nginx's access log.  The network is loopback, so
the figures show the client overhead and the number of round trips, not
WAN latency (where each saved request is worth a round trip, ~20-100 ms).

    python benchmarks/bench_remote.py [--runs 5] [--shards 24]
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
    args = ap.parse_args()

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


if __name__ == "__main__":
    main()
