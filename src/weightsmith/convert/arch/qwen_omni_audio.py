"""Qwen2.5-Omni's audio encoder in the ``mmproj`` file (projector type ``qwen2.5o``).

conversion/qwenvl.py's ``Qwen25OmniModel`` writes the thinker's two towers of a
``Qwen2_5OmniModel`` checkpoint as one clip file: the Qwen2.5-VL vision part
(:data:`~.mmproj.QWEN25OMNI_VISION`) and this Whisper-style audio encoder
(``Qwen25AudioModel``).  What this module gives that entry:

* rows -- MmprojModel's audio half reads the Whisper spellings (``d_model``,
  ``encoder_ffn_dim``, ``encoder_attention_heads``, ``encoder_layers``); after it
  ``clip.audio.num_mel_bins`` and the norm epsilon (``layer_norm_eps``, else 1e-5);
* names -- ``audio_tower.*`` -> ``a.*`` as gguf-py's tensor map names them (the two
  sub-sampling convs ``a.conv1d.1`` / ``.2``, the blocks' ``ln1`` / ``ln2`` /
  attention / ``ffn_up`` / ``ffn_down``, ``a.post_ln``), the output projection
  ``proj`` -> ``mm.a.fc``; ``audio_bos_eos_token`` (unused by transformers) is left out;
* values -- the conv biases ``[C]`` written ``[C, 1]``; ``a.position_embd.weight``,
  the encoder's fixed sinusoid table (1500 positions x the width, sin half then cos
  half) computed from the config and written first, F32;
* types -- ``tensor_force_quant``: a conv weight (HF name with ``.conv`` and
  ``.weight``) is F16 at every output type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._model import VT, NameRule, Transform

#: where the towers are in a Hub checkpoint (the thinker's) and, prefix dropped, in the rules
OMNI_AUDIO = "audio_tower."
#: the sinusoid table's length (``max_source_positions`` of the Hub's configs; the
#: reference hard-codes it)
POSITIONS = 1500
POSITION_EMBD = "a.position_embd.weight"


def audio_fill(a: dict) -> dict:
    """Qwen25AudioModel.__init__: the Whisper spellings (``d_model``, ``encoder_ffn_dim``,
    ``encoder_attention_heads``) copied to the names MmprojModel's audio rows read."""
    return {
        **a,
        "hidden_size": a["d_model"],
        "intermediate_size": a["encoder_ffn_dim"],
        "num_attention_heads": a["encoder_attention_heads"],
    }


#: the class's rows after the audio half: ``(key, value of the audio config, type)``
AUDIO_TAIL: tuple[tuple[str, Callable[[dict], Any], VT], ...] = (
    ("audio.num_mel_bins", lambda a: a["num_mel_bins"], VT.UINT32),
    ("audio.attention.layer_norm_epsilon", lambda a: a.get("layer_norm_eps", 1e-5), VT.FLOAT32),
)

_AL = OMNI_AUDIO + "layers.{bid}."
_AB = "a.blk.{bid}."
#: the encoder blocks, the same in both generations
_BLOCKS = (
    (_AL + "self_attn.q_proj", _AB + "attn_q"),
    (_AL + "self_attn.k_proj", _AB + "attn_k"),
    (_AL + "self_attn.v_proj", _AB + "attn_v"),
    (_AL + "self_attn.out_proj", _AB + "attn_out"),
    (_AL + "self_attn_layer_norm", _AB + "ln1"),
    (_AL + "final_layer_norm", _AB + "ln2"),
    (_AL + "fc1", _AB + "ffn_up"),
    (_AL + "fc2", _AB + "ffn_down"),
    (OMNI_AUDIO + "ln_post", "a.post_ln"),
)


def _wb(pairs) -> list[NameRule]:
    return [NameRule(h + s, g + s) for h, g in pairs for s in (".weight", ".bias")]


AUDIO_NAMES = _wb(
    [
        (OMNI_AUDIO + "conv1", "a.conv1d.1"),
        (OMNI_AUDIO + "conv2", "a.conv1d.2"),
        *_BLOCKS,
        (OMNI_AUDIO + "proj", "mm.a.fc"),
    ]
)
#: Qwen3-Omni's encoder (``qwen3a``): three Conv2d sub-sampling layers and a linear
#: ``conv_out`` over their flattened output, the blocks as Qwen2.5-Omni's, a 2-layer
#: output MLP (``proj1`` / ``proj2`` -> ``mm.a.mlp.1`` / ``.2``)
AUDIO3_NAMES = _wb(
    [
        *((OMNI_AUDIO + f"conv2d{i}", f"a.conv2d.{i}") for i in (1, 2, 3)),
        (OMNI_AUDIO + "conv_out", "a.conv_out"),
        *_BLOCKS,
        (OMNI_AUDIO + "proj1", "mm.a.mlp.1"),
        (OMNI_AUDIO + "proj2", "mm.a.mlp.2"),
    ]
)

AUDIO_TRANSFORMS = [
    Transform(
        "audio_conv_bias_column",
        r"audio_tower\.conv[12]\.bias$",
        lambda x, v, ctx: x.reshape(-1, 1),
        lambda x, v, ctx: x.reshape(-1),
        shape=lambda s, v, ctx: (s[0], 1),
        inverse_shape=lambda s, v, ctx: (s[0],),
    ),
]


#: Qwen3-Omni: the Conv2d biases ``[C]`` written ``[C, 1, 1]``
AUDIO3_TRANSFORMS = [
    Transform(
        "audio_conv2d_bias_column",
        r"audio_tower\.conv2d[123]\.bias$",
        lambda x, v, ctx: x.reshape(-1, 1, 1),
        lambda x, v, ctx: x.reshape(-1),
        shape=lambda s, v, ctx: (s[0], 1, 1),
        inverse_shape=lambda s, v, ctx: (s[0],),
    ),
]


def audio_force(hf: str) -> str | None:
    """Qwen25AudioModel.tensor_force_quant: the conv weights F16 at every type."""
    return "F16" if hf.startswith(OMNI_AUDIO) and ".conv" in hf and ".weight" in hf else None


def sinusoids(width: int, length: int = POSITIONS) -> np.ndarray:
    """The encoder's position table ``[length, width]``: ``sin(t * w_i)`` then
    ``cos(t * w_i)``, ``w_i = exp(-i ln(10000) / (width / 2 - 1))``, in float32.

    Computed with torch's float32 kernels when torch is importable, as the reference
    (and transformers) compute it: torch's exp, sin and cos are not numpy's in the last
    bit, and the file must be byte-identical.  Without torch: the same steps in float32
    with float64 exp / sin / cos rounded to float32 (within a few float32 ulps)."""
    step = np.log(10000) / (width // 2 - 1)
    try:
        import torch
    except ImportError:
        x = np.float32(-step) * np.arange(width // 2, dtype=np.float32)
        inv = np.exp(x.astype(np.float64)).astype(np.float32)
        t = np.arange(length, dtype=np.float32)[:, None] * inv[None, :]
        t64 = t.astype(np.float64)
        return np.concatenate([np.sin(t64), np.cos(t64)], 1).astype(np.float32)
    inv = torch.exp(-step * torch.arange(width // 2).float())
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1).to(torch.float32).numpy()
