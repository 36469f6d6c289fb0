"""Tiny random vision-language model folders (``*ForConditionalGeneration``).

Built with transformers' own config and model classes, then saved in the layout the
Hub checkpoints have (``language_model.model.*``, ``vision_tower.*``,
``multi_modal_projector.*``: the names llama.cpp's converter reads), with the image
processor files ``convert_hf_to_gguf.py --mmproj`` reads.  Vision widths are
multiples of 32 so q8_0 applies; the text model is the tiny one of hf_models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from support.hf_models import _random_init, train_spm

_MEAN_STD = {"image_mean": [0.48145466, 0.4578275, 0.40821073],
             "image_std": [0.26862954, 0.26130258, 0.27577711]}  # fmt: skip


def _text(vocab: int) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )


def hub_layout(folder: Path, rename: Callable[[str], str]) -> None:
    """Rewrite model.safetensors with ``rename`` applied to every tensor name."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    save_file({rename(k): v for k, v in sd.items()}, path, metadata={"format": "pt"})


def _hub_name(k: str, tower: str = "vision_tower.") -> str:
    """The names transformers 5 saves -> the Hub's (``tower``: where the Hub keeps the
    vision tower; Gemma 3's is ``vision_tower.vision_model.``)."""
    for pre in ("model.vision_tower.", "vision_tower."):
        if k.startswith(pre) and not k.startswith(tower):
            return tower + k[len(pre) :]
    if k.startswith("model.language_model."):
        return "language_model.model." + k[len("model.language_model.") :]
    if k.startswith("model."):
        return k[len("model.") :]
    if k.startswith("lm_head."):
        return "language_model." + k
    return k


def _save(model, folder: Path, dtype: str, tower: str | None = "vision_tower.") -> None:
    """save_pretrained, then the Hub's names (``tower=None``: as saved, which for
    Qwen2.5-VL already is the Hub's ``model.*`` + ``visual.*``)."""
    import torch

    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    if tower is not None:
        hub_layout(folder, lambda k: _hub_name(k, tower))


def _pixtral_files(folder: Path) -> None:
    """The [IMG_BREAK] token (llama.cpp's LlavaVisionModel looks it up: it must exist) and
    Pixtral's image processor file."""
    (folder / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        "12": {"content": "[IMG_BREAK]", "special": True, "lstrip": False, "rstrip": False,
               "normalized": False, "single_word": False}}}, indent=2))  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "PixtralImageProcessor", "patch_size": {"height": 8, "width": 8},
        "size": {"longest_edge": 64}, "do_normalize": True, "do_rescale": True,
        "rescale_factor": 1 / 255, **_MEAN_STD}, indent=2))  # fmt: skip


def _qwen_vl_processor(folder: Path, mean_std: dict) -> None:
    """Qwen2-VL's image processor file: 8 px patches, 2 frames, 2x2 merge, 64 x 64 images."""
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 8,
        "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 64 * 64,
        "max_pixels": 64 * 64, **mean_std}, indent=2))  # fmt: skip


def gemma3_vlm(
    folder: Path,
    *,
    dtype: str = "bfloat16",
    seed: int = 30,
    text: dict | None = None,
    vision: dict | None = None,
    tokens: int = 16,
) -> Path:
    """Gemma 3 (SigLIP tower + Gemma 3 projector): 64 px images, 8 px patches, 16 tokens.

    ``text`` / ``vision`` override config fields (the benchmarks build a larger one)."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    vocab = train_spm(folder)
    text = Gemma3TextConfig(**{**_text(vocab), "sliding_window": 16, "query_pre_attn_scalar": 64,
                               "pad_token_id": 0, **(text or {})})  # fmt: skip
    vision = SiglipVisionConfig(**{"hidden_size": 64, "intermediate_size": 128,
                                   "num_hidden_layers": 2, "num_attention_heads": 2,
                                   "image_size": 64, "patch_size": 8, "layer_norm_eps": 1e-6,
                                   "vision_use_head": False, **(vision or {})})  # fmt: skip
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=tokens,
                       image_token_index=5, boi_token_index=6, eoi_token_index=7)  # fmt: skip
    model = Gemma3ForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower="vision_tower.vision_model.")
    px = vision.image_size
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma3ImageProcessor", "do_normalize": True,
        "do_rescale": True, "do_resize": True, "resample": 2, "rescale_factor": 1 / 255,
        "size": {"height": px, "width": px}, **_MEAN_STD}, indent=2))  # fmt: skip
    (folder / "processor_config.json").write_text(
        json.dumps({"processor_class": "Gemma3Processor", "image_seq_length": tokens})
    )
    return folder


def llava_pixtral(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 31, vocab: int | None = None
) -> Path:
    """LLaVA with a Pixtral tower (2-D RoPE, SiLU MLP) and the 2-layer MLP projector
    (``vocab``: the text's vocabulary size, no tokenizer trained: the caller writes one)."""
    from transformers import (
        LlavaConfig,
        LlavaForConditionalGeneration,
        MistralConfig,
        PixtralVisionConfig,
    )

    vocab = train_spm(folder) if vocab is None else vocab
    text = MistralConfig(**_text(vocab), sliding_window=None)
    # 3 layers: gguf-py maps linear_2 to mm.2 only in a tower of more than 2 blocks
    vision = PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                 num_attention_heads=2, head_dim=32, image_size=64,
                                 patch_size=8, hidden_act="silu")  # fmt: skip
    cfg = LlavaConfig(text_config=text, vision_config=vision, image_token_index=10,
                      projector_hidden_act="gelu", vision_feature_layer=-1,
                      vision_feature_select_strategy="full")  # fmt: skip
    model = LlavaForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _pixtral_files(folder)
    return folder


def qwen25vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 32) -> Path:
    """Qwen2.5-VL: window-attention ViT (Conv3d patches, fused QKV) + patch merger; the
    text model's RoPE in MRoPE sections."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from support.hf_models import _qwen_tokenizer

    vocab = _qwen_tokenizer(folder)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3]},
                bos_token_id=None, eos_token_id=151643, tie_word_embeddings=True)  # fmt: skip
    vision = dict(depth=4, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=8,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=32,
                  out_hidden_size=64, fullatt_block_indexes=[1, 3])  # fmt: skip
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=151655,
                           video_token_id=151656, vision_start_token_id=151652)  # fmt: skip
    model = Qwen2_5_VLForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, _MEAN_STD)
    return folder


_QWEN3VL_VISION = dict(depth=4, hidden_size=64, intermediate_size=128, num_heads=2,
                       patch_size=8, spatial_merge_size=2, temporal_patch_size=2,
                       out_hidden_size=64, num_position_embeddings=64,
                       deepstack_visual_indexes=[1, 2], hidden_act="gelu_pytorch_tanh")  # fmt: skip


def _qwen3vl(folder: Path, config_cls, model_cls, text: dict, dtype: str, seed: int):
    """A Qwen3-VL(-MoE) model over ``text`` (vocabulary added) and the tiny tower, saved
    as transformers writes it, with its image processor file; the model."""
    from support.hf_models import _qwen_tokenizer

    vocab = _qwen_tokenizer(folder)
    text = dict(vocab_size=vocab, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                 "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                bos_token_id=None, eos_token_id=151645, tie_word_embeddings=False,
                **text)  # fmt: skip
    cfg = config_cls(text_config=text, vision_config=_QWEN3VL_VISION, image_token_id=151655,
                     video_token_id=151656, vision_start_token_id=151652,
                     vision_end_token_id=151653, tie_word_embeddings=False)  # fmt: skip
    model = model_cls(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, {"image_mean": [0.5] * 3, "image_std": [0.5] * 3})
    return model


def qwen3vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 33) -> Path:
    """Qwen3-VL: ViT with a learned position table, fused QKV, Conv3d patches, deepstack
    mergers after tower layers 1 and 2; the text model is Qwen3 with interleaved MRoPE.
    Saved as transformers writes it, which is the Hub's layout (``model.visual.*``,
    ``model.language_model.*``)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    text = dict(hidden_size=64, intermediate_size=128)
    _qwen3vl(folder, Qwen3VLConfig, Qwen3VLForConditionalGeneration, text, dtype, seed)
    return folder


def qwen3vlmoe(folder: Path, *, dtype: str = "bfloat16", seed: int = 35) -> Path:
    """Qwen3-VL MoE: Qwen3-VL's tower, a Qwen3-MoE text model (4 experts, top 2) with its
    experts fused.  transformers 5 saves them in its own layout, the transpose of the
    Hub's (which it transposes back on load): rewritten here to the Hub's, which the
    reference converter reads."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    text = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=96, num_experts=4,
                num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[])  # fmt: skip
    _qwen3vl(folder, Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration, text, dtype, seed)
    path = folder / "model.safetensors"
    sd = load_file(path)
    for k in [k for k in sd if k.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]:
        sd[k] = sd[k].transpose(1, 2).contiguous()
    save_file(sd, path, metadata={"format": "pt"})
    return folder


def _mistral3_over(text, folder: Path, dtype: str, seed: int) -> Path:
    """A Mistral3ForConditionalGeneration over the text config ``text``: the Pixtral tower
    (3 layers: gguf-py maps linear_2 to mm.2 only in a tower of more than 2 blocks),
    RMS-normed 2x2 patch merger and 2-layer MLP projector every Mistral 3 builder shares."""
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralVisionConfig

    vision = PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                 num_attention_heads=2, head_dim=32, image_size=64,
                                 patch_size=8, hidden_act="silu")  # fmt: skip
    cfg = Mistral3Config(text_config=text, vision_config=vision, image_token_index=10,
                         spatial_merge_size=2, projector_hidden_act="gelu",
                         multimodal_projector_bias=False, vision_feature_layer=-1,
                         tie_word_embeddings=False)  # fmt: skip
    model = Mistral3ForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _pixtral_files(folder)
    return folder


def mistral3(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 34, vocab: int | None = None
) -> Path:
    """Mistral 3 (Mistral Small 3.1 layout): Pixtral tower, RMS-normed 2x2 patch merger,
    2-layer MLP projector; the text model is Mistral (GGUF ``mistral3``).  ``vocab``: as
    :func:`llava_pixtral`'s."""
    from transformers import MistralConfig

    vocab = train_spm(folder) if vocab is None else vocab
    text = MistralConfig(
        **_text(vocab),
        sliding_window=None,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e9},
    )
    return _mistral3_over(text, folder, dtype, seed)


def _qwen35_vlm(folder: Path, dtype: str, seed: int, moe: bool) -> Path:
    """Qwen3.5 (MoE) as published: the Qwen3-VL tower without deepstack mergers over a
    tiny Qwen3.5 text model (gated DeltaNet + gated attention; with ``moe``, experts per
    expert as transformers 5 saves this class) with its MTP block."""
    import transformers

    from support.hf_models import (
        _DELTANET,
        _DELTANET_MOE,
        _QWEN35_ROPE,
        _bpe_tokenizer,
        _qwen35_ids,
        _with_mtp,
    )

    kind = "Qwen3_5Moe" if moe else "Qwen3_5"
    vocab = _bpe_tokenizer(folder, "qwen35")
    tied = not moe
    text = dict(rope_parameters=_QWEN35_ROPE, tie_word_embeddings=tied, **_qwen35_ids(vocab),
                **_DELTANET, **(_DELTANET_MOE if moe else {}))  # fmt: skip
    vision = {k: v for k, v in _QWEN3VL_VISION.items() if k != "deepstack_visual_indexes"}
    cfg = getattr(transformers, kind + "Config")(
        text_config=text, vision_config=vision, image_token_id=151655, video_token_id=151656,
        vision_start_token_id=151652, vision_end_token_id=151653, tie_word_embeddings=tied,
    )  # fmt: skip
    model = getattr(transformers, kind + "ForConditionalGeneration")(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    # the reference's Qwen3.5 text model requires the MTP block the Hub's checkpoints carry
    _with_mtp(folder, seed, {"mtp_num_hidden_layers": 1, "full_attention_interval": 2}, vlm=True)
    _qwen_vl_processor(folder, {"image_mean": [0.5] * 3, "image_std": [0.5] * 3})
    return folder


def qwen35vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 36) -> Path:
    """Qwen3_5ForConditionalGeneration, tied head."""
    return _qwen35_vlm(folder, dtype, seed, moe=False)


def qwen35vlmoe(folder: Path, *, dtype: str = "bfloat16", seed: int = 37) -> Path:
    """Qwen3_5MoeForConditionalGeneration, untied head."""
    return _qwen35_vlm(folder, dtype, seed, moe=True)


BUILDERS: dict[str, Callable[..., Path]] = {
    "gemma3": gemma3_vlm,
    "llava": llava_pixtral,
    "qwen25vl": qwen25vl,
    "qwen3vl": qwen3vl,
    "mistral3": mistral3,
    "qwen3vlmoe": qwen3vlmoe,
    "qwen35vl": qwen35vl,
}


def build(name: str, folder: Path, **kw) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return BUILDERS[name](folder, **kw)


def gemma4_vlm(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 33, audio: dict | None = None
) -> Path:
    """Gemma 4 (its own vision tower: clippable linears, 2-D position table, pooling by 3
    as llama.cpp fixes it; an audio tower only from ``audio``, Gemma4AudioConfig fields),
    8 px patches, saved as transformers 5 saves it (``model.language_model.*``,
    ``model.vision_tower.*``, ``model.embed_vision.*``: the names the reference reads)."""
    from transformers import (
        Gemma4AudioConfig,
        Gemma4Config,
        Gemma4ForConditionalGeneration,
        Gemma4TextConfig,
        Gemma4VisionConfig,
    )

    from support.hf_models import gemma4_tokenizer

    vocab = gemma4_tokenizer(folder)
    text = Gemma4TextConfig(**{**_text(vocab), "bos_token_id": 2, "eos_token_id": 1,
                               "pad_token_id": 0}, global_head_dim=128, sliding_window=16,
                            layer_types=["sliding_attention", "full_attention"],
                            vocab_size_per_layer_input=vocab,
                            hidden_size_per_layer_input=0)  # fmt: skip
    vision = Gemma4VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                                patch_size=8, pooling_kernel_size=3, position_embedding_size=256,
                                use_clipped_linears=True)  # fmt: skip
    audio_cfg = None if audio is None else Gemma4AudioConfig(**audio)
    cfg = Gemma4Config(text_config=text, vision_config=vision, audio_config=audio_cfg,
                       image_token_id=519, boi_token_id=515, eoi_token_id=516)  # fmt: skip
    model = Gemma4ForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma4ImageProcessor", "patch_size": 8,
        "pooling_kernel_size": 3, "max_soft_tokens": 280, "do_normalize": False,
        "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0]}, indent=2))  # fmt: skip
    return folder


BUILDERS["gemma4"] = gemma4_vlm


# --------------------------------------------------------------------------- more projectors


BUILDERS["qwen35vlmoe"] = qwen35vlmoe


