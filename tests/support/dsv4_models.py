"""A tiny random DeepSeek-V4 checkpoint in DeepSeek's own layout (what the Hub holds).

The pinned converter reads DeepSeek-V4 only as published: DeepSeek's tensor names
(``embed.weight``, ``layers.N.attn.wq_a.weight``, ``layers.N.ffn.experts.E.w1.weight``,
...), the routed experts as MXFP4 (``.weight`` int8 ``[out, in / 2]``, two E2M1 codes a
byte, with ``.scale`` E8M0 ``[out, in / 32]``), and the Hub's ``config.json`` with the
legacy fields transformers 5 folds away (``compress_ratios``, ``num_hash_layers``,
``qk_rope_head_dim``).  transformers 5.24 saves none of that, so the folder is written
here: the weights come from transformers' own ``DeepseekV4ForCausalLM`` (seeded), the
experts are random MXFP4 codes and scales whose values are put back into that model, so
the returned model computes exactly what the folder holds.

Dtypes follow the published checkpoint: linear weights, norms and the embedding in
bfloat16, the hyper-connection tensors, attention sinks and router biases in float32, the
hash-routing table int32; one attention weight is float8 (e4m3) with an E8M0 block scale
per 128 x 128, which the reference dequantizes and writes as Q8_0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .hf_models import _bpe_tokenizer

# E2M1 values of the 16 MXFP4 codes (code 8..15: the negatives)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)

# transformers 5.24's names -> DeepSeek's (the inverse of its ``deepseek_v4`` conversion
# mapping), applied in order
_RAW_NAMES = [
    (r"^model\.embed_tokens\.", "embed."),
    (r"^lm_head\.", "head."),
    (r"^model\.norm\.", "norm."),
    (r"^model\.hc_head\.hc_(fn|base|scale)$", r"hc_head_\1"),
    (r"^model\.layers\.", "layers."),
    (r"\.self_attn\.sinks$", ".attn.attn_sink"),
    (r"\.self_attn\.compressor\.indexer\.scorer\.weights_proj\.", ".attn.indexer.weights_proj."),
    (r"\.self_attn\.compressor\.indexer\.q_b_proj\.", ".attn.indexer.wq_b."),
    (r"\.self_attn\.compressor\.indexer\.", ".attn.indexer.compressor."),
    (r"\.self_attn\.", ".attn."),
    (r"\.position_bias$", ".ape"),
    (r"\.compressor\.kv_norm\.", ".compressor.norm."),
    (r"\.q_a_proj\.", ".wq_a."),
    (r"\.q_b_proj\.", ".wq_b."),
    (r"\.q_a_norm\.", ".q_norm."),
    (r"\.kv_proj\.", ".wkv."),
    (r"\.gate_proj\.(?=weight$)(?<=compressor\.gate_proj\.)", ".wgate."),
    (r"\.o_a_proj\.", ".wo_a."),
    (r"\.o_b_proj\.", ".wo_b."),
    (r"\.mlp\.gate\.e_score_correction_bias$", ".ffn.gate.bias"),
    (r"\.mlp\.shared_experts\.gate_proj\.", ".ffn.shared_experts.w1."),
    (r"\.mlp\.shared_experts\.down_proj\.", ".ffn.shared_experts.w2."),
    (r"\.mlp\.shared_experts\.up_proj\.", ".ffn.shared_experts.w3."),
    (r"\.mlp\.", ".ffn."),
    (r"\.input_layernorm\.", ".attn_norm."),
    (r"\.post_attention_layernorm\.", ".ffn_norm."),
    (r"\.attn_hc\.(fn|base|scale)$", r".hc_attn_\1"),
    (r"\.ffn_hc\.(fn|base|scale)$", r".hc_ffn_\1"),
]


def raw_name(name: str) -> str:
    """DeepSeek's name of a transformers 5.24 ``DeepseekV4ForCausalLM`` tensor."""
    for rx, rep in _RAW_NAMES:
        name = re.sub(rx, rep, name)
    return name.replace(".compressor.gate_proj.", ".compressor.wgate.")


