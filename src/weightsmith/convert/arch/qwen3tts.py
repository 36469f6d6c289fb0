"""Qwen3-TTS (``Qwen3TTSForConditionalGeneration``, remote code on the Hub): the
``qwen3tts`` text file (the talker backbone) of the reference's ``Qwen3TTSTalkerModel``
(conversion/qwen3tts.py).

The config's ``talker_config`` is the text config (merged up by the reader, with
``vocab_size`` the text vocabulary's ``text_vocab_size``; the codec's 3072 rows kept as
:data:`CODEC_VOCAB`).  The talker is a Qwen3 decoder with M-RoPE sections under
``talker.model.`` (everything else under ``talker.`` -- the code predictor -- and the
speaker encoder are the projector's):

* ``token_embd`` is ``[text rows | codec rows]``: the text embedding passed through the
  ``text_projection`` MLP (``fc2(act(fc1(x)))``, folded here as the reference does with
  torch's kernels, :func:`fold_text_embedding`) with ``model.codec_embedding`` appended;
  it is written last (the reference emits it once both halves are read);
* ``output`` is ``codec_head`` (3072 rows: llama.cpp pads the logits of the text rows
  with -inf);
* the rows after ``general.file_type``: ``tokenizer.ggml.suppress_tokens`` (the last 1024
  ids but the codec EOS), ``eos_token_id`` the codec EOS (in the extended vocabulary; the
  tokenizer's own EOS, when it has one, overwrites it in place as gguf-py does) and
  ``add_eos_token`` false.

The vocabulary (route ``qwen3tts``) is the GPT-2 one with the codec rows appended as
CONTROL tokens ``<|codec_N|>``, renamed after the talker config's ``*_id`` fields
(:func:`codec_token_names`), and no chat template.  GGUF -> HF is refused: no
transformers class holds the model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ._common import BASE_NAMES, COMMON, FFN_NORM, QK_NORM, as_reference, reference_math
from ._model import VT, Arch, Compose, MetaKey, NameRule, Stack
from .qwenvl import _with_sections

#: the HF class (its config's ``talker_config`` is the text config)
HF_CLASS = "Qwen3TTSForConditionalGeneration"
#: the config field holding the codec's row count (the talker's own ``vocab_size``)
CODEC_VOCAB = "_codec_vocab_size"
#: the talker config as written (its ``*_id`` fields name the codec tokens)
TALKER = "_talker_config"

_T = "talker.model.text_embedding.weight"
_FC = "talker.text_projection.linear_fc{}.{}"
_CODEC = "talker.model.codec_embedding.weight"
#: the embedding is composed at the last of these (the reference emits it there)
_TARGET = _FC.format(2, "weight")
FOLD_INPUTS = (_FC.format(1, "weight"), _FC.format(1, "bias"), _TARGET, _FC.format(2, "bias"), _T)


def merged_config(cfg: dict, talker: dict) -> dict:
    """The config the reference's text class reads: ``talker`` (``talker_config``) over the
    top level, its ``vocab_size`` the text vocabulary's (the family's row of
    :data:`~._text_config.NESTED_TEXT`)."""
    text = {**talker, "vocab_size": talker.get("text_vocab_size")}
    return {**cfg, **text, "text_config": text, CODEC_VOCAB: talker.get("vocab_size"),
            TALKER: talker}  # fmt: skip


def codec_token_names(cfg: dict) -> list[str]:
    """``<|codec_N|>`` per codec row, the rows a talker ``*_id`` field names renamed
    ``<|field|>`` (an int) or ``<|field_key|>`` (a dict of ids), in the config's order."""
    names = [f"<|codec_{i}|>" for i in range(cfg[CODEC_VOCAB])]
    for key, val in cfg[TALKER].items():
        if not key.endswith("_id"):
            continue
        prefix = key[: -len("_id")]
        if isinstance(val, int) and not isinstance(val, bool):
            names[val] = f"<|{prefix}|>"
        elif isinstance(val, dict):
            for sub, v in val.items():
                names[v] = f"<|{prefix}_{sub}|>"
    return names


def _codec_eos(cfg: dict) -> int:
    return cfg["vocab_size"] + cfg[TALKER]["codec_eos_token_id"]


def _suppress(cfg: dict) -> list[int]:
    n = cfg["vocab_size"] + cfg[CODEC_VOCAB]
    eos = _codec_eos(cfg)
    return [i for i in range(n - 1024, n) if i != eos]


_ERF = np.vectorize(math.erf, otypes=[np.float64])
#: the activations the reference's fold knows (``hidden_act``), torch's and numpy's
_ACT = {
    "silu": (lambda t, x: t.nn.functional.silu(x), lambda x: x / (1 + np.exp(-x))),
    "gelu": (lambda t, x: t.nn.functional.gelu(x), lambda x: 0.5 * x * (1 + _ERF(x / 2**0.5))),
    "relu": (lambda t, x: t.nn.functional.relu(x), lambda x: np.maximum(x, 0)),
}


def check(cfg: dict) -> tuple[str, Any, Any] | None:
    """``(field, expected, found)`` of the first talker field the reference cannot use
    (it stops on a KeyError / IndexError): the activation of the fold, the codec ids
    (rows of the codec vocabulary)."""
    if cfg.get("hidden_act") not in _ACT:
        return ("talker_config.hidden_act", " or ".join(_ACT), cfg.get("hidden_act"))
    n = cfg[CODEC_VOCAB]
    for key, val in cfg[TALKER].items():
        if not key.endswith("_id") or isinstance(val, bool):
            continue
        ids = [val] if isinstance(val, int) else list(val.values()) if isinstance(val, dict) else []
        for v in ids:
            if not isinstance(v, int) or not 0 <= v < n:
                return (f"talker_config.{key}", f"codec row ids in [0, {n})", val)
    return None


def fold_text_embedding(values: dict[str, np.ndarray], act: str) -> np.ndarray:
    """``fc2(act(fc1(text_embedding)))`` as float32 values, computed as the reference
    computes it (:func:`~._common.reference_math`: the tensors as it holds them, float16
    kept -- float16 ops round each result --, torch's ``F.linear``, whose BLAS summation
    order the file's bytes depend on); without torch, numpy's float32 (equal within
    rounding)."""
    torch_act, np_act = _ACT[act]

    def with_torch(torch: Any, w1: Any, b1: Any, w2: Any, b2: Any, x: Any) -> Any:
        f = torch.nn.functional
        return f.linear(torch_act(torch, f.linear(x, w1, b1)), w2, b2)

    def with_numpy(*arrays: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2, x = (a.astype(np.float32) for a in arrays)
        return (np_act(x @ w1.T + b1) @ w2.T) + b2

    folded = reference_math(tuple(values[k] for k in FOLD_INPUTS), with_torch, with_numpy)
    return folded.astype(np.float32)


def _embedding(values: dict[str, np.ndarray], cfg: dict) -> np.ndarray:
    folded = fold_text_embedding(values, cfg.get("hidden_act", "silu"))
    return np.concatenate([folded, values[_CODEC].astype(np.float32)], axis=0)


def _embedding_shape(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    return (shapes[_T][0] + shapes[_CODEC][0], shapes[_TARGET][0])


def _absolute(key: str, t: VT, fn) -> MetaKey:
    return MetaKey(key, (), t, fn, absolute=True)


QWEN3TTS = Arch(
    hf_archs=(HF_CLASS,),
    gguf_arch="qwen3tts",
    meta=[
        *_with_sections(list(COMMON)),
        _absolute("tokenizer.ggml.suppress_tokens", VT.INT32, _suppress),
        _absolute("tokenizer.ggml.eos_token_id", VT.UINT32, _codec_eos),
        _absolute("tokenizer.ggml.add_eos_token", VT.BOOL, lambda cfg: False),
    ],
    names=[
        *(r for r in [*BASE_NAMES, *QK_NORM, *FFN_NORM] if r.hf != "model.embed_tokens.weight"),
        NameRule("codec_head.weight", "output.weight"),
        NameRule("text_projection.linear_fc2.weight", "token_embd.weight"),
    ],
    # the talker's own tensors, without its ``talker.`` prefix; the rest (the code
    # predictor, the speaker encoder) is the projector's, the embedding's other inputs are
    # read by the composition
    renames=((r"^talker\.", ""),),
    skip=(
        r"^(?!(model\.(layers|norm)\.|codec_head\.weight$|text_projection\.linear_fc2\.weight$))",
    ),
    compose=(
        Compose(
            _TARGET,
            (_T, _CODEC, *FOLD_INPUTS[:2], FOLD_INPUTS[3]),
            _embedding,
            _embedding_shape,
            config=True,
        ),
    ),
    required=("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", CODEC_VOCAB),
    present=("codec_eos_token_id",),
    check=check,
    tokenizer={"vocab": "qwen3tts"},
    vocab_rows=True,
    hf_back=False,
)


# --------------------------------------------------------------------------- projector
#
# Qwen3TTSSpeakerEncoderModel: one clip file with the speaker encoder (``qwen3tts_spkenc``,
# ECAPA-TDNN: mtmd's audio encoder) and the generation half (``qwen3tts_gen``: the code
# predictor, and the 12 Hz codec's decoder read from ``speech_tokenizer/``, written first).
# :func:`gguf_key` names the main checkpoint's tensors (the GGUF name, identity rules then;
# the 15 codebook embeddings and heads under per-codebook keys, stacked into one 3-D
# tensor each when the last is read), :func:`codec_tensors` the codec's.

#: the codebooks the reference stacks (a constant of its class)
N_CODEBOOKS = 15
#: the codec decoder's weights and config, beside the checkpoint
CODEC_WEIGHTS = "speech_tokenizer/model.safetensors"
CODEC_CONFIG = "speech_tokenizer/config.json"
#: the main checkpoint's tensors the projector reads
PROJECTOR_KEEP = ("speaker_encoder.", "talker.code_predictor.", _CODEC)

_SPK = {"tdnn1.conv": "conv_pw1", "tdnn2.conv": "conv_pw2", "se_block.conv1": "se_conv1",
        "se_block.conv2": "se_conv2"}  # fmt: skip
_SPK_TOP = {"mfa.conv": "a.conv_out", "asp.conv": "a.asp_attn", "asp.tdnn.conv": "a.asp_tdnn",
            "fc": "mm.a.fc", "blocks.0.conv": "a.conv1d.0"}  # fmt: skip
_CODE_LAYER = {
    "input_layernorm": "ln1", "self_attn.q_proj": "attn_q", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_proj": "attn_k", "self_attn.k_norm": "attn_k_norm", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_out", "post_attention_layernorm": "ln2",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}  # fmt: skip
_CP = "talker.code_predictor."


def gguf_key(name: str) -> str | None:
    """The projector's GGUF name (a per-codebook key for the stacked tables) of a main
    checkpoint tensor, None for one the reference does not write there."""
    if name == _CODEC:
        return "a.gen.code.out_embd.weight"
    head, _, suffix = name.rpartition(".")
    if name.startswith("speaker_encoder."):
        key = head[len("speaker_encoder.") :]
        if key in _SPK_TOP:
            return f"{_SPK_TOP[key]}.{suffix}"
        m = re.fullmatch(r"blocks\.(\d+)\.(.+)", key)
        if m is None:
            return None
        bid, rest = m.groups()
        if rest in _SPK:
            return f"a.blk.{bid}.{_SPK[rest]}.{suffix}"
        r2 = re.fullmatch(r"res2net_block\.blocks\.(\d+)\.conv", rest)
        return None if r2 is None else f"a.blk.{bid}.res2.{r2.group(1)}.{suffix}"
    if not name.startswith(_CP):
        return None
    key = head[len(_CP) :]
    if key == "model.norm":
        return f"a.gen.code.output_norm.{suffix}"
    if key == "small_to_mtp_projection":
        return f"a.gen.code.proj_in.{suffix}"
    m = re.fullmatch(r"(model\.codec_embedding|lm_head)\.(\d+)", key)
    if m is not None and suffix == "weight":
        return f"a.gen.code.{_TABLE[m.group(1)]}.{m.group(2)}"
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", key)
    if m is not None and m.group(2) in _CODE_LAYER:
        return f"a.gen.code.blk.{m.group(1)}.{_CODE_LAYER[m.group(2)]}.{suffix}"
    return None


_TABLE = {"model.codec_embedding": "embd", "lm_head": "head"}


# the codec decoder (Qwen3TTSSpeakerEncoderModel._generate_code2wav_tensors)

Get = Callable[[str], np.ndarray]
#: ``(GGUF name, numpy shape, fn(get) -> values)`` of one codec tensor
CodecTensor = tuple[str, tuple[int, ...], Callable[[Get], np.ndarray]]

_D = "decoder."
_TFM_LAYER = {
    "input_layernorm.weight": "ln1.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_out.weight", "self_attn_layer_scale.scale": "ls1.weight",
    "post_attention_layernorm.weight": "ln2.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "mlp_layer_scale.scale": "ls2.weight",
}  # fmt: skip
_UP = {
    "0.conv.weight": "conv.weight", "0.conv.bias": "conv.bias",
    "1.dwconv.conv.weight": "dwconv.weight", "1.dwconv.conv.bias": "dwconv.bias",
    "1.norm.weight": "norm.weight", "1.norm.bias": "norm.bias",
    "1.pwconv1.weight": "pw1.weight", "1.pwconv1.bias": "pw1.bias",
    "1.pwconv2.weight": "pw2.weight", "1.pwconv2.bias": "pw2.bias", "1.gamma": "gamma",
}  # fmt: skip


def _squeezed(name: str) -> Callable[[Get], np.ndarray]:
    # a 1 x 1 conv written as a matrix (torch's squeeze(-1): only a last axis of 1)
    def fn(get: Get) -> np.ndarray:
        x = get(name)
        return x.reshape(x.shape[:-1]) if x.ndim and x.shape[-1] == 1 else x

    return fn


def _codebooks(prefix: str, n: int) -> Callable[[Get], np.ndarray]:
    """EMA codebooks: ``embedding_sum / max(cluster_usage, 1e-5)`` per code (IEEE
    division: numpy's is torch's), stacked when there are several."""

    def fn(get: Get) -> np.ndarray:
        books = []
        for i in range(n):
            cb = f"{prefix}.vq.layers.{i}._codebook."
            s, u = as_reference(get(cb + "embedding_sum")), as_reference(get(cb + "cluster_usage"))
            books.append(s / np.maximum(u, u.dtype.type(1e-5))[..., None])
        return np.stack(books) if n > 1 else books[0]

    return fn


def _snake(name: str, which: str) -> Callable[[Get], np.ndarray]:
    """SnakeBeta's parameters folded: ``exp(alpha)``, ``1 / (exp(beta) + 1e-9)`` (torch's
    exp when importable, as the reference: :func:`~._common.reference_math`)."""

    def fn(get: Get) -> np.ndarray:
        x = as_reference(get(name))
        if which == "alpha":
            return reference_math(x, lambda torch, t: torch.exp(t), np.exp)
        return reference_math(
            x, lambda torch, t: 1.0 / (torch.exp(t) + 1e-9),
            lambda a: np.float32(1.0) / (np.exp(a) + a.dtype.type(1e-9)),
        )  # fmt: skip

    return fn


def codec_tensors(shapes: dict[str, tuple[int, ...]], dec: dict) -> list[CodecTensor]:
    """The codec decoder's tensors in the reference's order, from the codec checkpoint's
    shapes and its ``decoder_config`` (``num_hidden_layers``, ``upsampling_ratios``,
    ``upsample_rates``); a name it lacks raises KeyError (named by the caller)."""
    out: list[CodecTensor] = []

    def plain(gguf: str, name: str) -> None:
        out.append((gguf, shapes[name], lambda get, n=name: get(n)))

    def sq(gguf: str, name: str) -> None:
        s = shapes[name]
        out.append((gguf, s[:-1] if s and s[-1] == 1 else s, _squeezed(name)))

    q = _D + "quantizer."
    for part, tag, n in (("rvq_first", "first", 1), ("rvq_rest", "rest", N_CODEBOOKS)):
        sq(f"a.gen.wav.quant.{tag}.in_proj.weight", f"{q}{part}.input_proj.weight")
        sq(f"a.gen.wav.quant.{tag}.out_proj.weight", f"{q}{part}.output_proj.weight")
        one = shapes[f"{q}{part}.vq.layers.0._codebook.embedding_sum"]
        for i in range(n):  # every book present, of the first one's shape
            if shapes[f"{q}{part}.vq.layers.{i}._codebook.embedding_sum"] != one:
                raise KeyError(f"{q}{part}.vq.layers.{i}._codebook.embedding_sum (shape)")
            if f"{q}{part}.vq.layers.{i}._codebook.cluster_usage" not in shapes:
                raise KeyError(f"{q}{part}.vq.layers.{i}._codebook.cluster_usage")
        out.append((f"a.gen.wav.quant.{tag}.codebook.weight", (n, *one) if n > 1 else one,
                    _codebooks(f"{q}{part}", n)))  # fmt: skip
    for s in ("weight", "bias"):
        plain(f"a.gen.wav.pre_conv.{s}", f"{_D}pre_conv.conv.{s}")
    t = _D + "pre_transformer."
    for a, b in (("in_proj", "input_proj"), ("out_proj", "output_proj")):
        for s in ("weight", "bias"):
            plain(f"a.gen.wav.tfm.{a}.{s}", f"{t}{b}.{s}")
    plain("a.gen.wav.tfm.output_norm.weight", t + "norm.weight")
    for bid in range(dec["num_hidden_layers"]):
        for k, g in _TFM_LAYER.items():
            plain(f"a.gen.wav.tfm.blk.{bid}.{g}", f"{t}layers.{bid}.{k}")
    for bid in range(len(dec["upsampling_ratios"])):
        for k, g in _UP.items():
            plain(f"a.gen.wav.up.blk.{bid}.{g}", f"{_D}upsample.{bid}.{k}")
    for s in ("weight", "bias"):
        plain(f"a.gen.wav.dac.entry.{s}", f"{_D}decoder.0.conv.{s}")

    def snake(gguf: str, name: str) -> None:
        for w in ("alpha", "beta"):
            out.append((f"{gguf}.{w}", shapes[f"{name}.{w}"], _snake(f"{name}.{w}", w)))

    for bid in range(len(dec["upsample_rates"])):
        b = f"{_D}decoder.{bid + 1}.block."
        snake(f"a.gen.wav.dac.blk.{bid}.snake", b + "0")
        for s in ("weight", "bias"):
            plain(f"a.gen.wav.dac.blk.{bid}.conv.{s}", f"{b}1.conv.{s}")
        for x in range(3):
            r, g = f"{b}{x + 2}.", f"a.gen.wav.dac.blk.{bid}.res.{x}."
            snake(g + "act1", r + "act1")
            for s in ("weight", "bias"):
                plain(f"{g}conv1.{s}", f"{r}conv1.conv.{s}")
            snake(g + "act2", r + "act2")
            for s in ("weight", "bias"):
                plain(f"{g}conv2.{s}", f"{r}conv2.conv.{s}")
    snake("a.gen.wav.dac.post_snake", _D + "decoder.5")
    for s in ("weight", "bias"):
        plain(f"a.gen.wav.dac.post_conv.{s}", f"{_D}decoder.6.conv.{s}")
    return out


def force(hf: str, gguf: str, outtype: str) -> str | None:
    """The class's ``tensor_force_quant``: conv1d kernels F16 (ggml's conv1d has no BF16
    path), transposed-conv kernels F32, the code predictor's ``ffn_down`` F32 (its
    intermediate exceeds F16's range)."""
    if gguf.endswith(".weight") and (
        gguf in ("a.gen.wav.pre_conv.weight", "a.gen.wav.dac.entry.weight",
                 "a.gen.wav.dac.post_conv.weight")
        or (".up.blk." in gguf and gguf.endswith(".dwconv.weight"))
        or (".dac.blk." in gguf and gguf.endswith((".conv1.weight", ".conv2.weight")))
    ):  # fmt: skip
        return "F16"
    if gguf.endswith(".conv.weight") and (".up.blk." in gguf or ".dac.blk." in gguf):
        return "F32"
    if gguf.startswith("a.gen.code.blk.") and gguf.endswith(".ffn_down.weight"):
        return "F32"
    return None


_SPK_PARTS = ("conv_pw1", "conv_pw2", "se_conv1", "se_conv2")
PROJECTOR_NAMES: list[NameRule] = [
    NameRule(t, t)
    for t in (
        "a.gen.code.out_embd.weight",
        "a.gen.code.output_norm.weight",
        *(f"a.gen.code.proj_in.{s}" for s in ("weight", "bias")),
        *(f"a.gen.code.blk.{{bid}}.{g}.weight" for g in _CODE_LAYER.values()),
        *(f"{g}.{s}" for g in _SPK_TOP.values() for s in ("weight", "bias")),
        *(f"a.blk.{{bid}}.{p}.{s}" for p in _SPK_PARTS for s in ("weight", "bias")),
        *(f"a.blk.{{bid}}.res2.{{xid}}.{s}" for s in ("weight", "bias")),
    )
]
PROJECTOR_STACKS = [
    Stack(f"a.gen.code.{t}.{{xid}}", f"a.gen.code.{t}.weight", lambda cfg: N_CODEBOOKS, group=t)
    for t in ("head", "embd")
]


def projector_rows(global_: str, text_width: str) -> list[tuple[str, Callable[[dict], Any], VT]]:
    """``(key, value of the view, type)`` after ``general.file_type``: the speaker
    encoder's (constants of the class: mtmd's graph is fixed) and the code predictor's
    (its config); ``global_`` / ``text_width`` the view's keys of the config and the
    talker width."""
    cp = lambda k: lambda v: v[global_]["talker_config"]["code_predictor_config"][k]  # noqa: E731
    c = lambda x: lambda v: x  # noqa: E731
    return [
        ("has_audio_encoder", c(True), VT.BOOL),
        ("audio.projector_type", c("qwen3tts_spkenc"), VT.STRING),
        ("audio.projection_dim", lambda v: v[text_width], VT.UINT32),
        ("audio.num_mel_bins", c(128), VT.UINT32),
        ("audio.block_count", c(3), VT.UINT32),
        ("audio.embedding_length", c(1536), VT.UINT32),
        ("audio.attention.head_count", c(1), VT.UINT32),
        ("audio.feed_forward_length", c(1536), VT.UINT32),
        ("audio.attention.layer_norm_epsilon", c(1e-5), VT.FLOAT32),
        ("has_gen_audio_encoder", c(True), VT.BOOL),
        ("gen.audio.projector_type", c("qwen3tts_gen"), VT.STRING),
        ("gen.audio.projection_dim", lambda v: v[text_width], VT.UINT32),
        ("gen.audio.embedding_length", cp("hidden_size"), VT.UINT32),
        ("gen.audio.feed_forward_length", cp("intermediate_size"), VT.UINT32),
        ("gen.audio.block_count", cp("num_hidden_layers"), VT.UINT32),
        ("gen.audio.attention.head_count", cp("num_attention_heads"), VT.UINT32),
        ("gen.audio.attention.head_count_kv", cp("num_key_value_heads"), VT.UINT32),
        ("gen.audio.attention.layer_norm_epsilon", cp("rms_norm_eps"), VT.FLOAT32),
    ]
