"""Tiny checkpoints in Mistral's original layout, built here: ``consolidated.safetensors``
of Mistral-named bf16 tensors (torch + HF safetensors), a ``params.json``, and a
``tekken.json`` whose ranks come from a byte-level BPE trained here on the Tekken
pre-tokenizer pattern, in the format mistral_common's ``Tekkenizer.from_file`` reads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from support.meta_fixtures import bpe_ranks

# Tekken's pre-tokenizer regex (the "pattern" of Mistral's tekken.json files)
TEKKEN_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# mistral_common's SpecialTokens, in the ids of its pre-v11 tokenizers
SPECIALS = [
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
]  # fmt: skip
N_SPECIAL = 32  # ids 20..31 are mistral_common's <SPECIAL_i> fillers
DIM, HEADS, KV_HEADS, HEAD_DIM, LAYERS, HIDDEN = 64, 4, 2, 16, 2, 160


def write_tekken(folder: Path, version: str = "v7", cut: int = 8) -> int:
    """tekken.json; the last ``cut`` ranks lie past default_vocab_size (real files carry
    more ranks than the model uses).  Returns the vocabulary size."""
    ranks = bpe_ranks(TEKKEN_PATTERN)
    n_vocab = N_SPECIAL + len(ranks) - cut
    data = {
        "config": {
            "pattern": TEKKEN_PATTERN,
            "num_vocab_tokens": len(ranks),
            "default_vocab_size": n_vocab,
            "default_num_special_tokens": N_SPECIAL,
            "version": version,
        },
        "vocab": [
            {
                "rank": i,
                "token_bytes": base64.b64encode(t).decode(),
                "token_str": t.decode("utf-8", errors="replace"),
            }
            for i, t in enumerate(ranks)
        ],
        "special_tokens": [
            {"rank": i, "token_str": s, "is_control": True} for i, s in enumerate(SPECIALS)
        ],
    }
    (folder / "tekken.json").write_text(json.dumps(data), encoding="utf-8")
    return n_vocab


# the control tokens of Mistral's SentencePiece tokenizers from v3 on (after <unk> <s> </s>)
SPM_CONTROLS = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]  # fmt: skip


def write_spm(folder: Path, version: str) -> int:
    """``tokenizer.model.<version>`` (``tokenizer.model`` for "model"): a byte-fallback
    SentencePiece BPE as Mistral's (<unk> <s> </s> at 0 1 2, from v3 on the control
    tokens next; identity normalization).  Returns the vocabulary size."""
    import io

    import sentencepiece as spm

    from support.meta_fixtures import TEXT

    buf = io.BytesIO()
    controls = SPM_CONTROLS if version not in ("v1", "v2", "model") else []
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([f"{s} {i}" for i in range(20) for s in TEXT]), model_writer=buf,
        vocab_size=420, model_type="bpe", byte_fallback=True, character_coverage=1.0,
        bos_id=1, eos_id=2, unk_id=0, pad_id=-1, control_symbols=controls, minloglevel=2,
        # as Mistral's (and Llama 2's) models: text kept as is, digits split
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, split_digits=True,
    )  # fmt: skip
    name = "tokenizer.model" if version == "model" else f"tokenizer.model.{version}"
    (folder / name).write_bytes(buf.getvalue())
    return spm.SentencePieceProcessor(model_proto=buf.getvalue()).get_piece_size()


def make_mistral_checkpoint(
    folder: Path,
    *,
    seed: int = 0,
    params_extra: dict | None = None,
    version: str = "v7",
    spm: bool = False,
) -> Path:
    """Write a tiny Mistral original folder (consolidated.safetensors, params.json,
    tekken.json, or with ``spm`` a SentencePiece ``tokenizer.model.<version>``)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_spm(folder, version) if spm else write_tekken(folder, version)
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16)

    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    tensors = {"tok_embeddings.weight": rnd(vocab, DIM), "norm.weight": 1 + rnd(DIM),
               "output.weight": rnd(vocab, DIM)}  # fmt: skip
    for i in range(LAYERS):
        for name, shape in {
            "attention.wq": (q, DIM), "attention.wk": (kv, DIM), "attention.wv": (kv, DIM),
            "attention.wo": (DIM, q), "feed_forward.w1": (HIDDEN, DIM),
            "feed_forward.w2": (DIM, HIDDEN), "feed_forward.w3": (HIDDEN, DIM),
            "attention_norm": (DIM,), "ffn_norm": (DIM,),
        }.items():  # fmt: skip
            t = rnd(*shape)
            tensors[f"layers.{i}.{name}.weight"] = 1 + t if name.endswith("norm") else t
    save_file(tensors, str(folder / "consolidated.safetensors"))
    params = {"dim": DIM, "n_layers": LAYERS, "head_dim": HEAD_DIM, "hidden_dim": HIDDEN,
              "n_heads": HEADS, "n_kv_heads": KV_HEADS, "norm_eps": 1e-5, "vocab_size": vocab,
              "rope_theta": 1000000.0, "max_position_embeddings": 4096}  # fmt: skip
    params.update(params_extra or {})
    (folder / "params.json").write_text(json.dumps(params))
    return folder


