"""A tiny hand-built Qwen3-TTS checkpoint (``Qwen3TTSForConditionalGeneration``, remote
code on the Hub: transformers 5.24 has no class for it).

The folder holds what the Hub's ``Qwen/Qwen3-TTS-12Hz-*`` repositories hold, cut down:

* ``config.json`` -- ``talker_config`` (the talker backbone: a Qwen3 decoder with M-RoPE
  sections, ``vocab_size`` 3072 codec rows -- llama.cpp's qwen3tts graph hard-codes that
  output width --, ``text_vocab_size`` / ``text_hidden_size`` of the text embedding, the
  codec control ids, ``code_predictor_config``) and ``speaker_encoder_config`` (the
  ECAPA-TDNN speaker encoder; ``enc_dim`` = the talker width);
* ``model.safetensors`` -- ``talker.*`` (``model.text_embedding``, ``text_projection``
  MLP, ``model.codec_embedding``, the layers, ``codec_head``; ``code_predictor.*``: its
  layers, 15 codebook embeddings and heads, ``small_to_mtp_projection``) and
  ``speaker_encoder.*`` (stem TDNN, three SE-Res2Net blocks, MFA, attentive statistics
  pooling, ``fc``), the names the remote modeling code gives;
* ``speech_tokenizer/`` -- the 12 Hz codec's ``config.json`` (``decoder_config``) and
  ``model.safetensors`` (``decoder.*``: RVQ codebooks as EMA sums / usage counts, the
  pre-transformer, ConvNeXt upsampling, the DAC decoder with SnakeBeta activations);
* a byte-level BPE tokenizer (llama.cpp's StarCoder vocabulary: 49k tokens, where
  the Hub's is Qwen2's 151k; the reference accepts either).

Seeded float32 values at small scale.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from support.hf_models import _bpe_tokenizer

#: talker width / FFN / layers / heads / KV heads / head width; text embedding width
DIM, FF, LAYERS, HEADS, KV, HEAD_DIM, TEXT_DIM = 32, 64, 2, 2, 1, 16, 16
#: codec rows (llama.cpp's qwen3tts output width is fixed at 3072)
N_CODEC = 3072
#: code predictor width / FFN / heads / head width / codebook size; its 15 codebooks
CP_DIM, CP_FF, CP_HEADS, CP_HEAD_DIM, CP_VOCAB, N_BOOKS = 16, 32, 2, 8, 64, 15
#: speaker encoder channels (mtmd's graph: three SE-Res2Net blocks of scale 8)
SPK_C, SPK_ATT, SPK_SE = 16, 8, 8
#: codec decoder: codebook dim / size, latent, transformer width, DAC entry width
CB_DIM, CB_SIZE, LATENT, WAV_DIM, DAC_DIM = 8, 32, 16, 16, 16
#: codec transformer layers (mtmd 0.3.36 hard-codes 8: it loads no other count)
WAV_LAYERS = 8

TALKER_IDS = {
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,
    "codec_think_id": 2154,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
    "codec_language_id": {"chinese": 2055, "english": 2050},
    "spk_id": {"vivian": 3065},
}


def _w(rng, *shape: int, fan: int | None = None) -> np.ndarray:
    fan = fan if fan is not None else shape[-1] if len(shape) > 1 else 1
    return (rng.standard_normal(shape) * fan**-0.5).astype(np.float32)


def _norm(rng, n: int) -> np.ndarray:
    return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def _bias(rng, n: int) -> np.ndarray:
    return (0.1 * rng.standard_normal(n)).astype(np.float32)


def _qwen3_layer(t: dict, p: str, dim: int, ff: int, heads: int, kv: int, hd: int, rng) -> None:
    t[p + "input_layernorm.weight"] = _norm(rng, dim)
    t[p + "post_attention_layernorm.weight"] = _norm(rng, dim)
    t[p + "self_attn.q_proj.weight"] = _w(rng, heads * hd, dim)
    t[p + "self_attn.k_proj.weight"] = _w(rng, kv * hd, dim)
    t[p + "self_attn.v_proj.weight"] = _w(rng, kv * hd, dim)
    t[p + "self_attn.o_proj.weight"] = _w(rng, dim, heads * hd)
    t[p + "self_attn.q_norm.weight"] = _norm(rng, hd)
    t[p + "self_attn.k_norm.weight"] = _norm(rng, hd)
    t[p + "mlp.gate_proj.weight"] = _w(rng, ff, dim)
    t[p + "mlp.up_proj.weight"] = _w(rng, ff, dim)
    t[p + "mlp.down_proj.weight"] = _w(rng, dim, ff)


def _conv(t: dict, name: str, oc: int, ic: int, k: int, rng) -> None:
    t[name + ".weight"] = _w(rng, oc, ic, k, fan=ic * k)
    t[name + ".bias"] = _bias(rng, oc)


def _speaker_encoder(t: dict, rng) -> None:
    s = "speaker_encoder."
    _conv(t, s + "blocks.0.conv", SPK_C, 128, 5, rng)
    for b in (1, 2, 3):
        p = f"{s}blocks.{b}."
        _conv(t, p + "tdnn1.conv", SPK_C, SPK_C, 1, rng)
        for x in range(7):
            _conv(t, f"{p}res2net_block.blocks.{x}.conv", SPK_C // 8, SPK_C // 8, 3, rng)
        _conv(t, p + "tdnn2.conv", SPK_C, SPK_C, 1, rng)
        _conv(t, p + "se_block.conv1", SPK_SE, SPK_C, 1, rng)
        _conv(t, p + "se_block.conv2", SPK_C, SPK_SE, 1, rng)
    _conv(t, s + "mfa.conv", 3 * SPK_C, 3 * SPK_C, 1, rng)
    _conv(t, s + "asp.tdnn.conv", SPK_ATT, 9 * SPK_C, 1, rng)
    _conv(t, s + "asp.conv", 3 * SPK_C, SPK_ATT, 1, rng)
    _conv(t, s + "fc", DIM, 6 * SPK_C, 1, rng)


def _codec_decoder(folder: Path, rng) -> None:
    from safetensors.numpy import save_file

    t: dict[str, np.ndarray] = {}
    q = "decoder.quantizer."
    for part, n in (("rvq_first", 1), ("rvq_rest", N_BOOKS)):
        t[f"{q}{part}.input_proj.weight"] = _w(rng, CB_DIM, LATENT, 1, fan=LATENT)
        t[f"{q}{part}.output_proj.weight"] = _w(rng, LATENT, CB_DIM, 1, fan=CB_DIM)
        for i in range(n):
            cb = f"{q}{part}.vq.layers.{i}._codebook."
            sums = rng.standard_normal((CB_SIZE, CB_DIM)).astype(np.float32)
            usage = rng.uniform(0.5, 4.0, CB_SIZE).astype(np.float32)
            usage[0], sums[0] = 0.0, sums[0] * 1e-5  # an unused code: the count clamped at 1e-5
            t[cb + "embedding_sum"] = sums
            t[cb + "cluster_usage"] = usage
    _conv(t, "decoder.pre_conv.conv", LATENT, LATENT, 3, rng)
    p = "decoder.pre_transformer."
    t[p + "input_proj.weight"], t[p + "input_proj.bias"] = _w(rng, WAV_DIM, LATENT), _bias(rng, WAV_DIM)  # fmt: skip
    t[p + "output_proj.weight"], t[p + "output_proj.bias"] = _w(rng, LATENT, WAV_DIM), _bias(rng, LATENT)  # fmt: skip
    t[p + "norm.weight"] = _norm(rng, WAV_DIM)
    for i in range(WAV_LAYERS):
        lp = f"{p}layers.{i}."
        _qwen3_layer(t, lp, WAV_DIM, 2 * WAV_DIM, 2, 2, 8, rng)
        del t[lp + "self_attn.q_norm.weight"], t[lp + "self_attn.k_norm.weight"]
        t[lp + "self_attn_layer_scale.scale"] = (0.1 * _norm(rng, WAV_DIM)).astype(np.float32)
        t[lp + "mlp_layer_scale.scale"] = (0.1 * _norm(rng, WAV_DIM)).astype(np.float32)
    for b in range(2):
        u = f"decoder.upsample.{b}."
        t[u + "0.conv.weight"] = _w(rng, LATENT, LATENT, 2, fan=2 * LATENT)  # ConvTranspose1d
        t[u + "0.conv.bias"] = _bias(rng, LATENT)
        _conv(t, u + "1.dwconv.conv", LATENT, 1, 7, rng)
        t[u + "1.norm.weight"], t[u + "1.norm.bias"] = _norm(rng, LATENT), _bias(rng, LATENT)
        t[u + "1.pwconv1.weight"], t[u + "1.pwconv1.bias"] = _w(rng, 4 * LATENT, LATENT), _bias(rng, 4 * LATENT)  # fmt: skip
        t[u + "1.pwconv2.weight"], t[u + "1.pwconv2.bias"] = _w(rng, LATENT, 4 * LATENT), _bias(rng, LATENT)  # fmt: skip
        t[u + "1.gamma"] = (0.1 * _norm(rng, LATENT)).astype(np.float32)
    _conv(t, "decoder.decoder.0.conv", DAC_DIM, LATENT, 7, rng)
    rates = (8, 5, 4, 3)
    c = DAC_DIM
    for i, r in enumerate(rates):
        d = f"decoder.decoder.{i + 1}.block."
        t[d + "0.alpha"], t[d + "0.beta"] = _bias(rng, c), _bias(rng, c)
        t[d + "1.conv.weight"] = _w(rng, c, c // 2, 2 * r, fan=c * 2 * r)  # ConvTranspose1d
        t[d + "1.conv.bias"] = _bias(rng, c // 2)
        c //= 2
        for x in (2, 3, 4):
            t[f"{d}{x}.act1.alpha"], t[f"{d}{x}.act1.beta"] = _bias(rng, c), _bias(rng, c)
            _conv(t, f"{d}{x}.conv1.conv", c, c, 7, rng)
            t[f"{d}{x}.act2.alpha"], t[f"{d}{x}.act2.beta"] = _bias(rng, c), _bias(rng, c)
            _conv(t, f"{d}{x}.conv2.conv", c, c, 1, rng)
    t["decoder.decoder.5.alpha"], t["decoder.decoder.5.beta"] = _bias(rng, c), _bias(rng, c)
    _conv(t, "decoder.decoder.6.conv", 1, c, 7, rng)
    st = folder / "speech_tokenizer"
    st.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, str(st / "model.safetensors"))
    cfg = {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "decoder_config": {
            "codebook_dim": CB_DIM, "codebook_size": CB_SIZE, "latent_dim": LATENT,
            "hidden_size": WAV_DIM, "intermediate_size": 2 * WAV_DIM, "num_hidden_layers": WAV_LAYERS,
            "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
            "num_quantizers": N_BOOKS + 1, "num_semantic_quantizers": 1,
            "upsampling_ratios": [2, 2], "upsample_rates": list(rates), "decoder_dim": DAC_DIM,
            "sliding_window": 72, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
        },
    }  # fmt: skip
    (st / "config.json").write_text(json.dumps(cfg, indent=2))


def qwen3tts(folder: Path, *, seed: int = 91) -> Path:
    """The tiny checkpoint in ``folder`` (see the module docstring)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    n_text = _bpe_tokenizer(folder, "starcoder")
    t: dict[str, np.ndarray] = {}
    tk = "talker."
    t[tk + "model.text_embedding.weight"] = rng.standard_normal((n_text, TEXT_DIM)).astype(np.float32)  # fmt: skip
    t[tk + "text_projection.linear_fc1.weight"] = _w(rng, TEXT_DIM, TEXT_DIM)
    t[tk + "text_projection.linear_fc1.bias"] = _bias(rng, TEXT_DIM)
    t[tk + "text_projection.linear_fc2.weight"] = _w(rng, DIM, TEXT_DIM)
    t[tk + "text_projection.linear_fc2.bias"] = _bias(rng, DIM)
    t[tk + "model.codec_embedding.weight"] = rng.standard_normal((N_CODEC, DIM)).astype(np.float32)  # fmt: skip
    for i in range(LAYERS):
        _qwen3_layer(t, f"{tk}model.layers.{i}.", DIM, FF, HEADS, KV, HEAD_DIM, rng)
    t[tk + "model.norm.weight"] = _norm(rng, DIM)
    t[tk + "codec_head.weight"] = _w(rng, N_CODEC, DIM)
    cp = tk + "code_predictor."
    _qwen3_layer(t, cp + "model.layers.0.", CP_DIM, CP_FF, CP_HEADS, 1, CP_HEAD_DIM, rng)
    t[cp + "model.norm.weight"] = _norm(rng, CP_DIM)
    for i in range(N_BOOKS):
        t[f"{cp}model.codec_embedding.{i}.weight"] = rng.standard_normal((CP_VOCAB, DIM)).astype(np.float32)  # fmt: skip
        t[f"{cp}lm_head.{i}.weight"] = _w(rng, CP_VOCAB, CP_DIM)
    t[cp + "small_to_mtp_projection.weight"] = _w(rng, CP_DIM, DIM)
    t[cp + "small_to_mtp_projection.bias"] = _bias(rng, CP_DIM)
    _speaker_encoder(t, rng)
    save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, str(folder / "model.safetensors"))
    _codec_decoder(folder, rng)
    talker = {
        "hidden_size": DIM, "intermediate_size": FF, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"},
        "attention_bias": False, "vocab_size": N_CODEC, "text_vocab_size": n_text,
        "text_hidden_size": TEXT_DIM, "num_code_groups": N_BOOKS + 1, **TALKER_IDS,
        "code_predictor_config": {
            "hidden_size": CP_DIM, "intermediate_size": CP_FF, "num_hidden_layers": 1,
            "num_attention_heads": CP_HEADS, "num_key_value_heads": 1,
            "head_dim": CP_HEAD_DIM, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "vocab_size": CP_VOCAB, "num_code_groups": N_BOOKS + 1, "hidden_act": "silu",
            "max_position_embeddings": 64,
        },
    }  # fmt: skip
    cfg = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tts_model_type": "base",
        "tts_model_size": "tiny",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_bos_token_id": 3, "tts_eos_token_id": 4, "tts_pad_token_id": 5,
        "talker_config": talker,
        "speaker_encoder_config": {
            "mel_dim": 128, "enc_dim": DIM, "enc_channels": [SPK_C] * 4 + [3 * SPK_C],
            "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": SPK_ATT, "enc_res2net_scale": 8,
            "enc_se_channels": SPK_SE, "sample_rate": 24000,
        },
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder
