"""Tiny Dots3 Note (``Dots3NoteForConditionalGeneration``) folders in the Hub's layout.

transformers 5.24 builds the model from the Hub's flat config (it reads the text fields at
the top level, ``swa_*`` fields, ``pyramid_num_routed``, ``whisper_config``) and saves the
Hub's tensor names, but writes its own normalised ``config.json``; the pinned reference
reads only the Hub's.  :func:`dots3_note_hub` builds the model from :func:`hub_config`
and writes that config back over transformers' (so both read the same fields)."""

from __future__ import annotations

import json
from pathlib import Path

from support.hf_models import _bpe_tokenizer
from support.muse_dots_pocket_models import _random_init

#: the added token the reference's set_vocab takes EOT from
EOT = "<|endofassistant|>"


def hub_config(vocab: int) -> dict:
    """The Hub's flat config.json, tiny: 4 text layers (indexed, indexed, sliding, sliding;
    4 heads on the indexed layers, 2 on the sliding ones), a dense first layer then 4
    experts (top 2, a shared one), a 2-block vision tower (the second with 4 routed
    experts), a 2-layer audio encoder."""
    return {
        "architectures": ["Dots3NoteForConditionalGeneration"], "model_type": "dots3_note",
        "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "q_lora_rank": 32, "kv_lora_rank": 32,
        "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16, "head_dim": 32,
        "use_dsa": True, "index_topk": 16, "index_head_dim": 64, "index_n_heads": 2,
        "layer_types": ["full_attention", "full_attention", "sliding_attention",
                        "sliding_attention"],
        "sliding_window_size": 8, "swa_num_attention_heads": 2, "swa_num_key_value_heads": 2,
        "swa_q_lora_rank": 32, "swa_kv_lora_rank": 32, "swa_head_dim": 32,
        "swa_qk_nope_head_dim": 16, "swa_qk_rope_head_dim": 16, "swa_v_head_dim": 16,
        "rope_theta": 80000000.0, "swa_rope_theta": 50000.0, "rms_norm_eps": 1e-5,
        "normalization": "RMSNorm", "final_norm": "RMSNorm", "k_rope_only_layernorm": True,
        "attention_gate_type": "headwise", "swa_attention_gate_type": "headwise",
        "apply_mla_qkv_lora_rescale": True, "max_position_embeddings": 256,
        "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": 50256,
        "pad_token_id": None, "torch_dtype": "float32",
        "vision_config": {
            "embed_dim": 32, "hidden_size": 64, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 2, "patch_size": 8,
            "spatial_merge_size": 2, "temporal_patch_size": 1, "num_channels": 3,
            "rms_norm_eps": 1e-5, "pyramid_num_routed": [-1, 4], "capacity_factor": 2,
            "moe_intermediate_size": 32, "router_scoring_func": "sigmoid", "router_scale": 1.0,
            "adapter_type": "patch_merger", "pre_pixel_shuffle": True, "use_bias": False,
            "use_qk_norm": True, "adapter_in_dim": 32, "adapter_out_dim": 64,
        },
        "audio_config": {
            "use_conv2d_stem": True, "use_rope": True, "use_rms_norm": True, "use_causal": False,
            "merge_factor": 1, "chunk_seconds": 60, "downsample_hidden_size": 16,
            "adapter_input_size": 32, "adapter_out_dim": 64,
            "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5,
                                "rope_theta": 10000.0},
            "whisper_config": {"d_model": 32, "encoder_ffn_dim": 64, "encoder_attention_heads": 2,
                               "encoder_layers": 2, "num_mel_bins": 128,
                               "activation_function": "swiglu"},
        },
    }  # fmt: skip


def dots3_note_hub(folder: Path, *, seed: int = 73) -> Path:
    """The tiny model (f32) with GPT-2's BPE plus :data:`EOT`, the Hub's config.json and
    an image processor file (8 px patches, 2 x 2 merging, 32 x 32 to 64 x 64 px)."""
    import torch
    from transformers import Dots3NoteConfig, Dots3NoteForConditionalGeneration

    vocab = _bpe_tokenizer(folder, "gpt-2")
    tj_path = folder / "tokenizer.json"
    tj = json.loads(tj_path.read_text())
    tj["added_tokens"].append({"id": vocab, "content": EOT, "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": False,
                               "special": True})  # fmt: skip
    tj_path.write_text(json.dumps(tj))
    hub = hub_config(vocab + 1)
    model = Dots3NoteForConditionalGeneration(Dots3NoteConfig(**hub))
    _random_init(model, seed)
    model.to(torch.float32).save_pretrained(folder, safe_serialization=True)
    (folder / "config.json").write_text(json.dumps(hub, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "vision_config": {"min_pixels": 32 * 32, "max_pixels": 64 * 64, "patch_size": 8,
                          "merge_size": 2, "temporal_patch_size": 1,
                          "image_mean": [0.5] * 3, "image_std": [0.5] * 3},
    }, indent=2))  # fmt: skip
    return folder


def with_mtp(folder: Path, *, seed: int = 74) -> Path:
    """Add the MTP block the Hub's Dots3 Note checkpoints carry (transformers 5.24 builds
    none and ignores it on load: ``model.layers.{n}.*`` and ``model.mtp.*`` are in its
    ``_keys_to_ignore_on_load_unexpected``), random at the tiny scale: layer ``n`` =
    ``num_hidden_layers`` with the sliding-attention MLA of the last sliding layer, the dense
    MLP of the first layer, no indexer, plus ``eh_proj`` ``[h, 2h]``, ``enorm``, ``hnorm``,
    ``shared_head.norm``; its token embedding as ``model.mtp.embed_tokens.weight``.  The
    names and shapes are the ones the pinned reference (conversion/dots3.py) and llama.cpp's
    dots3note loader read; the config counts no MTP block (the reference tells it from
    that embedding)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    cfg = json.loads((folder / "config.json").read_text())
    n, h = cfg["num_hidden_layers"], cfg["hidden_size"]
    swa = max(i for i, t in enumerate(cfg["layer_types"][:n]) if t == "sliding_attention")
    att, mlp = f"model.layers.{swa}.", "model.layers.0."
    g = torch.Generator().manual_seed(seed)

    def rnd(shape, one: bool = False) -> torch.Tensor:
        return torch.randn(tuple(shape), generator=g) * 0.05 + (1.0 if one else 0.0)

    src = {k[len(att) :]: v for k, v in sd.items() if k.startswith(att) and ".mlp." not in k}
    src |= {k[len(mlp) :]: v for k, v in sd.items() if k.startswith(mlp + "mlp.")}
    assert not any("indexer" in k for k in src)  # a sliding layer has none
    out = {f"model.layers.{n}.{k}": rnd(v.shape, one=v.ndim == 1) for k, v in src.items()}
    out[f"model.layers.{n}.eh_proj.weight"] = rnd((h, 2 * h))
    for k in ("enorm", "hnorm", "shared_head.norm"):
        out[f"model.layers.{n}.{k}.weight"] = rnd((h,), one=True)
    out["model.mtp.embed_tokens.weight"] = rnd(sd["model.embed_tokens.weight"].shape)
    save_file({**sd, **{k: v.to(torch.float32) for k, v in out.items()}}, path,
              metadata={"format": "pt"})  # fmt: skip
    return folder
