"""LFM2-Audio's FastConformer encoder and adapter in the ``mmproj`` file (projector type
``lfm2a``).

conversion/lfm2.py's ``LFM2AudioModel`` (a ``ConformerAudioModel``, conversion/gemma.py)
writes the audio half of an ``Lfm2AudioForConditionalGeneration``; its text half is a
plain ``lfm2`` file (:data:`~.lfm2.LFM2`: the ``lfm`` config, tensors under ``lfm.``).
The audio config is the top-level ``encoder`` object, NeMo's names (``d_model``,
``n_heads``, ``n_layers``, ``feat_in`` mel bins).  What this module gives the
:data:`~.mmproj.LFM2_AUDIO` entry:

* rows -- ``general.file_type``, MmprojModel's audio half with ``d_model`` as both the
  embedding and the feed-forward length (the class sets ``intermediate_size`` to it),
  then ``clip.projector_type = lfm2a``, the mel bins and the norm epsilon (1e-5, fixed).
* names -- NeMo's ``conformer.*`` (``pre_encode.conv.N`` / ``pre_encode.out``, per
  layer ``feed_forward1/2``, ``self_attn.linear_*``, ``pos_bias_u/v``, ``conv.*``, the
  five norms), the adapter ``audio_adapter.model.{0,1,3}`` and the audio-output
  embedding ``audio_embedding.*`` (which mtmd reads only for its shape) -> ``a.*`` /
  ``mm.a.mlp.*`` as gguf-py's tensor map names them.
* values -- the subsampling conv biases ``[C]`` -> ``[C, 1, 1]``; the depthwise conv
  ``[C, 1, K]`` and the point-wise convs ``[O, I, 1]`` squeezed to 2-D; each layer's
  batch norm folded (:func:`.granite_speech.fold_batch_norm`, eps 1e-5) into
  ``conv_norm.weight`` / ``.bias``, written when the last member is read (as the
  reference buffers them); ``num_batches_tracked`` not written.
* types -- an audio tensor with ``.conv`` in its name (or ``_conv`` and ``.weight``)
  is F32 at every output type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._model import VT, NameRule, Transform

_C = "conformer."
_L = _C + "layers.{bid}."
_AB = "a.blk.{bid}."

_PAIRS = [
    ("audio_adapter.model.{bid}", "mm.a.mlp.{bid}"),
    ("audio_embedding.to_logits", "a.embd_to_logits"),
    (_C + "pre_encode.conv.{bid}", "a.conv1d.{bid}"),
    (_C + "pre_encode.out", "a.pre_encode.out"),
    (_L + "feed_forward1.linear1", _AB + "ffn_up"),
    (_L + "feed_forward1.linear2", _AB + "ffn_down"),
    (_L + "feed_forward2.linear1", _AB + "ffn_up_1"),
    (_L + "feed_forward2.linear2", _AB + "ffn_down_1"),
    (_L + "norm_feed_forward1", _AB + "ffn_norm"),
    (_L + "norm_feed_forward2", _AB + "ffn_norm_1"),
    (_L + "norm_self_att", _AB + "ln1"),
    (_L + "norm_out", _AB + "ln2"),
    (_L + "norm_conv", _AB + "norm_conv"),
    (_L + "self_attn.linear_q", _AB + "attn_q"),
    (_L + "self_attn.linear_k", _AB + "attn_k"),
    (_L + "self_attn.linear_v", _AB + "attn_v"),
    (_L + "self_attn.linear_out", _AB + "attn_out"),
    (_L + "conv.depthwise_conv", _AB + "conv_dw"),
    (_L + "conv.pointwise_conv1", _AB + "conv_pw1"),
    (_L + "conv.pointwise_conv2", _AB + "conv_pw2"),
]

NAMES: list[NameRule] = [
    *(NameRule(h + s, g + s) for h, g in _PAIRS for s in (".weight", ".bias")),
    NameRule("audio_embedding.embedding.weight", "a.position_embd.weight"),
    NameRule("audio_embedding.embedding_norm.weight", "a.position_embd_norm.weight"),
    NameRule(_L + "self_attn.linear_pos.weight", _AB + "linear_pos.weight"),
    NameRule(_L + "self_attn.pos_bias_u", _AB + "pos_bias_u"),
    NameRule(_L + "self_attn.pos_bias_v", _AB + "pos_bias_v"),
]


def _squeeze(axis: int, pattern: str, tag: str) -> Transform:
    """A conv kernel with a size-1 axis (``axis``) written 2-D."""
    return Transform(
        f"lfm2a_squeeze_{tag}",
        pattern,
        lambda x, v, ctx: x.reshape(np.delete(x.shape, axis)) if x.ndim == 3 else x,
        lambda x, v, ctx: np.expand_dims(x, axis),
        shape=lambda s, v, ctx: tuple(np.delete(s, axis)) if len(s) == 3 else s,
        inverse_shape=lambda s, v, ctx: (*s[:axis], 1, *s[axis:]),
    )


#: the subsampling convs' biases broadcast over the (frequency, time) plane
_PRE_BIAS = Transform(
    "lfm2a_pre_encode_bias",
    r"^conformer\.pre_encode\.conv\.\d+\.bias$",
    lambda x, v, ctx: x[:, None, None],
    lambda x, v, ctx: x.reshape(-1),
    shape=lambda s, v, ctx: (*s, 1, 1),
    inverse_shape=lambda s, v, ctx: (s[0],),
)

TRANSFORMS = [
    _PRE_BIAS,
    _squeeze(1, r"^conformer\.layers\.\d+\.conv\.depthwise_conv\.weight$", "dw"),
    _squeeze(2, r"^conformer\.layers\.\d+\.conv\.pointwise_conv[12]\.weight$", "pw"),
]

_BN = _L + "conv.batch_norm."
BATCH_NORM_FOLD = (
    tuple(_BN + s for s in ("weight", "bias", "running_mean", "running_var")),
    (_AB + "conv_norm.weight", _AB + "conv_norm.bias"),
)
DROP = ("num_batches_tracked",)


def force(hf: str) -> str | None:
    """ConformerAudioModel.tensor_force_quant: the conv tensors stay F32."""
    audio = any(p in hf for p in ("audio", "codebook", "conformer", "depth_embedding",
                                  "depthformer", "depth_linear"))  # fmt: skip
    if audio and (".conv" in hf or ("_conv" in hf and ".weight" in hf)):
        return "F32"
    return None


#: encoder fields the rows need
REQUIRED = (("d_model",), ("n_heads",), ("n_layers",), ("feat_in",))


def rows(glob: str, text_width: str) -> list[tuple[str, Callable[[dict], Any], VT]]:
    """``(key, value of the view, type)`` after ``general.file_type``; ``glob`` and
    ``text_width`` are the view's keys of the whole config and the text width."""
    e = lambda v: v[glob]["encoder"]  # noqa: E731
    return [
        ("has_audio_encoder", lambda v: True, VT.BOOL),
        ("audio.projection_dim", lambda v: v[text_width], VT.UINT32),
        ("audio.embedding_length", lambda v: e(v)["d_model"], VT.UINT32),
        ("audio.feed_forward_length", lambda v: e(v)["d_model"], VT.UINT32),
        ("audio.block_count", lambda v: e(v)["n_layers"], VT.UINT32),
        ("audio.attention.head_count", lambda v: e(v)["n_heads"], VT.UINT32),
        ("projector_type", lambda v: "lfm2a", VT.STRING),
        ("audio.num_mel_bins", lambda v: e(v)["feat_in"], VT.UINT32),
        ("audio.attention.layer_norm_epsilon", lambda v: 1e-5, VT.FLOAT32),
    ]
