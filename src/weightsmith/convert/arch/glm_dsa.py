"""GLM-5 (``GlmMoeDsaForCausalLM``): conversion/glm.py ``GlmMoeDsaModel`` on DeepSeek-V2's
converter (GGUF ``glm-dsa``); also the text a GLM-5.2-Vision pairs with.

DeepSeek-V3's model (:data:`~weightsmith.convert.arch.deepseek.DEEPSEEK2`: MLA written as
MQA with ``kv_b_proj`` split into ``attn_k_b`` / ``attn_v_b``, sigmoid-routed experts
stacked per layer, leading dense layers) plus a DSA indexer in every attention layer
(``self_attn.indexer.wq_b`` / ``wk`` / ``k_norm`` (weight and bias) / ``weights_proj`` ->
``blk.N.indexer.attn_q_b`` / ``attn_k`` / ``k_norm`` / ``proj``) and GLM's vocabulary
(the ``glm`` route).  Its rows are DeepSeek-V2's, with ``rope.dimension_count`` written
again as ``qk_rope_head_dim * partial_rotary_factor`` (the writer overwrites the key in
place), then ``nextn_predict_layers`` when the config names MTP blocks, the indexer's
head count, key length and top-k, and ``indexer.types`` (true where a layer's indexer
type is ``full``) when the config lists them.

MTP blocks appended past ``num_hidden_layers`` (``num_nextn_predict_layers`` of them) count
in ``block_count`` and are written as ``blk.N.*`` with their ``nextn.*`` tensors, as for
GLM-4.5; a layer past those is refused as unmapped, as the reference refuses it; GGUF -> HF gives
``num_hidden_layers`` back as ``block_count - nextn_predict_layers`` and the indexer
types as strings.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ._common import DSA_INDEXER_NAMES, LAYER, NEXTN_NAMES, past_blocks, replace_rows
from ._model import APPENDED_MTP, VT, full_rope, m
from .deepseek import _ROWS as _DEEPSEEK2_ROWS
from .deepseek import DEEPSEEK2

_ATT = LAYER + "self_attn."


def _n_nextn(cfg: dict) -> int:
    return cfg.get("num_nextn_predict_layers") or 0


def _in_blocks(name: str, cfg: dict) -> str:
    """A layer past the trunk and its counted MTP blocks is refused (the reference cannot
    map it)."""
    return past_blocks(name, cfg["num_hidden_layers"] + _n_nextn(cfg))


def _rope_dim(cfg: dict) -> int:
    return int(cfg["qk_rope_head_dim"] * full_rope(cfg).get("partial_rotary_factor", 1.0))


_ROWS = [
    *replace_rows(
        _DEEPSEEK2_ROWS,
        block_count=m(
            "block_count",
            "num_hidden_layers",
            value=lambda c: c["num_hidden_layers"] + _n_nextn(c),
        ),
        rope__dimension_count=m("rope.dimension_count", "qk_rope_head_dim", value=_rope_dim),
    ),
    m("nextn_predict_layers", "num_nextn_predict_layers"),
    m("attention.indexer.head_count", "index_n_heads"),
    m("attention.indexer.key_length", "index_head_dim"),
    m("attention.indexer.top_k", "index_topk"),
    m(
        "attention.indexer.types",
        "indexer_types",
        t=VT.BOOL,
        value=lambda c: (
            None if c.get("indexer_types") is None else [t == "full" for t in c["indexer_types"]]
        ),
        inverse=lambda flags: ["full" if f else "shared" for f in flags],
    ),
]


def _hf_config(cfg: dict, names: set[str]) -> dict[str, Any]:
    out = DEEPSEEK2.hf_config(cfg, names)
    out["num_hidden_layers"] = cfg["num_hidden_layers"] - _n_nextn(cfg)
    return out


GLM_DSA = replace(
    DEEPSEEK2,
    hf_archs=("GlmMoeDsaForCausalLM",),
    gguf_arch="glm-dsa",
    meta=_ROWS,
    names=[*DEEPSEEK2.names, *DSA_INDEXER_NAMES, *NEXTN_NAMES],
    required=(*DEEPSEEK2.required, "index_n_heads", "index_head_dim", "index_topk"),
    tokenizer={"vocab": "glm"},
    model_types={"GlmMoeDsaForCausalLM": "glm_moe_dsa"},
    hf_config=_hf_config,
    rename=(_in_blocks, lambda name, cfg: name),
    mtp=APPENDED_MTP,
)


# DeepseekV32Model: DeepSeek-V2's rows, the MTP block count and the three indexer rows (no
# rope rewrite, no indexer types)
_V32_ROWS = [
    *replace_rows(
        _DEEPSEEK2_ROWS,
        block_count=m(
            "block_count",
            "num_hidden_layers",
            value=lambda c: c["num_hidden_layers"] + _n_nextn(c),
        ),
    ),
    m("nextn_predict_layers", "num_nextn_predict_layers"),
    m("attention.indexer.head_count", "index_n_heads"),
    m("attention.indexer.key_length", "index_head_dim"),
    m("attention.indexer.top_k", "index_topk"),
]

DEEPSEEK32 = replace(
    GLM_DSA,
    hf_archs=("DeepseekV32ForCausalLM",),
    gguf_arch="deepseek32",
    meta=_V32_ROWS,
    tokenizer=DEEPSEEK2.tokenizer,
    model_types={"DeepseekV32ForCausalLM": "deepseek_v32"},
)
