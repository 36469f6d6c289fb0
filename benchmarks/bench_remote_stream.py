"""Remote lazy reads and streaming conversion (issue 19), against a local nginx.

Two parts, both served by the nginx of the remote tests on 127.0.0.1 (Hub
layout, HF_ENDPOINT pointing at it); requests and bytes come from nginx's
access log.

``lazy``: ``safe_open("hf://...").get_tensor(x)`` on a 64 MiB file of sixteen
4 MiB tensors: bytes fetched past the header vs the tensor's bytes (target:
within 1%), request counts; the anchor is what huggingface_hub offers for one
tensor, downloading the whole file (``hf_hub_download``).

``stream``: ``hf_to_gguf("hf://org/bench", out, "q4_k_m")`` vs "download the
whole repo, then convert" (the download uses the same client and the same
window of parallel ranged requests, so only the overlap differs), with nginx
limiting each connection to ``--rate`` (a WAN link on loopback).  Both outputs
are compared byte for byte; peak disk is sampled every 20 ms in the output
folder (and the download folder for the anchor).

``batch``: ``quantize_files`` (what ``batch-quantize`` runs) of an F16 GGUF served by the Hub to five types vs
five ``quantize_file`` runs, both from the URL over the same rate-limited link:
source bytes read (nginx's log) and the time ratio; outputs compared byte for byte.

    python benchmarks/bench_remote_stream.py lazy [--runs 5]
    python benchmarks/bench_remote_stream.py stream [--runs 3] [--rate 4m] [--layers 6]
    python benchmarks/bench_remote_stream.py batch [--runs 3] [--rate 4m] [--layers 6]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _server(base: Path, root: Path, rate: str | None):
    from support.nginx_fixture import Nginx

    class Limited(Nginx):
        def config(self) -> str:
            conf = super().config()
            return conf.replace(
                "keepalive_timeout 5;", f"keepalive_timeout 5;\n    limit_rate {rate};"
            )

    root2 = base / "root2"
    root2.mkdir(exist_ok=True)
    server = (Limited if rate else Nginx)(base / "nginx", root, root2).start()
    os.environ["HF_ENDPOINT"] = server.url
    os.environ["HF_HOME"] = str(base / "hf_home")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    return server


def lazy(runs: int) -> None:
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import save_file

    from weightsmith.safetensors import safe_open

    base = Path(tempfile.mkdtemp(prefix="bench_lazy_"))
    repo = base / "root/org/lazybench/resolve/main"
    repo.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tensors = {
        f"layers.{i:02d}.weight": rng.standard_normal((1024, 2048), np.float32).astype(
            ml_dtypes.bfloat16
        )
        for i in range(16)
    }
    save_file(tensors, str(repo / "model.safetensors"))
    size = (repo / "model.safetensors").stat().st_size
    server = _server(base, base / "root", None)
    from huggingface_hub import hf_hub_download  # reads HF_ENDPOINT when imported

    try:
        rows = []
        for name in ("layers.00.weight", "layers.07.weight", "layers.15.weight"):
            nbytes = tensors[name].nbytes
            ours, theirs = [], []
            for _ in range(runs):
                server.clear()
                t0 = time.perf_counter()
                with safe_open("hf://org/lazybench/model.safetensors") as f:
                    x = f.get_tensor(name)
                ours.append(time.perf_counter() - t0)
                lines = server.wait_logged(2)
                time.sleep(0.1)
                lines = server.log()
                assert np.array_equal(x.view(np.uint16), tensors[name].view(np.uint16))
                t0 = time.perf_counter()
                p = hf_hub_download("org/lazybench", "model.safetensors", cache_dir=base / "hfc")
                theirs.append(time.perf_counter() - t0)
                shutil.rmtree(base / "hfc")
                assert p
            header = lines[0].bytes
            data = sum(ln.bytes for ln in lines[1:])
            rows.append((name, nbytes, len(lines), header, data, statistics.median(ours),
                         statistics.median(theirs)))  # fmt: skip
        print(f"file: {size:,} bytes, 16 tensors of 4 MiB (bf16); loopback, median of {runs}")
        print("| tensor | tensor bytes | requests (header + data) | bytes fetched past the header | "
              "ratio to tensor | time | hf_hub_download (whole file) | time |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        for name, nbytes, nreq, header, data, t_us, t_hf in rows:
            print(f"| {name} | {nbytes:,} | {nreq} (1 + {nreq - 1}) | {data:,} (+{header:,} header "
                  f"request) | {data / nbytes:.4f} | {t_us * 1e3:.1f} ms | {size:,} bytes | "
                  f"{t_hf * 1e3:.1f} ms |")  # fmt: skip
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


class _DiskPeak:
    """Peak bytes of the files under some folders, sampled every 20 ms."""

    def __init__(self, *folders: Path) -> None:
        self.folders, self.peak, self._stop = folders, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for d in self.folders:
                for dirpath, _, names in os.walk(d):
                    for n in names:
                        with contextlib.suppress(OSError):
                            total += os.path.getsize(os.path.join(dirpath, n))
            self.peak = max(self.peak, total)
            time.sleep(0.02)

    def __enter__(self) -> _DiskPeak:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def _download(names: list[str], dest: Path) -> None:
    """The repo's files, each fetched whole with the same client and window of ranges."""
    from weightsmith.byteio import RemoteOptions, open_remote

    opts = RemoteOptions()
    dest.mkdir(parents=True)
    for n in names:
        f = open_remote(f"hf://org/bench/{n}", opts, first=1 << 20)
        buf = bytearray(f.size)
        f.read_many([(0, buf)])
        f.close()
        (dest / n).write_bytes(buf)


def stream(runs: int, rate: str, layers: int) -> None:
    import json

    from support.hf_models import big_llama
    from weightsmith.convert import hf_to_gguf

    base = Path(tempfile.mkdtemp(prefix="bench_stream_"))
    repo = base / "root/org/bench/resolve/main"
    repo.mkdir(parents=True)
    big_llama(repo, layers=layers)
    names = sorted(p.name for p in repo.iterdir())
    listing = {"id": "org/bench", "siblings": [{"rfilename": n} for n in names]}
    (base / "root/api/models/org").mkdir(parents=True)
    (base / "root/api/models/org/bench").write_text(json.dumps(listing))
    total = sum((repo / n).stat().st_size for n in names)
    weights = sum((repo / n).stat().st_size for n in names if n.endswith(".safetensors"))
    server = _server(base, base / "root", rate)
    times: dict[str, list[float]] = {"stream": [], "download": [], "convert": []}
    disk: dict[str, int] = {}
    try:
        for _ in range(runs):
            for which in ("stream", "anchor"):
                work = base / "work"
                work.mkdir()
                server.clear()
                with _DiskPeak(work) as peak:
                    t0 = time.perf_counter()
                    if which == "stream":
                        hf_to_gguf("hf://org/bench", work / "out" / "bench.gguf", "q4_k_m")
                        times["stream"].append(time.perf_counter() - t0)
                    else:
                        _download(names, work / "bench")
                        t1 = time.perf_counter()
                        hf_to_gguf(work / "bench", work / "out" / "bench.gguf", "q4_k_m")
                        times["download"].append(t1 - t0)
                        times["convert"].append(time.perf_counter() - t1)
                disk[which] = peak.peak
                out = (work / "out" / "bench.gguf").read_bytes()
                if which == "stream":
                    got = out
                    fetched = sum(
                        ln.bytes for ln in server.log() if ln.path.endswith(".safetensors")
                    )
                else:
                    assert out == got, "streamed output differs from download-then-convert"
                shutil.rmtree(work)
        out_size = len(got)
        s = statistics.median(times["stream"])
        d, c = statistics.median(times["download"]), statistics.median(times["convert"])
        print(f"repo: {total:,} bytes (big_llama, {layers} layers, bf16), nginx limit_rate {rate} "
              f"per connection, window 8; median of {runs}; outputs byte-identical")  # fmt: skip
        print("| | wall time | peak disk in the work folders | source bytes fetched |")
        print("|---|---|---|---|")
        print(f"| download, then convert | {d + c:.2f} s ({d:.2f} s + {c:.2f} s) | "
              f"{disk['anchor']:,} | {total:,} |")  # fmt: skip
        print(f"| streaming convert | {s:.2f} s | {disk['stream']:,} (output {out_size:,}) | "
              f"{fetched:,} of the {weights:,} safetensors bytes |")  # fmt: skip
        print(f"ratio streaming / download-then-convert: {s / (d + c):.2f}")
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


TYPES = ["q4_k_m", "q5_k_m", "q6_k", "q8_0", "q4_0"]


def batch(runs: int, rate: str, layers: int) -> None:
    import json

    from support.hf_models import big_llama
    from weightsmith.convert import hf_to_gguf
    from weightsmith.quant.file import quantize_file, quantize_files

    base = Path(tempfile.mkdtemp(prefix="bench_batch_"))
    src = base / "src"
    big_llama(src, layers=layers)
    repo = base / "root/org/bench/resolve/main"
    repo.mkdir(parents=True)
    hf_to_gguf(src, repo / "model-f16.gguf", "f16")
    size = (repo / "model-f16.gguf").stat().st_size
    (base / "root/api/models/org").mkdir(parents=True)
    (base / "root/api/models/org/bench").write_text(json.dumps({"siblings": []}))
    server = _server(base, base / "root", rate)
    url = "hf://org/bench/model-f16.gguf"
    t_batch, t_sep, read_batch, read_sep = [], [], 0, 0
    try:
        for _ in range(runs):
            out = base / "out"
            out.mkdir()
            server.clear()
            t0 = time.perf_counter()
            quantize_files(url, {t: out / f"b-{t}.gguf" for t in TYPES})
            t_batch.append(time.perf_counter() - t0)
            time.sleep(0.2)
            read_batch = sum(ln.bytes for ln in server.log())
            server.clear()
            t0 = time.perf_counter()
            for t in TYPES:
                quantize_file(url, out / f"s-{t}.gguf", t)
            t_sep.append(time.perf_counter() - t0)
            time.sleep(0.2)
            read_sep = sum(ln.bytes for ln in server.log())
            for t in TYPES:
                assert (out / f"b-{t}.gguf").read_bytes() == (out / f"s-{t}.gguf").read_bytes()
            shutil.rmtree(out)
        b, sep = statistics.median(t_batch), statistics.median(t_sep)
        print(f"F16 GGUF {size:,} bytes (big_llama, {layers} layers), types {','.join(TYPES)}, "
              f"nginx limit_rate {rate} per connection; median of {runs}; outputs identical")  # fmt: skip
        print("| | wall time | source bytes read |")
        print("|---|---|---|")
        print(f"| 5 x quantize_file | {sep:.2f} s | {read_sep:,} |")
        print(f"| quantize_files (batch) | {b:.2f} s | {read_batch:,} |")
        print(f"ratio batch / separate: time {b / sep:.2f}, bytes {read_batch / read_sep:.3f}")
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=["lazy", "stream", "batch"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", default="4m", help="nginx limit_rate per connection")
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args()
    if args.part == "lazy":
        lazy(args.runs)
    elif args.part == "batch":
        batch(args.runs, args.rate, args.layers)
    else:
        stream(args.runs, args.rate, args.layers)


if __name__ == "__main__":
    main()