# float32 in the published checkpoint (the rest of the floats: bfloat16)
_F32 = re.compile(r"(hc_|attn_sink$|\.ape$|gate\.bias$)")
# the one weight stored as float8 e4m3 with a 128 x 128 E8M0 block scale
FP8_WEIGHT = "layers.0.attn.wq_b.weight"


def _mxfp4(g: np.random.Generator, rows: int, cols: int):
    """Random MXFP4 data ``(packed int8 [rows, cols / 2], scale uint8 [rows, cols / 32],
    float32 values [rows, cols])``."""
    codes = g.integers(0, 16, size=(rows, cols), dtype=np.uint8)
    scale = g.integers(118, 122, size=(rows, cols // 32), dtype=np.uint8)
    values = E2M1[codes] * np.exp2(np.repeat(scale, 32, axis=1).astype(np.float32) - 127)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(np.int8)
    return packed, scale, values.astype(np.float32)


def _fp8(w: np.ndarray, g: np.random.Generator):
    """``w`` as float8 e4m3 with one E8M0 scale per 128 x 128 block; the values it stands for."""
    import ml_dtypes

    rows, cols = w.shape
    br, bc = -(-rows // 128), -(-cols // 128)
    scale = g.integers(120, 124, size=(br, bc), dtype=np.uint8)
    s = np.exp2(scale.astype(np.float32) - 127)
    sf = np.repeat(np.repeat(s, 128, 0), 128, 1)[:rows, :cols]
    q = (w / sf).astype(ml_dtypes.float8_e4m3fn)
    return q, scale, (q.astype(np.float32) * sf).astype(np.float32)


def config(vocab: int) -> dict:
    """The Hub-style config.json of the tiny model (legacy V4 field names)."""
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": vocab,
        "hidden_size": 64,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "qk_rope_head_dim": 16,
        "q_lora_rank": 32,
        "o_groups": 2,
        "o_lora_rank": 16,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "scoring_func": "sqrtsoftplus",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "num_hash_layers": 1,
        "sliding_window": 8,
        "compress_ratios": [0, 4, 128, 0],  # the Hub's lists the MTP layer too
        "compress_rope_theta": 160000.0,
        "rope_theta": 10000.0,
        "index_n_heads": 2,
        "index_head_dim": 64,
        "index_topk": 4,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 256,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


def deepseek4(
    folder: Path,
    *,
    seed: int = 41,
    chat_template: bool = True,
    dense: str = "bfloat16",
    fp8: bool = True,
    **overrides,
):
    """Write the tiny checkpoint into ``folder``; returns ``(folder, model)`` with
    ``model`` the transformers ``DeepseekV4ForCausalLM`` holding the same values.
    ``dense="float32"``: every float tensor but the experts stored float32 (written F32),
    ``fp8=False``: no float8 weight; ``overrides``: config.json fields."""
    import torch
    from safetensors.torch import save_file
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    vocab = _bpe_tokenizer(folder, "gpt-2")
    if chat_template:  # the model's own (the reference's bundled default is not ours)
        tc = json.loads((folder / "tokenizer_config.json").read_text())
        tc["chat_template"] = CHAT_TEMPLATE
        (folder / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    raw_cfg = {**config(vocab), **overrides}
    (folder / "config.json").write_text(json.dumps(raw_cfg, indent=2))
    cfg = DeepseekV4Config.from_pretrained(folder)
    model = DeepseekV4ForCausalLM(cfg).eval()
    g = np.random.default_rng(seed)
    tg = torch.Generator().manual_seed(seed)
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for name, p in sorted(model.state_dict().items()):
            raw = raw_name(name)
            if name.endswith("tid2eid"):
                ids = torch.from_numpy(
                    np.stack(
                        [
                            g.permutation(cfg.n_routed_experts)[: p.shape[1]]
                            for _ in range(p.shape[0])
                        ]
                    )
                )
                p.copy_(ids)
                out[raw] = ids.numpy().astype(np.int32)
                continue
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                pre = raw.rsplit(".", 1)[0]  # layers.N.ffn.experts
                for e in range(p.shape[0]):
                    rows, cols = p.shape[1], p.shape[2]
                    parts = ("w1", "w3") if name.endswith("gate_up_proj") else ("w2",)
                    vals = []
                    for w in parts:
                        packed, scale, v = _mxfp4(g, rows // len(parts), cols)
                        out[f"{pre}.{e}.{w}.weight"] = packed
                        out[f"{pre}.{e}.{w}.scale"] = scale
                        vals.append(v)
                    p[e].copy_(torch.from_numpy(np.concatenate(vals, 0)))
                continue
            v = torch.randn(p.shape, generator=tg) * 0.05 + (1.0 if p.ndim == 1 else 0.0)
            if raw.endswith("hc_scale") or re.search(r"hc_(attn|ffn)_scale$", raw):
                v = v.abs()
            if _F32.search(raw) or dense == "float32":
                p.copy_(v)
                out[raw] = v.numpy().astype(np.float32)
                continue
            if raw == FP8_WEIGHT and fp8:
                q, scale, vals = _fp8(v.numpy().astype(np.float32), g)
                p.copy_(torch.from_numpy(vals))
                out[raw] = q
                out[raw[: -len("weight")] + "scale"] = scale
                continue
            b = v.to(torch.bfloat16)
            p.copy_(b.float())
            out[raw] = b
    # what the published checkpoint has and the text file leaves out: the hash layers'
    # router bias (they route by tid2eid) and the MTP block
    for b in range(cfg.mlp_layer_types.count("hash_moe")):
        out[f"layers.{b}.ffn.gate.bias"] = g.standard_normal(cfg.n_routed_experts).astype(
            np.float32
        )
    # and a few of a Flash vision checkpoint's: the hash layers' image-token router bias
    # (written), the vision tower's, aligner's and sentinels' tensors (left to mmproj)
    for b in range(cfg.mlp_layer_types.count("hash_moe")):
        out[f"layers.{b}.ffn.gate.bias_vl"] = g.standard_normal(cfg.n_routed_experts).astype(
            np.float32
        )
    for k in ("vision.norm.weight", "aligner.w1.bias", "image_newline", "image_start"):
        out[k] = g.standard_normal(cfg.hidden_size).astype(np.float32)
    for k in ("enorm.weight", "hnorm.weight", "norm.weight"):
        out[f"mtp.0.{k}"] = g.standard_normal(cfg.hidden_size).astype(np.float32)
    out["mtp.0.e_proj.weight"] = torch.from_numpy(
        g.standard_normal((cfg.hidden_size, cfg.hidden_size)).astype(np.float32)
    ).to(torch.bfloat16)
    save_file({k: _torch(v) for k, v in out.items()}, folder / "model.safetensors")
    return folder, model


def _torch(x):
    """A torch tensor of the published dtype: E8M0 scales (uint8 here), float8, int8 codes."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.contiguous()
    if x.dtype == np.uint8:  # E8M0 exponents
        return torch.from_numpy(x).view(torch.float8_e8m0fnu)
    if x.dtype.name == "float8_e4m3fn":
        return torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn)
    return torch.from_numpy(np.ascontiguousarray(x))


# DeepSeek-V4 Flash vision (``deepseek-ai/DeepSeek-V4-Flash-Vision-Exp``, remote code): the
# config's top-level ``vision_*`` fields and the tensors the pinned converter's
# DeepseekV4FlashVisionModel and mtmd's ``deepseek4v`` loader read, at tiny sizes
VISION = {
    "vision_n_layers": 3,  # the reference maps aligner.w2 through the block map
    "vision_dim": 32,
    "vision_n_heads": 2,
    "vision_inter_dim": 64,
    "vision_patch_size": 4,
    "vision_downsample_ratio": 3,  # the aligner's 3 x 3 unfold
    "vision_min_pixels": 2304,
    "vision_max_n_token": 384,  # the class asserts both (llama.cpp hard-codes them)
    "vision_max_wh_ratio": 8,
}
SENTINELS = ("image_newline", "image_start", "image_end", "image_pad")


def flash_vision_tensors(g: np.random.Generator, text_width: int, v: dict = VISION) -> dict:
    """Seeded bfloat16 tensors of the vision tower, aligner and sentinels (no tower
    biases: mtmd's ``deepseek4v`` reads the aligner's only); the patch embedding is a
    Linear over flattened ``(3, p, p)`` patches, ``mlp.w1`` the fused SwiGLU gate + up."""
    import torch

    d, f, p = v["vision_dim"], v["vision_inter_dim"], v["vision_patch_size"]
    r2 = v["vision_downsample_ratio"] ** 2

    def w(*shape, scale=0.1, mean=0.0):
        x = g.standard_normal(shape).astype(np.float32) * scale + mean
        return torch.from_numpy(x).to(torch.bfloat16)

    out = {"vision.patch_embed.proj.weight": w(d, 3 * p * p)}
    out["vision.patch_embed.proj.bias"] = w(d, scale=0.02)
    for b in range(v["vision_n_layers"]):
        pre = f"vision.blocks.{b}."
        out[pre + "norm1.weight"] = w(d, mean=1.0)
        out[pre + "attn.wqkv.weight"] = w(3 * d, d)
        out[pre + "attn.wo.weight"] = w(d, d)
        out[pre + "norm2.weight"] = w(d, mean=1.0)
        out[pre + "mlp.w1.weight"] = w(2 * f, d)
        out[pre + "mlp.w2.weight"] = w(d, f)
    out["vision.norm.weight"] = w(d, mean=1.0)
    out["aligner.w1.weight"] = w(text_width, d * r2)
    out["aligner.w1.bias"] = w(text_width, scale=0.02)
    out["aligner.w2.weight"] = w(text_width, text_width)
    out["aligner.w2.bias"] = w(text_width, scale=0.02)
    for k in SENTINELS:
        out[k] = w(text_width, scale=1.0)
    return out


def deepseek4_flash_vision(folder: Path, *, seed: int = 43, **overrides):
    """The tiny DeepSeek-V4 checkpoint (:func:`deepseek4`) with a Flash vision tower:
    the ``vision_*`` config fields and the tower's tensors (replacing the few stand-ins
    the text checkpoint carries); no preprocessor_config.json, as on the Hub."""
    from safetensors.torch import load_file, save_file

    folder, _ = deepseek4(folder, seed=seed, **{**VISION, **overrides})
    cfg = json.loads((folder / "config.json").read_text())
    sd = {
        k: v
        for k, v in load_file(folder / "model.safetensors").items()
        if not k.startswith(("vision.", "aligner.", "image_"))
    }
    sd.update(flash_vision_tensors(np.random.default_rng(seed + 1), cfg["hidden_size"]))
    save_file(sd, folder / "model.safetensors")
    return folder


def flash_vision_grid(folder: Path, img: np.ndarray, v: dict = VISION) -> np.ndarray:
    """Our torch reading of mtmd's ``deepseek4v`` graph over the checkpoint's tensors (the
    remote vision code is not run: no numeric oracle of its own): the aligner rows
    ``[n_llm_h * n_llm_w, text width]`` of an ``img`` (HWC uint8) whose sides are patch
    multiples (mtmd then leaves it unresized).  Pixels ``(x / 255 - 0.5) / 0.5``; the
    Linear patch embedding; pre-norm blocks (RMS 1e-6, fused QKV, 2-D RoPE: each head's
    pairs ``(j, j + d/2)``, the first ``d/4`` pairs rotated by the patch row and the next
    ``d/4`` by its column, each at frequencies ``theta^(-4k/d)``, SwiGLU); the final RMS
    norm; the grid zero-padded to a multiple of 3, each 3 x 3 block unfolded
    ``(channel, dy, dx)``; the aligner's erf-GELU MLP."""
    import torch
    from safetensors.torch import load_file

    sd = {k: t.float() for k, t in load_file(folder / "model.safetensors").items()}
    p, r, heads = v["vision_patch_size"], v["vision_downsample_ratio"], v["vision_n_heads"]
    x = torch.from_numpy(img.astype(np.float32) / 255.0 - 0.5) / 0.5  # H, W, 3
    gh, gw = img.shape[0] // p, img.shape[1] // p
    patches = x.reshape(gh, p, gw, p, 3).permute(0, 2, 4, 1, 3).reshape(gh * gw, 3 * p * p)
    h = patches @ sd["vision.patch_embed.proj.weight"].T + sd["vision.patch_embed.proj.bias"]
    d = h.shape[1] // heads

    def rms(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    n = gh * gw
    pos_row = torch.arange(n) // gw
    pos_col = torch.arange(n) % gw
    k = torch.arange(d // 4, dtype=torch.float32)
    freq = 10000.0 ** (-4.0 * k / d)
    ang = torch.cat([pos_row[:, None] * freq, pos_col[:, None] * freq], 1)  # n, d/2
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def rope(t):  # n, heads, d
        a, b = t[..., : d // 2], t[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    for b in range(v["vision_n_layers"]):
        pre = f"vision.blocks.{b}."
        y = rms(h, sd[pre + "norm1.weight"]) @ sd[pre + "attn.wqkv.weight"].T
        q, kk, vv = (t.reshape(n, heads, d) for t in y.chunk(3, -1))
        q, kk = rope(q), rope(kk)
        att = torch.softmax(torch.einsum("qhd,khd->hqk", q, kk) / d**0.5, -1)
        o = torch.einsum("hqk,khd->qhd", att, vv).reshape(n, heads * d)
        h = h + o @ sd[pre + "attn.wo.weight"].T
        y = rms(h, sd[pre + "norm2.weight"])
        gate, up = (y @ sd[pre + "mlp.w1.weight"].T).chunk(2, -1)
        h = h + (torch.nn.functional.silu(gate) * up) @ sd[pre + "mlp.w2.weight"].T
    h = rms(h, sd["vision.norm.weight"])
    grid = h.reshape(gh, gw, -1).permute(2, 0, 1)  # C, H, W
    grid = torch.nn.functional.pad(grid, (0, (-gw) % r, 0, (-gh) % r))
    cols = torch.nn.functional.unfold(grid[None], r, stride=r)[0].T  # blocks, C * r * r
    z = cols @ sd["aligner.w1.weight"].T + sd["aligner.w1.bias"]
    z = torch.nn.functional.gelu(z) @ sd["aligner.w2.weight"].T + sd["aligner.w2.bias"]
    return z.numpy()


def with_mtp_block(folder: Path, *, seed: int = 45) -> Path:
    """Complete the tiny checkpoint's ``mtp.0`` stand-ins (``enorm``, ``hnorm``, ``norm``,
    ``e_proj``) into the whole block DeepSeek-V4 publishes, the one the reference's
    ``--mtp`` exports: a layer of ratio 0 (``compress_ratios``' last entry) with layer 0's
    attention tensors (its float8 ``wq_b`` + E8M0 scale among them) and hyper-connection
    mixers, layer 2's routed MoE (MXFP4 experts, router weight and bias, shared expert),
    ``h_proj`` ``[h, h]`` and the block's own ``hc_head_fn`` / ``_base`` / ``_scale``.
    Float values are redrawn (the block is not a copy of the trunk: a draft with the
    trunk's tensors would pass unnoticed), the packed MXFP4 / float8 bytes copied."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    tg = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in sd.items():
        if k.startswith("layers.0.") and ".ffn." not in k and ".compressor." not in k:
            rest = k[len("layers.0.") :]
        elif k.startswith("layers.2.ffn."):
            rest = k[len("layers.2.") :]
        elif k.startswith("hc_head_"):
            rest = k
        else:
            continue
        if v.dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(v.shape, generator=tg) * 0.05 + (1.0 if v.ndim == 1 else 0.0)
            if "scale" in rest:
                x = x.abs()
            v = x.to(v.dtype)
        out["mtp.0." + rest] = v.clone()
    h = sd["mtp.0.e_proj.weight"].shape[0]
    out["mtp.0.h_proj.weight"] = (torch.randn((h, h), generator=tg) * 0.05).to(torch.bfloat16)
    save_file({**sd, **out}, path)
    return folder
