"""MiMo-V2.5's projector (``MiMoV2ForCausalLM``; llama.cpp's ``MiMoV2VisionAudioModel``):
a vision tower (mtmd ``mimovl``) and an audio encoder (mtmd ``mimo_audio``) in one file.

* Vision (``visual.*``): a Qwen2.5-VL-shaped ViT with GQA -- the fused ``attn.qkv`` is
  written whole (``v.blk.N.attn_qkv``; mtmd derives the head width from its rows), the
  per-head ``attn.sinks`` of the windowed blocks as ``v.blk.N.attn_sinks`` (no suffix),
  biased SwiGLU MLPs, the Conv3d patch embedding split into two Conv2d kernels, the
  merger as ``v.post_ln`` / ``mm.0`` / ``mm.2``.  Rows: the class's defaults (image size
  560, 32 heads, 28 blocks, 8 KV heads, epsilon 1e-6) and its window settings
  (``vit_window_attn_types`` as ``clip.vision.wa_pattern_mode``,
  ``visual_token_window_size``), the image processor's pixel bounds.
* Audio, LLM side (the main checkpoint): ``audio_encoder.input_local_transformer.*`` as
  ``mm.a.local_blk.N.*``, ``projection.mlp.{0,2}`` as ``mm.a.mlp.{1,2}``, and the
  ``speech_embeddings.{i}`` tables stacked into one 3-D ``mm.a.code_embd`` (F32).
* Audio tokenizer (the second checkpoint ``audio_tokenizer/``, written first, in its
  file's order): the Whisper-like encoder under ``a.*`` (the conv biases as ``[C, 1]``
  columns, the convolutions kept F32), the decoder and the RVQ's EMA buffers left out,
  and the codebooks zero-padded to the widest into one ``[n_q, bins, dim]``
  ``a.rvq.codebook`` (F32), written last; its config is the audio config the base audio
  rows read (``d_model``, ``encoder_ffn_dim``, ``encoder_attention_heads`` as the
  reference aliases them), and the codebooks' sizes are written as
  ``clip.audio.rvq.codebook_size``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ._model import VT

HF_CLASS = "MiMoV2ForCausalLM"
KEEP = ("visual.", "speech_embeddings.", "audio_encoder.")
TOKENIZER_WEIGHTS = "audio_tokenizer/model.safetensors"
TOKENIZER_CONFIG = "audio_tokenizer/config.json"
#: the view key of the codebooks' sizes (from the tokenizer's shapes)
RVQ_SIZES = "mimo.rvq_sizes"

_QV = "visual.blocks.{bid}."
_VB = "v.blk.{bid}."
_LT = "audio_encoder.input_local_transformer."
_LB = "mm.a.local_blk.{bid}."


def _wb(pairs: list[tuple[str, str]], suffixes: tuple[str, ...] = (".weight", ".bias")):
    return [(h + s, g + s) for h, g in pairs for s in suffixes]


#: (HF template, GGUF template) of the main checkpoint's tensors
NAMES: list[tuple[str, str]] = [
    *_wb(
        [
            (_QV + "norm1", _VB + "ln1"),
            (_QV + "norm2", _VB + "ln2"),
            (_QV + "attn.qkv", _VB + "attn_qkv"),
            (_QV + "attn.proj", _VB + "attn_out"),
            (_QV + "mlp.gate_proj", _VB + "ffn_gate"),
            (_QV + "mlp.up_proj", _VB + "ffn_up"),
            (_QV + "mlp.down_proj", _VB + "ffn_down"),
            ("visual.merger.ln_q", "v.post_ln"),
            ("visual.merger.mlp.0", "mm.0"),
            ("visual.merger.mlp.2", "mm.2"),
            (_LT + "layers.{bid}.self_attn.q_proj", _LB + "attn_q"),
            (_LT + "layers.{bid}.self_attn.k_proj", _LB + "attn_k"),
            (_LT + "layers.{bid}.self_attn.v_proj", _LB + "attn_v"),
            (_LT + "layers.{bid}.self_attn.o_proj", _LB + "attn_out"),
            (_LT + "layers.{bid}.mlp.gate_proj", _LB + "ffn_gate"),
            (_LT + "layers.{bid}.mlp.up_proj", _LB + "ffn_up"),
            (_LT + "layers.{bid}.mlp.down_proj", _LB + "ffn_down"),
            (_LT + "layers.{bid}.input_layernorm", _LB + "ln1"),
            (_LT + "layers.{bid}.post_attention_layernorm", _LB + "ln2"),
            (_LT + "norm", "mm.a.local_norm"),
            ("audio_encoder.projection.mlp.0", "mm.a.mlp.1"),
            ("audio_encoder.projection.mlp.2", "mm.a.mlp.2"),
        ]
    ),
    (_QV + "attn.sinks", _VB + "attn_sinks"),
]
#: the stacked code embeddings (Stack's HF template, GGUF name)
CODE_EMBD = ("speech_embeddings.{xid}.weight", "mm.a.code_embd.weight")

# the tokenizer encoder's names (gguf-py's mimo-audio-tokenizer rows); {bid} a layer
_TOK_NAMES = _wb(
    [
        ("encoder.conv{bid}", "a.conv1d.{bid}"),
        ("encoder.layer_norm", "a.post_ln"),
        ("encoder.layers.{bid}.self_attn.q_proj", "a.blk.{bid}.attn_q"),
        ("encoder.layers.{bid}.self_attn.k_proj", "a.blk.{bid}.attn_k"),
        ("encoder.layers.{bid}.self_attn.v_proj", "a.blk.{bid}.attn_v"),
        ("encoder.layers.{bid}.self_attn.out_proj", "a.blk.{bid}.attn_out"),
        ("encoder.layers.{bid}.self_attn_layer_norm", "a.blk.{bid}.ln1"),
        ("encoder.layers.{bid}.final_layer_norm", "a.blk.{bid}.ln2"),
        ("encoder.layers.{bid}.fc1", "a.blk.{bid}.ffn_up"),
        ("encoder.layers.{bid}.fc2", "a.blk.{bid}.ffn_down"),
        ("encoder.down_sample_layer.0", "a.downsample.conv"),
        ("encoder.down_sample_norm", "a.downsample.norm"),
    ]
)
_TOK_RX = [
    (re.compile(re.escape(h).replace(r"\{bid\}", r"(?P<bid>\d+)") + "$"), g) for h, g in _TOK_NAMES
]
_CODEBOOK = re.compile(r"^encoder\.quantizer\.vq\.layers\.(\d+)\._codebook\.embed$")
# the RVQ's training buffers (nearest-codebook lookup reads ``embed`` alone)
_SKIP = ("_codebook.cluster_size", "_codebook.embed_avg", "_codebook.inited")
#: GGUF names kept F32 at every type (the class's tensor_force_quant)
_F32 = ("a.rvq.codebook.weight", "mm.a.code_embd.weight")

Get = Callable[[str], np.ndarray]


def _tok_name(name: str) -> str:
    for rx, g in _TOK_RX:
        mt = rx.match(name)
        if mt:
            return g.format(**mt.groupdict())
    raise ValueError(name)  # the reference's map_tensor_name stops there too


def _column(name: str) -> Callable[[Get], np.ndarray]:
    # the conv bias as a [C, 1] column, so it broadcasts over mtmd's [frames, C, 1]
    return lambda get: get(name).reshape(-1, 1)


def _codebooks(names: list[str], sizes: list[int], dim: int) -> Callable[[Get], np.ndarray]:
    def fn(get: Get) -> np.ndarray:
        out = np.zeros((len(names), max(sizes), dim), dtype=np.float32)
        for i, n in enumerate(names):
            out[i, : sizes[i]] = get(n)
        return out

    return fn


def _codebook_names(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    found = {int(mt.group(1)): n for n in shapes if (mt := _CODEBOOK.match(n))}
    if not found:
        raise KeyError("encoder.quantizer.vq.layers.0._codebook.embed")
    return [found[i] for i in range(len(found))]  # a gap: KeyError, as the reference's


def companion_view(cfg: dict, shapes: dict[str, tuple[int, ...]], audio: str) -> dict[str, Any]:
    """The view fields the tokenizer gives: its config as the audio config (under
    ``audio``; the reference's aliases added) and the codebooks' sizes."""
    acfg = {
        **cfg,
        "hidden_size": cfg["d_model"],
        "intermediate_size": cfg["encoder_ffn_dim"],
        "num_attention_heads": cfg["encoder_attention_heads"],
    }
    return {audio: acfg, RVQ_SIZES: [shapes[n][0] for n in _codebook_names(shapes)]}


def tokenizer_tensors(shapes: dict[str, tuple[int, ...]], cfg: dict) -> list:
    """The tokenizer's tensors in the reference's order: the encoder's in the file's
    order (the decoder and the RVQ buffers left out), then the merged codebooks."""
    out: list = []
    for name, shape in shapes.items():
        if name.startswith("decoder.") or name.endswith(_SKIP) or _CODEBOOK.match(name):
            continue
        gguf = _tok_name(name)
        if re.match(r"^encoder\.conv[12]\.bias$", name):
            out.append((gguf, (*shape, 1), _column(name)))
        else:
            out.append((gguf, shape, lambda get, n=name: get(n)))
    books = _codebook_names(shapes)
    sizes = [shapes[n][0] for n in books]
    dim = shapes[books[0]][1]
    out.append(
        ("a.rvq.codebook.weight", (len(books), max(sizes), dim), _codebooks(books, sizes, dim))
    )
    return out


def force(hf: str, gguf: str, outtype: str, base: Callable[[str, str, str], str | None]):
    """MiMoV2VisionAudioModel.tensor_force_quant: the codebooks and the tokenizer's
    convolutions F32, else ``base`` (the patch embedding's rule)."""
    if gguf in _F32:
        return "F32"
    if gguf.startswith(("a.conv1d.", "a.downsample.conv.")) and gguf.endswith(".weight"):
        return "F32"
    return base(hf, gguf, outtype)


def _audio_pattern(a: dict) -> list[int]:
    n = a["encoder_layers"]
    per = a.get("swa_per_block", 1)
    if a.get("hybrid_attention") and per > 1:
        return [0 if i % per < per - 1 else -1 for i in range(n)]
    return [-1] * n


def class_rows(global_: str, audio: str, pre: str) -> list[tuple[str, Callable[[dict], Any], VT]]:
    """``(key, fn(view), type)`` of the class's rows after the base ones; ``global_``
    / ``audio`` / ``pre`` the view's keys of the config, the audio config and the image
    processor's settings."""
    v = lambda k, d=None: lambda view: view.get(k, d)  # noqa: E731
    g = lambda k: lambda view: int(view[global_]["audio_config"][k])  # noqa: E731
    a = lambda fn: lambda view: fn(view[audio])  # noqa: E731
    return [
        ("vision.projector_type", lambda view: "mimovl", VT.STRING),
        ("use_silu", lambda view: True, VT.BOOL),
        (
            "vision.attention.head_count_kv",
            lambda view: int(view.get("num_key_value_heads", 8)),
            VT.UINT32,
        ),
        ("vision.spatial_merge_size", lambda view: int(view["spatial_merge_size"]), VT.UINT32),
        (
            "vision.window_size",
            lambda view: int(view.get("visual_token_window_size", -1)),
            VT.UINT32,
        ),
        (
            "vision.wa_pattern_mode",
            lambda view: list(view.get("vit_window_attn_types") or []),
            VT.INT32,
        ),
        (
            "vision.attention.layer_norm_epsilon",
            lambda view: float(view.get("rms_norm_eps", 1e-6)),
            VT.FLOAT32,
        ),
        ("vision.image_min_pixels", lambda view: int(view[pre]["min_pixels"]), VT.UINT32),
        ("vision.image_max_pixels", lambda view: int(view[pre]["max_pixels"]), VT.UINT32),
        ("audio.projector_type", lambda view: "mimo_audio", VT.STRING),
        ("audio.num_mel_bins", a(lambda x: x["n_mels"]), VT.UINT32),
        (
            "audio.attention.layer_norm_epsilon",
            a(lambda x: x.get("layer_norm_eps", 1e-5)),
            VT.FLOAT32,
        ),
        ("audio.rvq.num_quantizers", lambda view: len(view[RVQ_SIZES]), VT.UINT32),
        ("audio.rvq.codebook_size", v(RVQ_SIZES), VT.INT32),
        ("audio.wa_pattern_mode", a(_audio_pattern), VT.INT32),
        ("audio.window_size", a(lambda x: int(x["encoder_attn_window_size"][0])), VT.UINT32),
        ("audio.local_block_count", g("input_local_layers"), VT.UINT32),
        ("audio.local_group_size", g("group_size"), VT.UINT32),
    ]
