"""The architecture registry of the HF <-> GGUF converters.

One :class:`Arch` entry per GGUF architecture says everything the converters need,
in both directions (the data model is :mod:`._model`):

* ``hf_archs`` -- the ``config.json`` ``architectures[0]`` values it converts;
* ``gguf_arch`` -- the ``general.architecture`` value (``llama``, ``qwen2moe``, ...);
* ``meta`` -- the ``<arch>.*`` hyperparameters as :class:`MetaKey` rows, in the order
  llama.cpp's ``convert_hf_to_gguf.py`` writes them, ``general.file_type`` at its
  place (:data:`FILE_TYPE`); ``defaults`` are the config class defaults transformers'
  ``AutoConfig`` fills in before llama.cpp reads the config;
* tensor ops, each read forward (HF -> GGUF) and inverse: ``names``
  (:class:`NameRule`), ``stacks`` (:class:`Stack`, per-expert tensors into one 3-D
  tensor), ``splits`` (:class:`Split`, one fused tensor into several), ``transforms``
  (:class:`Transform`, value functions), ``packed`` (:class:`Packed`, already-quantized
  data passed through), ``skip`` (not written), ``extra`` (tensors computed from the
  config, written first); ``early_meta`` rows go before ``general.type``; ``renames``
  (the reference class's own source renames), ``rename`` (a rename that depends on the
  config, with its inverse: Qwen's MTP block numbered after the trunk), ``aliases`` (one
  tensor under several names: the first read wins); ``from_tensors`` adds config fields
  read off the checkpoint's tensor names (Qwen3-Next's MTP layer count);
  ``suppress_tokens`` puts ``generation_config.json``'s ``suppress_tokens`` into the
  config (Gemma 4 Unified writes them as ``tokenizer.ggml.suppress_tokens``, a
  :class:`MetaKey` with ``absolute`` set: written under its key as it is);
  ``rerank`` marks the entries whose folders the reference may convert as a Qwen3
  reranker (the converter then puts the ``yes`` / ``no`` token ids into the config as
  ``_rerank``, and :data:`VARIANTS` picks the reranker entry);
  ``drop_if_same`` drops a tensor whose values repeat another's (Mamba's ``lm_head``
  stored as a copy of the embedding: the one rule that reads data before the plan);
  ``fixed`` config values are the only ones the reference converts (it asserts them:
  Gemma 3n's 4 AltUp streams), anything else is refused before any output; ``check``
  is a function of the config naming ``(field, expected, found)`` for a config the
  reference asserts against (Step 3.5's RoPE widths), refused the same way;
* ``mtp`` -- the multi-token-prediction blocks (:class:`Mtp`: which source tensors they
  are, the config without them, the tensors a draft shares) for ``hf_to_gguf(mtp="drop" |
  "only")`` (the reference's ``--no-mtp`` / ``--mtp``); None refuses both by name;
* ``pooling`` -- the sentence-transformers pooling type goes into the config
  (:mod:`weightsmith.convert._pooling`) for the encoders' ``pooling_type`` row;
  ``dense`` -- GGUF names of sentence-transformers ``Dense`` module weights, read from
  (and written back to) the module folders;
* ``tokenizer`` -- the vocabulary route of :mod:`weightsmith.convert.tokenizer`
  (``{"vocab": "llama" | "gpt2" | "spm_or_gpt2" | "gemma" | "gemma4" | "phi3" | "bert" | "t5" |
  "glm" | "glm4" | "roberta" | ...}``);
* ``config_from_shapes`` -- a :class:`ShapeConfig` for a checkpoint that ships no
  ``config.json`` (PocketTTS, Kyutai's layout): the converter's config reader asks the
  registry (:func:`by_shapes`, never a named family) which entry claims the tensor
  shapes of the folder's one ``model*.safetensors`` file and takes its config from them,
  as the reference's hparams loaders do; the projector reads the same config;
* where a multimodal config keeps its text config (``llm_config``, ``talker_config``,
  ...) and how the reader merges it up is not an entry's field but its own registry,
  :data:`NESTED_TEXT` (:mod:`._text_config`: one row per layout, which the projector's
  vision view reads too);
* ``model_types`` / ``hf_config`` -- what GGUF -> HF adds to ``config.json``;
  ``hf_wrap`` reshapes the finished ``config.json`` (a Gemma 4 assistant's text fields
  go under ``text_config``).

:meth:`Arch.plan` gives the output tensors in llama.cpp's order;
:meth:`Arch.inverse_plan` the HF tensors of a GGUF file.  Adding an architecture
means adding one entry to :data:`ENTRIES`; the values reproduce llama.cpp's model
classes (``conversion/*.py``) and the tests compare against it byte for byte.
:data:`MISTRAL_NATIVE`, :data:`MISTRAL3_NATIVE` (with Llama 4 scaling: ``mistral3``) and
:data:`MISTRAL_MOE_NATIVE` (with experts: ``deepseek2``) are the entries outside
:data:`ENTRIES`: Mistral's original layout (``params.json`` as the config, Mistral's
tensor names), which no HF class names.

One HF class may need another entry by its config (:data:`VARIANTS`: nomic-bert with
experts), and one GGUF architecture may come from several entries (:data:`GGUF_VARIANTS`:
``granitehybrid`` from Granite 4.0-H dense, with experts, and Bamba), told apart by the
file's metadata in the GGUF -> HF direction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._common import (
    COMMON,
    GEMMA_NORM,
    PERMUTE_K,
    PERMUTE_Q,
    llama3_rope_freqs,
    permute_rope,
    unpermute_rope,
)
from ._model import (
    FILE_TYPE,
    SLOT,
    Arch,
    Compose,
    HfTensor,
    MetaKey,
    Mtp,
    NameRule,
    OutTensor,
    Packed,
    Piece,
    PlanError,
    ShapeConfig,
    Split,
    Stack,
    Transform,
    first,
    head_counts,
    head_dim,
    join,
    layer_of,
    rope_parameters,
)
from ._text_config import NESTED_TEXT, NestedText, text_merged
from .bailingmoe3 import BAILINGMOE3, BAILINGMOE3_VL
from .bert import (
    BERT,
    DISTILBERT,
    EUROBERT,
    MODERNBERT,
    NOMIC_BERT,
    NOMIC_BERT_MOE,
    ROBERTA,
    XLMROBERTA,
)
from .cogvlm import COGVLM
from .deepseek import DEEPSEEK2, DEEPSEEK2OCR, is_ocr
from .deepseek4 import DEEPSEEK4
from .dots3 import DOTS3NOTE
from .embeddinggemma import GEMMA_EMBEDDING
from .ernie import ERNIE4_5, ERNIE4_5_MOE, PADDLEOCR
from .exaone import EXAONE4, EXAONE4_5_TEXT, EXAONE_MOE
from .falcon_h1 import FALCON_H1
from .gemma import GEMMA2, GEMMA3
from .gemma3n import GEMMA3N
from .gemma4 import GEMMA4, GEMMA4_ASSISTANT, GEMMA4_UNIFIED
from .glm import (
    GLM4,
    GLM4MOE,
    GLM4V_TEXT,
    GLM4VMOE_TEXT,
    GLMOCR_TEXT,
    has_mtp_sections,
    has_sections,
)
from .glm5next import GLM5NEXT_TEXT
from .glm_dsa import DEEPSEEK32, GLM_DSA
from .gpt import FALCON, GPT2, STABLELM, STARCODER2
from .gptoss import GPT_OSS
from .granite import GRANITE, GRANITE_SWA, GRANITEMOE, GRANITEMOE_SWA, is_granitemoe_swa_file
from .hunyuan import HUNYUAN_DENSE, HUNYUAN_VL
from .jamba import JAMBA
from .kimi_linear import KIMI_LINEAR
from .lfm2 import (
    LFM2,
    LFM2_BIDIRECTIONAL,
    LFM2_COLBERT,
    LFM2MOE,
    is_bidirectional_file,
    is_colbert_file,
)
from .llama import (
    GLMASR_TEXT,
    JANUS,
    LLAMA,
    LLAMA_EMBED,
    MINISTRAL3,
    MISTRAL3,
    MISTRAL3_NATIVE,
    MISTRAL_NATIVE,
    SARASHINA2_TEXT,
    SMOLLM3,
    is_glmasr,
    is_ministral3_file,
)
from .llama4 import LLAMA4
from .mamba import (
    BAMBA,
    GRANITEHYBRID,
    GRANITEHYBRID_AS_GRANITE,
    GRANITEHYBRID_AS_GRANITEMOE,
    GRANITEHYBRID_MOE,
    MAMBA,
    MAMBA2,
    attention_only,
    hybrid_has_experts,
    is_bamba,
    is_granitehybrid_file,
)
from .mimo import MIMO2
from .minicpmv import MINICPMV46_TEXT
from .minimax import MINIMAX_M3
from .minimax01 import MINIMAX01
from .mistral4 import MISTRAL4, is_mistral4
from .mistral_moe import MISTRAL_MOE_BACK, MISTRAL_MOE_NATIVE, is_mistral_moe_file
from .muse_glimmer import MUSE_GLIMMER
from .nemotron import NEMOTRON_H, NEMOTRON_H_MOE, NEMOTRON_H_PUZZLE, has_experts, is_puzzle_file
from .olmo import OLMO2
from .phi import PHI3
from .pockettts import POCKETTTS
from .qwen import (
    QWEN2,
    QWEN2_EMBED,
    QWEN2MOE,
    QWEN3,
    QWEN3_EMBED,
    QWEN3_RERANK,
    QWEN3_RERANK_TIED,
    QWEN3_SEQCLS,
    QWEN3MOE,
    has_pooling,
    is_rerank,
    is_rerank_file,
    is_tied_rerank,
)
from .qwen3tts import QWEN3TTS
from .qwen4exp import QWEN4EXP
from .qwen35 import QWEN3NEXT, QWEN35, QWEN35MOE
from .qwenvl import (
    QWEN2VL,
    QWEN3ASR,
    QWEN3OMNIMOE,
    QWEN3VL,
    QWEN3VL_RERANK,
    QWEN3VL_RERANK_TIED,
    QWEN3VLMOE,
)
from .step35 import STEP35
from .t5 import T5, T5ENCODER
from .youtu import YOUTU, is_dense

__all__ = [
    "COMMON",
    "ENTRIES",
    "FILE_TYPE",
    "GEMMA_NORM",
    "GGUF_VARIANTS",
    "MISTRAL3_NATIVE",
    "MISTRAL_MOE_NATIVE",
    "MISTRAL_NATIVE",
    "NESTED_TEXT",
    "PERMUTE_K",
    "PERMUTE_Q",
    "REGISTRY",
    "SLOT",
    "VARIANTS",
    "Arch",
    "Compose",
    "HfTensor",
    "MetaKey",
    "Mtp",
    "NameRule",
    "NestedText",
    "OutTensor",
    "Packed",
    "Piece",
    "PlanError",
    "ShapeConfig",
    "Split",
    "Stack",
    "Transform",
    "by_gguf_arch",
    "by_shapes",
    "first",
    "head_counts",
    "head_dim",
    "join",
    "layer_of",
    "llama3_rope_freqs",
    "lookup",
    "permute_rope",
    "rope_parameters",
    "supported",
    "text_merged",
    "unpermute_rope",
]

#: every entry, one per GGUF architecture
ENTRIES: tuple[Arch, ...] = (
    LLAMA,
    QWEN2,
    QWEN3,
    QWEN2MOE,
    QWEN3MOE,
    GEMMA2,
    GEMMA3,
    SMOLLM3,
    GRANITE,
    GRANITEMOE,
    OLMO2,
    STARCODER2,
    STABLELM,
    GPT2,
    FALCON,
    DEEPSEEK2,
    PHI3,
    GPT_OSS,
    LFM2,
    LFM2MOE,
    MAMBA,
    MAMBA2,
    GRANITEHYBRID,
    NEMOTRON_H,
    QWEN2VL,
    QWEN3VL,
    QWEN3VLMOE,
    MISTRAL3,
    GLM4MOE,
    LLAMA4,
    GEMMA4,
    GEMMA4_UNIFIED,
    GEMMA4_ASSISTANT,
    QWEN35,
    QWEN35MOE,
    QWEN3NEXT,
    JAMBA,
    # encoders (embedding models) and encoder-decoders
    BERT,
    XLMROBERTA,
    ROBERTA,
    DISTILBERT,
    EUROBERT,
    MODERNBERT,
    NOMIC_BERT,
    T5,
    T5ENCODER,
    GEMMA_EMBEDDING,
    NOMIC_BERT_MOE,
    NEMOTRON_H_MOE,
    # more layouts of GraniteHybridModel's granitehybrid files
    GRANITEHYBRID_MOE,
    BAMBA,
    GRANITEHYBRID_AS_GRANITE,
    GRANITEHYBRID_AS_GRANITEMOE,
    # hybrids added with issue 15 section 4
    FALCON_H1,
    # Gemma 3n text (AltUp, LAuReL, per-layer embeddings)
    GEMMA3N,
    # the text half of VLMs whose text file is another class's architecture
    JANUS,
)
# the text of the OCR VLMs (issue 15 section 3)
ENTRIES += (ERNIE4_5, PADDLEOCR, ERNIE4_5_MOE)
# GLM-4-0414 dense; GLM-4V's, GLM-4.5V's and GLM-OCR's text halves
ENTRIES += (GLM4, GLM4V_TEXT, GLM4VMOE_TEXT, GLMOCR_TEXT)
# HunYuan dense, the text half of HunyuanVL (issue 15 section 3)
ENTRIES += (HUNYUAN_DENSE, HUNYUAN_VL)
# the Qwen3-Omni thinker's text (qwen3vlmoe, as Qwen3-VL-MoE's; issue 15 section 3)
ENTRIES += (QWEN3OMNIMOE,)
# Qwen3-ASR's text (qwen3vl, as Qwen3-VL's; issue 15 section 3)
ENTRIES += (QWEN3ASR,)
# DeepSeek-OCR's text (DeepSeek-V2 without MLA; issue 15 section 3)
ENTRIES += (DEEPSEEK2OCR,)
# Muse Glimmer's text (issue 15 section 3)
ENTRIES += (MUSE_GLIMMER,)
# DeepSeek-V4 in DeepSeek's own layout (MXFP4 experts, FP8 + E8M0 weights, hyper-connections)
ENTRIES += (DEEPSEEK4,)
# MiniMax-M3 (the text of MiniMax-M3 VL; issue 15 section 3)
ENTRIES += (MINIMAX_M3,)
# EXAONE 4.0 and EXAONE 4.5's text half (exaone4)
ENTRIES += (EXAONE4, EXAONE4_5_TEXT)
# K-EXAONE (exaone-moe)
ENTRIES += (EXAONE_MOE,)
# MiniCPM-V 4.6's text (qwen35 without its MTP tensors; issue 15 section 3)
ENTRIES += (MINICPMV46_TEXT,)
# Youtu-LLM and Youtu-VL's text (deepseek2, dense MLA; issue 15 section 3)
ENTRIES += (YOUTU,)
# Qwen4-Exp (Qwen3.5-MoE + hyper-connections + QSA indexer; issue 15 section 3)
ENTRIES += (QWEN4EXP,)
# GLM-5-Next's text half (KDA + nope-only MLA with a DSA indexer, mHC, MoE)
ENTRIES += (GLM5NEXT_TEXT,)
# Dots3 Note's text (DeepSeek-V2 MLA with sliding layers, a DSA indexer, head gates)
ENTRIES += (DOTS3NOTE,)
# Step 3.5 (the text of Step3-VL / Step-3.7 in the Hub's Step3p5ForCausalLM layout)
ENTRIES += (STEP35,)
# Ministral3ForCausalLM (mistral3 with the YaRN log-multiplier and Llama 4 scaling rows)
ENTRIES += (MINISTRAL3,)
# Sarashina2-VL's text: Llama under llm.
ENTRIES += (SARASHINA2_TEXT,)
# BailingMoE V3 (Ling-3.0: KDA + head-gated MLA, MoE; the text of Ling-3.0 VL)
ENTRIES += (BAILINGMOE3,)
# Ling-3.0 VL's text (bailingmoe3 with M-RoPE sections; issue 15 section 3)
ENTRIES += (BAILINGMOE3_VL,)
# Mistral 4 (Mistral Small 4's text: DeepSeek-V2's MLA, fused experts; GGUF mistral4)
ENTRIES += (MISTRAL4,)
# GLM-5 (DeepSeek-V3's MLA + MoE with a DSA indexer, GLM's vocabulary; GGUF glm-dsa)
ENTRIES += (GLM_DSA,)
# DeepSeek-V3.2 (DeepSeek-V3 with a DSA indexer; GGUF deepseek32)
ENTRIES += (DEEPSEEK32,)
# PocketTTS's backbone (Kyutai's layout: no config.json, the config from tensor shapes)
ENTRIES += (POCKETTTS,)
# Granite SWA (dense and MoE): sliding-window layers with attention sinks (granite_swa)
ENTRIES += (GRANITE_SWA, GRANITEMOE_SWA)
# NemotronHPuzzle: Nemotron-H MoE with per-block MoE shapes (block_configs)
ENTRIES += (NEMOTRON_H_PUZZLE,)
# Kimi Linear (KDA + NoPE MLA, MoE; issue 15 section 4)
ENTRIES += (KIMI_LINEAR,)
# MiniMax-Text-01 / M1 (lightning attention hybrid, MoE; issue 15 section 4)
ENTRIES += (MINIMAX01,)
# LFM2-ColBERT (Lfm2Model + PyLate Dense) and LFM2.5-Embedding (bidirectional LFM2)
ENTRIES += (LFM2_COLBERT, LFM2_BIDIRECTIONAL)
# llama-embed-nemotron (LlamaBidirectionalModel, GGUF llama-embed)
ENTRIES += (LLAMA_EMBED,)
# the bare Qwen2Model / Qwen3Model: gte-Qwen2, Qwen3-Embedding (issue 15 section 1)
ENTRIES += (QWEN2_EMBED, QWEN3_EMBED)
# CogVLM's text (a Llama with a visual expert per layer; issue 15 section 3)
ENTRIES += (COGVLM,)
# MiMo-V2-Flash's text (sliding layers with sinks, sigmoid-routed experts, 3 MTP blocks)
ENTRIES += (MIMO2,)
# Qwen3-TTS's talker (remote code: a hand-built checkpoint in the tests; issue 15 section 3)
ENTRIES += (QWEN3TTS,)

#: HF classes whose config picks another entry than :data:`REGISTRY`'s: ``(test of the
#: config.json, entry)`` (nomic-bert with experts is llama.cpp's ``nomic-bert-moe``)
VARIANTS: dict[str, list[tuple[Callable[[dict], bool], Arch]]] = {
    "NomicBertModel": [(lambda cfg: bool(cfg.get("moe_every_n_layers")), NOMIC_BERT_MOE)],
    "NemotronHForCausalLM": [(has_experts, NEMOTRON_H_MOE)],
    # Granite 4.0-H with experts (the reference reads config.json as written: no
    # AutoConfig default of 8 experts); without SSM layers (granite-4.0-micro) a plain
    # Granite file, granitemoe when the config names experts per token
    "GraniteMoeHybridForCausalLM": [
        (
            lambda cfg: (
                attention_only(cfg)
                and bool(cfg.get("num_experts_per_tok"))
                and bool(cfg.get("num_local_experts"))
            ),
            GRANITEHYBRID_AS_GRANITEMOE,
        ),
        (attention_only, GRANITEHYBRID_AS_GRANITE),
        (lambda cfg: bool(cfg.get("num_local_experts")), GRANITEHYBRID_MOE),
    ],
}
# DeepSeek-OCR: language_config names DeepSeek-V2 (or V3), the top-level class the OCR model
VARIANTS["DeepseekV2ForCausalLM"] = [(is_ocr, DEEPSEEK2OCR)]
VARIANTS["DeepseekV3ForCausalLM"] = [(is_ocr, DEEPSEEK2OCR)]
# ... and its own text classes where language_config names none (a variant entry is
# not in REGISTRY: these are found here)
VARIANTS["DeepseekOCRForCausalLM"] = [(lambda cfg: True, DEEPSEEK2OCR)]
VARIANTS["UnlimitedOCRForCausalLM"] = [(lambda cfg: True, DEEPSEEK2OCR)]
# Mistral 3 over a mistral4 text: the reference's Mistral4Model (a DeepseekV2Model)
VARIANTS["Mistral3ForConditionalGeneration"] = [(is_mistral4, MISTRAL4)]
# GLM-ASR (custom-code layout): lm_config names Llama, the vocabulary is GLM Edge's
VARIANTS["LlamaForCausalLM"] = [(is_glmasr, GLMASR_TEXT)]
# NemotronHPuzzle (no HF class of its own: GGUF -> HF gives NemotronHForCausalLM)
VARIANTS["NemotronHPuzzleForCausalLM"] = [(lambda cfg: True, NEMOTRON_H_PUZZLE)]
# Qwen3 rerankers: a folder the reference calls one (``_rerank``, set by the converter
# from the folder: README heading, path or class) gets RANK pooling and cls.output
_QWEN3_RERANKERS = [(is_tied_rerank, QWEN3_RERANK_TIED), (is_rerank, QWEN3_RERANK)]
VARIANTS["Qwen3ForCausalLM"] = _QWEN3_RERANKERS
VARIANTS["Qwen3Model"] = _QWEN3_RERANKERS
# ... and Qwen3-VL-Reranker (the reference's Qwen3-VL text class is its Qwen3 class)
VARIANTS["Qwen3VLForConditionalGeneration"] = [
    (is_tied_rerank, QWEN3VL_RERANK_TIED),
    (is_rerank, QWEN3VL_RERANK),
]
_VARIANT_ENTRIES = [a for vs in VARIANTS.values() for _, a in vs]

#: GGUF architectures written by several entries, for GGUF -> HF: ``(test of the file's
#: metadata, entry)`` pairs tried in order before the other entries of that name
#: (Bamba and Granite 4.0-H with experts are ``granitehybrid`` files too)
GGUF_VARIANTS: dict[str, list[tuple[Callable[[Mapping[str, Any]], bool], Arch]]] = {
    "granitehybrid": [(is_bamba, BAMBA), (hybrid_has_experts, GRANITEHYBRID_MOE)],
    "granite": [(is_granitehybrid_file, GRANITEHYBRID_AS_GRANITE)],
    "granitemoe": [(is_granitehybrid_file, GRANITEHYBRID_AS_GRANITEMOE)],
    # GLM-4V's text half: Q/K reordered for M-RoPE, no HF class of its own (refused);
    # GLM-OCR's with its MTP block too (both convert back with their projector)
    "glm4": [(has_mtp_sections, GLMOCR_TEXT), (has_sections, GLM4V_TEXT)],
    "glm4moe": [(has_sections, GLM4VMOE_TEXT)],
    # Youtu: deepseek2's multi-head latent attention without experts
    "deepseek2": [(is_dense, YOUTU)],
}
# Mistral's own MoE layout (MistralMoeModel): back as transformers' Mistral4ForCausalLM
GGUF_VARIANTS["deepseek2"].insert(0, (is_mistral_moe_file, MISTRAL_MOE_BACK))
# Ministral 3's text: a mistral3 file with the Llama 4 scaling row (Mistral Small 3.1's
# has none, and no HF class of its own)
GGUF_VARIANTS["mistral3"] = [(is_ministral3_file, MINISTRAL3)]
# Ling-3.0 VL's text: a bailingmoe3 file with M-RoPE sections (no HF class: refused alone)
GGUF_VARIANTS["bailingmoe3"] = [(has_sections, BAILINGMOE3_VL)]
# GraniteMoeSWA: a granite_swa file with experts
GGUF_VARIANTS["granite_swa"] = [(is_granitemoe_swa_file, GRANITEMOE_SWA)]
# a Puzzle's nemotron_h_moe file: per-block top-k
GGUF_VARIANTS["nemotron_h_moe"] = [(is_puzzle_file, NEMOTRON_H_PUZZLE)]
# LFM2-ColBERT's and LFM2.5-Embedding's lfm2 files (the Dense head's width; causal false)
GGUF_VARIANTS["lfm2"] = [
    (is_bidirectional_file, LFM2_BIDIRECTIONAL),
    (is_colbert_file, LFM2_COLBERT),
]
# an embedding model's qwen2 / qwen3 file (a pooling type) goes back as the bare model
GGUF_VARIANTS["qwen2"] = [(has_pooling, QWEN2_EMBED)]
GGUF_VARIANTS["qwen3"] = [(is_rerank_file, QWEN3_SEQCLS), (has_pooling, QWEN3_EMBED)]
_GGUF_VARIANT_ENTRIES = [a for vs in GGUF_VARIANTS.values() for _, a in vs]

#: HF architecture name -> entry
REGISTRY: dict[str, Arch] = {
    h: a for a in ENTRIES if all(a is not v for v in _VARIANT_ENTRIES) for h in a.hf_archs
}


def supported() -> list[str]:
    return sorted(REGISTRY)


def lookup(hf_arch: str, cfg: dict | None = None) -> Arch | None:
    """The entry for an HF class; with ``cfg`` (config.json), its :data:`VARIANTS` too."""
    for test, entry in VARIANTS.get(hf_arch, []) if cfg is not None else []:
        if test(cfg):
            return entry
    return REGISTRY.get(hf_arch)


def by_shapes(shapes: dict[str, tuple[int, ...]]) -> Arch | None:
    """The entry whose :attr:`Arch.config_from_shapes` claims a checkpoint without
    ``config.json`` by its tensor ``shapes`` (the first in :data:`ENTRIES` order, as
    the reference tries its hparams loaders in turn), or None."""
    for a in ENTRIES:
        if a.config_from_shapes is not None and a.config_from_shapes.matches(shapes):
            return a
    return None


def by_gguf_arch(
    name: str,
    ggml_vocab: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tensor_names: set[str] | None = None,
) -> Arch | None:
    """The entry for a ``general.architecture`` value (for the GGUF -> HF direction).

    With the file's ``metadata``, a :data:`GGUF_VARIANTS` entry whose test holds wins.
    A ``bert`` file with a WordPiece vocabulary and no ``token_types.weight`` (given
    ``tensor_names``) is a DistilBERT: a BertModel would invent random segment embeddings
    for it.  Other entries sharing one (BERT, XLM-RoBERTa, RoBERTa are all ``bert``)
    differ by vocabulary: the one whose tokenizer route writes ``tokenizer.ggml.model =
    ggml_vocab`` (``tokenizer["ggml"]``) wins, else the first."""
    for test, entry in GGUF_VARIANTS.get(name, []) if metadata is not None else []:
        if test(metadata):
            return entry
    if (
        name == "bert"
        and ggml_vocab in (None, "bert")
        and tensor_names is not None
        and "token_embd.weight" in tensor_names
        and "token_types.weight" not in tensor_names
    ):
        return DISTILBERT
    same = [
        a for a in ENTRIES if a.gguf_arch == name and all(a is not v for v in _GGUF_VARIANT_ENTRIES)
    ]
    for a in same:
        if ggml_vocab is not None and a.tokenizer.get("ggml") == ggml_vocab:
            return a
    return same[0] if same else None
