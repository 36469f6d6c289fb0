"""MiMo-V2.5's towers (``MiMoV2ForCausalLM``, remote code on the Hub: no transformers
class), hand-built beside the tiny fused-qkv text of :mod:`support.mimo_models`.

The tensor names are those llama.cpp's converter (conversion/mimo.py
``MiMoV2VisionAudioModel``, gguf-py's tensor map) and mtmd's loader (tools/mtmd/clip.cpp,
``mimovl`` / ``mimo_audio``) read:

* ``visual.*`` -- a Qwen2.5-VL-shaped ViT with GQA (fused ``attn.qkv`` of ``num_heads +
  2 * num_key_value_heads`` heads of ``qk_channels``), per-head ``attn.sinks`` on the
  windowed blocks (``vit_window_attn_types`` 0 / 1; -1 full), biased SwiGLU MLPs, the
  Conv3d patch embedding (temporal 2) and the ``merger`` (``ln_q``, ``mlp.0``, ``mlp.2``);
* ``audio_encoder.input_local_transformer.*`` (the LLM-side connector), its
  ``projection.mlp.{0,2}`` and ``speech_embeddings.{i}`` (one per audio channel);
* ``audio_tokenizer/``: the second checkpoint (config.json + model.safetensors), a
  Whisper-like encoder (``encoder.conv{1,2}``, ``encoder.layers.{i}.*``,
  ``encoder.layer_norm``, ``encoder.down_sample_layer.0`` / ``down_sample_norm``) with a
  residual VQ (``encoder.quantizer.vq.layers.{i}._codebook.embed`` and the EMA buffers
  the reference skips), and a ``decoder.*`` the projector leaves out.

Values are seeded random at small scale (norm weights around 1).
"""

from __future__ import annotations

import json
from pathlib import Path

#: the tiny vision tower (the Hub's vision_config spellings)
VISION = dict(
    depth=4, hidden_size=64, intermediate_size=96, num_heads=4, num_key_value_heads=2,
    qk_channels=16, patch_size=14, temporal_patch_size=2, spatial_merge_size=2,
    in_channels=3, out_hidden_size=256, fullatt_block_indexes=[2],
    vit_window_attn_types=[0, 1, -1, 1], visual_token_window_size=8, use_sink=True,
    hidden_act="silu",
)  # fmt: skip
#: the LLM-side audio connector (config.json's audio_config)
AUDIO = dict(
    audio_channels=2, group_size=4, input_local_layers=1, input_local_dim=32,
    input_local_attn_heads=2, input_local_intermediate_size=48, speech_vocab_size=24,
)  # fmt: skip
#: the audio tokenizer's config.json (codebooks of 16 and 12 bins: padded to 16)
TOKENIZER = dict(
    d_model=32, encoder_ffn_dim=64, encoder_attention_heads=2, encoder_layers=3,
    decoder_layers=1, n_mels=16, layer_norm_eps=1e-5, hybrid_attention=True,
    swa_per_block=2, encoder_attn_window_size=[8, 8], num_quantizers=2,
    codebook_size=[16, 12], sampling_rate=24000, hop_length=240,
)  # fmt: skip
PREPROCESSOR = dict(
    image_mean=[0.48145466, 0.4578275, 0.40821073],
    image_std=[0.26862954, 0.26130258, 0.27577711],
    min_pixels=56 * 56, max_pixels=112 * 112, patch_size=14, temporal_patch_size=2,
    merge_size=2,
)  # fmt: skip


def mimo_v25_towers(text: Path, dst: Path, *, seed: int = 93) -> Path:
    """``text`` (MiMo-V2.5's fused-qkv text, :func:`support.mimo_models.fused_qkv`) with
    the towers (see the module docstring) in ``dst``; the text's own placeholder tower
    tensors are replaced."""
    import torch
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, base: float = 0.0, scale: float = 0.05) -> torch.Tensor:
        return (torch.randn(shape, generator=g) * scale + base).to(torch.bfloat16)

    dst.mkdir(parents=True)
    for f in text.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            (dst / f.name).symlink_to(f.resolve())
    cfg = json.loads((text / "config.json").read_text())
    h_text = cfg["hidden_size"]
    cfg["vision_config"] = dict(VISION, out_hidden_size=h_text)
    cfg["audio_config"] = dict(AUDIO)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    (dst / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))

    sd = {
        k: v
        for k, v in load_file(text / "model.safetensors").items()
        if not k.startswith(("visual.", "audio_encoder.", "speech_embeddings."))
    }
    v = VISION
    d, hd, ff = v["hidden_size"], v["qk_channels"], v["intermediate_size"]
    qkv = (v["num_heads"] + 2 * v["num_key_value_heads"]) * hd
    ps, merge = v["patch_size"], v["spatial_merge_size"] ** 2
    sd["visual.patch_embed.proj.weight"] = rand(d, 3, 2, ps, ps)
    for i, mode in enumerate(v["vit_window_attn_types"]):
        p = f"visual.blocks.{i}."
        sd[p + "norm1.weight"] = rand(d, base=1.0)
        sd[p + "norm2.weight"] = rand(d, base=1.0)
        sd[p + "attn.qkv.weight"] = rand(qkv, d)
        sd[p + "attn.qkv.bias"] = rand(qkv)
        sd[p + "attn.proj.weight"] = rand(d, v["num_heads"] * hd)
        sd[p + "attn.proj.bias"] = rand(d)
        if mode != -1:
            sd[p + "attn.sinks"] = rand(v["num_heads"], scale=0.5)
        for x, shape in (("gate_proj", (ff, d)), ("up_proj", (ff, d)), ("down_proj", (d, ff))):
            sd[p + f"mlp.{x}.weight"] = rand(*shape)
            sd[p + f"mlp.{x}.bias"] = rand(shape[0])
    sd["visual.merger.ln_q.weight"] = rand(d, base=1.0)
    sd["visual.merger.mlp.0.weight"] = rand(d * merge, d * merge)
    sd["visual.merger.mlp.0.bias"] = rand(d * merge)
    sd["visual.merger.mlp.2.weight"] = rand(h_text, d * merge)
    sd["visual.merger.mlp.2.bias"] = rand(h_text)

    a = AUDIO
    ld, lff = a["input_local_dim"], a["input_local_intermediate_size"]
    lt = "audio_encoder.input_local_transformer."
    for i in range(a["input_local_layers"]):
        p = f"{lt}layers.{i}."
        for x in "qkv":
            sd[p + f"self_attn.{x}_proj.weight"] = rand(ld, ld)
            sd[p + f"self_attn.{x}_proj.bias"] = rand(ld)
        sd[p + "self_attn.o_proj.weight"] = rand(ld, ld)
        sd[p + "mlp.gate_proj.weight"] = rand(lff, ld)
        sd[p + "mlp.up_proj.weight"] = rand(lff, ld)
        sd[p + "mlp.down_proj.weight"] = rand(ld, lff)
        sd[p + "input_layernorm.weight"] = rand(ld, base=1.0)
        sd[p + "post_attention_layernorm.weight"] = rand(ld, base=1.0)
    sd[lt + "norm.weight"] = rand(ld, base=1.0)
    sd["audio_encoder.projection.mlp.0.weight"] = rand(h_text, ld * a["group_size"])
    sd["audio_encoder.projection.mlp.2.weight"] = rand(h_text, h_text)
    for i in range(a["audio_channels"]):
        sd[f"speech_embeddings.{i}.weight"] = rand(a["speech_vocab_size"], ld)
    save_file(sd, dst / "model.safetensors", metadata={"format": "pt"})

    tok = dst / "audio_tokenizer"
    tok.mkdir()
    (tok / "config.json").write_text(json.dumps(TOKENIZER, indent=2))
    t = TOKENIZER
    td, tff = t["d_model"], t["encoder_ffn_dim"]
    ts = {
        "encoder.conv1.weight": rand(td, t["n_mels"], 3),
        "encoder.conv1.bias": rand(td),
        "encoder.conv2.weight": rand(td, td, 3),
        "encoder.conv2.bias": rand(td),
    }
    for i in range(t["encoder_layers"]):
        p = f"encoder.layers.{i}."
        ts[p + "self_attn.q_proj.weight"] = rand(td, td)
        ts[p + "self_attn.q_proj.bias"] = rand(td)
        ts[p + "self_attn.k_proj.weight"] = rand(td, td)
        ts[p + "self_attn.v_proj.weight"] = rand(td, td)
        ts[p + "self_attn.v_proj.bias"] = rand(td)
        ts[p + "self_attn.out_proj.weight"] = rand(td, td)
        ts[p + "self_attn.out_proj.bias"] = rand(td)
        ts[p + "self_attn_layer_norm.weight"] = rand(td, base=1.0)
        ts[p + "self_attn_layer_norm.bias"] = rand(td)
        ts[p + "final_layer_norm.weight"] = rand(td, base=1.0)
        ts[p + "final_layer_norm.bias"] = rand(td)
        ts[p + "fc1.weight"] = rand(tff, td)
        ts[p + "fc1.bias"] = rand(tff)
        ts[p + "fc2.weight"] = rand(td, tff)
        ts[p + "fc2.bias"] = rand(td)
    ts["encoder.layer_norm.weight"] = rand(td, base=1.0)
    ts["encoder.layer_norm.bias"] = rand(td)
    ts["encoder.down_sample_layer.0.weight"] = rand(td, td, 2)
    ts["encoder.down_sample_norm.weight"] = rand(td, base=1.0)
    ts["encoder.down_sample_norm.bias"] = rand(td)
    for i, bins in enumerate(t["codebook_size"]):
        q = f"encoder.quantizer.vq.layers.{i}._codebook."
        ts[q + "embed"] = rand(bins, td, scale=1.0)
        ts[q + "embed_avg"] = rand(bins, td)
        ts[q + "cluster_size"] = rand(bins)
        ts[q + "inited"] = torch.ones(1, dtype=torch.bfloat16)
    ts["decoder.proj.weight"] = rand(td, td)
    save_file(ts, tok / "model.safetensors", metadata={"format": "pt"})
    return dst
