"""Vision projectors (``mmproj``): the second GGUF of a vision-language model.

llama.cpp's ``convert_hf_to_gguf.py --mmproj`` writes the vision tower and the
projector of a ``*ForConditionalGeneration`` checkpoint into a file of
``general.architecture = clip`` (``general.type = mmproj``) that its multimodal
runtime (mtmd) loads beside the text GGUF.  Its ``MmprojModel`` (conversion/base.py)
and the per-family subclasses are reproduced here as :class:`Projector` entries:

* ``keep`` -- the source names read (the subclass's ``filter_tensors``: tensors under
  these prefixes; ``language_model.`` never), ``rename`` the source-name fixes applied
  first (Gemma 3's ``mm_input_projection_weight`` -> ``...projection.weight``);
* ``entry`` -- an :class:`~._model.Arch` of ``gguf_arch = "clip"``: the ``clip.*``
  rows in the reference's order (``general.file_type`` first), read from the
  :func:`vision_view` of the config, and the tensor ops (names, Q/K permutation,
  norm + 1, ...);
* ``force`` -- the subclass's ``tensor_force_quant``: ``force(hf_name, gguf_name,
  outtype)`` gives a ggml type that overrides the output type (or None); 1-D
  tensors, ``*_norm.weight``, ``v.position_embd.weight`` and non-``.weight`` tensors
  are F32 whatever it says, as in ``prepare_tensors``;
* ``vision_of`` / ``pre_defaults`` -- a class that builds its vision config from other
  fields (DeepSeek-V4 Flash's top-level ``vision_*``) and supplies image processor
  settings no file holds: the config gets that ``vision_config`` when it has none, and
  the settings sit under the files';
* ``vision`` -- False for an audio-only projector (MmprojModel's ``has_vision_encoder``
  off: the Whisper-encoder classes of :mod:`.whisper_audio`): no ``vision_config`` and
  no image processor settings needed, ``audio_required`` lists the audio fields.

The rows read the *vision view*: ``vision_config`` at the top level, with the text
width (``clip.vision.projection_dim``), the image processor's settings
(``preprocessor_config.json`` then ``processor_config.json``, ``image_processor``
moved up) and the whole config under the ``mmproj.*`` keys; ``mmproj.audio`` is the
audio config (MmprojModel's ``hparams_audio``: ``whisper_config`` or ``audio_config``),
which the audio rows (:func:`audio_rows`, written only when it is not empty) read.  The
text config is :func:`~._text_config.text_config_of`'s (the registry of nested
layouts the text reader uses); a Qwen omni config keeps both tower configs under
``thinker_config`` (:func:`towers`).  The entry's ``extra``
tensors (computed from the view: Qwen2.5-Omni's audio position table) are written
first, typed by the same rules under their GGUF name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import numpy as np

from . import dots3_towers as D3
from . import gemma3n_mmproj as G3N
from . import granite4_vision as G4V
from . import granite_speech as GS
from . import kimik25 as K25
from . import lfm2_audio as L2A
from . import mimo_mmproj as MIMO
from . import minicpmv as MCV
from . import minimax as MM3
from . import phi4v as P4
from . import pockettts as PT
from . import qwen3tts as Q3T
from ._common import GEMMA_NORM, PERMUTE_K, PERMUTE_Q, replace_rows
from ._model import FILE_TYPE, VT, Arch, MetaKey, NameRule, Split, Stack, Transform, m
from ._text_config import text_config_of
from .gemma4_audio import (
    AUDIO_NAMES,
    AUDIO_PREFIXES,
    AUDIO_TAIL,
    AUDIO_TRANSFORMS,
    audio_force,
    feed_forward_length,
)
from .muse_glimmer import (
    PATCH_SLABS,
    VISION_KEEP,
    VISION_NAMES,
    VISION_ROWS_AFTER_BASE,
    nominal_image_size,
)
from .qwen_omni_audio import AUDIO3_NAMES as OMNI_AUDIO3_NAMES
from .qwen_omni_audio import AUDIO3_TRANSFORMS as OMNI_AUDIO3_TRANSFORMS
from .qwen_omni_audio import AUDIO_NAMES as OMNI_AUDIO_NAMES
from .qwen_omni_audio import AUDIO_TAIL as OMNI_AUDIO_TAIL
from .qwen_omni_audio import AUDIO_TRANSFORMS as OMNI_AUDIO_TRANSFORMS
from .qwen_omni_audio import OMNI_AUDIO, POSITION_EMBD, sinusoids
from .qwen_omni_audio import audio_fill as omni_audio_fill
from .qwen_omni_audio import audio_force as omni_audio_force
from .whisper_audio import (
    WHISPER_NAMES,
    WHISPER_PREFIX,
    WHISPER_TRANSFORMS,
    projector_names,
    whisper_fill,
    whisper_force,
)

#: vision-view keys that are not vision_config fields
TEXT_WIDTH = "mmproj.n_embd_text"
TOKEN_ID = "mmproj.token_id"
#: the source key of the text embedding (Projector.token)
TOKEN_SOURCE = "text.embed_tokens.weight"
_TEXT_EMBEDDINGS = ("language_model.model.embed_tokens.weight",
                    "model.language_model.embed_tokens.weight")  # fmt: skip
PREPROCESSOR = "mmproj.preprocessor"
GLOBAL = "mmproj.global"
AUDIO = "mmproj.audio"
#: the model folder's name (PocketTTS writes it as its generation model variant)
FOLDER = "mmproj.folder"

#: MmprojModel's layer-count spellings (``n_block_keys``)
BLOCK_KEYS = (
    "n_layers", "num_hidden_layers", "n_layer", "num_layers", "depth", "layers",
    "encoder_layers", "vt_num_hidden_layers",
)  # fmt: skip


def towers(cfg: dict) -> dict:
    """The dict holding ``vision_config`` / ``audio_config``: a Qwen omni model's
    ``thinker_config`` (its classes' get_vision_config / get_audio_config), else the
    config itself."""
    thinker = cfg.get("thinker_config")
    return thinker if isinstance(thinker, dict) else cfg


def vision_view(cfg: dict, preprocessor: dict) -> dict:
    """The dict the ``clip.*`` rows read (see the module docstring)."""
    # the text model's config by the one lookup the text reader uses (NESTED_TEXT: InternVL's
    # llm_config, a Qwen omni model's thinker_config.text_config, Qwen3-TTS's talker, ...);
    # the config the rows read holds it as text_config, as the reference's load_hparams
    # renames it (its global_config)
    text_config = text_config_of(cfg)
    if text_config is not None:
        cfg = {**cfg, "text_config": text_config}
    text = {**cfg, **(text_config or {})}
    view = dict(towers(cfg).get("vision_config") or {})
    view[TEXT_WIDTH] = text.get("hidden_size", text.get("n_embd", 0))
    view[PREPROCESSOR] = preprocessor
    view[GLOBAL] = cfg
    audio = "whisper_config" if "whisper_config" in cfg else "audio_config"
    view[AUDIO] = towers(cfg).get(audio)
    return view


def _pre(key: str) -> Callable[[dict], Any]:
    return lambda v: v[PREPROCESSOR].get(key)


def _flag(cfg: dict) -> bool:
    return True


# MmprojModel.set_gguf_parameters, vision half; the fields a row names must be present
# (find_vparam raises otherwise: Projector.required lists them for the named error)
BASE_ROWS: list[MetaKey | str] = [
    FILE_TYPE,
    MetaKey("has_vision_encoder", (), VT.BOOL, _flag),
    m("vision.projection_dim", TEXT_WIDTH),
    m("vision.image_size", "image_size"),
    m("vision.patch_size", "patch_size"),
    m("vision.embedding_length", "hidden_size", "width", "vt_hidden_size"),
    m("vision.feed_forward_length", "intermediate_size", "vt_intermediate_size"),
    m("vision.block_count", *BLOCK_KEYS),
    m(
        "vision.attention.head_count",
        "num_attention_heads",
        "num_heads",
        "heads",
        "vt_num_attention_heads",
    ),
    m("vision.image_mean", PREPROCESSOR, t=VT.FLOAT32, value=_pre("image_mean")),
    m("vision.image_std", PREPROCESSOR, t=VT.FLOAT32, value=_pre("image_std")),
]
#: the vision_config fields BASE_ROWS need (one of each tuple)
BASE_REQUIRED: tuple[tuple[str, ...], ...] = (
    ("image_size",),
    ("patch_size",),
    ("hidden_size", "width", "vt_hidden_size"),
    ("intermediate_size", "vt_intermediate_size"),
    BLOCK_KEYS,
    ("num_attention_heads", "num_heads", "heads", "vt_num_attention_heads"),
)
#: BASE_REQUIRED for towers whose image size has a default (derived or the reference's)
NO_IMAGE_SIZE = BASE_REQUIRED[1:]


def _const(key: str, value: Any, t: VT) -> MetaKey:
    return MetaKey(key, (), t, lambda v: value)


def _first(a: dict, keys: tuple[str, ...]) -> Any:
    """find_aparam: the first key present; a KeyError (named by the planner) otherwise."""
    for k in keys:
        if k in a:
            return a[k]
    raise KeyError(f"audio_config has none of {list(keys)}")


def _audio_row(
    key: str, fn: Callable[[dict], Any], t: VT = VT.UINT32, fill: Callable[[dict], dict] = dict
) -> MetaKey:
    """A row of the audio config (``fill``: the class's field fixes), omitted without one
    (or with an empty one)."""
    return m(key, AUDIO, t=t, value=lambda v: fn(fill(v[AUDIO])) if v.get(AUDIO) else None)


def audio_rows(
    ffn: Callable[[dict], int] = lambda a: _first(a, ("intermediate_size",)),
    fill: Callable[[dict], dict] = dict,
):
    """MmprojModel.set_gguf_parameters, audio half (after the vision half); ``ffn`` the
    feed-forward length, which some classes derive; ``fill`` the class's own field
    names moved to the ones the rows read (Whisper's ``d_model``, ...)."""
    return [
        _audio_row("has_audio_encoder", lambda a: True, VT.BOOL),
        MetaKey(
            "audio.projection_dim",
            (TEXT_WIDTH,),
            VT.UINT32,
            lambda v: v[TEXT_WIDTH] if v.get(AUDIO) else None,
        ),
        _audio_row("audio.embedding_length", lambda a: _first(a, ("hidden_size",)), fill=fill),
        _audio_row("audio.feed_forward_length", ffn, fill=fill),
        _audio_row("audio.block_count", lambda a: _first(a, BLOCK_KEYS), fill=fill),
        _audio_row(
            "audio.attention.head_count",
            lambda a: _first(a, ("num_attention_heads",)),
            fill=fill,
        ),
    ]


@dataclass(frozen=True)
class Projector:
    """One ``--mmproj`` entry (see the module docstring)."""

    hf_archs: tuple[str, ...]
    keep: tuple[str, ...]
    entry: Arch
    force: Callable[[str, str, str], str | None]
    rename: Callable[[str], str] = lambda name: name
    drop: tuple[str, ...] = ()
    required: tuple[tuple[str, ...], ...] = BASE_REQUIRED
    # audio_config fields the entry needs (one of each tuple); non-empty: no audio_config
    # is refused (Gemma 4 Unified: the reference asserts one)
    audio_required: tuple[tuple[str, ...], ...] = ()
    # a special token whose row of the text embedding the projector carries (Pixtral's
    # [IMG_BREAK]); the embedding is then read under the key TOKEN_SOURCE
    token: str | None = None
    # the source names of that text embedding (Mistral's own layout: ``tok_embeddings``)
    embeddings: tuple[str, ...] = _TEXT_EMBEDDINGS
    # a rename that reads the vision view (Qwen3-VL numbers its deepstack mergers by the
    # tower layer they follow, from ``deepstack_visual_indexes``); None: not read (MiniCPM-V
    # 4.6 leaves its window merger out in ``4x`` mode)
    renumber: Callable[[str, dict], str | None] | None = None
    # False: an audio-only projector (no vision_config, no image processor settings)
    vision: bool = True
    # where the audio config is (``audio_required`` is checked there); None: MmprojModel's
    # (``whisper_config``, else ``audio_config``)
    audio_key: str | None = None
    # source tensors folded into new ones: ``(member templates, output templates,
    # fn(*members) -> outputs)``, written (shaped as the first member) when the last
    # member is read, as the reference buffers them (Granite Speech's batch norms)
    fold: tuple[tuple[str, ...], tuple[str, ...], Callable[..., Any]] | None = None
    # an object of the image processor file whose settings are moved up over it (Dots3
    # Note's ``vision_config``)
    pre_nested: str | None = None
    # the class's asserts on the tower configs: ``check(towers)`` gives ``(field,
    # expected, found)`` of the first one that fails (refused before any output), or None
    check: Callable[[dict], tuple[str, Any, Any] | None] | None = None
    # view fields read off the kept source tensors' shapes, ``from_shapes(view, {source
    # key: shape})`` (Phi-4's image size from its position table); the rows are then
    # read after the tensors are listed
    from_shapes: Callable[[dict, dict[str, tuple[int, ...]]], dict] | None = None
    # tensors of a second checkpoint beside the first, written first (after ``extra``):
    # ``(weights file, config file, fn(shapes, config) -> [(GGUF name, shape, fn(get))])``
    # relative to the model folder (Qwen3-TTS's codec decoder in ``speech_tokenizer/``);
    # ``fn`` raises KeyError for a missing tensor / field, ValueError(name) for one it
    # cannot name
    companion: tuple[str, str, Callable[[dict, dict], list]] | None = None
    # view fields the second checkpoint gives, ``fn(config, shapes)`` (MiMo-V2.5's audio
    # config and codebook sizes come from its ``audio_tokenizer/``), read before the rows
    companion_view: Callable[[dict, dict], dict] | None = None
    # the class's get_vision_config when the config has no ``vision_config`` (DeepSeek-V4
    # Flash's top-level ``vision_*`` fields): ``fn(config)`` -> the vision config, None
    # for no tower; KeyError(field) for a field it needs
    vision_of: Callable[[dict], dict | None] | None = None
    # image processor settings the class supplies, under the files' (DeepSeek-V4 Flash's
    # repository has no preprocessor_config.json)
    pre_defaults: tuple[tuple[str, Any], ...] = ()

    def source_key(self, hf_name: str, view: dict | None = None) -> str | None:
        """The name the rules see, or None for a tensor the projector does not read."""
        if self.token is not None and hf_name.endswith(self.embeddings):
            return TOKEN_SOURCE
        if "language_model." in hf_name or any(d in hf_name for d in self.drop):
            return None
        if not hf_name.startswith(self.keep):
            return None
        name = self.rename(hf_name)
        return name if self.renumber is None else self.renumber(name, view or {})


def _base_force(hf: str, gguf: str, outtype: str) -> str | None:
    """MmprojModel.tensor_force_quant: the patch embedding stays F16 at f16, else F32."""
    if ".patch_embd.weight" in gguf or ".patch_merger.weight" in gguf:
        return "F16" if outtype == "f16" else "F32"
    return None


# --------------------------------------------------------------------------- Gemma 3

_SIGLIP = "vision_tower.vision_model."
_SIGLIP_LAYER = _SIGLIP + "encoder.layers.{bid}."
_VBLK = "v.blk.{bid}."


def _wb(pairs: list[tuple[str, str]]) -> list[NameRule]:
    return [NameRule(h + s, g + s) for h, g in pairs for s in (".weight", ".bias")]


SIGLIP_NAMES = _wb(
    [
        (_SIGLIP + "embeddings.patch_embedding", "v.patch_embd"),
        (_SIGLIP + "embeddings.position_embedding", "v.position_embd"),
        (_SIGLIP + "post_layernorm", "v.post_ln"),
        (_SIGLIP_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
        (_SIGLIP_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
        (_SIGLIP_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
        (_SIGLIP_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
        (_SIGLIP_LAYER + "layer_norm1", _VBLK + "ln1"),
        (_SIGLIP_LAYER + "layer_norm2", _VBLK + "ln2"),
        (_SIGLIP_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
        (_SIGLIP_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
    ]
)


def _gemma3_scale_factor(v: dict) -> int | None:
    # written only when not llama.cpp's default of 4 (tiny test models)
    n_per_side = int(v[PREPROCESSOR].get("image_seq_length", 256) ** 0.5)
    f = (v["image_size"] // v["patch_size"]) // n_per_side
    return f if f > 0 and f != 4 else None


def _gemma3_force(hf: str, gguf: str, outtype: str) -> str | None:
    if "input_projection" in hf:  # llama.cpp issue 13025: kept F16 at every outtype
        return "F16"
    if ".embeddings." in hf:
        return "F32"
    return _base_force(hf, gguf, outtype)


GEMMA3_VISION = Projector(
    hf_archs=("Gemma3ForConditionalGeneration",),
    keep=("multi_modal_projector.", "vision_tower.", "multimodal_projector.", "vision_model."),
    drop=("vision_model.head.",),
    rename=lambda name: name.replace("_weight", ".weight"),
    force=_gemma3_force,
    entry=Arch(
        hf_archs=("Gemma3ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            _const("projector_type", "gemma3", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            _const("use_gelu", True, VT.BOOL),
            m("vision.projector.scale_factor", "image_seq_length", value=_gemma3_scale_factor),
        ],
        names=[
            *SIGLIP_NAMES,
            NameRule(
                "multi_modal_projector.mm_input_projection.weight", "mm.input_projection.weight"
            ),
            NameRule("multi_modal_projector.mm_soft_emb_norm.weight", "mm.soft_emb_norm.weight"),
        ],
        # only the projector's RMS norm is Gemma's 1 + w; SigLIP's layer norms are plain
        transforms=[
            Transform(
                "gemma_soft_emb_norm_plus_one",
                r"soft_emb_norm\.weight$",
                GEMMA_NORM.forward,
                GEMMA_NORM.inverse,
                exact=False,
            )
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- LLaVA (Pixtral)

_PIX = "vision_tower."
_PIX_LAYER = _PIX + "transformer.layers.{bid}."


def _pixtral_act(act: str) -> Callable[[dict], bool | None]:
    return lambda v: True if v.get("hidden_act") == act else None


LLAVA_VISION = Projector(
    # Mistral3ForConditionalGeneration (Mistral Small 3.1): the same class in the
    # reference, plus the RMS norm and 2x2 patch merger before the MLP and a
    # spatial_merge_size row from the top-level config
    hf_archs=("LlavaForConditionalGeneration", "Mistral3ForConditionalGeneration"),
    # llama.cpp's Pixtral graph needs the [IMG_BREAK] embedding (v.token_embd.img_break);
    # the pinned converter means to write it but drops the text embedding of an HF
    # checkpoint before it gets there, and mtmd then refuses its file: ours has the row
    token="[IMG_BREAK]",
    keep=(
        "multi_modal_projector.",
        "vision_tower.",
        "vision_encoder.",
        "vision_language_adapter.",
        "patch_merger.",
        "pre_mm_projector_norm",
    ),
    force=_base_force,
    entry=Arch(
        hf_archs=("LlavaForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            _const("projector_type", "pixtral", VT.STRING),
            # hard-coded in modeling_pixtral.py, not in config.json
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-5),
            ),
            MetaKey("use_silu", ("hidden_act",), VT.BOOL, _pixtral_act("silu")),
            MetaKey("use_gelu", ("hidden_act",), VT.BOOL, _pixtral_act("gelu")),
            m(
                "vision.spatial_merge_size",
                "spatial_merge_size",
                value=lambda v: v[GLOBAL].get("spatial_merge_size"),
            ),
        ],
        names=[
            *_wb(
                [
                    (_PIX + "patch_conv", "v.patch_embd"),
                    (_PIX + "ln_pre", "v.pre_ln"),
                    (_PIX_LAYER + "attention.q_proj", _VBLK + "attn_q"),
                    (_PIX_LAYER + "attention.k_proj", _VBLK + "attn_k"),
                    (_PIX_LAYER + "attention.v_proj", _VBLK + "attn_v"),
                    (_PIX_LAYER + "attention.o_proj", _VBLK + "attn_out"),
                    (_PIX_LAYER + "attention_norm", _VBLK + "ln1"),
                    (_PIX_LAYER + "ffn_norm", _VBLK + "ln2"),
                    (_PIX_LAYER + "feed_forward.gate_proj", _VBLK + "ffn_gate"),
                    (_PIX_LAYER + "feed_forward.up_proj", _VBLK + "ffn_up"),
                    (_PIX_LAYER + "feed_forward.down_proj", _VBLK + "ffn_down"),
                    ("multi_modal_projector.linear_1", "mm.1"),
                    ("multi_modal_projector.linear_2", "mm.2"),
                    ("multi_modal_projector.norm", "mm.input_norm"),
                    ("multi_modal_projector.patch_merger.merging_layer", "mm.patch_merger"),
                ]
            ),
        ],
        splits=[
            Split(
                TOKEN_SOURCE,
                ("v.token_embd.img_break",),
                fn=lambda x, v: [x[v[TOKEN_ID]]],
                shapes=lambda shape, v: [tuple(shape[1:])],
            )
        ],
        # the vision tower uses 2-D RoPE in HF's rotate-half layout, like the text model
        transforms=[PERMUTE_Q, PERMUTE_K],
        required=(),
    ),
)

# ------------------------------------------------------ Pixtral in Mistral's own layout

_MV = "vision_encoder."
_MV_LAYER = _MV + "transformer.layers.{bid}."


def _mistral_merge(v: dict) -> int | None:
    # PixtralModel writes the merge size only for the patch-merging projector
    return v.get("spatial_merge_size") if v.get("mm_projector_id") == "patch_merge" else None


#: llama.cpp's PixtralModel (conversion/pixtral.py, ``--mistral-format --mmproj``): the
#: tower under Mistral's names in consolidated*.safetensors, its hyperparameters in
#: params.json's ``vision_encoder`` (the view: that section, with params.json's
#: ``norm_eps`` and ``dim``; see convert/_mistral_mmproj.py).  Q/K rows are stored in
#: ggml's interleaved RoPE layout already: nothing is permuted.  Not registered under an
#: HF class: the Mistral route picks it.
MISTRAL_VISION = Projector(
    hf_archs=(),
    token="[IMG_BREAK]",
    embeddings=("tok_embeddings.weight",),
    keep=LLAVA_VISION.keep,  # LlavaVisionModel's prefixes: any other name is unmapped
    force=_base_force,
    required=(*BASE_REQUIRED, ("rope_theta",), ("image_break_token_id",)),
    entry=Arch(
        hf_archs=(),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            _const("projector_type", "pixtral", VT.STRING),
            m("vision.attention.layer_norm_epsilon", "norm_eps", t=VT.FLOAT32),
            m("rope.freq_base", "rope_theta", t=VT.FLOAT32),
            _const("use_silu", True, VT.BOOL),
            m("vision.spatial_merge_size", "spatial_merge_size", value=_mistral_merge),
        ],
        names=_wb(
            [
                (_MV + "patch_conv", "v.patch_embd"),
                (_MV + "ln_pre", "v.pre_ln"),
                (_MV_LAYER + "attention.wq", _VBLK + "attn_q"),
                (_MV_LAYER + "attention.wk", _VBLK + "attn_k"),
                (_MV_LAYER + "attention.wv", _VBLK + "attn_v"),
                (_MV_LAYER + "attention.wo", _VBLK + "attn_out"),
                (_MV_LAYER + "attention_norm", _VBLK + "ln1"),
                (_MV_LAYER + "ffn_norm", _VBLK + "ln2"),
                (_MV_LAYER + "feed_forward.w1", _VBLK + "ffn_gate"),
                (_MV_LAYER + "feed_forward.w2", _VBLK + "ffn_down"),
                (_MV_LAYER + "feed_forward.w3", _VBLK + "ffn_up"),
                ("vision_language_adapter.w_in", "mm.1"),
                ("vision_language_adapter.w_out", "mm.2"),
                ("pre_mm_projector_norm", "mm.input_norm"),
                ("patch_merger.merging_layer", "mm.patch_merger"),
            ]
        ),
        splits=LLAVA_VISION.entry.splits,  # the [IMG_BREAK] row of the text embedding
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen2.5-VL

_QV = "visual.blocks.{bid}."


def _wa_pattern(v: dict) -> int:
    """Qwen2VLVisionModel's n_wa_pattern: full attention every n-th block (a ValueError
    otherwise, which the planner names)."""
    full = v["fullatt_block_indexes"]
    n = full[0] + 1
    if any(b - a != n for a, b in pairwise(full)):
        raise ValueError(f"fullatt_block_indexes not periodic: {full}")
    return n


def _conv3d_halves(x, v):
    # Conv3d [out, in, 2, p, p] -> two Conv2d kernels, one per temporal slice
    return [x[:, :, 0], x[:, :, 1]]


def _conv3d_join(parts, v):
    # the inverse (GGUF -> HF): the Conv2d kernels stacked on the temporal axis
    return np.stack(parts, axis=2)


def _qwen_force(hf: str, gguf: str, outtype: str) -> str | None:
    if ".position_embd." in gguf:
        return "F32"
    return _base_force(hf, gguf, outtype)


# the rows and names Qwen2-VL and Qwen2.5-VL share: the image size is not in their vision
# config (560, as llama.cpp's class sets), the epsilon is the text model's
_QWEN_IMAGE_SIZE = m("vision.image_size", "image_size", value=lambda v: v.get("image_size", 560))
_QWEN_EPS = m(
    "vision.attention.layer_norm_epsilon",
    "rms_norm_eps",
    t=VT.FLOAT32,
    value=lambda v: v[GLOBAL].get("rms_norm_eps", 1e-6),
)


def _qwen_names(mlp: list[tuple[str, str]]) -> list:
    """A Qwen2(.5)-VL block's rules with its MLP's (hf, gguf) suffixes, and the merger's."""
    return _wb(
        [
            (_QV + "attn.proj", _VBLK + "attn_out"),
            (_QV + "norm1", _VBLK + "ln1"),
            (_QV + "norm2", _VBLK + "ln2"),
            *((_QV + hf, _VBLK + gguf) for hf, gguf in mlp),
            ("visual.merger.ln_q", "v.post_ln"),
            ("visual.merger.mlp.0", "mm.0"),
            ("visual.merger.mlp.2", "mm.2"),
        ]
    )


QWEN25VL_VISION = Projector(
    hf_archs=("Qwen2_5_VLForConditionalGeneration",),
    keep=("visual.",),
    force=_qwen_force,
    # the image size is not in Qwen2.5-VL's vision config: 560 as llama.cpp's class sets
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("Qwen2_5_VLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(BASE_ROWS, vision__image_size=_QWEN_IMAGE_SIZE),
            _const("projector_type", "qwen2.5vl_merger", VT.STRING),
            _const("use_silu", True, VT.BOOL),
            m("vision.n_wa_pattern", "fullatt_block_indexes", value=_wa_pattern),
            _QWEN_EPS,
        ],
        names=_qwen_names(
            [
                ("mlp.gate_proj", "ffn_gate"),
                ("mlp.up_proj", "ffn_up"),
                ("mlp.down_proj", "ffn_down"),
            ]
        ),
        splits=[
            *(
                Split(_QV + f"attn.qkv{s}", tuple(_VBLK + f"attn_{x}{s}" for x in "qkv"), 0)
                for s in (".weight", ".bias")
            ),
            Split(
                "visual.patch_embed.proj.weight",
                ("v.patch_embd.weight", "v.patch_embd.weight.1"),
                fn=_conv3d_halves,
                shapes=lambda s, v: [(s[0], s[1], *s[3:])] * 2,
                join=_conv3d_join,
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- Gemma 4

_G4 = "model.vision_tower."
_G4_LAYER = _G4 + "encoder.layers.{bid}."
_G4_LINEARS = (
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_out"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
)
#: a clippable linear's scalar bounds (``use_clipped_linears``), written as 1-element tensors
_G4_BOUNDS = ("input_max", "input_min", "output_max", "output_min")


def _g4_patch(x, v, ctx):
    # [n_embd, p * p * 3] (patch pixels channel-last) -> a Conv2d kernel [n_embd, 3, p, p]
    p = int((x.shape[1] // 3) ** 0.5)
    return x.reshape(x.shape[0], p, p, 3).transpose(0, 3, 1, 2)


def _g4_patch_shape(s, v, ctx):
    p = int((s[1] // 3) ** 0.5)
    return (s[0], 3, p, p)


def _g4_force(hf: str, gguf: str, outtype: str) -> str | None:
    if (forced := audio_force(hf)) is not None:
        return forced
    if "position_embedding_table" in hf:
        return "F32"
    return _base_force(hf, gguf, outtype)


GEMMA4_VISION = Projector(
    hf_archs=("Gemma4ForConditionalGeneration",),
    # with an audio_config, the audio tower too (``gemma4a``: arch/gemma4_audio.py)
    keep=(_G4, "model.embed_vision.", *AUDIO_PREFIXES),
    force=_g4_force,
    # Gemma4VisionAudioModel sets image_size (unused by llama.cpp) to 224
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("Gemma4ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *(
                _const("vision.image_size", 224, VT.UINT32)
                if isinstance(r, MetaKey) and r.key == "vision.image_size"
                else r
                for r in BASE_ROWS
            ),
            *audio_rows(feed_forward_length),
            _const("vision.projector_type", "gemma4v", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            *(_audio_row(k, fn, t) for k, fn, t in AUDIO_TAIL),
        ],
        names=[
            NameRule(
                "model.embed_vision.embedding_projection.weight", "mm.input_projection.weight"
            ),
            NameRule(_G4 + "patch_embedder.input_proj.weight", "v.patch_embd.weight"),
            NameRule(_G4 + "patch_embedder.position_embedding_table", "v.position_embd.weight"),
            *(
                NameRule(_G4_LAYER + h + ".linear.weight", _VBLK + g + ".weight")
                for h, g in _G4_LINEARS
            ),
            *(
                NameRule(_G4_LAYER + h + "." + b, _VBLK + g + "." + b)
                for h, g in _G4_LINEARS
                for b in _G4_BOUNDS
            ),
            *(
                NameRule(_G4_LAYER + h + ".weight", _VBLK + g + ".weight")
                for h, g in (
                    ("input_layernorm", "ln1"),
                    ("post_attention_layernorm", "attn_post_norm"),
                    ("pre_feedforward_layernorm", "ln2"),
                    ("post_feedforward_layernorm", "ffn_post_norm"),
                    ("self_attn.q_norm", "attn_q_norm"),
                    ("self_attn.k_norm", "attn_k_norm"),
                )
            ),
            *AUDIO_NAMES,
        ],
        transforms=[
            *AUDIO_TRANSFORMS,
            Transform(
                "gemma4_patch_to_conv",
                r"patch_embedder\.input_proj\.weight$",
                _g4_patch,
                lambda x, v, ctx: x.transpose(0, 2, 3, 1).reshape(x.shape[0], -1),
                shape=_g4_patch_shape,
                inverse_shape=lambda s, v, ctx: (s[0], s[1] * s[2] * s[3]),
            ),
            Transform(
                "scalar_to_1d",
                r"\.(input|output)_(max|min)$",
                lambda x, v, ctx: x.reshape(1),
                lambda x, v, ctx: x.reshape(()),
                shape=lambda s, v, ctx: (1,),
                inverse_shape=lambda s, v, ctx: (),
            ),
        ],
        required=(),
    ),
)

# ------------------------------------------------------------ Gemma 4 Unified (gemma4uv/ua)
# Gemma4UnifiedForConditionalGeneration has no vision or audio encoder: an image is cut
# into model patches of p = patch_size x pooling_kernel_size pixels, each flattened
# channel-last (RGBRGB..), layer-normed, projected to ``mm_embed_dim`` (``patch_dense``),
# layer-normed again, given a factorised 2-D position embedding (``pos_embedding``
# [posemb, 2, dim]) and ``pos_norm``; audio is raw waveform frames of ``audio_embed_dim``
# samples.  Both go through ``embed_*.embedding_projection`` into the text width.  The
# reference (Gemma4UnifiedVisionAudioModel) writes them as gemma4v/gemma4a's file with:
#
# * sizes: the vision width is ``mm_embed_dim``, the audio width ``audio_embed_dim``;
#   feed-forward length, block count and head count 0 for both towers; image size 224;
# * ``patch_dense.weight`` columns and ``patch_ln1`` reordered from channel-last to
#   channel-first (ggml's im2col gives RR..GG..BB..): GGUF column i is HF column
#   ``row * p * 3 + col * 3 + ch`` for ``ch, row, col`` = i's channel-first position;
# * ``pos_embedding`` [posemb, 2, dim] -> [2, posemb, dim]; ``pos_norm`` -> ``v.patch_norm.3``.

_G4U = "model.vision_embedder."


def _g4u_perm(v: dict) -> np.ndarray:
    """GGUF column i (channel-first) -> the HF column (channel-last) it takes."""
    p = v.get("model_patch_size") or v["patch_size"] * v["pooling_kernel_size"]
    i = np.arange(p * p * 3)
    ch, row, col = i // (p * p), (i % (p * p)) // p, i % p
    return row * p * 3 + col * 3 + ch


GEMMA4_UNIFIED = Projector(
    hf_archs=("Gemma4UnifiedForConditionalGeneration",),
    keep=(_G4U, "model.embed_vision.", "model.embed_audio."),
    force=_g4_force,
    required=(("patch_size",), ("pooling_kernel_size",), ("mm_embed_dim",)),
    audio_required=(("audio_embed_dim",),),
    entry=Arch(
        hf_archs=("Gemma4UnifiedForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *(
                {
                    "vision.image_size": _const("vision.image_size", 224, VT.UINT32),
                    "vision.embedding_length": m("vision.embedding_length", "mm_embed_dim"),
                    "vision.feed_forward_length": _const(
                        "vision.feed_forward_length", 0, VT.UINT32
                    ),
                    "vision.block_count": _const("vision.block_count", 0, VT.UINT32),
                    "vision.attention.head_count": _const(
                        "vision.attention.head_count", 0, VT.UINT32
                    ),
                }.get(r.key, r)
                if isinstance(r, MetaKey)
                else r
                for r in BASE_ROWS
            ),
            *(
                {
                    "audio.embedding_length": _audio_row(
                        "audio.embedding_length", lambda a: a["audio_embed_dim"]
                    ),
                    "audio.block_count": _audio_row("audio.block_count", lambda a: 0),
                    "audio.attention.head_count": _audio_row(
                        "audio.attention.head_count", lambda a: 0
                    ),
                }.get(r.key, r)
                for r in audio_rows(lambda a: 0)
            ),
            _const("vision.projector_type", "gemma4uv", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            *(
                _audio_row(k, (lambda a: "gemma4ua") if k == "audio.projector_type" else fn, t)
                for k, fn, t in AUDIO_TAIL
            ),
        ],
        names=[
            NameRule(
                "model.embed_vision.embedding_projection.weight", "mm.input_projection.weight"
            ),
            NameRule(
                "model.embed_audio.embedding_projection.weight", "mm.a.input_projection.weight"
            ),
            NameRule(_G4U + "pos_embedding", "v.position_embd.weight"),
            *_wb(
                [
                    (_G4U + "patch_dense", "v.patch_embd"),
                    (_G4U + "patch_ln1", "v.patch_norm.1"),
                    (_G4U + "patch_ln2", "v.patch_norm.2"),
                    (_G4U + "pos_norm", "v.patch_norm.3"),
                ]
            ),
        ],
        transforms=[
            Transform(
                "gemma4uv_patch_columns_chw",
                r"patch_dense\.weight$",
                lambda x, v, ctx: x[:, _g4u_perm(v)],
                lambda x, v, ctx: x[:, np.argsort(_g4u_perm(v))],
            ),
            Transform(
                "gemma4uv_patch_ln1_chw",
                r"patch_ln1\.(weight|bias)$",
                lambda x, v, ctx: x[_g4u_perm(v)],
                lambda x, v, ctx: x[np.argsort(_g4u_perm(v))],
            ),
            Transform(
                "gemma4uv_pos_embedding_axes",
                r"pos_embedding$",
                lambda x, v, ctx: x.transpose(1, 0, 2),
                lambda x, v, ctx: x.transpose(1, 0, 2),
                shape=lambda s, v, ctx: (s[1], s[0], s[2]),
                inverse_shape=lambda s, v, ctx: (s[1], s[0], s[2]),
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen3-VL

_DEEPSTACK = "visual.deepstack_merger_list."


def _qwen3vl_image_size(v: dict) -> int:
    """Qwen3VLVisionModel: the image size from the position table when not given."""
    if "image_size" in v:
        return v["image_size"]
    return int(v.get("num_position_embeddings", 2304) ** 0.5 * v.get("patch_size", 16))


#: MmprojModel's rows with that image size (Qwen3VLVisionModel and its subclasses)
_QWEN3VL_BASE_ROWS = [
    m("vision.image_size", "image_size", value=_qwen3vl_image_size)
    if isinstance(r, MetaKey) and r.key == "vision.image_size"
    else r
    for r in BASE_ROWS
]


def _deepstack_flags(v: dict) -> list[bool] | None:
    flags = [False] * int(v.get("depth") or 0)
    for i in v.get("deepstack_visual_indexes") or []:
        flags[i] = True  # an index past the tower: IndexError, named by the planner
    return flags or None


def _deepstack_renumber(name: str, v: dict) -> str:
    """``deepstack_merger_list.{i}`` -> ``deepstack.{layer}``: the merger's tower layer."""
    if not name.startswith(_DEEPSTACK):
        return name
    i, _, rest = name[len(_DEEPSTACK) :].partition(".")
    idx = v.get("deepstack_visual_indexes") or []
    if not i.isdecimal() or int(i) >= len(idx):
        return name  # no rule names it: an unmapped tensor
    return f"visual.deepstack.{idx[int(i)]}.{rest}"


QWEN3VL_VISION = Projector(
    hf_archs=(
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        # Qwen3.5's tower is Qwen3-VL's without deepstack mergers (one reference class)
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    ),
    # the Hub's checkpoints keep the tower under model.visual. (read as visual.)
    keep=("model.visual.", "visual."),
    rename=lambda name: name.removeprefix("model."),
    renumber=_deepstack_renumber,
    force=_qwen_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("Qwen3VLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *_QWEN3VL_BASE_ROWS,
            _const("projector_type", "qwen3vl_merger", VT.STRING),
            _const("use_gelu", True, VT.BOOL),
            m("vision.spatial_merge_size", "spatial_merge_size"),
            # the text model's epsilon, as the reference reads it
            m(
                "vision.attention.layer_norm_epsilon",
                "rms_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: (v[GLOBAL].get("text_config") or {}).get("rms_norm_eps", 1e-6),
            ),
            m(
                "vision.is_deepstack_layers",
                "deepstack_visual_indexes",
                t=VT.BOOL,
                value=_deepstack_flags,
            ),
        ],
        names=[
            NameRule("visual.patch_embed.proj.bias", "v.patch_embd.bias"),
            *_wb(
                [
                    ("visual.pos_embed", "v.position_embd"),
                    (_QV + "attn.qkv", _VBLK + "attn_qkv"),
                    (_QV + "attn.proj", _VBLK + "attn_out"),
                    (_QV + "norm1", _VBLK + "ln1"),
                    (_QV + "norm2", _VBLK + "ln2"),
                    (_QV + "mlp.linear_fc1", _VBLK + "ffn_up"),
                    (_QV + "mlp.linear_fc2", _VBLK + "ffn_down"),
                    ("visual.merger.norm", "v.post_ln"),
                    ("visual.merger.linear_fc1", "mm.0"),
                    ("visual.merger.linear_fc2", "mm.2"),
                    ("visual.deepstack.{bid}.norm", "v.deepstack.{bid}.norm"),
                    ("visual.deepstack.{bid}.linear_fc1", "v.deepstack.{bid}.fc1"),
                    ("visual.deepstack.{bid}.linear_fc2", "v.deepstack.{bid}.fc2"),
                ]
            ),
        ],
        splits=[
            Split(
                "visual.patch_embed.proj.weight",
                ("v.patch_embd.weight", "v.patch_embd.weight.1"),
                fn=_conv3d_halves,
                shapes=lambda s, v: [(s[0], s[1], *s[3:])] * 2,
                join=_conv3d_join,
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen2-VL

# Qwen2VLVisionModel with a qwen2_vl config: the vision config's ``embed_dim`` is the
# tower width and its ``hidden_size`` the merger's output, which the reference writes as
# the feed-forward length (the tower's MLP is ``mlp_ratio`` wider; llama.cpp reads the
# widths off the tensors); LayerNorms, a GELU-quick MLP (fc1 / fc2), no window attention
QWEN2VL_VISION = Projector(
    hf_archs=("Qwen2VLForConditionalGeneration",),
    keep=("visual.",),
    force=_qwen_force,
    required=(
        ("patch_size",),
        ("embed_dim",),
        ("hidden_size",),
        ("depth",),
        ("num_heads",),
    ),
    entry=Arch(
        hf_archs=("Qwen2VLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=_QWEN_IMAGE_SIZE,
                vision__embedding_length=m("vision.embedding_length", "embed_dim"),
                vision__feed_forward_length=m("vision.feed_forward_length", "hidden_size"),
                vision__block_count=m("vision.block_count", "depth"),
                vision__attention__head_count=m("vision.attention.head_count", "num_heads"),
            ),
            _const("projector_type", "qwen2vl_merger", VT.STRING),
            _QWEN_EPS,
        ],
        names=_qwen_names([("mlp.fc1", "ffn_up"), ("mlp.fc2", "ffn_down")]),
        splits=QWEN25VL_VISION.entry.splits,
        required=(),
    ),
)

# Sarashina2VLVisionModel (conversion/sarashina2.py), Sarashina2-VL: Qwen2VLVisionModel
# unchanged (the config's model_type forced to qwen2_vl), the same ``qwen2vl_merger`` file;
# the remote model's LayerNorm over the merger's output (top-level ``norm.``) is outside
# ``visual.``, so neither converter writes it
SARASHINA2_VISION = replace(
    QWEN2VL_VISION,
    hf_archs=("Sarashina2VisionForCausalLM",),
    entry=replace(QWEN2VL_VISION.entry, hf_archs=("Sarashina2VisionForCausalLM",)),
)

# --------------------------------------------------------------------------- SmolVLM

_IDF = "model.vision_model."
_IDF_LAYER = _IDF + "encoder.layers.{bid}."
#: SmolVLMModel: SmolVLM2's vision configs may leave these out (transformers' defaults)
_SMOLVLM_DEFAULTS = {"hidden_size": 1152, "num_attention_heads": 16, "intermediate_size": 3072}


def _smolvlm_param(key: str) -> Callable[[dict], Any]:
    def get(v: dict) -> Any:
        if key in v:
            return v[key]
        if v.get("model_type") == "smolvlm_vision":
            return _SMOLVLM_DEFAULTS[key]
        raise KeyError(f"vision_config.{key}")

    return get


def _smolvlm_force(hf: str, gguf: str, outtype: str) -> str | None:
    if ".embeddings." in hf:
        return "F32"
    return _base_force(hf, gguf, outtype)


def _longest_edge(v: dict) -> int:
    """The image processor's ``size.longest_edge``, else the tower's image size."""
    size = v[PREPROCESSOR].get("size")
    edge = size.get("longest_edge") if isinstance(size, dict) else None
    return v["image_size"] if edge is None else edge


# SmolVLMModel (Idefics3 and SmolVLM: a SigLIP tower, pixel shuffle by scale_factor and
# one linear projection, mm.model.fc)
SMOLVLM_VISION = Projector(
    hf_archs=("Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration"),
    keep=(_IDF, "model.connector."),
    force=_smolvlm_force,
    required=(("image_size",), ("patch_size",), BLOCK_KEYS),
    entry=Arch(
        hf_archs=("Idefics3ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__embedding_length=m(
                    "vision.embedding_length", "hidden_size", value=_smolvlm_param("hidden_size")
                ),
                vision__feed_forward_length=m(
                    "vision.feed_forward_length",
                    "intermediate_size",
                    value=_smolvlm_param("intermediate_size"),
                ),
                vision__attention__head_count=m(
                    "vision.attention.head_count",
                    "num_attention_heads",
                    value=_smolvlm_param("num_attention_heads"),
                ),
            ),
            _const("projector_type", "idefics3", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-5),
            ),
            m(
                "vision.projector.scale_factor",
                "scale_factor",
                value=lambda v: v[GLOBAL].get("scale_factor", 2),
            ),
            _const("use_gelu", True, VT.BOOL),
            m("vision.preproc_image_size", PREPROCESSOR, value=_longest_edge),
        ],
        names=_wb(
            [
                (_IDF + "embeddings.patch_embedding", "v.patch_embd"),
                (_IDF + "embeddings.position_embedding", "v.position_embd"),
                (_IDF + "post_layernorm", "v.post_ln"),
                (_IDF_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                (_IDF_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                (_IDF_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                (_IDF_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
                (_IDF_LAYER + "layer_norm1", _VBLK + "ln1"),
                (_IDF_LAYER + "layer_norm2", _VBLK + "ln2"),
                (_IDF_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                (_IDF_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                ("model.connector.modality_projection.proj", "mm.model.fc"),
            ]
        ),
        required=(),
    ),
)

# --------------------------------------------------------------------------- LFM2-VL

_LFM2_TOWER = "vision_tower.vision_model."
#: LFM2VLModel reshapes the patch embedding as 16 x 16 x 3 pixels, whatever the config
_LFM2_PATCH = 16


def _lfm2_patch_size(v: dict) -> int:
    if v["patch_size"] != _LFM2_PATCH:
        raise ValueError(f"patch_size {v['patch_size']}: llama.cpp's LFM2-VL reads 16")
    return v["patch_size"]


def _lfm2_blocks(v: dict) -> int:
    """The tower layers up to ``vision_feature_layer`` (Python's notation: -1 the last)."""
    drop = -(v[GLOBAL].get("vision_feature_layer", -1) + 1)
    return next(v[k] for k in BLOCK_KEYS if k in v) - drop


def _patch_to_conv(x, v, ctx):
    # [n_embd, p * p * 3] (patch pixels channel-last) -> a Conv2d kernel [n_embd, 3, p, p]
    return x.reshape(x.shape[0], _LFM2_PATCH, _LFM2_PATCH, 3).transpose(0, 3, 1, 2)


# LFM2VLModel: a SigLIP2 (NaFlex) tower whose patch embedding is a linear layer over
# channel-last pixels, written as a Conv2d kernel; pixel unshuffle by downsample_factor,
# then LayerNorm and a 2-layer GELU MLP.  The image size is not in the config: 256, as
# the reference sets it
LFM2VL_VISION = Projector(
    hf_archs=("Lfm2VlForConditionalGeneration",),
    keep=(
        "model.vision_tower.",
        "model.multi_modal_projector.",
        "vision_tower.",
        "multi_modal_projector.",
    ),
    rename=lambda name: name.removeprefix("model."),
    force=_base_force,
    required=(*NO_IMAGE_SIZE, ("layer_norm_eps",)),
    entry=Arch(
        hf_archs=("Lfm2VlForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=_const("vision.image_size", 256, VT.UINT32),
                vision__patch_size=m("vision.patch_size", "patch_size", value=_lfm2_patch_size),
                # the reference writes the count twice, the second (in place) this one
                vision__block_count=m("vision.block_count", *BLOCK_KEYS, value=_lfm2_blocks),
            ),
            _const("projector_type", "lfm2", VT.STRING),
            m("vision.attention.layer_norm_epsilon", "layer_norm_eps", t=VT.FLOAT32),
            m(
                "vision.projector.scale_factor",
                "downsample_factor",
                value=lambda v: v[GLOBAL].get("downsample_factor", 2),
            ),
            _const("use_gelu", True, VT.BOOL),
        ],
        names=_wb(
            [
                (_LFM2_TOWER + "embeddings.patch_embedding", "v.patch_embd"),
                (_LFM2_TOWER + "embeddings.position_embedding", "v.position_embd"),
                (_LFM2_TOWER + "post_layernorm", "v.post_ln"),
                (_LFM2_TOWER + "encoder.layers.{bid}.self_attn.q_proj", _VBLK + "attn_q"),
                (_LFM2_TOWER + "encoder.layers.{bid}.self_attn.k_proj", _VBLK + "attn_k"),
                (_LFM2_TOWER + "encoder.layers.{bid}.self_attn.v_proj", _VBLK + "attn_v"),
                (_LFM2_TOWER + "encoder.layers.{bid}.self_attn.out_proj", _VBLK + "attn_out"),
                (_LFM2_TOWER + "encoder.layers.{bid}.layer_norm1", _VBLK + "ln1"),
                (_LFM2_TOWER + "encoder.layers.{bid}.layer_norm2", _VBLK + "ln2"),
                (_LFM2_TOWER + "encoder.layers.{bid}.mlp.fc1", _VBLK + "ffn_up"),
                (_LFM2_TOWER + "encoder.layers.{bid}.mlp.fc2", _VBLK + "ffn_down"),
                ("multi_modal_projector.layer_norm", "mm.input_norm"),
                ("multi_modal_projector.linear_1", "mm.1"),
                ("multi_modal_projector.linear_2", "mm.2"),
            ]
        ),
        transforms=[
            Transform(
                "lfm2_patch_to_conv",
                r"embeddings\.patch_embedding\.weight$",
                _patch_to_conv,
                lambda x, v, ctx: x.transpose(0, 2, 3, 1).reshape(x.shape[0], -1),
                shape=lambda s, v, ctx: (s[0], 3, _LFM2_PATCH, _LFM2_PATCH),
                inverse_shape=lambda s, v, ctx: (s[0], s[1] * s[2] * s[3]),
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- Llama 4

_L4 = "vision_model."
_L4_LAYER = _L4 + "model.layers.{bid}."


def _llama4_gelu(v: dict) -> bool:
    if v.get("hidden_act") != "gelu":  # the reference asserts it
        raise ValueError(f"hidden_act {v.get('hidden_act')!r}: llama.cpp's Llama 4 tower is GELU")
    return True


# Llama4VisionModel: a ViT over unfolded patches (a linear patch embedding, kept 2-D), a
# class embedding, 2-D RoPE computed at run time, pixel shuffle and a 2-layer MLP
# adapter (mm.model.mlp.*), then one linear projection (multi_modal_projector.linear_1,
# mm.model.fc despite its number).  One deliberate difference from the pinned
# converter: its gguf-py also maps ``vision_model.model.layers.{bid}.
# post_attention_layernorm`` for Gemma 4 (``attn_post_norm``), and that later entry
# wins, so its file has no ``ln2``: llama.cpp's ViT graph then normalises the attention
# output and not the FFN input, and its image embeddings are wrong.  Ours names the
# norm ``ln2`` (what the converter wrote before Gemma 4's mapping): same tensors, types
# and data under that name
LLAMA4_VISION = Projector(
    hf_archs=("Llama4ForConditionalGeneration",),
    keep=(_L4, "multi_modal_projector."),
    # the position table is a bare parameter: read as a .weight, as the reference does
    rename=lambda name: name + ".weight" if name.endswith("positional_embedding_vlm") else name,
    force=_base_force,
    required=(*BASE_REQUIRED, ("norm_eps",), ("pixel_shuffle_ratio",)),
    entry=Arch(
        hf_archs=("Llama4ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            _const("projector_type", "llama4", VT.STRING),
            m("vision.attention.layer_norm_epsilon", "norm_eps", t=VT.FLOAT32),
            m(
                "vision.projector.scale_factor",
                "pixel_shuffle_ratio",
                value=lambda v: int(1.0 / v["pixel_shuffle_ratio"]),
            ),
            MetaKey("use_gelu", ("hidden_act",), VT.BOOL, _llama4_gelu),
        ],
        names=[
            NameRule(_L4 + "class_embedding", "v.class_embd"),
            NameRule("multi_modal_projector.linear_1.weight", "mm.model.fc.weight"),
            *_wb(
                [
                    (_L4 + "patch_embedding.linear", "v.patch_embd"),
                    (_L4 + "positional_embedding_vlm", "v.position_embd"),
                    (_L4 + "layernorm_pre", "v.pre_ln"),
                    (_L4 + "layernorm_post", "v.post_ln"),
                    (_L4_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                    (_L4_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                    (_L4_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                    (_L4_LAYER + "self_attn.o_proj", _VBLK + "attn_out"),
                    (_L4_LAYER + "input_layernorm", _VBLK + "ln1"),
                    # the pre-FFN norm: ln2, which llama.cpp's ViT graph reads there (the
                    # pinned gguf-py maps the name to Gemma 4's attn_post_norm: see
                    # LLAMA4_VISION)
                    (_L4_LAYER + "post_attention_layernorm", _VBLK + "ln2"),
                    (_L4_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                    (_L4_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                    (_L4 + "vision_adapter.mlp.fc1", "mm.model.mlp.1"),
                    (_L4 + "vision_adapter.mlp.fc2", "mm.model.mlp.2"),
                ]
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- LightOnOCR

_LIGHTON_RENAMES = (
    ("model.vision_encoder.", _PIX),
    ("model.vision_projection.", "multi_modal_projector."),
)


def _lighton_rename(name: str) -> str:
    for old, new in _LIGHTON_RENAMES:
        name = name.replace(old, new)
    return name


# LightOnOCRVisionModel (conversion/lighton_ocr.py): Mistral 3's Pixtral tower, RMS norm,
# 2x2 patch merger and MLP under transformers' LightOnOcr names, renamed to LLaVA's first;
# no [IMG_BREAK] row (mtmd's lightonocr graph has no row breaks); the projector type
# ``lightonocr`` overwrites ``pixtral`` in place (one key, the second value)
LIGHTONOCR_VISION = Projector(
    hf_archs=("LightOnOCRForConditionalGeneration",),
    keep=("model.vision_encoder.", "model.vision_projection.", *LLAVA_VISION.keep),
    rename=_lighton_rename,
    force=_base_force,
    entry=replace(
        LLAVA_VISION.entry,
        hf_archs=("LightOnOCRForConditionalGeneration",),
        meta=replace_rows(
            LLAVA_VISION.entry.meta,
            projector_type=_const("projector_type", "lightonocr", VT.STRING),
        ),
        splits=[],
    ),
)

# --------------------------------------------------------------------------- PaddleOCR-VL

_PADDLE = "visual.vision_model."
_PADDLE_LAYER = _PADDLE + "encoder.layers.{bid}."


def _pixels(key: str) -> Callable[[dict], int]:
    """The image processor's ``min_pixels`` / ``max_pixels`` (the reference reads both)."""

    def get(v: dict) -> int:
        n = v[PREPROCESSOR].get(key)
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise KeyError(f"preprocessor_config.json {key} (a positive integer): {n!r}")
        return n

    return get


# PaddleOCRVisionModel (conversion/ernie.py; the vision config names this class, which is
# how the reference picks it): a SigLIP-style tower (2-D RoPE computed at run time, so
# no permutation) under ``visual.vision_model.``, and the ``mlp_AR`` projector (LayerNorm,
# GELU MLP over 2x2-merged patches).  The image size is the square root of the image
# processor's ``max_pixels`` (the config's is not written); the epsilon row reads
# ``rms_norm_eps`` from the vision config, which has none: 1e-6, as the reference.  The
# packed-sequence position table and the SigLIP pooling head of the Hub's checkpoints
# are not read
PADDLEOCR_VISION = Projector(
    hf_archs=("PaddleOCRVisionModel",),
    keep=(_PADDLE, "mlp_AR."),
    drop=("packing_position_embedding", "vision_model.head."),
    force=_base_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("PaddleOCRVisionModel",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m(
                    "vision.image_size",
                    PREPROCESSOR,
                    value=lambda v: math.isqrt(_pixels("max_pixels")(v)),
                ),
            ),
            _const("projector_type", "paddleocr", VT.STRING),
            m("vision.image_max_pixels", PREPROCESSOR, value=_pixels("max_pixels")),
            m("vision.image_min_pixels", PREPROCESSOR, value=_pixels("min_pixels")),
            _const("use_gelu", True, VT.BOOL),
            m(
                "vision.attention.layer_norm_epsilon",
                "rms_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("rms_norm_eps", 1e-6),
            ),
        ],
        names=_wb(
            [
                (_PADDLE + "embeddings.patch_embedding", "v.patch_embd"),
                (_PADDLE + "embeddings.position_embedding", "v.position_embd"),
                (_PADDLE + "post_layernorm", "v.post_ln"),
                (_PADDLE_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                (_PADDLE_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                (_PADDLE_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                (_PADDLE_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
                (_PADDLE_LAYER + "layer_norm1", _VBLK + "ln1"),
                (_PADDLE_LAYER + "layer_norm2", _VBLK + "ln2"),
                (_PADDLE_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                (_PADDLE_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                ("mlp_AR.pre_norm", "mm.input_norm"),
                ("mlp_AR.linear_1", "mm.1"),
                ("mlp_AR.linear_2", "mm.2"),
            ]
        ),
        required=(),
    ),
)

# --------------------------------------------------------------------------- Janus-Pro

_JV = "vision_model."
_JV_LAYER = _JV + "encoder.layers.{bid}."
#: the aligner's hidden layers named (mm.1, mm.2, ...): gguf-py numbers them after fc1
_JANUS_ALIGNER_MAX = 8


def _janus_ffn(v: dict) -> int:
    """JanusProVisionModel: the Hub's vision config has no intermediate_size; the MLP is
    ``round(hidden_size * mlp_ratio)`` wide (Python's round, as the reference), the
    ratio JanusVisionConfig's default 4.0 when absent (the reference reads the config
    through transformers' AutoConfig, which fills it in)."""
    if "intermediate_size" in v:
        return v["intermediate_size"]
    return round(v["hidden_size"] * v.get("mlp_ratio", 4.0))


def _janus_act(act: str) -> Callable[[dict], bool | None]:
    # JanusVisionConfig's default activation is GELU (AutoConfig fills it in)
    return lambda v: True if str(v.get("hidden_act", "gelu")).lower() == act else None


# JanusProVisionModel (conversion/januspro.py): a SigLIP ViT (the attention output named
# projection_layer) and the aligner MLP (fc1 -> mm.0, hidden_layers.{i} -> mm.{i+1});
# the image-generation half (VQ model, generation_*) is not read
JANUS_VISION = Projector(
    hf_archs=("JanusForConditionalGeneration",),
    keep=("model.vision_model.", "vision_model.", "model.aligner.", "aligner."),
    rename=lambda name: name.removeprefix("model."),
    force=_base_force,
    required=tuple(k for k in BASE_REQUIRED if k != ("intermediate_size", "vt_intermediate_size")),
    entry=Arch(
        hf_archs=("JanusForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__feed_forward_length=m(
                    "vision.feed_forward_length", "intermediate_size", value=_janus_ffn
                ),
            ),
            _const("projector_type", "janus_pro", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            MetaKey("use_gelu", ("hidden_act",), VT.BOOL, _janus_act("gelu")),
            MetaKey("use_silu", ("hidden_act",), VT.BOOL, _janus_act("silu")),
        ],
        names=[
            *_wb(
                [
                    (_JV + "embeddings.patch_embedding", "v.patch_embd"),
                    (_JV + "embeddings.position_embedding", "v.position_embd"),
                    (_JV + "post_layernorm", "v.post_ln"),
                    (_JV_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                    (_JV_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                    (_JV_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                    (_JV_LAYER + "self_attn.projection_layer", _VBLK + "attn_out"),
                    (_JV_LAYER + "layer_norm1", _VBLK + "ln1"),
                    (_JV_LAYER + "layer_norm2", _VBLK + "ln2"),
                    (_JV_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                    (_JV_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                    ("aligner.fc1", "mm.0"),
                    *(
                        (f"aligner.hidden_layers.{i}", f"mm.{i + 1}")
                        for i in range(_JANUS_ALIGNER_MAX)
                    ),
                ]
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- CogVLM

_COG = "model.vision."
_COG_LAYER = _COG + "transformer.layers.{bid}."

# CogVLMVisionModel (conversion/cogvlm.py; remote code on the Hub, no transformers class):
# an EVA2-CLIP tower (a trailing CLS row in llama.cpp's graph, post-norm blocks with fused
# QKV), then the GLU projector (linear_proj -> LayerNorm -> GELU -> SwiGLU MLP at the
# text's widths) and the begin / end-of-image rows; the text is arch/cogvlm.py's
COGVLM_VISION = Projector(
    hf_archs=("CogVLMForCausalLM",),
    keep=(_COG,),
    force=_base_force,
    entry=Arch(
        hf_archs=("CogVLMForCausalLM",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            _const("projector_type", "cogvlm", VT.STRING),
        ],
        names=[
            NameRule(_COG + "patch_embedding.cls_embedding", "v.class_embd"),
            NameRule(_COG + "boi", "v.boi"),
            NameRule(_COG + "eoi", "v.eoi"),
            *_wb(
                [
                    (_COG + "patch_embedding.proj", "v.patch_embd"),
                    (_COG + "patch_embedding.position_embedding", "v.position_embd"),
                    (_COG_LAYER + "attention.query_key_value", _VBLK + "attn_qkv"),
                    (_COG_LAYER + "attention.dense", _VBLK + "attn_out"),
                    (_COG_LAYER + "input_layernorm", _VBLK + "ln1"),
                    (_COG_LAYER + "post_attention_layernorm", _VBLK + "ln2"),
                    (_COG_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                    (_COG_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                    (_COG + "linear_proj.linear_proj", "mm.model.fc"),
                    # gguf-py maps norm1 twice; its later row (post_fc_norm) wins
                    (_COG + "linear_proj.norm1", "mm.post_fc_norm"),
                    (_COG + "linear_proj.dense_h_to_4h", "mm.up"),
                    (_COG + "linear_proj.gate_proj", "mm.gate"),
                    (_COG + "linear_proj.dense_4h_to_h", "mm.down"),
                ]
            ),
        ],
        required=(),
    ),
)

# --------------------------------------------------------------------------- InternVL

_IV = "vision_model."
_IV_LAYER = _IV + "encoder.layers.{bid}."


def _first_of(key: str) -> Callable[[dict], Any]:
    """InternVisionModel: an image or patch size given as a list is its first entry."""
    return lambda v: v[key][0] if isinstance(v[key], list) else v[key]


def _internvl_act(act: str) -> Callable[[dict], bool | None]:
    def get(v: dict) -> bool | None:
        if v["hidden_act"] not in ("silu", "gelu"):  # the reference raises
            raise ValueError(f"hidden_act {v['hidden_act']!r}: InternVL's tower is GELU or SiLU")
        return True if v["hidden_act"] == act else None

    return get


def _internvl_scale(v: dict) -> int:
    ratio = v[GLOBAL].get("downsample_ratio")
    if ratio is None:  # the reference asserts it
        raise ValueError("downsample_ratio missing from config.json")
    return int(1.0 / ratio)


def _internvl_tiles(key: str) -> Callable[[dict], int | None]:
    # older checkpoints have none: not written (mtmd then uses 1 and 12)
    return lambda v: v[GLOBAL].get(key, 0) or None


def _internvl_rename(name: str) -> str:
    """InternVisionModel.filter_tensors: the layer scales and the position table are bare
    parameters, read as ``.weight``s (the CLS token keeps its name)."""
    if (".ls" in name or ".lambda_" in name or "position_embedding" in name) and not (
        name.endswith(".weight")
    ):
        return name + ".weight"
    return name


# InternVisionModel (conversion/internvl.py), OpenGVLab's InternVL 2.5 / 3 layout: the
# config names InternVLChatModel (text in llm_config) and its vision_config
# InternVisionModel, which picks this entry.  An InternViT (CLS token, fused QKV split in
# three, layer scales ls1/ls2), pixel shuffle by 1 / downsample_ratio, then mlp1 (LayerNorm
# + 2-layer GELU MLP) as mm.model.mlp.{0,1,3}.  Intern-S1's model.vision_tower.* layout is
# not read (its tensors are not under these prefixes: refused as no vision tensors)
INTERNVL_VISION = Projector(
    hf_archs=("InternVisionModel",),
    keep=(_IV, "mlp1."),
    rename=_internvl_rename,
    force=_qwen_force,
    required=(*BASE_REQUIRED, ("layer_norm_eps",), ("hidden_act",)),
    entry=Arch(
        hf_archs=("InternVisionModel",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m("vision.image_size", value=_first_of("image_size")),
                vision__patch_size=m("vision.patch_size", value=_first_of("patch_size")),
            ),
            _const("projector_type", "internvl", VT.STRING),
            m("vision.attention.layer_norm_epsilon", "layer_norm_eps", t=VT.FLOAT32),
            MetaKey("use_silu", ("hidden_act",), VT.BOOL, _internvl_act("silu")),
            MetaKey("use_gelu", ("hidden_act",), VT.BOOL, _internvl_act("gelu")),
            m("vision.projector.scale_factor", value=_internvl_scale),
            m("vision.preproc_min_tiles", value=_internvl_tiles("min_dynamic_patch")),
            m("vision.preproc_max_tiles", value=_internvl_tiles("max_dynamic_patch")),
        ],
        names=[
            NameRule(_IV + "embeddings.class_embedding", "v.class_embd"),
            NameRule(_IV + "embeddings.position_embedding.weight", "v.position_embd.weight"),
            NameRule(_IV_LAYER + "ls1.weight", _VBLK + "ls1.weight"),
            NameRule(_IV_LAYER + "ls2.weight", _VBLK + "ls2.weight"),
            *_wb(
                [
                    (_IV + "embeddings.patch_embedding", "v.patch_embd"),
                    (_IV_LAYER + "attn.proj", _VBLK + "attn_out"),
                    (_IV_LAYER + "attn.q_norm", _VBLK + "attn_q_norm"),
                    (_IV_LAYER + "attn.k_norm", _VBLK + "attn_k_norm"),
                    (_IV_LAYER + "norm1", _VBLK + "ln1"),
                    (_IV_LAYER + "norm2", _VBLK + "ln2"),
                    (_IV_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                    (_IV_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                    ("mlp1.{bid}", "mm.model.mlp.{bid}"),
                ]
            ),
        ],
        splits=[
            Split(_IV_LAYER + f"attn.qkv{s}", tuple(_VBLK + f"attn_{x}{s}" for x in "qkv"), 0)
            for s in (".weight", ".bias")
        ],
        required=(),
    ),
)


# ------------------------------------------------------------- Whisper audio (ultravox.py)


def _whisper_tail(projector_type: str, stack_factor: Callable[[dict], int | None]) -> list:
    """WhisperEncoderModel's rows after the audio sizes: the projector type (a subclass
    writes its own over the base's, in place), mel bins, epsilon, then the subclass's
    stack factor (None: none)."""
    return [
        _const("projector_type", projector_type, VT.STRING),
        _audio_row("audio.num_mel_bins", lambda a: a["num_mel_bins"], fill=whisper_fill),
        _audio_row(
            "audio.attention.layer_norm_epsilon",
            lambda a: a.get("layer_norm_eps", 1e-5),
            VT.FLOAT32,
            fill=whisper_fill,
        ),
        m("audio.projector.stack_factor", value=stack_factor),
    ]


#: the audio config fields WhisperEncoderModel reads (one of each tuple)
_WHISPER_REQUIRED = (
    ("hidden_size", "d_model"),
    ("intermediate_size", "encoder_ffn_dim"),
    BLOCK_KEYS,
    ("num_attention_heads", "encoder_attention_heads"),
    ("num_mel_bins",),
)


def _whisper(
    hf_arch: str,
    projector_type: str,
    mm: list[tuple[str, str]],
    stack_factor: Callable[[dict], int | None] = lambda v: None,
    conv_type: str = "F16",
) -> Projector:
    """An audio-only Whisper-encoder projector; ``mm`` its projector linears, ``conv_type``
    the type its conv weights are forced to."""
    return Projector(
        hf_archs=(hf_arch,),
        keep=(WHISPER_PREFIX, "multi_modal_projector."),
        force=lambda hf, gguf, outtype: whisper_force(hf, conv_type),
        vision=False,
        required=(),
        audio_required=_WHISPER_REQUIRED,
        entry=Arch(
            hf_archs=(hf_arch,),
            gguf_arch="clip",
            meta=[
                FILE_TYPE,
                *audio_rows(lambda a: _first(a, ("intermediate_size",)), fill=whisper_fill),
                *_whisper_tail(projector_type, stack_factor),
            ],
            names=[*WHISPER_NAMES, *projector_names(mm)],
            transforms=WHISPER_TRANSFORMS,
            required=(),
        ),
    )


# VoxtralWhisperEncoderModel: the encoder's outputs stacked by 4 (hard-coded: Voxtral's
# intermediate_size is 4 x its width) into a 2-layer GELU MLP
VOXTRAL_AUDIO = _whisper(
    "VoxtralForConditionalGeneration",
    "voxtral",
    [
        ("multi_modal_projector.linear_1", "mm.a.mlp.1"),
        ("multi_modal_projector.linear_2", "mm.a.mlp.2"),
    ],
    stack_factor=lambda v: 4,
)

# WhisperEncoderModel (Qwen2-Audio): the encoder average-pools by 2 before its final norm
# (mtmd's graph knows it by the projector type), then one linear projection
QWEN2AUDIO_AUDIO = _whisper(
    "Qwen2AudioForConditionalGeneration",
    "qwen2a",
    [("multi_modal_projector.linear", "mm.a.fc")],
)

# AudioFlamingo3WhisperEncoderModel: Qwen2-Audio's pooled encoder, a 2-layer GELU MLP
# with biases; its conv weights F32 at every type (trained in bf16: not narrowed to f16)
AUDIOFLAMINGO3_AUDIO = _whisper(
    "AudioFlamingo3ForConditionalGeneration",
    "musicflamingo",
    [
        ("multi_modal_projector.linear_1", "mm.a.mlp.1"),
        ("multi_modal_projector.linear_2", "mm.a.mlp.2"),
    ],
    conv_type="F32",
)

# UltravoxWhisperEncoderModel (remote code on the Hub, a transformers Whisper encoder as its
# tower): the encoder's outputs stacked by the top-level ``stack_factor`` (required: the
# reference's KeyError) into RMSNorm ``ln_pre``, ``linear_1``, SwiGLU, RMSNorm ``ln_mid``,
# ``linear_2`` (no biases; mtmd's ``ultravox`` graph)
ULTRAVOX_AUDIO = _whisper(
    "UltravoxModel",
    "ultravox",
    [
        ("multi_modal_projector.ln_pre", "mm.a.norm_pre"),
        ("multi_modal_projector.linear_1", "mm.a.mlp.1"),
        ("multi_modal_projector.ln_mid", "mm.a.norm_mid"),
        ("multi_modal_projector.linear_2", "mm.a.mlp.2"),
    ],
    stack_factor=lambda v: v[GLOBAL]["stack_factor"],
)

# MERaLiONWhisperEncoderModel (remote code): the Whisper tower under ``speech_encoder.``
# (read as ``audio_tower.``), its config ``speech_config``; ``ln_speech`` (a LayerNorm,
# with bias) -> ``mm.a.norm_pre``, the adaptor's four linears (with biases) ->
# ``mm.a.mlp.0``-``3``; the stack factor ``speech_mlp_scale_factor`` (15 when absent);
# the text decoder (``text_decoder.``) is not read
_MER = "speech_audio_adapter."
MERALION2_AUDIO = replace(
    _whisper(
        "MERaLiON2ForConditionalGeneration",
        "meralion",
        [
            ("ln_speech", "mm.a.norm_pre"),
            (_MER + "mlp_adapter.0", "mm.a.mlp.0"),
            (_MER + "gate_proj", "mm.a.mlp.1"),
            (_MER + "pool_proj", "mm.a.mlp.2"),
            (_MER + "out_proj", "mm.a.mlp.3"),
        ],
        stack_factor=lambda v: v[GLOBAL].get("speech_mlp_scale_factor", 15),
    ),
    keep=("speech_encoder.", "ln_speech.", _MER),
    rename=lambda name: (
        WHISPER_PREFIX + name[len("speech_encoder.") :]
        if name.startswith("speech_encoder.")
        else name
    ),
    audio_key="speech_config",
)

# GlmASRWhisperEncoderModel (GLM-ASR-Nano's older custom-code layout, ``GlmasrModel``):
# the Whisper tower under ``audio_encoder.whisper.`` (read as ``audio_tower.``), its config
# ``whisper_config``; the adapter's LayerNorm ``audio_encoder.layer_norm`` ->
# ``mm.a.norm_pre``, ``audio_encoder.adapting.{0,2}`` -> ``mm.a.mlp.{1,2}``; the
# ``[2, n_embd]`` ``audio_bos_eos_token`` split into ``v.boi`` / ``v.eoi`` rows; the stack
# factor the top-level ``merge_factor`` (mtmd's ``glma`` graph).  The reference's rename
# of an ``audio_encoder.proj`` tensor leaves it unmappable (its skip never matches): a
# checkpoint with one fails there; ours refuses it as an unread tensor
_GA = "audio_encoder."


def _glmasr_rename(name: str) -> str:
    if name.startswith(_GA + "whisper."):
        return WHISPER_PREFIX + name[len(_GA + "whisper.") :]
    if name.startswith(_GA + "layer_norm."):
        return "multi_modal_projector.ln_pre." + name[len(_GA + "layer_norm.") :]
    for i, j in (("0", "1"), ("2", "2")):
        if name.startswith(_GA + f"adapting.{i}."):
            return f"multi_modal_projector.linear_{j}." + name[len(_GA + "adapting.x.") :]
    return name


_GLMASR = _whisper(
    "GlmasrModel",
    "glma",
    [
        ("multi_modal_projector.ln_pre", "mm.a.norm_pre"),
        ("multi_modal_projector.linear_1", "mm.a.mlp.1"),
        ("multi_modal_projector.linear_2", "mm.a.mlp.2"),
    ],
    stack_factor=lambda v: v[GLOBAL]["merge_factor"],
)
GLMASR_AUDIO = replace(
    _GLMASR,
    keep=(_GA,),
    rename=_glmasr_rename,
    entry=replace(
        _GLMASR.entry,
        splits=[
            Split(
                _GA + "audio_bos_eos_token.weight",
                ("v.boi", "v.eoi"),
                fn=lambda x, cfg: [x[0], x[1]],
                shapes=lambda s, cfg: [(s[1],), (s[1],)],
                join=lambda parts, cfg: np.stack(parts),
            )
        ],
    ),
)

# --------------------------------------------------------------------------- GLM-4V

_GV = "visual.blocks.{bid}."


def _glm_act(act: str) -> Callable[[dict], bool | None]:
    return lambda v: True if str(v.get("hidden_act", "")).lower() == act else None


# Glm4VVisionModel (a Qwen3VLVisionModel subclass): MmprojModel's rows, the image size
# from the position table when not given, then its own; the tower as Qwen3-VL's (Conv3d
# split in two Conv2d kernels, fused QKV), its MLP SwiGLU, a Conv2d 2x2 downsample
# (``mm.patch_merger``, F16 at f16 else F32) and a SwiGLU merger mapped by gguf-py;
# GLM-OCR's tower adds biases and per-head Q/K norms, and has no position table
GLM4V_VISION = Projector(
    hf_archs=(
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "GlmOcrForConditionalGeneration",
    ),
    keep=("model.visual.", "visual."),
    rename=lambda name: name.removeprefix("model."),
    force=_qwen_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("Glm4vForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *_QWEN3VL_BASE_ROWS,
            _const("projector_type", "glm4v", VT.STRING),
            MetaKey("use_gelu", ("hidden_act",), VT.BOOL, _glm_act("gelu")),
            MetaKey("use_silu", ("hidden_act",), VT.BOOL, _glm_act("silu")),
            # the vision config's own epsilon here (Qwen3-VL reads the text model's)
            m(
                "vision.attention.layer_norm_epsilon",
                "rms_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("rms_norm_eps", 1e-5),
            ),
        ],
        names=[
            NameRule("visual.patch_embed.proj.bias", "v.patch_embd.bias"),
            *_wb(
                [
                    ("visual.embeddings.position_embedding", "v.position_embd"),
                    ("visual.post_conv_layernorm", "v.norm_embd"),
                    ("visual.post_layernorm", "v.post_ln"),
                    ("visual.downsample", "mm.patch_merger"),
                    (_GV + "attn.qkv", _VBLK + "attn_qkv"),
                    (_GV + "attn.proj", _VBLK + "attn_out"),
                    # GLM-OCR's per-head Q/K norms
                    (_GV + "attn.q_norm", _VBLK + "attn_q_norm"),
                    (_GV + "attn.k_norm", _VBLK + "attn_k_norm"),
                    (_GV + "norm1", _VBLK + "ln1"),
                    (_GV + "norm2", _VBLK + "ln2"),
                    (_GV + "mlp.gate_proj", _VBLK + "ffn_gate"),
                    (_GV + "mlp.up_proj", _VBLK + "ffn_up"),
                    (_GV + "mlp.down_proj", _VBLK + "ffn_down"),
                    ("visual.merger.proj", "mm.model.fc"),
                    ("visual.merger.post_projection_norm", "mm.post_norm"),
                    ("visual.merger.gate_proj", "mm.gate"),
                    ("visual.merger.up_proj", "mm.up"),
                    ("visual.merger.down_proj", "mm.down"),
                ]
            ),
        ],
        splits=QWEN3VL_VISION.entry.splits,
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen2.5-Omni

_OMNI_AUDIO_KEYS = (("d_model",), ("encoder_ffn_dim",), ("encoder_attention_heads",),
                    ("num_mel_bins",), BLOCK_KEYS)  # fmt: skip


def _omni_force(hf: str, gguf: str, outtype: str) -> str | None:
    return omni_audio_force(hf) or _qwen_force(hf, gguf, outtype)


# Qwen25OmniModel: the thinker's Qwen2.5-VL tower (separate attention q / k / v, not a
# fused qkv) and its Whisper-style audio encoder (arch/qwen_omni_audio.py) in one file,
# projector type ``qwen2.5o``; both towers under ``thinker.`` in the Hub's checkpoints,
# their configs in ``thinker_config``.  The rows: the vision base, the audio half (and
# its mel bins and epsilon), then Qwen2.5-VL's (the projector type written twice by the
# reference: once in place)
QWEN25OMNI_VISION = Projector(
    hf_archs=("Qwen2_5OmniModel",),
    keep=("thinker.visual.", "thinker." + OMNI_AUDIO, "visual.", OMNI_AUDIO),
    rename=lambda name: name.removeprefix("thinker."),
    drop=("audio_bos_eos_token",),
    force=_omni_force,
    required=QWEN25VL_VISION.required,
    audio_required=_OMNI_AUDIO_KEYS,
    entry=Arch(
        hf_archs=("Qwen2_5OmniModel",),
        gguf_arch="clip",
        meta=[
            *replace_rows(BASE_ROWS, vision__image_size=_QWEN_IMAGE_SIZE),
            *audio_rows(fill=omni_audio_fill),
            *(_audio_row(k, fn, t) for k, fn, t in OMNI_AUDIO_TAIL),
            _const("projector_type", "qwen2.5o", VT.STRING),
            _const("use_silu", True, VT.BOOL),
            m("vision.n_wa_pattern", "fullatt_block_indexes", value=_wa_pattern),
            _QWEN_EPS,
        ],
        names=[
            *OMNI_AUDIO_NAMES,
            *QWEN25VL_VISION.entry.names,
            *_wb([(_QV + f"attn.{x}", _VBLK + f"attn_{x}") for x in "qkv"]),
        ],
        splits=QWEN25VL_VISION.entry.splits,
        transforms=OMNI_AUDIO_TRANSFORMS,
        extra={POSITION_EMBD: lambda v: sinusoids(v[AUDIO]["d_model"])},
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen3-Omni

#: Qwen3OmniMmprojModel's merger spellings -> Qwen3-VL's (``merger_list`` the deepstack)
_OMNI3_MERGER = ((".ln_q", ".norm"), (".mlp.0", ".linear_fc1"), (".mlp.2", ".linear_fc2"))


def _omni3_rename(name: str) -> str:
    name = name.removeprefix("thinker.").removeprefix("model.")
    if name.startswith(("visual.merger.", "visual.merger_list.")):
        name = name.replace("visual.merger_list.", _DEEPSTACK, 1)
        for a, b in _OMNI3_MERGER:
            name = name.replace(a, b)
    return name


_QWEN3VL_ROWS = QWEN3VL_VISION.entry.meta

# Qwen3OmniMmprojModel: the thinker's Qwen3-VL tower (its merger spelled ln_q / mlp.0 /
# mlp.2, the deepstack mergers ``merger_list``) and a Whisper-style audio encoder with
# Conv2d sub-sampling (``qwen3a``: arch/qwen_omni_audio.py) in one file.  Rows: the vision
# base, the audio half (and mel bins, epsilon), Qwen3-VL's without its projector type,
# then ``clip.vision.projector_type`` and ``clip.audio.projector_type`` (the reference
# writes the base rows twice: in place).  One deliberate difference: the pinned
# reference renames the Hub's ``thinker.visual.*`` to ``model.visual.*``, which its
# tensor map does not know (it stops at the first vision tensor, nothing written); ours
# reads them as ``visual.*``, and its file is the reference's for the same checkpoint
# with the tower saved as ``visual.*`` (which the reference converts)
QWEN3OMNI_VISION = Projector(
    hf_archs=("Qwen3OmniMoeForConditionalGeneration",),
    keep=("thinker.visual.", "thinker." + OMNI_AUDIO, "model.visual.", "visual.", OMNI_AUDIO),
    rename=_omni3_rename,
    renumber=_deepstack_renumber,
    force=_omni_force,
    required=QWEN3VL_VISION.required,
    audio_required=_OMNI_AUDIO_KEYS,
    entry=Arch(
        hf_archs=("Qwen3OmniMoeForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *_QWEN3VL_ROWS[: len(BASE_ROWS)],
            *audio_rows(fill=omni_audio_fill),
            *(_audio_row(k, fn, t) for k, fn, t in OMNI_AUDIO_TAIL),
            *(
                r
                for r in _QWEN3VL_ROWS[len(BASE_ROWS) :]
                if not (isinstance(r, MetaKey) and r.key == "projector_type")
            ),
            _const("vision.projector_type", "qwen3vl_merger", VT.STRING),
            _audio_row("audio.projector_type", lambda a: "qwen3a", VT.STRING),
        ],
        names=[*OMNI_AUDIO3_NAMES, *QWEN3VL_VISION.entry.names],
        splits=QWEN3VL_VISION.entry.splits,
        transforms=OMNI_AUDIO3_TRANSFORMS,
        extra={POSITION_EMBD: lambda v: sinusoids(v[AUDIO]["d_model"])},
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen3-ASR

#: transformers 5's spellings of Qwen3-ASR's audio output layers -> Qwen's own (in the tower)
_ASR_PROJECTOR = (
    ("multi_modal_projector.linear_1.", OMNI_AUDIO + "proj1."),
    ("multi_modal_projector.linear_2.", OMNI_AUDIO + "proj2."),
)


def _qwen3asr_rename(name: str) -> str:
    name = name.removeprefix("thinker.").removeprefix("model.")
    for a, b in _ASR_PROJECTOR:
        if name.startswith(a):
            return b + name[len(a) :]
    return name


# Qwen3ASRMmprojModel: Qwen3OmniMmprojModel with the vision half off -- Qwen3-Omni's audio
# encoder alone (``qwen3a``, arch/qwen_omni_audio.py): the base row, the audio half (and
# mel bins, epsilon), ``clip.audio.projector_type``.  The pinned reference reads only
# the layout of Qwen's own release (configs under ``thinker_config``, tensors under
# ``thinker.``, output layers ``audio_tower.proj1`` / ``proj2``); on transformers 5's
# (``audio_config`` at the top, ``model.audio_tower.*``, ``model.multi_modal_projector.
# linear_1`` / ``linear_2``) it stops at ``thinker_config``.  Ours reads both and writes
# the same file for the same weights
QWEN3ASR_AUDIO = Projector(
    hf_archs=("Qwen3ASRForConditionalGeneration",),
    keep=(
        "thinker." + OMNI_AUDIO,
        "model." + OMNI_AUDIO,
        "model.multi_modal_projector.",
        OMNI_AUDIO,
    ),
    rename=_qwen3asr_rename,
    force=_omni_force,
    required=(),
    vision=False,
    audio_required=_OMNI_AUDIO_KEYS,
    entry=Arch(
        hf_archs=("Qwen3ASRForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            FILE_TYPE,
            *audio_rows(fill=omni_audio_fill),
            *(_audio_row(k, fn, t) for k, fn, t in OMNI_AUDIO_TAIL),
            _audio_row("audio.projector_type", lambda a: "qwen3a", VT.STRING),
        ],
        names=OMNI_AUDIO3_NAMES,
        transforms=OMNI_AUDIO3_TRANSFORMS,
        extra={POSITION_EMBD: lambda v: sinusoids(v[AUDIO]["d_model"])},
        required=(),
    ),
)

# --------------------------------------------------------------------------- Granite Speech


def _granite_speech_force(hf: str, gguf: str, outtype: str) -> str | None:
    return GS.force(hf) or _base_force(hf, gguf, outtype)


# GraniteSpeechMmprojModel (and GraniteSpeechPlus: the same plus feature_layers): an
# audio-only projector, see arch/granite_speech.py
GRANITE_SPEECH = Projector(
    hf_archs=(
        "GraniteSpeechForConditionalGeneration",
        "GraniteSpeechPlusForConditionalGeneration",
    ),
    keep=("encoder.", "projector."),
    drop=GS.DROP,
    force=_granite_speech_force,
    required=(),
    vision=False,
    audio_key="encoder_config",
    audio_required=GS.REQUIRED,
    fold=(*GS.BATCH_NORM_FOLD, GS.fold_batch_norm),
    entry=Arch(
        hf_archs=("GraniteSpeechForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            FILE_TYPE,
            *(MetaKey(k, (), t, fn) for k, fn, t in GS.rows(GLOBAL, TEXT_WIDTH)),
        ],
        names=GS.NAMES,
        splits=GS.SPLITS,
        transforms=GS.TRANSFORMS,
        required=(),
    ),
)


# --------------------------------------------------------------------------- LFM2-Audio


# LFM2AudioModel: NeMo's FastConformer under ``conformer.`` and the adapter (the text is
# LFM2 under ``lfm.``), see arch/lfm2_audio.py
def _lfm2_audio_force(hf: str, gguf: str, outtype: str) -> str | None:
    return L2A.force(hf) or _base_force(hf, gguf, outtype)


LFM2_AUDIO = Projector(
    hf_archs=("Lfm2AudioForConditionalGeneration",),
    keep=("conformer.", "audio_adapter.", "audio_embedding."),
    drop=L2A.DROP,
    force=_lfm2_audio_force,
    required=(),
    vision=False,
    audio_key="encoder",
    audio_required=L2A.REQUIRED,
    fold=(*L2A.BATCH_NORM_FOLD, GS.fold_batch_norm),
    entry=Arch(
        hf_archs=("Lfm2AudioForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            FILE_TYPE,
            *(MetaKey(k, (), t, fn) for k, fn, t in L2A.rows(GLOBAL, TEXT_WIDTH)),
        ],
        names=L2A.NAMES,
        transforms=L2A.TRANSFORMS,
        required=(),
    ),
)

# --------------------------------------------------------------------------- PocketTTS

# PocketTTSMmprojModel: Kyutai's checkpoint (no config.json: the config from the tensor
# shapes), the Mimi encoder + speaker projection and the flow net + Mimi decoder, see
# arch/pockettts.py; gguf_key names each tensor (None: not written)
POCKETTTS_AUDIO = Projector(
    hf_archs=("PocketTTSModel",),
    keep=("flow_lm.", "mimi."),
    renumber=lambda name, v: PT.gguf_key(name),
    force=PT.force,
    required=(),
    vision=False,
    audio_required=(
        ("num_hidden_layers",),
        ("hidden_size",),
        ("intermediate_size",),
        ("num_attention_heads",),
    ),
    entry=Arch(
        hf_archs=("PocketTTSModel",),
        gguf_arch="clip",
        meta=[FILE_TYPE, *PT.projector_meta(AUDIO, TEXT_WIDTH, FOLDER)],
        names=PT.PROJECTOR_NAMES,
        splits=PT.PROJECTOR_SPLITS,
        transforms=PT.PROJECTOR_TRANSFORMS,
        required=(),
    ),
)

# --------------------------------------------------------------------------- Qwen3-TTS

# Qwen3TTSSpeakerEncoderModel: the ECAPA-TDNN speaker encoder, the code predictor and the
# codec decoder of ``speech_tokenizer/`` (see arch/qwen3tts.py)
QWEN3TTS_AUDIO = Projector(
    hf_archs=(Q3T.HF_CLASS,),
    keep=Q3T.PROJECTOR_KEEP,
    renumber=lambda name, v: Q3T.gguf_key(name),
    force=Q3T.force,
    required=(),
    vision=False,
    audio_key="speaker_encoder_config",
    check=lambda t: (
        None
        if isinstance(t.get("speaker_encoder_config"), dict)
        else ("speaker_encoder_config", "an object", t.get("speaker_encoder_config"))
    ),
    companion=(
        Q3T.CODEC_WEIGHTS,
        Q3T.CODEC_CONFIG,
        lambda shapes, cfg: Q3T.codec_tensors(shapes, cfg["decoder_config"]),
    ),
    entry=Arch(
        hf_archs=(Q3T.HF_CLASS,),
        gguf_arch="clip",
        meta=[
            FILE_TYPE,
            *(MetaKey(k, (), t, fn) for k, fn, t in Q3T.projector_rows(GLOBAL, TEXT_WIDTH)),
        ],
        names=Q3T.PROJECTOR_NAMES,
        stacks=Q3T.PROJECTOR_STACKS,
        required=(),
    ),
)

# --------------------------------------------------------------------------- Granite 4 Vision

# Granite4VisionMmprojModel: a SigLIP tower (the Hub's ``model.vision_tower.vision_model.*``)
# and Window Q-Former projectors, see arch/granite4_vision.py
GRANITE4_VISION = Projector(
    hf_archs=("Granite4VisionForConditionalGeneration",),
    keep=("model.",),
    drop=("vision_model.head", "language_model."),
    renumber=lambda name, v: G4V.renumber(name, v, GLOBAL),
    force=_base_force,
    entry=Arch(
        hf_archs=("Granite4VisionForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            _const("projector_type", "granite4_vision", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            _const("use_gelu", True, VT.BOOL),
            m("vision.preproc_image_size", "image_size", value=lambda v: v.get("image_size", 384)),
            m("vision.projector.query_side", GLOBAL, value=lambda v: G4V.sides(v[GLOBAL])[0]),
            m("vision.projector.window_side", GLOBAL, value=lambda v: G4V.sides(v[GLOBAL])[1]),
            m(
                "vision.feature_layer",
                GLOBAL,
                t=VT.INT32,
                value=lambda v: [e[0] for e in G4V.projector_map(v[GLOBAL])],
            ),
            m(
                "vision.projector.spatial_offsets",
                GLOBAL,
                t=VT.INT32,
                value=lambda v: [
                    j if k == "spatial" else -1 for _, _, k, j in G4V.projector_map(v[GLOBAL])
                ],
            ),
            m(
                "vision.image_grid_pinpoints",
                GLOBAL,
                t=VT.INT32,
                value=lambda v: G4V.pinpoints(v[GLOBAL]),
            ),
        ],
        names=[*SIGLIP_NAMES, *G4V.PROJECTOR_NAMES],
        required=(),
    ),
)

#: every projector entry
# --------------------------------------------------------------------------- HunyuanVL

_HV = "vit."
_HV_LAYER = _HV + "layers.{bid}."
_HV_MERGER = _HV + "perceive."


def _hunyuanvl_force(hf: str, gguf: str, outtype: str) -> str | None:
    # the merger's two convolutions (mm.0 / mm.2) kept F16 at f16, else F32 (the
    # reference: BF16 im2col on Metal)
    if gguf.startswith(("mm.0.", "mm.2.")) and gguf.endswith(".weight"):
        return "F16" if outtype == "f16" else "F32"
    return _base_force(hf, gguf, outtype)


# HunyuanVLVisionModel (conversion/hunyuan.py): the Hub's ``vit.*`` tower alone (HunyuanOCR,
# and what transformers 5.24 saves; its in-memory ``model.vision_tower.*`` names are not
# read: no tower tensor is a named error), a ViT with LayerNorms and
# a GELU MLP under Megatron names, then the ``perceive`` merger: RMS norm, a 2x2 conv, GELU,
# a 1x1 conv, the row newline, a linear into the text width, the begin / end rows and a
# final RMS norm.  The image size row is ``max_image_size`` (the config has no
# ``image_size``; 2048 without either); the position table loses its class-token row 0;
# the pixel bounds come from the image processor file (both required)
HUNYUANVL_VISION = Projector(
    hf_archs=("HunYuanVLForConditionalGeneration",),
    keep=(_HV,),
    force=_hunyuanvl_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("HunYuanVLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m(
                    "vision.image_size",
                    "image_size",
                    "max_image_size",
                    value=lambda v: v.get("image_size", v.get("max_image_size", 2048)),
                ),
            ),
            _const("projector_type", "hunyuanvl", VT.STRING),
            _const("use_gelu", True, VT.BOOL),
            m(
                "vision.attention.layer_norm_epsilon",
                "rms_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("rms_norm_eps", 1e-5),
            ),
            m(
                "vision.spatial_merge_size",
                "spatial_merge_size",
                value=lambda v: v.get("spatial_merge_size", 2),
            ),
            m("vision.image_min_pixels", PREPROCESSOR, value=_pixels("min_pixels")),
            m("vision.image_max_pixels", PREPROCESSOR, value=_pixels("max_pixels")),
        ],
        names=[
            *_wb(
                [
                    (_HV + "embeddings.patch_embedding", "v.patch_embd"),
                    (_HV + "embeddings.position_embedding", "v.position_embd"),
                    (_HV_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                    (_HV_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                    (_HV_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                    (_HV_LAYER + "self_attn.o_proj", _VBLK + "attn_out"),
                    (_HV_LAYER + "input_layernorm", _VBLK + "ln1"),
                    (_HV_LAYER + "post_attention_layernorm", _VBLK + "ln2"),
                    (_HV_LAYER + "mlp.dense_h_to_4h", _VBLK + "ffn_up"),
                    (_HV_LAYER + "mlp.dense_4h_to_h", _VBLK + "ffn_down"),
                    (_HV_MERGER + "before_rms", "mm.pre_norm"),
                    (_HV_MERGER + "after_rms", "mm.post_norm"),
                    (_HV_MERGER + "proj.0", "mm.0"),
                    (_HV_MERGER + "proj.2", "mm.2"),
                    (_HV_MERGER + "mlp", "mm.model.fc"),
                ]
            ),
            NameRule(_HV_MERGER + "image_newline", "v.image_newline"),
            NameRule(_HV_MERGER + "image_begin", "mm.image_begin"),
            NameRule(_HV_MERGER + "image_end", "mm.image_end"),
            # gguf-py's spelling (V_ENC_EMBD_VSEP)
            NameRule(_HV_MERGER + "image_sep", "v.view_seperator"),
        ],
        transforms=[
            Transform(
                "hunyuanvl_drop_cls_position",
                r"embeddings\.position_embedding\.weight$",
                lambda x, v, ctx: x[1:],
                # GGUF -> HF: the class-token row back as zeros (transformers reads the
                # table from row 1 on: its value is lost, never used)
                lambda x, v, ctx: np.concatenate([np.zeros_like(x[:1]), x]),
                shape=lambda s, v, ctx: (s[0] - 1, *s[1:]),
                exact=False,
                inverse_shape=lambda s, v, ctx: (s[0] + 1, *s[1:]),
            ),
        ],
        required=(),
    ),
)


# --------------------------------------------------------------------------- DeepSeek-OCR

_SAM = "model.sam_model."
_SAM_LAYER = _SAM + "blocks.{bid}."
_DQ = "model.qwen2_model."
_DQ_LAYER = _DQ + "model.model.layers.{bid}."
_VSAM = "v.sam."


def _dsocr_vision(v: dict, ocr2: bool) -> dict:
    """The vision config as DeepseekOCRVisionModel.get_vision_config (and the OCR-2
    subclass) leaves it: the Hub's keeps the towers under ``width``; DeepSeek-OCR's CLIP-L
    (``clip-l-14-224``) is merged up (its image and patch size, layers, heads, width;
    the feed-forward length becomes 4 x heads, as the reference writes it); OCR-2's width
    is the Qwen2 encoder's, whose layers, feed-forward length, heads and patch size the
    reference takes as 24, 4864, 14 and 16 where the config gives none."""
    out = dict(v)
    width = out["width"]
    clip = width.get("clip-l-14-224") if isinstance(width, dict) else None
    if clip is not None:
        out.update(clip)
    if isinstance(out["width"], int):
        out["hidden_size"] = out["width"]
    if out.get("heads") is not None:
        out["num_heads"] = out["heads"]
        out["intermediate_size"] = out["heads"] * 4
    if ocr2:
        out["hidden_size"] = width["qwen2-0-5b"]["dim"]
        for k, d in (("layers", 24), ("patch_size", 16), ("intermediate_size", 4864),
                     ("num_attention_heads", 14)):  # fmt: skip
            if out.get(k) is None:
                out[k] = d
    return out


def _dsocr_sam(key: str) -> Callable[[dict], Any]:
    return lambda v: v["width"]["sam_vit_b"][key]


def _dsocr_force(hf: str, gguf: str, outtype: str) -> str | None:
    # the SAM tables, neck and downsampling convolutions stay F32 (the reference's list)
    if any(k in hf for k in (".embeddings.", "pos_embed", ".rel_pos_h", ".rel_pos_w", ".neck.",
                             ".net_")):  # fmt: skip
        return "F32"
    return _base_force(hf, gguf, outtype)


def _dsocr_rename(name: str) -> str:
    """DeepseekOCRVisionModel.filter_tensors: SAM's bare position parameters are read as
    ``.weight`` tensors."""
    if name.endswith(("pos_embed", "rel_pos_h", "rel_pos_w")):
        return name + ".weight"
    return name


_DSOCR2_ENCODER = [
    (_DQ_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
    (_DQ_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
    (_DQ_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
    (_DQ_LAYER + "self_attn.o_proj", _VBLK + "attn_out"),
    (_DQ_LAYER + "input_layernorm", _VBLK + "ln1"),
    (_DQ_LAYER + "post_attention_layernorm", _VBLK + "ln2"),
    (_DQ_LAYER + "mlp.up_proj", _VBLK + "ffn_up"),
    (_DQ_LAYER + "mlp.gate_proj", _VBLK + "ffn_gate"),
    (_DQ_LAYER + "mlp.down_proj", _VBLK + "ffn_down"),
    (_DQ + "model.model.norm", "v.post_ln"),
    (_DQ + "query_768", "v.resample_query_768"),
    (_DQ + "query_1024", "v.resample_query_1024"),
]
#: SAM ViT-B (shared by DeepSeek-OCR, Unlimited-OCR and DeepSeek-OCR-2), then the linear
#: projector, the newline row and the view separator (gguf-py's spelling)
_SAM_NAMES = [
    *_wb(
        [
            (_SAM + "patch_embed.proj", _VSAM + "patch_embd"),
            (_SAM_LAYER + "attn.qkv", _VSAM + "blk.{bid}.attn.qkv"),
            (_SAM_LAYER + "attn.proj", _VSAM + "blk.{bid}.attn.out"),
            (_SAM_LAYER + "mlp.lin1", _VSAM + "blk.{bid}.mlp.lin1"),
            (_SAM_LAYER + "mlp.lin2", _VSAM + "blk.{bid}.mlp.lin2"),
            (_SAM_LAYER + "norm1", _VSAM + "blk.{bid}.pre_ln"),
            (_SAM_LAYER + "norm2", _VSAM + "blk.{bid}.post_ln"),
            *((f"{_SAM}neck.{i}", f"{_VSAM}neck.{i}") for i in range(4)),
            (_SAM + "net_2", _VSAM + "net_2"),
            (_SAM + "net_3", _VSAM + "net_3"),
            ("model.projector.layers", "mm.model.fc"),
        ]
    ),
    NameRule(_SAM + "pos_embed.weight", _VSAM + "pos_embd.weight"),
    NameRule(_SAM_LAYER + "attn.rel_pos_h.weight", _VSAM + "blk.{bid}.attn.pos_h.weight"),
    NameRule(_SAM_LAYER + "attn.rel_pos_w.weight", _VSAM + "blk.{bid}.attn.pos_w.weight"),
    NameRule("model.image_newline", "v.image_newline"),
    NameRule("model.view_seperator", "v.view_seperator"),
]
#: the separator is unsqueezed to one row (``[1, n_embd]``)
_VIEW_SEPERATOR = Transform(
    "deepseekocr_view_seperator_row",
    r"view_seperator$",
    lambda x, v, ctx: x.reshape(1, *x.shape),
    lambda x, v, ctx: x.reshape(x.shape[1:]),
    shape=lambda s, v, ctx: (1, *s),
    inverse_shape=lambda s, v, ctx: s[1:],
)


def _dsocr_scale_factor(ocr2: bool) -> Callable[[dict], int | None]:
    def get(v: dict) -> int | None:
        # as Gemma 3's: only a value other than 4 is written
        vc = _dsocr_vision(v, ocr2)
        n_per_side = int(v[PREPROCESSOR].get("image_seq_length", 256) ** 0.5)
        f = (vc["image_size"] // vc["patch_size"]) // n_per_side
        return f if f > 0 and f != 4 else None

    return get


def _dsocr_row(key: str, ocr2: bool, fields: tuple[str, ...]) -> MetaKey:
    """A MmprojModel base row read (first field present) from the merged vision config."""
    return m(key, value=lambda v: next(_dsocr_vision(v, ocr2)[f] for f in fields
                                      if f in _dsocr_vision(v, ocr2)))  # fmt: skip


def _dsocr_rows(projector_type: str, max_tiles: int, ocr2: bool, extra: list) -> list:
    """DeepseekOCRVisionModel.set_gguf_parameters (``extra``: a subclass's rows after)."""
    return [
        *replace_rows(
            BASE_ROWS,
            vision__image_size=_dsocr_row("vision.image_size", ocr2, ("image_size",)),
            vision__patch_size=_dsocr_row("vision.patch_size", ocr2, ("patch_size",)),
            vision__embedding_length=_dsocr_row(
                "vision.embedding_length", ocr2, ("hidden_size", "width", "vt_hidden_size")
            ),
            vision__feed_forward_length=_dsocr_row(
                "vision.feed_forward_length", ocr2, ("intermediate_size", "vt_intermediate_size")
            ),
            vision__block_count=_dsocr_row("vision.block_count", ocr2, BLOCK_KEYS),
            vision__attention__head_count=_dsocr_row(
                "vision.attention.head_count",
                ocr2,
                ("num_attention_heads", "num_heads", "heads", "vt_num_attention_heads"),
            ),
        ),
        _const("projector_type", projector_type, VT.STRING),
        m(
            "vision.attention.layer_norm_epsilon",
            "layer_norm_eps",
            t=VT.FLOAT32,
            value=lambda v: _dsocr_vision(v, ocr2).get("layer_norm_eps", 1e-6),
        ),
        _const("use_gelu", True, VT.BOOL),
        m("vision.projector.scale_factor", value=_dsocr_scale_factor(ocr2)),
        m("vision.window_size", value=lambda v: _dsocr_vision(v, ocr2).get("window_size", 14)),
        _const("vision.preproc_min_tiles", 2, VT.UINT32),
        _const("vision.preproc_max_tiles", max_tiles, VT.UINT32),
        m("vision.sam.block_count", value=_dsocr_sam("layers")),
        m("vision.sam.embedding_length", value=_dsocr_sam("width")),
        m("vision.sam.head_count", value=_dsocr_sam("heads")),
        *extra,
    ]


_DCLIP = "model.vision_model."
_DCLIP_LAYER = _DCLIP + "transformer.layers.{bid}."
#: DeepSeek-OCR's CLIP-L: no patch embedding of its own (SAM's features are its patches),
#: the class row and position table, the fused QKV kept fused
_DSOCR_CLIP = [
    NameRule(_DCLIP + "embeddings.class_embedding", "v.class_embd"),
    NameRule(_DCLIP + "embeddings.position_embedding.weight", "v.position_embd.weight"),
    *_wb(
        [
            (_DCLIP + "pre_layrnorm", "v.pre_ln"),
            (_DCLIP_LAYER + "self_attn.qkv_proj", _VBLK + "attn_qkv"),
            (_DCLIP_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
            (_DCLIP_LAYER + "layer_norm1", _VBLK + "ln1"),
            (_DCLIP_LAYER + "layer_norm2", _VBLK + "ln2"),
            (_DCLIP_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
            (_DCLIP_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
        ]
    ),
]


def _dsocr_projector(hf_arch: str, max_tiles: int) -> Projector:
    """DeepseekOCRVisionModel (conversion/deepseek.py) for one Hub class: SAM ViT-B, then
    DeepSeek-OCR's CLIP-L over the SAM features (its rows from ``clip-l-14-224``), the
    linear projector over both concatenated, the newline row and the view separator; the
    classes differ only in the tile-count row (the Hub code's ``dynamic_preprocess``
    ``max_num``)."""
    return Projector(
        hf_archs=(hf_arch,),
        keep=(_SAM, _DCLIP, "model.projector.", "model.image_newline", "model.view_seperator"),
        rename=_dsocr_rename,
        force=_dsocr_force,
        required=(("image_size",), ("width",)),
        entry=Arch(
            hf_archs=(hf_arch,),
            gguf_arch="clip",
            meta=_dsocr_rows("deepseekocr", max_tiles, False, []),
            names=[*_SAM_NAMES, *_DSOCR_CLIP],
            transforms=[_VIEW_SEPERATOR],
            required=(),
        ),
    )


# UnlimitedOCRVisionModel: the Hub's Unlimited-OCR layout (what transformers 5.24 saves
# too), up to 32 tiles
UNLIMITEDOCR_VISION = _dsocr_projector("UnlimitedOCRForCausalLM", 32)
# DeepseekOCRVisionModel itself: DeepSeek-OCR (1), the same tensors and rows, up to 9 tiles
DEEPSEEKOCR_VISION = _dsocr_projector("DeepseekOCRForCausalLM", 9)

# DeepseekOCR2VisionModel (conversion/deepseek.py), the Hub's DeepSeek-OCR-2 layout (what
# transformers 5.24 saves too): SAM ViT-B with its neck and two stride-2 convolutions,
# then a Qwen2 decoder run as an encoder over the SAM features and learned queries (144
# for a 768 tile, 256 for the 1024 view; GQA with 2 KV heads, fixed in the reference),
# the linear projector and the view separator; the text model's tensors are not read
DEEPSEEKOCR2_VISION = Projector(
    hf_archs=("DeepseekOCR2ForCausalLM",),
    keep=(_SAM, _DQ, "model.projector.", "model.image_newline", "model.view_seperator"),
    rename=_dsocr_rename,
    force=_dsocr_force,
    required=(("image_size",), ("width",)),
    entry=Arch(
        hf_archs=("DeepseekOCR2ForCausalLM",),
        gguf_arch="clip",
        meta=_dsocr_rows(
            "deepseekocr2", 6, True, [_const("vision.attention.head_count_kv", 2, VT.UINT32)]
        ),
        names=[*_SAM_NAMES, *_wb(_DSOCR2_ENCODER)],
        transforms=[_VIEW_SEPERATOR],
        required=(),
    ),
)


# MuseGlimmerVisionModel (conversion/muse_glimmer.py): a dynamic-size tower written with
# its nominal image size (position table side x patch x merge), Q/K (weights and biases)
# permuted to ggml's interleaved RoPE pairs, the ``patch_temporal`` slabs of the patch
# embedding summed into a Conv2d kernel, and the 3-linear projector as mm.0 .. mm.2
MUSE_GLIMMER_VISION = Projector(
    hf_archs=("MuseGlimmerForConditionalGeneration",),
    keep=VISION_KEEP,
    force=_base_force,
    required=(
        *NO_IMAGE_SIZE,
        ("pos_emb_height",),
        ("merge_size",),
        ("patch_temporal",),
        ("layer_norm_eps",),
    ),
    entry=Arch(
        hf_archs=("MuseGlimmerForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m(
                    "vision.image_size", "pos_emb_height", value=nominal_image_size
                ),
            ),
            *VISION_ROWS_AFTER_BASE,
        ],
        names=VISION_NAMES,
        transforms=[PERMUTE_Q, PERMUTE_K, PATCH_SLABS],
        required=(),
    ),
)
# Qwen4-Exp: the reference's Qwen4ExpVisionModel is Qwen3VLVisionModel unchanged
QWEN4EXP_VISION = replace(QWEN3VL_VISION, hf_archs=("Qwen4ExpForConditionalGeneration",))


# --------------------------------------------------------------------------- Kimi-K2.5


def _kimi_patch(v: dict) -> int:
    return v.get("patch_size", 14)


def _kimi_pixels(v: dict, patches: int) -> int:
    return patches * _kimi_patch(v) ** 2


# KimiK25Model (conversion/kimivl.py; see .kimik25): the image size row is the position
# table's height (``init_pos_emb_height``, the Hub's remote-code spelling, else 64) in
# pixels; the table sizes go under ``vision.pos_emb_*`` (no ``clip.`` prefix, as the
# reference writes them); the epsilon is ``projector_ln_eps`` (else 1e-5); the pixel
# bounds are 8 patches and the image processor's ``in_patch_limit`` patches (else 16384)
KIMIK25_VISION = Projector(
    hf_archs=("KimiK25ForConditionalGeneration",),
    # transformers 5.24 saves the projector's norm as ``model.mm_projector.pre_norm``: read,
    # so that it is refused by name (the reference cannot name it either)
    keep=(K25.TOWER, "mm_projector.", "model.mm_projector."),
    force=_base_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("KimiK25ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m(
                    "vision.image_size",
                    "init_pos_emb_height",
                    value=lambda v: v.get("init_pos_emb_height", 64) * _kimi_patch(v),
                ),
            ),
            _const("projector_type", "kimik25", VT.STRING),
            *(
                MetaKey(
                    f"vision.pos_emb_{k}",
                    (f"init_pos_emb_{k}",),
                    VT.UINT32,
                    lambda v, k=k, d=d: v.get(f"init_pos_emb_{k}", d),
                    absolute=True,
                )
                for k, d in (("height", 64), ("width", 64), ("time", 4))
            ),
            MetaKey(
                "use_gelu",
                ("projector_hidden_act",),
                VT.BOOL,
                lambda v: v.get("projector_hidden_act", "gelu") == "gelu",
            ),
            m(
                "vision.attention.layer_norm_epsilon",
                "projector_ln_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("projector_ln_eps", 1e-5),
            ),
            m(
                "vision.projector.scale_factor",
                "merge_kernel_size",
                value=lambda v: v.get("merge_kernel_size", (2, 2))[0],
            ),
            m("vision.image_min_pixels", "patch_size", value=lambda v: _kimi_pixels(v, 8)),
            m(
                "vision.image_max_pixels",
                PREPROCESSOR,
                value=lambda v: _kimi_pixels(v, v[PREPROCESSOR].get("in_patch_limit", 16384)),
            ),
        ],
        names=K25.NAMES,
        transforms=[
            Transform(
                "kimik25_split_rope",
                r"\.wqkv\.(weight|bias)$",
                K25.split_rope,
                K25.interleaved_rope,
            )
        ],
        required=(),
    ),
)


# Glm5vModel (conversion/kimivl.py: a KimiK25Model), GLM-5.2-Vision: Kimi-K2.5's MoonViT3d
# tower and projector, the projector's two layers spelt ``mm_projector.linear_1`` /
# ``linear_2`` (Kimi's ``proj.0`` / ``proj.2``, also read, as the reference does); the same
# ``kimik25`` file (mtmd tells the two apart by the text vocabulary's image tokens)
GLM5V_VISION = replace(
    KIMIK25_VISION,
    hf_archs=("Glm5vForConditionalGeneration",),
    entry=replace(
        KIMIK25_VISION.entry,
        hf_archs=("Glm5vForConditionalGeneration",),
        names=[
            *K25.NAMES,
            *_wb([("mm_projector.linear_1", "mm.1"), ("mm_projector.linear_2", "mm.2")]),
        ],
    ),
)


def _kimivl_flat(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    return x.reshape(-1, x.shape[-1])


def _kimivl_table(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    return x.reshape(v.get("init_pos_emb_height", 64), -1, x.shape[-1])


# KimiVLModel (conversion/kimivl.py), Kimi-VL: MoonViT, the 2-D tower Kimi-K2.5's
# MoonViT3d is for one frame (same names, same interleaved 2-D RoPE), and Kimi's patch
# merger under ``multi_modal_projector.`` (``linear_1`` / ``linear_2``).  The reference
# writes the position table flattened to ``[H * W, C]``, ``wqkv`` split into Q / K / V
# as stored (not reordered: mtmd's ``kimivl`` graph then rotates the wrong pairs, see
# docs/convert-architectures.md), a fixed image size of 64 x 14 px, GELU, merge 2 and
# the tower's ``layer_norm_eps`` (else 1e-5)
KIMIVL_VISION = Projector(
    hf_archs=("KimiVLForConditionalGeneration",),
    keep=(K25.TOWER, "multi_modal_projector."),
    force=_base_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("KimiVLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS, vision__image_size=_const("vision.image_size", 64 * 14, VT.UINT32)
            ),
            _const("projector_type", "kimivl", VT.STRING),
            _const("use_gelu", True, VT.BOOL),
            _const("vision.projector.scale_factor", 2, VT.UINT32),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-5),
            ),
        ],
        names=[
            *(n for n in K25.NAMES if n.hf.startswith(K25.TOWER) and ".wqkv." not in n.hf),
            *_wb(
                [
                    ("multi_modal_projector.pre_norm", "mm.input_norm"),
                    ("multi_modal_projector.linear_1", "mm.1"),
                    ("multi_modal_projector.linear_2", "mm.2"),
                ]
            ),
        ],
        transforms=[
            Transform(
                "kimivl_flat_table",
                r"patch_embed\.pos_emb\.weight$",
                _kimivl_flat,
                _kimivl_table,
                shape=lambda s, v, ctx: (s[0] * s[1], s[2]),
                inverse_shape=lambda s, v, ctx: (
                    v.get("init_pos_emb_height", 64),
                    s[0] // v.get("init_pos_emb_height", 64),
                    s[1],
                ),
            )
        ],
        splits=[
            Split(
                K25.TOWER + "encoder.blocks.{bid}.wqkv" + s,
                tuple(_VBLK + f"attn_{x}" + s for x in "qkv"),
                0,
            )
            for s in (".weight", ".bias")
        ],
        required=(),
    ),
)


# --------------------------------------------------------------------------- MiniMax-M3 VL

_MM3 = "vision_tower.vision_model."
_MM3_LAYER = _MM3 + "encoder.layers.{bid}."


def _minimax_m3_type(v: dict) -> str:
    MM3.vision_head_dim(v)  # the reference asserts the head width: refused before output
    return "minimax_m3"


# MiniMaxM3VisionModel (conversion/minimax.py): a CLIP-style ViT (pre-LayerNorm ``pre_layrnorm``,
# LayerNorm blocks, GELU MLP) with a Conv3d patch embedding (split into one Conv2d kernel per
# temporal slice, as Qwen2.5-VL's) and 3-D RoPE: Q / K rows reordered per head
# (:func:`.minimax.vision_qk`; the reference asserts 80-wide heads); the projector
# ``multi_modal_projector.linear_1`` / ``linear_2`` -> ``mm.1`` / ``mm.2`` and the patch-merge
# MLP ``patch_merge_mlp.linear_1`` / ``linear_2`` -> ``mm.merger.fc1`` / ``fc2``; the epsilon
# is ``layer_norm_eps`` (1e-5 without), the merge size
# ``img_token_compression_config.spatial_merge_size`` (2 without)
MINIMAXM3_VISION = Projector(
    hf_archs=("MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3VLForConditionalGeneration"),
    keep=("vision_tower.", "multi_modal_projector.", "patch_merge_mlp."),
    force=_base_force,
    entry=Arch(
        hf_archs=("MiniMaxM3SparseForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            MetaKey("projector_type", ("hidden_size",), VT.STRING, _minimax_m3_type),
            _const("use_gelu", True, VT.BOOL),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-5),
            ),
            m(
                "vision.spatial_merge_size",
                "img_token_compression_config",
                value=lambda v: int(
                    (v.get("img_token_compression_config") or {}).get("spatial_merge_size", 2)
                ),
            ),
        ],
        names=_wb(
            [
                ("multi_modal_projector.linear_1", "mm.1"),
                ("multi_modal_projector.linear_2", "mm.2"),
                ("patch_merge_mlp.linear_1", "mm.merger.fc1"),
                ("patch_merge_mlp.linear_2", "mm.merger.fc2"),
                (_MM3 + "pre_layrnorm", "v.pre_ln"),
                (_MM3_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                (_MM3_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                (_MM3_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                (_MM3_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
                (_MM3_LAYER + "layer_norm1", _VBLK + "ln1"),
                (_MM3_LAYER + "layer_norm2", _VBLK + "ln2"),
                (_MM3_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                (_MM3_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
            ]
        ),
        splits=[
            Split(
                _MM3 + "embeddings.patch_embedding.weight",
                ("v.patch_embd.weight", "v.patch_embd.weight.1"),
                fn=_conv3d_halves,
                shapes=lambda s, v: [(s[0], s[1], *s[3:])] * 2,
                join=_conv3d_join,
            ),
        ],
        transforms=[
            Transform(
                "minimax_m3_vision_qk",
                r"self_attn\.[qk]_proj\.(weight|bias)$",
                MM3.vision_qk,
                MM3.vision_qk_back,
            )
        ],
        required=(),
    ),
)


# --------------------------------------------------------------------------- EXAONE 4.5

_EXAONE_MLP = [
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
]


def _exaone_wa_pattern(v: dict) -> int | None:
    # written only with window attention (Exaone4_5VisionModel: an empty or absent list
    # writes no row)
    return _wa_pattern(v) if v.get("fullatt_block_indexes") else None


# Exaone4_5VisionModel (conversion/exaone.py): Qwen2.5-VL's tower (``model.visual.`` as
# transformers 5 saves it, read as ``visual.``) with grouped-query attention: the fused
# QKV (q rows, then k and v of the KV heads) is kept whole (``attn_qkv``: mtmd splits it
# by the head counts), and the rows are the class's own: the image processor's pixel
# bounds, the KV head count, the vision config's epsilon (else the top level's, else
# 1e-6), its window size and, with window attention, the full-attention period
EXAONE4_5_VISION = Projector(
    hf_archs=("Exaone4_5_ForConditionalGeneration",),
    keep=("model.visual.", "visual."),
    rename=lambda name: name.replace("model.visual.", "visual.", 1),
    force=_qwen_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("Exaone4_5_ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(BASE_ROWS, vision__image_size=_QWEN_IMAGE_SIZE),
            _const("projector_type", "exaone4_5", VT.STRING),
            _const("use_silu", True, VT.BOOL),
            m("vision.image_min_pixels", PREPROCESSOR, value=_pixels("min_pixels")),
            m("vision.image_max_pixels", PREPROCESSOR, value=_pixels("max_pixels")),
            m("vision.attention.head_count_kv", "num_key_value_heads"),
            m(
                "vision.attention.layer_norm_epsilon",
                "rms_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("rms_norm_eps", v[GLOBAL].get("rms_norm_eps", 1e-6)),
            ),
            m("vision.window_size", "window_size"),
            m("vision.n_wa_pattern", "fullatt_block_indexes", value=_exaone_wa_pattern),
        ],
        names=[
            *_qwen_names(_EXAONE_MLP),
            *_wb([(_QV + "attn.qkv", _VBLK + "attn_qkv")]),
        ],
        splits=[QWEN25VL_VISION.entry.splits[-1]],
        required=(),
    ),
)


# --------------------------------------------------------------------------- MiniCPM-V 4.6

# MiniCPMV4_6VisionModel (conversion/minicpm.py, names in arch/minicpmv.py): the image
# size row is the image processor's ``scale_resolution`` (the slice size mtmd cuts images
# to; the vision config's ``image_size`` is the 70 x 70 position-bucket grid), the window
# merger's layer goes into ``wa_layer_indexes``; the image processor's ``downsample_mode``
# gives the scale factor (``4x``: 2, the window merger left out; ``16x``: 4)
MINICPMV46_VISION = Projector(
    hf_archs=("MiniCPMV4_6ForConditionalGeneration",),
    keep=MCV.KEEP,
    force=_base_force,
    renumber=lambda name, v: MCV.drop_4x(name, v.get(PREPROCESSOR, {})),
    entry=Arch(
        hf_archs=("MiniCPMV4_6ForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m(
                    "vision.image_size",
                    "image_size",
                    value=lambda v: (
                        int(v[PREPROCESSOR]["scale_resolution"])
                        if v[PREPROCESSOR].get("scale_resolution") is not None
                        else v["image_size"]
                    ),
                ),
            ),
            _const("projector_type", "minicpmv4_6", VT.STRING),
            m(
                "vision.projector.scale_factor",
                PREPROCESSOR,
                value=lambda v: MCV.scale_factor(v[PREPROCESSOR]),
            ),
            m(
                "vision.wa_layer_indexes",
                GLOBAL,
                t=VT.INT32,
                value=lambda v: MCV.insert_layer(v[GLOBAL], v),
            ),
            _const("use_gelu", True, VT.BOOL),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
        ],
        names=MCV.VISION_NAMES,
        required=(),
    ),
)


# --------------------------------------------------------------------------- Youtu-VL

_YV = "siglip2.vision_model."
_YV_LAYER = _YV + "encoder.layers.{bid}."


def _youtuvl_act(act: str) -> Callable[[dict], bool | None]:
    """``use_gelu`` / ``use_silu`` by the vision ``hidden_act`` (GELU by default); another
    activation is a ValueError, as in the reference."""

    def get(v: dict) -> bool | None:
        a = str(v.get("hidden_act", "gelu_pytorch_tanh")).lower()
        if a not in ("gelu", "gelu_pytorch_tanh", "gelu_fast", "gelu_new", "gelu_accurate", "silu"):
            raise ValueError(f"hidden_act {a!r} (Youtu-VL: a GELU or SiLU)")
        return True if (a == "silu") == (act == "silu") else None

    return get


def _fullatt_layers(v: dict) -> list[int]:
    full = v.get("fullatt_block_indexes")
    if not isinstance(full, list):
        raise KeyError("fullatt_block_indexes (the full-attention layers) is required")
    return full


# YoutuVLVisionModel (conversion/youtuvl.py): a SigLIP2 tower (``siglip2.vision_model.*``,
# its patch embedding a linear layer over channel-last patch pixels, 2-D RoPE computed at
# run time) with Qwen2.5-VL's window attention, and a Qwen2.5-VL merger (``merger.ln_q``
# RMS norm, ``mlp.0`` / ``mlp.2``); image size 560 when absent; the window size and the
# explicit full-attention layers (``wa_layer_indexes``) from the vision config.  The
# SigLIP2 position table, which the reference's tensor map cannot name (it skips it),
# is not read
YOUTUVL_VISION = Projector(
    hf_archs=("YoutuVLForConditionalGeneration",),
    keep=(_YV, "merger."),
    drop=(_YV + "embeddings.position_embedding.",),
    force=_base_force,
    required=NO_IMAGE_SIZE,
    entry=Arch(
        hf_archs=("YoutuVLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m(
                    "vision.image_size", "image_size", value=lambda v: v.get("image_size", 560)
                ),
            ),
            _const("projector_type", "youtuvl", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            MetaKey("use_gelu", ("hidden_act",), VT.BOOL, _youtuvl_act("gelu")),
            MetaKey("use_silu", ("hidden_act",), VT.BOOL, _youtuvl_act("silu")),
            m(
                "vision.spatial_merge_size",
                "spatial_merge_size",
                value=lambda v: v.get("spatial_merge_size", 2),
            ),
            m("vision.window_size", "window_size"),
            m(
                "vision.wa_layer_indexes",
                "fullatt_block_indexes",
                t=VT.INT32,
                value=_fullatt_layers,
            ),
        ],
        names=_wb(
            [
                (_YV + "embeddings.patch_embedding", "v.patch_embd"),
                (_YV + "post_layernorm", "v.post_ln"),
                (_YV_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
                (_YV_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
                (_YV_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
                (_YV_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
                (_YV_LAYER + "layer_norm1", _VBLK + "ln1"),
                (_YV_LAYER + "layer_norm2", _VBLK + "ln2"),
                (_YV_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
                (_YV_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
                ("merger.ln_q", "mm.input_norm"),
                ("merger.mlp.0", "mm.0"),
                ("merger.mlp.2", "mm.2"),
            ]
        ),
        required=(),
    ),
)


def _glm5v_pixels(key: str) -> Callable[[dict], int | None]:
    """Glm5NextVisionModel's image budget: ``min_image_tokens`` / ``max_image_tokens`` of
    the image processor times the pixels of one merged token (patch 14, merge 2 when
    not given)."""

    def fn(v: dict) -> int | None:
        pc = v[PREPROCESSOR]
        tokens = pc.get(key)
        if tokens is None:
            return None
        return int(tokens) * (int(pc.get("patch_size", 14)) * int(pc.get("merge_size", 2))) ** 2

    return fn


# GLM-5-Next (Glm5NextVisionModel, a Glm4VVisionModel): GLM-4V's tower and rows with the
# projector type glm5v, then the merge size, the SwiGLU clamp and the image budget
GLM5NEXT_VISION = replace(
    GLM4V_VISION,
    hf_archs=("Glm5NextForConditionalGeneration",),
    entry=replace(
        GLM4V_VISION.entry,
        hf_archs=("Glm5NextForConditionalGeneration",),
        meta=[
            *(
                _const("projector_type", "glm5v", VT.STRING)
                if isinstance(r, MetaKey) and r.key == "projector_type"
                else r
                for r in GLM4V_VISION.entry.meta
            ),
            m(
                "vision.spatial_merge_size",
                "spatial_merge_size",
                value=lambda v: int(v.get("spatial_merge_size", 2)),
            ),
            m(
                "vision.swiglu_clamp",
                "swiglu_limit",
                t=VT.FLOAT32,
                value=lambda v: None if v.get("swiglu_limit") is None else float(v["swiglu_limit"]),
            ),
            m("vision.image_min_pixels", PREPROCESSOR, value=_glm5v_pixels("min_image_tokens")),
            m("vision.image_max_pixels", PREPROCESSOR, value=_glm5v_pixels("max_image_tokens")),
        ],
    ),
)

# --------------------------------------------------------------------------- Gemma 3n


def _g3n_vision(key: str, fn: Callable[[dict], Any], t: VT = VT.UINT32) -> MetaKey:
    return MetaKey(key, (), t, fn)


GEMMA3N_VISION_AUDIO = Projector(
    hf_archs=("Gemma3nForConditionalGeneration",),
    keep=(*G3N.VISION_PREFIXES, *G3N.AUDIO_PREFIXES),
    force=G3N.force,
    # every other base field has the class's default (arch/gemma3n_mmproj.py)
    required=(("hidden_size",),),
    # the class asserts an audio config and reads these without defaults
    audio_required=(
        ("hidden_size",),
        ("conf_num_hidden_layers",),
        ("conf_num_attention_heads",),
        ("input_feat_size",),
    ),
    entry=Arch(
        hf_archs=("Gemma3nForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            FILE_TYPE,
            MetaKey("has_vision_encoder", (), VT.BOOL, _flag),
            m("vision.projection_dim", TEXT_WIDTH),
            _g3n_vision("vision.image_size", lambda v: G3N.image_size(v[PREPROCESSOR])),
            _g3n_vision("vision.patch_size", lambda v: G3N.patch_size(v[PREPROCESSOR])),
            m("vision.embedding_length", "hidden_size"),
            _g3n_vision(
                "vision.feed_forward_length", lambda v: 4 * v.get("intermediate_size", 2048)
            ),
            _const("vision.block_count", 128, VT.UINT32),
            _g3n_vision("vision.attention.head_count", lambda v: v.get("num_attention_heads", 8)),
            _const("vision.image_mean", [0.0, 0.0, 0.0], VT.FLOAT32),
            _const("vision.image_std", [1.0, 1.0, 1.0], VT.FLOAT32),
            *audio_rows(G3N.audio_ffn, G3N.audio_fill),
            _const("vision.projector_type", "gemma3nv", VT.STRING),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
            _audio_row("audio.projector_type", lambda a: "gemma3na", VT.STRING),
            _audio_row("audio.num_mel_bins", lambda a: a["input_feat_size"]),
            _audio_row("audio.attention.layer_norm_epsilon", lambda a: 1e-5, VT.FLOAT32),
        ],
        names=G3N.NAMES,
        transforms=G3N.TRANSFORMS,
        required=(),
    ),
)


# --------------------------------------------------------------------------- Dots3 Note


# Dots3NoteMmprojModel (arch/dots3_towers.py): both towers in one file.  Rows: the vision
# base (the tower width is embed_dim, image_size 0), the audio half (whisper_config's
# sizes), then the vision projector type and its rows, the audio projector type, mel bins
# and the audio norms' fixed epsilon.  The reference's asserts on the tower variants
# (patch_merger adapter, sigmoid routing, Q/K norms, SwiGLU audio, 60 s chunks, the audio
# RoPE) are checked first (``check``)
DOTS3NOTE_MMPROJ = Projector(
    hf_archs=("Dots3NoteForCausalLM", "Dots3NoteForConditionalGeneration"),
    keep=("vision_encoder.", "audio_encoder."),
    force=D3.force,
    required=(
        ("patch_size",),
        ("embed_dim",),
        ("intermediate_size",),
        BLOCK_KEYS,
        ("num_attention_heads", "num_heads"),
        ("pyramid_num_routed",),
        ("spatial_merge_size",),
        ("capacity_factor",),
        ("rms_norm_eps",),
    ),
    audio_required=(("whisper_config",),),
    pre_nested="vision_config",
    check=D3.check,
    entry=Arch(
        hf_archs=("Dots3NoteForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=_const("vision.image_size", 0, VT.UINT32),
                vision__embedding_length=m("vision.embedding_length", "embed_dim"),
            ),
            *audio_rows(fill=D3.whisper_sizes),
            _const("vision.projector_type", "dots3note_v", VT.STRING),
            _const("use_silu", True, VT.BOOL),
            m("vision.attention.layer_norm_epsilon", "rms_norm_eps", t=VT.FLOAT32),
            m("vision.spatial_merge_size", "spatial_merge_size"),
            m("vision.image_min_pixels", PREPROCESSOR, value=_pre("min_pixels")),
            m("vision.image_max_pixels", PREPROCESSOR, value=_pre("max_pixels")),
            m(
                "vision.expert_count_per_layer",
                "pyramid_num_routed",
                t=VT.INT32,
                value=lambda v: [max(0, n) for n in v["pyramid_num_routed"]],
            ),
            m(
                "vision.expert_used_count",
                "capacity_factor",
                value=lambda v: int(v["capacity_factor"]),
            ),
            _audio_row("audio.projector_type", lambda a: "dots3note_a", VT.STRING),
            _audio_row("audio.num_mel_bins", lambda a: a["whisper_config"]["num_mel_bins"]),
            _audio_row("audio.attention.layer_norm_epsilon", lambda a: 1e-6, VT.FLOAT32),
        ],
        names=[*D3.AUDIO_NAMES, *D3.VISION_NAMES],
        stacks=D3.VISION_STACKS,
        splits=D3.AUDIO_SPLITS,
        required=(),
    ),
)


# --------------------------------------------------------------------------- Ling-3.0 VL

# BailingMoeV3VLVisionModel (conversion/bailingmoe3.py): Qwen3-VL's tower whose merger is
# its per-patch LayerNorm alone (``visual.merger.norm`` -> ``mm.input_norm``; the
# reference asserts ``disable_merger_proj``) and a top-level GELU MLP over the merged
# patches (``linear_proj.0`` / ``.2`` -> ``mm.0`` / ``mm.2``): projector type ``ling3vl``,
# Qwen3-VL's rows without the deepstack flags
_LING3VL_TOWER = ("visual.patch_embed.", "visual.pos_embed.", "visual.blocks.")


def _ling3vl_check(t: dict) -> tuple[str, Any, Any] | None:
    v = t.get("vision_config") or {}
    if v.get("disable_merger_proj") is not True:
        return "vision_config.disable_merger_proj", True, v.get("disable_merger_proj")
    if v.get("out_hidden_size") is None:
        return "vision_config.out_hidden_size", "a value", "no such field"
    return None


LING3VL_VISION = Projector(
    hf_archs=("BailingMoeV3VLForConditionalGeneration",),
    keep=("model.visual.", "visual.", "linear_proj."),
    rename=lambda name: name.removeprefix("model."),
    force=_qwen_force,
    required=NO_IMAGE_SIZE,
    check=_ling3vl_check,
    entry=Arch(
        hf_archs=("BailingMoeV3VLForConditionalGeneration",),
        gguf_arch="clip",
        meta=[
            *_QWEN3VL_BASE_ROWS,
            _const("projector_type", "ling3vl", VT.STRING),
            *[
                r
                for r in QWEN3VL_VISION.entry.meta[len(BASE_ROWS) + 1 :]
                if not (isinstance(r, MetaKey) and r.key == "vision.is_deepstack_layers")
            ],
        ],
        names=[
            *[r for r in QWEN3VL_VISION.entry.names if r.hf.startswith(_LING3VL_TOWER)],
            *_wb(
                [
                    ("visual.merger.norm", "mm.input_norm"),
                    ("linear_proj.0", "mm.0"),
                    ("linear_proj.2", "mm.2"),
                ]
            ),
        ],
        splits=QWEN3VL_VISION.entry.splits,
        required=(),
    ),
)


# --------------------------------------------------------------------------- Phi-4 vision


def _phi4_layers(v: dict) -> int:
    return int(next(v[k] for k in BLOCK_KEYS if k in v))


def _phi4_check(t: dict) -> tuple[str, Any, Any] | None:
    """Phi4VisionMmprojModel refuses a tower of fewer than 2 layers (it drops the last)."""
    vc = t.get("vision_config") or {}
    key = next((k for k in BLOCK_KEYS if k in vc), None)
    if key is not None and int(vc[key]) < 2:
        return f"vision_config.{key}", "at least 2 layers", vc[key]
    return None


def _phi4_pixels(key: str) -> Callable[[dict], int]:
    return lambda v: P4.pixels(key, v[PREPROCESSOR], v[GLOBAL], v[P4.PATCH])


# Phi4VisionMmprojModel (arch/phi4v.py): a SigLIP2 NaFlex tower read at hidden_states[-2]
# (its last layer, post-norm and head not written; block count one less) and LLaVA's
# 2-layer GELU MLP; patch size from the image processor, image size from the position
# table, the image budget from min / max_num_patches
PHI4V_VISION = Projector(
    hf_archs=("Phi4ForCausalLMV",),
    keep=P4.KEEP,
    drop=P4.DROP,
    rename=P4.rename,
    renumber=lambda name, v: P4.renumber(name, _phi4_layers(v)),
    force=_base_force,
    required=BASE_REQUIRED[2:],
    check=_phi4_check,
    from_shapes=lambda v, shapes: P4.from_shapes(v[PREPROCESSOR], shapes),
    entry=Arch(
        hf_archs=("Phi4ForCausalLMV",),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=m("vision.image_size", P4.IMAGE_SIZE),
                vision__patch_size=m("vision.patch_size", P4.PATCH),
                vision__block_count=m(
                    "vision.block_count", *BLOCK_KEYS, value=lambda v: _phi4_layers(v) - 1
                ),
            ),
            _const("projector_type", "phi4", VT.STRING),
            m("vision.image_min_pixels", PREPROCESSOR, value=_phi4_pixels("min_num_patches")),
            m("vision.image_max_pixels", PREPROCESSOR, value=_phi4_pixels("max_num_patches")),
            _const("use_gelu", True, VT.BOOL),
            m(
                "vision.attention.layer_norm_epsilon",
                "layer_norm_eps",
                t=VT.FLOAT32,
                value=lambda v: v.get("layer_norm_eps", 1e-6),
            ),
        ],
        names=[*SIGLIP_NAMES, *_wb([("mm_projector.0", "mm.0"), ("mm_projector.2", "mm.2")])],
        transforms=[
            Transform(
                "phi4_patch_to_conv",
                r"embeddings\.patch_embedding\.weight$",
                P4.patch_to_conv,
                P4.conv_to_patch,
                shape=P4.patch_shape,
                inverse_shape=P4.conv_shape,
            ),
        ],
        required=(),
    ),
)


# --------------------------------------------------------------------------- dots.ocr

_DOTS = "vision_tower."
_DOTS_BLOCK = _DOTS + "blocks.{bid}."


def _dotsocr_check(t: dict) -> tuple[str, Any, Any] | None:
    """The reference maps ``merger.mlp.{bid}`` through the tower's block map (numbered
    below the block count): a tower of fewer than 3 blocks leaves ``merger.mlp.2``
    unmapped there (``Can not map tensor``), so it is refused before any output."""
    vc = t.get("vision_config") or {}
    key = next((k for k in BLOCK_KEYS if k in vc), None)
    n = vc.get(key) if key is not None else None
    if isinstance(n, int) and not isinstance(n, bool) and n < 3:
        return f"vision_config.{key}", "at least 3 blocks", n
    return None


# DotsOCRVisionModel (conversion/dotsocr.py; the remote-code DotsVisionTransformer): Conv2d
# patches with an RMS norm (``patch_embed.patchifier``), blocks of fused QKV and a SwiGLU
# MLP (``fc1`` gate, ``fc3`` up, ``fc2`` down), a final RMS norm (``post_trunk_norm`` ->
# ``mm.post_norm``) and Qwen2-VL's merger (LayerNorm, GELU MLP over 2x2 merged patches).
# Rows: the base ones (image size 0: dynamic resolution), then the projector type, the
# image processor's pixel bounds, the tower's RMS epsilon, the merge size as the
# projector scale factor (mtmd's dots_ocr reads it there) and SiLU
DOTSOCR_VISION = Projector(
    hf_archs=("DotsOCRForCausalLM",),
    keep=(_DOTS,),
    force=_base_force,
    required=(*NO_IMAGE_SIZE, ("rms_norm_eps",), ("spatial_merge_size",)),
    check=_dotsocr_check,
    entry=Arch(
        hf_archs=("DotsOCRForCausalLM",),
        gguf_arch="clip",
        meta=[
            *replace_rows(BASE_ROWS, vision__image_size=_const("vision.image_size", 0, VT.UINT32)),
            _const("projector_type", "dots_ocr", VT.STRING),
            m("vision.image_min_pixels", PREPROCESSOR, value=_pixels("min_pixels")),
            m("vision.image_max_pixels", PREPROCESSOR, value=_pixels("max_pixels")),
            m("vision.attention.layer_norm_epsilon", "rms_norm_eps", t=VT.FLOAT32),
            m("vision.projector.scale_factor", "spatial_merge_size"),
            _const("use_silu", True, VT.BOOL),
        ],
        names=_wb(
            [
                (_DOTS + "patch_embed.patchifier.proj", "v.patch_embd"),
                (_DOTS + "patch_embed.patchifier.norm", "v.pre_ln"),
                (_DOTS_BLOCK + "attn.qkv", _VBLK + "attn_qkv"),
                (_DOTS_BLOCK + "attn.proj", _VBLK + "attn_out"),
                (_DOTS_BLOCK + "norm1", _VBLK + "ln1"),
                (_DOTS_BLOCK + "norm2", _VBLK + "ln2"),
                (_DOTS_BLOCK + "mlp.fc1", _VBLK + "ffn_gate"),
                (_DOTS_BLOCK + "mlp.fc3", _VBLK + "ffn_up"),
                (_DOTS_BLOCK + "mlp.fc2", _VBLK + "ffn_down"),
                (_DOTS + "post_trunk_norm", "mm.post_norm"),
                (_DOTS + "merger.ln_q", "mm.input_norm"),
                (_DOTS + "merger.mlp.0", "mm.0"),
                (_DOTS + "merger.mlp.2", "mm.2"),
            ]
        ),
        required=(),
    ),
)

# --------------------------------------------------------------------------- MiMo-V2.5

# MiMoV2VisionAudioModel: the mimovl vision tower, the LLM-side audio connector and the
# audio tokenizer's encoder of ``audio_tokenizer/`` (see arch/mimo_mmproj.py)
MIMO_V25_MMPROJ = Projector(
    hf_archs=(MIMO.HF_CLASS,),
    keep=MIMO.KEEP,
    force=lambda hf, g, ot: MIMO.force(hf, g, ot, _base_force),
    required=(("patch_size",), ("hidden_size",), ("intermediate_size",), ("spatial_merge_size",)),
    companion=(MIMO.TOKENIZER_WEIGHTS, MIMO.TOKENIZER_CONFIG, MIMO.tokenizer_tensors),
    companion_view=lambda cfg, shapes: MIMO.companion_view(cfg, shapes, AUDIO),
    entry=Arch(
        hf_archs=(MIMO.HF_CLASS,),
        gguf_arch="clip",
        meta=[
            *replace_rows(
                BASE_ROWS,
                vision__image_size=_QWEN_IMAGE_SIZE,
                vision__block_count=m(
                    "vision.block_count",
                    "depth",
                    value=lambda v: v["n_layers"] if "n_layers" in v else v.get("depth", 28),
                ),
                vision__attention__head_count=m(
                    "vision.attention.head_count",
                    "num_heads",
                    value=lambda v: v.get("num_heads", 32),
                ),
            ),
            *audio_rows(),
            *(MetaKey(k, (), t, fn) for k, fn, t in MIMO.class_rows(GLOBAL, AUDIO, PREPROCESSOR)),
        ],
        names=[NameRule(h, g) for h, g in MIMO.NAMES],
        stacks=[
            Stack(
                MIMO.CODE_EMBD[0],
                MIMO.CODE_EMBD[1],
                lambda v: int(v[GLOBAL]["audio_config"]["audio_channels"]),
                group="code_embd",
            )
        ],
        splits=[QWEN25VL_VISION.entry.splits[-1]],
        required=(),
    ),
)


# --------------------------------------------------------------------------- DeepSeek-V4 Flash

_DSV4 = "vision."
_DSV4_BLOCK = _DSV4 + "blocks.{bid}."


def _dsv4_vision_of(cfg: dict) -> dict | None:
    """DeepseekV4FlashVisionModel.get_vision_config: the tower from the top-level
    ``vision_*`` fields (None without layers); the image size is nominal (dynamic
    resolution), ``patch * downsample * 16``."""
    if not cfg.get("vision_n_layers"):
        return None
    p, r = cfg["vision_patch_size"], cfg["vision_downsample_ratio"]
    return {
        "num_hidden_layers": cfg["vision_n_layers"],
        "hidden_size": cfg["vision_dim"],
        "num_attention_heads": cfg["vision_n_heads"],
        "intermediate_size": cfg["vision_inter_dim"],
        "patch_size": p,
        "image_size": p * r * 16,
        "downsample_ratio": r,
        "min_pixels": cfg["vision_min_pixels"],
    }


def _dsv4_check(t: dict) -> tuple[str, Any, Any] | None:
    """The class asserts the token cap and aspect ratio llama.cpp hard-codes; and the
    reference maps ``aligner.w{bid}`` through the tower's block map (numbered below the
    block count): a tower of fewer than 3 blocks leaves ``aligner.w2`` unmapped there
    (``Can not map tensor``), so it is refused before any output."""
    n = t.get("vision_n_layers")
    if isinstance(n, int) and not isinstance(n, bool) and n < 3:
        return "vision_n_layers", "at least 3 blocks", n
    for key, want in (("vision_max_n_token", 384), ("vision_max_wh_ratio", 8)):
        if t.get(key) != want:
            return key, want, t.get(key)
    return None


def _dsv4_patch(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    # a Linear over flattened (3, p, p) patches is the Conv2d weight mtmd reads
    p = v["patch_size"]
    return x.reshape(x.shape[0], 3, p, p)


# DeepseekV4FlashVisionModel (conversion/deepseek.py; remote code on the Hub, no
# transformers class): a native-resolution ViT (RMS norms, fused QKV, 2-D RoPE, fused
# SwiGLU ``w1`` split gate then up), its final norm, the aligner's GELU MLP over 3 x 3
# merged patches (``aligner.w1`` / ``w2`` -> ``mm.1`` / ``mm.2``) and the four sentinel
# embeddings; the text is arch/deepseek4.py's.  Rows: the base ones (image mean / std
# 0.5 unless a file says otherwise), the projector type, the tower's RMS epsilon (1e-6,
# not the text's), SiLU, the downsample ratio as the scale factor, the minimum pixels
DSV4_FLASH_VISION = Projector(
    hf_archs=("DeepseekV4ForCausalLM",),
    keep=(_DSV4, "aligner.", "image_"),
    force=_base_force,
    vision_of=_dsv4_vision_of,
    pre_defaults=(("image_mean", [0.5, 0.5, 0.5]), ("image_std", [0.5, 0.5, 0.5])),
    check=_dsv4_check,
    entry=Arch(
        hf_archs=("DeepseekV4ForCausalLM",),
        gguf_arch="clip",
        meta=[
            *BASE_ROWS,
            _const("projector_type", "deepseek4v", VT.STRING),
            _const("vision.attention.layer_norm_epsilon", 1e-6, VT.FLOAT32),
            _const("use_silu", True, VT.BOOL),
            m("vision.projector.scale_factor", "downsample_ratio"),
            m("vision.image_min_pixels", "min_pixels"),
        ],
        names=[
            NameRule("image_newline", "v.image_newline"),
            NameRule("image_start", "v.token_embd.img_start"),
            NameRule("image_end", "v.token_embd.img_end"),
            NameRule("image_pad", "v.token_embd.img_pad"),
            *_wb(
                [
                    (_DSV4 + "patch_embed.proj", "v.patch_embd"),
                    (_DSV4_BLOCK + "attn.wqkv", _VBLK + "attn_qkv"),
                    (_DSV4_BLOCK + "attn.wo", _VBLK + "attn_out"),
                    (_DSV4_BLOCK + "norm1", _VBLK + "ln1"),
                    (_DSV4_BLOCK + "norm2", _VBLK + "ln2"),
                    (_DSV4_BLOCK + "mlp.w2", _VBLK + "ffn_down"),
                    (_DSV4 + "norm", "v.post_ln"),
                    ("aligner.w1", "mm.1"),
                    ("aligner.w2", "mm.2"),
                ]
            ),
        ],
        splits=[
            Split(_DSV4_BLOCK + "mlp.w1" + s, (_VBLK + "ffn_gate" + s, _VBLK + "ffn_up" + s))
            for s in (".weight", ".bias")
        ],
        transforms=[
            Transform(
                "dsv4_patch_linear_as_conv",
                r"^vision\.patch_embed\.proj\.weight$",
                _dsv4_patch,
                lambda x, v, ctx: x.reshape(x.shape[0], -1),
                shape=lambda s, v, ctx: (s[0], 3, v["patch_size"], v["patch_size"]),
                inverse_shape=lambda s, v, ctx: (s[0], s[1] * s[2] * s[3]),
            )
        ],
        required=(),
    ),
)


PROJECTORS: tuple[Projector, ...] = (GEMMA3_VISION, LLAVA_VISION, QWEN25VL_VISION)
PROJECTORS += (GEMMA4_VISION, GEMMA4_UNIFIED)
PROJECTORS += (QWEN3VL_VISION,)
PROJECTORS += (QWEN2VL_VISION,)
PROJECTORS += (SMOLVLM_VISION,)
PROJECTORS += (LFM2VL_VISION,)
PROJECTORS += (LLAMA4_VISION,)
PROJECTORS += (LIGHTONOCR_VISION,)
PROJECTORS += (PADDLEOCR_VISION,)
PROJECTORS += (JANUS_VISION,)
PROJECTORS += (INTERNVL_VISION,)
PROJECTORS += (VOXTRAL_AUDIO,)
PROJECTORS += (QWEN2AUDIO_AUDIO,)
PROJECTORS += (AUDIOFLAMINGO3_AUDIO,)
PROJECTORS += (GLM4V_VISION,)
PROJECTORS += (QWEN25OMNI_VISION,)
PROJECTORS += (QWEN3OMNI_VISION,)
PROJECTORS += (GRANITE_SPEECH,)
PROJECTORS += (GRANITE4_VISION,)
PROJECTORS += (HUNYUANVL_VISION,)
PROJECTORS += (QWEN3ASR_AUDIO,)
PROJECTORS += (DEEPSEEKOCR2_VISION,)
PROJECTORS += (UNLIMITEDOCR_VISION,)
PROJECTORS += (DEEPSEEKOCR_VISION,)
PROJECTORS += (MUSE_GLIMMER_VISION,)
PROJECTORS += (KIMIK25_VISION,)
PROJECTORS += (GLM5V_VISION,)
PROJECTORS += (SARASHINA2_VISION,)
PROJECTORS += (KIMIVL_VISION,)
PROJECTORS += (MINIMAXM3_VISION,)
PROJECTORS += (EXAONE4_5_VISION,)
PROJECTORS += (MINICPMV46_VISION,)
PROJECTORS += (YOUTUVL_VISION,)
PROJECTORS += (QWEN4EXP_VISION,)
PROJECTORS += (GLM5NEXT_VISION,)
PROJECTORS += (GEMMA3N_VISION_AUDIO,)
PROJECTORS += (DOTS3NOTE_MMPROJ,)
PROJECTORS += (ULTRAVOX_AUDIO,)
PROJECTORS += (MERALION2_AUDIO,)
PROJECTORS += (LFM2_AUDIO,)
PROJECTORS += (LING3VL_VISION,)
PROJECTORS += (PHI4V_VISION,)
PROJECTORS += (POCKETTTS_AUDIO,)
PROJECTORS += (DOTSOCR_VISION,)
PROJECTORS += (COGVLM_VISION,)
PROJECTORS += (QWEN3TTS_AUDIO,)
PROJECTORS += (MIMO_V25_MMPROJ,)
PROJECTORS += (DSV4_FLASH_VISION,)
PROJECTORS += (GLMASR_AUDIO,)
#: HF architecture name -> projector entry
MMPROJ_REGISTRY: dict[str, Projector] = {h: p for p in PROJECTORS for h in p.hf_archs}
