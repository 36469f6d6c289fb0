"""Whisper-encoder audio projectors in the ``mmproj`` file (conversion/ultravox.py).

llama.cpp's ``WhisperEncoderModel`` family writes an audio-only clip file (no vision
rows, ``clip.has_audio_encoder``) for checkpoints whose audio tower is a Whisper encoder
(two 1-D convs, a learned position table, pre-norm transformer blocks, a final
LayerNorm) followed by a model-specific projector.  What this module gives the entries
in :mod:`.mmproj`:

* rows -- MmprojModel's audio half, read from the audio config with Whisper's own
  spellings filled in first (:func:`whisper_fill`: ``d_model``, ``encoder_ffn_dim``,
  ``encoder_attention_heads`` become ``hidden_size``, ``intermediate_size``,
  ``num_attention_heads`` when the config has neither of the first two), then
  ``clip.projector_type``, ``clip.audio.num_mel_bins``, the LayerNorm epsilon
  (``layer_norm_eps``, else 1e-5) and the class's ``clip.audio.projector.stack_factor``.
* names -- ``audio_tower.*`` as gguf-py maps Whisper (``conv{1,2}`` -> ``a.conv1d.{1,2}``,
  ``embed_positions`` -> ``a.position_embd``, ``layer_norm`` -> ``a.post_ln``, per block
  ``self_attn.{q,k,v,out}_proj``, ``self_attn_layer_norm`` (``ln1``),
  ``final_layer_norm`` (``ln2``), ``fc1`` / ``fc2``); the projector's linears under
  ``mm.a.*``.
* values -- the two conv biases ``[C]`` stored as ``[C, 1]`` (the reference's
  ``unsqueeze(-1)``: ggml adds them to a ``[T, C]`` activation).
* types -- the reference's ``tensor_force_quant``: a conv weight (``.conv`` and
  ``.weight`` in the HF name) is F16 at every output type (F32 for Audio Flamingo 3).

The pinned gguf-py names ``audio_tower.conv{bid}`` through its block-numbered map, which
holds as many numbers as the tower has layers: its converter refuses a tower of fewer
than 3 layers (``conv2`` is not mapped).  Ours converts one; no Hub checkpoint has one.
"""

from __future__ import annotations

from ._model import NameRule, Transform

WHISPER_PREFIX = "audio_tower."

_W = WHISPER_PREFIX
_WL = _W + "layers.{bid}."
_AB = "a.blk.{bid}."


def whisper_fill(a: dict) -> dict:
    """WhisperEncoderModel.__init__: Whisper's field names as MmprojModel reads them."""
    if "hidden_size" in a or "intermediate_size" in a:
        return a
    out = dict(a)
    for dst, src in (("hidden_size", "d_model"), ("intermediate_size", "encoder_ffn_dim"),
                     ("num_attention_heads", "encoder_attention_heads")):  # fmt: skip
        if src in a:
            out[dst] = a[src]
    return out


def _wb(pairs: list[tuple[str, str]]) -> list[NameRule]:
    return [NameRule(h + s, g + s) for h, g in pairs for s in (".weight", ".bias")]


#: the encoder's tensors (the k projection has no bias in Whisper)
WHISPER_NAMES: list[NameRule] = _wb(
    [
        (_W + "conv1", "a.conv1d.1"),
        (_W + "conv2", "a.conv1d.2"),
        (_W + "embed_positions", "a.position_embd"),
        (_W + "layer_norm", "a.post_ln"),
        (_WL + "self_attn.q_proj", _AB + "attn_q"),
        (_WL + "self_attn.k_proj", _AB + "attn_k"),
        (_WL + "self_attn.v_proj", _AB + "attn_v"),
        (_WL + "self_attn.out_proj", _AB + "attn_out"),
        (_WL + "self_attn_layer_norm", _AB + "ln1"),
        (_WL + "final_layer_norm", _AB + "ln2"),
        (_WL + "fc1", _AB + "ffn_up"),
        (_WL + "fc2", _AB + "ffn_down"),
    ]
)

WHISPER_TRANSFORMS: list[Transform] = [
    Transform(
        "whisper_conv_bias_column",
        r"^audio_tower\.conv[12]\.bias$",
        lambda x, v, ctx: x.reshape(x.shape[0], 1),
        lambda x, v, ctx: x.reshape(x.shape[0]),
        shape=lambda s, v, ctx: (s[0], 1),
        inverse_shape=lambda s, v, ctx: (s[0],),
    ),
]


def projector_names(pairs: list[tuple[str, str]]) -> list[NameRule]:
    """The projector's (hf, gguf) linears, weight and bias."""
    return _wb(pairs)


def whisper_force(hf: str, conv_type: str) -> str | None:
    """WhisperEncoderModel.tensor_force_quant: conv weights ``conv_type`` (F16; Audio
    Flamingo 3's class says F32)."""
    if ".conv" in hf and ".weight" in hf:
        return conv_type
    return None
