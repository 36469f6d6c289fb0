"""PocketTTS (Kyutai's checkpoint layout): the ``pockettts`` text file and its audio
projector (``pockettts_spkenc`` speaker encoder + ``pockettts_gen`` generation half).

The pinned reference's ``PocketTTSModel`` (conversion/pockettts.py) reads Kyutai's own
checkpoint: one ``model*.safetensors`` file and ``tokenizer.model`` (Unigram
SentencePiece), no ``config.json``.  The hyperparameters come from the tensor shapes
(:func:`kyutai_config`; the entry's ``config_from_shapes`` hook, :data:`SHAPE_CONFIG`,
used when the folder has no ``config.json`` and its single weight file holds
``flow_lm.bos_emb``):

* ``vocab_size`` -- the conditioner's rows plus the learned input vectors folded into
  the embedding (2 with ``flow_lm.bos_before_voice``, else 1); ``hidden_size``,
  ``intermediate_size``, the layer count from ``flow_lm.transformer.layers.N``; heads
  ``hidden_size // 64`` (every released variant is 64 wide per head); context 4096,
  RoPE base 10000, norm epsilon 1e-5 (constants of the class);
* ``audio_config`` -- the Mimi encoder transformer's width, FFN width, layers, heads.

Text file (:data:`POCKETTTS`): TextModel's rows; the backbone
``flow_lm.transformer.layers.N`` (``in_proj`` split into Q, K, V; ``norm1`` / ``norm2``
LayerNorms; ``linear1`` / ``linear2``) and ``flow_lm.out_norm``; ``token_embd`` is the
conditioner table with the learned rows appended (:func:`embedding_rows`:
``bos_before_voice`` as it is, ``bos_emb`` through ``input_linear`` with the reference's
``F.linear``); everything else is the projector's (the reference ignores it here).
The vocabulary (tokenizer route ``pockettts``) is the ``t5`` (UGM) one with the last
rows renamed ``<|pad|>``, ``<|bos_before_voice|>``, ``<|audio_bos|>`` (CONTROL, -1000),
no BOS/EOS added.

Projector (:data:`PROJECTOR_ROWS`, :func:`gguf_key`): the reference's
``modify_tensors`` is a function of the name (SEANet stages are numbered by the
``model.N`` index: encoder residual unit ``1 + 3i``, strided conv ``3 + 3i``; decoder
transposed conv ``2 + 3i``, residual unit ``3 + 3i``; ``0`` / ``11`` the in / out
convs; a residual unit's ``block.1`` is the dilated conv, any other its pointwise
one), so :func:`gguf_key` gives the GGUF name as the key the rules see (identity rules
then), the Mimi transformers' fused ``in_proj`` under an ``attn_qkv`` key that is split
in three.  Names the reference ignores give None (not read).  The SEANet kernels and the
down/upsampling convs are F16 at every output type (ggml's conv1d has no BF16 path).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ._common import COMMON, reference_math
from ._model import VT, Arch, Compose, MetaKey, NameRule, ShapeConfig, Split, Transform

#: the learned vector appended as the last embedding row (a latent: through input_linear)
BOS = "flow_lm.bos_emb"
BOS_BEFORE_VOICE = "flow_lm.bos_before_voice"
INPUT_LINEAR = "flow_lm.input_linear.weight"
EMBED = "flow_lm.conditioner.embed.weight"
_LAYER_NORM = "flow_lm.transformer.layers.{}.norm1.weight"
_MIMI_NORM = "mimi.encoder_transformer.transformer.layers.{}.norm1.weight"
_MIMI_FF = "mimi.encoder_transformer.transformer.layers.0.linear1.weight"
#: the tensors :func:`kyutai_config` reads, and ``input_linear`` (folded into the
#: embedding), with their number of dimensions: the reference stops on a KeyError
#: without one, ours names it
SHAPE_SOURCES = {EMBED: 2, "flow_lm.transformer.layers.0.linear1.weight": 2,
                 _MIMI_NORM.format(0): 1, _MIMI_FF: 2, INPUT_LINEAR: 2}  # fmt: skip
#: the config field saying the checkpoint has ``bos_before_voice`` (one more row)
HAS_BOS_BEFORE_VOICE = "_bos_before_voice"


def is_kyutai(shapes: dict[str, tuple[int, ...]]) -> bool:
    """The reference's test for a PocketTTS checkpoint (its hparams loader's matcher)."""
    return BOS in shapes


def kyutai_config(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The config the reference derives from the tensor shapes (its ``_load_hparams``);
    ``shapes`` holds every :data:`SHAPE_SOURCES` tensor, of its dimensions."""
    n_vocab, n_embd = shapes[EMBED]
    count = lambda rx: sum(1 for n in shapes if re.fullmatch(rx, n))  # noqa: E731
    n_layer = count(re.escape(_LAYER_NORM).replace(r"\{\}", r"\d+"))
    n_layer_a = count(re.escape(_MIMI_NORM).replace(r"\{\}", r"\d+"))
    n_embd_a = shapes[_MIMI_NORM.format(0)][0]
    extra = 2 if BOS_BEFORE_VOICE in shapes else 1
    return {
        "architectures": ["PocketTTSModel"],
        "model_type": "pockettts",
        "num_hidden_layers": n_layer,
        "hidden_size": n_embd,
        "intermediate_size": shapes["flow_lm.transformer.layers.0.linear1.weight"][0],
        "max_position_embeddings": 4096,
        "num_attention_heads": n_embd // 64,
        "vocab_size": n_vocab + extra,
        "rope_theta": 10000.0,
        "layer_norm_eps": 1e-5,
        "audio_config": {
            "num_hidden_layers": n_layer_a,
            "hidden_size": n_embd_a,
            "intermediate_size": shapes[_MIMI_FF][0],
            "num_attention_heads": n_embd_a // 64,
        },
        HAS_BOS_BEFORE_VOICE: extra == 2,
    }


def extra_tokens(cfg: dict) -> list[str]:
    """The names of the embedding's last rows (the reference's ``_extra_tokens``)."""
    bbv = ["<|bos_before_voice|>"] if cfg.get(HAS_BOS_BEFORE_VOICE) else []
    return ["<|pad|>", *bbv, "<|audio_bos|>"]


def embedding_rows(values: dict[str, np.ndarray]) -> np.ndarray:
    """The conditioner table with the learned rows appended: ``bos_before_voice`` as it
    is, ``input_linear(bos_emb)`` (in float32, then the table's dtype).

    That row is a dot product of ``bos_emb``'s width, computed as the reference computes
    it (:func:`~._common.reference_math`: both tensors as float32, its ``.float()``, and
    torch's ``F.linear``, summed in the order of torch's BLAS kernel for the machine, so
    the row is the reference's bit for bit); without torch, summed in float64 and rounded
    once (within one float32 step of it: docs/convert-architectures.md)."""
    embed = values[EMBED]
    rows = [embed]
    if BOS_BEFORE_VOICE in values:
        rows.append(values[BOS_BEFORE_VOICE].reshape(1, -1).astype(embed.dtype))
    audio_bos = reference_math(
        (values[BOS], values[INPUT_LINEAR]),
        lambda torch, bos, w: torch.nn.functional.linear(bos, w),
        lambda bos, w: w.astype(np.float64) @ bos.astype(np.float64),
        widen=True,
    )
    rows.append(audio_bos.reshape(1, -1).astype(embed.dtype))
    return np.concatenate(rows, axis=0)


