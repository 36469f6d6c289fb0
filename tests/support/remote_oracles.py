"""Parameter counts computed by the reference libraries, for comparison with ours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gguf
import safetensors


def hf_counts(*paths: Path) -> dict[str, int]:
    """Parameters per dtype read by HF safetensors (shapes from get_slice, no data)."""
    c: Counter[str] = Counter()
    for p in paths:
        with safetensors.safe_open(str(p), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                s = f.get_slice(name)
                n = 1
                for d in s.get_shape():
                    n *= d
                c[s.get_dtype()] += n
    return dict(c)


def hf_tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    with safetensors.safe_open(str(path), framework="pt") as f:
        return {
            k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape()))
            for k in f.keys()  # noqa: SIM118
        }


def gguf_counts(*paths: Path) -> dict[str, int]:
    """Parameters per ggml type read by gguf-py's GGUFReader."""
    c: Counter[str] = Counter()
    for p in paths:
        for t in gguf.GGUFReader(str(p)).tensors:
            c[t.tensor_type.name] += int(t.n_elements)
    return dict(c)


def gguf_tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """name -> (type, numpy-order shape, absolute data offset) per gguf-py."""
    r = gguf.GGUFReader(str(path))
    return {
        t.name: (
            t.tensor_type.name,
            tuple(int(d) for d in reversed(t.shape.tolist())),
            int(t.data_offset),
        )
        for t in r.tensors
    }


_HUB_SCRIPT = r"""
import json, sys
from huggingface_hub import HfApi
api = HfApi()
repo, filename = sys.argv[1], sys.argv[2]
if filename == "-":
    m = api.get_safetensors_metadata(repo)
    counts = {}
    for fm in m.files_metadata.values():
        for k, v in fm.parameter_count.items():
            counts[k] = counts.get(k, 0) + v
else:
    counts = dict(api.parse_safetensors_file_metadata(repo, filename).parameter_count)
print(json.dumps(counts))
"""


def hub_counts(endpoint: str, repo: str, filename: str | None, tmp: Path) -> dict[str, int]:
    """huggingface_hub's parameter counts, with HF_ENDPOINT pointing at our nginx.

    Runs in a subprocess because huggingface_hub reads HF_ENDPOINT at import.
    ``filename=None`` asks for the whole repo (get_safetensors_metadata).
    """
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp / "hf_home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "0",
    }
    env.pop("HF_TOKEN", None)
    out = subprocess.run(
        [sys.executable, "-c", _HUB_SCRIPT, repo, filename or "-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