def fp8_quantize(folder: Path, dequantized: Path | None = None) -> dict:
    """Make ``folder`` a Mistral FP8 release, as Ministral 3 / Devstral 2 / Mistral Large 3
    ship: every 2-D ``layers.*`` weight but the router becomes float8_e4m3fn beside a
    float32 per-tensor ``X.qscale_weight`` (amax / 448) and an ``X.qscale_act`` (static
    activation scale, unused by converters); params.json says ``quantization``.

    The dequantized values (torch: ``w8.float() * scale``, a float32 product) are
    returned by name and, with ``dequantized``, written as an F32 copy of the folder
    (the same checkpoint without quantization: the reference's input for its answer)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    sd = load_file(str(folder / "consolidated.safetensors"))
    out, deq = {}, {}
    for name, t in sd.items():
        if t.ndim != 2 or not name.startswith("layers.") or ".gate." in name:
            out[name] = t
            continue
        scale = (t.float().abs().max() / 448.0).reshape(())
        w8 = (t.float() / scale).to(torch.float8_e4m3fn)
        base = name.removesuffix("weight")
        out[name], out[base + "qscale_weight"] = w8, scale
        out[base + "qscale_act"] = torch.tensor(0.02 + 0.001 * len(deq))
        deq[name] = w8.float() * scale
    save_file(out, str(folder / "consolidated.safetensors"))
    params = json.loads((folder / "params.json").read_text())
    params["quantization"] = {"qformat_weight": "fp8_e4m3", "qscheme_act": "TENSOR"}
    (folder / "params.json").write_text(json.dumps(params, indent=2))
    if dequantized is not None:
        shutil.copytree(folder, dequantized)
        plain = {k: deq.get(k, v) for k, v in sd.items()}
        save_file(plain, str(dequantized / "consolidated.safetensors"))
        del params["quantization"]
        (dequantized / "params.json").write_text(json.dumps(params, indent=2))
    return deq


# transformers' Ministral 3 text -> Mistral's names (Q/K rows then interleaved, below)
_M3_NAMES = [
    ("model.embed_tokens.", "tok_embeddings."), ("model.norm.", "norm."),
    ("lm_head.", "output."), ("model.layers.", "layers."), ("self_attn.q_proj.", "attention.wq."),
    ("self_attn.k_proj.", "attention.wk."), ("self_attn.v_proj.", "attention.wv."),
    ("self_attn.o_proj.", "attention.wo."), ("mlp.gate_proj.", "feed_forward.w1."),
    ("mlp.down_proj.", "feed_forward.w2."), ("mlp.up_proj.", "feed_forward.w3."),
    ("input_layernorm.", "attention_norm."), ("post_attention_layernorm.", "ffn_norm."),
]  # fmt: skip


def make_ministral3_checkpoint(folder: Path, *, seed: int = 31):
    """A Ministral 3 text in Mistral's layout (params.json with ``yarn`` and
    ``llama_4_scaling``, the reference's ``mistral3`` case): a seeded transformers
    ``Ministral3ForCausalLM`` (the text harness' tiny one, YaRN over an original context
    of 4 that is also the scaling's step), weights rounded to bf16, renamed to Mistral's
    names with the Q/K rows in the interleaved RoPE order Mistral stores.  Returns
    ``(folder, the float32 transformers model)``."""
    import torch
    from safetensors.torch import save_file
    from transformers import Ministral3Config, Ministral3ForCausalLM

    from support.hf_models import MINISTRAL3_ROPE_SHORT, _random_init, ministral3_text

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_tekken(folder)
    rope = MINISTRAL3_ROPE_SHORT
    cfg = Ministral3Config(**ministral3_text(vocab, rope))
    model = Ministral3ForCausalLM(cfg)
    _random_init(model, seed)
    model.eval()
    heads = {"wq": cfg.num_attention_heads, "wk": cfg.num_key_value_heads}
    tensors = {}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            p.copy_(p.to(torch.bfloat16).float())
            for a, b in _M3_NAMES:
                name = name.replace(a, b)
            t = p.to(torch.bfloat16)
            n = heads.get(name.split(".")[-2]) if ".attention." in name else None
            if n is not None:  # HF's half-split rotary rows -> interleaved pairs
                t = t.reshape(n, 2, t.shape[0] // n // 2, -1).transpose(1, 2).reshape(t.shape)
            tensors[name] = t.contiguous()
    save_file(tensors, str(folder / "consolidated.safetensors"))
    orig = rope["original_max_position_embeddings"]
    params = {
        "dim": cfg.hidden_size, "n_layers": cfg.num_hidden_layers, "head_dim": cfg.head_dim,
        "hidden_dim": cfg.intermediate_size, "n_heads": cfg.num_attention_heads,
        "n_kv_heads": cfg.num_key_value_heads, "norm_eps": cfg.rms_norm_eps,
        "vocab_size": vocab, "rope_theta": rope["rope_theta"],
        "max_position_embeddings": rope["max_position_embeddings"],
        "yarn": {"factor": rope["factor"], "beta": rope["beta_fast"], "alpha": rope["beta_slow"],
                 "original_max_position_embeddings": orig, "apply_scale": False},
        "llama_4_scaling": {"beta": rope["llama_4_scaling_beta"],
                            "original_max_position_embeddings": orig},
    }  # fmt: skip
    (folder / "params.json").write_text(json.dumps(params, indent=2))
    return folder, model
