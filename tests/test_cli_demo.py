"""``weightsmith demo`` through the console script."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import safetensors.numpy

from cli_helpers import run
from weightsmith.cli.demo import LLAMA_CONFIG, llama_tensors


def test_demo_runs_end_to_end():
    p = run("demo")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # the header, grouped by layer like the HF file viewer
    for layer in range(LLAMA_CONFIG["num_hidden_layers"]):
        assert f"\n  model.layers.{layer} " in out
    assert "    self_attn.q_proj.weight" in out
    assert "model.embed_tokens.weight" in out and "[512, 64]" in out
    assert "BF16" in out and "F32" in out
    assert "all equal bit for bit" in out
    assert "skipped" not in out


def test_demo_writes_what_hf_reads(tmp_path):
    p = run("demo", "--out", tmp_path, "--seed", "3")
    assert p.returncode == 0, p.stderr
    loaded = safetensors.numpy.load_file(str(tmp_path / "model.safetensors"))
    expected = llama_tensors(LLAMA_CONFIG, seed=3)
    assert sorted(loaded) == sorted(expected)
    for name, arr in expected.items():
        assert loaded[name].dtype == arr.dtype and loaded[name].shape == arr.shape, name
        assert loaded[name].tobytes() == arr.tobytes(), name
    # a Llama checkpoint folder: config.json next to the weights
    assert (tmp_path / "config.json").is_file()
    n = sum(a.size for a in expected.values())
    assert f"{n:,} parameters" in p.stdout
    assert np.float32(expected["model.norm.weight"][0]) != 0


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
