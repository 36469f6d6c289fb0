"""Gemma 3n's projector: MobileNetV5 vision (``gemma3nv``) + conformer audio (``gemma3na``).

conversion/gemma.py's ``Gemma3nVisionAudioModel`` writes both towers of a
``Gemma3nForConditionalGeneration`` into one clip file.  What this module gives the
entry (:data:`~.mmproj.GEMMA3N_VISION_AUDIO`):

* rows -- MmprojModel's vision base rows from fields the class fills itself:
  ``image_size`` the image processor's ``size.height`` (else 768), ``patch_size`` =
  image_size // ``image_seq_length`` (else 256), ``embedding_length`` the vision
  ``hidden_size``, ``feed_forward_length`` 4 x ``intermediate_size`` (else 4 x 2048),
  ``block_count`` 128 (a placeholder: MobileNetV5 has stages of blocks), ``head_count``
  ``num_attention_heads`` (else 8), mean 0 / std 1 whatever the processor says; the audio
  half from ``conf_num_hidden_layers`` / ``conf_num_attention_heads`` /
  ``intermediate_size`` (else 6144); then ``gemma3nv``, the vision norm epsilon
  (``layer_norm_eps``, else 1e-6), ``gemma3na``, ``num_mel_bins`` = ``input_feat_size``
  and the audio epsilon 1e-5.
* names -- MobileNetV5 blocks ``model.vision_tower.timm_model.blocks.{stage}.{block}.*``
  -> ``v.blk.{stage}.{block}.*`` (the suffix kept; the reference's double-indexed list),
  the stem, the multi-scale fusion adapter (``msfa``) and the embedders as gguf-py maps
  them; the audio conformer ``model.audio_tower.conformer.{bid}.*`` -> ``a.blk.{bid}.*``.
* values -- the stem conv's bias as ``[1, C, 1, 1]`` (the block layer scales stay 1-D:
  the reference's block path skips that reshape).
* types -- ``tensor_force_quant``: ``input_proj`` (the audio sub-sampler's input linear)
  F16 at every output type; the stem F32; an audio tensor with ``.conv``, or ``_conv``
  and ``.weight``, F32.

The sub-sampler's two group-norm scales (``subsample_conv_projection.conv_{i}.norm.
weight``, which transformers builds and the Hub's checkpoints carry) have no name in the
pinned gguf-py: the reference stops on them (``Can not map tensor``).  Ours writes them
as ``a.conv1d.{i}.norm.weight`` (the sub-sampler's conv names plus ``.norm``; mtmd
0.3.36 does not run Gemma 3n audio, so no runtime reads them): a deliberate difference.
"""

from __future__ import annotations

from typing import Any

from ._model import NameRule, Transform

VISION_PREFIXES = ("model.vision_tower.", "model.embed_vision.")
AUDIO_PREFIXES = ("model.audio_tower.", "model.embed_audio.")
PREPROCESSOR_SIZE_DEFAULT = 768
TOKENS_DEFAULT = 256


def image_size(pre: dict) -> int:
    return int((pre.get("size") or {"height": PREPROCESSOR_SIZE_DEFAULT})["height"])


def patch_size(pre: dict) -> int:
    return image_size(pre) // int(pre.get("image_seq_length", TOKENS_DEFAULT))


def audio_fill(a: dict) -> dict:
    """The fields the reference renames before the audio rows read them."""
    return {**a, "n_layers": a.get("conf_num_hidden_layers"),
            "num_attention_heads": a.get("conf_num_attention_heads")}  # fmt: skip


def audio_ffn(a: dict) -> Any:
    return a.get("intermediate_size", 6144)


_T = "model.vision_tower.timm_model."
_B = _T + "blocks.{bid}.{xid}."
_VB = "v.blk.{bid}.{xid}."
#: the block suffixes the reference maps (anything else in a block is refused)
_BLOCK_SUFFIXES = (
    "conv_exp.weight", "bn1.weight", "conv_pwl.weight", "bn2.weight",
    "dw_start.conv.weight", "dw_start.bn.weight", "dw_mid.conv.weight", "dw_mid.bn.weight",
    "pw_exp.conv.weight", "pw_exp.bn.weight", "pw_proj.conv.weight", "pw_proj.bn.weight",
    "layer_scale.gamma", "attn.query.proj.weight", "attn.key.proj.weight",
    "attn.value.proj.weight", "attn.output.proj.weight", "attn.key.down_conv.weight",
    "attn.key.norm.weight", "attn.value.down_conv.weight", "attn.value.norm.weight",
    "norm.weight",
)  # fmt: skip