def qwen2vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 38) -> Path:
    """Qwen2-VL (v1): a ViT of LayerNorms and a GELU-quick MLP (``embed_dim`` wide, its
    ``hidden_size`` the merger's output), Conv3d patches, fused QKV, 2-D RoPE, no window
    attention; the text model is Qwen2 with MRoPE sections."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    from support.hf_models import _qwen_tokenizer

    vocab = _qwen_tokenizer(folder)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3]},
                bos_token_id=None, eos_token_id=151643, tie_word_embeddings=True)  # fmt: skip
    # 3 blocks: gguf-py names merger.mlp.2 mm.2 only in a tower of more than 2 blocks
    vision = dict(depth=3, embed_dim=64, hidden_size=64, mlp_ratio=2, num_heads=2, patch_size=8,
                  spatial_merge_size=2, temporal_patch_size=2)  # fmt: skip
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=151655,
                        video_token_id=151656, vision_start_token_id=151652)  # fmt: skip
    model = Qwen2VLForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, _MEAN_STD)
    return folder


BUILDERS["qwen2vl"] = qwen2vl


def smolvlm(folder: Path, *, dtype: str = "bfloat16", seed: int = 39) -> Path:
    """SmolVLM (SmolVLMForConditionalGeneration; Idefics3's layout): a SigLIP tower
    (``model.vision_model.*``), pixel shuffle by 2 and one linear projection
    (``model.connector.*``), 64 px images of 8 px patches (16 tokens); the text model is
    Llama under ``model.text_model.*``, its config naming ``VLlama3ForCausalLM`` as the
    Hub's SmolVLM configs do (the reference's text class is chosen by it)."""
    from transformers import LlamaConfig, SmolVLMConfig, SmolVLMForConditionalGeneration
    from transformers.models.smolvlm import SmolVLMVisionConfig

    vocab = train_spm(folder)
    text = LlamaConfig(**_text(vocab), tie_word_embeddings=False)
    vision = SmolVLMVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=2, image_size=64, patch_size=8)  # fmt: skip
    cfg = SmolVLMConfig(text_config=text, vision_config=vision, scale_factor=2, image_token_id=10,
                        tie_word_embeddings=False)  # fmt: skip
    model = SmolVLMForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    top = json.loads((folder / "config.json").read_text())
    top["text_config"]["architectures"] = ["VLlama3ForCausalLM"]
    (folder / "config.json").write_text(json.dumps(top, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "SmolVLMImageProcessor", "do_convert_rgb": True,
        "do_image_splitting": False, "do_normalize": True, "do_pad": True, "do_rescale": True,
        "do_resize": True, "max_image_size": {"longest_edge": 64}, "resample": 1,
        "rescale_factor": 1 / 255, "size": {"longest_edge": 64},
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3}, indent=2))  # fmt: skip
    return folder


BUILDERS["smolvlm"] = smolvlm


def lfm2vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 40) -> Path:
    """LFM2-VL: a SigLIP2 NaFlex tower (16 px patches as a linear layer, a 16 x 16
    position grid, 3 layers: gguf-py names ``linear_2`` ``mm.2`` only past 2 blocks),
    pixel unshuffle by 2, LayerNorm + 2-layer MLP; the text model is LFM2, its config
    naming ``Lfm2ForCausalLM`` as the Hub's LFM2-VL configs do (the reference's text
    class is chosen by it)."""
    from transformers import Lfm2VlConfig, Lfm2VlForConditionalGeneration

    from support.hf_models import _bpe_tokenizer

    vocab = _bpe_tokenizer(folder, "gpt-2")
    text = dict(model_type="lfm2", vocab_size=vocab, hidden_size=64, intermediate_size=256,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=256, conv_L_cache=3,
                layer_types=["conv", "full_attention", "conv", "full_attention"],
                bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                tie_word_embeddings=True)  # fmt: skip
    vision = dict(model_type="siglip2_vision_model", hidden_size=64, intermediate_size=128,
                  num_hidden_layers=3, num_attention_heads=2, patch_size=16, num_patches=256,
                  vision_use_head=False, layer_norm_eps=1e-6)  # fmt: skip
    cfg = Lfm2VlConfig(text_config=text, vision_config=vision, projector_hidden_size=64,
                       downsample_factor=2, image_token_id=10, tie_word_embeddings=True)  # fmt: skip
    model = Lfm2VlForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    # transformers 5 drops the SigLIP2 tower's vision_model. level (and reads it back):
    # the Hub's names have it, and the reference reads those
    tower = "model.vision_tower."
    hub_layout(folder, lambda k: k.replace(tower, tower + "vision_model.", 1))
    top = json.loads((folder / "config.json").read_text())
    top["text_config"]["architectures"] = ["Lfm2ForCausalLM"]
    (folder / "config.json").write_text(json.dumps(top, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Lfm2VlImageProcessor", "do_image_splitting": False,
        "do_normalize": True, "do_rescale": True, "do_resize": True, "downsample_factor": 2,
        "encoder_patch_size": 16, "max_image_tokens": 256, "min_image_tokens": 64,
        "max_num_patches": 1024, "rescale_factor": 1 / 255, "tile_size": 512,
        "use_thumbnail": False, "image_mean": [0.5] * 3, "image_std": [0.5] * 3},
        indent=2))  # fmt: skip
    return folder


BUILDERS["lfm2vl"] = lfm2vl


def llama4vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 41) -> Path:
    """Llama 4 with its vision tower (Llama4ForConditionalGeneration, the Hub's names:
    ``vision_model.*``, ``multi_modal_projector.*``, ``language_model.*``): a ViT over
    unfolded 8 px patches of 64 px images with a class embedding, pixel shuffle by 0.5
    and the 2-layer adapter MLP (the tower's MLP width is 4 x its width, as Scout's: the
    adapter reads the shuffled features through it); the text model is a tiny Llama 4 MoE."""
    from transformers import Llama4Config, Llama4ForConditionalGeneration

    from support.hf_models import _bpe_tokenizer

    vocab = _bpe_tokenizer(folder, "gpt-2")
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0,
            "low_freq_factor": 1.0, "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192}  # fmt: skip
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=64, intermediate_size_mlp=128,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
                max_position_embeddings=16384, rope_parameters=rope, tie_word_embeddings=False,
                bos_token_id=50256, eos_token_id=50256, pad_token_id=None)  # fmt: skip
    # 3 layers: gguf-py names vision_adapter.mlp.fc2 only in a tower of more than 2 blocks
    vision = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=3,
                  num_attention_heads=2, image_size=64, patch_size=8, vision_output_dim=128,
                  projector_input_dim=128, projector_output_dim=128, pixel_shuffle_ratio=0.5,
                  norm_eps=1e-5, hidden_act="gelu")  # fmt: skip
    cfg = Llama4Config(text_config=text, vision_config=vision, image_token_index=200,
                       boi_token_index=201, eoi_token_index=202,
                       tie_word_embeddings=False)  # fmt: skip
    model = Llama4ForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Llama4ImageProcessorFast", "do_normalize": True,
        "do_rescale": True, "do_resize": True, "max_patches": 1, "resize_to_max_canvas": False,
        "rescale_factor": 1 / 255, "size": {"height": 64, "width": 64},
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3}, indent=2))  # fmt: skip
    return folder


BUILDERS["llama4vl"] = llama4vl


# --------------------------------------------------------------------------- OCR VLMs


def lightonocr(folder: Path, *, dtype: str = "bfloat16", seed: int = 42) -> Path:
    """LightOnOCR (LightOnOcrForConditionalGeneration): a Pixtral tower, an RMS-normed 2x2
    patch merger and a bias-free 2-layer GELU MLP over a tiny Qwen3 text model (tied
    head).  transformers 5 saves the Hub's names (``model.vision_encoder.*``,
    ``model.vision_projection.*``, ``model.language_model.*``); the config names the
    architecture as the Hub's does (``LightOnOCRForConditionalGeneration``: the class
    the reference registers) and its text ``Qwen3ForCausalLM`` (the reference's text
    class is chosen by it)."""
    from transformers import LightOnOcrConfig, LightOnOcrForConditionalGeneration

    # a 512-piece SentencePiece vocabulary (Qwen3's route reads it) instead of Qwen's
    # 151k BPE: the same projector, a text file 300 times smaller
    vocab = train_spm(folder)
    text = dict(model_type="qwen3", vocab_size=vocab, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                bos_token_id=1, eos_token_id=2)  # fmt: skip
    # 3 layers: gguf-py maps linear_2 to mm.2 only in a tower of more than 2 blocks
    vision = dict(model_type="pixtral", hidden_size=64, intermediate_size=128,
                  num_hidden_layers=3, num_attention_heads=2, head_dim=32, image_size=64,
                  patch_size=8, hidden_act="silu")  # fmt: skip
    cfg = LightOnOcrConfig(text_config=text, vision_config=vision, spatial_merge_size=2,
                           image_token_id=10, tie_word_embeddings=True)  # fmt: skip
    model = LightOnOcrForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    top = json.loads((folder / "config.json").read_text())
    top["architectures"] = ["LightOnOCRForConditionalGeneration"]
    top["text_config"]["architectures"] = ["Qwen3ForCausalLM"]
    (folder / "config.json").write_text(json.dumps(top, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "PixtralImageProcessorFast", "patch_size": 8,
        "size": {"longest_edge": 64}, "do_normalize": True, "do_rescale": True,
        "rescale_factor": 1 / 255, **_MEAN_STD}, indent=2))  # fmt: skip
    return folder


BUILDERS["lightonocr"] = lightonocr


def paddleocrvl(folder: Path, *, dtype: str = "bfloat16", seed: int = 43) -> Path:
    """PaddleOCR-VL (PaddleOCRVLForConditionalGeneration): a SigLIP-style tower with 2-D
    RoPE (``visual.vision_model.*``), a 2x2 merge and the ``mlp_AR`` projector (LayerNorm,
    GELU MLP) over a tiny ERNIE 4.5 text model with M-RoPE sections (``model.*``).
    Written in the Hub's layout: the config flat as PaddlePaddle/PaddleOCR-VL's (text
    fields at the top, ``rope_scaling.mrope_section``, the vision config naming
    ``PaddleOCRVisionModel``, the class the reference registers), the tensors under the
    Hub's names (transformers 5 reads both); a SentencePiece vocabulary holding the
    image markers mtmd's ``paddleocr`` graph looks up; 64 px images of 8 px patches
    (``min_pixels = max_pixels = 64 * 64``: the reference's image size is its square
    root, and mtmd keeps a 64 x 64 image as it is)."""
    import torch
    from transformers import PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration

    from support.hf_models import _random_init, train_spm

    vocab = train_spm(folder)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-5, use_bias=False,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0,
                                 "mrope_section": [2, 3, 3]},
                bos_token_id=1, eos_token_id=2, pad_token_id=0,
                tie_word_embeddings=False)  # fmt: skip
    # 3 layers: gguf-py maps mlp_AR.linear_2 to mm.2 only in a tower of more than 2 blocks
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=2, image_size=64, patch_size=8, spatial_merge_size=2,
                  layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")  # fmt: skip
    cfg = PaddleOCRVLConfig(text_config=text, vision_config=vision, image_token_id=10,
                            video_token_id=11, vision_start_token_id=12, vision_end_token_id=13,
                            tie_word_embeddings=False)  # fmt: skip
    model = PaddleOCRVLForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    # the Hub's flat config (transformers 5 nests the text fields under text_config)
    saved = json.loads((folder / "config.json").read_text())
    top = {k: v for k, v in saved.items() if k not in ("text_config", "vision_config")}
    flat = {
        k: v for k, v in saved["text_config"].items() if k not in ("model_type", "rope_parameters")
    }
    rope = saved["text_config"]["rope_parameters"]
    flat["rope_theta"] = rope["rope_theta"]
    flat["rope_scaling"] = {"mrope_section": rope["mrope_section"], "rope_type": "default",
                            "type": "default"}  # fmt: skip
    vc = {k: v for k, v in saved["vision_config"].items() if k != "rope_parameters"}
    vc.update(architectures=["PaddleOCRVisionModel"], model_type="paddleocr_vl")
    hub = {**top, **flat, "use_3d_rope": True, "rope_is_neox_style": True, "vision_config": vc}
    (folder / "config.json").write_text(json.dumps(hub, indent=2))
    # two tensor groups of the Hub's checkpoints that transformers ignores on load and the
    # reference drops: the packed-sequence position table and the SigLIP pooling head
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    g = torch.Generator().manual_seed(seed)
    emb = "visual.vision_model.embeddings."
    sd[emb + "packing_position_embedding.weight"] = torch.randn(32, 64, generator=g).to(
        getattr(torch, dtype)
    )
    sd["visual.vision_model.head.probe"] = torch.randn(1, 1, 64, generator=g).to(
        getattr(torch, dtype)
    )
    save_file(sd, path, metadata={"format": "pt"})
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "PaddleOCRVLImageProcessor", "do_convert_rgb": True,
        "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 3,
        "rescale_factor": 1 / 255, "patch_size": 8, "merge_size": 2, "temporal_patch_size": 1,
        "min_pixels": 64 * 64, "max_pixels": 64 * 64, "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3}, indent=2))  # fmt: skip
    return folder


BUILDERS["paddleocrvl"] = paddleocrvl


def janus(folder: Path, *, dtype: str = "bfloat16", seed: int = 42) -> Path:
    """Janus-Pro (JanusForConditionalGeneration, the Hub's transformers layout: ``model.*``
    names): a SigLIP-like tower (``model.vision_model.*``, the attention output named
    ``projection_layer``; 64 px images of 8 px patches, 64 tokens) and the 2-layer GELU
    aligner (``model.aligner.*``); the text model is Llama.  The image-generation half
    (VQ model, generation embeddings/aligner/head) is there as in the Hub's checkpoints,
    shrunk: both converters leave it out.  The vision config has no intermediate_size,
    as the Hub's: the MLP width is ``mlp_ratio`` x the width (the reference derives it)."""
    from transformers import JanusConfig, JanusForConditionalGeneration, LlamaConfig

    vocab = train_spm(folder)
    text = LlamaConfig(**_text(vocab), tie_word_embeddings=False)
    vision = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                  patch_size=8, mlp_ratio=2.0, projection_dim=256, num_image_tokens=64,
                  hidden_act="gelu", layer_norm_eps=1e-6)  # fmt: skip
    vq = dict(embed_dim=8, num_embeddings=32, latent_channels=32, base_channels=32,
              channel_multiplier=[1, 1], num_res_blocks=1, num_patches=8, projection_dim=256,
              image_token_embed_dim=256)  # fmt: skip
    cfg = JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=10,
                      tie_word_embeddings=False)  # fmt: skip
    model = JanusForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "JanusImageProcessor", "do_normalize": True,
        "do_rescale": True, "do_resize": True, "do_pad": True, "min_size": 14,
        "resample": 3, "rescale_factor": 1 / 255, "size": {"height": 64, "width": 64},
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3}, indent=2))  # fmt: skip
    return folder


