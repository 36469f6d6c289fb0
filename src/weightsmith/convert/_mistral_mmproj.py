"""The vision projector of Mistral's original layout -> an ``mmproj`` GGUF.

What ``convert_hf_to_gguf.py --mistral-format --mmproj`` writes (llama.cpp's
``PixtralModel``, conversion/pixtral.py, over ``LlavaVisionModel``): Pixtral-12B-2409,
Mistral Small 3.1 / 3.2 and the like as Mistral publishes them::

    params.json     dim, norm_eps, ..., vision_encoder: {hidden_size, intermediate_size,
                    num_hidden_layers, num_attention_heads, image_size, patch_size,
                    rope_theta, image_break_token_id, [mm_projector_id,
                    spatial_merge_size], ...}
    consolidated*.safetensors   vision_encoder.patch_conv / ln_pre / transformer.layers.N.
                    {attention.wq..wo, attention_norm, ffn_norm, feed_forward.w1..w3},
                    vision_language_adapter.w_in / w_out, [pre_mm_projector_norm,
                    patch_merger.merging_layer], and the text's tok_embeddings
    tekken.json     (read only when params.json's [IMG_BREAK] id is the -1 placeholder)

The rows and names are the registry's :data:`~weightsmith.convert.arch.mmproj.
MISTRAL_VISION`; the rows read the *view* built here: the ``vision_encoder`` section
with params.json's ``norm_eps`` (the tower's norm epsilon), ``dim`` as the projection
width, mistral_common's image mean / std (CLIP's constants: no file holds them) and the
[IMG_BREAK] id.  Planning and writing are :mod:`._mmproj`'s.

Refused before anything is written (named errors): no ``vision_encoder`` (the reference
asserts), a missing hyperparameter the reference reads (it stops on a ``KeyError`` /
``AssertionError``), an [IMG_BREAK] id no file resolves, and an id of 0: the reference
then leaves the ``v.token_embd.img_break`` row out and mtmd refuses its file.
"""

from __future__ import annotations

import numbers
from pathlib import Path

from .. import errors as E
from .._json import read_json
from . import _hf_to_gguf as H
from . import _mmproj
from .arch.mmproj import (
    AUDIO,
    FOLDER,
    GLOBAL,
    MISTRAL_VISION,
    PREPROCESSOR,
    TEXT_WIDTH,
    TOKEN_ID,
)

__all__ = ["plan_mistral_mmproj"]

# mistral_common's DATASET_MEAN / DATASET_STD (multimodal.py), which the reference writes
_MEAN = [0.48145466, 0.4578275, 0.40821073]
_STD = [0.26862954, 0.26130258, 0.27577711]
_TOKEN = "[IMG_BREAK]"


def _bad(path: Path, field: str, expected: str, found: object, what: str) -> E.InvalidModelConfig:
    return E.InvalidModelConfig(what, path=path, field=field, expected=expected, found=found)


def _number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _named_token(d: Path) -> int:
    """get_mistral_token_id: tekken.json's ``special_tokens``, then tokenizer.json's
    ``added_tokens``."""
    for fname, key, text, rank in (("tekken.json", "special_tokens", "token_str", "rank"),
                                   ("tokenizer.json", "added_tokens", "content", "id")):  # fmt: skip
        f = d / fname
        if not f.is_file():
            continue
        j = read_json(f, E.TokenizerInconsistent, fname)
        for t in (j.get(key) or []) if isinstance(j, dict) else []:
            if isinstance(t, dict) and t.get(text) == _TOKEN and isinstance(t.get(rank), int):
                return t[rank]
    raise E.MissingModelFile(
        f"params.json's image_break_token_id is a placeholder and no tokenizer file names "
        f"{_TOKEN}", path=d, field=_TOKEN,
        expected="a special token of tekken.json (or an added token of tokenizer.json)",
        found="none",
    )  # fmt: skip


def _view(d: Path, params: dict) -> dict:
    """The dict MISTRAL_VISION's rows read, every field they need checked."""
    path = d / "params.json"
    ve = params.get("vision_encoder")
    if not isinstance(ve, dict):
        raise _bad(path, "vision_encoder", "an object (the vision tower's hyperparameters)",
                   type(ve).__name__ if ve is not None else "nothing",
                   "params.json has no vision_encoder: no vision tower to write a projector from")  # fmt: skip
    dim = params.get("dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise _bad(path, "dim", "the text width, a positive integer", repr(dim),
                   "params.json lacks the text width the projector maps to")  # fmt: skip
    if not _number(params.get("norm_eps")):
        raise _bad(path, "norm_eps", "a number (the tower's norm epsilon)",
                   repr(params.get("norm_eps")), "params.json lacks norm_eps")  # fmt: skip
    need = list(MISTRAL_VISION.required)
    if ve.get("mm_projector_id") == "patch_merge":
        need.append(("spatial_merge_size",))
    for keys in need:
        if not any(k in ve for k in keys):
            want = "a value" if len(keys) == 1 else "one of " + ", ".join(keys)
            raise _bad(path, "vision_encoder." + keys[0], want, None,
                       "vision hyperparameter missing")  # fmt: skip
    tid = ve["image_break_token_id"]
    if not isinstance(tid, int) or isinstance(tid, bool):
        raise _bad(path, "vision_encoder.image_break_token_id", "an integer token id",
                   repr(tid), "vision hyperparameter of the wrong type")  # fmt: skip
    if tid < 0:  # Mistral Medium 3.5's -1 placeholder: the tokenizer's id
        tid = _named_token(d)
    if tid == 0:
        raise _bad(path, "vision_encoder.image_break_token_id", f"the id of {_TOKEN} (> 0)", 0,
                   f"no {_TOKEN} row: llama.cpp's Pixtral projector needs one")  # fmt: skip
    view = dict(ve)
    view.update({
        "norm_eps": params["norm_eps"], TEXT_WIDTH: dim, GLOBAL: params, AUDIO: None,
        PREPROCESSOR: {"image_mean": _MEAN, "image_std": _STD}, FOLDER: d.name,
        TOKEN_ID: tid,
    })  # fmt: skip
    return view


def plan_mistral_mmproj(d: Path, type: str, weights: list[H._Source]) -> H._Plan:
    """The projector's plan for Mistral's original folder ``d`` (params.json read here;
    ``weights``: its consolidated*.safetensors tensors as the text conversion read them).  ``auto`` reads the first 2-D tensor of the whole folder,
    as the reference's guess."""
    params = read_json(d / "params.json", E.InvalidModelConfig, "params.json",
                       expected="a JSON object")  # fmt: skip
    if not isinstance(params, dict):
        raise _bad(d / "params.json", "params.json", "a JSON object", params.__class__.__name__,
                   "params.json is not an object")  # fmt: skip
    view = _view(d, params)
    return _mmproj.plan_tower(
        MISTRAL_VISION, view, d, type, weights, d / "params.json", section="vision_encoder",
        auto=weights,
    )  # fmt: skip
