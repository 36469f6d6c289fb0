"""MiniCPM-V 4.6 (``MiniCPMV4_6ForConditionalGeneration``): conversion/minicpm.py's
``MiniCPMV4_6TextModel`` and the name rules of its ``MiniCPMV4_6VisionModel`` (the
projector entry is :data:`weightsmith.convert.arch.mmproj.MINICPMV46_VISION`).

The text half is a Qwen3.5 text model (GGUF ``qwen35``) under ``model.language_model.*``;
the reference's class drops the final merger (``model.merger.*``) and the
multi-token-prediction tensors (``mtp.*``) but keeps Qwen3.5's MTP bookkeeping: with
``mtp_num_hidden_layers`` in the text config it counts the MTP layers in
``block_count`` and writes ``nextn_predict_layers`` although no MTP tensor is written
(llama.cpp 0.3.36 then cannot load the file: ``blk.<n_layer>.attn_norm.weight`` not
found; ours is the same file).  Without the field the reference stops on an assertion;
ours writes the trunk alone (no ``nextn`` row), which llama.cpp loads.

The vision tower is a SigLIP ViT (``model.vision_tower.*``) with a window-attention
merger (``vit_merger``: 2 x 2 windows merged into one token) after layer
``insert_layer_id``, and a final merger (``model.merger.mlp.0``: LayerNorm, Linear,
GELU, Linear on 2 x 2 merged tokens) into the text width.
"""

from __future__ import annotations

from dataclasses import replace

from ._model import NameRule
from .qwen35 import QWEN35

MINICPMV46_TEXT = replace(
    QWEN35,
    hf_archs=("MiniCPMV4_6ForConditionalGeneration",),
    skip=(*QWEN35.skip, r"^model\.merger\.", r"^(model\.)?mtp\."),
    # no MTP tensor is written: no rename into the trunk, no count from the checkpoint
    rename=None,
    from_tensors=None,
    mtp=None,  # not done: the reference's class drops the blocks in its own filter
    # GGUF -> HF gives the file back as the ``qwen35`` entry's Qwen3_5ForCausalLM
    model_types={},
)

_TOWER = "model.vision_tower."
_LAYER = _TOWER + "encoder.layers.{bid}."
_VIT_MERGER = _TOWER + "vit_merger."
_MERGER = "model.merger.mlp.0."
_VBLK = "v.blk.{bid}."

#: (HF prefix, GGUF prefix) pairs, each with a weight and a bias (gguf-py's map)
VISION_PAIRS = [
    (_TOWER + "embeddings.patch_embedding", "v.patch_embd"),
    (_TOWER + "embeddings.position_embedding", "v.position_embd"),
    (_TOWER + "post_layernorm", "v.post_ln"),
    (_LAYER + "self_attn.q_proj", _VBLK + "attn_q"),
    (_LAYER + "self_attn.k_proj", _VBLK + "attn_k"),
    (_LAYER + "self_attn.v_proj", _VBLK + "attn_v"),
    (_LAYER + "self_attn.out_proj", _VBLK + "attn_out"),
    (_LAYER + "layer_norm1", _VBLK + "ln1"),
    (_LAYER + "layer_norm2", _VBLK + "ln2"),
    (_LAYER + "mlp.fc1", _VBLK + "ffn_up"),
    (_LAYER + "mlp.fc2", _VBLK + "ffn_down"),
    (_VIT_MERGER + "layer_norm1", "v.vit_merger.ln1"),
    (_VIT_MERGER + "self_attn.q_proj", "v.vit_merger.attn_q"),
    (_VIT_MERGER + "self_attn.k_proj", "v.vit_merger.attn_k"),
    (_VIT_MERGER + "self_attn.v_proj", "v.vit_merger.attn_v"),
    (_VIT_MERGER + "self_attn.out_proj", "v.vit_merger.attn_out"),
    (_VIT_MERGER + "pre_norm", "v.vit_merger.ds_ln"),
    (_VIT_MERGER + "linear_1", "v.vit_merger.ds_ffn_up"),
    (_VIT_MERGER + "linear_2", "v.vit_merger.ds_ffn_down"),
    (_MERGER + "pre_norm", "mm.input_norm"),
    (_MERGER + "linear_1", "mm.up"),
    (_MERGER + "linear_2", "mm.down"),
]
VISION_NAMES = [NameRule(h + s, g + s) for h, g in VISION_PAIRS for s in (".weight", ".bias")]
KEEP = (_TOWER, "model.merger.")

_MODES = {"4x": 2, "16x": 4}


def downsample_mode(pre: dict) -> str:
    """The image processor's ``downsample_mode`` (``16x`` without one); another value is
    a ValueError, as in the reference."""
    mode = pre.get("downsample_mode", "16x")
    if mode not in _MODES:
        raise ValueError(f"downsample_mode {mode!r} is not one of {sorted(_MODES)}")
    return mode


def scale_factor(pre: dict) -> int:
    """``projector.scale_factor``: 2 (``4x``: no window merger) or 4 (``16x``)."""
    return _MODES[downsample_mode(pre)]


def drop_4x(name: str, pre: dict) -> str | None:
    """In ``4x`` mode the reference leaves the window merger out of the file."""
    return None if downsample_mode(pre) == "4x" and ".vit_merger." in name else name


def insert_layer(global_cfg: dict, vision: dict) -> list[int]:
    """``wa_layer_indexes`` carries the window merger's place: the top-level
    ``insert_layer_id``, else the vision config's, else 6."""
    return [int(global_cfg.get("insert_layer_id", vision.get("insert_layer_id", 6)))]
