"""GPT-2, StarCoder2, StableLM and Falcon: LayerNorm models with biases.

GPT-2 stores its projections as ``Conv1D`` (``[in, out]``): llama.cpp transposes
them.  Falcon's fused ``query_key_value`` is grouped per KV head (n_head/n_kv
queries, one key, one value): llama.cpp reorders it to all queries, then keys,
then values (``tensor_data_layout = jploski``).
"""

from __future__ import annotations

import numpy as np

from ._common import COMMON, wb_rules
from ._model import FILE_TYPE, VT, Arch, NameRule, Stack, Transform, first, m


def _transpose(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    return np.ascontiguousarray(x.T)


def _t_shape(shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
    return tuple(reversed(shape))


GPT2_CONV1D = Transform(
    "conv1d_transpose", r"\.(c_attn|c_proj|c_fc)\.weight$", _transpose, _transpose, _t_shape,
    inverse_shape=_t_shape,
)  # fmt: skip

GPT2 = Arch(
    hf_archs=("GPT2LMHeadModel",),
    gguf_arch="gpt2",
    meta=[
        m("block_count", "n_layer"),
        # back to n_positions, the field transformers 5 sizes wpe from (n_ctx is older)
        m("context_length", "n_positions", value=lambda c: first(c, ("n_ctx", "n_positions"))),
        m("embedding_length", "n_embd"),
        m("feed_forward_length", "n_inner", value=lambda c: 4 * c["n_embd"]),
        m("attention.head_count", "n_head"),
        m("attention.layer_norm_epsilon", "layer_norm_epsilon", t=VT.FLOAT32),
        FILE_TYPE,
    ],
    names=[
        NameRule("transformer.wte.weight", "token_embd.weight"),
        NameRule("transformer.wpe.weight", "position_embd.weight"),
        NameRule("lm_head.weight", "output.weight"),
        *wb_rules(
            "transformer.h.{bid}.",
            [
                ("ln_1", "attn_norm"),
                ("attn.c_attn", "attn_qkv"),
                ("attn.c_proj", "attn_output"),
                ("ln_2", "ffn_norm"),
                ("mlp.c_fc", "ffn_up"),
                ("mlp.c_proj", "ffn_down"),
            ],
            [("transformer.ln_f", "output_norm")],
        ),
    ],
    transforms=[GPT2_CONV1D],
    skip=(r"\.attn\.bias$", r"\.attn\.masked_bias$"),
    required=("n_embd", "n_head", "n_layer", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"GPT2LMHeadModel": "gpt2"},
    hf_config=lambda cfg, names: {"activation_function": "gelu_new"},
)

_SC2 = "model.layers.{bid}."
# LayerNorm decoders with biases: norms and attention projections, weight and bias each
_LN_ATTN = [
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("post_attention_layernorm", "ffn_norm"),
]
STARCODER2 = Arch(
    hf_archs=("Starcoder2ForCausalLM",),
    gguf_arch="starcoder2",
    meta=list(COMMON),
    names=[
        NameRule("model.embed_tokens.weight", "token_embd.weight"),
        NameRule("lm_head.weight", "output.weight"),
        *wb_rules(
            _SC2,
            [*_LN_ATTN, ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")],
            [("model.norm", "output_norm")],
        ),
    ],
    tokenizer={"vocab": "gpt2"},
    model_types={"Starcoder2ForCausalLM": "starcoder2"},
    hf_config=lambda cfg, names: {
        "hidden_act": "gelu_pytorch_tanh",
        "use_bias": "blk.0.attn_q.bias" in names,
    },
)


def _rope_dims(cfg: dict) -> int:
    from ._model import rope_parameters

    f = rope_parameters(cfg)["partial_rotary_factor"]
    return int(f * (cfg["hidden_size"] // cfg["num_attention_heads"]))


STABLELM = Arch(
    hf_archs=("StableLmForCausalLM", "StableLMEpochForCausalLM"),
    gguf_arch="stablelm",
    meta=[
        m("context_length", "max_position_embeddings"),
        m("embedding_length", "hidden_size"),
        m("block_count", "num_hidden_layers"),
        m("feed_forward_length", "intermediate_size"),
        m("rope.dimension_count", "rope_dimension_count", value=_rope_dims),
        m("attention.head_count", "num_attention_heads"),
        m("attention.head_count_kv", "num_key_value_heads"),
        m(
            "use_parallel_residual",
            "use_parallel_residual",
            t=VT.BOOL,
            value=lambda c: c.get("use_parallel_residual", True),
        ),
        m("attention.layer_norm_epsilon", "layer_norm_eps", "norm_eps", t=VT.FLOAT32),
        FILE_TYPE,
    ],
    names=[
        NameRule("model.embed_tokens.weight", "token_embd.weight"),
        NameRule("lm_head.weight", "output.weight"),
        NameRule(_SC2 + "mlp.gate_proj.weight", "blk.{bid}.ffn_gate.weight"),
        NameRule(_SC2 + "mlp.up_proj.weight", "blk.{bid}.ffn_up.weight"),
        NameRule(_SC2 + "mlp.down_proj.weight", "blk.{bid}.ffn_down.weight"),
        *wb_rules(
            _SC2,
            _LN_ATTN,
            [("model.norm", "output_norm")],
        ),
    ],
    stacks=[
        Stack(
            _SC2 + "self_attn.q_layernorm.norms.{xid}.weight",
            "blk.{bid}.attn_q_norm.weight",
            lambda c: c["num_attention_heads"],
            "q_norm",
        ),
        Stack(
            _SC2 + "self_attn.k_layernorm.norms.{xid}.weight",
            "blk.{bid}.attn_k_norm.weight",
            lambda c: c["num_key_value_heads"],
            "k_norm",
        ),
    ],
    tokenizer={"vocab": "gpt2"},
    model_types={"StableLmForCausalLM": "stablelm"},
    hf_config=lambda cfg, names: {
        "hidden_act": "silu",
        "use_qkv_bias": "blk.0.attn_q.bias" in names,
        "qk_layernorm": "blk.0.attn_q_norm.weight" in names,
        "partial_rotary_factor": cfg["rope_dimension_count"]
        / (cfg["hidden_size"] // cfg["num_attention_heads"]),
    },
)


def _falcon_heads(cfg: dict) -> tuple[int, int, int]:
    n_head = first(cfg, ("num_attention_heads", "n_head"))
    n_kv = first(cfg, ("num_kv_heads", "n_head_kv")) or 1
    return n_head, n_kv, cfg["hidden_size"] // n_head


def _falcon_qkv(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    n_head, n_kv, hd = _falcon_heads(cfg)
    g = x.reshape(n_kv, n_head // n_kv + 2, hd, *x.shape[1:])
    q = g[:, :-2].reshape(n_head * hd, *x.shape[1:])
    k = g[:, -2].reshape(n_kv * hd, *x.shape[1:])
    v = g[:, -1].reshape(n_kv * hd, *x.shape[1:])
    return np.concatenate([q, k, v]).reshape(x.shape)


def _falcon_qkv_inverse(x: np.ndarray, cfg: dict, ctx: dict) -> np.ndarray:
    n_head, n_kv, hd = _falcon_heads(cfg)
    rest = x.shape[1:]
    q = x[: n_head * hd].reshape(n_kv, n_head // n_kv, hd, *rest)
    k = x[n_head * hd : (n_head + n_kv) * hd].reshape(n_kv, 1, hd, *rest)
    v = x[(n_head + n_kv) * hd :].reshape(n_kv, 1, hd, *rest)
    return np.concatenate([q, k, v], axis=1).reshape(x.shape)


FALCON_QKV = Transform(
    "falcon_qkv_jploski", r"query_key_value\.weight$", _falcon_qkv, _falcon_qkv_inverse
)

FALCON = Arch(
    hf_archs=("FalconForCausalLM", "RWForCausalLM"),
    gguf_arch="falcon",
    meta=[
        m("context_length", "max_position_embeddings", value=lambda c: 2048),
        m("tensor_data_layout", "tensor_data_layout", t=VT.STRING, value=lambda c: "jploski"),
        m("embedding_length", "hidden_size"),
        m("feed_forward_length", "ffn_hidden_size", value=lambda c: 4 * c["hidden_size"]),
        m("block_count", "num_hidden_layers", "n_layer"),
        m("attention.head_count", "num_attention_heads", "n_head"),
        m(
            "attention.head_count_kv",
            "num_kv_heads",
            "n_head_kv",
            value=lambda c: first(c, ("num_kv_heads", "n_head_kv")) or 1,
        ),
        m("attention.layer_norm_epsilon", "layer_norm_epsilon", t=VT.FLOAT32),
        FILE_TYPE,
    ],
    names=[
        NameRule("transformer.word_embeddings.weight", "token_embd.weight"),
        NameRule("lm_head.weight", "output.weight"),
        NameRule(
            "transformer.h.{bid}.self_attention.query_key_value.weight", "blk.{bid}.attn_qkv.weight"
        ),
        NameRule("transformer.h.{bid}.self_attention.dense.weight", "blk.{bid}.attn_output.weight"),
        NameRule("transformer.h.{bid}.mlp.dense_h_to_4h.weight", "blk.{bid}.ffn_up.weight"),
        NameRule("transformer.h.{bid}.mlp.dense_4h_to_h.weight", "blk.{bid}.ffn_down.weight"),
        *wb_rules(
            "transformer.h.{bid}.",
            [("input_layernorm", "attn_norm"), ("ln_attn", "attn_norm"), ("ln_mlp", "attn_norm_2")],
            [("transformer.ln_f", "output_norm")],
        ),
    ],
    transforms=[FALCON_QKV],
    required=("hidden_size", "num_hidden_layers", "vocab_size"),
    tokenizer={"vocab": "gpt2"},
    model_types={"FalconForCausalLM": "falcon"},
    hf_config=lambda cfg, names: {
        "new_decoder_architecture": "blk.0.attn_norm_2.weight" in names,
        "multi_query": cfg.get("num_kv_heads", 1) == 1,
        "parallel_attn": True,
        "bias": False,
        "alibi": False,
    },
)
