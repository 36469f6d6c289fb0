"""Tiny vision-language checkpoints in Mistral's original layout (Pixtral-12B-2409,
Mistral Small 3.1 as Mistral publishes them), with the same model in HF layout beside.

A seeded transformers model (support/vlm_models.py ``llava`` = Pixtral-12B's
``LlavaForConditionalGeneration``, ``mistral3`` = Mistral Small 3.1's
``Mistral3ForConditionalGeneration``) over a text whose vocabulary is a tekken.json
trained here (support/mistral_fixtures.py), saved again under Mistral's names: the
inverse of transformers' convert_pixtral_weights_to_hf.py / convert_mistral3_weights_to_hf.py
tables, Q/K rows (text and tower) back in the interleaved RoPE layout those scripts
permute away.  params.json carries the keys Mistral's files spell (text: ``dim``,
``n_layers``, ...; ``vision_encoder``: the tower's, the [IMG_*] ids, ``adapter_bias``,
Mistral Small 3.1's ``mm_projector_id`` / ``spatial_merge_size`` / ``max_image_size`` /
``add_pre_mm_projector_layer_norm``).  The HF folder is transformers' oracle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from support.mistral_fixtures import write_tekken
from support.vlm_models import llava_pixtral, mistral3

# HF name (as the Hub saves it) -> Mistral's, the conversion scripts' tables inverted
_NAMES = [
    (r"language_model\.model\.embed_tokens\.", "tok_embeddings."),
    (r"language_model\.model\.norm\.", "norm."),
    (r"language_model\.lm_head\.", "output."),
    (r"language_model\.model\.layers\.(\d+)\.self_attn\.(q|k|v|o)_proj\.", r"layers.\1.attention.w\2."),
    (r"language_model\.model\.layers\.(\d+)\.mlp\.gate_proj\.", r"layers.\1.feed_forward.w1."),
    (r"language_model\.model\.layers\.(\d+)\.mlp\.down_proj\.", r"layers.\1.feed_forward.w2."),
    (r"language_model\.model\.layers\.(\d+)\.mlp\.up_proj\.", r"layers.\1.feed_forward.w3."),
    (r"language_model\.model\.layers\.(\d+)\.input_layernorm\.", r"layers.\1.attention_norm."),
    (r"language_model\.model\.layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.ffn_norm."),
    (r"vision_tower\.transformer\.layers\.(\d+)\.attention\.(q|k|v|o)_proj\.",
     r"vision_encoder.transformer.layers.\1.attention.w\2."),
    (r"vision_tower\.transformer\.layers\.(\d+)\.feed_forward\.gate_proj\.",
     r"vision_encoder.transformer.layers.\1.feed_forward.w1."),
    (r"vision_tower\.transformer\.layers\.(\d+)\.feed_forward\.down_proj\.",
     r"vision_encoder.transformer.layers.\1.feed_forward.w2."),
    (r"vision_tower\.transformer\.layers\.(\d+)\.feed_forward\.up_proj\.",
     r"vision_encoder.transformer.layers.\1.feed_forward.w3."),
    (r"vision_tower\.", "vision_encoder."),
    (r"multi_modal_projector\.linear_1\.", "vision_language_adapter.w_in."),
    (r"multi_modal_projector\.linear_2\.", "vision_language_adapter.w_out."),
    (r"multi_modal_projector\.norm\.", "pre_mm_projector_norm."),
    (r"multi_modal_projector\.patch_merger\.", "patch_merger."),
]  # fmt: skip


def mistral_name(hf: str) -> str:
    for rx, rep in _NAMES:
        new, n = re.subn("^" + rx, rep, hf)
        if n:
            return new
    raise KeyError(hf)


def _interleave(x, n_heads: int):
    """HF's rotate-half Q/K rows -> Mistral's interleaved ones (the scripts'
    permute_for_rope inverted)."""
    rows, cols = x.shape
    return x.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def mistral_vlm(root: Path, kind: str, *, seed: int = 5) -> tuple[Path, Path]:
    """``(mistral folder, hf folder)`` under ``root``; ``kind`` ``pixtral`` (Pixtral-12B:
    adapter with biases) or ``mistral3`` (Mistral Small 3.1: RMS norm + 2x2 patch merger,
    no adapter biases)."""
    from safetensors.torch import load_file, save_file

    name = "Pixtral-Tiny-2409" if kind == "pixtral" else "Mistral-Small-Tiny-2503"
    mis, hf = root / name, root / f"hf-{kind}"
    mis.mkdir(parents=True)
    vocab = write_tekken(mis, "v7")
    (llava_pixtral if kind == "pixtral" else mistral3)(hf, seed=seed, vocab=vocab)
    cfg = json.loads((hf / "config.json").read_text())
    tc, vc = cfg["text_config"], cfg["vision_config"]
    heads = {"language_model.": (tc["num_attention_heads"], tc["num_key_value_heads"]),
             "vision_tower.": (vc["num_attention_heads"], vc["num_attention_heads"])}  # fmt: skip
    out = {}
    for k, v in load_file(hf / "model.safetensors").items():
        for pre, (nq, nk) in heads.items():
            if k.startswith(pre) and re.search(r"\.(q|k)_proj\.weight$", k):
                v = _interleave(v, nq if ".q_proj." in k else nk)
        out[mistral_name(k)] = v.contiguous()
    save_file(out, str(mis / "consolidated.safetensors"))
    rope = (tc.get("rope_parameters") or {}).get("rope_theta", tc.get("rope_theta", 1e6))
    vision = {"hidden_size": vc["hidden_size"], "num_channels": 3, "image_size": vc["image_size"],
              "patch_size": vc["patch_size"], "rope_theta": vc["rope_parameters"]["rope_theta"],
              "intermediate_size": vc["intermediate_size"],
              "num_hidden_layers": vc["num_hidden_layers"],
              "num_attention_heads": vc["num_attention_heads"], "image_token_id": 10,
              "image_break_token_id": 12, "image_end_token_id": 13}  # fmt: skip
    if kind == "pixtral":
        vision["adapter_bias"] = True
    else:
        vision.update({"max_image_size": vc["image_size"], "mm_projector_id": "patch_merge",
                       "spatial_merge_size": cfg["spatial_merge_size"],
                       "add_pre_mm_projector_layer_norm": True, "adapter_bias": False})  # fmt: skip
    params = {"dim": tc["hidden_size"], "n_layers": tc["num_hidden_layers"],
              "head_dim": tc["head_dim"], "hidden_dim": tc["intermediate_size"],
              "n_heads": tc["num_attention_heads"], "n_kv_heads": tc["num_key_value_heads"],
              "rope_theta": rope, "norm_eps": 1e-5, "vocab_size": vocab,
              "max_position_embeddings": tc["max_position_embeddings"],
              "vision_encoder": vision}  # fmt: skip
    (mis / "params.json").write_text(json.dumps(params, indent=2))
    return mis, hf


def img_break_row(mis: Path) -> np.ndarray:
    """Row [IMG_BREAK] (params.json's id) of the checkpoint's text embedding, as float32."""
    from safetensors.torch import load_file

    tid = json.loads((mis / "params.json").read_text())["vision_encoder"]["image_break_token_id"]
    emb = load_file(mis / "consolidated.safetensors")["tok_embeddings.weight"]
    return emb[tid].float().numpy()
