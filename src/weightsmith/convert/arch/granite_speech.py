"""Granite Speech's audio encoder and Q-Former projector in the ``mmproj`` file
(projector type ``granite_speech``).

conversion/granite.py's ``GraniteSpeechMmprojModel`` writes the audio half of a
``GraniteSpeechForConditionalGeneration`` (the text half is a plain ``granite`` file,
:data:`~.granite.GRANITE`, picked by ``text_config.architectures``).  There is no vision
tower: the audio config is ``encoder_config`` (a conformer: ``hidden_dim``,
``feedforward_mult``, ``num_heads``, ``num_layers``, ``input_dim`` mel features,
``context_size`` frames per attention block, ``conv_kernel_size``, ``max_pos_emb``) and
the projector a BLIP-2 Q-Former (``projector_config``) over windows of ``window_size``
frames, ``window_size / downsample_rate`` queries each.  What this module gives the
:data:`~.mmproj.GRANITE_SPEECH` entry:

* rows -- ``general.file_type``, MmprojModel's audio half (``has_audio_encoder``,
  ``projection_dim`` = the text width, ``embedding_length`` = ``hidden_dim``,
  ``feed_forward_length`` = ``hidden_dim * feedforward_mult``, ``block_count``,
  ``attention.head_count``), then ``clip.projector_type = granite_speech``, the mel bins,
  the norm epsilon (1e-5, fixed), chunk size, conv kernel, ``max_pos_emb`` and the
  projector's window, downsample rate and head count; Granite Speech Plus adds
  ``audio.feature_layer`` (``cat_hidden_layers``: the encoder layers concatenated
  before the projector, whose input width must then be ``hidden_dim * (n + 1)``).
* names -- ``encoder.*`` / ``projector.*`` -> ``a.*`` as gguf-py's tensor map names them;
  the fused ``attn.to_kv`` split into ``attn_k`` and ``attn_v`` halves.
* values -- the point-wise convs ``[out, in, 1]`` and the depthwise conv ``[C, 1, K]``
  squeezed to 2-D; each layer's batch norm folded (:data:`BATCH_NORM_FOLD`) into a
  scale ``w / sqrt(var + 1e-5)`` and a shift ``b - mean * scale``, written where the
  reference writes them (when the last of the four is read), named ``conv_norm`` as
  mtmd reads them (one deliberate difference: the pinned gguf-py maps the HF name to
  ``conv_norm_var``, parakeet's running variance, and mtmd then refuses the reference's
  file); ``num_batches_tracked`` and ``attention_dists`` not written.  GGUF -> HF
  reads ``conv_norm`` back as the norm's weight and bias (its running statistics made
  unit there: ``_mmproj_to_hf``'s Granite Speech record).
* types -- an ``encoder``/``projector`` tensor with ``.conv`` and ``.weight`` in its name
  is F32 at every output type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._model import VT, NameRule, Split, Transform

_E = "encoder."
_EL = _E + "layers.{bid}."
_AB = "a.blk.{bid}."
_QF = "projector.qformer.encoder.layer.{bid}."
_PB = "a.proj_blk.{bid}."

#: the folded batch norm's eps (the reference's, not the config's)
BN_EPS = 1e-5

_PAIRS = [
    (_E + "input_linear", "a.input_projection"),
    (_EL + "attn.pre_norm", _AB + "ln1"),
    (_EL + "attn.to_out", _AB + "attn_out"),
    (_EL + "conv.down_conv", _AB + "conv_pw2"),
    (_EL + "conv.norm", _AB + "norm_conv"),
    (_EL + "conv.up_conv", _AB + "conv_pw1"),
    (_EL + "ff1.down_proj", _AB + "ffn_down"),
    (_EL + "ff1.pre_norm", _AB + "ffn_norm"),
    (_EL + "ff1.up_proj", _AB + "ffn_up"),
    (_EL + "ff2.down_proj", _AB + "ffn_down_1"),
    (_EL + "ff2.pre_norm", _AB + "ffn_norm_1"),
    (_EL + "ff2.up_proj", _AB + "ffn_up_1"),
    (_EL + "post_norm", _AB + "ln2"),
    (_E + "out", "a.enc_ctc_out"),
    (_E + "out_mid", "a.enc_ctc_out_mid"),
    ("projector.linear", "a.proj_linear"),
    (_QF + "attention.attention.key", _PB + "self_attn_k"),
    (_QF + "attention.attention.query", _PB + "self_attn_q"),
    (_QF + "attention.attention.value", _PB + "self_attn_v"),
    (_QF + "attention.output.LayerNorm", _PB + "self_attn_norm"),
    (_QF + "attention.output.dense", _PB + "self_attn_out"),
    (_QF + "crossattention.attention.key", _PB + "cross_attn_k"),
    (_QF + "crossattention.attention.query", _PB + "cross_attn_q"),
    (_QF + "crossattention.attention.value", _PB + "cross_attn_v"),
    (_QF + "crossattention.output.LayerNorm", _PB + "cross_attn_norm"),
    (_QF + "crossattention.output.dense", _PB + "cross_attn_out"),
    (_QF + "intermediate_query.dense", _PB + "ffn_up"),
    (_QF + "output_query.LayerNorm", _PB + "ffn_norm"),
    (_QF + "output_query.dense", _PB + "ffn_down"),
    ("projector.qformer.layernorm", "a.proj_norm"),
]

NAMES: list[NameRule] = [
    *(NameRule(h + s, g + s) for h, g in _PAIRS for s in (".weight", ".bias")),
    NameRule(_EL + "attn.to_q.weight", _AB + "attn_q.weight"),
    NameRule(_EL + "attn.rel_pos_emb.weight", _AB + "attn_rel_pos_emb"),
    NameRule(_EL + "conv.depth_conv.conv.weight", _AB + "conv_dw.weight"),
    NameRule("projector.query", "a.proj_query"),
    # read only by GGUF -> HF (the forward direction folds these members first): the
    # folded scale and shift written back as the batch norm's weight and bias
    NameRule(_EL + "conv.batch_norm.weight", _AB + "conv_norm.weight"),
    NameRule(_EL + "conv.batch_norm.bias", _AB + "conv_norm.bias"),
]

SPLITS = [Split(_EL + "attn.to_kv.weight", (_AB + "attn_k.weight", _AB + "attn_v.weight"), 0)]


def _squeeze(axis: int) -> Transform:
    """A conv kernel with a size-1 axis (``axis``) written 2-D."""
    return Transform(
        f"granite_speech_squeeze_{axis}",
        r"^encoder\.layers\.\d+\.conv\.(up_conv|down_conv)\.weight$"
        if axis == 2
        else r"^encoder\.layers\.\d+\.conv\.depth_conv\.conv\.weight$",
        lambda x, v, ctx: x.reshape(np.delete(x.shape, axis)) if x.ndim == 3 else x,
        lambda x, v, ctx: np.expand_dims(x, axis),
        shape=lambda s, v, ctx: tuple(np.delete(s, axis)) if len(s) == 3 else s,
        inverse_shape=lambda s, v, ctx: (*s[:axis], 1, *s[axis:]),
    )


# the reference squeezes only a size-1 axis: the tiny and the Hub models all have one
TRANSFORMS = [_squeeze(2), _squeeze(1)]

#: the batch norm members (read), and the two tensors written in their place
_BN = _EL + "conv.batch_norm."
BATCH_NORM_FOLD = (
    tuple(_BN + s for s in ("weight", "bias", "running_mean", "running_var")),
    (_AB + "conv_norm.weight", _AB + "conv_norm.bias"),
)
#: source tensors not read at all
DROP = ("attention_dists", "num_batches_tracked")


def fold_batch_norm(w: np.ndarray, b: np.ndarray, mean: np.ndarray, var: np.ndarray):
    """``(scale, shift)`` of an eval-mode batch norm, in the tensors' float type as the
    reference computes them: with torch's kernels when torch is importable (its float32
    ``sqrt`` is not numpy's in the last bit, and the files must be byte-identical)."""
    try:
        import torch
    except ImportError:
        scale = w / np.sqrt(var + w.dtype.type(BN_EPS))
        return scale, b - mean * scale
    tw, tb, tm, tv = (torch.from_numpy(np.ascontiguousarray(x)) for x in (w, b, mean, var))
    scale = tw / torch.sqrt(tv + BN_EPS)
    return scale.numpy(), (tb - tm * scale).numpy()


