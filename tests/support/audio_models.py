"""Tiny random audio-language model folders with a Whisper-style encoder.

Built with transformers' own config and model classes (seeded), saved as transformers 5
saves them, which for these classes is the Hub's layout (``audio_tower.*``,
``multi_modal_projector.*``, ``language_model.*``).  The audio tower: 2 layers of width
64, 128 mel bins, 1500 positions (the 30 s window Whisper's front ends pad to); the text
model is vlm_models' tiny one over a SentencePiece vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from support.hf_models import _random_init, train_spm
from support.vlm_models import _text

#: the Whisper encoder fields every builder shares
WHISPER = dict(num_mel_bins=128, max_source_positions=1500)


def voxtral(folder: Path, *, dtype: str = "bfloat16", seed: int = 50) -> Path:
    """Voxtral: a Whisper encoder whose outputs are stacked by 4 (``intermediate_size``
    = 4 x the width, as the projector reads them) into a 2-layer GELU MLP (no biases)."""
    import torch
    from transformers import LlamaConfig, VoxtralConfig, VoxtralForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_spm(folder)
    audio = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=3,
                 num_attention_heads=2, **WHISPER)  # fmt: skip
    cfg = VoxtralConfig(audio_config=audio, text_config=LlamaConfig(**_text(vocab)),
                        audio_token_id=10)  # fmt: skip
    model = VoxtralForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return folder


def qwen2audio(folder: Path, *, dtype: str = "bfloat16", seed: int = 51) -> Path:
    """Qwen2-Audio: a Whisper encoder (Whisper's own field names: ``d_model``, ...)
    average-pooled by 2 before its final norm, one linear projector; a Qwen2 text model."""
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration, Qwen2Config

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_spm(folder)
    audio = dict(d_model=64, encoder_ffn_dim=128, encoder_layers=3, encoder_attention_heads=2,
                 **WHISPER)  # fmt: skip
    cfg = Qwen2AudioConfig(audio_config=audio, text_config=Qwen2Config(**_text(vocab)),
                           audio_token_index=10)  # fmt: skip
    model = Qwen2AudioForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return folder


def glmasr(folder: Path, *, dtype: str = "bfloat16", seed: int = 52) -> Path:
    """GLM-ASR as transformers 5 saves it (GlmAsrForConditionalGeneration, the Hub's
    layout since 2025-12-27): a Whisper-shaped encoder with partial RoPE (no position
    table), a 2-layer MLP over frames merged by 4; a Llama text model."""
    import torch
    from transformers import GlmAsrConfig, GlmAsrForConditionalGeneration, LlamaConfig

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_spm(folder)
    audio = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=3,
                 num_attention_heads=2, num_mel_bins=128)  # fmt: skip
    cfg = GlmAsrConfig(audio_config=audio, text_config=LlamaConfig(**_text(vocab)),
                       audio_token_id=10)  # fmt: skip
    model = GlmAsrForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return folder


def audioflamingo3(folder: Path, *, dtype: str = "bfloat16", seed: int = 53) -> Path:
    """Audio Flamingo 3: Qwen2-Audio's pooled Whisper encoder (``hidden_size`` spelling),
    a 2-layer GELU MLP with biases; a Qwen2 text model."""
    import torch
    from transformers import (
        AudioFlamingo3Config,
        AudioFlamingo3ForConditionalGeneration,
        Qwen2Config,
    )

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_spm(folder)
    audio = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                 num_attention_heads=2, **WHISPER)  # fmt: skip
    cfg = AudioFlamingo3Config(audio_config=audio, text_config=Qwen2Config(**_text(vocab)),
                               audio_token_id=10)  # fmt: skip
    model = AudioFlamingo3ForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return folder


def _whisper_encoder(seed: int, **sizes):
    """transformers' own Whisper encoder (tiny, seeded): the audio tower of the remote-code
    checkpoints below, whose ``audio_tower.*`` / ``speech_encoder.*`` tensors it saves."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(**sizes, **WHISPER)
    enc = WhisperEncoder(cfg)
    _random_init(enc, seed)
    return cfg, enc.eval()


#: Ultravox's tiny tower: transformers' Whisper field names (as its Hub config carries
#: the whole WhisperConfig under ``audio_config``); 3 layers (the pinned converter maps
#: ``conv2`` only through a block map of at least 3)
ULTRAVOX_AUDIO = dict(d_model=64, encoder_ffn_dim=128, encoder_layers=3, encoder_attention_heads=2)


def ultravox(folder: Path, *, dtype: str = "bfloat16", seed: int = 54, stack: int = 8) -> Path:
    """Ultravox (``UltravoxModel``, remote code: transformers cannot build it) as the Hub
    keeps it: ``audio_tower.*`` a Whisper encoder, ``multi_modal_projector.*`` its
    projector (RMSNorm ``ln_pre`` over frames stacked by ``stack_factor`` 8, ``linear_1``
    to ``hidden_size`` 128, SwiGLU to 64, RMSNorm ``ln_mid``, ``linear_2`` to the text
    width; no biases), the text model under ``language_model.*`` (a Llama; the Hub's
    folders leave it out and name it in ``text_model_id``).  Beside it, ``llama/model``:
    the same text model alone as a LlamaForCausalLM folder (the reference converts that
    one: its Ultravox text class refuses)."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_spm(folder)
    acfg, enc = _whisper_encoder(seed, **ULTRAVOX_AUDIO)
    tcfg = LlamaConfig(**_text(vocab))
    text = LlamaForCausalLM(tcfg)
    _random_init(text, seed + 1)
    alone = folder.parent / "llama" / folder.name
    alone.mkdir(parents=True, exist_ok=True)
    train_spm(alone)
    text.to(getattr(torch, dtype)).save_pretrained(alone, safe_serialization=True)
    hidden, d = 128, ULTRAVOX_AUDIO["d_model"]
    g = torch.Generator().manual_seed(seed + 2)
    proj = {
        "ln_pre.weight": 1.0 + 0.05 * torch.randn(d * stack, generator=g),
        "linear_1.weight": 0.05 * torch.randn(hidden, d * stack, generator=g),
        "ln_mid.weight": 1.0 + 0.05 * torch.randn(hidden // 2, generator=g),
        "linear_2.weight": 0.05 * torch.randn(tcfg.hidden_size, hidden // 2, generator=g),
    }
    sd = {"audio_tower." + k: v for k, v in enc.state_dict().items()}
    sd.update({"multi_modal_projector." + k: v for k, v in proj.items()})
    sd.update({"language_model." + k: v for k, v in text.state_dict().items()})
    sd = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in sd.items()}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = {
        "architectures": ["UltravoxModel"],
        "model_type": "ultravox",
        "audio_model_id": "openai/whisper-large-v3-turbo",
        "audio_config": acfg.to_dict(),
        "text_config": tcfg.to_dict(),
        "hidden_size": hidden,
        "stack_factor": stack,
        "projector_act": "swiglu",
        "projector_ln_mid": True,
        "norm_init": 0.4,
        "audio_token_index": 10,
        "ignore_index": -100,
        "torch_dtype": dtype,
        "vocab_size": vocab,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


def meralion2(folder: Path, *, dtype: str = "bfloat16", seed: int = 57, scale: int = 15) -> Path:
    """MERaLiON 2 (``MERaLiON2ForConditionalGeneration``, remote code) as the Hub keeps it:
    ``speech_encoder.*`` a Whisper encoder (``speech_config``), ``ln_speech`` a LayerNorm
    over each frame, ``speech_audio_adapter.*`` (frames stacked by
    ``speech_mlp_scale_factor``, ``mlp_adapter.0`` to 5 x the width + SiLU, the GLU
    ``gate_proj`` / ``pool_proj``, ``out_proj`` to the text width; with biases), and a
    Gemma 2 text model under ``text_decoder.*``.  The text model is also saved alone in
    ``gemma2/<name>`` beside it (the transformers oracle for the text half)."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import Gemma2Config, Gemma2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_spm(folder)
    acfg, enc = _whisper_encoder(seed, **ULTRAVOX_AUDIO)
    # llama.cpp scales Gemma 2's queries by the head size: the scalar set to it
    tcfg = Gemma2Config(**_text(vocab), query_pre_attn_scalar=64)
    text = Gemma2ForCausalLM(tcfg)
    _random_init(text, seed + 1)
    alone = folder.parent / "gemma2" / folder.name
    alone.mkdir(parents=True, exist_ok=True)
    train_spm(alone)
    text.to(getattr(torch, dtype)).save_pretrained(alone, safe_serialization=True)
    d = ULTRAVOX_AUDIO["d_model"]
    g = torch.Generator().manual_seed(seed + 2)

    def lin(o: int, i: int, name: str) -> dict:
        return {name + ".weight": 0.05 * torch.randn(o, i, generator=g),
                name + ".bias": 0.05 * torch.randn(o, generator=g)}  # fmt: skip

    sd = {"speech_encoder." + k: v for k, v in enc.state_dict().items()}
    sd["ln_speech.weight"] = 1.0 + 0.05 * torch.randn(d, generator=g)
    sd["ln_speech.bias"] = 0.05 * torch.randn(d, generator=g)
    ad = "speech_audio_adapter."
    sd.update(lin(5 * d, scale * d, ad + "mlp_adapter.0"))
    sd.update(lin(5 * d, 5 * d, ad + "gate_proj"))
    sd.update(lin(5 * d, 5 * d, ad + "pool_proj"))
    sd.update(lin(tcfg.hidden_size, 5 * d, ad + "out_proj"))
    tied = tcfg.tie_word_embeddings
    sd.update({"text_decoder." + k: v for k, v in text.state_dict().items()
               if not (tied and k == "lm_head.weight")})  # fmt: skip
    sd = {k: v.to(getattr(torch, dtype)).clone().contiguous() for k, v in sd.items()}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = {
        "architectures": ["MERaLiON2ForConditionalGeneration"],
        "model_type": "meralion2",
        "speech_config": acfg.to_dict(),
        "text_config": tcfg.to_dict(),
        "speech_mlp_scale_factor": scale,
        "speech_token_index": 10,
        "torch_dtype": dtype,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder
