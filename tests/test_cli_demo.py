"""``weightsmith demo`` through the console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import safetensors.torch
import torch

from support.cli_helpers import run

DATA = Path(__file__).resolve().parents[1] / "src" / "weightsmith" / "cli" / "data"
PARAMS = json.loads((DATA / "params.json").read_text())


def test_demo_runs_end_to_end():
    p = run("demo")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # the original download, shards merged, then the HF header grouped by layer
    assert "Meta original checkpoint, Llama 3.1" in out
    assert "attention.wq.weight" in out
    for layer in range(PARAMS["n_layers"]):
        assert f"\n  model.layers.{layer} " in out
    assert "    self_attn.q_proj.weight" in out
    assert "model.embed_tokens.weight" in out and "[768, 256]" in out
    assert "all equal bit for bit" in out
    assert "skipped" not in out


def _permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """transformers' convert_llama_weights_to_hf.py permutation, written with torch."""
    rows, cols = w.shape
    return w.view(heads, rows // heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def test_demo_writes_what_transformers_reads(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = run("demo", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (tmp_path / "original").iterdir()) == [
        "consolidated.00.pth", "params.json", "tokenizer.model",
    ]  # fmt: skip
    loaded = safetensors.torch.load_file(str(tmp_path / "hf" / "model.safetensors"))
    # the oracle: torch's own reading of the built-in checkpoint, renamed and permuted
    state = torch.load(DATA / "consolidated.00.pth", weights_only=True)
    q = _permute(state["layers.1.attention.wq.weight"], PARAMS["n_heads"])
    k = _permute(state["layers.1.attention.wk.weight"], PARAMS["n_kv_heads"])
    for name, t in [
        ("model.layers.1.self_attn.q_proj.weight", q),
        ("model.layers.1.self_attn.k_proj.weight", k),
        ("model.layers.1.mlp.down_proj.weight", state["layers.1.feed_forward.w2.weight"]),
        ("lm_head.weight", state["output.weight"]),
    ]:
        assert torch.equal(loaded[name], t), name
    n = sum(t.numel() for t in state.values())
    assert f"{n:,} parameters" in p.stdout
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert model.config.num_key_value_heads == PARAMS["n_kv_heads"]
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("llamas")["input_ids"][0] == tok.convert_tokens_to_ids("<|begin_of_text|>")
    # the quantized files came out of the same run, with K-quants in the q4_k_m one
    assert (tmp_path / "tiny-llama-q4_k_m.gguf").is_file()
    assert "Q4_K" in p.stdout and "Q6_K" in p.stdout


def test_builtin_checkpoint_is_the_documented_model():
    state = torch.load(DATA / "consolidated.00.pth", weights_only=True)
    dim, kv = PARAMS["dim"], PARAMS["dim"] // PARAMS["n_heads"] * PARAMS["n_kv_heads"]
    assert state["tok_embeddings.weight"].shape == (PARAMS["vocab_size"], dim)
    assert state["layers.0.attention.wk.weight"].shape == (kv, dim)
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    ranks = (DATA / "tokenizer.model").read_text().splitlines()
    assert len(ranks) + 256 == PARAMS["vocab_size"]  # BPE ranks, then 256 special tokens


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
    assert "Meta original checkpoint" in p.stdout
