"""MiMo-V2 text (``MiMoV2FlashForCausalLM``, GGUF ``mimo2``) in the Hub's layout.

transformers 5.24's ``MiMoV2FlashForCausalLM`` builds the tiny model and ``save_pretrained``
writes the Hub's tensor names (per-expert ``mlp.experts.{x}.*_proj``, ``mlp.gate.weight``
and its ``e_score_correction_bias``, ``self_attn.attention_sink_bias`` on the sliding
layers).  Its config.json is then rewritten with the field names of the Hub's MiMo-V2-Flash
config (:func:`hub_config`), which the reference reads (``hybrid_layer_pattern``,
``swa_num_key_value_heads``, ``layernorm_epsilon``, ``topk_method`` ...), each value derived
from transformers' config so that transformers loads the folder as the same model: its
layer types, sliding window and RoPE defaults are the ones written (no
``sliding_window_size``: transformers would widen the window by one, see
:func:`hub_config`).
"""

from __future__ import annotations

import json
from pathlib import Path

#: the tiny model (transformers' field names): layer 0 full attention with a dense MLP,
#: layers 1 and 2 sliding (window 4, twice the KV heads, attention sinks) with 4 experts
#: (top 2, sigmoid router with a correction bias); Q/K heads 48 wide (RoPE over int(48 x
#: 0.334) = 16 of them), V heads 32 wide, values scaled by 0.707
MIMO_TEXT = dict(
    hidden_size=256, intermediate_size=256, moe_intermediate_size=128, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=1, head_dim=48, v_head_dim=32,
    n_routed_experts=4, num_experts_per_tok=2, sliding_window=4, max_position_embeddings=256,
    rms_norm_eps=1e-5, attention_value_scale=0.707, tie_word_embeddings=False,
)  # fmt: skip


def hub_config(cfg) -> dict:
    """The Hub's MiMo-V2-Flash config.json for transformers' ``MiMoV2FlashConfig`` ``cfg``.

    transformers 5.24 reads ``sliding_window_size`` (the Hub's spelling) as a window one
    wider (SGLang attends to that many previous tokens plus the query); the reference
    writes ``sliding_window`` as it is and llama.cpp's standard window counts the query
    in, so the folder gives ``sliding_window`` alone and the two runtimes agree."""
    full = cfg.rope_parameters["full_attention"]
    swa = cfg.rope_parameters["sliding_attention"]
    pattern = [1 if t == "sliding_attention" else 0 for t in cfg.layer_types]
    return {
        "architectures": ["MiMoV2FlashForCausalLM"],
        "model_type": "mimo_v2_flash",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "v_head_dim": cfg.v_head_dim,
        "swa_num_attention_heads": cfg.num_attention_heads,
        "swa_num_key_value_heads": 2 * cfg.num_key_value_heads,
        "swa_head_dim": cfg.head_dim,
        "swa_v_head_dim": cfg.v_head_dim,
        "hybrid_layer_pattern": pattern,
        "moe_layer_freq": [0 if t == "dense" else 1 for t in cfg.mlp_layer_types],
        "sliding_window": cfg.sliding_window,
        "add_full_attention_sink_bias": False,
        "add_swa_attention_sink_bias": True,
        "rope_theta": full["rope_theta"],
        "swa_rope_theta": swa["rope_theta"],
        "partial_rotary_factor": full["partial_rotary_factor"],
        "layernorm_epsilon": cfg.rms_norm_eps,
        "n_routed_experts": cfg.n_routed_experts,
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "n_group": cfg.n_group,
        "topk_group": cfg.topk_group,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": cfg.norm_topk_prob,
        "routed_scaling_factor": None,
        "n_shared_experts": None,
        "attention_value_scale": cfg.attention_value_scale,
        "max_position_embeddings": cfg.max_position_embeddings,
        "hidden_act": cfg.hidden_act,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "torch_dtype": "bfloat16",
    }


def mimo_v2_flash(folder: Path, *, dtype: str = "bfloat16", seed: int = 91) -> Path:
    """The tiny MiMo-V2-Flash in ``folder`` (GPT-2's BPE vocabulary)."""
    from transformers import MiMoV2FlashConfig, MiMoV2FlashForCausalLM

    from .hf_models import _bpe_tokenizer, _random_init, _save

    vocab = _bpe_tokenizer(folder, "gpt-2")
    cfg = MiMoV2FlashConfig(vocab_size=vocab, bos_token_id=None, eos_token_id=50256, **MIMO_TEXT)
    model = MiMoV2FlashForCausalLM(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    (folder / "config.json").write_text(json.dumps(hub_config(cfg), indent=2))
    return folder


def with_mtp(src: Path, dst: Path, *, seed: int = 92) -> Path:
    """``src`` with the three MTP blocks the Hub's checkpoints carry, in ``dst`` (the other
    files linked): ``model.mtp.layers.{i}.*``, each a sliding-window layer (its KV heads,
    its sinks) with a dense MLP, the token / hidden norms, their projection and the output
    norm (the names the reference maps: ``enorm``, ``hnorm``, ``eh_proj``,
    ``final_layernorm``)."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = json.loads((src / "config.json").read_text())
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).symlink_to(f.resolve())
    sd = load_file(src / "model.safetensors")
    g = torch.Generator().manual_seed(seed)
    h, hd, vd = cfg["hidden_size"], cfg["head_dim"], cfg["v_head_dim"]
    heads, kv, ff = (
        cfg["num_attention_heads"],
        cfg["swa_num_key_value_heads"],
        cfg["intermediate_size"],
    )

    def rand(*shape: int) -> torch.Tensor:
        base = 1.0 if len(shape) == 1 else 0.0
        return (torch.randn(shape, generator=g) * 0.05 + base).to(torch.bfloat16)

    for i in range(3):
        p = f"model.mtp.layers.{i}."
        sd.update({
            p + "enorm.weight": rand(h),
            p + "hnorm.weight": rand(h),
            p + "eh_proj.weight": rand(h, 2 * h),
            p + "input_layernorm.weight": rand(h),
            p + "self_attn.q_proj.weight": rand(heads * hd, h),
            p + "self_attn.k_proj.weight": rand(kv * hd, h),
            p + "self_attn.v_proj.weight": rand(kv * vd, h),
            p + "self_attn.o_proj.weight": rand(h, heads * vd),
            p + "self_attn.attention_sink_bias": rand(heads),
            p + "post_attention_layernorm.weight": rand(h),
            p + "mlp.gate_proj.weight": rand(ff, h),
            p + "mlp.up_proj.weight": rand(ff, h),
            p + "mlp.down_proj.weight": rand(h, ff),
            p + "final_layernorm.weight": rand(h),
        })  # fmt: skip
    save_file(sd, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def fused_qkv(src: Path, dst: Path) -> Path:
    """``src`` as MiMo-V2.5's text (``MiMoV2ForCausalLM``, model type ``mimo_v2``: remote
    code, no transformers class) in ``dst``: each layer's (and MTP block's) ``q_proj``,
    ``k_proj``, ``v_proj`` rows fused into one ``self_attn.qkv_proj`` ``[Q | K | V]``, as
    the Hub's un-sharded layout has them; the same model as ``src``, beside a few tensors
    of its towers (``visual.``, ``audio_encoder.``, ``speech_embeddings.``), which the
    text leaves out."""
    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            (dst / f.name).symlink_to(f.resolve())
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2")
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = load_file(src / "model.safetensors")
    out = {}
    for k, v in sd.items():
        if k.endswith("self_attn.q_proj.weight"):
            pre = k[: -len("q_proj.weight")]
            parts = [sd[pre + f"{x}_proj.weight"] for x in "qkv"]
            out[pre + "qkv_proj.weight"] = torch.cat(parts, dim=0)
        elif not k.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            out[k] = v
    h = cfg["hidden_size"]
    out["visual.patch_embed.proj.weight"] = torch.zeros(8, 3, 2, 4, 4, dtype=torch.bfloat16)
    out["audio_encoder.projection.mlp.0.weight"] = torch.zeros(h, 8, dtype=torch.bfloat16)
    out["speech_embeddings.0.weight"] = torch.zeros(16, h, dtype=torch.bfloat16)
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    return dst