def force(hf: str) -> str | None:
    """GraniteSpeechMmprojModel.tensor_force_quant: the conv kernels stay F32."""
    if ("encoder" in hf or "projector" in hf) and ".conv" in hf and ".weight" in hf:
        return "F32"
    return None


def _enc(v: dict, glob: str) -> dict:
    return v[glob].get("encoder_config") or {}


def rows(glob: str, text_width: str) -> list[tuple[str, Callable[[dict], Any], VT]]:
    """``(key, value of the vision view, type)`` after ``general.file_type``; ``glob`` and
    ``text_width`` are the view's keys of the whole config and the text width."""
    e = lambda v: _enc(v, glob)  # noqa: E731
    p = lambda v: v[glob]  # noqa: E731
    return [
        ("has_audio_encoder", lambda v: True, VT.BOOL),
        ("audio.projection_dim", lambda v: v[text_width], VT.UINT32),
        ("audio.embedding_length", lambda v: e(v)["hidden_dim"], VT.UINT32),
        (
            "audio.feed_forward_length",
            lambda v: e(v)["hidden_dim"] * e(v)["feedforward_mult"],
            VT.UINT32,
        ),
        ("audio.block_count", lambda v: e(v)["num_layers"], VT.UINT32),
        ("audio.attention.head_count", lambda v: e(v)["num_heads"], VT.UINT32),
        ("projector_type", lambda v: "granite_speech", VT.STRING),
        ("audio.num_mel_bins", lambda v: e(v)["input_dim"], VT.UINT32),
        ("audio.attention.layer_norm_epsilon", lambda v: BN_EPS, VT.FLOAT32),
        ("audio.chunk_size", lambda v: e(v)["context_size"], VT.UINT32),
        ("audio.conv_kernel_size", lambda v: e(v)["conv_kernel_size"], VT.UINT32),
        ("audio.max_pos_emb", lambda v: e(v)["max_pos_emb"], VT.UINT32),
        ("audio.projector.window_size", lambda v: p(v)["window_size"], VT.UINT32),
        ("audio.projector.downsample_rate", lambda v: p(v)["downsample_rate"], VT.UINT32),
        (
            "audio.projector.head_count",
            lambda v: p(v)["projector_config"]["num_attention_heads"],
            VT.UINT32,
        ),
        ("audio.feature_layer", lambda v: _feature_layers(e(v), p(v)), VT.INT32),
    ]


def _feature_layers(enc: dict, cfg: dict) -> list[int] | None:
    """GraniteSpeechPlus's ``cat_hidden_layers`` (None: not written), checked against the
    projector's input width as the reference checks it."""
    layers = (
        enc.get("cat_hidden_layers") if "Plus" in (cfg.get("architectures") or [""])[0] else None
    )
    if not layers:
        return None
    want = enc["hidden_dim"] * (len(layers) + 1)
    got = cfg["projector_config"]["encoder_hidden_size"]
    if got != want:
        raise ValueError(
            f"projector_config.encoder_hidden_size {got}: hidden_dim * (len(cat_hidden_layers)"
            f" + 1) = {want}"
        )
    return list(layers)


#: encoder_config fields the rows need
REQUIRED = (
    ("hidden_dim",),
    ("feedforward_mult",),
    ("num_layers",),
    ("num_heads",),
    ("input_dim",),
    ("context_size",),
    ("conv_kernel_size",),
    ("max_pos_emb",),
)
