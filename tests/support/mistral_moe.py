"""Tiny checkpoints in Mistral's original layout with experts (``params.json`` with a
``moe`` section: Mistral Large 3 / Mistral Small 4 as Mistral publishes them), built
from a seeded transformers 5.24 ``Mistral4ForCausalLM`` of the same math (DeepSeek-V2's
multi-head latent attention, softmax-routed experts with a shared one, YaRN, Llama 4
attention scaling), renamed to Mistral's tensor names, so that transformers is the
numeric oracle.  And a dense Mistral folder whose tekken.json is mistral_common's real
131k-token table (a symlink to the installed package's file: never copied)."""

from __future__ import annotations

import json
from pathlib import Path

from support.mistral_fixtures import write_tekken

# the model's geometry (the text harness' mistral4 at width 256, so the K-quants apply);
# YaRN's original context 4 (x 4 = the context of 16), which is also the Llama 4 scaling's
# step: a 12-token prompt runs both (1 + 0.1 log(1 + floor(pos / 4))) in both runtimes
MOE = dict(
    hidden=256, ffn=512, expert_ffn=256, layers=2, heads=4, experts=4, used=2, dense=1,
    kv_lora=64, q_lora=64, rope=16, nope=32, v=32, ctx=16, orig=4, factor=4.0,
)  # fmt: skip

# HF (transformers' Mistral 4) -> Mistral names; experts are split out of the fused tensors
_RENAMES = [
    ("model.embed_tokens.", "tok_embeddings."),
    ("model.norm.", "norm."),
    ("lm_head.", "output."),
    ("input_layernorm.", "attention_norm."),
    ("post_attention_layernorm.", "ffn_norm."),
    ("self_attn.q_a_proj.", "attention.wq_a."),
    ("self_attn.q_a_layernorm.", "attention.q_a_norm."),
    ("self_attn.q_b_proj.", "attention.wq_b."),
    ("self_attn.kv_a_proj_with_mqa.", "attention.wkv_a_with_mqa."),
    ("self_attn.kv_a_layernorm.", "attention.kv_a_norm."),
    ("self_attn.kv_b_proj.", "attention.wkv_b."),
    ("self_attn.o_proj.", "attention.wo."),
    ("mlp.shared_experts.gate_proj.", "shared_experts.w1."),
    ("mlp.shared_experts.down_proj.", "shared_experts.w2."),
    ("mlp.shared_experts.up_proj.", "shared_experts.w3."),
    ("mlp.gate_proj.", "feed_forward.w1."),
    ("mlp.down_proj.", "feed_forward.w2."),
    ("mlp.up_proj.", "feed_forward.w3."),
    ("mlp.gate.", "gate."),
    ("model.layers.", "layers."),
]


def _mistral_names(sd: dict) -> dict:
    """transformers' Mistral 4 state dict under Mistral's consolidated names."""
    out = {}
    for name, t in sd.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name.replace("model.layers.", "layers.").replace("mlp.experts.gate_up_proj", "")
            ff = t.shape[1] // 2
            for x in range(t.shape[0]):
                out[f"{base}experts.{x}.w1.weight"] = t[x, :ff].contiguous()
                out[f"{base}experts.{x}.w3.weight"] = t[x, ff:].contiguous()
            continue
        if name.endswith("mlp.experts.down_proj"):
            base = name.replace("model.layers.", "layers.").replace("mlp.experts.down_proj", "")
            for x in range(t.shape[0]):
                out[f"{base}experts.{x}.w2.weight"] = t[x].contiguous()
            continue
        for a, b in _RENAMES:
            name = name.replace(a, b)
        out[name] = t.contiguous()
    return out


def mistral_moe_model(vocab: int, seed: int = 24):
    """The seeded transformers ``Mistral4ForCausalLM`` (float32) the checkpoint holds."""
    from transformers import Mistral4Config, Mistral4ForCausalLM

    from support.hf_models import _random_init

    g = MOE
    rope = {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": g["factor"],
        "original_max_position_embeddings": g["orig"], "max_position_embeddings": g["ctx"],
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
        "llama_4_scaling_beta": 0.1,
    }  # fmt: skip
    cfg = Mistral4Config(
        vocab_size=vocab, hidden_size=g["hidden"], intermediate_size=g["ffn"],
        moe_intermediate_size=g["expert_ffn"], num_hidden_layers=g["layers"],
        num_attention_heads=g["heads"], num_key_value_heads=g["heads"], n_shared_experts=1,
        n_routed_experts=g["experts"], num_experts_per_tok=g["used"],
        first_k_dense_replace=g["dense"], n_group=1, topk_group=1, kv_lora_rank=g["kv_lora"],
        q_lora_rank=g["q_lora"], qk_rope_head_dim=g["rope"], v_head_dim=g["v"],
        qk_nope_head_dim=g["nope"], max_position_embeddings=g["ctx"], rms_norm_eps=1e-6,
        bos_token_id=1, eos_token_id=2, pad_token_id=11, tie_word_embeddings=False,
        rope_parameters=rope,
    )  # fmt: skip
    model = Mistral4ForCausalLM(cfg)
    _random_init(model, seed)
    return model.eval()