_A = "model.audio_tower."
_AL = _A + "conformer.{bid}."
_AB = "a.blk.{bid}."
_CONFORMER = (
    ("attention.attn.q_proj.weight", "attn_q.weight"),
    ("attention.attn.k_proj.weight", "attn_k.weight"),
    ("attention.attn.v_proj.weight", "attn_v.weight"),
    ("attention.attn.per_dim_scale", "per_dim_scale"),
    ("attention.attn.relative_position_embedding.pos_proj.weight", "linear_pos.weight"),
    ("attention.post.weight", "attn_out.weight"),
    ("attention.post_norm.weight", "ln2.weight"),
    ("attention.pre_attn_norm.weight", "ln1.weight"),
    ("ffw_layer_start.ffw_layer_1.weight", "ffn_up.weight"),
    ("ffw_layer_start.ffw_layer_2.weight", "ffn_down.weight"),
    ("ffw_layer_start.pre_layer_norm.weight", "ffn_norm.weight"),
    ("ffw_layer_start.post_layer_norm.weight", "ffn_post_norm.weight"),
    ("ffw_layer_end.ffw_layer_1.weight", "ffn_up_1.weight"),
    ("ffw_layer_end.ffw_layer_2.weight", "ffn_down_1.weight"),
    ("ffw_layer_end.pre_layer_norm.weight", "ffn_norm_1.weight"),
    ("ffw_layer_end.post_layer_norm.weight", "ffn_post_norm_1.weight"),
    ("lconv1d.depthwise_conv1d.weight", "conv_dw.weight"),
    ("lconv1d.pre_layer_norm.weight", "conv_norm.weight"),
    ("lconv1d.conv_norm.weight", "norm_conv.weight"),
    ("lconv1d.linear_start.weight", "conv_pw1.weight"),
    ("lconv1d.linear_end.weight", "conv_pw2.weight"),
    ("norm.weight", "layer_pre_norm.weight"),
)
_EMBEDDER = (
    ("embedding.weight", "embedding.weight"),
    ("hard_embedding_norm.weight", "hard_emb_norm.weight"),
    ("embedding_projection.weight", "input_projection.weight"),
    ("soft_embedding_norm.weight", "soft_emb_norm.weight"),
)

NAMES: list[NameRule] = [
    *(NameRule(_B + s, _VB + s) for s in _BLOCK_SUFFIXES),
    NameRule(_T + "conv_stem.conv.weight", "v.conv_stem.conv.weight"),
    NameRule(_T + "conv_stem.conv.bias", "v.conv_stem.conv.bias"),
    NameRule(_T + "conv_stem.bn.weight", "v.conv_stem.bn.weight"),
    *(
        NameRule(_T + f"msfa.{p}.weight", f"v.msfa.{p}.weight")
        for p in ("ffn.pw_exp.conv", "ffn.pw_exp.bn", "ffn.pw_proj.conv", "ffn.pw_proj.bn", "norm")
    ),
    *(NameRule("model.embed_vision." + h, "mm." + g) for h, g in _EMBEDDER),
    *(NameRule(_AL + h, _AB + g) for h, g in _CONFORMER),
    NameRule(_A + "subsample_conv_projection.conv_{bid}.conv.weight", "a.conv1d.{bid}.weight"),
    # not in the pinned gguf-py (the reference stops on it): see the module docstring
    NameRule(_A + "subsample_conv_projection.conv_{bid}.norm.weight", "a.conv1d.{bid}.norm.weight"),
    NameRule(_A + "subsample_conv_projection.input_proj_linear.weight", "a.pre_encode.out.weight"),
    *(NameRule("model.embed_audio." + h, "mm.a." + g) for h, g in _EMBEDDER),
]

TRANSFORMS: list[Transform] = [
    Transform(
        "gemma3nv_stem_bias_4d",
        r"^model\.vision_tower\.timm_model\.conv_stem\.conv\.bias$",
        lambda x, v, ctx: x.reshape(1, -1, 1, 1),
        lambda x, v, ctx: x.reshape(-1),
        shape=lambda s, v, ctx: (1, s[0], 1, 1),
        inverse_shape=lambda s, v, ctx: (s[1],),
    ),
]


def force(hf: str, gguf: str, outtype: str) -> str | None:
    """Gemma3nVisionAudioModel.tensor_force_quant (then ConformerAudioModel's, whose ``or``
    binds last; MmprojModel's patch rule matches nothing here)."""
    if "input_projection" in hf or "input_proj" in hf:
        return "F16"
    if ".embeddings." in hf or "stem" in hf:
        return "F32"
    audio = any(p in hf for p in ("audio", "codebook", "conformer", "depth_embedding",
                                  "depthformer", "depth_linear"))  # fmt: skip
    if audio and (".conv" in hf or ("_conv" in hf and ".weight" in hf)):
        return "F32"
    return None
