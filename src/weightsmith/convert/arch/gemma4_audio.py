"""Gemma 4's audio encoder in the ``mmproj`` file (projector type ``gemma4a``).

conversion/gemma.py's ``Gemma4VisionAudioModel`` writes a ``Gemma4ForConditionalGeneration``
with an ``audio_config`` as one clip file for both towers: the vision part
(``gemma4v``, :data:`~.mmproj.GEMMA4_VISION`) and this audio part, a USM-style
conformer.  What this module gives that entry:

* rows -- after the vision base rows, ``clip.has_audio_encoder`` and the audio sizes
  (``projection_dim`` = the text width, ``embedding_length``, ``feed_forward_length`` =
  4 x the width, ``block_count``, ``attention.head_count``; MmprojModel's audio half);
  after the vision projector rows, ``clip.audio.projector_type = gemma4a``,
  ``num_mel_bins`` (``input_feat_size``, else 128) and the norm epsilon
  (``layer_norm_eps``, else 1e-6: Gemma 4's audio config spells it ``rms_norm_eps``,
  which the reference does not read; mtmd hard-codes 1e-6).  Every row is omitted when
  the config has no (or an empty) ``audio_config``.
* names -- ``model.audio_tower.*`` -> ``a.*`` as gguf-py's tensor map names the
  reference's ``conformer.*`` spelling (clippable linears without ``.linear``, their
  scalar bounds kept), ``model.embed_audio.embedding_projection`` ->
  ``mm.a.input_projection``.
* values -- ``per_dim_scale`` stored as ``softplus(per_dim_scale)`` (torch's float32
  softplus when torch is importable, as the reference computes it; back, the value
  nearest the exact inverse whose softplus is the stored one: float32 softplus is
  many-to-one, so not always the original's bits); the causal depthwise conv
  ``[C, 1, K]`` squeezed to ``[C, K]``.
* types -- the reference's ``tensor_force_quant``: an audio tensor whose HF name has
  ``.conv``, or ``_conv`` and ``.weight`` (the sub-sampling convs, norms and input
  projection, the depthwise conv) is F32 at every output type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._common import reference_math
from ._model import VT, NameRule, Transform

AUDIO_PREFIXES = ("model.audio_tower.", "model.embed_audio.")

#: the subclass's audio rows, after its vision projector rows: ``(key, value of the
#: audio config, type)``; mmproj.py writes them when the config has an audio tower
AUDIO_TAIL: tuple[tuple[str, Callable[[dict], Any], VT], ...] = (
    ("audio.projector_type", lambda a: "gemma4a", VT.STRING),
    ("audio.num_mel_bins", lambda a: a.get("input_feat_size", 128), VT.UINT32),
    ("audio.attention.layer_norm_epsilon", lambda a: a.get("layer_norm_eps", 1e-6), VT.FLOAT32),
)


def feed_forward_length(a: dict) -> int:
    """Gemma4VisionAudioModel sets the audio ``intermediate_size`` to 4 x the width."""
    return 4 * a["hidden_size"] if "hidden_size" in a else a["intermediate_size"]


_A = "model.audio_tower."
_AL = _A + "layers.{bid}."
_AB = "a.blk.{bid}."
#: clippable linears (``.linear.weight`` + four scalar bounds)
_CLIPPED = (
    ("feed_forward1.ffw_layer_1", "ffn_up"),
    ("feed_forward1.ffw_layer_2", "ffn_down"),
    ("feed_forward2.ffw_layer_1", "ffn_up_1"),
    ("feed_forward2.ffw_layer_2", "ffn_down_1"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.post", "attn_out"),
    ("lconv1d.linear_start", "conv_pw1"),
    ("lconv1d.linear_end", "conv_pw2"),
)
_BOUNDS = ("input_max", "input_min", "output_max", "output_min")
#: per-layer plain weights; the two conv-module norms cross over as gguf-py maps them
_PLAIN = (
    ("feed_forward1.pre_layer_norm", "ffn_norm"),
    ("feed_forward1.post_layer_norm", "ffn_post_norm"),
    ("feed_forward2.pre_layer_norm", "ffn_norm_1"),
    ("feed_forward2.post_layer_norm", "ffn_post_norm_1"),
    ("self_attn.relative_k_proj", "attn_k_rel"),
    ("self_attn.per_dim_scale", "per_dim_scale"),
    ("lconv1d.depthwise_conv1d", "conv_dw"),
    ("lconv1d.pre_layer_norm", "conv_norm"),
    ("lconv1d.conv_norm", "norm_conv"),
    ("norm_pre_attn", "attn_pre_norm"),
    ("norm_post_attn", "attn_post_norm"),
    ("norm_out", "ln2"),
)

AUDIO_NAMES: list[NameRule] = [
    NameRule(_A + "subsample_conv_projection.layer{bid}.conv.weight", "a.conv1d.{bid}.weight"),
    NameRule(_A + "subsample_conv_projection.layer{bid}.norm.weight", "a.conv1d.{bid}.norm.weight"),
    NameRule(
        _A + "subsample_conv_projection.input_proj_linear.weight", "a.input_projection.weight"
    ),
    *(NameRule(_AL + h + ".linear.weight", _AB + g + ".weight") for h, g in _CLIPPED),
    *(NameRule(_AL + h + "." + b, _AB + g + "." + b) for h, g in _CLIPPED for b in _BOUNDS),
    # per_dim_scale is a bare parameter: the reference adds the .weight
    *(
        NameRule(_AL + h + ("" if h.endswith("per_dim_scale") else ".weight"), _AB + g + ".weight")
        for h, g in _PLAIN
    ),
    NameRule(_A + "output_proj.weight", "a.pre_encode.out.weight"),
    NameRule(_A + "output_proj.bias", "a.pre_encode.out.bias"),
    NameRule("model.embed_audio.embedding_projection.weight", "mm.a.input_projection.weight"),
]


def _softplus(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    # torch's rule: x above 20 as is
    return reference_math(
        x,
        lambda torch, t: torch.nn.functional.softplus(t),
        lambda a: np.where(a > 20, a, np.log1p(np.exp(np.minimum(a, 20)))),
    )


def _softplus_inverse(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    # softplus is many-to-one in float32 (its slope is below 1): of the values within 3
    # ulp of the float64 inverse, the nearest whose softplus (the forward's own kernel)
    # is the stored value, so the model's F.softplus(per_dim_scale) is it again exactly
    y = np.asarray(x)
    wide = y.astype(np.float64)
    x0 = np.where(wide > 20, wide, np.log(np.expm1(np.minimum(wide, 20)))).astype(y.dtype)
    out, found = x0.copy(), np.zeros(y.shape, bool)
    for k in (0, 1, -1, 2, -2, 3, -3):
        c = x0
        for _ in range(abs(k)):
            c = np.nextafter(c, np.inf if k > 0 else -np.inf).astype(y.dtype)
        hit = ~found & (_softplus(c, cfg, ctx) == y)
        out[hit] = c[hit]
        found |= hit
    return out


AUDIO_TRANSFORMS: list[Transform] = [
    Transform(
        "gemma4a_softplus_per_dim_scale",
        r"^model\.audio_tower\..*\.per_dim_scale$",
        _softplus,
        _softplus_inverse,
        exact=False,
    ),
    Transform(
        "gemma4a_depthwise_squeeze",
        r"^model\.audio_tower\..*depthwise_conv1d\.weight$",
        lambda x, v, ctx: x.reshape(x.shape[0], x.shape[2]),
        lambda x, v, ctx: x.reshape(x.shape[0], 1, x.shape[1]),
        shape=lambda s, v, ctx: (s[0], s[2]),
        inverse_shape=lambda s, v, ctx: (s[0], 1, s[1]),
    ),
]


def audio_force(hf: str) -> str | None:
    """Gemma4VisionAudioModel.tensor_force_quant's audio rule (its ``or`` binds last)."""
    audio = "audio_tower" in hf or "embed_audio" in hf
    if audio and (".conv" in hf or ("_conv" in hf and ".weight" in hf)):
        return "F32"
    return None