BUILDERS["janus"] = janus


#: InternVL: the names transformers 5 saves (its -hf layout, ``model.`` dropped) ->
#: OpenGVLab's; the tower's q/k/v are fused into ``attn.qkv`` first
_INTERNVL_NAMES = (
    ("vision_tower.embeddings.cls_token", "vision_model.embeddings.class_embedding"),
    ("vision_tower.embeddings.position_embeddings", "vision_model.embeddings.position_embedding"),
    ("vision_tower.embeddings.patch_embeddings.projection.",
     "vision_model.embeddings.patch_embedding."),
    ("vision_tower.encoder.layer.", "vision_model.encoder.layers."),
    (".lambda_1", ".ls1"),
    (".lambda_2", ".ls2"),
    (".attention.projection_layer.", ".attn.proj."),
    (".layernorm_before.", ".norm1."),
    (".layernorm_after.", ".norm2."),
    ("multi_modal_projector.layer_norm.", "mlp1.0."),
    ("multi_modal_projector.linear_1.", "mlp1.1."),
    ("multi_modal_projector.linear_2.", "mlp1.3."),
)  # fmt: skip


def internvl(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 43, text_model: str = "qwen2"
) -> Path:
    """InternVL 2.5 / 3 in OpenGVLab's layout (``InternVLChatModel``: ``llm_config``,
    a ``vision_config`` naming ``InternVisionModel``; ``vision_model.*`` with the fused
    ``attn.qkv``, ``ls1``/``ls2``, ``mlp1.*``, ``language_model.*``), which is what the
    reference reads.  Built with transformers' InternVLForConditionalGeneration (the
    ``-hf`` layout, saved beside as ``<folder>-hf`` for the features) and renamed: an
    InternViT (CLS token, layer scales, QKV biases; 64 px images of 8 px patches), pixel
    shuffle by 0.5, LayerNorm + 2-layer GELU MLP; the text model is ``text_model`` (Qwen2
    as InternVL 2.5 / 3, or Qwen3 as 3.5) with a SentencePiece vocabulary of 512."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    # a SentencePiece vocabulary (Qwen2's text class reads one first), for a tiny embedding
    vocab = train_spm(folder)
    text = dict(model_type=text_model, vocab_size=vocab, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                tie_word_embeddings=False)  # fmt: skip
    # 4 layers: gguf-py names mlp1.{bid} only for bid below the block count (mlp1.3)
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=2, image_size=[64, 64], patch_size=[8, 8],
                  attention_bias=True, hidden_act="gelu", layer_norm_eps=1e-6)  # fmt: skip
    cfg = InternVLConfig(text_config=text, vision_config=vision, downsample_ratio=0.5,
                         image_token_id=151667, tie_word_embeddings=False)  # fmt: skip
    model = InternVLForConditionalGeneration(cfg)
    _random_init(model, seed)
    hf = folder.with_name(folder.name + "-hf")
    _save(model, hf, dtype, tower=None)
    sd = load_file(hf / "model.safetensors")
    out = {}
    for k, v in sd.items():
        if ".attention.k_proj." in k or ".attention.v_proj." in k:
            continue
        if ".attention.q_proj." in k:  # OpenGVLab's fused [q; k; v]
            v = torch.cat([v, sd[k.replace("q_proj", "k_proj")], sd[k.replace("q_proj", "v_proj")]])
            k = k.replace(".attention.q_proj.", ".attn.qkv.")
        for a, b in _INTERNVL_NAMES:
            k = k.replace(a, b)
        assert k.startswith(("vision_model.", "mlp1.", "language_model.")), k
        out[k] = v.contiguous()
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    text_class = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[text_model]
    llm = {**model.config.text_config.to_dict(), "architectures": [text_class]}
    vc = model.config.vision_config
    top = {
        "architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
        "downsample_ratio": 0.5, "dynamic_image_size": True, "force_image_size": 64,
        "min_dynamic_patch": 1, "max_dynamic_patch": 12, "ps_version": "v2",
        "select_layer": -1, "template": "internvl2_5", "use_thumbnail": True,
        "torch_dtype": dtype, "llm_config": llm,
        "vision_config": {
            "architectures": ["InternVisionModel"], "model_type": "intern_vit_6b",
            "hidden_size": vc.hidden_size, "intermediate_size": vc.intermediate_size,
            "num_hidden_layers": vc.num_hidden_layers,
            "num_attention_heads": vc.num_attention_heads, "image_size": 64,
            "patch_size": 8, "num_channels": 3, "hidden_act": "gelu",
            "layer_norm_eps": vc.layer_norm_eps, "norm_type": "layer_norm",
            "qkv_bias": True, "qk_normalization": False, "drop_path_rate": 0.0,
            "dropout": 0.0, "attention_dropout": 0.0, "initializer_factor": 1.0,
            "initializer_range": 0.02, "use_flash_attn": False,
        },
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(top, indent=2))
    pre = {"crop_size": 64, "do_center_crop": True, "do_normalize": True, "do_resize": True,
           "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
           "resample": 3, "size": 64}  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    (hf / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    return folder


BUILDERS["internvl"] = internvl
# InternVL 3.5's text model: Qwen3 (QK norms)
BUILDERS["internvl_qwen3"] = lambda folder, **kw: internvl(folder, text_model="qwen3", **kw)


# --------------------------------------------------------------------------- GLM-4V


def _glm4v_processor(folder: Path) -> None:
    """GLM-4V's image processor file: 8 px patches, 2 frames, 2x2 merge, 64 x 64 images."""
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Glm4vImageProcessor", "patch_size": 8,
        "temporal_patch_size": 2, "merge_size": 2,
        "size": {"shortest_edge": 64 * 64, "longest_edge": 64 * 64}, **_MEAN_STD}, indent=2))  # fmt: skip


_GLM4V_VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=8,
                     image_size=64, spatial_merge_size=2, temporal_patch_size=2,
                     out_hidden_size=128, rms_norm_eps=1e-5, hidden_act="silu")  # fmt: skip
# the text model: 4 heads of 32, half of each rotated, in MRoPE sections [2, 3, 3]
_GLM4V_TEXT = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   max_position_embeddings=256, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                    "mrope_section": [2, 3, 3], "partial_rotary_factor": 0.5},
                   bos_token_id=None, eos_token_id=50256, pad_token_id=None)  # fmt: skip


def glm4v(folder: Path, *, dtype: str = "bfloat16", seed: int = 48) -> Path:
    """GLM-4.1V: a ViT (Conv3d patches, RMS norms, SwiGLU, 2-D RoPE, a learned position
    table resized to the image) with a Conv2d 2x2 downsample and a SwiGLU merger, over a
    GLM-4 text model whose half-rotary RoPE is in MRoPE sections.  Saved as transformers
    writes it, which is the Hub's layout (``model.visual.*``, ``model.language_model.*``)."""
    from transformers import Glm4vConfig, Glm4vForConditionalGeneration

    from support.hf_models import _glm_tokenizer

    vocab = _glm_tokenizer(folder)
    cfg = Glm4vConfig(text_config={**_GLM4V_TEXT, "vocab_size": vocab},
                      vision_config=_GLM4V_VISION, image_token_id=10, video_token_id=11,
                      image_start_token_id=12, image_end_token_id=13,
                      tie_word_embeddings=False)  # fmt: skip
    model = Glm4vForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _glm4v_processor(folder)
    return folder


BUILDERS["glm4v"] = glm4v


