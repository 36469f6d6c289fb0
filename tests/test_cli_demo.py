"""``weightsmith demo`` through the console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import safetensors.numpy
import torch

from support.cli_helpers import run
from weightsmith.cli.demo import LLAMA_CONFIG, llama_tensors

DATA = Path(__file__).resolve().parents[1] / "src" / "weightsmith" / "cli" / "data"


def test_demo_runs_end_to_end():
    p = run("demo")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # the header, grouped by layer like the HF file viewer
    for layer in range(LLAMA_CONFIG["num_hidden_layers"]):
        assert f"\n  model.layers.{layer} " in out
    assert "    self_attn.q_proj.weight" in out
    assert "model.embed_tokens.weight" in out and "[256, 256]" in out
    assert "BF16" in out and "F32" in out
    assert "all equal bit for bit" in out
    assert "skipped" not in out


def test_demo_writes_what_hf_reads(tmp_path):
    p = run("demo", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    loaded = safetensors.numpy.load_file(str(tmp_path / "model.safetensors"))
    # the oracle: torch's own reading of the built-in checkpoint
    expected = torch.load(DATA / "tiny-llama.pth", weights_only=True)
    assert sorted(loaded) == sorted(expected)
    for name, t in expected.items():
        want = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        assert loaded[name].shape == want.shape, name
        assert loaded[name].tobytes() == want.tobytes(), name
    # a Llama checkpoint folder: config.json next to the weights, as the demo's config says
    assert json.loads((tmp_path / "config.json").read_text()) == LLAMA_CONFIG
    n = sum(t.numel() for t in expected.values())
    assert f"{n:,} parameters" in p.stdout
    # the quantized files came out of the same run, with K-quants in the q4_k_m one
    assert (tmp_path / "tiny-llama-q4_k_m.gguf").is_file()
    assert "Q4_K" in p.stdout and "Q6_K" in p.stdout


def test_builtin_checkpoint_is_the_documented_model():
    state = torch.load(DATA / "tiny-llama.pth", weights_only=True)
    expected = llama_tensors(LLAMA_CONFIG, seed=0)
    assert sorted(state) == sorted(expected)
    for name, arr in expected.items():
        got = state[name].view(torch.int16).numpy() if arr.itemsize == 2 else state[name].numpy()
        assert got.tobytes() == arr.tobytes(), name


def test_demo_needs_only_numpy_and_ml_dtypes():
    # block every optional dependency: the import must fail if anything asks for it
    code = (
        "import sys\n"
        "BLOCKED = {'torch', 'rich', 'httpx', 'fsspec', 'safetensors', 'gguf', 'transformers',"
        " 'huggingface_hub', 'tokenizers', 'sentencepiece', 'jsonschema'}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from weightsmith.cli import main\n"
        "rc = main(['demo'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED)\n"
        "assert not bad, bad\n"
        "sys.exit(rc)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "all equal bit for bit" in p.stdout
