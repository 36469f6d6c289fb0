"""Step 3.5 text (``Step3p5ForCausalLM``, GGUF ``step35``) in the Hub's layout.

transformers 5.24 has no text-only Step 3.5 class: its ``Step3p7ForConditionalGeneration``
holds the same text model (``Step3p7TextConfig``, model type ``step3p5``).  The builder
makes a tiny one, saves it (transformers writes the Hub's tensor names: ``model.*``,
stacked ``moe.{gate,up,down}_proj.weight``, ``moe.router_bias``, ``share_expert.*``),
keeps the text tensors only and writes the flat config.json the Hub's Step-3.5 checkpoints
carry, every field derived from transformers' config (:func:`hub_config`): the reference
reads those names (``num_attention_groups``, ``moe_num_experts``, ...)."""

from __future__ import annotations

import json
from pathlib import Path

#: the tiny text model (transformers' field names): a dense full-attention layer, then a
#: sliding-window layer and a full one with 4 experts (top 2) and a shared expert; the
#: sliding layer has 2 query heads, the full ones 4 (2 KV heads each); RoPE over half of
#: the 16-wide heads on full layers, all of it on sliding ones; SwiGLU clamps that bite
STEP35_TEXT = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
    moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, share_expert_dim=48,
    layer_types=["full_attention", "sliding_attention", "full_attention"],
    mlp_layer_types=["dense", "sparse", "sparse"], sliding_window=4,
    num_sliding_attention_heads=2, moe_router_scaling_factor=1.5, rms_norm_eps=1e-5,
    rope_theta=[5000000.0, 10000.0, 5000000.0], partial_rotary_factors=[0.5, 1.0, 0.5],
    swiglu_limits=[0.0, 0.2, 0.0], swiglu_limits_shared=[0.0, 0.0, 0.2],
    bos_token_id=50256, eos_token_id=50256, pad_token_id=50256,
)  # fmt: skip