def mistral_moe_params(vocab: int) -> dict:
    """params.json as Mistral writes it for such a model (vLLM's and llama.cpp's
    MistralMoeModel's field names)."""
    g = MOE
    return {
        "dim": g["hidden"], "n_layers": g["layers"], "head_dim": g["nope"] + g["rope"],
        "hidden_dim": g["ffn"], "n_heads": g["heads"], "n_kv_heads": g["heads"],
        "rope_theta": 10000.0, "norm_eps": 1e-6, "vocab_size": vocab, "tied_embeddings": False,
        "max_position_embeddings": g["ctx"],
        "llama_4_scaling": {"original_max_position_embeddings": g["orig"], "beta": 0.1},
        "q_lora_rank": g["q_lora"], "qk_rope_head_dim": g["rope"],
        "qk_nope_head_dim": g["nope"], "kv_lora_rank": g["kv_lora"], "v_head_dim": g["v"],
        "yarn": {"original_max_position_embeddings": g["orig"], "factor": g["factor"],
                 "apply_scale": False, "beta": 32.0, "alpha": 1.0},
        "moe": {"route_every_n": 1, "first_k_dense_replace": g["dense"],
                "num_experts": g["experts"], "num_experts_per_tok": g["used"],
                "num_expert_groups": 1, "num_expert_groups_per_tok": 1, "routed_scale": 1.0,
                "expert_hidden_dim": g["expert_ffn"], "num_shared_experts": 1},
    }  # fmt: skip


def make_mistral_moe_checkpoint(folder: Path, *, seed: int = 24, config_json: bool = True):
    """Write the folder (consolidated.safetensors in bf16, params.json, tekken.json, and
    the HF config.json the reference's DeepseekV2Model opens beside params.json, as the
    Hub's folders carry it).  Returns ``(folder, the float32 transformers model)``: its
    weights are the checkpoint's rounded to bf16 (the model is rounded too)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_tekken(folder)
    model = mistral_moe_model(vocab, seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    sd = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    save_file(_mistral_names(sd), str(folder / "consolidated.safetensors"))
    (folder / "params.json").write_text(json.dumps(mistral_moe_params(vocab), indent=2))
    if config_json:
        # the reference reads its ``architectures[0]`` (DeepseekV2Model's OCR check)
        cfg = {
            **json.loads(model.config.to_json_string()),
            "architectures": ["Mistral4ForCausalLM"],
        }
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder, model


def real_tekken() -> Path:
    """mistral_common's real tekken table (v3, 131072 ids, 1000 special)."""
    import mistral_common

    return Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"


def make_mistral_real_tekken(folder: Path, *, seed: int = 5, dim: int = 8) -> Path:
    """A dense Mistral folder (MistralModel: ``llama``) whose tekken.json links to the
    real table: a 1-layer model of width ``dim``, the embeddings 131072 rows as the
    table needs."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    src = real_tekken()
    (folder / "tekken.json").symlink_to(src)
    vocab = json.loads(src.read_text(encoding="utf-8"))["config"]["default_vocab_size"]
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16)

    hd, heads, ffn = 4, 2, 16
    t = {"tok_embeddings.weight": rnd(vocab, dim), "norm.weight": 1 + rnd(dim),
         "output.weight": rnd(vocab, dim)}  # fmt: skip
    for name, shape in {
        "attention.wq": (heads * hd, dim), "attention.wk": (heads * hd, dim),
        "attention.wv": (heads * hd, dim), "attention.wo": (dim, heads * hd),
        "feed_forward.w1": (ffn, dim), "feed_forward.w2": (dim, ffn),
        "feed_forward.w3": (ffn, dim), "attention_norm": (dim,), "ffn_norm": (dim,),
    }.items():  # fmt: skip
        t[f"layers.0.{name}.weight"] = rnd(*shape)
    save_file(t, str(folder / "consolidated.safetensors"))
    params = {"dim": dim, "n_layers": 1, "head_dim": hd, "hidden_dim": ffn, "n_heads": heads,
              "n_kv_heads": heads, "norm_eps": 1e-5, "vocab_size": vocab,
              "rope_theta": 1000000.0, "max_position_embeddings": 1024}  # fmt: skip
    (folder / "params.json").write_text(json.dumps(params))
    return folder


def load_mistral_weights(model, tensors: dict) -> None:
    """Set the transformers Mistral 4 ``model``'s weights from tensors under Mistral's
    names (the inverse of the folder's renaming: experts fused back); names not in
    ``tensors`` keep their values."""
    import torch

    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
                base = name.replace("model.layers.", "layers.").rsplit("mlp.experts.", 1)[0]
                for x in range(p.shape[0]):
                    if name.endswith("down_proj"):
                        pairs = [(p[x], f"{base}experts.{x}.w2.weight")]
                    else:
                        ff = p.shape[1] // 2
                        pairs = [(p[x, :ff], f"{base}experts.{x}.w1.weight"),
                                 (p[x, ff:], f"{base}experts.{x}.w3.weight")]  # fmt: skip
                    for dst, key in pairs:
                        if key in tensors:
                            dst.copy_(tensors[key])
                continue
            key = name
            for a, b in _RENAMES:
                key = key.replace(a, b)
            if key in tensors:
                p.copy_(tensors[key])


def logits_with_and_without_l4_scaling(model, tokens: list[int]):
    """transformers' logits of ``tokens`` (float32 numpy), then the same with the Llama 4
    attention scaling switched off (``llama_4_scaling_beta`` 0): the pair a test needs to
    show that the scaling row is read and run."""
    import torch

    rope = model.config.rope_parameters
    with torch.no_grad():
        hf = model(torch.tensor([tokens])).logits[0].numpy()
        beta, rope["llama_4_scaling_beta"] = rope["llama_4_scaling_beta"], 0.0
        try:
            unscaled = model(torch.tensor([tokens])).logits[0].numpy()
        finally:
            rope["llama_4_scaling_beta"] = beta
    return hf, unscaled