def glm4vmoe(folder: Path, *, dtype: str = "bfloat16", seed: int = 49) -> Path:
    """GLM-4.5V: GLM-4V's tower over a GLM-4.5 MoE text model (a dense first layer, 4
    sigmoid-routed experts per expert with a correction bias, a shared expert, q/k/v
    biases, half-rotary RoPE in M-RoPE sections, already in NeoX order).  transformers 5
    saves the experts one by one, as the Hub's checkpoints have them."""
    from transformers import Glm4vMoeConfig, Glm4vMoeForConditionalGeneration

    from support.hf_models import _glm_tokenizer

    vocab = _glm_tokenizer(folder)
    text = {**_GLM4V_TEXT, "vocab_size": vocab, "moe_intermediate_size": 64,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
            "routed_scaling_factor": 2.5, "norm_topk_prob": True}  # fmt: skip
    cfg = Glm4vMoeConfig(text_config=text, vision_config=_GLM4V_VISION, image_token_id=10,
                         video_token_id=11, image_start_token_id=12, image_end_token_id=13,
                         tie_word_embeddings=False)  # fmt: skip
    model = Glm4vMoeForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _glm4v_processor(folder)
    return folder


BUILDERS["glm4vmoe"] = glm4vmoe


def glmocr(folder: Path, *, dtype: str = "bfloat16", seed: int = 50) -> Path:
    """GLM-OCR: GLM-4V's tower with biases, per-head Q/K RMS norms, no position table and
    no norm after the patch convolution, over a GLM-4 text model without attention biases
    and with one multi-token-prediction block after the trunk (``layers.2``: transformers
    does not build it; written here as the Hub's checkpoint carries it)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GlmOcrConfig, GlmOcrForConditionalGeneration

    from support.hf_models import _glm_tokenizer

    vocab = _glm_tokenizer(folder)
    text = {**_GLM4V_TEXT, "vocab_size": vocab, "num_nextn_predict_layers": 1}
    vision = {**_GLM4V_VISION, "attention_bias": True}
    cfg = GlmOcrConfig(text_config=text, vision_config=vision, image_token_id=10,
                       video_token_id=11, image_start_token_id=12, image_end_token_id=13,
                       tie_word_embeddings=False)  # fmt: skip
    model = GlmOcrForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _glm4v_processor(folder)
    path = folder / "model.safetensors"
    sd = load_file(path)
    g = torch.Generator().manual_seed(seed + 1000)
    h, pre = text["hidden_size"], "model.language_model.layers."

    def rnd(*shape: int, one: bool = False):
        x = torch.randn(shape, generator=g) * 0.05 + (1.0 if one else 0.0)
        return x.to(getattr(torch, dtype))

    mtp = {k.replace("layers.1.", "layers.2."): rnd(*v.shape, one=v.ndim == 1)
           for k, v in sd.items() if k.startswith(pre + "1.")}  # fmt: skip
    mtp |= {pre + "2.eh_proj.weight": rnd(h, 2 * h), pre + "2.enorm.weight": rnd(h, one=True),
            pre + "2.hnorm.weight": rnd(h, one=True),
            pre + "2.shared_head.norm.weight": rnd(h, one=True)}  # fmt: skip
    save_file({**sd, **mtp}, path, metadata={"format": "pt"})
    return folder


BUILDERS["glmocr"] = glmocr


def qwen25omni(folder: Path, *, dtype: str = "bfloat16", seed: int = 42) -> Path:
    """Qwen2.5-Omni's thinker (no talker: ``enable_audio_output=False``): a Qwen2.5-VL
    tower with separate attention q / k / v, a 2-layer Whisper-style audio encoder and
    the Qwen2 text model with MRoPE sections, all under ``thinker.`` as on the Hub; the
    config names the Hub's class, ``Qwen2_5OmniModel`` (the one the reference registers)."""
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    from support.hf_models import _qwen_tokenizer

    vocab = _qwen_tokenizer(folder)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3]},
                tie_word_embeddings=False)  # fmt: skip
    vision = dict(depth=4, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=8,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=32,
                  out_hidden_size=64, fullatt_block_indexes=[1, 3])  # fmt: skip
    audio = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2,
                 encoder_ffn_dim=128, d_model=64, output_dim=64)  # fmt: skip
    cfg = Qwen2_5OmniConfig(
        thinker_config=dict(text_config=text, vision_config=vision, audio_config=audio),
        enable_audio_output=False,
    )
    model = Qwen2_5OmniForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "architectures": ["Qwen2_5OmniModel"]}, indent=2))
    _qwen_vl_processor(folder, _MEAN_STD)
    # transformers' from_pretrained insists on the talker's speaker table: an empty one
    import torch

    torch.save({}, folder / "spk_dict.pt")
    return folder


BUILDERS["qwen25omni"] = qwen25omni


