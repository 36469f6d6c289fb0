"""A tiny hand-built CogVLM checkpoint (``CogVLMForCausalLM``, remote code on the Hub).

transformers 5.24 has no CogVLM class, so nothing builds this model: the folder is
written by hand in the layout of the Hub's ``THUDM/cogvlm-chat-hf`` (the CogVLM the
pinned llama.cpp runs: multi-head attention without biases in the visual expert, no
downsampling convolution; CogVLM2's GQA and 2 x 2 convolution its loader and graph
lack).  Names and shapes as the remote ``modeling_cogvlm.py`` / ``visual.py`` declare
them, which llama.cpp's converter maps (gguf-py's tensor map, ``# cogvlm`` rows) and its
loaders read (src/models/cogvlm.cpp, tools/mtmd/models/cogvlm.cpp):

* text (a Llama with a visual expert per layer): ``model.embed_tokens``,
  ``model.layers.{i}.input_layernorm``, ``self_attn.{language,vision}_expert_query_key_value``
  (``[3 hidden, hidden]``), ``self_attn.{language,vision}_expert_dense``,
  ``post_attention_layernorm``, ``mlp.{language,vision}_mlp.{gate,up,down}_proj``,
  ``model.norm``, ``lm_head``;
* the EVA2-CLIP tower under ``model.vision.``: ``patch_embedding.proj`` (a Conv2d with
  bias), ``patch_embedding.cls_embedding`` (``[1, width]``),
  ``patch_embedding.position_embedding`` (``num_positions = patches + 1`` rows),
  ``transformer.layers.{i}.{input_layernorm, attention.query_key_value,
  attention.dense, mlp.fc1, mlp.fc2, post_attention_layernorm}`` (all with biases);
* the GLU projector ``model.vision.linear_proj.{linear_proj, norm1, dense_h_to_4h,
  gate_proj, dense_4h_to_h}`` (text width and FFN width, no biases but the norm's) and the
  ``model.vision.boi`` / ``eoi`` rows (``[1, 1, text width]``).

config.json spells the Hub's fields (no ``num_key_value_heads``, no ``rope_theta``, no
``model_type``: the remote config class); the Hub checkpoint has no image processor file
(its transforms are code), which both converters need: a ``preprocessor_config.json``
with OpenAI CLIP's mean and std (the values the remote code normalizes with) is added.
The vocabulary is a trained SentencePiece model (the Hub's is Vicuna's Llama one).
Values are seeded random, stored as bfloat16 like the Hub's.

:func:`image_features` computes the remote vision model's features in torch (our reading
of its published code, which is not run), and llama.cpp's variant of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.hf_models import train_spm

#: the text model (the Hub's field names)
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, rms_norm_eps=1e-5)  # fmt: skip
#: the EVA2-CLIP tower: 28 x 28 images of 14 x 14 patches (4 patches and the CLS row)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_heads=2,
              image_size=28, patch_size=14, num_positions=5, in_channels=3,
              layer_norm_eps=1e-6, hidden_act="gelu", dropout_prob=0.0)  # fmt: skip
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def tensor_shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint and its shape (torch order)."""
    h, ff, w, vff = TEXT["hidden_size"], TEXT["intermediate_size"], VISION["hidden_size"], VISION["intermediate_size"]  # fmt: skip
    p = VISION["patch_size"]
    out: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, h),
        "model.norm.weight": (h,),
        "lm_head.weight": (vocab, h),
    }
    for i in range(TEXT["num_hidden_layers"]):
        L = f"model.layers.{i}."
        out[L + "input_layernorm.weight"] = (h,)
        out[L + "post_attention_layernorm.weight"] = (h,)
        for e in ("language", "vision"):
            out[L + f"self_attn.{e}_expert_query_key_value.weight"] = (3 * h, h)
            out[L + f"self_attn.{e}_expert_dense.weight"] = (h, h)
            out[L + f"mlp.{e}_mlp.gate_proj.weight"] = (ff, h)
            out[L + f"mlp.{e}_mlp.up_proj.weight"] = (ff, h)
            out[L + f"mlp.{e}_mlp.down_proj.weight"] = (h, ff)
    V = "model.vision."
    out[V + "patch_embedding.proj.weight"] = (w, VISION["in_channels"], p, p)
    out[V + "patch_embedding.proj.bias"] = (w,)
    out[V + "patch_embedding.cls_embedding"] = (1, w)
    out[V + "patch_embedding.position_embedding.weight"] = (VISION["num_positions"], w)
    for i in range(VISION["num_hidden_layers"]):
        L = V + f"transformer.layers.{i}."
        for name, shape in (("input_layernorm", (w,)), ("attention.query_key_value", (3 * w, w)),
                            ("attention.dense", (w, w)), ("mlp.fc1", (vff, w)),
                            ("mlp.fc2", (w, vff)), ("post_attention_layernorm", (w,))):  # fmt: skip
            out[L + name + ".weight"] = shape
            out[L + name + ".bias"] = (shape[0],)
    out[V + "linear_proj.linear_proj.weight"] = (h, w)
    out[V + "linear_proj.norm1.weight"] = (h,)
    out[V + "linear_proj.norm1.bias"] = (h,)
    out[V + "linear_proj.dense_h_to_4h.weight"] = (ff, h)
    out[V + "linear_proj.gate_proj.weight"] = (ff, h)
    out[V + "linear_proj.dense_4h_to_h.weight"] = (h, ff)
    out[V + "boi"] = (1, 1, h)
    out[V + "eoi"] = (1, 1, h)
    return out


