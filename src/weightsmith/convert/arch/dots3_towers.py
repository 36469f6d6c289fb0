"""Dots3 Note's towers: conversion/dots3.py ``Dots3NoteMmprojModel`` (one ``--mmproj``
file with the vision ``dots3note_v`` and the audio ``dots3note_a`` halves).

Vision (``vision_encoder.*``): Conv2d patches (``patch_embed.proj``) with an RMS norm
(``patch_embed.norm`` -> ``v.pre_ln``), blocks of fused QKV with Q/K RMS norms and a
SwiGLU MLP (``fc1`` gate, ``fc3`` up, ``fc2`` down) that is dense or a sigmoid-routed MoE
by ``pyramid_num_routed`` (per block: negative or 0 dense, else that many experts,
stacked per block, ``gate_weight`` / ``router_bias`` written with a ``.weight`` suffix
and F32), a final norm (``post_trunk_norm`` -> ``mm.post_norm``) and the patch merger
(``adapter.ln_q`` / ``mlp.0`` / ``mlp.2`` -> ``mm.input_norm`` / ``mm.0`` / ``mm.2``).
The Hub's ``vision_config.hidden_size`` is the adapter's output width: the tower width is
``embed_dim``; ``image_size`` is 0 (dynamic resolution); the image processor's settings
are nested under ``vision_config`` in ``preprocessor_config.json``.

Audio (``audio_encoder.*``): three Conv2d sub-sampling layers and ``conv_out`` (F32 at
every type), Whisper-style blocks with RMS norms and rotary attention whose ``fc1``
fuses SwiGLU's gate and up halves (split: ``ffn_gate`` then ``ffn_up``), a final RMS
norm, and the adapter (``audio_adapter.proj.0`` / ``.1`` / ``.3`` -> ``mm.a.norm_pre`` /
``mm.a.mlp.1`` / ``mm.a.mlp.3``); the encoder sizes are ``audio_config.whisper_config``'s
(``d_model``, ``encoder_ffn_dim``, ...).

The class's asserts on both tower configs (:func:`check`) are checked before any output.
"""

from __future__ import annotations

from typing import Any

from ._model import NameRule, Split, Stack

_V = "vision_encoder."
_VB = _V + "blocks.{bid}."
_VBLK = "v.blk.{bid}."
_A = "audio_encoder.dots_encoder.speech_encoder."
_AL = _A + "layers.{bid}."
_ABLK = "a.blk.{bid}."


def _wb(pairs: list[tuple[str, str]], suffixes: tuple[str, ...] = (".weight", ".bias")):
    return [NameRule(h + s, g + s) for h, g in pairs for s in suffixes]


def n_routed(view: dict, bid: int) -> int:
    """The experts of vision block ``bid`` (``pyramid_num_routed``; negative: dense)."""
    return max(0, view["pyramid_num_routed"][bid])


VISION_NAMES = [
    *_wb([(_V + "patch_embed.proj", "v.patch_embd"), (_V + "adapter.ln_q", "mm.input_norm"),
          (_V + "adapter.mlp.0", "mm.0"), (_V + "adapter.mlp.2", "mm.2")]),
    *_wb([(_V + "patch_embed.norm", "v.pre_ln"), (_V + "post_trunk_norm", "mm.post_norm"),
          (_VB + "attn.qkv", _VBLK + "attn_qkv"), (_VB + "attn.proj", _VBLK + "attn_out"),
          (_VB + "attn.q_norm", _VBLK + "attn_q_norm"),
          (_VB + "attn.k_norm", _VBLK + "attn_k_norm"), (_VB + "norm_1", _VBLK + "ln1"),
          (_VB + "norm_2", _VBLK + "ln2"), (_VB + "mlp.fc1", _VBLK + "ffn_gate"),
          (_VB + "mlp.fc2", _VBLK + "ffn_down"), (_VB + "mlp.fc3", _VBLK + "ffn_up")],
         (".weight",)),
    NameRule(_VB + "mlp.gate_weight", _VBLK + "ffn_gate_inp.weight"),
    NameRule(_VB + "mlp.router_bias", _VBLK + "exp_probs_b.weight"),
]  # fmt: skip

VISION_STACKS = [
    Stack(_VB + f"mlp.experts.{{xid}}.{hf}.weight", _VBLK + f"ffn_{g}_exps.weight",
          count=lambda v: 0, group="vision_experts", layer_count=n_routed)
    for hf, g in (("fc1", "gate"), ("fc2", "down"), ("fc3", "up"))
]  # fmt: skip

