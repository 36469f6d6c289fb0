"""Where a multimodal ``config.json`` keeps its text model's config, and how the converter's
config reader merges it up (the reference's ``load_hparams`` renames and
``TextModel.__init__``'s ``text_config`` merge).

:data:`NESTED_TEXT` is the registry: one :class:`NestedText` row per layout, in the order
they are tried (a checkpoint holds one of these layouts; the first row that matches is
applied, and a config matching none is merged by its plain ``text_config``, if any).  A
row says

* ``path`` -- the keys from the top level down to the text config (a dict there, or the
  row does not apply);
* ``merge`` -- how it becomes the config the text classes read, one of:

  - :func:`rename`: the reference renames it ``text_config``, which is then merged up
    (:func:`merge_up`);
  - :func:`rename_keep_top`: the same, with the top-level ``architectures`` kept beside
    the merged one as :data:`TOP_ARCHITECTURES` (a text class that tells a family's
    form by its top-level class reads it there);
  - :func:`merge_without_token_ids`: merged up as it is, its ``*_token_id`` fields
    dropped, no ``text_config`` left;
  - a family's hook ``(cfg, nested) -> config`` (the whole config, merged);
* ``archs`` -- the top-level classes the row is for (empty: any class).

The lookup itself is :func:`text_config_of` (the first row that applies, else the plain
``text_config``): the reader (:func:`text_merged`) and the projector's vision view
(:func:`~.mmproj.vision_view`: the text width, the config the projector rows read) both
go through it, so a new layout is one row here and names no family anywhere else.

The rows' order is the precedence when a config held two layouts; none does (each
family's config.json holds one of these keys, and no ``text_config`` beside it), so the
order only matters for ``talker_config``, whose row is limited to Qwen3-TTS's class: the
Qwen omni configs hold a ``talker_config`` beside ``thinker_config`` and are read by the
thinker's row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import qwen3tts

#: the config field holding the top-level ``architectures`` when the text config's own
#: class was merged over it (:func:`rename_keep_top`)
TOP_ARCHITECTURES = "_top_architectures"

#: multimodal classes whose text class is the top-level one (Sarashina2-VL's text_config
#: names plain Llama, whose class does not strip the ``llm.`` wrapper)
TOP_LEVEL_TEXT = ("Sarashina2VisionForCausalLM",)


def merge_up(cfg: dict) -> dict:
    """``text_config`` merged over the top level, as the reference does; the top-level
    ``architectures`` stay when the text config's are null (they do not name the class)
    or the top-level class is one of :data:`TOP_LEVEL_TEXT` (the reference's
    ``get_model_architecture`` routes these classes' text on the top level whatever
    ``text_config`` names)."""
    if not isinstance(cfg.get("text_config"), dict):
        return cfg
    top = cfg.get("architectures")
    cfg = {**cfg, **cfg["text_config"]}
    if cfg.get("architectures") is None or (top and top[0] in TOP_LEVEL_TEXT):
        cfg["architectures"] = top
    return cfg


def rename(cfg: dict, nested: dict) -> dict:
    """``nested`` read as ``text_config`` (the reference's rename), merged up."""
    return merge_up({**cfg, "text_config": nested})


def rename_keep_top(cfg: dict, nested: dict) -> dict:
    """:func:`rename`, with the top-level ``architectures`` kept as :data:`TOP_ARCHITECTURES`."""
    return merge_up({**cfg, "text_config": nested, TOP_ARCHITECTURES: cfg.get("architectures")})


def merge_without_token_ids(cfg: dict, nested: dict) -> dict:
    """``nested`` merged over the top level without its ``*_token_id`` fields."""
    return {**cfg, **{k: v for k, v in nested.items() if not k.endswith("_token_id")}}


@dataclass(frozen=True)
class NestedText:
    """One layout of :data:`NESTED_TEXT` (the module docstring says what the fields mean)."""

    path: tuple[str, ...]
    merge: Callable[[dict, dict], dict]
    archs: tuple[str, ...] = ()

    def find(self, cfg: dict) -> dict | None:
        """The text config this row reads from ``cfg``, or None when the row does not apply."""
        if self.archs and cfg.get("architectures") != list(self.archs):
            return None
        node: object = cfg
        for key in self.path:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else None


NESTED_TEXT: tuple[NestedText, ...] = (
    # InternVL's text config: the reference renames it text_config and merges it up for
    # the hyperparameters, but its SpecialVocab reads config.json as written (no
    # text_config there), so the special-token ids stay the top level's
    NestedText(("llm_config",), merge_without_token_ids),
    # Qwen3-TTS: the talker is the text model, its vocabulary the text one's
    NestedText(("talker_config",), qwen3tts.merged_config, archs=(qwen3tts.HF_CLASS,)),
    # Qwen2.5-Omni / Qwen3-Omni: the text model is the thinker's (as the reference)
    NestedText(("thinker_config", "text_config"), rename),
    # LFM2-Audio's text config: the reference renames it text_config
    NestedText(("lfm",), rename),
    # GLM-ASR's (custom-code layout) text config: the reference renames it text_config;
    # its Llama text class takes GLM Edge's vocabulary by the top-level class
    NestedText(("lm_config",), rename_keep_top),
    # DeepSeek-OCR's text config: the reference renames it text_config; its text class
    # tells DeepSeek-V2's OCR form by the top-level class (kept beside the merged one)
    NestedText(("language_config",), rename_keep_top),
)


def _match(cfg: dict) -> tuple[NestedText, dict] | None:
    """The first :data:`NESTED_TEXT` row that applies to ``cfg`` and the text config it
    finds, or None."""
    for row in NESTED_TEXT:
        if (nested := row.find(cfg)) is not None:
            return row, nested
    return None


def text_config_of(cfg: dict) -> dict | None:
    """The text model's config in ``cfg`` (config.json as written), not merged: the first
    :data:`NESTED_TEXT` row's, else the plain ``text_config`` (a dict), else None."""
    if (hit := _match(cfg)) is not None:
        return hit[1]
    plain = cfg.get("text_config")
    return plain if isinstance(plain, dict) else None


def text_merged(cfg: dict) -> dict:
    """``cfg`` (config.json as written) with its text model's config merged up: by the first
    :data:`NESTED_TEXT` row that applies, else its ``text_config`` (:func:`merge_up`)."""
    if (hit := _match(cfg)) is not None:
        return hit[0].merge(cfg, hit[1])
    return merge_up(cfg)