def _embedding_shape(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    n, dim = shapes[EMBED]
    return (n + (2 if BOS_BEFORE_VOICE in shapes else 1), dim)


#: the registry hook: Kyutai's checkpoint ships no config.json (the reference's matcher
#: and ``_load_hparams``)
SHAPE_CONFIG = ShapeConfig(
    matches=is_kyutai, needs=SHAPE_SOURCES, config=kyutai_config, what="a PocketTTS checkpoint"
)

_L = "flow_lm.transformer.layers.{bid}."
_B = "blk.{bid}."
_TEXT_PAIRS = [
    ("norm1", "attn_norm"),
    ("norm2", "ffn_norm"),
    ("self_attn.out_proj", "attn_output"),
    ("linear1", "ffn_up"),
    ("linear2", "ffn_down"),
]

POCKETTTS = Arch(
    hf_archs=("PocketTTSModel",),
    gguf_arch="pockettts",
    meta=COMMON,
    names=[
        NameRule(EMBED, "token_embd.weight"),
        NameRule("flow_lm.out_norm.weight", "output_norm.weight"),
        NameRule("flow_lm.out_norm.bias", "output_norm.bias"),
        *(NameRule(_L + h + s, _B + g + s) for h, g in _TEXT_PAIRS for s in (".weight", ".bias")),
    ],
    splits=[
        Split(
            _L + "self_attn.in_proj.weight",
            (_B + "attn_q.weight", _B + "attn_k.weight", _B + "attn_v.weight"),
        )
    ],
    # the reference's text class reads only the backbone and the embedding: the rest (the
    # flow net, Mimi, the learned vectors folded into token_embd) is the projector's
    skip=(
        r"^(?!flow_lm\.(transformer\.layers\.\d+\.(norm[12]|self_attn\.(in|out)_proj|"
        r"linear[12])\.[^.]+$|out_norm\.[^.]+$|conditioner\.embed\.weight$))",
    ),
    compose=(
        Compose(EMBED, (BOS_BEFORE_VOICE, BOS, INPUT_LINEAR), embedding_rows, _embedding_shape),
    ),
    tokenizer={"vocab": "pockettts"},
    hf_back=False,
    config_from_shapes=SHAPE_CONFIG,
)


# --------------------------------------------------------------------------- projector

#: the SEANet stages (the reference's constant; mtmd hard-codes their ratios 4, 5, 6)
N_STAGES = 3
_ENC = {0: "conv_in", 3 * N_STAGES + 2: "conv_out"}
_ENC.update({1 + 3 * i: f"blk.{i}.res" for i in range(N_STAGES)})
_ENC.update({3 + 3 * i: f"blk.{i}.scale_conv" for i in range(N_STAGES)})
_DEC = {0: "conv_in", 3 * N_STAGES + 2: "conv_out"}
_DEC.update({3 + 3 * i: f"blk.{i}.res" for i in range(N_STAGES)})
_DEC.update({2 + 3 * i: f"blk.{i}.scale_conv" for i in range(N_STAGES)})

_FLOW = {
    "input_proj": "a.gen.flow.input_proj",
    "cond_embed": "a.gen.flow.cond_embd",
    "final_layer.linear": "a.gen.flow.final.proj",
    "final_layer.adaLN_modulation.1": "a.gen.flow.final.ada",
}
_FLOW_TIME = {"mlp.0": "up", "mlp.2": "down"}
_FLOW_BLOCK = {"in_ln": "norm", "mlp.0": "up", "mlp.2": "down", "adaLN_modulation.1": "ada"}
_MIMI_TFM = {
    "norm1": "ln1",
    "norm2": "ln2",
    "self_attn.out_proj": "attn_out",
    "linear1": "ffn_up",
    "linear2": "ffn_down",
}
_SIMPLE = {
    "flow_lm.speaker_proj_weight": "a.speaker_proj.weight",
    INPUT_LINEAR: "a.gen.input_linear.weight",
    "flow_lm.emb_mean": "a.gen.emb_mean",
    "flow_lm.emb_std": "a.gen.emb_std",
    "mimi.downsample.conv.conv.weight": "a.downsample.conv.weight",
    "mimi.upsample.convtr.convtr.weight": "a.gen.wav.upsample.weight",
    "mimi.quantizer.output_proj.weight": "a.gen.wav.quant_out.weight",
}
#: the fused Q/K/V key of a Mimi transformer layer (split by the entry)
_QKV = "attn_qkv.weight"


def gguf_key(name: str) -> str | None:
    """The projector's GGUF name for a checkpoint tensor (an ``attn_qkv`` key for the
    Mimi transformers' fused ``in_proj``), None for a tensor the reference does not
    write there (the module docstring)."""
    if name in _SIMPLE:
        return _SIMPLE[name]
    head, _, suffix = name.rpartition(".")
    if head == "flow_lm.out_eos":
        return "a.gen.out_eos." + suffix
    if name.startswith("flow_lm.flow_net."):
        return _flow_key(name[len("flow_lm.flow_net.") :], head, suffix)
    if "_transformer.transformer.layers." in name:
        return _mimi_tfm_key(name)
    for side, prefix, table in (("enc", "a.seanet.", _ENC), ("dec", "a.gen.wav.seanet.", _DEC)):
        m = re.match(rf"mimi\.{side}oder\.model\.(\d+)\.", name)
        if m is None:
            continue
        part = table.get(int(m.group(1)))
        if part is None:
            return None
        if part.endswith(".res"):
            inner = re.search(r"\.block\.(\d+)\.", name)
            # block.1 is the dilated conv, block.3 the pointwise one (the reference's test
            # is ``inner == 1``, any other index is its second conv)
            part += "_conv1" if inner is not None and inner.group(1) == "1" else "_conv2"
        return prefix + part + "." + suffix
    return None


def _flow_key(key: str, head: str, suffix: str) -> str | None:
    base = key.rpartition(".")[0]
    if base in _FLOW:
        return _FLOW[base] + "." + suffix
    m = re.match(r"time_embed\.(\d+)\.(.+)$", key)
    if m is not None:
        bid, rest = m.groups()
        if rest == "freqs":
            return f"a.gen.flow.time.{bid}.freqs"
        if rest == "mlp.3.alpha":
            return f"a.gen.flow.time.{bid}.norm"
        part = _FLOW_TIME.get(rest.rpartition(".")[0])
        return None if part is None else f"a.gen.flow.time.{bid}.{part}.{suffix}"
    m = re.match(r"res_blocks\.(\d+)\.(.+)\.[^.]+$", key)
    if m is not None:
        part = _FLOW_BLOCK.get(m.group(2))
        return None if part is None else f"a.gen.flow.blk.{m.group(1)}.{part}.{suffix}"
    return None


def _mimi_tfm_key(name: str) -> str | None:
    prefix = "a.gen.wav.tfm.blk." if name.startswith("mimi.decoder_transformer.") else "a.blk."
    bid, _, rest = name.split("_transformer.transformer.layers.", 1)[1].partition(".")
    if not bid.isdecimal():
        return None
    if rest == "self_attn.in_proj.weight":
        return f"{prefix}{bid}.{_QKV}"
    if rest in ("layer_scale_1.scale", "layer_scale_2.scale"):
        return f"{prefix}{bid}.ls{rest[len('layer_scale_')]}.weight"
    key, _, suffix = rest.rpartition(".")
    part = _MIMI_TFM.get(key)
    return None if part is None else f"{prefix}{bid}.{part}.{suffix}"


def _identity(templates: list[str]) -> list[NameRule]:
    return [NameRule(t, t) for t in templates]


_WB = (".weight", ".bias")
_SEANET_PARTS = ("res_conv1", "res_conv2", "scale_conv")
PROJECTOR_NAMES: list[NameRule] = _identity(
    [
        *_SIMPLE.values(),
        *("a.gen.out_eos" + s for s in _WB),
        *(g + s for g in _FLOW.values() for s in _WB),
        "a.gen.flow.time.{bid}.freqs",
        "a.gen.flow.time.{bid}.norm",
        *(f"a.gen.flow.time.{{bid}}.{p}{s}" for p in _FLOW_TIME.values() for s in _WB),
        *(f"a.gen.flow.blk.{{bid}}.{p}{s}" for p in _FLOW_BLOCK.values() for s in _WB),
        *(
            f"{t}{{bid}}.{p}{s}"
            for t in ("a.blk.", "a.gen.wav.tfm.blk.")
            for p in _MIMI_TFM.values()
            for s in _WB
        ),
        *(f"{t}{{bid}}.ls{k}.weight" for t in ("a.blk.", "a.gen.wav.tfm.blk.") for k in "12"),
        *(
            f"{p}{c}{s}"
            for p in ("a.seanet.", "a.gen.wav.seanet.")
            for c in ("conv_in", "conv_out")
            for s in _WB
        ),
        *(
            f"{p}blk.{{bid}}.{c}{s}"
            for p in ("a.seanet.", "a.gen.wav.seanet.")
            for c in _SEANET_PARTS
            for s in _WB
        ),
    ]
)
PROJECTOR_SPLITS = [
    Split(f"{t}{{bid}}.{_QKV}", tuple(f"{t}{{bid}}.attn_{x}.weight" for x in "qkv"))
    for t in ("a.blk.", "a.gen.wav.tfm.blk.")
]
#: the decoder's latent-to-Mimi 1 x 1 conv written as a matrix
PROJECTOR_TRANSFORMS = [
    Transform(
        "pockettts_quant_out_squeeze",
        r"^a\.gen\.wav\.quant_out\.weight$",
        lambda x, v, ctx: x.reshape(x.shape[:-1]) if x.ndim == 3 and x.shape[-1] == 1 else x,
        lambda x, v, ctx: x[..., None],
        shape=lambda s, v, ctx: s[:-1] if len(s) == 3 and s[-1] == 1 else s,
    )
]


def force(hf: str, gguf: str, outtype: str) -> str | None:
    """The class's ``tensor_force_quant``: the conv kernels are F16 (ggml's conv1d has no
    BF16 path); 1-D tensors stay F32 (the planner's rule)."""
    if ".seanet." in gguf or gguf in ("a.downsample.conv.weight", "a.gen.wav.upsample.weight"):
        return "F16"
    return None


def projector_rows(
    audio: str, text_width: str, folder: str
) -> list[tuple[str, Callable[[dict], Any], VT]]:
    """``(key, value of the view, type)`` after ``general.file_type``; ``audio``,
    ``text_width``, ``folder``: the view's keys of the audio config, the text width and the
    model folder's name (the reference writes it as the generation model variant)."""
    a = lambda k: lambda v: v[audio][k]  # noqa: E731
    rows = [
        ("has_audio_encoder", lambda v: True, VT.BOOL),
        ("audio.projector_type", lambda v: "pockettts_spkenc", VT.STRING),
        ("audio.projection_dim", lambda v: v[text_width], VT.UINT32),
        ("audio.block_count", a("num_hidden_layers"), VT.UINT32),
        ("audio.embedding_length", a("hidden_size"), VT.UINT32),
        ("audio.feed_forward_length", a("intermediate_size"), VT.UINT32),
        ("audio.attention.head_count", a("num_attention_heads"), VT.UINT32),
        ("audio.attention.layer_norm_epsilon", lambda v: 1e-5, VT.FLOAT32),
        ("audio.num_mel_bins", lambda v: 1, VT.UINT32),
        ("has_gen_audio_encoder", lambda v: True, VT.BOOL),
        ("gen.audio.projector_type", lambda v: "pockettts_gen", VT.STRING),
        ("gen.audio.projection_dim", lambda v: v[text_width], VT.UINT32),
        ("gen.audio.embedding_length", a("hidden_size"), VT.UINT32),
        ("gen.audio.feed_forward_length", a("intermediate_size"), VT.UINT32),
        ("gen.audio.block_count", a("num_hidden_layers"), VT.UINT32),
        ("gen.audio.attention.head_count", a("num_attention_heads"), VT.UINT32),
        ("gen.audio.attention.layer_norm_epsilon", lambda v: 1e-5, VT.FLOAT32),
        ("gen.audio.model_variant", lambda v: v[folder], VT.STRING),
    ]
    return rows


def projector_meta(audio: str, text_width: str, folder: str) -> list[MetaKey]:
    return [MetaKey(k, (), t, fn) for k, fn, t in projector_rows(audio, text_width, folder)]
