"""Mistral 4 (Mistral Small 4's text): conversion/mistral3.py's ``Mistral4Model``, a
``DeepseekV2Model`` under GGUF ``mistral4``, chosen by ``Mistral3ForConditionalGeneration``
when its text's ``model_type`` is ``mistral4`` (the reference registers no text-only
class: ``Mistral4ForCausalLM`` is refused there, and here).

DeepSeek-V2's rows and multi-head latent attention (the ``deepseek2`` entry's), with the
experts already stacked as transformers 5 saves them: ``mlp.experts.gate_up_proj``
``[n_expert, 2 * n_ff, n_embd]`` stays fused (``ffn_gate_up_exps``) and
``mlp.experts.down_proj`` is ``ffn_down_exps`` (the reference appends ``.weight`` to both
names and maps them as they are).  Its ``yarn_log_multiplier`` is DeepSeek-V2's,
0.1 x ``mscale_all_dim``.  The reference writes no Llama 4 attention-temperature row for
this class (the config's ``llama_4_scaling_beta``): llama.cpp runs such a file without
the scaling transformers applies past ``original_max_position_embeddings`` positions.

GGUF -> HF gives ``Mistral4ForCausalLM`` (the text alone): ``rope_parameters`` from the
file's YaRN rows, ``mscale`` 1 and ``llama_4_scaling_beta`` 0 (the file runs without the
scaling; transformers' config requires the key).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._common import BLK, LAYER
from ._model import NameRule
from .deepseek import DEEPSEEK2


def is_mistral4(cfg: dict) -> bool:
    """A Mistral 3 checkpoint whose text (merged up) is Mistral 4's."""
    return cfg.get("model_type") == "mistral4"


def _back(cfg: dict, names: set[str]) -> dict:
    """Mistral4Config's fields from a ``mistral4`` file: DeepSeek-V2's, ``head_dim`` the
    whole query head (nope + rope, as the config class sets it), ``rope_parameters`` from
    the YaRN rows with ``mscale_all_dim`` = the log multiplier / 0.1 (DeepSeek-V2's row)
    and ``mscale`` 1, and ``llama_4_scaling_beta`` 0 (see the module docstring)."""
    out = DEEPSEEK2.hf_config(cfg, names)
    qk = cfg["qk_head_dim"]
    rs = dict(cfg.get("rope_scaling") or {})
    rs.pop("type", None)
    rope = {"rope_type": "default", "rope_theta": cfg.get("rope_theta")}
    if rs:
        rope = {**rope, "rope_type": "yarn", **rs, "mscale": 1.0}
        if cfg.get("_yarn_log_multiplier") is not None:
            rope["mscale_all_dim"] = float(
                np.float32(cfg["_yarn_log_multiplier"]) / np.float32(0.1)
            )
    rope["partial_rotary_factor"] = cfg["qk_rope_head_dim"] / qk
    rope["llama_4_scaling_beta"] = 0.0
    return {
        **out,
        "head_dim": qk,
        "rope_parameters": rope,
        "rope_scaling": None,
        "rope_interleave": True,
        "attention_bias": False,
    }


MISTRAL4 = replace(
    DEEPSEEK2,
    hf_archs=("Mistral4ForCausalLM", "Mistral3ForConditionalGeneration"),
    gguf_arch="mistral4",
    names=[
        *DEEPSEEK2.names,
        NameRule(LAYER + "mlp.experts.gate_up_proj", BLK + "ffn_gate_up_exps.weight"),
        NameRule(LAYER + "mlp.experts.down_proj", BLK + "ffn_down_exps.weight"),
    ],
    stacks=[],
    model_types={"Mistral4ForCausalLM": "mistral4"},
    hf_config=_back,
)