AUDIO_NAMES = [
    *_wb([(_A + f"conv2d{i}", f"a.conv2d.{i}") for i in (1, 2, 3)]),
    *_wb([("audio_encoder.audio_adapter.proj.0", "mm.a.norm_pre"),
          ("audio_encoder.audio_adapter.proj.1", "mm.a.mlp.1"),
          ("audio_encoder.audio_adapter.proj.3", "mm.a.mlp.3"),
          (_AL + "fc2", _ABLK + "ffn_down"),
          (_AL + "self_attn.q_proj", _ABLK + "attn_q"),
          (_AL + "self_attn.k_proj", _ABLK + "attn_k"),
          (_AL + "self_attn.v_proj", _ABLK + "attn_v"),
          (_AL + "self_attn.out_proj", _ABLK + "attn_out")]),
    *_wb([(_A + "conv_out", "a.conv_out"), (_A + "layer_norm", "a.post_ln"),
          (_AL + "final_layer_norm", _ABLK + "ln2"),
          (_AL + "self_attn_layer_norm", _ABLK + "ln1")], (".weight",)),
]  # fmt: skip

AUDIO_SPLITS = [
    Split(_AL + f"fc1.{s}", (_ABLK + f"ffn_gate.{s}", _ABLK + f"ffn_up.{s}"))
    for s in ("weight", "bias")
]


def whisper_sizes(a: dict) -> dict:
    """Dots3NoteMmprojModel.get_audio_config: the encoder sizes from ``whisper_config``."""
    w = a.get("whisper_config") or {}
    keys = (("hidden_size", "d_model"), ("intermediate_size", "encoder_ffn_dim"),
            ("num_attention_heads", "encoder_attention_heads"),
            ("num_hidden_layers", "encoder_layers"))  # fmt: skip
    return {**a, **{k: w[s] for k, s in keys if s in w}}


def force(hf: str, gguf: str, outtype: str) -> str | None:
    """Dots3NoteMmprojModel.tensor_force_quant: routing and the audio convolutions F32,
    the patch embedding F16 at f16 (MmprojModel's)."""
    if ".ffn_gate_inp." in gguf or ".exp_probs_b." in gguf:
        return "F32"
    if ".conv2d" in gguf or "a.conv_out" in gguf:
        return "F32"
    if ".patch_embd.weight" in gguf:
        return "F16" if outtype == "f16" else "F32"
    return None


_ABSENT = object()

#: Dots3NoteMmprojModel's asserts: ``(config path, the value it accepts, its default)``;
#: ``True`` / ``False`` accept any truthy / falsy value, ``_ABSENT`` no default
_ASSERTS: tuple[tuple[str, Any, Any], ...] = (
    ("vision_config.adapter_type", "patch_merger", _ABSENT),
    ("vision_config.pre_pixel_shuffle", True, _ABSENT),
    ("vision_config.router_scoring_func", "sigmoid", "sigmoid"),
    ("vision_config.router_scale", 1.0, 1.0),
    ("vision_config.temporal_patch_size", 1, 1),
    ("vision_config.use_bias", False, _ABSENT),
    ("vision_config.use_qk_norm", True, _ABSENT),
    ("audio_config.use_conv2d_stem", True, _ABSENT),
    ("audio_config.use_rope", True, _ABSENT),
    ("audio_config.use_rms_norm", True, _ABSENT),
    ("audio_config.use_causal", False, _ABSENT),
    ("audio_config.whisper_config.activation_function", "swiglu", _ABSENT),
    ("audio_config.merge_factor", 1, 1),
    ("audio_config.chunk_seconds", 60, _ABSENT),
    ("audio_config.rope_parameters.partial_rotary_factor", 0.5, _ABSENT),
    ("audio_config.rope_parameters.rope_theta", 10000.0, _ABSENT),
)


def _get(cfg: Any, path: str, default: Any) -> Any:
    for key in path.split("."):
        if not isinstance(cfg, dict) or key not in cfg:
            return None if default is _ABSENT else default
        cfg = cfg[key]
    return cfg


def check(towers: dict) -> tuple[str, Any, Any] | None:
    """The first of the reference's tower asserts that ``towers`` fails, or None."""
    for path, want, default in _ASSERTS:
        got = _get(towers, path, default)
        ok = bool(got) == want if isinstance(want, bool) else got == want
        if not ok:
            return path, want, got
    return None