def cogvlm(folder: Path, *, seed: int = 91) -> Path:
    """The tiny CogVLM folder (see the module docstring)."""
    import torch
    from safetensors.torch import save_file

    vocab = train_spm(folder)
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape in tensor_shapes(vocab).items():
        # norms near 1 (weights) and every other value small and distinct
        base = 1.0 if len(shape) == 1 and "norm" in name and name.endswith("weight") else 0.0
        sd[name] = (torch.randn(shape, generator=g) * 0.05 + base).to(torch.bfloat16)
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["CogVLMForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_cogvlm.CogVLMConfig",
            "AutoModelForCausalLM": "modeling_cogvlm.CogVLMForCausalLM",
        },
        **TEXT,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "template_version": "chat",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.35.0",
        "use_cache": True,
        "vision_config": dict(VISION),
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": CLIP_MEAN, "image_std": CLIP_STD, "size": VISION["image_size"]})
    )
    return folder


def image_features(
    folder: Path, img, *, cls_last: bool = False, quick_gelu: bool = False
):  # -> np.ndarray
    """The remote ``EVA2CLIPModel``'s image features (``[boi, patches..., eoi]`` rows) of
    the HWC uint8 ``img`` (already the tower's size), in torch from the folder's weights:
    our reading of the Hub's ``visual.py`` (it is not run).  CLS row first, then the
    position table added; post-norm blocks (``x + LN(attn(x))``, ``x + LN(mlp(x))``),
    exact GELU in the MLP; the CLS row dropped; the GLU (``linear_proj``, LayerNorm, GELU,
    ``silu(gate) * up``, ``down``) and the begin / end rows.

    ``cls_last`` / ``quick_gelu``: llama.cpp's mtmd reading instead (the CLS row appended
    after the patches before the table is added; GELU-quick in the tower, as mtmd runs a
    projector file without a ``use_gelu`` row, tanh GELU in the GLU)."""
    import torch

    F = torch.nn.functional
    from safetensors.torch import load_file

    sd = {k: v.float() for k, v in load_file(folder / "model.safetensors").items()}
    V, P = "model.vision.", "model.vision.linear_proj."
    x = torch.from_numpy(img).float().permute(2, 0, 1)[None] / 255.0
    x = (x - torch.tensor(CLIP_MEAN)[:, None, None]) / torch.tensor(CLIP_STD)[:, None, None]
    x = F.conv2d(x, sd[V + "patch_embedding.proj.weight"], sd[V + "patch_embedding.proj.bias"],
                 stride=VISION["patch_size"]).flatten(2).transpose(1, 2)[0]  # fmt: skip
    cls = sd[V + "patch_embedding.cls_embedding"]
    x = torch.cat((x, cls) if cls_last else (cls, x))
    x = x + sd[V + "patch_embedding.position_embedding.weight"]
    w, nh, eps = VISION["hidden_size"], VISION["num_heads"], VISION["layer_norm_eps"]
    for i in range(VISION["num_hidden_layers"]):
        L = V + f"transformer.layers.{i}."

        def wb(n: str, L: str = L):
            return sd[L + n + ".weight"], sd[L + n + ".bias"]

        q, k, v = F.linear(x, *wb("attention.query_key_value")).split(w, dim=-1)
        heads = [t.view(-1, nh, w // nh).transpose(0, 1) for t in (q, k, v)]
        a = F.scaled_dot_product_attention(*heads).transpose(0, 1).reshape(-1, w)
        x = x + F.layer_norm(F.linear(a, *wb("attention.dense")), (w,), *wb("input_layernorm"), eps)
        u = F.linear(x, *wb("mlp.fc1"))
        u = u * torch.sigmoid(1.702 * u) if quick_gelu else F.gelu(u)
        x = x + F.layer_norm(
            F.linear(u, *wb("mlp.fc2")), (w,), *wb("post_attention_layernorm"), eps
        )
    x = x[:-1] if cls_last else x[1:]
    h = TEXT["hidden_size"]
    x = F.layer_norm(F.linear(x, sd[P + "linear_proj.weight"]), (h,), sd[P + "norm1.weight"],
                     sd[P + "norm1.bias"])  # fmt: skip
    x = F.gelu(x, approximate="tanh" if quick_gelu else "none")
    x = F.silu(F.linear(x, sd[P + "gate_proj.weight"])) * F.linear(
        x, sd[P + "dense_h_to_4h.weight"]
    )
    x = F.linear(x, sd[P + "dense_4h_to_h.weight"])
    return torch.cat((sd[V + "boi"][0], x, sd[V + "eoi"][0])).numpy()