def hub_config(text) -> dict:
    """The Hub's flat Step-3.5 config.json for transformers' text config ``text``."""
    n = text.num_hidden_layers
    # the full layers' head count (the sliding ones' is per-layer config)
    heads = next(text.per_layer_config[i].num_attention_heads
                 for i, t in enumerate(text.layer_types) if t == "full_attention")  # fmt: skip
    rp = text.rope_parameters
    theta = [rp[t]["rope_theta"] for t in text.layer_types]
    prf = [rp[t]["partial_rotary_factor"] for t in text.layer_types]
    moe = [str(i) for i, t in enumerate(text.mlp_layer_types) if t == "sparse"]
    return {
        "architectures": ["Step3p5ForCausalLM"],
        "model_type": "step3p5",
        "vocab_size": text.vocab_size,
        "hidden_size": text.hidden_size,
        "intermediate_size": text.intermediate_size,
        "num_hidden_layers": n,
        "num_attention_heads": heads,
        "num_attention_groups": text.num_key_value_heads,
        "head_dim": text.head_dim,
        "attention_other_setting": {
            "attention_type": "sliding_attention",
            "num_attention_heads": text.num_sliding_attention_heads,
            "num_attention_groups": text.num_key_value_heads,
            "head_dim": text.head_dim,
        },
        "layer_types": list(text.layer_types),
        "sliding_window": text.sliding_window,
        "rope_theta": theta,
        "partial_rotary_factors": prf,
        "use_head_wise_attn_gate": text.gating is True,
        "max_position_embeddings": text.max_position_embeddings,
        "rms_norm_eps": text.rms_norm_eps,
        "moe_num_experts": text.n_routed_experts,
        "moe_top_k": text.num_experts_per_tok,
        "moe_intermediate_size": text.moe_intermediate_size,
        "share_expert_dim": text.share_expert_dim,
        "moe_layers_enum": ",".join(moe),
        "moe_router_activation": "sigmoid",
        "moe_router_scaling_factor": text.moe_router_scaling_factor,
        "norm_expert_weight": True,
        "need_fp32_gate": True,
        "use_moe_router_bias": True,
        "swiglu_limits": list(text.swiglu_limits),
        "swiglu_limits_shared": list(text.swiglu_limits_shared),
        "num_nextn_predict_layers": 0,
        "bos_token_id": text.bos_token_id,
        "eos_token_id": text.eos_token_id,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def step35(folder: Path, *, dtype: str = "bfloat16", seed: int = 35) -> tuple[Path, object]:
    """The Hub-layout text model in ``folder``; also transformers' model (float32), which
    computes the same text (returned for the logits check: no class loads the folder)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Step3p7Config, Step3p7ForConditionalGeneration

    from support.hf_models import _bpe_tokenizer, _random_init

    folder.mkdir(parents=True, exist_ok=True)
    vocab = _bpe_tokenizer(folder, "gpt-2")
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14,
                  max_position_embeddings=4)  # fmt: skip
    cfg = Step3p7Config(text_config={**STEP35_TEXT, "vocab_size": vocab}, vision_config=vision)
    model = Step3p7ForConditionalGeneration(cfg)
    _random_init(model, seed)
    # the router bias is a buffer (_random_init leaves it 0): distinct values, so the
    # bias-corrected expert choice is exercised
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.5)
    model = model.to(getattr(torch, dtype))
    tmp = folder / "_full"
    model.save_pretrained(tmp, safe_serialization=True)
    weights = load_file(tmp / "model.safetensors")
    keep = {k: v for k, v in weights.items() if k.startswith(("model.", "lm_head."))}
    save_file(keep, folder / "model.safetensors", metadata={"format": "pt"})
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    (folder / "config.json").write_text(json.dumps(hub_config(cfg.text_config), indent=2))
    return folder, model.float().eval()


def with_mtp(src: Path, dst: Path, *, seed: int = 36) -> Path:
    """``src`` (a :func:`step35` folder) plus one MTP block, as the Hub's Step-3.5
    checkpoints append it: ``model.layers.{n}`` (n = the trunk's layer count) with a
    full-attention layer and a dense MLP, ``eh_proj`` / ``enorm`` / ``hnorm`` and the
    shared head under ``transformer.shared_head.{norm,output}``; ``num_nextn_predict_layers``
    1 and ``layer_types`` / ``partial_rotary_factors`` padded for it (the clamps are not:
    the reference pads them).  Random bf16 values; no transformers class runs the block."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = json.loads((src / "config.json").read_text())
    n, h, v = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    hd, nq, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_attention_groups"]
    ff = cfg["intermediate_size"]
    shapes = {
        "self_attn.q_proj.weight": (nq * hd, h), "self_attn.k_proj.weight": (nkv * hd, h),
        "self_attn.v_proj.weight": (nkv * hd, h), "self_attn.o_proj.weight": (h, nq * hd),
        "self_attn.g_proj.weight": (nq, h), "self_attn.q_norm.weight": (hd,),
        "self_attn.k_norm.weight": (hd,), "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,), "mlp.gate_proj.weight": (ff, h),
        "mlp.up_proj.weight": (ff, h), "mlp.down_proj.weight": (h, ff),
        "eh_proj.weight": (h, 2 * h), "enorm.weight": (h,), "hnorm.weight": (h,),
        "transformer.shared_head.norm.weight": (h,),
        "transformer.shared_head.output.weight": (v, h),
    }  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    weights = load_file(src / "model.safetensors")
    for k, shape in shapes.items():
        x = torch.randn(shape, generator=g) * 0.05 + (0.0 if len(shape) == 2 else 1.0)
        weights[f"model.layers.{n}.{k}"] = x.to(torch.bfloat16)
    dst.mkdir(parents=True)
    save_file(dict(sorted(weights.items())), dst / "model.safetensors", metadata={"format": "pt"})
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            (dst / f.name).symlink_to(f)
    cfg["num_nextn_predict_layers"] = 1
    cfg["layer_types"] = [*cfg["layer_types"], "full_attention"]
    cfg["partial_rotary_factors"] = [*cfg["partial_rotary_factors"], 0.5]
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst
