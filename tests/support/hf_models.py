"""Tiny random Hugging Face model folders, one per architecture of the HF -> GGUF registry.

Built with transformers' own config and model classes (torch, CPU) and written with
``save_pretrained``, so the folders are what the Hub holds, only small.  Tokenizers:

* Llama, Mistral, Gemma3: a SentencePiece ``tokenizer.model`` trained on the fly
  (the reference converter reads it with the sentencepiece library);
* Qwen2, Qwen3: llama.cpp's ``models/ggml-vocab-qwen2.gguf`` turned back into a
  ``tokenizer.json`` by :func:`weightsmith.convert.tokenizer.tokenizer_json_from_vocab_gguf`
  (a freshly trained BPE would not be recognised by the reference's pre-tokenizer hash).

Every builder takes the folder and returns it; ``config.json``'s ``vocab_size`` is the
tokenizer's size.  Shapes are kept small, but rows of 256 where the k-quants should
apply without fallback.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

# a few sentences in several scripts for the SentencePiece trainer
_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Weights are read, transformed, quantized and written one tensor at a time.",
    "Le renard brun saute par-dessus le chien paresseux.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "numbers 0123456789 and symbols !@#$%^&*() are here too",
]


def train_spm(folder: Path, vocab_size: int = 512) -> int:
    """Train a byte-fallback BPE SentencePiece model into ``folder/tokenizer.model``; its size."""
    import sentencepiece as spm

    buf = io.BytesIO()
    lines = [f"{s} {i}" for i in range(40) for s in _TEXT]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        bos_id=1,
        eos_id=2,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    return sp.get_piece_size()


def _qwen_tokenizer(folder: Path) -> int:
    from weightsmith.convert.tokenizer import tokenizer_json_from_vocab_gguf

    from .llama_sdist import llama_cpp_root

    files = tokenizer_json_from_vocab_gguf(
        llama_cpp_root() / "models" / "ggml-vocab-qwen2.gguf", folder
    )
    tj = files["tokenizer.json"]
    ids = [t["id"] for t in tj.get("added_tokens", [])] + list(tj["model"]["vocab"].values())
    return max(ids) + 1


def _save(model, folder: Path, dtype: str) -> Path:
    import torch

    model = model.to(getattr(torch, dtype))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def _random_init(model, seed: int) -> None:
    """Give every weight (norms included) distinct random values, so nothing is trivially 1 or 0."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05 + (1.0 if p.ndim == 1 else 0.0))


def llama(
    folder: Path, *, dtype: str = "float32", rope_llama3: bool = False, seed: int = 0
) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = train_spm(folder)
    rope: dict = {"rope_type": "default", "rope_theta": 10000.0}
    if rope_llama3:
        rope = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=rope_llama3,
        rope_parameters=rope,
    )
    model = LlamaForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def llama3(folder: Path, **kw) -> Path:
    return llama(folder, rope_llama3=True, **kw)


def mistral(folder: Path, *, dtype: str = "bfloat16", seed: int = 1) -> Path:
    from transformers import MistralConfig, MistralForCausalLM

    vocab = train_spm(folder)
    cfg = MistralConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        sliding_window=None,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = MistralForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def qwen2(folder: Path, *, dtype: str = "float16", seed: int = 2) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = _qwen_tokenizer(folder)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=151643,
    )
    model = Qwen2ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def qwen3(folder: Path, *, dtype: str = "bfloat16", seed: int = 3) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = _qwen_tokenizer(folder)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=151643,
    )
    model = Qwen3ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def gemma3(folder: Path, *, dtype: str = "bfloat16", seed: int = 4) -> Path:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    vocab = train_spm(folder)
    cfg = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=256,
        sliding_window=16,
        query_pre_attn_scalar=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = Gemma3ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS: dict[str, Callable[..., Path]] = {
    "llama": llama,
    "llama3": llama3,
    "mistral": mistral,
    "qwen2": qwen2,
    "qwen3": qwen3,
    "gemma3": gemma3,
}


def build(name: str, folder: Path, **kw) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    BUILDERS[name](folder, **kw)
    return folder


def config(folder: Path) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def big_llama(
    folder: Path, *, hidden: int = 512, intermediate: int = 8192, layers: int = 6
) -> tuple[Path, int]:
    """A Llama folder written with numpy alone (bf16 weights), whose FFN matrices dwarf the rest.

    Returns the folder and the element count of its largest tensor.  Used to measure
    the converter's peak memory against the size of one tensor.
    """
    import ml_dtypes
    import numpy as np

    from weightsmith.safetensors import save_file

    folder = Path(folder)
    vocab = train_spm(folder)
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": w(hidden),
               "lm_head.weight": w(vocab, hidden)}  # fmt: skip
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": w(hidden),
            p + "post_attention_layernorm.weight": w(hidden),
            p + "self_attn.q_proj.weight": w(hidden, hidden),
            p + "self_attn.k_proj.weight": w(hidden, hidden),
            p + "self_attn.v_proj.weight": w(hidden, hidden),
            p + "self_attn.o_proj.weight": w(hidden, hidden),
            p + "mlp.gate_proj.weight": w(intermediate, hidden),
            p + "mlp.up_proj.weight": w(intermediate, hidden),
            p + "mlp.down_proj.weight": w(hidden, intermediate),
        }
    save_file(tensors, folder / "model.safetensors")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder, intermediate * hidden


# run in a child process: peak RSS of one conversion, above the RSS after imports
PEAK_RSS_CHILD = r"""
import json, sys
from weightsmith.convert import hf_to_gguf
import weightsmith.convert._hf_to_gguf, weightsmith.convert.tokenizer, weightsmith.quant
import weightsmith.quant.recipes, weightsmith.gguf, weightsmith.safetensors

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS
base = status("VmRSS")
src, dst, typ, workers = sys.argv[1:5]
hf_to_gguf(src, dst, typ, workers=int(workers))
print(json.dumps({"base": base, "peak": status("VmHWM")}))
"""


def peak_rss(src: Path, dst: Path, type: str, workers: int = 1) -> dict:
    """``{"base": RSS after imports, "peak": peak RSS}`` of converting in a fresh process."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", PEAK_RSS_CHILD, str(src), str(dst), type, str(workers)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])
