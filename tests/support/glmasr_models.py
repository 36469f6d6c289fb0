"""A tiny seeded GLM-ASR checkpoint in the older custom-code layout (``GlmasrModel``).

GLM-ASR-Nano-2512 shipped first as remote code (config ``model_type`` "Glmasr"):
``whisper_config`` (a WhisperConfig), ``lm_config`` (a LlamaConfig naming
LlamaForCausalLM), ``merge_factor``; tensors ``audio_encoder.whisper.*`` (a Whisper
encoder), ``audio_encoder.layer_norm`` (LayerNorm over the tower width before the frames
are stacked by ``merge_factor``), ``audio_encoder.adapting.{0,2}`` (Linear, GELU, Linear
to the text width), the ``[2, n_embd]``
``audio_encoder.audio_bos_eos_token`` (begin / end of audio embeddings) and the text
model ``model.*`` / ``lm_head.*``.  transformers 5.24 has no class for this layout (its
``GlmAsrForConditionalGeneration`` is the Hub's later one), so this is built by hand:
transformers' own Whisper encoder and Llama (seeded) for the tower and the text, the
adapter at random; the vocabulary GPT-2's BPE plus GLM's added tokens (the reference's
``_set_vocab_glmedge`` looks up ``<|endoftext|>`` and ``<|user|>``).
"""

from __future__ import annotations

import json
from pathlib import Path

from support.audio_models import ULTRAVOX_AUDIO, _whisper_encoder
from support.hf_models import _glm_tokenizer, _random_init
from support.vlm_models import _text

#: adapter width and the stacking of encoder frames
GLMASR_HIDDEN = 96
GLMASR_MERGE = 4


def glmasr_custom(folder: Path, *, dtype: str = "bfloat16", seed: int = 58) -> Path:
    """The folder (see the module docstring); the tower 3 layers of width 64 (the pinned
    gguf-py maps ``conv2`` only through a block map of at least 3)."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    vocab = _glm_tokenizer(folder)
    acfg, enc = _whisper_encoder(seed, **ULTRAVOX_AUDIO)
    tcfg = LlamaConfig(**_text(vocab))
    text = LlamaForCausalLM(tcfg)
    _random_init(text, seed + 1)
    d, n = ULTRAVOX_AUDIO["d_model"], tcfg.hidden_size
    g = torch.Generator().manual_seed(seed + 2)

    def r(*shape: int, base: float = 0.0):
        return base + 0.05 * torch.randn(*shape, generator=g)

    sd = {"audio_encoder.whisper." + k: v for k, v in enc.state_dict().items()}
    sd.update({
        "audio_encoder.layer_norm.weight": r(d, base=1.0),
        "audio_encoder.layer_norm.bias": r(d),
        "audio_encoder.adapting.0.weight": r(GLMASR_HIDDEN, d * GLMASR_MERGE),
        "audio_encoder.adapting.0.bias": r(GLMASR_HIDDEN),
        "audio_encoder.adapting.2.weight": r(n, GLMASR_HIDDEN),
        "audio_encoder.adapting.2.bias": r(n),
        "audio_encoder.audio_bos_eos_token.weight": r(2, n),
    })  # fmt: skip
    sd.update(text.state_dict())
    sd = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in sd.items()}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    lm = tcfg.to_dict()
    lm["architectures"] = ["LlamaForCausalLM"]
    cfg = {
        "architectures": ["GlmasrModel"],
        "model_type": "Glmasr",
        "lm_config": lm,
        "whisper_config": acfg.to_dict(),
        "adapter_type": "mlp",
        "merge_factor": GLMASR_MERGE,
        "spec_aug": False,
        "use_rope": False,
        "max_whisper_length": 1500,
        "max_length": 1024,
        "mlp_adapter_act": "gelu",
        "torch_dtype": dtype,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder
