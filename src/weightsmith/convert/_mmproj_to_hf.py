"""A text GGUF and its projector (``mmproj``) GGUF -> one ``*ForConditionalGeneration`` folder.

The inverse of ``hf_to_gguf(..., mmproj=...)`` (:mod:`._mmproj`), driven by the same
projector entries (:mod:`.arch.mmproj`) the way text GGUF -> HF is driven by the text
registry; nothing here keeps a second table of tensor names or transforms:

* tensors -- the projector entry's inverse plan (names, splits such as Qwen's fused
  QKV and Conv3d halves, transforms such as Pixtral's Q/K permutation or Gemma 3's
  ``norm + 1``) gives each vision tensor under the Hub name the forward direction
  reads; :attr:`VisionBack.rename` undoes the forward direction's own renames, and the
  text weights go where the Hub's checkpoints of the family keep them
  (:attr:`VisionBack.text_rename`: under ``language_model.`` for LLaVA, Mistral 3 and
  Gemma 3).  The folder is in the Hub's layout, which transformers 5 loads and both
  converters read: it converts forward again (tested).  Except InternVL: transformers
  reads only the Hub's ``-hf`` layout (OpenGVLab's needs the checkpoint's remote code),
  which neither converter reads; its record names the entry without the fused-QKV split
  (the ``-hf`` layout keeps q, k and v apart).  Both files' tensors stream into
  one safetensors set (:func:`._gguf_to_hf.write_weights`).  Tensors the projector
  carries as a copy of text data (Pixtral's ``v.token_embd.img_break``, a row of the
  text embedding) are not read; tensors in neither GGUF are made from a written one's
  values (:attr:`VisionBack.derived`: Granite Speech's batch norm statistics, the GGUF
  keeping only the folded scale and shift);
* ``config.json`` -- ``text_config`` is what text GGUF -> HF writes for the text file;
  ``vision_config`` is every ``clip.*`` row of the entry written back to the field it
  came from (``MetaKey.fields[0]``, or the family's spelling in
  :attr:`VisionBack.fields`), plus the values GGUF does not keep: each family's
  :attr:`VisionBack.restore` gives the ones llama.cpp's runtime hard-codes (which are
  transformers' defaults) and those implied by the tensors' shapes; ``audio_config``
  (a projector with ``clip.has_audio_encoder``, of a family with an audio tower way
  back: :attr:`VisionBack.audio_model_type`) likewise from the ``clip.audio.*`` rows
  (:data:`_AUDIO_FIELDS`, or the family's spelling in :attr:`VisionBack.audio_fields`)
  and :attr:`VisionBack.audio_restore`; an audio-only family has no ``vision_config``;
  a family whose Hub config keeps the text fields at the top level (Dots3 Note) reshapes
  the finished config (:attr:`VisionBack.layout`);
* ``preprocessor_config.json`` (and ``processor_config.json`` where the processor
  reads one) -- the image processor settings from the ``clip.vision.*`` rows, or the
  audio feature extractor's (Whisper's front end, which mtmd hard-codes);
* the tokenizer, generation config and model card -- as text GGUF -> HF writes them.

Everything is checked before a byte is written: the projector must be a clip file
(``general.architecture``), of a projector type with an entry here, whose projection
width (``clip.vision.projection_dim``, ``clip.audio.projection_dim``) is the text model's
width, with an audio encoder (``clip.has_audio_encoder``) only where the family's audio
tower converts back, and with one where the family is audio-only;
:class:`~weightsmith.errors.ProjectorMismatch` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors as E
from ..dtypes import DType
from ..gguf import GGUFFile
from . import _gguf_to_hf as G  # a module import: _gguf_to_hf imports this module too
from .arch import MetaKey, NameRule
from .arch import granite_speech as GS
from .arch import mmproj as P  # the audio entries (and later families') by module
from .arch.llama import is_ministral3_file
from .arch.mmproj import (
    DEEPSEEKOCR2_VISION,
    EXAONE4_5_VISION,
    GEMMA3_VISION,
    GEMMA4_VISION,
    GLM4V_VISION,
    GLM5NEXT_VISION,
    GRANITE4_VISION,
    HUNYUANVL_VISION,
    INTERNVL_VISION,
    KIMIK25_VISION,
    LFM2VL_VISION,
    LIGHTONOCR_VISION,
    LLAMA4_VISION,
    LLAVA_VISION,
    MINICPMV46_VISION,
    MINIMAXM3_VISION,
    MUSE_GLIMMER_VISION,
    PADDLEOCR_VISION,
    QWEN2VL_VISION,
    QWEN3VL_VISION,
    QWEN4EXP_VISION,
    QWEN25VL_VISION,
    SMOLVLM_VISION,
    Projector,
)
from .arch.qwenvl import QWEN3OMNIMOE

__all__ = ["NO_WAY_BACK", "VISION_BACK", "VisionBack", "vlm_parts"]

_CLIP = "clip."


def _tokens(text_md: Mapping[str, Any]) -> dict[str, int]:
    toks = text_md.get("tokenizer.ggml.tokens")
    return {t: i for i, t in enumerate(toks)} if isinstance(toks, list) else {}


#: the image processors' pixel scaling as the Hub's files spell it (0..255 -> 0..1, then
#: the mean / std rows)
_RESCALE = {"do_normalize": True, "do_rescale": True, "rescale_factor": 1 / 255}


def _language_model(name: str) -> str:
    """A text weight's name in transformers 5's VLM layout: ``model.language_model.*``."""
    return name.replace("model.", "model.language_model.", 1)


def _under_model(name: str, md: Mapping[str, Any]) -> str:
    """A tower or projector weight's name under ``model.`` (transformers 5's VLM layout)."""
    return "model." + name


def _frames(shapes: Mapping[str, Any]) -> int:
    """A Conv3d patch embedding's frames: the forward direction wrote one Conv2d a frame
    (``v.patch_embd.weight``, ``v.patch_embd.weight.1``, ...)."""
    return sum(1 for k in shapes if k.startswith("v.patch_embd.weight"))


def _token_ids(fields: dict[str, str]) -> Callable[[dict[str, int]], dict[str, int]]:
    """Config fields -> token strings: each id found in the text GGUF's vocabulary (a
    token it lacks keeps the config class's default)."""
    return lambda vocab: {f: vocab[t] for f, t in fields.items() if t in vocab}


_REQUIRED = (
    "image_size",
    "patch_size",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
)


#: the audio rows' audio config fields (transformers' Whisper-style spellings); the rows
#: not listed (the width check's projection_dim, the flags, the projector's) fill none
_AUDIO_FIELDS: dict[str, str | None] = {
    "audio.embedding_length": "hidden_size",
    "audio.feed_forward_length": "intermediate_size",
    "audio.block_count": "num_hidden_layers",
    "audio.attention.head_count": "num_attention_heads",
    "audio.num_mel_bins": "num_mel_bins",
}


@dataclass(frozen=True)
class VisionBack:
    """The per-family pieces of projector -> ``vision_config`` (see the module docstring).

    ``fields``: ``clip.*`` row key (without ``clip.``) -> the vision config field it is
    written to, None for a row no vision config field holds (read by ``restore``; a
    row computed from no config field is written only where ``fields`` names one);
    ``rename(name, md)`` -> the Hub's name from the rules' name; ``text_rename`` the
    text model's name (``model.layers...``) -> the Hub checkpoints' name;
    ``restore(md, vision, shapes)`` -> ``(vision_config additions, top-level additions)``
    from the projector's metadata, the rows' vision config and the tensor shapes;
    ``text(text_cfg, text_md)`` -> text config fixes; ``joint(md, text_md)`` -> top-level
    additions that need the text file's rows too; ``tokens(vocab)`` -> the token id
    ``text(text_cfg, text_md)`` -> text config fixes; ``text_values(text_gguf)`` ->
    text config fields the text GGUF keeps only as tensor values; ``tokens(vocab)`` -> the token id
    fields found in the text vocabulary; ``preprocessor(vision, md)`` -> the processor
    files; ``text_archs`` the text GGUF architectures it pairs with (``text_test`` its
    metadata, where they do not tell); ``copies`` projector tensors that copy text data
    (not read back)."""

    hf_arch: str
    model_type: str
    projector: Projector
    projector_types: tuple[str, ...]
    vision_model_type: str | None  # None: an audio-only family (no vision_config)
    text_model_type: str | None
    fields: dict[str, str | None]
    restore: Callable[[Mapping[str, Any], dict, dict], tuple[dict, dict]]
    preprocessor: Callable[[dict, Mapping[str, Any]], dict[str, dict]]
    rename: Callable[[str, Mapping[str, Any]], str] = lambda name, md: name
    text_rename: Callable[[str], str] = lambda name: "language_model." + name
    text: Callable[[dict, Mapping[str, Any]], dict] = lambda cfg, md: {}
    tokens: Callable[[dict[str, int]], dict[str, int]] = lambda vocab: {}
    # a text model of another GGUF architecture is not this family's
    text_archs: tuple[str, ...] = ()
    # GGUF tensors that copy text data (not read back)
    copies: frozenset[str] = field(default_factory=frozenset)
    # vision config fields the rows must give (restore reads them)
    required: tuple[str, ...] = _REQUIRED
    # the text GGUF's metadata is this family's, where text_archs do not tell (GLM-4V's
    # and GLM-OCR's are both glm4: only GLM-OCR's has MTP blocks)
    text_test: Callable[[Mapping[str, Any]], bool] = lambda md: True
    # top-level config fields read from both files' metadata (projector's, text's):
    # Granite 4 Vision's projector map (each block's text layer is in the text file)
    joint: Callable[[Mapping[str, Any], Mapping[str, Any]], dict] = lambda md, text_md: {}
    # text config fields kept only as tensor values (the text GGUF -> the fields)
    text_values: Callable[[GGUFFile], dict] = lambda f: {}
    # the audio tower (``clip.audio.*`` rows -> ``audio_config``); None: a projector with
    # an audio encoder is refused.  ``audio_fields`` overrides _AUDIO_FIELDS (None: no
    # field); ``audio_restore(md, audio, shapes)`` -> (audio_config additions, top-level
    # additions); ``audio_required`` the audio config fields the rows must give
    audio_model_type: str | None = None
    audio_fields: dict[str, str | None] = field(default_factory=dict)
    audio_restore: Callable[[Mapping[str, Any], dict, dict], tuple[dict, dict]] = (
        lambda md, audio, shapes: ({}, {})
    )
    audio_required: tuple[str, ...] = ()
    # the config key the audio tower's config goes under (Granite Speech's
    # ``encoder_config``)
    audio_key: str = "audio_config"
    # HF tensors in neither GGUF: ``derived(hf name)`` -> ``[(new name, shape, fn)]``,
    # each ``fn(values)`` of a planned tensor's float32 values, of that shape (None: the
    # planned tensor's) (Granite Speech's batch norm statistics beside the folded scale)
    derived: Callable[[str], list[tuple[str, tuple | None, Callable]]] = lambda name: []
    # the finished config.json reshaped (None: as built): Dots3 Note's Hub config keeps
    # the text fields at the top level, where both converters and transformers read them
    layout: Callable[[dict], dict] | None = None
    # the projector's metadata is this family's, where its projector type does not tell
    # (Qwen3-Omni's vision half is Qwen3-VL's qwen3vl_merger; only its file has the
    # qwen3a audio tower); such a record is tried before those without a test
    proj_test: Callable[[Mapping[str, Any]], bool] | None = None
    # the text registry entry whose inverse plan writes the text weights, where the
    # GGUF architecture's own writes another layout (None: that one): Qwen3-Omni's
    # experts one tensor each, as its Hub checkpoints and transformers read them
    text_entry: Any = None


def _mean_std(md: Mapping[str, Any]) -> dict:
    return {
        "image_mean": [_f(x) for x in md[_CLIP + "vision.image_mean"]],
        "image_std": [_f(x) for x in md[_CLIP + "vision.image_std"]],
    }


def _f(v: Any) -> Any:
    """A float32 metadata value as the decimal it was written from."""
    return float(str(np.float32(v))) if isinstance(v, float) else v


# --------------------------------------------------------------------------- mechanism


def _family(text: GGUFFile, proj: GGUFFile, path: Path) -> VisionBack:
    md = proj.metadata
    arch = md.get("general.architecture")
    if arch != "clip":
        raise E.ProjectorMismatch(
            "not a projector GGUF",
            path=path,
            field="general.architecture",
            expected="'clip'",
            found=repr(arch) if arch is not None else "no such key",
        )
    ptype = md.get(_CLIP + "projector_type", md.get(_CLIP + "vision.projector_type"))
    if ptype is None:  # an audio-only file may type only its audio tower (Qwen3-ASR's)
        ptype = md.get(_CLIP + "audio.projector_type")
    text_arch = text.metadata.get("general.architecture")
    if ptype in NO_WAY_BACK:  # a family transformers cannot rebuild from the pair
        raise E.ProjectorMismatch(
            "no GGUF -> HF conversion for this projector: " + NO_WAY_BACK[ptype],
            path=path,
            field="clip.projector_type",
            expected="a projector whose whole model the GGUF pair keeps",
            found=repr(ptype),
        )
    known = [b for b in VISION_BACK if ptype in b.projector_types]
    # a record that tests the projector's metadata is the more specific: tried first
    known = [b for b in known if b.proj_test is None or b.proj_test(md)]
    known.sort(key=lambda b: b.proj_test is None)
    for b in known:
        if text_arch in b.text_archs and b.text_test(text.metadata):
            return b
    raise E.ProjectorMismatch(
        "no GGUF -> HF conversion for this projector with this text model",
        path=path,
        field="clip.projector_type",
        expected=" or ".join(
            f"{t!r} with a {a!r} text model"
            for b in VISION_BACK
            for t in b.projector_types
            for a in b.text_archs
        ),
        found=f"{ptype!r} with a {text_arch!r} text model",
    )


def _vision_config(back: VisionBack, md: Mapping[str, Any]) -> tuple[dict, dict[str, str]]:
    """The ``clip.*`` rows of the entry, each written back to its vision config field;
    also field -> the GGUF key it is read from."""
    out: dict[str, Any] = {}
    key_of: dict[str, str] = {}
    for row in back.projector.entry.meta:
        if not isinstance(row, MetaKey):
            continue
        key = row.full_key("clip")
        # a row computed from no config field (InternVL's image size) is written where
        # the family's ``fields`` puts it
        target = back.fields.get(key[len(_CLIP) :], row.fields[0] if row.fields else None)
        if target is None or target.startswith("mmproj."):
            continue
        key_of.setdefault(target, key)
        if key in md:
            out.setdefault(target, row.back(_f(md[key])))
    return out, key_of


def _audio_config(back: VisionBack, md: Mapping[str, Any]) -> tuple[dict, dict[str, str]]:
    """The ``clip.audio.*`` rows written back to their audio config fields (the family's
    :attr:`VisionBack.audio_fields`, else :data:`_AUDIO_FIELDS`); also field -> key."""
    out: dict[str, Any] = {}
    key_of: dict[str, str] = {}
    names = {**_AUDIO_FIELDS, **back.audio_fields}
    for row in back.projector.entry.meta:
        if not isinstance(row, MetaKey) or not row.key.startswith("audio."):
            continue
        target = names.get(row.key)
        if target is None:
            continue
        key = row.full_key("clip")
        key_of.setdefault(target, key)
        if key in md:
            out.setdefault(target, row.back(_f(md[key])))
    return out, key_of


def _missing(path: Path, tower: str, missing: list[str]) -> E.MissingGGUFMetadata:
    return E.MissingGGUFMetadata(
        f"projector metadata needed for {tower}_config is missing",
        path=path,
        field=f"clip.{tower}.*",
        expected="keys " + ", ".join(missing),
        found="none of them" if len(missing) > 1 else "no such key",
    )


def vlm_parts(
    text: GGUFFile, proj: GGUFFile, dtype: DType, text_path: Path, proj_path: Path
) -> tuple[Any, dict, dict, list[G.Part], list, dict[str, dict]]:
    """``(text entry, config.json, generation_config.json, parts, tensor plan, processor
    files)`` of the ``*ForConditionalGeneration`` folder of ``text`` + ``proj``; every
    check done, nothing written."""
    back = _family(text, proj, proj_path)
    md = proj.metadata
    entry, text_cfg, gen = G.build_config(
        text, dtype, path=text_path, text_model_type=back.text_model_type
    )
    has_audio = bool(md.get(_CLIP + "has_audio_encoder"))
    if (has_audio and back.audio_model_type is None) or (
        not has_audio and back.vision_model_type is None
    ):
        # an audio tower the family does not convert back (Gemma 4's, ...), or an
        # audio-only family's projector without one
        raise E.ProjectorMismatch(
            "no GGUF -> HF conversion for this projector's towers",
            path=proj_path,
            field="clip.has_audio_encoder",
            expected="an audio encoder" if back.audio_model_type else "a vision-only projector",
            found="an audio encoder" if has_audio else "none",
        )
    towers = [t for t, on in (("vision", back.vision_model_type), ("audio", has_audio)) if on]
    for tower in towers:
        width = md.get(f"{_CLIP}{tower}.projection_dim")
        if width != text_cfg["hidden_size"]:
            raise E.ProjectorMismatch(
                "the projector's output width is not the text model's",
                path=proj_path,
                field=f"clip.{tower}.projection_dim",
                expected=text_cfg["hidden_size"],
                found=width if width is not None else "no such key",
            )
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in proj.tensors}
    vision, key_of = _vision_config(back, md)
    missing = [key_of.get(f, f) for f in back.required if f not in vision]
    if missing:
        raise _missing(proj_path, "vision", missing)
    audio: dict = {}
    if has_audio:
        audio, key_of = _audio_config(back, md)
        missing = [key_of.get(f, f) for f in back.audio_required if f not in audio]
        if missing:
            raise _missing(proj_path, "audio", missing)
    try:  # the rows and tensors the family's restore and processor file read
        v_more, top = back.restore(md, vision, shapes)
        vision = {"model_type": back.vision_model_type, **vision, **v_more}
        if has_audio:
            a_more, a_top = back.audio_restore(md, audio, shapes)
            audio = {"model_type": back.audio_model_type, **audio, **a_more}
            top = {**top, **a_top}
        processor = back.preprocessor(vision, md)
    except KeyError as exc:
        raise E.MissingGGUFMetadata(
            "the projector lacks a row or tensor its tower configs need",
            path=proj_path,
            field=str(exc.args[0]),
            expected="present",
            found="no such key or tensor",
        ) from None
    try:
        top = {**top, **back.joint(md, text.metadata)}
    except KeyError as exc:
        raise E.MissingGGUFMetadata(
            "the text GGUF lacks a row its projector's config needs",
            path=text_path,
            field=str(exc.args[0]),
            expected="present",
            found="no such key",
        ) from None
    text_cfg.pop("architectures", None)  # the family's text() may name one (SmolVLM's)
    text_cfg.update(back.text(text_cfg, text.metadata))
    text_cfg.update(back.text_values(text))
    dt = {k: text_cfg.pop(k) for k in ("dtype", "torch_dtype")}
    cfg = {
        "architectures": [back.hf_arch],
        "model_type": back.model_type,
        "text_config": text_cfg,
        **({"vision_config": vision} if back.vision_model_type else {}),
        **({back.audio_key: audio} if has_audio else {}),
        **top,
        **back.tokens(_tokens(text.metadata)),
        "tie_word_embeddings": text_cfg.get("tie_word_embeddings", False),
        **dt,
    }
    parts = [
        G.Part(text, back.text_entry or entry, text_cfg, text_path),
        # the projector's transforms read the tower configs as the forward view holds them
        G.Part(proj, back.projector.entry, {**vision, P.AUDIO: audio}, proj_path),
    ]

    plan = G.plan_tensors(parts[0], 0, back.text_rename) + G.plan_tensors(
        parts[1], 1, lambda name: back.rename(name, md), back.copies
    )
    plan += [
        replace(o, hf=n, shape=o.shape if shape is None else shape, derive=fn)
        for o in plan
        for n, shape, fn in back.derived(o.hf)
    ]
    if back.layout is not None:
        cfg = back.layout(cfg)
    return entry, dict(sorted(cfg.items())), gen, parts, plan, processor


# --------------------------------------------------------------------------- LLaVA (Pixtral)


def _pixtral_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # llama.cpp's Pixtral graph: head_dim = width / heads and RoPE base 10000, both
    # hard-coded, as PixtralVisionConfig's defaults; the MLP's act from use_silu/use_gelu
    act = "silu" if md.get(_CLIP + "use_silu") else "gelu"
    v = {"hidden_act": act, "head_dim": vision["hidden_size"] // vision["num_attention_heads"]}
    # every tower layer feeds the projector (the feature layer is the last), no CLS token
    top = {
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "full",
        "projector_hidden_act": "gelu",  # llama.cpp's Pixtral projector MLP
        "multimodal_projector_bias": "mm.1.bias" in shapes,
    }
    if (n := md.get(_CLIP + "vision.spatial_merge_size")) is not None:
        top["spatial_merge_size"] = n
    return v, top


def _pixtral_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    p = vision["patch_size"]
    return {
        "preprocessor_config.json": {
            "image_processor_type": "PixtralImageProcessor",
            "patch_size": {"height": p, "width": p},
            "size": {"longest_edge": vision["image_size"]},
            **_RESCALE,
            **_mean_std(md),
        }
    }


_PIXTRAL_FIELDS: dict[str, str | None] = {
    "vision.block_count": "num_hidden_layers",
    "vision.attention.layer_norm_epsilon": None,  # hard-coded 1e-5 in modeling_pixtral
    "use_silu": None,
    "use_gelu": None,
    "vision.spatial_merge_size": None,  # a top-level field of Mistral3Config
}
_IMG_BREAK = frozenset({"v.token_embd.img_break"})

LLAVA_BACK = VisionBack(
    hf_arch="LlavaForConditionalGeneration",
    model_type="llava",
    projector=LLAVA_VISION,
    projector_types=("pixtral",),
    vision_model_type="pixtral",
    text_model_type=None,
    text_archs=("llama",),
    fields=_PIXTRAL_FIELDS,
    restore=_pixtral_restore,
    preprocessor=_pixtral_pre,
    tokens=_token_ids({"image_token_index": "[IMG]"}),
    copies=_IMG_BREAK,
)

#: the families whose projector converts back, in the order they are tried
VISION_BACK: tuple[VisionBack, ...] = (LLAVA_BACK,)
#: projector types refused by name, with the reason (transformers cannot rebuild their
#: model from the GGUF pair)
NO_WAY_BACK: dict[str, str] = {}


# --------------------------------------------------------------------------- Gemma 3


def _gemma3_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the pooling factor is written only when it is not llama.cpp's default of 4
    factor = md.get(_CLIP + "vision.projector.scale_factor", 4)
    side = vision["image_size"] // vision["patch_size"] // factor
    return {"vision_use_head": False}, {"mm_tokens_per_image": side * side}


def _gemma3_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    px = vision["image_size"]
    side = (
        vision["image_size"]
        // vision["patch_size"]
        // md.get(_CLIP + "vision.projector.scale_factor", 4)
    )
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Gemma3ImageProcessor",
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "resample": 2,
            "rescale_factor": 1 / 255,
            "size": {"height": px, "width": px},
            **_mean_std(md),
        },
        "processor_config.json": {
            "processor_class": "Gemma3Processor",
            "image_seq_length": side * side,
        },
    }


def _gemma3_rename(name: str, md: Mapping[str, Any]) -> str:
    # the Hub's (and transformers') parameter name, which the forward rename undoes
    return name.replace("mm_input_projection.weight", "mm_input_projection_weight")


GEMMA3_BACK = VisionBack(
    hf_arch="Gemma3ForConditionalGeneration",
    model_type="gemma3",
    projector=GEMMA3_VISION,
    projector_types=("gemma3",),
    vision_model_type="siglip_vision_model",
    text_model_type=None,
    text_archs=("gemma3",),
    fields={
        "vision.block_count": "num_hidden_layers",
        "use_gelu": None,  # SigLIP's gelu_pytorch_tanh, the config default
        "vision.projector.scale_factor": None,
    },
    restore=_gemma3_restore,
    preprocessor=_gemma3_pre,
    rename=_gemma3_rename,
    tokens=_token_ids(
        {
            "image_token_index": "<image_soft_token>",
            "boi_token_index": "<start_of_image>",
            "eoi_token_index": "<end_of_image>",
        }
    ),
)

VISION_BACK += (GEMMA3_BACK,)


# --------------------------------------------------------------------------- Mistral 3

MISTRAL3_BACK = VisionBack(
    hf_arch="Mistral3ForConditionalGeneration",
    model_type="mistral3",
    projector=LLAVA_VISION,
    projector_types=("pixtral",),
    vision_model_type="pixtral",
    text_model_type="mistral",
    text_archs=("mistral3",),
    fields=_PIXTRAL_FIELDS,
    restore=_pixtral_restore,
    preprocessor=_pixtral_pre,
    tokens=_token_ids({"image_token_index": "[IMG]"}),
    copies=_IMG_BREAK,
    # Mistral Small 3.1's text (Ministral 3's has the Llama 4 scaling row)
    text_test=lambda md: not is_ministral3_file(md),
)
# Ministral 3: the same tower over a ``ministral3`` text (Ministral3Config: YaRN and the
# Llama 4 attention scaling, which text GGUF -> HF writes as its rope_parameters)
MINISTRAL3_BACK = replace(MISTRAL3_BACK, text_model_type="ministral3", text_test=is_ministral3_file)

VISION_BACK += (MISTRAL3_BACK, MINISTRAL3_BACK)
# Mistral 4: the same tower over a ``mistral4`` text (Mistral4Config, from the text's own
# GGUF -> HF: DeepSeek-V2's MLA with fused experts)
MISTRAL4_BACK = replace(
    MISTRAL3_BACK, text_model_type="mistral4", text_archs=("mistral4",), text_test=lambda md: True
)
VISION_BACK += (MISTRAL4_BACK,)


# --------------------------------------------------------------------------- Qwen2.5-VL


def _qwen25_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    n = md[_CLIP + "vision.n_wa_pattern"]
    depth = vision["depth"]
    v = {
        "out_hidden_size": md[_CLIP + "vision.projection_dim"],
        "fullatt_block_indexes": list(range(n - 1, depth, n)),
        # llama.cpp's qwen2.5vl graph hard-codes these (its window: 112 px unless a
        # clip.vision.window_size row says otherwise): Qwen2.5-VL's defaults
        "window_size": md.get(_CLIP + "vision.window_size", 112),
        "spatial_merge_size": 2,
        # the Conv3d kernel was written as one Conv2d per temporal slice
        "temporal_patch_size": _frames(shapes),
        "hidden_act": "silu",
        "in_channels": 3,
    }
    return v, {}


def _qwen25_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # the MRoPE sections (the text rows keep them only under a derived field)
    sections = [int(s) for s in md.get("qwen2vl.rope.dimension_sections", []) if s]
    rope = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 1000000.0)}
    return {"rope_parameters": {**rope, "mrope_section": sections}}


def _qwen_pre(kind: str, **extra: Any) -> Callable[[dict, Mapping[str, Any]], dict[str, dict]]:
    """A Qwen2-VL-style image processor file of class ``kind``: patch, frames and merge
    from the vision config, mean and std from the rows, ``extra`` settings between."""

    def pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
        return {
            "preprocessor_config.json": {
                "image_processor_type": kind,
                "patch_size": vision["patch_size"],
                "temporal_patch_size": vision["temporal_patch_size"],
                "merge_size": vision["spatial_merge_size"],
                **extra,
                **_mean_std(md),
            }
        }

    return pre


_qwen25_pre = _qwen_pre("Qwen2VLImageProcessor")


QWEN25VL_BACK = VisionBack(
    hf_arch="Qwen2_5_VLForConditionalGeneration",
    model_type="qwen2_5_vl",
    projector=QWEN25VL_VISION,
    projector_types=("qwen2.5vl_merger",),
    vision_model_type="qwen2_5_vl_vision",
    text_model_type="qwen2_5_vl_text",
    text_archs=("qwen2vl",),
    fields={
        "vision.block_count": "depth",
        "vision.attention.head_count": "num_heads",
        "vision.image_size": None,  # not a Qwen2.5-VL vision field (dynamic resolution)
        "vision.attention.layer_norm_epsilon": None,  # the text model's, as written
        "vision.n_wa_pattern": None,
        "use_silu": None,
    },
    restore=_qwen25_restore,
    text_rename=lambda name: name,  # the Hub's Qwen2.5-VL: model.* and visual.*
    required=("patch_size", "hidden_size", "intermediate_size", "num_heads", "depth"),
    preprocessor=_qwen25_pre,
    text=_qwen25_text,
    tokens=_token_ids(
        {
            "image_token_id": "<|image_pad|>",
            "video_token_id": "<|video_pad|>",
            "vision_start_token_id": "<|vision_start|>",
            "vision_end_token_id": "<|vision_end|>",
        }
    ),
)

VISION_BACK += (QWEN25VL_BACK,)


# --------------------------------------------------------------------------- Qwen2-VL


def _qwen2_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the MLP's width is only a shape: mlp_ratio = fc1 rows / embed_dim (numpy order)
    rows = shapes["v.blk.0.ffn_up.weight"][0]
    ratio = rows / vision["embed_dim"]
    v = {
        "mlp_ratio": int(ratio) if ratio == int(ratio) else ratio,
        # mtmd's qwen2vl graph hard-codes the 2 x 2 merge: Qwen2-VL's default
        "spatial_merge_size": 2,
        "temporal_patch_size": _frames(shapes),
        "in_channels": 3,
    }
    return v, {}


QWEN2VL_BACK = VisionBack(
    hf_arch="Qwen2VLForConditionalGeneration",
    model_type="qwen2_vl",
    projector=QWEN2VL_VISION,
    projector_types=("qwen2vl_merger",),
    vision_model_type="qwen2_vl_vision",
    text_model_type="qwen2_vl_text",
    text_archs=("qwen2vl",),
    # the rows already name Qwen2-VL's fields (embed_dim, hidden_size = the merger's
    # output, depth, num_heads)
    fields={
        "vision.image_size": None,
        "vision.attention.layer_norm_epsilon": None,
    },
    restore=_qwen2_restore,
    text_rename=lambda name: name,
    required=("patch_size", "embed_dim", "hidden_size", "num_heads", "depth"),
    preprocessor=_qwen25_pre,
    text=_qwen25_text,
    tokens=QWEN25VL_BACK.tokens,
)

VISION_BACK += (QWEN2VL_BACK,)


# --------------------------------------------------------------------------- Qwen3-VL


def _qwen3_deepstack(md: Mapping[str, Any]) -> list[int]:
    return [i for i, f in enumerate(md.get(_CLIP + "vision.is_deepstack_layers") or []) if f]


def _qwen3_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    v = {
        "out_hidden_size": md[_CLIP + "vision.projection_dim"],
        # the learned position table's rows (numpy order [rows, width])
        "num_position_embeddings": shapes["v.position_embd.weight"][0],
        "deepstack_visual_indexes": _qwen3_deepstack(md),
        "temporal_patch_size": _frames(shapes),
        "in_channels": 3,
        # mtmd's qwen3vl graph: tanh-approximated GELU, as Qwen3-VL's default
        "hidden_act": "gelu_pytorch_tanh",
    }
    return v, {}


def _qwen3_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # llama.cpp's qwen3vl runs its MRoPE sections interleaved (Qwen3-VL's layout)
    arch = md.get("general.architecture")  # qwen3vl, or qwen3vlmoe
    sections = [int(s) for s in md.get(f"{arch}.rope.dimension_sections", []) if s]
    rope = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 5000000.0)}
    return {"rope_parameters": {**rope, "mrope_section": sections, "mrope_interleaved": True}}


def _qwen3_rename(name: str, md: Mapping[str, Any]) -> str:
    # the forward rename numbers a deepstack merger by the tower layer it follows: back
    # to its place in deepstack_merger_list
    pre = "visual.deepstack."
    if name.startswith(pre):
        layer, _, rest = name[len(pre) :].partition(".")
        name = f"visual.deepstack_merger_list.{_qwen3_deepstack(md).index(int(layer))}.{rest}"
    return "model." + name  # the Hub's Qwen3-VL keeps the tower under model.visual.


QWEN3VL_BACK = VisionBack(
    hf_arch="Qwen3VLForConditionalGeneration",
    model_type="qwen3_vl",
    projector=QWEN3VL_VISION,
    projector_types=("qwen3vl_merger",),
    vision_model_type="qwen3_vl_vision",
    text_model_type="qwen3_vl_text",
    text_archs=("qwen3vl",),
    fields={
        "vision.block_count": "depth",
        "vision.attention.head_count": "num_heads",
        "vision.image_size": None,  # from the position table (num_position_embeddings)
        "vision.attention.layer_norm_epsilon": None,  # the text model's
        "vision.is_deepstack_layers": None,
        "use_gelu": None,
    },
    restore=_qwen3_restore,
    required=("patch_size", "hidden_size", "intermediate_size", "num_heads", "depth"),
    preprocessor=_qwen25_pre,
    text=_qwen3_text,
    rename=_qwen3_rename,
    text_rename=_language_model,
    tokens=QWEN25VL_BACK.tokens,
)

VISION_BACK += (QWEN3VL_BACK,)


# --------------------------------------------------------------------------- SmolVLM / Idefics3


def _smolvlm_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the pixel shuffle factor is a top-level field; the tower's act is llama.cpp's GELU
    # (tanh), SmolVLM's default gelu_pytorch_tanh, and its 3 channels the default too
    return {}, {"scale_factor": md[_CLIP + "vision.projector.scale_factor"]}


def _smolvlm_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    tile = vision["image_size"]
    edge = md.get(_CLIP + "vision.preproc_image_size", tile)
    return {
        "preprocessor_config.json": {
            "image_processor_type": "SmolVLMImageProcessor",
            "do_convert_rgb": True,
            # an image resized past one tile is split into tiles of the tower's size
            "do_image_splitting": edge > tile,
            "do_normalize": True,
            "do_pad": True,
            "do_rescale": True,
            "do_resize": True,
            "max_image_size": {"longest_edge": tile},
            "resample": 1,
            "rescale_factor": 1 / 255,
            "size": {"longest_edge": edge},
            **_mean_std(md),
        }
    }


# one projector type for both classes (the same modules and names): written back as
# SmolVLM, whose text config is any text model (Idefics3's is Llama only)
SMOLVLM_BACK = VisionBack(
    hf_arch="SmolVLMForConditionalGeneration",
    model_type="smolvlm",
    projector=SMOLVLM_VISION,
    projector_types=("idefics3",),
    vision_model_type="smolvlm_vision",
    text_model_type=None,
    text_archs=("llama",),
    fields={
        "vision.block_count": "num_hidden_layers",
        "vision.projector.scale_factor": None,
        "use_gelu": None,
    },
    restore=_smolvlm_restore,
    preprocessor=_smolvlm_pre,
    # the Hub's (and transformers') names: model.text_model.*, lm_head at the top
    text_rename=lambda name: name.replace("model.", "model.text_model.", 1),
    # the text config's class as the Hub's SmolVLM configs name it: both converters
    # choose the text model by it
    text=lambda cfg, md: {"architectures": ["VLlama3ForCausalLM"]},
    tokens=_token_ids({"image_token_id": "<image>"}),
)

VISION_BACK += (SMOLVLM_BACK,)


# --------------------------------------------------------------------------- LFM2-VL


def _lfm2vl_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the SigLIP2 position grid's cells are the table's rows (numpy order [rows, width]);
    # no head tensors: the tower ends at its post-LayerNorm
    v = {"num_patches": shapes["v.position_embd.weight"][0], "vision_use_head": False}
    # the projector: its hidden width and layout are the tensors' (numpy [out, in])
    top = {
        "downsample_factor": md[_CLIP + "vision.projector.scale_factor"],
        "projector_hidden_size": shapes["mm.1.weight"][0],
        "projector_bias": "mm.1.bias" in shapes,
        "projector_use_layernorm": "mm.input_norm.weight" in shapes,
        "projector_hidden_act": "gelu",  # llama.cpp's lfm2 projector MLP (use_gelu)
    }
    return v, top


def _lfm2vl_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Lfm2VlImageProcessor",
            "encoder_patch_size": vision["patch_size"],
            "downsample_factor": md[_CLIP + "vision.projector.scale_factor"],
            **_RESCALE,
            **_mean_std(md),
        }
    }


LFM2VL_BACK = VisionBack(
    hf_arch="Lfm2VlForConditionalGeneration",
    model_type="lfm2_vl",
    projector=LFM2VL_VISION,
    projector_types=("lfm2",),
    vision_model_type="siglip2_vision_model",
    text_model_type=None,
    text_archs=("lfm2",),
    fields={
        "vision.image_size": None,  # llama.cpp's constant 256, not a SigLIP2 field
        "vision.block_count": "num_hidden_layers",
        "vision.projector.scale_factor": None,  # a top-level field (downsample_factor)
        "use_gelu": None,  # the tower's gelu_pytorch_tanh, the config default
    },
    required=_REQUIRED[1:],  # no image size: its row is a constant
    restore=_lfm2vl_restore,
    preprocessor=_lfm2vl_pre,
    # the Hub's names: model.vision_tower.vision_model.*, model.multi_modal_projector.*
    rename=_under_model,
    text_rename=_language_model,
    # the text config's class as the Hub's LFM2-VL configs name it (the reference's
    # converter chooses the text model by it)
    text=lambda cfg, md: {"architectures": ["Lfm2ForCausalLM"]},
    tokens=_token_ids({"image_token_id": "<image>"}),
)

VISION_BACK += (LFM2VL_BACK,)


# --------------------------------------------------------------------------- Llama 4


def _llama4_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # numpy order [out, in]: the adapter MLP's widths and the projection's input width
    # are only shapes; the shuffle ratio is the row's factor inverted (int(1 / ratio))
    v = {
        "pixel_shuffle_ratio": 1 / md[_CLIP + "vision.projector.scale_factor"],
        "projector_input_dim": shapes["mm.model.mlp.1.weight"][0],
        "projector_output_dim": shapes["mm.model.mlp.2.weight"][0],
        "vision_output_dim": shapes["mm.model.fc.weight"][1],
        "multi_modal_projector_bias": "mm.model.fc.bias" in shapes,
        # the reference refuses any other act (use_gelu); llama.cpp's graph hard-codes
        # the RoPE base 10000, feature layer -1 and the CLS-less "default" selection,
        # Llama4VisionConfig's defaults
        "hidden_act": "gelu",
    }
    return v, {}


def _llama4_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    px = vision["image_size"]
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Llama4ImageProcessorFast",  # the Hub's
            "size": {"height": px, "width": px},
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "rescale_factor": 1 / 255,
            **_mean_std(md),
        }
    }


def _llama4_rename(name: str, md: Mapping[str, Any]) -> str:
    # the position table is a bare parameter, read forward as a .weight
    return name.removesuffix(".weight") if "positional_embedding_vlm" in name else name


LLAMA4_BACK = VisionBack(
    hf_arch="Llama4ForConditionalGeneration",
    model_type="llama4",
    projector=LLAMA4_VISION,
    projector_types=("llama4",),
    vision_model_type="llama4_vision_model",
    text_model_type=None,
    text_archs=("llama4",),
    fields={
        "vision.block_count": "num_hidden_layers",
        "vision.projector.scale_factor": None,  # pixel_shuffle_ratio, inverted
        "use_gelu": None,
    },
    restore=_llama4_restore,
    preprocessor=_llama4_pre,
    rename=_llama4_rename,
    tokens=_token_ids(
        {
            "image_token_index": "<|image|>",
            "boi_token_index": "<|image_start|>",
            "eoi_token_index": "<|image_end|>",
        }
    ),
)

VISION_BACK += (LLAMA4_BACK,)


# --------------------------------------------------------------------------- Gemma 4


def _gemma4_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    head_dim = shapes["v.blk.0.attn_q_norm.weight"][0]  # the per-head Q norm's width
    v = {
        "head_dim": head_dim,
        "num_key_value_heads": shapes["v.blk.0.attn_k.weight"][0] // head_dim,
        # the 2-D position table [2, size, width] (numpy order)
        "position_embedding_size": shapes["v.position_embd.weight"][1],
        # mtmd's gemma4v pools by 3 unless the scale factor row says otherwise
        "pooling_kernel_size": md.get(_CLIP + "vision.projector.scale_factor", 3),
        # Gemma4ClippableLinear's bounds are tensors: present or not
        "use_clipped_linears": "v.blk.0.attn_q.input_max" in shapes,
    }
    return v, {}


def _gemma4_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Gemma4ImageProcessor",
            "patch_size": vision["patch_size"],
            "pooling_kernel_size": vision["pooling_kernel_size"],
            "max_soft_tokens": 280,  # not kept by GGUF: the processor's default
            **_RESCALE,
            "resample": 3,  # bicubic, as mtmd's gemma4v resizes
            **_mean_std(md),
        },
        **_gemma4_audio_pre(md),
    }


def _gemma4_audio_pre(md: Mapping[str, Any]) -> dict[str, dict]:
    """With the conformer: its feature extractor, nested in processor_config.json (the
    image processor has preprocessor_config.json); mtmd's gemma4a mel front end is
    Gemma4AudioFeatureExtractor's defaults (16 kHz, 20 ms frames, 10 ms hop, 512-point
    FFT, mel floor 1e-3), with the projector's mel bins."""
    if not md.get(_CLIP + "has_audio_encoder"):
        return {}
    fe = {
        "feature_extractor_type": "Gemma4AudioFeatureExtractor",
        "feature_size": md.get(_CLIP + "audio.num_mel_bins", 128),
        "sampling_rate": 16000,
        "frame_length": 320,
        "hop_length": 160,
        "fft_length": 512,
        "min_frequency": 0.0,
        "max_frequency": 8000.0,
        "mel_floor": 0.001,
        "return_attention_mask": True,
    }
    return {
        "processor_config.json": {"processor_class": "Gemma4Processor", "feature_extractor": fe}
    }


def _gemma4_audio_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    # numpy order [out, in, ...]: the sub-sampling convs' channels, the depthwise conv's
    # kernel [C, K] and the output projection's width are only shapes; the clip bounds
    # are tensors, present or not.  The attention chunking (12 frames, 12 past = 13 left,
    # 0 right), logit cap 50, residual weight 0.5 and the norm epsilon 1e-6 (its row) are
    # mtmd's gemma4a constants and Gemma4AudioConfig's defaults, not written
    a = {
        "subsampling_conv_channels": [shapes[f"a.conv1d.{i}.weight"][0] for i in (0, 1)],
        "conv_kernel_size": shapes["a.blk.0.conv_dw.weight"][1],
        "output_proj_dims": shapes["a.pre_encode.out.weight"][0],
        "use_clipped_linears": "a.blk.0.attn_q.input_max" in shapes,
    }
    return a, {}


GEMMA4_BACK = VisionBack(
    hf_arch="Gemma4ForConditionalGeneration",
    model_type="gemma4",
    projector=GEMMA4_VISION,
    projector_types=("gemma4v",),
    vision_model_type="gemma4_vision",
    text_model_type="gemma4_text",
    text_archs=("gemma4",),
    fields={
        "vision.block_count": "num_hidden_layers",
        "vision.image_size": None,  # the reference's placeholder 224, no Gemma 4 field
        "vision.attention.layer_norm_epsilon": "rms_norm_eps",
    },
    restore=_gemma4_restore,
    required=_REQUIRED[1:],
    preprocessor=_gemma4_pre,
    # the Hub's Gemma 4 (transformers 5's names): model.language_model.*
    text_rename=_language_model,
    tokens=_token_ids(
        {
            "image_token_id": "<|image|>",
            "boi_token_id": "<|image>",  # mtmd's gemma4v image brackets
            "eoi_token_id": "<image|>",
            "audio_token_id": "<|audio|>",
            "boa_token_id": "<|audio>",  # mtmd's gemma4a audio brackets
            "eoa_token_index": "<audio|>",
        }
    ),
    # the conformer (gemma4a), when the projector has one
    audio_model_type="gemma4_audio",
    audio_fields={
        "audio.feed_forward_length": None,  # 4 x the width, no Gemma 4 field
        "audio.num_mel_bins": None,  # the feature extractor's 128, no model field
        "audio.attention.layer_norm_epsilon": None,
    },
    audio_restore=_gemma4_audio_restore,
    audio_required=("hidden_size", "num_hidden_layers", "num_attention_heads"),
)

VISION_BACK += (GEMMA4_BACK,)


# --------------------------------------------------------------------------- Qwen3-VL-MoE

# Qwen3-VL's tower and projector over a Qwen3-VL-MoE text model: the text registry's
# inverse plan writes the fused experts in the Hub's layout (gate_up_proj [n_expert,
# n_embd, 2 n_ff], down_proj [n_expert, n_ff, n_embd]), which transformers 5 transposes
# into its own on load, as it does the Hub's checkpoints
QWEN3VLMOE_BACK = replace(
    QWEN3VL_BACK,
    hf_arch="Qwen3VLMoeForConditionalGeneration",
    model_type="qwen3_vl_moe",
    vision_model_type="qwen3_vl_moe_vision",
    text_model_type="qwen3_vl_moe_text",
    text_archs=("qwen3vlmoe",),
)

VISION_BACK += (QWEN3VLMOE_BACK,)


# --------------------------------------------------------------------------- Qwen3.5


def _qwen35_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # Qwen3-VL's values, without deepstack (no Qwen3.5 vision config field: its tower
    # has no deepstack mergers, and the reference writes every flag false)
    v, top = _qwen3_restore(md, vision, shapes)
    v.pop("deepstack_visual_indexes")
    return v, top


def _qwen35_text_rename(name: str) -> str:
    # the Hub's Qwen3.5: model.language_model.*; the MTP block (mtp.*) and the head stay
    return "model.language_model." + name[len("model.") :] if name.startswith("model.") else name


# Qwen3-VL's tower without deepstack over a Qwen3.5 text model (gated DeltaNet layers,
# the MTP block); the text config (MRoPE sections, interleaved) is text GGUF -> HF's
QWEN35VL_BACK = replace(
    QWEN3VL_BACK,
    hf_arch="Qwen3_5ForConditionalGeneration",
    model_type="qwen3_5",
    vision_model_type="qwen3_5_vision",
    text_model_type="qwen3_5_text",
    text_archs=("qwen35",),
    restore=_qwen35_restore,
    text=lambda cfg, md: {},
    text_rename=_qwen35_text_rename,
)
QWEN35VLMOE_BACK = replace(
    QWEN35VL_BACK,
    hf_arch="Qwen3_5MoeForConditionalGeneration",
    model_type="qwen3_5_moe",
    vision_model_type="qwen3_5_moe_vision",
    text_model_type="qwen3_5_moe_text",
    text_archs=("qwen35moe",),
)

VISION_BACK += (QWEN35VL_BACK, QWEN35VLMOE_BACK)


# --------------------------------------------------------------------------- InternVL

# OpenGVLab's names (the forward entry's) -> the Hub's -hf checkpoints' (transformers'
# InternVLForConditionalGeneration), in order: the first match of a prefix or part wins
_INTERNVL_HF = (
    ("vision_model.embeddings.class_embedding", "vision_tower.embeddings.cls_token"),
    ("vision_model.embeddings.position_embedding.weight",
     "vision_tower.embeddings.position_embeddings"),
    ("vision_model.embeddings.patch_embedding.", "vision_tower.embeddings.patch_embeddings.projection."),
    ("vision_model.encoder.layers.", "vision_tower.encoder.layer."),
    (".ls1.weight", ".lambda_1"),
    (".ls2.weight", ".lambda_2"),
    (".attn.proj.", ".attention.projection_layer."),
    (".attn.", ".attention."),
    (".norm1.", ".layernorm_before."),
    (".norm2.", ".layernorm_after."),
    ("mlp1.0.", "multi_modal_projector.layer_norm."),
    ("mlp1.1.", "multi_modal_projector.linear_1."),
    ("mlp1.3.", "multi_modal_projector.linear_2."),
)  # fmt: skip


def _internvl_hf_name(name: str, md: Mapping[str, Any]) -> str:
    for old, new in _INTERNVL_HF:
        name = name.replace(old, new)
    return name


def _internvl_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    side, patch = vision["image_size"], vision["patch_size"]
    factor = md[_CLIP + "vision.projector.scale_factor"]
    width, depth = vision["hidden_size"], vision["num_hidden_layers"]
    v = {
        # the -hf configs' spelling: [height, width]
        "image_size": [side, side],
        "patch_size": [patch, patch],
        "hidden_act": "silu" if md.get(_CLIP + "use_silu") else "gelu",
        "attention_bias": "v.blk.0.attn_q.bias" in shapes,
        "use_qk_norm": "v.blk.0.attn_q_norm.weight" in shapes,
        # mtmd's internvl graph: RMS norms for the 6B ViT (width 3200, 45 layers) only
        "norm_type": "rms_norm" if (width, depth) == (3200, 45) else "layer_norm",
    }
    n = side // patch // factor
    top = {
        "downsample_ratio": 1 / factor,
        # mtmd's graph: the last layer's patches (the CLS token dropped), GELU projector
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "default",
        "projector_hidden_act": "gelu",
        "image_seq_length": n * n,
    }
    return v, top


def _internvl_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    side = vision["image_size"][0]
    n = side // vision["patch_size"][0] // md[_CLIP + "vision.projector.scale_factor"]
    return {
        "preprocessor_config.json": {
            "image_processor_type": "GotOcr2ImageProcessorFast",  # the -hf checkpoints'
            "crop_to_patches": True,  # mtmd tiles the image between the tile limits
            # no row when the checkpoint had none: mtmd's (and the processor's) 1 and 12
            "min_patches": md.get(_CLIP + "vision.preproc_min_tiles", 1),
            "max_patches": md.get(_CLIP + "vision.preproc_max_tiles", 12),
            "size": {"height": side, "width": side},
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "resample": 3,
            "rescale_factor": 1 / 255,
            **_mean_std(md),
        },
        "processor_config.json": {
            "processor_class": "InternVLProcessor",
            "image_seq_length": n * n,
        },
    }


# the -hf layout keeps q, k and v apart: InternVL's entry without its fused-QKV split, the
# parts named as the split's (attn.q_proj, ...; renamed with the rest)
_INTERNVL_PARTS = replace(
    INTERNVL_VISION,
    entry=replace(
        INTERNVL_VISION.entry,
        splits=[],
        names=[
            *INTERNVL_VISION.entry.names,
            *(
                NameRule(
                    f"vision_model.encoder.layers.{{bid}}.attn.{x}_proj{s}",
                    f"v.blk.{{bid}}.attn_{x}{s}",
                )
                for x in "qkv"
                for s in (".weight", ".bias")
            ),
        ],
    ),
)

# transformers' own InternVL (the -hf checkpoints): the text model and the projector of
# OpenGVLab's layout, which both converters read forward (transformers loads it only
# with the checkpoint's remote code), are written in the layout transformers 5 loads
INTERNVL_BACK = VisionBack(
    hf_arch="InternVLForConditionalGeneration",
    model_type="internvl",
    projector=_INTERNVL_PARTS,
    projector_types=("internvl",),
    vision_model_type="internvl_vision",
    text_model_type=None,
    text_archs=("qwen2", "qwen3"),
    fields={
        "vision.image_size": "image_size",  # both from the first of a pair
        "vision.patch_size": "patch_size",
        "vision.block_count": "num_hidden_layers",
        "use_gelu": None,
        "use_silu": None,
        "vision.projector.scale_factor": None,  # downsample_ratio, inverted
        "vision.preproc_min_tiles": None,  # the image processor's
        "vision.preproc_max_tiles": None,
    },
    restore=_internvl_restore,
    preprocessor=_internvl_pre,
    rename=_internvl_hf_name,
    tokens=_token_ids({"image_token_id": "<IMG_CONTEXT>"}),
)

VISION_BACK += (INTERNVL_BACK,)


# --------------------------------------------------------------------------- LightOnOCR

# LLaVA's names (the forward entry's) -> LightOnOCR's (the Hub's, and transformers 5's)
_LIGHTON_HF = (
    ("vision_tower.", "model.vision_encoder."),
    ("multi_modal_projector.", "model.vision_projection."),
)


def _lighton_hf_name(name: str, md: Mapping[str, Any]) -> str:
    for old, new in _LIGHTON_HF:
        name = name.replace(old, new)
    return name


def _lighton_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the Pixtral tower's values; the merger's factor is the only top-level field
    v, _ = _pixtral_restore(md, vision, shapes)
    return v, {"spatial_merge_size": md.get(_CLIP + "vision.spatial_merge_size", 2)}


def _lighton_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    files = _pixtral_pre(vision, md)
    files["preprocessor_config.json"]["image_processor_type"] = "PixtralImageProcessorFast"
    files["preprocessor_config.json"]["patch_size"] = vision["patch_size"]
    return files


LIGHTONOCR_BACK = VisionBack(
    # the Hub's spelling, which the reference registers (transformers reads model_type)
    hf_arch="LightOnOCRForConditionalGeneration",
    model_type="lighton_ocr",
    projector=LIGHTONOCR_VISION,
    projector_types=("lightonocr",),
    vision_model_type="pixtral",
    text_model_type=None,
    text_archs=("qwen3",),
    fields=_PIXTRAL_FIELDS,
    restore=_lighton_restore,
    preprocessor=_lighton_pre,
    rename=_lighton_hf_name,
    text_rename=_language_model,
    # the text class as the Hub's configs name it: the reference chooses the text model by it
    text=lambda cfg, md: {"architectures": ["Qwen3ForCausalLM"]},
    tokens=_token_ids({"image_token_id": "<|image_pad|>"}),
)

VISION_BACK += (LIGHTONOCR_BACK,)


# --------------------------------------------------------------------------- PaddleOCR-VL


def _paddle_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    v = {
        # the class the reference picks the projector by (the Hub's vision config names it)
        "architectures": ["PaddleOCRVisionModel"],
        # mtmd's paddleocr graph: tanh GELU, 2 x 2 merge, RGB (PaddleOCR-VL's defaults)
        "hidden_act": "gelu_pytorch_tanh",
        "spatial_merge_size": 2,
        "num_channels": 3,
    }
    return v, {}


def _paddle_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # the M-RoPE sections (the text rows keep them only under a derived field)
    sections = [int(s) for s in md.get("paddleocr.rope.dimension_sections", []) if s]
    rope = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 500000.0)}
    return {"rope_parameters": {**rope, "mrope_section": sections}}


def _paddle_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "PaddleOCRVLImageProcessor",
            "min_pixels": md[_CLIP + "vision.image_min_pixels"],
            "max_pixels": md[_CLIP + "vision.image_max_pixels"],
            "patch_size": vision["patch_size"],
            "merge_size": vision["spatial_merge_size"],
            "temporal_patch_size": 1,
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "resample": 3,
            "rescale_factor": 1 / 255,
            **_mean_std(md),
        }
    }


PADDLEOCR_BACK = VisionBack(
    hf_arch="PaddleOCRVLForConditionalGeneration",
    model_type="paddleocr_vl",
    projector=PADDLEOCR_VISION,
    projector_types=("paddleocr",),
    vision_model_type="paddleocr_vl_vision",
    text_model_type="paddleocr_vl_text",
    text_archs=("paddleocr",),
    fields={
        "vision.image_size": "image_size",  # the square root of max_pixels, as written
        "vision.block_count": "num_hidden_layers",
        "vision.image_max_pixels": None,  # the image processor's
        "vision.image_min_pixels": None,
        "use_gelu": None,
        # the reference's 1e-6 (it reads a field the vision config lacks): what mtmd runs
        "vision.attention.layer_norm_epsilon": "layer_norm_eps",
    },
    restore=_paddle_restore,
    preprocessor=_paddle_pre,
    # the Hub's names (model.*, lm_head, visual.*, mlp_AR.*), which transformers 5 loads
    text_rename=lambda name: name,
    text=_paddle_text,
    tokens=_token_ids(
        {
            "image_token_id": "<|IMAGE_PLACEHOLDER|>",
            "vision_start_token_id": "<|IMAGE_START|>",
            "vision_end_token_id": "<|IMAGE_END|>",
            "video_token_id": "<|VIDEO_PLACEHOLDER|>",
        }
    ),
)

VISION_BACK += (PADDLEOCR_BACK,)


# --------------------------------------------------------------------------- Janus-Pro

# JanusForConditionalGeneration always builds its image-generation half (the VQ-VAE, the
# generation embeddings, aligner and head), which neither GGUF keeps: the reference
# (and ours) writes only the understanding tower, its aligner and the Llama text
NO_WAY_BACK["janus_pro"] = (
    "Janus-Pro's image-generation half (VQ-VAE, generation embeddings, aligner and head) "
    "is in neither GGUF, and JanusForConditionalGeneration cannot be built without it; "
    "the text GGUF converts alone (LlamaForCausalLM)"
)


# --------------------------------------------------------------------------- MiniCPM-V 4.6

_MINICPMV46_MODES = {4: "16x", 2: "4x"}


def _minicpmv46_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the image size row is the processor's slice size; the vision config's is the
    # position-bucket grid, the table's rows (numpy order [rows, width]) = side x side
    side = round(shapes["v.position_embd.weight"][0] ** 0.5)
    layer = int(md[_CLIP + "vision.wa_layer_indexes"][0])
    mode = _MINICPMV46_MODES[md[_CLIP + "vision.projector.scale_factor"]]
    # transformers' tower always builds the window merger, which a 4x projector lacks:
    # reading it names the missing tensor (MissingGGUFMetadata)
    shapes["v.vit_merger.attn_q.weight"]
    v = {"image_size": side * vision["patch_size"], "insert_layer_id": layer}
    # mtmd's minicpmv4_6 graph: tanh-approximated GELU (use_gelu), MiniCPM-V's default
    return v, {"insert_layer_id": layer, "downsample_mode": mode}


def _minicpmv46_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "MiniCPMV4_6ImageProcessorPil",
            "scale_resolution": md[_CLIP + "vision.image_size"],
            "patch_size": vision["patch_size"],
            "downsample_mode": _MINICPMV46_MODES[md[_CLIP + "vision.projector.scale_factor"]],
            **_mean_std(md),
        }
    }


# the SigLIP tower with its window merger and the final merger over a Qwen3.5 text model
# (the text GGUF counts the MTP block without its tensors: text GGUF -> HF's trunk)
MINICPMV46_BACK = VisionBack(
    hf_arch="MiniCPMV4_6ForConditionalGeneration",
    model_type="minicpmv4_6",
    projector=MINICPMV46_VISION,
    projector_types=("minicpmv4_6",),
    vision_model_type="minicpmv4_6_vision",
    text_model_type="qwen3_5_text",
    text_archs=("qwen35",),
    fields={
        "vision.image_size": None,  # the slice size (scale_resolution), restored apart
        "vision.block_count": "num_hidden_layers",
        "vision.projector.scale_factor": None,  # downsample_mode, a top-level field
    },
    restore=_minicpmv46_restore,
    required=_REQUIRED[1:],
    preprocessor=_minicpmv46_pre,
    # the names transformers 5 saves (the forward direction reads them as they are)
    text_rename=_language_model,
)

VISION_BACK += (MINICPMV46_BACK,)


# --------------------------------------------------------------------------- EXAONE 4.5


def _exaone4_5_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # Qwen2.5-VL's tower with grouped KV heads (the fused QKV kept whole); no period row:
    # no window attention (the reference writes none for an empty list)
    n = md.get(_CLIP + "vision.n_wa_pattern")
    full = list(range(n - 1, vision["depth"], n)) if n else []
    v = {
        "out_hidden_size": md[_CLIP + "vision.projection_dim"],
        "fullatt_block_indexes": full,
        # mtmd's exaone4_5 graph hard-codes the 2 x 2 merge: EXAONE 4.5's default
        "spatial_merge_size": 2,
        "temporal_patch_size": _frames(shapes),
        "hidden_act": "silu",  # use_silu, the reference's constant
        "in_channels": 3,
    }
    return v, {}


def _exaone4_5_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    pre = _qwen25_pre(vision, md)
    pre["preprocessor_config.json"].update(
        min_pixels=md[_CLIP + "vision.image_min_pixels"],
        max_pixels=md[_CLIP + "vision.image_max_pixels"],
    )
    return pre


EXAONE4_5_BACK = VisionBack(
    hf_arch="Exaone4_5_ForConditionalGeneration",
    model_type="exaone4_5",
    projector=EXAONE4_5_VISION,
    projector_types=("exaone4_5",),
    vision_model_type="exaone4_5_vision",
    text_model_type="exaone4",
    text_archs=("exaone4",),
    fields={
        "vision.block_count": "depth",
        "vision.attention.head_count": "num_heads",
        "vision.image_size": None,  # llama.cpp's 560, not an EXAONE 4.5 vision field
        # the tower's RMS norms hard-code 1e-6 in transformers (no config field)
        "vision.attention.layer_norm_epsilon": None,
        "vision.n_wa_pattern": None,
        "vision.image_min_pixels": None,  # the image processor's
        "vision.image_max_pixels": None,
    },
    restore=_exaone4_5_restore,
    required=("patch_size", "hidden_size", "intermediate_size", "num_heads", "depth"),
    preprocessor=_exaone4_5_pre,
    # the names transformers 5 saves: model.visual.*, model.language_model.*, lm_head
    rename=_under_model,
    text_rename=_language_model,
    tokens=_token_ids({"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>"}),
)

VISION_BACK += (EXAONE4_5_BACK,)


# --------------------------------------------------------------------------- Kimi-K2.5


def _kimik25_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the position table's sizes: transformers' fields, beside the Hub's remote-code
    # spelling (init_pos_emb_*) the rows were read from and both converters read
    pos = {f"pos_emb_{k}": md[f"vision.pos_emb_{k}"] for k in ("height", "width", "time")}
    n = md[_CLIP + "vision.projector.scale_factor"]
    v = {**pos, "merge_kernel_size": [n, n]}
    # the projector's pre-norm is over one patch of the tower (numpy order [width])
    top = {
        "projection_hidden_size": shapes["mm.input_norm.weight"][0],
        "projection_layer_norm_eps": _f(md[_CLIP + "vision.attention.layer_norm_epsilon"]),
    }
    return v, top


def _kimik25_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    p = vision["patch_size"]
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Kimi_K25ImageProcessor",
            "patch_size": p,
            "merge_size": md[_CLIP + "vision.projector.scale_factor"],
            # the row is the patch limit in pixels (the minimum is the reference's 8)
            "media_proc_cfg": {"in_patch_limit": md[_CLIP + "vision.image_max_pixels"] // p**2},
            **_mean_std(md),
        }
    }


# MoonViT3d and Kimi's patch merger over a DeepSeek-V3 text model, in the Hub's layout
# (the one the forward direction reads; transformers 5 loads it too): language_model.*,
# vision_tower.*, mm_projector.*
KIMIK25_BACK = VisionBack(
    hf_arch="KimiK25ForConditionalGeneration",  # the Hub's (and the reference's) spelling
    model_type="kimi_k25",
    projector=KIMIK25_VISION,
    projector_types=("kimik25",),
    vision_model_type="kimi_k25_vision",
    text_model_type=None,
    text_archs=("deepseek2",),
    fields={
        "vision.image_size": None,  # the table's height in pixels (pos_emb_height)
        "vision.block_count": "num_hidden_layers",
        "use_gelu": None,  # the projector's GELU, hard-coded in transformers
        "vision.attention.layer_norm_epsilon": None,  # a top-level field
        "vision.projector.scale_factor": None,  # merge_kernel_size, both sides
        "vision.image_min_pixels": None,  # the reference's constant 8 patches
        "vision.image_max_pixels": None,  # the image processor's in_patch_limit
    },
    restore=_kimik25_restore,
    required=_REQUIRED[1:],
    preprocessor=_kimik25_pre,
    tokens=_token_ids(
        {
            "image_token_id": "<|media_pad|>",
            "vision_start_token_id": "<|media_begin|>",
            "vision_end_token_id": "<|media_end|>",
        }
    ),
)

VISION_BACK += (KIMIK25_BACK,)
# --------------------------------------------------------------------------- GLM-4V


def _glm4v_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    v = {
        "out_hidden_size": md[_CLIP + "vision.projection_dim"],
        # mtmd's glm4v graph hard-codes the 2 x 2 downsample (GLM-4V's default) and three
        # channels; the Conv3d kernel was written as one Conv2d per temporal slice
        "spatial_merge_size": 2,
        "temporal_patch_size": _frames(shapes),
        "in_channels": 3,
        # GLM-OCR's tower has biases (one flag for attention and MLP)
        "attention_bias": "v.blk.0.attn_qkv.bias" in shapes,
    }
    # the rows say silu or gelu (neither for another act: the config default, silu)
    if md.get(_CLIP + "use_silu"):
        v["hidden_act"] = "silu"
    elif md.get(_CLIP + "use_gelu"):
        v["hidden_act"] = "gelu"
    return v, {}


def _glm4v_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # the M-RoPE sections (kept only under a derived row) and the rotated fraction, as
    # transformers 5's GLM-4V text config spells them; the Q/K reorder's inverse reads them
    arch = md.get("general.architecture")  # glm4, or glm4moe
    sections = [int(s) for s in md.get(f"{arch}.rope.dimension_sections", []) if s]
    rope = {
        "rope_type": "default",
        "rope_theta": cfg.pop("rope_theta", 10000.0),
        "mrope_section": sections,
        "partial_rotary_factor": cfg.pop("partial_rotary_factor", 0.5),
    }
    return {"rope_parameters": rope}


# the pixel bounds are not kept (no glm4v row): the processor's defaults
_glm4v_pre = _qwen_pre("Glm4vImageProcessor")


def _has_mtp(md: Mapping[str, Any]) -> bool:
    return f"{md.get('general.architecture')}.nextn_predict_layers" in md


GLM4V_BACK = VisionBack(
    hf_arch="Glm4vForConditionalGeneration",
    model_type="glm4v",
    projector=GLM4V_VISION,
    projector_types=("glm4v",),
    vision_model_type="glm4v_vision",
    text_model_type="glm4v_text",
    text_archs=("glm4",),
    text_test=lambda md: not _has_mtp(md),
    fields={
        "vision.block_count": "depth",
        "vision.attention.head_count": "num_heads",
        "use_silu": None,
        "use_gelu": None,
    },
    required=(*_REQUIRED[:4], "num_heads", "depth"),
    restore=_glm4v_restore,
    preprocessor=_glm4v_pre,
    text=_glm4v_text,
    # the Hub's GLM-4V (transformers 5's names): model.visual.*, model.language_model.*
    rename=_under_model,
    text_rename=_language_model,
    tokens=_token_ids(
        {
            "image_token_id": "<|image|>",
            "video_token_id": "<|video|>",
            "image_start_token_id": "<|begin_of_image|>",
            "image_end_token_id": "<|end_of_image|>",
            "video_start_token_id": "<|begin_of_video|>",
            "video_end_token_id": "<|end_of_video|>",
        }
    ),
)
# GLM-4.5V: the same tower over a GLM-4.5 MoE text model (glm4moe with sections)
GLM4VMOE_BACK = replace(
    GLM4V_BACK,
    hf_arch="Glm4vMoeForConditionalGeneration",
    model_type="glm4v_moe",
    vision_model_type="glm4v_moe_vision",
    text_model_type="glm4v_moe_text",
    text_archs=("glm4moe",),
    text_test=lambda md: True,
)
# GLM-OCR: the tower with biases and Q/K norms over GLM-4V's text with its MTP block
# (written back as the Hub's checkpoint carries it: transformers does not build it)
GLMOCR_BACK = replace(
    GLM4V_BACK,
    hf_arch="GlmOcrForConditionalGeneration",
    model_type="glm_ocr",
    vision_model_type="glm_ocr_vision",
    text_model_type="glm_ocr_text",
    text_test=_has_mtp,
)

VISION_BACK += (GLM4V_BACK, GLM4VMOE_BACK, GLMOCR_BACK)


# --------------------------------------------------------------------------- Granite 4 Vision


def _g4v_blocks(md: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """Per projector block: ``(kind, index within the kind, vision layer)``.  The vision
    layer is written back counted from the end (``feature_layer - block_count``): mtmd
    reads a block's layer ``f`` as the output of tower layer ``f`` counted from 0, which
    is transformers' ``hidden_states[f - n]`` (and HF -> GGUF gives ``f`` again).  The
    layerwise projectors are numbered in the order of the sorted map, as the reference
    reads it (the blocks are in text-layer order: ``(layer, block)`` sorts the same)."""
    n = md[_CLIP + "vision.block_count"]
    f = list(md[_CLIP + "vision.feature_layer"])
    s = list(md[_CLIP + "vision.projector.spatial_offsets"])
    deep = sorted((f[b], b) for b in range(len(f)) if s[b] < 0)
    index = {b: i for i, (_, b) in enumerate(deep)}
    return [
        ("layerwise", index[b], f[b] - n) if s[b] < 0 else ("spatial", s[b], f[b] - n)
        for b in range(len(f))
    ]


def _g4v_rename(name: str, md: Mapping[str, Any]) -> str:
    # the forward direction numbers each projector by its block (text-layer order)
    if name.startswith("proj."):
        b, _, rest = name[len("proj.") :].partition(".")
        kind, i, _ = _g4v_blocks(md)[int(b)]
        return f"model.{kind}_projectors.{i}.{rest}"
    return "model." + name  # the Hub's model.vision_tower.vision_model.*, model.image_newline


def _g4v_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    query, window = (md[_CLIP + f"vision.projector.{k}_side"] for k in ("query", "window"))
    pts = list(md[_CLIP + "vision.image_grid_pinpoints"])  # w, h pairs
    spatial = [v for kind, _, v in _g4v_blocks(md) if kind == "spatial"]
    top = {
        "downsample_rate": f"{query}/{window}",
        "image_grid_pinpoints": [[pts[i + 1], pts[i]] for i in range(0, len(pts), 2)],
        # SigLIP has no class token: every patch feeds the projectors, as in mtmd
        "vision_feature_select_strategy": "full",
        # one Q-Former layer per projector (the only one the rules name), cross-attending;
        # its width and heads (width / 64, mtmd's) follow the tower's in the config class,
        # its epsilon 1e-12 is mtmd's and Blip2QFormerConfig's default
        "qformer_config": {
            "model_type": "blip_2_qformer",
            "num_hidden_layers": 1,
            "cross_attention_frequency": 1,
            "intermediate_size": shapes["v.proj_blk.0.ffn_up.weight"][0],
            "use_qformer_text_input": False,
        },
    }
    if spatial:
        top["spatial_vision_layer"] = spatial[0]
    # the SigLIP pooling head is not in GGUF (the reference drops it): not built
    return {"vision_use_head": False}, top


def _g4v_joint(md: Mapping[str, Any], text_md: Mapping[str, Any]) -> dict:
    # each block's text layer: where the text file's deepstack_mapping lists it; block 0
    # is llama.cpp's embedding stream (text layer 0), never listed
    mapping = list(text_md[f"{text_md.get('general.architecture')}.deepstack_mapping"])
    blocks = _g4v_blocks(md)
    layer = [0 if b == 0 else mapping.index(b) for b in range(len(blocks))]
    deep = sorted((i, [v, layer[b]]) for b, (k, i, v) in enumerate(blocks) if k == "layerwise")
    spatial = sorted((i, layer[b]) for b, (k, i, _) in enumerate(blocks) if k == "spatial")
    return {
        "deepstack_layer_map": [pair for _, pair in deep],
        "spatial_target_layers": [t for _, t in spatial],
    }


def _g4v_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    px = md.get(_CLIP + "vision.preproc_image_size", vision["image_size"])
    pts = list(md[_CLIP + "vision.image_grid_pinpoints"])
    return {
        "preprocessor_config.json": {
            "image_processor_type": "LlavaNextImageProcessor",  # transformers' for the class
            "image_grid_pinpoints": [[pts[i + 1], pts[i]] for i in range(0, len(pts), 2)],
            "size": {"shortest_edge": px},
            "crop_size": {"height": px, "width": px},
            "resample": 3,  # bicubic, as mtmd resizes
            **_RESCALE,
            **_mean_std(md),
        }
    }


GRANITE4_VISION_BACK = VisionBack(
    hf_arch="Granite4VisionForConditionalGeneration",
    model_type="granite4_vision",
    projector=GRANITE4_VISION,
    projector_types=("granite4_vision",),
    vision_model_type="siglip_vision_model",
    text_model_type="granite4_vision_text",
    text_archs=("granite",),
    fields={
        "vision.block_count": "num_hidden_layers",
        "vision.preproc_image_size": None,  # the processor's (the tower's image size)
        "vision.projector.query_side": None,
        "vision.projector.window_side": None,
        "vision.feature_layer": None,
        "vision.projector.spatial_offsets": None,
        "vision.image_grid_pinpoints": None,
    },
    restore=_g4v_restore,
    preprocessor=_g4v_pre,
    rename=_g4v_rename,
    text_rename=_language_model,
    # the text config's class as the Hub's configs name it: both converters choose the
    # text model by it
    text=lambda cfg, md: {"architectures": ["GraniteForCausalLM"]},
    joint=_g4v_joint,
    tokens=_token_ids({"image_token_index": "<image>"}),
)

VISION_BACK += (GRANITE4_VISION_BACK,)


# --------------------------------------------------------------------------- HunyuanVL


def _hunyuanvl_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the KV heads are only a shape (numpy [out, in]): attn_k rows / head size
    head = vision["hidden_size"] // vision["num_attention_heads"]
    return {"num_key_value_heads": shapes["v.blk.0.attn_k.weight"][0] // head}, {}


def _hunyuanvl_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # XD-RoPE as transformers 5 spells it (dynamic with the sections), from the rows the
    # text entry keeps under derived fields; the reference reads this spelling back
    arch = md.get("general.architecture")
    sections = [int(s) for s in md.get(f"{arch}.rope.dimension_sections", [])]
    while sections and not sections[-1]:
        sections.pop()  # the reference pads the sections to four
    rope = {
        "rope_type": "dynamic",
        "rope_theta": cfg.pop("rope_theta", 10000.0),
        "alpha": _f(md[f"{arch}.rope.scaling.alpha"]),
        "factor": _f(md.get(f"{arch}.rope.scaling.factor", 1.0)),
        "mrope_section": sections,
    }
    cfg.pop("rope_scaling", None)  # TextModel's scaling rows (type none): the RoPE above
    return {"rope_parameters": rope, "hidden_act": "silu"}


def _hunyuanvl_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "HunYuanVLImageProcessor",
            "patch_size": vision["patch_size"],
            "temporal_patch_size": 1,  # mtmd's single Conv2d patch embedding
            "merge_size": vision["spatial_merge_size"],
            "min_pixels": md[_CLIP + "vision.image_min_pixels"],
            "max_pixels": md[_CLIP + "vision.image_max_pixels"],
            **_mean_std(md),
        }
    }


HUNYUANVL_BACK = VisionBack(
    hf_arch="HunYuanVLForConditionalGeneration",
    model_type="hunyuan_vl",
    projector=HUNYUANVL_VISION,
    projector_types=("hunyuanvl",),
    vision_model_type="hunyuan_vl_vision",
    text_model_type="hunyuan_vl_text",
    text_archs=("hunyuan_vl",),
    fields={
        "vision.image_size": "max_image_size",  # the reference's image size row
        "vision.block_count": "num_hidden_layers",
    },
    required=("max_image_size", *_REQUIRED[1:]),
    restore=_hunyuanvl_restore,
    preprocessor=_hunyuanvl_pre,
    text=_hunyuanvl_text,
    # the Hub's HunyuanOCR: text model.*, lm_head, tower and merger vit.*
    text_rename=lambda name: name,
    tokens=_token_ids(
        {
            # mtmd's image brackets; the image and newline placeholders follow them, as
            # the config class's default ids (120118 .. 120121) do
            "im_start_id": "<\uff5chy_place\u2581holder\u2581no\u2581100\uff5c>",
            "im_end_id": "<\uff5chy_place\u2581holder\u2581no\u2581101\uff5c>",
            "image_token_id": "<\uff5chy_place\u2581holder\u2581no\u2581102\uff5c>",
            "im_newline_id": "<\uff5chy_place\u2581holder\u2581no\u2581103\uff5c>",
        }
    ),
)

VISION_BACK += (HUNYUANVL_BACK,)
# --------------------------------------------------------------------------- Qwen4-Exp

# Qwen3.5's tower (Qwen3-VL's, no deepstack) over a Qwen4-Exp text model (Qwen3.5-MoE's
# layers with hyper-connections and the QSA indexer): the text config is text GGUF ->
# HF's (Qwen4ExpTextConfig), the text weights under model.language_model.
QWEN4EXP_BACK = replace(
    QWEN35VLMOE_BACK,
    hf_arch="Qwen4ExpForConditionalGeneration",
    model_type="qwen4_exp",
    projector=QWEN4EXP_VISION,
    vision_model_type="qwen4_exp_vision",
    text_model_type="qwen4_exp_text",
    text_archs=("qwen4exp",),
)

VISION_BACK += (QWEN4EXP_BACK,)


# --------------------------------------------------------------------------- GLM-5-Next


def _glm5next_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # numpy order [out, in]: the merger's SwiGLU width is only a shape; the Conv3d's
    # frames are its Conv2d halves; the MLP's act from use_silu (GLM-4V's rows); the 2-D
    # RoPE base is mtmd's hard-coded 10000, the config's default
    v = {
        "out_hidden_size": md[_CLIP + "vision.projection_dim"],
        "projection_intermediate_size": shapes["mm.gate.weight"][0],
        "temporal_patch_size": _frames(shapes),
        "attention_bias": "v.blk.0.attn_qkv.bias" in shapes,
        "hidden_act": "silu" if md.get(_CLIP + "use_silu") else "gelu",
        "in_channels": 3,
    }
    return v, {}


def _glm5next_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    # the pixel bounds are the image processor's token budget times one merged token's
    # pixels (the forward rows' product, undone)
    p, merge = vision["patch_size"], vision.get("spatial_merge_size", 2)
    per_token = (p * merge) ** 2
    budget = {
        f"{k}_image_tokens": md[_CLIP + f"vision.image_{k}_pixels"] // per_token
        for k in ("min", "max")
        if _CLIP + f"vision.image_{k}_pixels" in md
    }
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Glm5NextImageProcessor",
            "patch_size": p,
            "temporal_patch_size": vision["temporal_patch_size"],
            "merge_size": merge,
            **_RESCALE,
            **budget,
            **_mean_std(md),
        }
    }


GLM5NEXT_BACK = VisionBack(
    hf_arch="Glm5NextForConditionalGeneration",
    model_type="glm5_next",
    projector=GLM5NEXT_VISION,
    projector_types=("glm5v",),
    vision_model_type="glm5_next_vision",
    text_model_type="glm5_next_text",
    text_archs=("glm5-next",),
    fields={
        "vision.block_count": "depth",
        "vision.attention.head_count": "num_heads",
        "use_silu": None,
        "use_gelu": None,
    },
    restore=_glm5next_restore,
    required=(
        "image_size",
        "patch_size",
        "hidden_size",
        "intermediate_size",
        "num_heads",
        "depth",
    ),
    preprocessor=_glm5next_pre,
    # the Hub's (and transformers') names: model.visual.*, model.language_model.*
    rename=_under_model,
    text_rename=_language_model,
    tokens=_token_ids(
        {
            "image_token_id": "<|image|>",
            "image_start_token_id": "<|begin_of_image|>",
            "image_end_token_id": "<|end_of_image|>",
        }
    ),
)

VISION_BACK += (GLM5NEXT_BACK,)


# --------------------------------------------------------------------------- Muse Glimmer


def _muse_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the image size row is nominal: position table height x patch x merge; the table's
    # rows are height x width (numpy order [rows, width]); the frames the patch
    # embedding's slabs were summed over are not kept: the class default 2
    p, merge = vision["patch_size"], vision["merge_size"]
    height = md[_CLIP + "vision.image_size"] // (p * merge)
    v = {
        "pos_emb_height": height,
        "pos_emb_width": shapes["v.position_embd.weight"][0] // height,
        "patch_temporal": 2,
    }
    # the 3-linear projector's widths (numpy [out, in]): its input is the merged tower
    # width; its act is llama.cpp's GELU, the class default
    top = {
        "out_hidden_size": shapes["mm.0.weight"][1],
        "projector_hidden_size": shapes["mm.0.weight"][0],
        "projector_hidden_act": "gelu",
    }
    return v, top


def _muse_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "MuseGlimmerImageProcessor",
            "patch_size": vision["patch_size"],
            "temporal_patch_size": vision["patch_temporal"],
            "merge_size": vision["merge_size"],
            **_RESCALE,
            **_mean_std(md),
        }
    }


def _muse_values(f: GGUFFile) -> dict:
    # the scaleless QK norm's factor is the reference's synthesized attn_q_norm (every
    # element qk_scale_factor)
    q = G.dequantize_tensor(f, "blk.0.attn_q_norm.weight")
    return {"qk_scale_factor": _f(float(np.asarray(q).reshape(-1)[0]))}


MUSE_GLIMMER_BACK = VisionBack(
    hf_arch="MuseGlimmerForConditionalGeneration",
    model_type="muse_glimmer",
    projector=MUSE_GLIMMER_VISION,
    projector_types=("muse-glimmer",),
    vision_model_type="muse_glimmer_vision",
    text_model_type="muse_glimmer_text",
    text_archs=("muse-glimmer",),
    fields={
        "vision.image_size": None,  # nominal: the position table's side, restored
        "vision.block_count": "num_hidden_layers",
        "projector_type": None,
    },
    restore=_muse_restore,
    required=(*_REQUIRED[1:], "merge_size"),
    preprocessor=_muse_pre,
    # the Hub's (and transformers') names: model.language_model.*, lm_head at the top
    text_rename=_language_model,
    text_values=_muse_values,
)

VISION_BACK += (MUSE_GLIMMER_BACK,)


# --------------------------------------------------------------------------- MiniMax-M3 VL


def _minimaxm3_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the Conv3d's frames are its Conv2d halves; the tower's GELU (use_gelu: the
    # reference writes no other) and 3 channels are the config's defaults; the
    # projector's hidden width is a shape (numpy [out, in])
    v = {
        "temporal_patch_size": _frames(shapes),
        "hidden_act": "gelu",
    }
    return v, {"projector_hidden_size": shapes["mm.1.weight"][0]}


_minimaxm3_pre = _qwen_pre("MiniMaxM3VLImageProcessor", **_RESCALE)


# the Hub's layout, which transformers 5.24 saves and loads: language_model.model.* with
# per-expert block_sparse_moe weights (the text registry's inverse plan writes them so),
# language_model.lm_head, vision_tower.vision_model.*, multi_modal_projector.*,
# patch_merge_mlp.*; the Hub's text fields beside transformers' own (arch/minimax.py)
MINIMAXM3_BACK = VisionBack(
    hf_arch="MiniMaxM3SparseForConditionalGeneration",
    model_type="minimax_m3_vl",
    projector=MINIMAXM3_VISION,
    projector_types=("minimax_m3",),
    vision_model_type="minimax_m3_vl_vision",
    text_model_type="minimax_m3_vl_text",
    text_archs=("minimax-m3",),
    fields={
        "vision.block_count": "num_hidden_layers",
        "projector_type": None,
        "use_gelu": None,
        "vision.spatial_merge_size": "spatial_merge_size",
    },
    restore=_minimaxm3_restore,
    preprocessor=_minimaxm3_pre,
)

VISION_BACK += (MINIMAXM3_BACK,)


# --------------------------------------------------------------------------- DeepSeek-OCR 2


def _dsocr2_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # transformers' layout (its DeepseekOcr2VisionConfig: a SAM and a Qwen2-encoder
    # config); the widths GGUF keeps only as shapes (numpy [out, in, ...]); llama.cpp's
    # deepseekocr2 graph hard-codes SAM's global-attention layers 2, 5, 8, 11, its
    # window from the row, the encoder's RoPE base 1e6 and 2 KV heads (its row)
    c = _CLIP + "vision."
    eps = _f(md.get(c + "attention.layer_norm_epsilon", 1e-6))
    sam = {
        "model_type": "deepseek_ocr2_sam_vision_model",
        "hidden_size": md[c + "sam.embedding_length"],
        "num_hidden_layers": md[c + "sam.block_count"],
        "num_attention_heads": md[c + "sam.head_count"],
        "image_size": md[c + "image_size"],
        "patch_size": md[c + "patch_size"],
        "window_size": md.get(c + "window_size", 14),
        "global_attn_indexes": [2, 5, 8, 11],
        "output_channels": shapes["v.sam.neck.0.weight"][0],
        "downsample_channels": [shapes["v.sam.net_2.weight"][0], shapes["v.sam.net_3.weight"][0]],
        "mlp_dim": shapes["v.sam.blk.0.mlp.lin1.weight"][0],
        "qkv_bias": "v.sam.blk.0.attn.qkv.bias" in shapes,
        "use_rel_pos": "v.sam.blk.0.attn.pos_h.weight" in shapes,
        "layer_norm_eps": eps,
    }
    encoder = {
        "model_type": "deepseek_ocr2_encoder",
        "hidden_size": md[c + "embedding_length"],
        "intermediate_size": md[c + "feed_forward_length"],
        "num_hidden_layers": md[c + "block_count"],
        "num_attention_heads": md[c + "attention.head_count"],
        "num_key_value_heads": md.get(c + "attention.head_count_kv", 2),
        "rms_norm_eps": eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    }
    return {"sam_config": sam, "encoder_config": encoder}, {}


def _dsocr2_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    return {
        "preprocessor_config.json": {
            "image_processor_type": "DeepseekOcr2ImageProcessor",
            "patch_size": vision["sam_config"]["patch_size"],
            **_RESCALE,
            **_mean_std(md),
        }
    }


def _dsocr2_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # transformers' DeepseekOcr2TextConfig names the dense layers per layer
    n, dense = cfg["num_hidden_layers"], cfg.get("first_k_dense_replace", 0)
    return {"mlp_layer_types": ["dense"] * dense + ["sparse"] * (n - dense)}


def _dsocr2_rename(name: str, md: Mapping[str, Any]) -> str:
    # SAM's position parameters are bare, read forward as .weight tensors
    if name.endswith(("pos_embed.weight", "rel_pos_h.weight", "rel_pos_w.weight")):
        return name.removesuffix(".weight")
    return name


# transformers 5.24's DeepseekOcr2ForConditionalGeneration, in the tensor names it saves
# and loads (the Hub's: model.sam_model.*, model.qwen2_model.*, model.projector.*,
# model.view_seperator, model.layers.*); every clip row is read by restore into the two
# nested tower configs, none is a flat vision field
DEEPSEEKOCR2_BACK = VisionBack(
    hf_arch="DeepseekOcr2ForConditionalGeneration",
    model_type="deepseek_ocr2",
    projector=DEEPSEEKOCR2_VISION,
    projector_types=("deepseekocr2",),
    vision_model_type="deepseek_ocr2_vision",
    text_model_type="deepseek_ocr2_text",
    text_archs=("deepseek2-ocr",),
    fields={r.key: None for r in DEEPSEEKOCR2_VISION.entry.meta if isinstance(r, MetaKey)},
    required=(),
    restore=_dsocr2_restore,
    preprocessor=_dsocr2_pre,
    rename=_dsocr2_rename,
    text_rename=lambda name: name,
    text=_dsocr2_text,
)

VISION_BACK += (DEEPSEEKOCR2_BACK,)


# --------------------------------------------------------------------------- Whisper audio
# (Voxtral, Qwen2-Audio, Audio Flamingo 3: audio-only projectors, conversion/ultravox.py)


def _whisper_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    # the learned position table's rows (numpy order [positions, width]); the encoder's
    # LayerNorm epsilon is hard-coded 1e-5 in transformers' Whisper-style encoders (the
    # row's value), its GELU and unscaled embeddings the configs' defaults
    return {"max_source_positions": shapes["a.position_embd.weight"][0]}, {}


def _whisper_mlp_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    # a 2-layer MLP projector: mtmd's GELU (projector_hidden_act's default)
    a, _ = _whisper_restore(md, audio, shapes)
    return a, {"projector_hidden_act": "gelu"}


def _whisper_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    # mtmd's Whisper front end hard-codes 16 kHz, a 400-sample FFT, hop 160, the 30 s
    # window: WhisperFeatureExtractor's defaults, with the projector's mel bins
    return {
        "preprocessor_config.json": {
            "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": md[_CLIP + "audio.num_mel_bins"],
            "sampling_rate": 16000,
            "hop_length": 160,
            "n_fft": 400,
            "chunk_length": 30,
            "n_samples": 480000,
            "nb_max_frames": 3000,
            "padding_side": "right",
            "padding_value": 0.0,
            "return_attention_mask": False,
        }
    }


_WHISPER_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_mel_bins")  # fmt: skip


def _no_vision(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    return {}, {}


VOXTRAL_BACK = VisionBack(
    hf_arch="VoxtralForConditionalGeneration",
    model_type="voxtral",
    projector=P.VOXTRAL_AUDIO,
    projector_types=("voxtral",),
    vision_model_type=None,
    text_model_type=None,
    text_archs=("llama",),
    fields={},
    restore=_no_vision,
    required=(),
    preprocessor=_whisper_pre,
    audio_model_type="voxtral_encoder",
    audio_restore=_whisper_mlp_restore,
    audio_required=_WHISPER_REQUIRED,
    tokens=_token_ids({"audio_token_id": "[AUDIO]"}),
)

VISION_BACK += (VOXTRAL_BACK,)

# Whisper's own spellings, as the Hub's Qwen2-Audio configs write them
QWEN2AUDIO_BACK = replace(
    VOXTRAL_BACK,
    hf_arch="Qwen2AudioForConditionalGeneration",
    model_type="qwen2_audio",
    projector=P.QWEN2AUDIO_AUDIO,
    projector_types=("qwen2a",),
    text_archs=("qwen2",),
    audio_model_type="qwen2_audio_encoder",
    audio_fields={
        "audio.embedding_length": "d_model",
        "audio.feed_forward_length": "encoder_ffn_dim",
        "audio.block_count": "encoder_layers",
        "audio.attention.head_count": "encoder_attention_heads",
    },
    audio_restore=_whisper_restore,  # one linear projector: no act
    audio_required=(
        "d_model",
        "encoder_ffn_dim",
        "encoder_layers",
        "encoder_attention_heads",
        "num_mel_bins",
    ),
    tokens=_token_ids({"audio_token_index": "<|AUDIO|>"}),
)

VISION_BACK += (QWEN2AUDIO_BACK,)


def _af3_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    a, top = _whisper_mlp_restore(md, audio, shapes)
    return a, {**top, "projector_bias": "mm.a.mlp.1.bias" in shapes}


AUDIOFLAMINGO3_BACK = replace(
    VOXTRAL_BACK,
    hf_arch="AudioFlamingo3ForConditionalGeneration",
    model_type="audioflamingo3",
    projector=P.AUDIOFLAMINGO3_AUDIO,
    projector_types=("musicflamingo",),
    text_archs=("qwen2",),
    audio_model_type="audioflamingo3_encoder",
    audio_restore=_af3_restore,
    tokens=_token_ids({"audio_token_id": "<sound>"}),
)

VISION_BACK += (AUDIOFLAMINGO3_BACK,)


# --------------------------------------------------------------------------- Gemma 4 Unified


def _g4u_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    v = {
        # mtmd's gemma4uv pools by 3 (a model patch of 3 x 3 patches) unless the scale
        # factor row says otherwise: the reference writes none
        "pooling_kernel_size": md.get(_CLIP + "vision.projector.scale_factor", 3),
        # the position table [2, size, width] and the projection's input (numpy order)
        "mm_posemb_size": shapes["v.position_embd.weight"][1],
        "output_proj_dims": shapes["mm.input_projection.weight"][1],
    }
    return v, {}


def _g4u_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    width = md[_CLIP + "audio.embedding_length"]  # the raw-waveform frame, in samples
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Gemma4UnifiedImageProcessor",
            "patch_size": vision["patch_size"],
            "pooling_kernel_size": vision["pooling_kernel_size"],
            "max_soft_tokens": 280,  # not kept by GGUF: the processor's default
            **_mean_std(md),
        },
        "processor_config.json": {
            "processor_class": "Gemma4UnifiedProcessor",
            # mtmd's gemma4ua: a 16 kHz waveform in frames of the audio width
            "feature_extractor": {
                "feature_extractor_type": "Gemma4UnifiedAudioFeatureExtractor",
                "feature_size": width,
                "audio_samples_per_token": width,
                "sampling_rate": 16000,
            },
        },
    }


# encoder-free: a patch embedder (gemma4uv) and raw-waveform frames (gemma4ua); no tower
# sizes (the reference writes 0 for them), the epsilons its 1e-6 and the configs' default
GEMMA4UNIFIED_BACK = VisionBack(
    hf_arch="Gemma4UnifiedForConditionalGeneration",
    model_type="gemma4_unified",
    projector=P.GEMMA4_UNIFIED,
    projector_types=("gemma4uv",),
    vision_model_type="gemma4_unified_vision",
    text_model_type="gemma4_unified_text",
    text_archs=("gemma4",),
    fields={
        "vision.image_size": None,  # the reference's placeholder 224
        "vision.attention.layer_norm_epsilon": None,
    },
    restore=_g4u_restore,
    required=("patch_size", "mm_embed_dim"),
    preprocessor=_g4u_pre,
    text_rename=GEMMA4_BACK.text_rename,
    tokens=GEMMA4_BACK.tokens,
    audio_model_type="gemma4_unified_audio",
    audio_fields={
        "audio.embedding_length": "audio_embed_dim",
        "audio.feed_forward_length": None,
        "audio.block_count": None,
        "audio.attention.head_count": None,
        "audio.num_mel_bins": None,
        "audio.attention.layer_norm_epsilon": None,
    },
    audio_required=("audio_embed_dim",),
)

VISION_BACK += (GEMMA4UNIFIED_BACK,)


# --------------------------------------------------------------------------- Qwen3-ASR


def _qwen3asr_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    # numpy order [out, in, ...]: the sub-sampling convs' channels and the output width
    # are only shapes; the position table is sinusoids the tower computes (not read
    # back); the 100-frame chunks (n_window 50) are mtmd's and the config's default
    a = {
        "downsample_hidden_size": shapes["a.conv2d.1.weight"][0],
        "output_dim": shapes["mm.a.mlp.2.weight"][0],
    }
    return a, {}


def _qwen3asr_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    pre = _whisper_pre(vision, md)["preprocessor_config.json"]
    return {"preprocessor_config.json": {**pre, "feature_extractor_type": "Qwen3ASRFeatureExtractor",
                                         "return_attention_mask": True}}  # fmt: skip


def _qwen3asr_rename(name: str, md: Mapping[str, Any]) -> str:
    # the entry's names are Qwen's release's (the output layers inside the tower):
    # back to transformers 5's, which ours reads too (the reference reads only Qwen's)
    for qwen, hf in (("audio_tower.proj1.", "multi_modal_projector.linear_1."),
                     ("audio_tower.proj2.", "multi_modal_projector.linear_2.")):  # fmt: skip
        if name.startswith(qwen):
            name = hf + name[len(qwen) :]
    return "model." + name


# Qwen3-Omni's audio tower alone over a qwen3vl text (MRoPE sections interleaved), in
# transformers 5's layout (model.audio_tower.*, model.multi_modal_projector.*,
# model.language_model.*)
QWEN3ASR_BACK = replace(
    VOXTRAL_BACK,
    hf_arch="Qwen3ASRForConditionalGeneration",
    model_type="qwen3_asr",
    projector=P.QWEN3ASR_AUDIO,
    projector_types=("qwen3a",),
    text_model_type="qwen3",
    text_archs=("qwen3vl",),
    text=_qwen3_text,
    text_rename=QWEN3VL_BACK.text_rename,
    rename=_qwen3asr_rename,
    copies=frozenset({"a.position_embd.weight"}),
    preprocessor=_qwen3asr_pre,
    audio_model_type="qwen3_asr_encoder",
    audio_fields=QWEN2AUDIO_BACK.audio_fields,
    audio_restore=_qwen3asr_restore,
    audio_required=QWEN2AUDIO_BACK.audio_required,
    tokens=_token_ids({"audio_token_id": "<|audio_pad|>"}),
)

VISION_BACK += (QWEN3ASR_BACK,)

# --------------------------------------------------------------------------- Granite Speech

_GS_BN = ".conv.batch_norm."
#: a running variance whose eval-mode batch norm divides by sqrt(var + eps) == 1 exactly
#: in float32 (1 - 1e-5 rounded, plus 1e-5 rounded, is 1.0; tested)
_GS_UNIT_VAR = np.float32(1.0) - np.float32(GS.BN_EPS)


def _gs_derived(name: str) -> list[tuple[str, tuple | None, Callable]]:
    # the GGUF keeps each batch norm folded (scale, shift): written back as weight =
    # scale, bias = shift over mean 0 and variance 1 - eps, so eval mode computes
    # x * scale + shift again; num_batches_tracked 0 (read only in training)
    if not name.endswith(_GS_BN + "weight"):
        return []
    base = name[: -len("weight")]
    return [
        (base + "running_mean", None, np.zeros_like),
        (base + "running_var", None, lambda x: np.full_like(x, _GS_UNIT_VAR)),
        (base + "num_batches_tracked", (), lambda x: np.zeros((), np.float32)),
    ]


def _gs_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    # encoder_config fields no row keeps, from the shapes (numpy order [out, in]):
    # the attention head size, the CTC output width, the conv expansion; the Q-Former
    # (projector_config) likewise, its eps mtmd's hard-coded 1e-12 (Blip2's default)
    width = audio["hidden_dim"]
    n_q = sum(1 for n in shapes if n.startswith("a.proj_blk.") and n.endswith("ffn_up.weight"))
    enc = {
        "feedforward_mult": shapes["a.blk.0.ffn_up.weight"][0] // width,
        "dim_head": shapes["a.blk.0.attn_q.weight"][0] // audio["num_heads"],
        "output_dim": shapes["a.enc_ctc_out.weight"][0],
        "conv_expansion_factor": shapes["a.blk.0.conv_dw.weight"][0] // width,
    }
    qformer = {
        "model_type": "blip_2_qformer",
        "hidden_size": shapes["a.proj_query"][-1],
        "num_hidden_layers": n_q,
        "num_attention_heads": md[_CLIP + "audio.projector.head_count"],
        "intermediate_size": shapes["a.proj_blk.0.ffn_up.weight"][0],
        "encoder_hidden_size": shapes["a.proj_blk.0.cross_attn_k.weight"][1],
        "cross_attention_frequency": 1,  # every block has its cross attention
        "layer_norm_eps": 1e-12,
    }
    top = {
        "projector_config": qformer,
        "window_size": md[_CLIP + "audio.projector.window_size"],
        "downsample_rate": md[_CLIP + "audio.projector.downsample_rate"],
        "has_lora_adapter": False,  # no adapter in either GGUF
    }
    layers = md.get(_CLIP + "audio.feature_layer")
    if layers:  # Granite Speech Plus: the concatenated encoder layers
        enc |= {"model_type": "granite_speech_plus_encoder", "cat_hidden_layers": list(layers)}
        top |= {
            "architectures": ["GraniteSpeechPlusForConditionalGeneration"],
            "model_type": "granite_speech_plus",
        }
    return enc, top


def _gs_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    # GraniteSpeechFeatureExtractor's defaults (mtmd's front end hard-codes them: 80 mel
    # bins, two frames stacked into the 160 inputs) and the projector's window
    return {
        "preprocessor_config.json": {
            "feature_extractor_type": "GraniteSpeechFeatureExtractor",
            "sampling_rate": 16000,
            "n_fft": 512,
            "win_length": 400,
            "hop_length": 160,
            "n_mels": md[_CLIP + "audio.num_mel_bins"] // 2,
            "projector_window_size": md[_CLIP + "audio.projector.window_size"],
            "projector_downsample_rate": md[_CLIP + "audio.projector.downsample_rate"],
        }
    }


GRANITE_SPEECH_BACK = VisionBack(
    hf_arch="GraniteSpeechForConditionalGeneration",
    model_type="granite_speech",
    projector=P.GRANITE_SPEECH,
    projector_types=("granite_speech",),
    vision_model_type=None,
    text_model_type=None,
    text_archs=("granite",),
    text=lambda cfg, md: {"architectures": ["GraniteForCausalLM"]},
    fields={},
    restore=_no_vision,
    required=(),
    preprocessor=_gs_pre,
    audio_model_type="granite_speech_encoder",
    audio_key="encoder_config",
    audio_fields={
        "audio.embedding_length": "hidden_dim",
        "audio.feed_forward_length": None,  # hidden_dim * feedforward_mult
        "audio.block_count": "num_layers",
        "audio.attention.head_count": "num_heads",
        "audio.num_mel_bins": "input_dim",
        "audio.chunk_size": "context_size",
        "audio.conv_kernel_size": "conv_kernel_size",
        "audio.max_pos_emb": "max_pos_emb",
    },
    audio_restore=_gs_restore,
    audio_required=(
        "hidden_dim",
        "num_layers",
        "num_heads",
        "input_dim",
        "context_size",
        "conv_kernel_size",
        "max_pos_emb",
    ),
    tokens=_token_ids({"audio_token_index": "<|audio|>"}),
    derived=_gs_derived,
)

VISION_BACK += (GRANITE_SPEECH_BACK,)

NO_WAY_BACK["qwen2.5o"] = (
    "transformers' Qwen2_5OmniForConditionalGeneration.from_pretrained requires the "
    "talker's speaker table (spk_dict.pt) even with audio output off, and neither GGUF "
    "keeps it; the thinker alone (Qwen2_5OmniThinkerForConditionalGeneration) is not "
    "written back yet"
)

# the remote-code Whisper-encoder families (UltravoxModel, MERaLiON2ForConditionalGeneration):
# transformers has no class for the whole model, so there is nothing to rebuild
NO_WAY_BACK["ultravox"] = (
    "Ultravox (UltravoxModel) is remote code: transformers has no class to rebuild the pair "
    "into; the text GGUF converts alone"
)
NO_WAY_BACK["meralion"] = (
    "MERaLiON 2 (MERaLiON2ForConditionalGeneration) is remote code: transformers has no "
    "class to rebuild the pair into; the text GGUF converts alone (Gemma2ForCausalLM)"
)

# Ling-3.0 VL: remote code, and its text file runs M-RoPE (NeoX pairs) where transformers'
# bailing_hybrid rotates adjacent pairs, so neither half has a transformers class
NO_WAY_BACK["ling3vl"] = (
    "Ling-3.0 VL (BailingMoeV3VLForConditionalGeneration) is remote code: transformers has "
    "no class to rebuild the pair into, and its bailingmoe3 text with M-RoPE sections is "
    "not bailing_hybrid's (which rotates adjacent pairs)"
)

# --------------------------------------------------------------------------- Unlimited-OCR
# (and DeepSeek-OCR (1): the same projector tensors and rows but the tile count, its text
# without the sliding window; transformers 5.24 has no DeepSeek-OCR class of its own)


def _unlimited_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # transformers' UnlimitedOcrVisionConfig (a SAM and a CLIP-L config).  The CLIP rows
    # are DeepSeek-OCR's merged-up ones (image 224, patch 14, width, layers, heads); its
    # feed-forward row is the reference's 4 x heads, so the width is the ffn_up shape
    # (numpy [out, in]).  SAM keeps no image / patch size row: mtmd's deepseekocr graph
    # fixes 1024 / 16, as the shapes say (patch kernel, position grid x patch); its
    # global-attention layers 2, 5, 8, 11, SAM's eps 1e-6, CLIP's 1e-5 and quick GELU are
    # mtmd's hard-coded values and the configs' defaults (the epsilon row is the
    # reference's 1e-6 default, no CLIP field)
    c = _CLIP + "vision."
    patch = shapes["v.sam.patch_embd.weight"][-1]
    sam = {
        "model_type": "unlimited_ocr_sam_vision_model",
        "hidden_size": md[c + "sam.embedding_length"],
        "num_hidden_layers": md[c + "sam.block_count"],
        "num_attention_heads": md[c + "sam.head_count"],
        "image_size": shapes["v.sam.pos_embd.weight"][1] * patch,
        "patch_size": patch,
        "window_size": md.get(c + "window_size", 14),
        "global_attn_indexes": [2, 5, 8, 11],
        "output_channels": shapes["v.sam.neck.0.weight"][0],
        "downsample_channels": [shapes["v.sam.net_2.weight"][0], shapes["v.sam.net_3.weight"][0]],
        "mlp_dim": shapes["v.sam.blk.0.mlp.lin1.weight"][0],
        "qkv_bias": "v.sam.blk.0.attn.qkv.bias" in shapes,
        "use_rel_pos": "v.sam.blk.0.attn.pos_h.weight" in shapes,
    }
    encoder = {
        "model_type": "unlimited_ocr_vision_encoder",
        "hidden_size": md[c + "embedding_length"],
        "intermediate_size": shapes["v.blk.0.ffn_up.weight"][0],
        "num_hidden_layers": md[c + "block_count"],
        "num_attention_heads": md[c + "attention.head_count"],
        "image_size": md[c + "image_size"],
        "patch_size": md[c + "patch_size"],
    }
    return {"sam_config": sam, "encoder_config": encoder}, {}


def _unlimited_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    # mtmd's deepseekocr preprocessing: 1024 px global view, 640 px tiles, 2 to the
    # row's count (32 Unlimited-OCR, 9 DeepSeek-OCR), bicubic, grey 127 padding: the
    # image processor's defaults but the count
    sam = vision["sam_config"]
    return {
        "preprocessor_config.json": {
            "image_processor_type": "UnlimitedOcrImageProcessor",
            "size": {"height": sam["image_size"], "width": sam["image_size"]},
            "tile_size": 640,
            "min_patches": md.get(_CLIP + "vision.preproc_min_tiles", 2),
            "max_patches": md.get(_CLIP + "vision.preproc_max_tiles", 32),
            **_RESCALE,
            **_mean_std(md),
        }
    }


def _unlimited_text(cfg: dict, md: Mapping[str, Any]) -> dict:
    # the dense layers per layer (as DeepSeek-OCR 2's); the window row makes every layer
    # Unlimited-OCR's reference sliding attention, none (DeepSeek-OCR's text) full
    # attention with the class's default window (required, unused)
    n = cfg["num_hidden_layers"]
    window = md.get("deepseek2-ocr.attention.sliding_window")
    kind = "full_attention" if window is None else "reference_sliding_attention"
    return {
        **_dsocr2_text(cfg, md),
        "layer_types": [kind] * n,
        **({"sliding_window": window} if window is not None else {}),
    }


# transformers 5.24's UnlimitedOcrForConditionalGeneration, in the tensor names it saves
# and loads (the Hub's: model.sam_model.*, model.vision_model.*, model.projector.*,
# model.image_newline, model.view_seperator, model.layers.*, lm_head); every clip row is
# read by restore into the two nested tower configs, none is a flat vision field
UNLIMITEDOCR_BACK = VisionBack(
    hf_arch="UnlimitedOcrForConditionalGeneration",
    model_type="unlimited_ocr",
    projector=P.UNLIMITEDOCR_VISION,
    projector_types=("deepseekocr",),
    vision_model_type="unlimited_ocr_vision",
    text_model_type="unlimited_ocr_text",
    text_archs=("deepseek2-ocr",),
    fields={r.key: None for r in P.UNLIMITEDOCR_VISION.entry.meta if isinstance(r, MetaKey)},
    required=(),
    restore=_unlimited_restore,
    preprocessor=_unlimited_pre,
    rename=_dsocr2_rename,
    text_rename=lambda name: name,
    text=_unlimited_text,
    tokens=_token_ids({"image_token_id": "<image>"}),
)

VISION_BACK += (UNLIMITEDOCR_BACK,)

# --------------------------------------------------------------------------- Youtu-VL

# remote code: transformers 5.24 has Youtu-LLM's text classes (``YoutuForCausalLM``) but
# no Youtu-VL model type, so nothing builds the SigLIP2 tower and merger back
NO_WAY_BACK["youtuvl"] = (
    "Youtu-VL (YoutuVLForConditionalGeneration) is remote code: transformers has no class "
    "to rebuild the pair into; the deepseek2 text GGUF converts alone (YoutuForCausalLM)"
)

# --------------------------------------------------------------------------- Kimi-VL

# remote code: transformers 5.24 has no Kimi-VL model type (its Kimi-K2.5 class computes
# a single frame alike, but is another model: its own projector names, a 3-D position
# table whose height GGUF's flattened kimivl table does not keep)
NO_WAY_BACK["kimivl"] = (
    "Kimi-VL (KimiVLForConditionalGeneration) is remote code: transformers has no class "
    "to rebuild the pair into; the deepseek2 text GGUF converts alone (DeepseekV3ForCausalLM)"
)

# Phi-4 reasoning-vision (Phi4ForCausalLMV, model type phi4-siglip) is remote code too
NO_WAY_BACK["phi4"] = (
    "Phi-4 reasoning-vision (Phi4ForCausalLMV) is remote code: transformers has no class to "
    "rebuild the pair into, and the projector file lacks the tower's last layer, post-norm "
    "and head; the text GGUF converts alone (Phi3ForCausalLM)"
)

# --------------------------------------------------------------------------- Dots3 Note


def _dots3_restore(md: Mapping[str, Any], vision: dict, shapes: dict) -> tuple[dict, dict]:
    # the Hub's spellings (Dots3NoteVisionConfig reads embed_dim as the tower width and
    # pyramid_num_routed, -1 a dense block, as the MoE schedule); the expert width is a
    # shape (numpy [experts, out, in]); the variant flags the reference asserts (and
    # llama.cpp's dots3note_v graph hard-codes) are their only values
    counts = [int(n) for n in md[_CLIP + "vision.expert_count_per_layer"]]
    exps = [k for k in shapes if k.endswith("ffn_gate_exps.weight")]
    width = md[_CLIP + "vision.projection_dim"]
    v = {
        "hidden_size": width,  # the Hub's vision hidden_size is the adapter's output
        "pyramid_num_routed": [n if n > 0 else -1 for n in counts],
        "capacity_factor": md[_CLIP + "vision.expert_used_count"],
        "moe_intermediate_size": shapes[exps[0]][1] if exps else vision["intermediate_size"],
        "adapter_in_dim": vision["embed_dim"],
        "adapter_out_dim": width,
        "temporal_patch_size": 1,
        "num_channels": 3,
        "router_scoring_func": "sigmoid",
        "router_scale": 1.0,
        "adapter_type": "patch_merger",
        "pre_pixel_shuffle": True,
        "use_bias": False,
        "use_qk_norm": True,
    }
    return v, {}


def _dots3_audio_restore(md: Mapping[str, Any], audio: dict, shapes: dict) -> tuple[dict, dict]:
    # the encoder sizes go into the Hub's whisper_config (which both converters read);
    # the stem's width is the first convolution's; the variant flags and the 60 s chunks,
    # the RoPE over half of each head are the reference's asserted (mtmd's hard-coded)
    a = _CLIP + "audio."
    d_model = md[a + "embedding_length"]
    whisper = {
        "d_model": d_model,
        "encoder_ffn_dim": md[a + "feed_forward_length"],
        "encoder_attention_heads": md[a + "attention.head_count"],
        "encoder_layers": md[a + "block_count"],
        "num_mel_bins": md[a + "num_mel_bins"],
        "activation_function": "swiglu",
    }
    return {
        "whisper_config": whisper,
        "use_conv2d_stem": True,
        "use_rope": True,
        "use_rms_norm": True,
        "use_causal": False,
        "merge_factor": 1,
        "chunk_seconds": 60,
        "downsample_hidden_size": shapes["a.conv2d.1.weight"][0],
        "adapter_input_size": d_model,
        "adapter_out_dim": md[a + "projection_dim"],
        "rope_parameters": {
            "rope_type": "default",
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
        },
    }, {}


def _dots3_pre(vision: dict, md: Mapping[str, Any]) -> dict[str, dict]:
    # the Hub's file: the image processor's settings nested under vision_config
    return {
        "preprocessor_config.json": {
            "vision_config": {
                "min_pixels": md[_CLIP + "vision.image_min_pixels"],
                "max_pixels": md[_CLIP + "vision.image_max_pixels"],
                "patch_size": vision["patch_size"],
                "merge_size": vision["spatial_merge_size"],
                "temporal_patch_size": 1,
                **_mean_std(md),
            }
        }
    }


def _dots3_layout(cfg: dict) -> dict:
    # the Hub's flat config: text fields at the top level (Dots3NoteConfig builds its
    # text_config from them); fields the text hook set to None are dropped, except the
    # token ids (None where the GGUF has none: the class defaults are ids of its 151k
    # vocabulary)
    text = {k: v for k, v in cfg.pop("text_config").items() if k != "model_type"}
    ids = ("pad_token_id", "bos_token_id", "eos_token_id")
    return {k: v for k, v in {**text, **cfg}.items() if v is not None or k in ids}


DOTS3NOTE_BACK = VisionBack(
    hf_arch="Dots3NoteForConditionalGeneration",
    model_type="dots3_note",
    projector=P.DOTS3NOTE_MMPROJ,
    projector_types=("dots3note_v",),
    vision_model_type="dots3_note_vision_encoder",
    text_model_type="dots3_note_text",
    text_archs=("dots3note",),
    fields={
        "vision.image_size": None,  # 0: dynamic resolution
        "vision.embedding_length": "embed_dim",
        "vision.block_count": "num_hidden_layers",
        "use_silu": None,
        "vision.image_min_pixels": None,
        "vision.image_max_pixels": None,
        "vision.expert_count_per_layer": None,
        "vision.expert_used_count": None,
    },
    restore=_dots3_restore,
    required=(
        "patch_size",
        "embed_dim",
        "intermediate_size",
        "num_attention_heads",
        "num_hidden_layers",
        "spatial_merge_size",
        "rms_norm_eps",
    ),
    preprocessor=_dots3_pre,
    # the Hub's (and transformers') names: model.*, lm_head, vision_encoder.*,
    # audio_encoder.*
    text_rename=lambda name: name,
    audio_model_type="dots3_note_audio_encoder",
    audio_fields={
        "audio.embedding_length": None,
        "audio.feed_forward_length": None,
        "audio.block_count": None,
        "audio.attention.head_count": None,
        "audio.num_mel_bins": None,
    },
    audio_restore=_dots3_audio_restore,
    layout=_dots3_layout,
    tokens=_token_ids(
        {
            "image_token_id": "<|imgpad|>",
            "video_token_id": "<|video_pad|>",
            "audio_token_id": "<|audio_comp_pad|>",
        }
    ),
)

VISION_BACK += (DOTS3NOTE_BACK,)

# --------------------------------------------------------------------------- Qwen3-Omni MoE

#: Qwen3-VL's merger spellings -> Qwen3-Omni's (the inverse of the forward rename)
_OMNI3_MERGER_BACK = (
    (".norm.", ".ln_q."),
    (".linear_fc1.", ".mlp.0."),
    (".linear_fc2.", ".mlp.2."),
)


def _omni3_rename(name: str, md: Mapping[str, Any]) -> str:
    # Qwen3-VL's names (QWEN3VL_BACK's rename: deepstack_merger_list.i) -> the Hub's
    # Qwen3-Omni thinker: mergers ``merger`` / ``merger_list.i`` spelled ln_q / mlp.0 /
    # mlp.2, every tower under ``thinker.``
    name = _qwen3_rename(name, md).removeprefix("model.")
    if name.startswith(("visual.merger.", "visual.deepstack_merger_list.")):
        name = name.replace("visual.deepstack_merger_list.", "visual.merger_list.", 1)
        for a, b in _OMNI3_MERGER_BACK:
            name = name.replace(a, b)
    return "thinker." + name


def _omni3_layout(cfg: dict) -> dict:
    # Qwen3OmniMoeConfig keeps the thinker's three configs and token ids under
    # thinker_config; audio output off: no talker or code2wav is built or read (neither
    # GGUF keeps them), and from_pretrained needs no other file
    top = {"architectures", "model_type", "dtype", "torch_dtype"}
    thinker = {k: v for k, v in cfg.items() if k not in top}
    return {
        **{k: cfg[k] for k in top if k in cfg},
        "enable_audio_output": False,
        "thinker_config": {"model_type": "qwen3_omni_moe_thinker", **thinker},
    }


_OMNI3_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "audio_token_id": "<|audio_pad|>",
    "audio_start_token_id": "<|audio_start|>",
}

# Qwen3-Omni MoE's thinker (Qwen3OmniMoeForConditionalGeneration with audio output off):
# Qwen3-VL's tower and mergers, Qwen3-ASR's audio encoder (output layers proj1 / proj2
# inside the tower), the qwen3vlmoe text model with the experts one tensor each (the
# forward QWEN3OMNIMOE entry's inverse: the Hub's layout), all under ``thinker.``
QWEN3OMNI_BACK = replace(
    QWEN3VLMOE_BACK,
    hf_arch="Qwen3OmniMoeForConditionalGeneration",
    model_type="qwen3_omni_moe",
    projector=P.QWEN3OMNI_VISION,
    projector_types=("qwen3vl_merger",),
    vision_model_type="qwen3_omni_moe_vision_encoder",
    text_model_type="qwen3_omni_moe_text",
    text_archs=("qwen3vlmoe",),
    rename=_omni3_rename,
    text_rename=lambda name: "thinker." + name,
    copies=frozenset({"a.position_embd.weight"}),
    audio_model_type="qwen3_omni_moe_audio_encoder",
    audio_fields=QWEN2AUDIO_BACK.audio_fields,
    audio_restore=_qwen3asr_restore,
    audio_required=QWEN2AUDIO_BACK.audio_required,
    tokens=_token_ids(_OMNI3_TOKENS),
    layout=_omni3_layout,
    proj_test=lambda md: md.get(_CLIP + "audio.projector_type") == "qwen3a",
    text_entry=QWEN3OMNIMOE,
)

VISION_BACK += (QWEN3OMNI_BACK,)

# --------------------------------------------------------------------------- dots.ocr

# remote code: transformers 5.24 has no dots_ocr model type (its text half alone is
# Qwen2ForCausalLM, which the qwen2 text GGUF converts back to)
NO_WAY_BACK["dots_ocr"] = (
    "dots.ocr (DotsOCRForCausalLM) is remote code: transformers has no class to rebuild "
    "the pair into; the qwen2 text GGUF converts alone (Qwen2ForCausalLM)"
)