def qwen3omni(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 43, deepstack: tuple = (1, 2)
) -> Path:
    """Qwen3-Omni MoE's thinker (no talker): the Qwen3-VL tower (deepstack mergers after
    the ``deepstack`` layers), a 2-layer Whisper-style audio encoder with Conv2d
    sub-sampling, and the Qwen3-VL-MoE text model (4 experts, saved one tensor each as on
    the Hub), all under ``thinker.``."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    from support.hf_models import _qwen_tokenizer

    vocab = _qwen_tokenizer(folder)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                moe_intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                tie_word_embeddings=False)  # fmt: skip
    vision = {**_QWEN3VL_VISION, "deepstack_visual_indexes": list(deepstack)}
    audio = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2,
                 encoder_ffn_dim=128, d_model=64, output_dim=64,
                 downsample_hidden_size=32)  # fmt: skip
    cfg = Qwen3OmniMoeConfig(
        thinker_config=dict(text_config=text, vision_config=vision, audio_config=audio),
        enable_audio_output=False,
    )
    model = Qwen3OmniMoeForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, _MEAN_STD)
    return folder


BUILDERS["qwen3omni"] = qwen3omni
# --------------------------------------------------------------------------- Granite Speech

#: GraniteSpeechEncoderConfig fields: 160 inputs (80 mel bins, two frames stacked: what
#: llama.cpp's front end gives), a 4-layer conformer of width 64 in blocks of 20 frames
GRANITE_SPEECH_ENCODER = dict(
    input_dim=160,
    num_layers=4,
    hidden_dim=64,
    feedforward_mult=4,
    num_heads=2,
    dim_head=32,
    output_dim=48,
    context_size=20,
    max_pos_emb=64,
    conv_kernel_size=5,
    conv_expansion_factor=2,
)


def granite_speech(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 50, cat: list[int] | None = None
) -> Path:
    """Granite Speech (``cat``: Granite Speech Plus, those encoder layers' outputs
    concatenated to the last, ``cat_hidden_layers``): the tiny Granite text model, the conformer above and a two-layer Q-Former
    (mtmd 0.3.36 reads two) of the encoder's width (its queries at that width), windows
    of 15 frames, 3 queries each; every weight and the batch norms' running statistics
    seeded.  transformers 5 saves the Hub's names (``encoder.*``, ``projector.*``,
    ``language_model.model.*``); ``text_config.architectures`` picks the text class, as
    on the Hub."""
    import torch
    from transformers import (
        Blip2QFormerConfig,
        GraniteConfig,
        GraniteSpeechConfig,
        GraniteSpeechForConditionalGeneration,
        GraniteSpeechPlusConfig,
        GraniteSpeechPlusForConditionalGeneration,
    )

    vocab = train_spm(folder)
    text = GraniteConfig(**_text(vocab), attention_multiplier=0.0625,
                         embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0,
                         tie_word_embeddings=True, architectures=["GraniteForCausalLM"])  # fmt: skip
    enc = dict(GRANITE_SPEECH_ENCODER, cat_hidden_layers=cat) if cat else GRANITE_SPEECH_ENCODER
    width = enc["hidden_dim"] * (len(cat) + 1 if cat else 1)
    proj = Blip2QFormerConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=128, encoder_hidden_size=width,
                              cross_attention_frequency=1)  # fmt: skip
    config_cls = GraniteSpeechPlusConfig if cat else GraniteSpeechConfig
    model_cls = (GraniteSpeechPlusForConditionalGeneration if cat
                 else GraniteSpeechForConditionalGeneration)  # fmt: skip
    cfg = config_cls(text_config=text, encoder_config=dict(enc),
                     projector_config=proj, audio_token_index=vocab - 1, downsample_rate=5,
                     window_size=15, has_lora_adapter=False)  # fmt: skip
    model = model_cls(cfg)
    _random_init(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, b in sorted(model.named_buffers()):
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return folder


BUILDERS["granite_speech"] = granite_speech


# --------------------------------------------------------------------------- Granite 4 Vision


def granite4_vision(folder: Path, *, dtype: str = "bfloat16", seed: int = 52) -> Path:
    """Granite 4 Vision: a 6-layer SigLIP tower of width 64 (8 px patches, 64 px images),
    two layerwise projectors (vision layers -1 and 2 into text layers 0 and 1) and the
    four spatial ones (text layers 2..5), Window Q-Formers of one layer downsampling
    4 x 4 windows to 2 x 2 queries (``downsample_rate`` "2/4"), the tiny Granite text
    model with 6 layers, anyres pinpoints 64 x 64 and 64 x 128, every patch feature kept
    (``full``: SigLIP has no class token).  The tower is saved
    under the Hub's ``model.vision_tower.vision_model.*`` (transformers 5 saves
    ``model.vision_tower.*`` and reads both); the reference numbers its projector
    blocks by the tower's layer count, so the tower has as many layers as there are
    projectors."""
    import torch
    from transformers import Granite4VisionConfig, Granite4VisionForConditionalGeneration

    vocab = train_spm(folder)
    text = dict(_text(vocab), model_type="granite4_vision_text", num_hidden_layers=6,
                attention_multiplier=0.0625, embedding_multiplier=12.0,
                residual_multiplier=0.22, logits_scaling=8.0,
                architectures=["GraniteForCausalLM"])  # fmt: skip
    vision = dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=128,
                  num_hidden_layers=6, num_attention_heads=2, image_size=64, patch_size=8)  # fmt: skip
    qformer = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=128, encoder_hidden_size=64)  # fmt: skip
    cfg = Granite4VisionConfig(text_config=text, vision_config=vision, qformer_config=qformer,
                               image_token_index=vocab - 1, downsample_rate="2/4",
                               spatial_target_layers=[2, 3, 4, 5],
                               deepstack_layer_map=[[-1, 0], [2, 1]],
                               image_grid_pinpoints=[[64, 64], [64, 128]],
                               vision_feature_layer=-1,
                               vision_feature_select_strategy="full")  # fmt: skip
    model = Granite4VisionForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    hub_layout(
        folder, lambda k: k.replace("model.vision_tower.", "model.vision_tower.vision_model.", 1)
    )
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}, indent=2))  # fmt: skip
    return folder


BUILDERS["granite4_vision"] = granite4_vision


def hunyuanvl_files(folder: Path) -> None:
    """HunyuanOCR's image processor file (the reference reads its pixel bounds): 16 px
    patches, 2x2 merge, 64 x 64 images at most."""
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "HunYuanVLImageProcessor", "patch_size": 16,
        "temporal_patch_size": 1, "merge_size": 2, "min_pixels": 32 * 32,
        "max_pixels": 64 * 64, **_MEAN_STD}, indent=2))  # fmt: skip


def hunyuanvl(folder: Path, *, dtype: str = "float32", seed: int = 62) -> Path:
    """HunyuanVL (HunyuanOCR's classes): hf_models' tiny ``hunyuan_vl`` text with a
    3-layer vision tower (the reference maps the merger's ``perceive.proj.2`` through the
    tower's block numbers: with 2 layers it cannot name it), and the image processor
    file.  transformers 5.24 saves it in the Hub's layout (its ``hunyuan_vl`` load renames
    run backwards on save): text ``model.*``, tower ``vit.*`` with Megatron MLP / norm
    names and the merger as ``perceive`` (convolutions ``proj.0`` / ``proj.2``), the
    only names the reference's projector reads.  64 px images at most, 16 px patches:
    4 x 4 patches, 2 x 2 merged tokens."""
    import torch
    from transformers import HunYuanVLConfig, HunYuanVLForConditionalGeneration

    from support.hf_models import _qwen_tokenizer, hunyuan_vl_text

    cfg = HunYuanVLConfig(
        text_config=hunyuan_vl_text(_qwen_tokenizer(folder)),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=2,
            num_hidden_layers=3, out_hidden_size=64, text_hidden_size=64, patch_size=16,
            max_image_size=64, min_image_size=32,
        ),
        tie_word_embeddings=False,
    )  # fmt: skip
    model = HunYuanVLForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    hunyuanvl_files(folder)
    return folder


BUILDERS["hunyuanvl"] = hunyuanvl


# --------------------------------------------------------------------------- Qwen3-ASR


def qwen3asr(folder: Path, *, dtype: str = "bfloat16", seed: int = 53) -> Path:
    """Qwen3-ASR as transformers 5 saves it (``Qwen3ASRForConditionalGeneration``): the
    Qwen3 text model under ``model.language_model.``, Qwen3-Omni's audio encoder (Conv2d
    sub-sampling) under ``model.audio_tower.``, its two output layers as
    ``model.multi_modal_projector.linear_1`` / ``linear_2``, tied embeddings; the text
    RoPE with MRoPE sections (Qwen's release has them; transformers' Qwen3 ignores them,
    llama.cpp's ``qwen3vl`` cannot load a file without them).  Four
    encoder layers: the reference's tensor map knows ``audio_tower.conv2d{1,2,3}`` only
    below the block count (with two layers it cannot name ``conv2d2``)."""
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    from support.hf_models import _qwen_tokenizer

    vocab = _qwen_tokenizer(folder)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                )  # fmt: skip
    audio = dict(num_mel_bins=128, encoder_layers=4, encoder_attention_heads=2,
                 encoder_ffn_dim=128, d_model=64, output_dim=64,
                 downsample_hidden_size=32)  # fmt: skip
    model = Qwen3ASRForConditionalGeneration(Qwen3ASRConfig(text_config=text, audio_config=audio))
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    return folder


BUILDERS["qwen3asr"] = qwen3asr

#: transformers 5's Qwen3-ASR names -> Qwen's own release (``thinker.``; the output
#: layers inside the audio tower as ``proj1`` / ``proj2``, as Qwen3-Omni's)
_QWEN3ASR_QWEN_NAMES = (
    ("model.audio_tower.", "thinker.audio_tower."),
    ("model.multi_modal_projector.linear_1.", "thinker.audio_tower.proj1."),
    ("model.multi_modal_projector.linear_2.", "thinker.audio_tower.proj2."),
    ("model.language_model.", "thinker.model."),
    ("lm_head.", "thinker.lm_head."),
)


def qwen3asr_qwen_layout(src: Path, dst: Path) -> Path:
    """A copy of a :func:`qwen3asr` folder in the layout of Qwen's own Qwen3-ASR release
    (the one the reference's projector class reads): the towers' and text configs under
    ``thinker_config``, the tensors renamed by ``_QWEN3ASR_QWEN_NAMES``."""
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    cfg["thinker_config"] = {k: cfg.pop(k) for k in ("audio_config", "text_config")}
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))

    def rename(k: str) -> str:
        for a, b in _QWEN3ASR_QWEN_NAMES:
            if k.startswith(a):
                return b + k[len(a) :]
        return k

    shutil.copy(src / "model.safetensors", dst / "model.safetensors")
    hub_layout(dst, rename)
    return dst


# --------------------------------------------------------------------------- Kimi-K2.5

#: transformers 5.24's save of Kimi-K2.5 -> the Hub's names (its load renames run
#: backwards on save, but not all: the text layers come out as ``blocks``, the patch
#: embedding under ``encoder.``, the projector's norm under ``model.``)
_KIMI_HUB_NAMES = (
    ("language_model.model.blocks.", "language_model.model.layers."),
    ("vision_tower.encoder.patch_embed.", "vision_tower.patch_embed."),
    ("model.mm_projector.", "mm_projector."),
)


def kimi_hub_name(k: str) -> str:
    for a, b in _KIMI_HUB_NAMES:
        if k.startswith(a):
            return b + k[len(a) :]
    return k


def kimik25(folder: Path, *, dtype: str = "bfloat16", seed: int = 70) -> Path:
    """Kimi-K2.5 (Kimi_K25ForConditionalGeneration) in the Hub's layout: hf_models' tiny
    DeepSeek-V3 text (4 experts, a dense first layer, MLA) under ``language_model.``, a
    3-layer MoonViT3d tower of width 64 (8 px patches; the reference names the projector's
    ``proj.2`` through the tower's block numbers: with 2 layers it cannot), the real
    model's 64 x 64 position table (the size the reference writes without the Hub's
    ``init_pos_emb_*`` fields), 2x2 merging.  config.json names the Hub's class,
    ``KimiK25ForConditionalGeneration`` (the reference's; transformers' is
    ``Kimi_K25ForConditionalGeneration`` and it loads either); the image processor file
    limits an image to 256 patches (``in_patch_limit``: mtmd's warm-up image is that size)."""
    import torch
    from transformers import Kimi_K25Config, Kimi_K25ForConditionalGeneration

    from support.hf_models import _bpe_tokenizer

    vocab = _bpe_tokenizer(folder, "gpt-2")
    text = dict(model_type="deepseek_v3", vocab_size=vocab, hidden_size=256,
                intermediate_size=512, moe_intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                v_head_dim=32, n_group=1, topk_group=1, max_position_embeddings=256,
                bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=False)  # fmt: skip
    vision = dict(patch_size=8, pos_emb_height=64, pos_emb_width=64, pos_emb_time=4,
                  num_attention_heads=2, num_hidden_layers=3, hidden_size=64,
                  intermediate_size=128, merge_kernel_size=[2, 2])  # fmt: skip
    cfg = Kimi_K25Config(text_config=text, vision_config=vision, projection_hidden_size=64,
                         tie_word_embeddings=False, image_token_id=vocab - 1)  # fmt: skip
    model = Kimi_K25ForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    hub_layout(folder, kimi_hub_name)
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "architectures": ["KimiK25ForConditionalGeneration"]},
                               indent=2))  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Kimi_K25ImageProcessor", "patch_size": 8, "merge_size": 2,
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
        "media_proc_cfg": {"in_patch_limit": 256}}, indent=2))  # fmt: skip
    return folder


BUILDERS["kimik25"] = kimik25


# --------------------------------------------------------------------------- MiniMax-M3 VL

#: MiniMax-M3's Hub config fields the reference reads and transformers 5.24's config class
#: drops or renames (``MiniMaxM3VLTextConfig`` pops ``sparse_attention_config`` and
#: ``moe_layer_freq`` into its own fields); the values are the tiny text model's
MINIMAX_M3_HUB_FIELDS = {
    "n_shared_experts": 1,
    "moe_layer_freq": [0, 1, 1],
    "scoring_func": "sigmoid",
    "sparse_attention_config": {
        "sparse_num_index_heads": 2, "sparse_index_dim": 32, "sparse_topk_blocks": 2,
        "sparse_block_size": 4, "sparse_local_block": 1, "sparse_attention_freq": [0, 1, 1],
    },
}  # fmt: skip


def minimaxm3(folder: Path, *, dtype: str = "bfloat16", seed: int = 71) -> Path:
    """MiniMax-M3 VL (MiniMaxM3SparseForConditionalGeneration; transformers 5.24 saves the
    Hub's layout: ``language_model.model.*`` with per-expert ``block_sparse_moe`` weights,
    ``vision_tower.vision_model.*``, ``multi_modal_projector.*``, ``patch_merge_mlp.*``).
    Text: 3 layers of width 256 (a dense first layer, then 4 experts, top 2, and a shared
    expert; the last two with the lightning indexer: blocks of 4, top 2, 1 local), GQA 4 / 2
    heads of 64, RoPE over 32 of them (``rotary_dim``, and ``partial_rotary_factor`` 0.5:
    transformers rotates by the latter, llama.cpp by the former), the GPT-2 vocabulary.
    Tower: 3 layers of width 160 (two 80-wide heads: the reference asserts 80), 8 px
    patches, 2 frames, 2x2 merging.  config.json gets the Hub's text fields
    (:data:`MINIMAX_M3_HUB_FIELDS`), and the image processor file the normalisation."""
    import torch
    from transformers import MiniMaxM3SparseForConditionalGeneration, MiniMaxM3VLConfig

    from support.hf_models import _bpe_tokenizer

    vocab = _bpe_tokenizer(folder, "gpt-2")
    text = dict(vocab_size=vocab, hidden_size=256, intermediate_size=256, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                max_position_embeddings=256, num_experts_per_tok=2, num_local_experts=4,
                dense_intermediate_size=512, shared_intermediate_size=256, rotary_dim=32,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                 "partial_rotary_factor": 0.5},
                mlp_layer_types=["dense", "sparse", "sparse"],
                layer_types=["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"],
                index_n_heads=2, index_head_dim=32, index_block_size=4, index_topk_blocks=2,
                index_local_blocks=1, bos_token_id=50256, eos_token_id=50256)  # fmt: skip
    vision = dict(hidden_size=160, intermediate_size=256, num_hidden_layers=3,
                  num_attention_heads=2, image_size=64, patch_size=8)  # fmt: skip
    cfg = MiniMaxM3VLConfig(text_config=text, vision_config=vision, projector_hidden_size=256,
                            image_token_index=vocab - 1)  # fmt: skip
    model = MiniMaxM3SparseForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    saved["text_config"].update(MINIMAX_M3_HUB_FIELDS)
    path.write_text(json.dumps(saved, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "MiniMaxM3VLImageProcessor", "patch_size": 8,
        "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3}, indent=2))  # fmt: skip
    return folder


BUILDERS["minimaxm3"] = minimaxm3


def exaone4_5(folder: Path, *, dtype: str = "bfloat16", seed: int = 72) -> Path:
    """EXAONE 4.5 (Exaone4_5_ForConditionalGeneration): Qwen2.5-VL's window-attention ViT
    with grouped-query attention (4 heads, 2 KV heads: one fused QKV of q + 2 kv rows),
    Conv3d patches, 2x2 patch merger, windows of 2 x 2 merged patches (full attention in
    blocks 1 and 3), over the tiny EXAONE 4.0 text model (1.2B layout: RoPE on every
    layer), GPT-2's BPE.  Saved as transformers 5 writes it
    (``model.visual.*``, ``model.language_model.*``: the names the reference reads)."""
    from transformers import Exaone4_5_Config, Exaone4_5_ForConditionalGeneration

    from support.hf_models import _exaone4_cfg, _gpt2_tokenizer

    text = _exaone4_cfg(_gpt2_tokenizer(folder), sliding_window=None,
                        layer_types=["full_attention"] * 2).to_dict()  # fmt: skip
    vision = dict(depth=4, hidden_size=64, intermediate_size=128, num_heads=4,
                  num_key_value_heads=2, patch_size=8, spatial_merge_size=2,
                  temporal_patch_size=2, window_size=32, out_hidden_size=64,
                  fullatt_block_indexes=[1, 3])  # fmt: skip
    cfg = Exaone4_5_Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
    model = Exaone4_5_ForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, _MEAN_STD)
    # down to 32 x 32 px, so neither runtime resizes a 32 x 64 image
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**pre, "min_pixels": 32 * 32}))
    return folder


BUILDERS["exaone4_5"] = exaone4_5
# --------------------------------------------------------------------------- MiniCPM-V 4.6


def minicpmv46_files(folder: Path, **pre) -> None:
    """MiniCPM-V 4.6's image processor file: 128 px slices (``scale_resolution``), 8 px
    patches, ``pre`` over it (``downsample_mode``)."""
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "MiniCPMV4_6ImageProcessorPil", "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3, "scale_resolution": 128, "patch_size": 8, "max_slice_nums": 9,
        "slice_mode": True, "downsample_mode": "16x", **pre}, indent=2))  # fmt: skip


def minicpmv46(folder: Path, *, dtype: str = "bfloat16", seed: int = 70) -> Path:
    """MiniCPM-V 4.6 (MiniCPMV4_6ForConditionalGeneration) as transformers 5.24 saves it
    (the names the reference reads): a tiny Qwen3.5 text (hf_models' DeltaNet sizes, tied
    embeddings) with the Hub's MTP block and ``mtp_num_hidden_layers``; a 3-layer SigLIP
    tower of width 64, 8 px patches, its window merger after layer 1.  The vision
    ``image_size`` is 560 = 70 x 8: mtmd hard-codes SigLIP's 70 x 70 position buckets."""
    import torch
    from transformers import MiniCPMV4_6Config, MiniCPMV4_6ForConditionalGeneration

    from support.hf_models import _DELTANET, _QWEN35_ROPE, _bpe_tokenizer, _qwen35_ids, _with_mtp

    vocab = _bpe_tokenizer(folder, "qwen35")
    text = dict(model_type="qwen3_5_text", rope_parameters=_QWEN35_ROPE,
                tie_word_embeddings=True, **_qwen35_ids(vocab), **_DELTANET)  # fmt: skip
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=2, patch_size=8, image_size=560)  # fmt: skip
    cfg = MiniCPMV4_6Config(text_config=text, vision_config=vision, insert_layer_id=1,
                            tie_word_embeddings=True)  # fmt: skip
    model = MiniCPMV4_6ForConditionalGeneration(cfg)
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    _with_mtp(folder, seed, {"mtp_num_hidden_layers": 1}, vlm=True)
    minicpmv46_files(folder)
    return folder


BUILDERS["minicpmv46"] = minicpmv46


# --------------------------------------------------------------------------- Youtu-VL

#: the tiny tower: 4 layers, full attention in layers 1 and 3, windows of 2 x 2 merged
#: tokens (32 px)
YOUTUVL_VISION = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
    patch_size=8, spatial_merge_size=2, window_size=32, fullatt_block_indexes=[1, 3],
    hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
)  # fmt: skip


def youtuvl(folder: Path, *, seed: int = 72) -> Path:
    """Youtu-VL (``YoutuVLForConditionalGeneration``, remote code: transformers 5.24 has
    no class for it, only Youtu-LLM's text): hf_models' tiny Youtu-LLM text (saved by
    YoutuForCausalLM, top-level config as the Hub's) plus seeded bf16 tensors for the
    SigLIP2 tower (``siglip2.vision_model.*``, the linear patch embedding of 8 x 8 x 3
    pixels) and the Qwen2.5-VL-style merger (``merger.ln_q``, ``merger.mlp.0`` / ``.2``)
    under the names the reference's tensor map gives for Youtu-VL, and the vision config
    fields its class reads."""
    import numpy as np
    from ml_dtypes import bfloat16
    from safetensors.numpy import load_file, save_file

    from support.hf_models import youtu

    youtu(folder, dtype="bfloat16", seed=seed)
    rng = np.random.default_rng(seed)
    v, n_text = YOUTUVL_VISION, 256
    h, ff, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    merged = h * v["spatial_merge_size"] ** 2
    shapes: dict[str, tuple[int, ...]] = {}
    tower = "siglip2.vision_model."
    for wb, shape in (("embeddings.patch_embedding", (h, 3 * p * p)), ("post_layernorm", (h,))):
        shapes[tower + wb + ".weight"], shapes[tower + wb + ".bias"] = shape, shape[:1]
    for i in range(v["num_hidden_layers"]):
        layer = f"{tower}encoder.layers.{i}."
        for name, shape in (("layer_norm1", (h,)), ("layer_norm2", (h,)),
                            ("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (h, h)),
                            ("self_attn.v_proj", (h, h)), ("self_attn.out_proj", (h, h)),
                            ("mlp.fc1", (ff, h)), ("mlp.fc2", (h, ff))):  # fmt: skip
            shapes[layer + name + ".weight"], shapes[layer + name + ".bias"] = shape, shape[:1]
    shapes["merger.ln_q.weight"] = (h,)
    for name, shape in (("merger.mlp.0", (merged, merged)), ("merger.mlp.2", (n_text, merged))):
        shapes[name + ".weight"], shapes[name + ".bias"] = shape, shape[:1]
    sd = load_file(folder / "model.safetensors")
    for k, shape in shapes.items():
        scale = 1.0 if len(shape) == 1 and "norm" in k else 1.0 / np.sqrt(shape[-1])
        base = 1.0 if len(shape) == 1 and "norm" in k and k.endswith(".weight") else 0.0
        sd[k] = (base + rng.standard_normal(shape) * scale * 0.5).astype(bfloat16)
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(architectures=["YoutuVLForConditionalGeneration"], model_type="youtu_vl",
               vision_config=dict(v, model_type="siglip2_vision_model"))  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "YoutuVLImageProcessor", "patch_size": 8, "merge_size": 2,
        "min_pixels": 32 * 32, "max_pixels": 128 * 128, **_MEAN_STD}, indent=2))  # fmt: skip
    return folder


