"""T5 / mT5 / UMT5 (encoder-decoder) and the T5 encoder alone (``t5encoder``).

llama.cpp's ``T5Model`` / ``T5EncoderModel`` (conversion/t5.py) write their own rows,
not TextModel's: the context length is ``n_positions`` (512 when absent), the
relative attention bucket count, the decoder's layer count and start token.  Blocks
are ``enc.blk.N`` / ``dec.blk.N``; the relative attention bias is a ``[buckets, heads]``
weight per block that has one (T5: block 0; UMT5: every block).  The token
embedding is stored as ``shared``, ``encoder.embed_tokens`` or ``decoder.embed_tokens``
(several of them in some checkpoints): the first read is converted, the rest skipped.
The vocabulary is a Unigram SentencePiece model (tokenizer route ``t5``).
"""

from __future__ import annotations

from ._model import FILE_TYPE, VT, Arch, NameRule, first, m

_EMBED = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def _block(hf: str, gguf: str, layers: list[tuple[str, str]]) -> list[NameRule]:
    return [NameRule(f"{hf}.block.{{bid}}.{h}.weight", f"{gguf}.blk.{{bid}}.{g}.weight")
            for h, g in layers]  # fmt: skip


def _ffn(hf: str, gguf: str, n: int) -> list[NameRule]:
    """The T5 feed-forward of sub-layer ``n``: ``wi`` (ReLU) or ``wi_0``/``wi_1`` (gated)."""
    pre, blk = f"{hf}.block.{{bid}}.layer.{n}.", f"{gguf}.blk.{{bid}}."
    return [
        NameRule(pre + "DenseReluDense.wi.weight", blk + "ffn_up.weight",
                 unless=blk + "ffn_gate.weight"),
        NameRule(pre + "DenseReluDense.wi_1.weight", blk + "ffn_up.weight"),
        NameRule(pre + "DenseReluDense.wi_0.weight", blk + "ffn_gate.weight"),
        NameRule(pre + "DenseReluDense.wo.weight", blk + "ffn_down.weight"),
        NameRule(pre + "layer_norm.weight", blk + "ffn_norm.weight"),
    ]  # fmt: skip


def _attn(prefix: str, kind: str, out: str) -> list[tuple[str, str]]:
    return [(f"{prefix}.{kind}.{x}", f"{out}_{x}") for x in "qkvo"] + [
        (f"{prefix}.{kind}.relative_attention_bias", f"{out}_rel_b"),
        (f"{prefix}.layer_norm", f"{out}_norm"),
    ]


ENCODER_NAMES = [
    *[NameRule(n, "token_embd.weight") for n in _EMBED],
    *_block("encoder", "enc", _attn("layer.0", "SelfAttention", "attn")),
    *_ffn("encoder", "enc", 1),
    NameRule("encoder.final_layer_norm.weight", "enc.output_norm.weight"),
]
DECODER_NAMES = [
    NameRule("lm_head.weight", "output.weight"),
    *_block("decoder", "dec", _attn("layer.0", "SelfAttention", "attn")),
    *_block("decoder", "dec", _attn("layer.1", "EncDecAttention", "cross_attn")),
    *_ffn("decoder", "dec", 2),
    NameRule("decoder.final_layer_norm.weight", "dec.output_norm.weight"),
]


def _layers(c: dict) -> int:
    return first(c, ("n_layers", "num_hidden_layers", "n_layer", "num_layers"))


def _rows(decoder: bool) -> list:
    rows = [
        m("context_length", "n_positions", value=lambda c: c.get("n_positions") or 512),
        m("embedding_length", "d_model"),
        m("feed_forward_length", "d_ff"),
        m("block_count", "num_layers", value=_layers),
    ]
    if decoder:
        rows.append(m("decoder_block_count", "num_decoder_layers",
                      value=lambda c: c.get("num_decoder_layers") or _layers(c)))  # fmt: skip
    rows += [
        m("attention.head_count", "num_heads"),
        m("attention.key_length", "d_kv"),
        m("attention.value_length", "d_kv"),
        m("attention.layer_norm_epsilon", "layer_norm_epsilon", t=VT.FLOAT32),
        m("attention.relative_buckets_count", "relative_attention_num_buckets"),
        m("attention.layer_norm_rms_epsilon", "layer_norm_epsilon", t=VT.FLOAT32),
    ]
    if decoder:
        rows.append(m("decoder_start_token_id", "decoder_start_token_id"))
    return [*rows, FILE_TYPE]


# T5Config's defaults, which AutoConfig fills in before llama.cpp reads the config
_DEFAULTS = {
    "vocab_size": 32128,
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_heads": 8,
    "relative_attention_num_buckets": 32,
    "layer_norm_epsilon": 1e-6,
    "decoder_start_token_id": 0,
}
_REQUIRED = ("d_model", "num_heads", "num_layers", "d_ff", "vocab_size", "d_kv")


def _hf_config(cfg: dict, names: set[str]) -> dict:
    gated = "enc.blk.0.ffn_gate.weight" in names
    return {
        "feed_forward_proj": "gated-gelu" if gated else "relu",
        "is_encoder_decoder": "dec.blk.0.attn_q.weight" in names,
        # llama.cpp never scales the decoder output by d_model ** -0.5 (T5 v1.1's way);
        # transformers 5 reads tie_word_embeddings = false as exactly that (and ties the
        # head to the embedding whatever the field says)
        "tie_word_embeddings": False,
    }


T5 = Arch(
    hf_archs=(
        "T5ForConditionalGeneration",
        "T5WithLMHeadModel",
        "MT5ForConditionalGeneration",
        "UMT5ForConditionalGeneration",
        "UMT5Model",
    ),
    gguf_arch="t5",
    meta=_rows(decoder=True),
    names=[*ENCODER_NAMES, *DECODER_NAMES],
    aliases=_EMBED,
    defaults=_DEFAULTS,
    required=_REQUIRED,
    tokenizer={"vocab": "t5"},
    model_types={
        "T5ForConditionalGeneration": "t5",
        "MT5ForConditionalGeneration": "mt5",
        "UMT5ForConditionalGeneration": "umt5",
    },
    hf_config=_hf_config,
)

T5ENCODER = Arch(
    hf_archs=("T5EncoderModel",),
    gguf_arch="t5encoder",
    meta=_rows(decoder=False),
    names=ENCODER_NAMES,
    aliases=_EMBED,
    defaults=_DEFAULTS,
    required=_REQUIRED,
    tokenizer={"vocab": "t5"},
    model_types={"T5EncoderModel": "t5"},
    hf_config=_hf_config,
)
