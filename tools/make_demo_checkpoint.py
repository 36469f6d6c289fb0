"""Regenerate the demo's built-in checkpoint: a tiny Llama saved by ``torch.save``.

The demo starts where users start, from a PyTorch ``.pth``, and must run
without torch; so the file is made once here, with real torch, and shipped as
package data.  Run from the repository root: ``python tools/make_demo_checkpoint.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from weightsmith.cli.demo import LLAMA_CONFIG, llama_tensors

OUT = Path(__file__).resolve().parents[1] / "src" / "weightsmith" / "cli" / "data"


def main() -> None:
    state = {}
    for name, arr in llama_tensors(LLAMA_CONFIG, seed=0).items():
        t = torch.from_numpy(
            np.ascontiguousarray(arr).view(np.uint16 if arr.itemsize == 2 else arr.dtype)
        )
        state[name] = t.view(torch.bfloat16) if arr.itemsize == 2 else t
    OUT.mkdir(parents=True, exist_ok=True)
    torch.save(state, OUT / "tiny-llama.pth")
    (OUT / "config.json").write_text(json.dumps(LLAMA_CONFIG, indent=2) + "\n")


if __name__ == "__main__":
    main()
