"""Phi-4 reasoning-vision's projector: conversion/phi.py ``Phi4VisionMmprojModel``.

The checkpoint (``Phi4ForCausalLMV``, Hub remote code) is a Phi-3 text (the ``phi3``
entry, the reference's ``Phi3MiniModel``), a SigLIP2 NaFlex tower under
``model.vision_tower.vision_tower.vision_model.`` and a two-layer GELU MLP
``model.mm_projector.0`` / ``.2``.  The model reads the tower's ``hidden_states[-2]``,
so the projector file holds one layer less than the tower:

* ``clip.vision.block_count`` = layers - 1; the last layer's tensors, ``post_layernorm``
  and the pooling ``head`` are not written (fewer than 2 layers: refused);
* ``patch_size`` from ``preprocessor_config.json`` (required there, whatever the vision
  config says), ``image_size`` = sqrt(position-table rows) x patch (a square table);
* ``image_min_pixels`` / ``image_max_pixels`` = ``min_num_patches`` /
  ``max_num_patches`` (the image processor's, else the config's top level; both
  required) x patch^2;
* the NaFlex patch embedding, a linear layer ``[n, p * p * c]`` over channel-last patch
  pixels, is written as a Conv2d kernel ``[n, c, p, p]``;
* ``mm_projector.0`` / ``.2`` -> ``mm.0`` / ``mm.2``; any other index is not read, as
  the reference skips it.

mtmd runs the file through its SigLIP graph (the position table resized to each image's
patch grid, bilinear with antialiasing) and a GELU FFN for the projector.
"""

from __future__ import annotations

import math
import re

import numpy as np

#: the source names after the reference's rename (``model.vision_tower.vision_tower.``
#: -> ``vision_tower.``)
TOWER = "vision_tower.vision_model."
POSITION_TABLE = TOWER + "embeddings.position_embedding.weight"
PATCH_EMBD = TOWER + "embeddings.patch_embedding.weight"
#: the source prefixes read (the reference keeps these after its rename)
KEEP = ("model.vision_tower.vision_tower.", "vision_tower.", "model.mm_projector.", "mm_projector.")
#: not written: the tower's post-norm and pooling head
DROP = (".vision_model.head.", ".vision_model.post_layernorm.")
#: view keys set from the tensors (:func:`from_shapes`)
IMAGE_SIZE = "phi4.image_size"
PATCH = "phi4.patch_size"

_MLP = re.compile(r"^(?:model\.)?mm_projector\.(\d+)\.(.*)$")


def rename(name: str) -> str:
    return name.replace("model.vision_tower.vision_tower.", "vision_tower.")


def renumber(name: str, n_layers: int) -> str | None:
    """``name`` as the rules see it, or None for a tensor the class skips: the tower's
    last layer (``n_layers`` - 1), and an ``mm_projector`` index other than 0 and 2."""
    if name.startswith(f"{TOWER}encoder.layers.{n_layers - 1}."):
        return None
    mt = _MLP.match(name)
    if mt is not None:
        if mt[1] not in ("0", "2"):
            return None
        return f"mm_projector.{mt[1]}.{mt[2]}"
    return name


def pixels(key: str, preprocessor: dict, cfg: dict, patch: int) -> int:
    """``min_num_patches`` / ``max_num_patches`` x patch^2 (the image processor's value,
    else the config's)."""
    n = preprocessor.get(key, cfg.get(key))
    if n is None:
        raise KeyError(f"{key} (preprocessor_config.json or config.json) is required")
    return int(n) * patch * patch


def from_shapes(preprocessor: dict, shapes: dict[str, tuple[int, ...]]) -> dict:
    """The view fields the class reads off the tensors: the patch size (the image
    processor's; required) and the image size (sqrt(position-table rows) x patch)."""
    if preprocessor.get("patch_size") is None:
        raise KeyError("patch_size (preprocessor_config.json) is required")
    patch = int(preprocessor["patch_size"])
    table = next((s for k, s in shapes.items() if k.endswith(POSITION_TABLE)), None)
    if table is None:
        raise KeyError("the tower's position table (embeddings.position_embedding.weight)")
    side = math.isqrt(int(table[0]))
    if side * side != table[0]:
        raise ValueError(f"position table of {table[0]} rows (a square grid is required)")
    patch_embd = next((s for k, s in shapes.items() if k.endswith(PATCH_EMBD)), None)
    if patch_embd is not None and (len(patch_embd) != 2 or patch_embd[1] % (patch * patch)):
        raise ValueError(f"patch embedding {list(patch_embd)} is not [n, c * {patch} * {patch}]")
    return {PATCH: patch, IMAGE_SIZE: side * patch}


def patch_to_conv(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    """``[n, p * p * c]`` (channel-last patch pixels) -> a Conv2d kernel ``[n, c, p, p]``."""
    p = v[PATCH]
    return x.reshape(x.shape[0], p, p, x.shape[1] // (p * p)).transpose(0, 3, 1, 2)


def patch_shape(s: tuple[int, ...], v: dict, ctx: dict) -> tuple[int, ...]:
    p = v[PATCH]
    return (s[0], s[1] // (p * p), p, p)


def conv_to_patch(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    """The inverse of :func:`patch_to_conv`."""
    return x.transpose(0, 2, 3, 1).reshape(x.shape[0], -1)


def conv_shape(s: tuple[int, ...], v: dict, ctx: dict) -> tuple[int, ...]:
    return (s[0], s[1] * s[2] * s[3])
