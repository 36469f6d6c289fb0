"""Granite 4 Vision: the text rows and the ``granite4_vision`` projector.

conversion/granite.py's ``Granite4VisionMmprojModel`` writes a
``Granite4VisionForConditionalGeneration``'s SigLIP tower and its Window Q-Former
projectors; the text half is a ``granite`` file (``text_config.architectures``) with one
more row.  The projectors are of two kinds: ``layerwise_projectors.i`` (one per
``deepstack_layer_map`` pair ``[vision layer, text layer]``) and the four
``spatial_projectors.j`` (all reading ``spatial_vision_layer``, one per
``spatial_target_layers`` text layer).  :func:`projector_map` lists them as the
reference normalises them: negative layers counted from the end, the deepstack pairs
sorted, then all ordered by text layer; a projector's place in that list is its GGUF
block (``v.proj_blk.N``), whatever its kind.

* text -- ``granite.deepstack_mapping``: per text layer, the projector injected there
  (-1: none; the first projector is the input embedding stream, so never listed);
* projector rows -- the vision base rows, ``clip.projector_type = granite4_vision``, the
  SigLIP epsilon (``layer_norm_eps``, else 1e-6), GELU, ``preproc_image_size`` (the
  tower's image size, else 384), the ``downsample_rate`` ``"q/w"`` as query side and
  window side, each projector's vision layer (``vision.feature_layer``) and spatial
  offset (-1 for a layerwise one), ``image_grid_pinpoints`` flattened with each
  ``[h, w]`` written ``w, h``;
* names -- the tower as SigLIP's, ``model.image_newline`` -> ``v.image_newline``, each
  projector's tensors renumbered to its block (its one Q-Former layer included);
  ``vision_model.head`` (SigLIP's pooling head) and ``lm_head`` not read.
"""

from __future__ import annotations

from typing import Any

from ._model import NameRule

#: (kind in the HF name, projector map kind)
_KINDS = ("layerwise", "spatial")


def projector_map(cfg: dict) -> list[tuple[int, int, str, int]]:
    """``(vision layer, text layer, kind, index within the kind)`` per projector, in
    block order (see the module docstring); ``cfg`` the whole config."""
    deep = cfg.get("deepstack_layer_map") or []
    spatial = cfg.get("spatial_target_layers") or []
    n_text = cfg["text_config"]["num_hidden_layers"]
    n_vision = cfg["vision_config"]["num_hidden_layers"]
    out = []
    for i, (v, t) in enumerate(sorted(deep)):
        out.append((v + n_vision if v < 0 else v, t + n_text if t < 0 else t, "layerwise", i))
    if spatial:
        sv = cfg.get("spatial_vision_layer", -1)
        sv = sv + n_vision if sv < 0 else sv
        out += [(sv, t, "spatial", j) for j, t in enumerate(spatial)]
    return sorted(out, key=lambda e: e[1])


def is_granite4_vision(cfg: dict) -> bool:
    return bool(cfg.get("spatial_target_layers") or cfg.get("deepstack_layer_map"))


def deepstack_mapping(cfg: dict) -> list[int] | None:
    """GraniteModel's ``deepstack_mapping`` row (None: not a Granite 4 Vision config);
    ``cfg`` the text config merged over the whole config, as the text class reads it."""
    if not is_granite4_vision(cfg):
        return None
    full = {**cfg, "text_config": {**(cfg.get("text_config") or {}), **cfg}}
    full.setdefault("vision_config", cfg.get("vision_config") or {})
    row = [-1] * cfg["num_hidden_layers"]
    for i, (_, t, _, _) in enumerate(projector_map(full)):
        if i:  # the first projector is the embedding stream
            row[t] = i
    return row


def renumber(name: str, view: dict, glob: str) -> str:
    """A projector tensor's name with its block (``proj.N.<rest>``); others as they are."""
    for kind in _KINDS:
        head = f"model.{kind}_projectors."
        if name.startswith(head):
            idx, _, rest = name[len(head) :].partition(".")
            if not idx.isdecimal():
                return name
            for b, (_, _, k, j) in enumerate(projector_map(view[glob])):
                if k == kind and j == int(idx):
                    return f"proj.{b}.{rest}"
            return name  # a projector the config does not list: unmapped
    return name.removeprefix("model.")


_Q = "proj.{bid}.qformer.encoder.layer.0."
_P = "v.proj_blk.{bid}."
_PAIRS = [
    ("proj.{bid}.norm", _P + "norm"),
    ("proj.{bid}.out_linear", _P + "linear"),
    (_Q + "attention.attention.query", _P + "self_attn_q"),
    (_Q + "attention.attention.key", _P + "self_attn_k"),
    (_Q + "attention.attention.value", _P + "self_attn_v"),
    (_Q + "attention.output.LayerNorm", _P + "self_attn_norm"),
    (_Q + "attention.output.dense", _P + "self_attn_out"),
    (_Q + "crossattention.attention.query", _P + "cross_attn_q"),
    (_Q + "crossattention.attention.key", _P + "cross_attn_k"),
    (_Q + "crossattention.attention.value", _P + "cross_attn_v"),
    (_Q + "crossattention.output.LayerNorm", _P + "cross_attn_norm"),
    (_Q + "crossattention.output.dense", _P + "cross_attn_out"),
    (_Q + "intermediate_query.dense", _P + "ffn_up"),
    (_Q + "output_query.LayerNorm", _P + "ffn_norm"),
    (_Q + "output_query.dense", _P + "ffn_down"),
    ("proj.{bid}.qformer.layernorm", _P + "post_norm"),
]
PROJECTOR_NAMES: list[NameRule] = [
    *(NameRule(h + s, g + s) for h, g in _PAIRS for s in (".weight", ".bias")),
    NameRule("proj.{bid}.image_positions", _P + "img_pos"),
    NameRule("proj.{bid}.query", _P + "query"),
    NameRule("image_newline", "v.image_newline"),
]


def sides(cfg: dict) -> tuple[int, int]:
    """``downsample_rate`` ``"q/w"`` -> (query side, window side)."""
    parts = str(cfg["downsample_rate"]).split("/")
    if len(parts) != 2:
        raise ValueError(f"downsample_rate {cfg['downsample_rate']!r}: not 'query/window'")
    return int(parts[0]), int(parts[1])


def pinpoints(cfg: dict) -> list[int] | None:
    pts: Any = cfg.get("image_grid_pinpoints")
    return [x for h, w in pts for x in (w, h)] if pts else None