BUILDERS["youtuvl"] = youtuvl


# --------------------------------------------------------------------------- Step3-VL


def step3p7(folder: Path, *, dtype: str = "bfloat16", seed: int = 73) -> Path:
    """Step-3.7 (Step3p7ForConditionalGeneration) as transformers 5.24 saves it: a 2-layer
    Step3.5 text (a dense layer, then 4 experts + a shared one; gated attention) under
    ``model.*``, a 2-layer Step3-VL tower under ``vision_model.*`` (fused ``in_proj``,
    layer scales) with its two downsampling convolutions and ``vit_large_projector``.
    The pinned reference converts neither half of it (tests/test_convert_step3vl.py)."""
    import torch
    from transformers import Step3p7Config, Step3p7ForConditionalGeneration

    from support.hf_models import _bpe_tokenizer

    vocab = _bpe_tokenizer(folder, "gpt-2")
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, moe_intermediate_size=32, n_routed_experts=4,
                num_experts_per_tok=2, share_expert_dim=32, bos_token_id=50256,
                eos_token_id=50256, mlp_layer_types=["dense", "sparse"])  # fmt: skip
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=2, image_size=56, patch_size=14,
                  max_position_embeddings=16)  # fmt: skip
    model = Step3p7ForConditionalGeneration(Step3p7Config(text_config=text, vision_config=vision))
    _random_init(model, seed)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(_MEAN_STD, indent=2))
    return folder


BUILDERS["step3p7"] = step3p7


# --------------------------------------------------------------------------- Qwen4-Exp


def qwen4exp_vl(folder: Path, *, dtype: str = "bfloat16", seed: int = 63) -> Path:
    """Qwen4-Exp (Qwen4ExpForConditionalGeneration): the Qwen3-VL tower without deepstack
    mergers over the tiny Qwen4-Exp text model of hf_models (hyper-connections, a QSA
    indexer, experts saved one by one as transformers 5 does).  Saved as transformers
    writes it (``model.visual.*``, ``model.language_model.*``)."""
    from transformers import Qwen4ExpConfig, Qwen4ExpForConditionalGeneration

    from support.hf_models import QWEN4EXP_TEXT, _bpe_tokenizer, _qwen35_ids

    vocab = _bpe_tokenizer(folder, "qwen35")
    vision = {k: v for k, v in _QWEN3VL_VISION.items() if k != "deepstack_visual_indexes"}
    cfg = Qwen4ExpConfig(text_config={**QWEN4EXP_TEXT, **_qwen35_ids(vocab)},
                         vision_config=vision, image_token_id=151655, video_token_id=151656,
                         vision_start_token_id=151652, vision_end_token_id=151653,
                         tie_word_embeddings=False)  # fmt: skip
    model = Qwen4ExpForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    _qwen_vl_processor(folder, {"image_mean": [0.5] * 3, "image_std": [0.5] * 3})
    return folder


BUILDERS["qwen4exp_vl"] = qwen4exp_vl


# --------------------------------------------------------------------------- GLM-5-Next

# 4 layers: KDA, KDA, KDA, nope-only MLA + DSA indexer (transformers' default schedule);
# mHC with 4 streams (llama.cpp 0.3.36 runs no other count); a dense first layer, then 4
# sigmoid-routed experts with a shared one
_GLM5NEXT_TEXT = dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                      n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
                      kv_lora_rank=32, q_lora_rank=64, qk_rope_head_dim=0, v_head_dim=32,
                      qk_nope_head_dim=32, index_topk=16, index_head_dim=32, index_n_heads=2,
                      linear_head_dim=32, linear_num_heads=4,
                      mlp_layer_types=["dense", "sparse", "sparse", "sparse"], hc_mult=4,
                      index_kpool=4, max_position_embeddings=256, eos_token_id=50256,
                      pad_token_id=None, bos_token_id=None)  # fmt: skip


def glm5next(folder: Path, *, dtype: str = "bfloat16", seed: int = 64) -> Path:
    """GLM-5-Next (Glm5NextForConditionalGeneration): GLM-4V's tower with per-head Q/K
    norms and no position table, over a text model of KDA linear-attention layers and
    nope-only MLA layers with a DSA indexer, mHC hyper-connections and experts.  Saved as
    transformers writes it, then its text config in the Hub's spelling, which the
    reference reads (``linear_attn_config``, ``mla_use_nope``, ``first_k_dense_replace``;
    transformers reads it back)."""
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

    from support.hf_models import _glm_tokenizer

    vocab = _glm_tokenizer(folder)
    vision = {**_GLM4V_VISION, "projection_intermediate_size": 128}
    cfg = Glm5NextConfig(text_config={**_GLM5NEXT_TEXT, "vocab_size": vocab},
                         vision_config=vision, image_token_id=10, video_token_id=11,
                         image_start_token_id=12, image_end_token_id=13,
                         video_start_token_id=14, video_end_token_id=15)  # fmt: skip
    model = Glm5NextForConditionalGeneration(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype, tower=None)
    top = json.loads((folder / "config.json").read_text())
    t = top["text_config"]
    t["linear_attn_config"] = {
        "head_dim": t.pop("linear_head_dim"), "num_heads": t.pop("linear_num_heads"),
        "short_conv_kernel_size": t.pop("linear_conv_kernel_dim"),
        "gate_lower_bound": t.pop("linear_lower_bound"),
    }  # fmt: skip
    t.update(mla_use_nope=True, first_k_dense_replace=1)
    (folder / "config.json").write_text(json.dumps(top, indent=2))
    _glm4v_processor(folder)
    # the image budget the reference writes as pixel bounds: 4 to 16 merged tokens
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre.update(min_image_tokens=4, max_image_tokens=16)
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    return folder


BUILDERS["glm5next"] = glm5next


# --------------------------------------------------------------------------- Ministral 3


def ministral3_vlm(folder: Path, *, dtype: str = "bfloat16", seed: int = 64) -> Path:
    """Ministral 3 (Mistral3ForConditionalGeneration over a ``ministral3`` text: YaRN and
    Llama 4 attention scaling from the 5th position on), the Mistral 3 builder's Pixtral
    tower and projector."""
    from transformers import Ministral3Config

    from support.hf_models import MINISTRAL3_ROPE_SHORT, ministral3_text

    vocab = train_spm(folder)
    text = Ministral3Config(**ministral3_text(vocab, MINISTRAL3_ROPE_SHORT))
    return _mistral3_over(text, folder, dtype, seed)


BUILDERS["ministral3vl"] = ministral3_vlm


def _gpt2_with_img_break(folder: Path) -> tuple[int, dict]:
    """GPT-2's BPE as a tokenizer.json (the kind the reference's DeepSeek-V2 ``set_vocab``
    reads) with ``[IMG_BREAK]`` added after it (the Pixtral projector's break row); the
    vocabulary size and the tokenizer_config.json to write once the model is saved."""
    from support.hf_models import _bpe_tokenizer

    n = _bpe_tokenizer(folder, "gpt-2")
    tok = {"content": "[IMG_BREAK]", "special": True, "lstrip": False, "rstrip": False,
           "normalized": False, "single_word": False}  # fmt: skip
    tj = json.loads((folder / "tokenizer.json").read_text())
    tj["added_tokens"].append({"id": n, **tok})
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    tc["added_tokens_decoder"][str(n)] = tok
    return n + 1, tc


def mistral4_vlm(
    folder: Path, *, dtype: str = "bfloat16", seed: int = 65, vocab: str = "gpt2"
) -> Path:
    """Mistral3ForConditionalGeneration over a ``mistral4`` text (DeepSeek-V2's MLA, fused
    experts as transformers 5 saves them: ``mlp.experts.gate_up_proj`` / ``down_proj``).
    ``vocab``: ``gpt2`` (a tokenizer.json with ``[IMG_BREAK]``, as the Hub's tekken one is
    read) or ``spm`` (a SentencePiece model, which the reference cannot convert here)."""
    from transformers import Mistral4Config

    if vocab == "spm":
        n_vocab, tc = train_spm(folder), None
    else:
        n_vocab, tc = _gpt2_with_img_break(folder)
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 64, "max_position_embeddings": 256,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
            "llama_4_scaling_beta": 0.1, "partial_rotary_factor": 0.5}  # fmt: skip
    text = Mistral4Config(vocab_size=n_vocab, hidden_size=64, intermediate_size=128,
                          moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
                          num_experts_per_tok=2, kv_lora_rank=32, q_lora_rank=48,
                          qk_rope_head_dim=32, v_head_dim=32, qk_nope_head_dim=32,
                          max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                          pad_token_id=0, rope_parameters=rope)  # fmt: skip
    _mistral3_over(text, folder, dtype, seed)
    if tc is not None:  # over _pixtral_files' one (its [IMG_BREAK] is SentencePiece id 12)
        (folder / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    return folder


BUILDERS["mistral4vl"] = mistral4_vlm
