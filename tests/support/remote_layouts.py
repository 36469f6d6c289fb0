"""Tiny checkpoints of remote-code models assembled from a transformers 5.24 family that
computes the same thing under other names (see docs/convert-architectures.md, the
projector section).

* :func:`glm5v` -- GLM-5.2-Vision (``Glm5vForConditionalGeneration``): Kimi-K2.5's
  MoonViT3d tower and patch-merger projector (the reference's ``Glm5vModel`` is its
  ``KimiK25Model`` with the projector's two layers named ``mm_projector.linear_1`` /
  ``linear_2``).  Built from :func:`support.vlm_models.kimik25`'s folder (transformers'
  ``Kimi_K25ForConditionalGeneration`` loads that one: the oracle's side), the two
  layers renamed.  The text half keeps Kimi's tiny DeepSeek-V3 under
  ``text_config.architectures`` (GLM-5.2-Vision's own text is GLM-5's, another entry).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.vlm_models import hub_layout

#: Kimi-K2.5's projector names -> GLM-5.2-Vision's
_GLM5V_NAMES = (("mm_projector.proj.0.", "mm_projector.linear_1."),
                ("mm_projector.proj.2.", "mm_projector.linear_2."))  # fmt: skip


def glm5v(kimi: Path, folder: Path) -> Path:
    """A GLM-5.2-Vision folder over the weights of the Kimi-K2.5 folder ``kimi``."""
    shutil.copytree(kimi, folder)

    def rename(k: str) -> str:
        for a, b in _GLM5V_NAMES:
            if k.startswith(a):
                return b + k[len(a) :]
        return k

    hub_layout(folder, rename)
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg["architectures"] = ["Glm5vForConditionalGeneration"]
    cfg["text_config"]["architectures"] = ["DeepseekV3ForCausalLM"]
    path.write_text(json.dumps(cfg, indent=2))
    return folder


#: Kimi-K2.5's projector names -> Kimi-VL's
_KIMIVL_NAMES = (("mm_projector.pre_norm.", "multi_modal_projector.pre_norm."),
                 ("mm_projector.proj.0.", "multi_modal_projector.linear_1."),
                 ("mm_projector.proj.2.", "multi_modal_projector.linear_2."))  # fmt: skip


def kimivl(kimi: Path, folder: Path) -> Path:
    """A Kimi-VL (``KimiVLForConditionalGeneration``) folder over the weights of the
    Kimi-K2.5 folder ``kimi``: a single-frame MoonViT3d is Kimi-VL's MoonViT (the same
    tower names, interleaved 2-D RoPE, bicubic position table, no temporal term for one
    frame), the projector renamed to Kimi-VL's ``multi_modal_projector.*``, the Hub's
    ``init_pos_emb_*`` fields added; the text stays Kimi's tiny DeepSeek-V3."""
    shutil.copytree(kimi, folder)

    def rename(k: str) -> str:
        for a, b in _KIMIVL_NAMES:
            if k.startswith(a):
                return b + k[len(a) :]
        return k

    hub_layout(folder, rename)
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg["architectures"] = ["KimiVLForConditionalGeneration"]
    v = cfg["vision_config"]
    v["init_pos_emb_height"], v["init_pos_emb_width"] = v["pos_emb_height"], v["pos_emb_width"]
    path.write_text(json.dumps(cfg, indent=2))
    return folder
