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
* :func:`sarashina2vl` -- Sarashina2-VL (``Sarashina2VisionForCausalLM``): Qwen2-VL's
  vision tower and merger under ``visual.`` (from :func:`support.vlm_models.qwen2vl`'s
  folder), a Llama text (:func:`sarashina2_llama`'s, as transformers saves it) under
  ``llm.``, and the remote model's LayerNorm over the image features as the top-level
  ``norm.`` (random: neither converter reads it); the Hub config's ``text_config`` is
  the Llama's, its ``vision_config`` Qwen2-VL's.
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
    cfg = _renamed_copy(kimi, folder, _GLM5V_NAMES, "Glm5vForConditionalGeneration")
    cfg["text_config"]["architectures"] = ["DeepseekV3ForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


def _renamed_copy(kimi: Path, folder: Path, names: tuple, arch: str) -> dict:
    """``kimi`` copied to ``folder`` with the projector's tensors renamed by the
    ``(prefix, new prefix)`` pairs ``names`` and ``arch`` as its class: the config, for
    the caller to finish and write."""
    shutil.copytree(kimi, folder)

    def rename(k: str) -> str:
        for a, b in names:
            if k.startswith(a):
                return b + k[len(a) :]
        return k

    hub_layout(folder, rename)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = [arch]
    return cfg


def sarashina2_llama(folder: Path, *, seed: int = 74) -> Path:
    """The tiny Llama of Sarashina2-VL's text half: 64 wide, the merger's output width
    of :func:`support.vlm_models.qwen2vl` (llama.cpp checks the two agree)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from support.hf_models import _random_init, _save, train_spm

    vocab = train_spm(folder)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=False)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, "bfloat16")


def sarashina2vl(qwen2vl: Path, llama: Path, folder: Path, *, seed: int = 75) -> Path:
    """A Sarashina2-VL folder over the tower of ``qwen2vl`` and the text of ``llama``."""
    import torch
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True)
    tower = {k: v for k, v in load_file(qwen2vl / "model.safetensors").items()
             if k.startswith("visual.")}  # fmt: skip
    text = {"llm." + k: v for k, v in load_file(llama / "model.safetensors").items()}
    width = json.loads((llama / "config.json").read_text())["hidden_size"]
    g = torch.Generator().manual_seed(seed)
    norm = {"norm.weight": 1 + 0.05 * torch.randn(width, generator=g),
            "norm.bias": 0.05 * torch.randn(width, generator=g)}  # fmt: skip
    sd = {**tower, **text, **{k: v.to(torch.bfloat16) for k, v in norm.items()}}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    for f in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
              "tokenizer.json", "generation_config.json"):  # fmt: skip
        if (llama / f).is_file():
            shutil.copy(llama / f, folder / f)
    shutil.copy(qwen2vl / "preprocessor_config.json", folder / "preprocessor_config.json")
    text_cfg = json.loads((llama / "config.json").read_text())
    vision_cfg = json.loads((qwen2vl / "config.json").read_text())["vision_config"]
    cfg = {
        "architectures": ["Sarashina2VisionForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_sarashina2_vision.Sarashina2VisionConfig",
                     "AutoModelForCausalLM":
                         "modeling_sarashina2_vision.Sarashina2VisionForCausalLM"},
        "model_type": "sarashina2_vision",
        "text_config": text_cfg,
        "vision_config": vision_cfg,
        "image_token_index": 14,
        "start_image_token_index": 3,
        "end_image_token_index": 4,
        "vocab_size": text_cfg["vocab_size"],
        "torch_dtype": "bfloat16",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
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
    cfg = _renamed_copy(kimi, folder, _KIMIVL_NAMES, "KimiVLForConditionalGeneration")
    v = cfg["vision_config"]
    v["init_pos_emb_height"], v["init_pos_emb_width"] = v["pos_emb_height"], v["pos_emb_width"]
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder
