"""A tiny PocketTTS checkpoint in Kyutai's own layout (what the pinned reference's
``PocketTTSModel`` converts): one ``model.safetensors`` (``flow_lm.*``: the backbone with
fused ``in_proj``, the learned BOS rows, the flow net; ``mimi.*``: the SEANet encoder and
decoder, their transformers, the down/upsampling convs), ``tokenizer.model`` (Unigram
SentencePiece), no ``config.json``.

The tensors are seeded random values of the shapes Kyutai's modules give (widths cut
down; the Mimi transformer width 64 and the backbone's 128 are multiples of the 64-wide
heads the reference assumes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.hf_models import train_unigram

#: backbone width, FFN width, layers; latent width; flow net width and depth
DIM, FF, LAYERS, LDIM, FLOW, FLOW_DEPTH = 128, 256, 2, 32, 64, 2
#: Mimi: SEANet filters (the stages double them), transformer width / FFN / layers
FILTERS, MIMI, MIMI_FF, MIMI_LAYERS = 4, 64, 128, 2
#: SEANet ratios in the encoder's order (mtmd hard-codes 4, 5, 6), Mimi's downsampling
RATIOS, DOWN = (4, 5, 6), 16


def _tfm(out: dict, prefix: str, n: int, dim: int, ff: int, scale: bool, rng) -> None:
    for i in range(n):
        p = f"{prefix}.layers.{i}."
        out[p + "self_attn.in_proj.weight"] = rng.standard_normal((3 * dim, dim)) * dim**-0.5
        out[p + "self_attn.out_proj.weight"] = rng.standard_normal((dim, dim)) * dim**-0.5
        for nm in ("norm1", "norm2"):
            out[p + nm + ".weight"] = 1 + 0.1 * rng.standard_normal(dim)
            out[p + nm + ".bias"] = 0.1 * rng.standard_normal(dim)
        out[p + "linear1.weight"] = rng.standard_normal((ff, dim)) * dim**-0.5
        out[p + "linear2.weight"] = rng.standard_normal((dim, ff)) * ff**-0.5
        if scale:
            out[p + "layer_scale_1.scale"] = 0.1 + 0.05 * rng.standard_normal(dim)
            out[p + "layer_scale_2.scale"] = 0.1 + 0.05 * rng.standard_normal(dim)


def _conv(out: dict, name: str, oc: int, ic: int, k: int, rng, bias: bool = True) -> None:
    out[name + ".weight"] = rng.standard_normal((oc, ic, k)) * (ic * k) ** -0.5
    if bias:
        out[name + ".bias"] = 0.1 * rng.standard_normal(oc)


def _linear(out: dict, name: str, o: int, i: int, rng) -> None:
    out[name + ".weight"] = rng.standard_normal((o, i)) * i**-0.5
    out[name + ".bias"] = 0.1 * rng.standard_normal(o)


def pockettts_kyutai(folder: Path, *, seed: int = 81, bos_before_voice: bool = True) -> Path:
    """The tiny checkpoint and its tokenizer in ``folder`` (float32)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    n_sp = train_unigram(folder, vocab_size=96, name="tokenizer.model", ids=(3, 1, 0, 2))
    t: dict[str, np.ndarray] = {}
    f = "flow_lm."
    t[f + "conditioner.embed.weight"] = rng.standard_normal((n_sp + 1, DIM))
    t[f + "bos_emb"] = rng.standard_normal(LDIM)
    if bos_before_voice:
        t[f + "bos_before_voice"] = rng.standard_normal((1, 1, DIM))
    t[f + "emb_mean"] = 0.1 * rng.standard_normal(LDIM)
    t[f + "emb_std"] = 1 + 0.1 * rng.random(LDIM)
    t[f + "input_linear.weight"] = rng.standard_normal((DIM, LDIM)) * LDIM**-0.5
    t[f + "speaker_proj_weight"] = rng.standard_normal((DIM, MIMI)) * MIMI**-0.5
    _tfm(t, f + "transformer", LAYERS, DIM, FF, False, rng)
    t[f + "out_norm.weight"] = 1 + 0.1 * rng.standard_normal(DIM)
    t[f + "out_norm.bias"] = 0.1 * rng.standard_normal(DIM)
    _linear(t, f + "out_eos", 1, DIM, rng)
    n = f + "flow_net."
    _linear(t, n + "input_proj", FLOW, LDIM, rng)
    _linear(t, n + "cond_embed", FLOW, DIM, rng)
    for i in range(2):
        p = f"{n}time_embed.{i}."
        t[p + "freqs"] = np.exp(-np.log(10000.0) * np.arange(FLOW // 2) / (FLOW // 2))
        _linear(t, p + "mlp.0", FLOW, FLOW, rng)
        _linear(t, p + "mlp.2", FLOW, FLOW, rng)
        t[p + "mlp.3.alpha"] = 1 + 0.1 * rng.standard_normal(FLOW)
    for i in range(FLOW_DEPTH):
        p = f"{n}res_blocks.{i}."
        t[p + "in_ln.weight"] = 1 + 0.1 * rng.standard_normal(FLOW)
        t[p + "in_ln.bias"] = 0.1 * rng.standard_normal(FLOW)
        _linear(t, p + "mlp.0", FLOW, FLOW, rng)
        _linear(t, p + "mlp.2", FLOW, FLOW, rng)
        _linear(t, p + "adaLN_modulation.1", 3 * FLOW, FLOW, rng)
    _linear(t, n + "final_layer.linear", LDIM, FLOW, rng)
    _linear(t, n + "final_layer.adaLN_modulation.1", 2 * FLOW, FLOW, rng)
    # Mimi: SEANet encoder (conv in, per stage a residual unit then a strided conv, conv
    # out), its decoder mirrored, the transformers between, the frame-rate resamplers
    m = "mimi."
    _conv(t, m + "encoder.model.0.conv.conv", FILTERS, 1, 7, rng)
    ch = FILTERS
    for i, r in enumerate(RATIOS):
        _conv(t, f"{m}encoder.model.{1 + 3 * i}.block.1.conv.conv", ch // 2, ch, 3, rng)
        _conv(t, f"{m}encoder.model.{1 + 3 * i}.block.3.conv.conv", ch, ch // 2, 1, rng)
        _conv(t, f"{m}encoder.model.{3 + 3 * i}.conv.conv", 2 * ch, ch, 2 * r, rng)
        ch *= 2
    _conv(t, m + "encoder.model.11.conv.conv", MIMI, ch, 3, rng)
    _conv(t, m + "decoder.model.0.conv.conv", ch, MIMI, 7, rng)
    for i, r in enumerate(reversed(RATIOS)):
        w = rng.standard_normal((ch, ch // 2, 2 * r)) * (ch * 2) ** -0.5
        t[f"{m}decoder.model.{2 + 3 * i}.convtr.convtr.weight"] = w
        t[f"{m}decoder.model.{2 + 3 * i}.convtr.convtr.bias"] = 0.1 * rng.standard_normal(ch // 2)
        ch //= 2
        _conv(t, f"{m}decoder.model.{3 + 3 * i}.block.1.conv.conv", ch // 2, ch, 3, rng)
        _conv(t, f"{m}decoder.model.{3 + 3 * i}.block.3.conv.conv", ch, ch // 2, 1, rng)
    _conv(t, m + "decoder.model.11.conv.conv", 1, ch, 3, rng)
    _tfm(t, m + "encoder_transformer.transformer", MIMI_LAYERS, MIMI, MIMI_FF, True, rng)
    _tfm(t, m + "decoder_transformer.transformer", MIMI_LAYERS, MIMI, MIMI_FF, True, rng)
    _conv(t, m + "downsample.conv.conv", MIMI, MIMI, 2 * DOWN, rng, bias=False)
    t[m + "upsample.convtr.convtr.weight"] = rng.standard_normal((MIMI, 1, 2 * DOWN)) * 0.2
    t[m + "quantizer.output_proj.weight"] = rng.standard_normal((MIMI, LDIM, 1)) * LDIM**-0.5
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in t.items()},
              str(folder / "model.safetensors"))  # fmt: skip
    return folder
