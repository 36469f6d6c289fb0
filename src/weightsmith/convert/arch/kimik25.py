"""Kimi-K2.5's vision tower and projector (``kimik25``): names and the Q/K reorder.

conversion/kimivl.py's ``KimiK25Model`` reads a ``KimiK25ForConditionalGeneration``
checkpoint in the Hub's layout: MoonViT3d under ``vision_tower.`` (a Conv2d patch
embedding, a learned ``[H, W, C]`` position table kept 3-D, blocks of LayerNorms
``norm0`` / ``norm1``, a fused ``wqkv``, ``wo`` and a GELU MLP ``fc0`` / ``fc1``, a final
LayerNorm), then ``mm_projector.``: a LayerNorm over each patch (``pre_norm``) and a
two-layer GELU MLP over 2x2-merged patches (``proj.0`` / ``proj.2`` -> ``mm.1`` /
``mm.2``).  The text half is DeepSeek-V3 (:data:`~.deepseek.DEEPSEEK2`).

The tower's 2-D RoPE pairs neighbouring dimensions in quarters of each head (x pairs,
then y pairs, interleaved); llama.cpp's ``build_rope_2d`` wants each half contiguous,
so the Q and K thirds of ``wqkv`` (rows of the weight, entries of the bias) are
reordered per head: ``[n_head, hd / 4, 2, 2]`` -> ``[n_head, 2, hd / 4, 2]``; the fused
tensor stays fused (``attn_qkv``).
"""

from __future__ import annotations

import numpy as np

from ._model import NameRule

TOWER = "vision_tower."
_LAYER = TOWER + "encoder.blocks.{bid}."
_VBLK = "v.blk.{bid}."


def _heads(v: dict) -> int:
    return v.get("num_attention_heads", 16)


def _reorder(x: np.ndarray, n_head: int, forward: bool) -> np.ndarray:
    """The Q and K thirds of a fused QKV weight (rows) or bias, reordered per head."""
    third = x.shape[0] // 3
    hd = third // n_head
    out = x.copy()
    for part in (0, 1):
        y = x[part * third : (part + 1) * third]
        rest = y.shape[1:]
        if forward:
            y = y.reshape(n_head, hd // 4, 2, 2, *rest).swapaxes(1, 2)
        else:
            y = y.reshape(n_head, 2, hd // 4, 2, *rest).swapaxes(1, 2)
        out[part * third : (part + 1) * third] = y.reshape(third, *rest)
    return out


def split_rope(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    return _reorder(x, _heads(v), True)


def interleaved_rope(x: np.ndarray, v: dict, ctx: dict) -> np.ndarray:
    return _reorder(x, _heads(v), False)


def _wb(pairs: list[tuple[str, str]]) -> list[NameRule]:
    return [NameRule(h + s, g + s) for h, g in pairs for s in (".weight", ".bias")]


NAMES = [
    *_wb(
        [
            ("mm_projector.pre_norm", "mm.input_norm"),
            ("mm_projector.proj.0", "mm.1"),
            ("mm_projector.proj.2", "mm.2"),
            (_LAYER + "mlp.fc0", _VBLK + "ffn_up"),
            (_LAYER + "mlp.fc1", _VBLK + "ffn_down"),
            (_LAYER + "norm0", _VBLK + "ln1"),
            (_LAYER + "norm1", _VBLK + "ln2"),
            (_LAYER + "wo", _VBLK + "attn_out"),
            (_LAYER + "wqkv", _VBLK + "attn_qkv"),
            (TOWER + "encoder.final_layernorm", "v.post_ln"),
            (TOWER + "patch_embed.proj", "v.patch_embd"),
        ]
    ),
    NameRule(TOWER + "patch_embed.pos_emb.weight", "v.position_embd.weight"),
]
