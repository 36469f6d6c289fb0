"""CogVLM (``CogVLMForCausalLM``, remote code on the Hub): llama.cpp's ``CogVLMModel``
(conversion/cogvlm.py, GGUF ``cogvlm``) and ``CogVLMVisionModel`` (the projector,
:data:`~.mmproj.COGVLM_VISION`).

The text is a Llama whose every layer has two sets of attention and FFN weights: the
language expert (text tokens: ``attn_qkv``, ``attn_output``, ``ffn_*``) and the visual
expert (image embeddings: ``vis_attn_qkv``, ``vis_attn_output``, ``vis_gate`` /
``vis_up`` / ``vis_down``).  Q, K and V stay fused as stored (no RoPE permutation:
llama.cpp runs this architecture with NeoX RoPE).

Deliberate differences from the pinned converter, which cannot write a file its own
runtime loads (measured; tests/test_convert_cogvlm.py pins both):

* its ``LlamaModel.modify_tensors`` reads ``num_key_value_heads`` without a default and
  the Hub's config (a remote config class: read as written) has none: it stops with a
  ``KeyError``.  Ours converts the config as the Hub writes it (no
  ``head_count_kv`` row: llama.cpp then takes the head count, which the ``[3 hidden,
  hidden]`` QKV of CogVLM's multi-head attention is);
* with that field added, its ``TextModel.filter_tensors`` drops every name holding
  ``vision_`` -- the visual expert -- and llama.cpp refuses the file (``tensor
  'blk.0.vis_attn_qkv.weight' not found``).  Ours keeps them; every other key (but
  ``general.size_label``, which counts them), tensor and data byte is the reference's.

CogVLM2 (grouped-query attention, ``num_multi_query_heads``) is refused by name: llama.cpp's
``cogvlm`` loader and graph are multi-head only.  GGUF -> HF is refused by name: no
transformers class holds this model.
"""

from __future__ import annotations

from dataclasses import replace

from ._common import BASE_NAMES, BLK, FFN_NORM, LAYER
from ._model import NameRule
from .llama import LLAMA

#: the visual expert's HF names are renamed out of the other-modality filter's way
#: (``vision_`` marks a vision tower's tensor everywhere else)
_VISEXP = "visexp_"


def _mha_only(cfg: dict) -> tuple[str, object, object] | None:
    """CogVLM2's grouped-query attention (``num_multi_query_heads`` below the head count)
    is not llama.cpp's ``cogvlm``: refused by name."""
    heads, groups = cfg.get("num_attention_heads"), cfg.get("num_multi_query_heads")
    if groups is not None and groups != heads:
        return "num_multi_query_heads", heads, groups
    return None


COGVLM = replace(
    LLAMA,
    hf_archs=("CogVLMForCausalLM",),
    gguf_arch="cogvlm",
    names=[
        *BASE_NAMES,
        *FFN_NORM,
        NameRule(
            LAYER + "self_attn.language_expert_query_key_value.weight", BLK + "attn_qkv.weight"
        ),
        NameRule(LAYER + "self_attn.language_expert_dense.weight", BLK + "attn_output.weight"),
        NameRule(LAYER + "mlp.language_mlp.gate_proj.weight", BLK + "ffn_gate.weight"),
        NameRule(LAYER + "mlp.language_mlp.up_proj.weight", BLK + "ffn_up.weight"),
        NameRule(LAYER + "mlp.language_mlp.down_proj.weight", BLK + "ffn_down.weight"),
        NameRule(LAYER + f"self_attn.{_VISEXP}query_key_value.weight", BLK + "vis_attn_qkv.weight"),
        NameRule(LAYER + f"self_attn.{_VISEXP}dense.weight", BLK + "vis_attn_output.weight"),
        NameRule(LAYER + f"mlp.{_VISEXP}mlp.gate_proj.weight", BLK + "vis_gate.weight"),
        NameRule(LAYER + f"mlp.{_VISEXP}mlp.up_proj.weight", BLK + "vis_up.weight"),
        NameRule(LAYER + f"mlp.{_VISEXP}mlp.down_proj.weight", BLK + "vis_down.weight"),
    ],
    stacks=[],
    transforms=[],
    # config.json as written (a remote config class: no AutoConfig defaults)
    defaults={},
    renames=(
        *LLAMA.renames,
        (r"\.self_attn\.vision_expert_", f".self_attn.{_VISEXP}"),
        (r"\.mlp\.vision_mlp\.", f".mlp.{_VISEXP}mlp."),
    ),
    check=_mha_only,
    model_types={},
    hf_back=False,
)
