"""A tiny LFM2-Audio checkpoint (``Lfm2AudioForConditionalGeneration``, the Hub's NeMo
layout) assembled from transformers 5.24 parts (docs/convert-architectures.md, the
projector section).

* The encoder is transformers' ``ParakeetEncoder`` (NeMo's FastConformer: dw-striding
  subsampling by 8, macaron feed-forwards, relative-position attention with the u/v
  biases, GLU + depthwise convolution + batch norm) renamed to NeMo's names under
  ``conformer.`` (``linear_q`` ..., ``pos_bias_u``, ``conv.batch_norm``,
  ``pre_encode.conv.N`` / ``pre_encode.out``); ``scale_input`` off, as mtmd's graph has
  no input scaling.  Width 512: mtmd 0.3.36 builds the position table 512 wide whatever
  the file says.
* The adapter (``audio_adapter.model.{0,1,3}``: LayerNorm, Linear, GELU, Linear) and the
  audio-output embedding (``audio_embedding.*``; mtmd reads its row count as the
  position bound and its width as the embedding width) are seeded tensors: transformers
  has no class for them; the test restates the adapter in torch.
* The text is transformers' ``Lfm2ForCausalLM`` under ``lfm.`` (``model.`` dropped), its
  config under the top-level ``lfm`` key as on the Hub.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Parakeet's names -> NeMo's (inside a block / the subsampling)
_NEMO = (
    ("self_attn.q_proj.", "self_attn.linear_q."),
    ("self_attn.k_proj.", "self_attn.linear_k."),
    ("self_attn.v_proj.", "self_attn.linear_v."),
    ("self_attn.o_proj.", "self_attn.linear_out."),
    ("self_attn.relative_k_proj.", "self_attn.linear_pos."),
    ("self_attn.bias_u", "self_attn.pos_bias_u"),
    ("self_attn.bias_v", "self_attn.pos_bias_v"),
    ("conv.norm.", "conv.batch_norm."),
)

ENCODER = dict(hidden_size=512, num_hidden_layers=7, num_attention_heads=8,
               intermediate_size=256, conv_kernel_size=9, subsampling_factor=8,
               subsampling_conv_channels=16, num_mel_bins=128, scale_input=False,
               dropout=0.0, layerdrop=0.0, activation_dropout=0.0,
               attention_dropout=0.0)  # fmt: skip


def nemo_name(k: str) -> str:
    """A ParakeetEncoder state-dict name as the Hub's LFM2-Audio names it."""
    if k.startswith("subsampling.layers."):
        return "conformer.pre_encode.conv." + k[len("subsampling.layers.") :]
    if k.startswith("subsampling.linear."):
        return "conformer.pre_encode.out." + k[len("subsampling.linear.") :]
    for a, b in _NEMO:
        k = k.replace(a, b)
    return "conformer." + k


def lfm2_audio(folder: Path, *, seed: int = 52, dtype: str = "float32"):
    """The folder, the ParakeetEncoder (eval, float32) and the adapter (torch Sequential)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Lfm2Config, Lfm2ForCausalLM, ParakeetEncoder, ParakeetEncoderConfig

    from support.hf_models import _bpe_tokenizer, _random_init

    folder.mkdir(parents=True, exist_ok=True)
    vocab = _bpe_tokenizer(folder, "gpt-2")
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                conv_L_cache=3, layer_types=["conv", "full_attention", "conv", "full_attention"],
                bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                tie_word_embeddings=True)  # fmt: skip
    lm = Lfm2ForCausalLM(Lfm2Config(**text))
    _random_init(lm, seed)
    enc = ParakeetEncoder(ParakeetEncoderConfig(**ENCODER))
    _random_init(enc, seed + 1)
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, b in enc.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
    enc.eval()
    d, h = ENCODER["hidden_size"], text["hidden_size"]
    adapter = torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, h),
                                  torch.nn.GELU(), torch.nn.Linear(h, h))  # fmt: skip
    _random_init(adapter, seed + 3)
    adapter.eval()
    sd = {}
    for k, v in lm.state_dict().items():
        if k != "lm_head.weight":
            sd["lfm." + k.removeprefix("model.")] = v
    for k, v in enc.state_dict().items():
        sd[nemo_name(k)] = v
    for k, v in adapter.state_dict().items():
        sd["audio_adapter.model." + k] = v
    # the audio-output side the reference keeps (mtmd reads the embedding's shape only)
    sd["audio_embedding.embedding.weight"] = torch.randn(8 * 256, h, generator=g) * 0.05
    sd["audio_embedding.embedding_norm.weight"] = torch.ones(h)
    sd["audio_embedding.to_logits.weight"] = torch.randn(8 * 256, h, generator=g) * 0.05
    sd = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in sd.items()}
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    lfm = dict(lm.config.to_diff_dict(), architectures=["Lfm2ForCausalLM"], model_type="lfm2")
    lfm.update(text)
    nemo = dict(feat_in=128, d_model=d, n_heads=8, n_layers=ENCODER["num_hidden_layers"],
                ff_expansion_factor=ENCODER["intermediate_size"] // d or 1,
                subsampling="dw_striding", subsampling_factor=8,
                subsampling_conv_channels=ENCODER["subsampling_conv_channels"],
                conv_kernel_size=9, self_attention_model="rel_pos", pos_emb_max_len=5000,
                xscaling=False)  # fmt: skip
    cfg = dict(architectures=["Lfm2AudioForConditionalGeneration"], model_type="lfm2_audio",
               lfm=lfm, encoder=nemo, adapter_hidden_dims=[h], codebooks=8,
               audio_vocab_size=256)  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder, enc, adapter
