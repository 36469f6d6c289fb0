"""The registry's newer architectures (MoE, Gemma 2, Granite, OLMo 2, SmolLM3), both ways.

For each tiny random model (tests/support/hf_models.py, built once per module):

* HF -> GGUF: byte-identical to llama.cpp's ``convert_hf_to_gguf.py`` at f16, bf16 and
  q8_0 (KVs in order, tensor infos, data); for q4_k_m and iq4_xs identical to
  ``convert_hf_to_gguf.py`` f32 followed by ``llama_model_quantize``, KV order included;
* llama.cpp runs our file: logits equal those of its own file, and the original's;
* GGUF -> HF -> transformers: every tensor equals the original, logits equal.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest

from support.hf_models import build
from support.meta_oracle import oracle_env
from test_convert_hf_to_gguf import (
    _kvs,
    _llama_logits,
    _llama_quantize,
    _run_reference,
    _tensors,
)
from weightsmith.convert import gguf_to_hf, hf_to_gguf

ARCHS = [
    "mixtral", "qwen2moe", "qwen3moe", "gemma2", "granite", "granitemoe", "smollm3", "olmo2",
    "starcoder2", "stablelm", "gpt2", "falcon", "deepseek2", "deepseek3", "phi3", "phi4",
    "gptoss", "gptoss_mxfp4", "lfm2", "mamba2", "granitehybrid", "mamba", "lfm2moe",
]  # fmt: skip
ARCHS += ["glm4moe", "llama4"]
ARCHS += ["gemma4", "gemma4moe"]
# Gemma 4 Unified (Gemma4UnifiedForConditionalGeneration): its text half is the GGUF;
# GGUF -> HF gives Gemma4UnifiedForCausalLM, the original's text tensors under ``model.``
ARCHS += ["gemma4unified"]
TEXT_HALF = {"gemma4unified": "model.language_model."}
ARCHS += ["nemotronh"]
ARCHS += ["granitehybridmoe", "bamba"]
# the pinned converter reads config.json through transformers' AutoConfig; transformers 5's
# NemotronHConfig rewrites the Hub's config (layers_block_type, MoE defaults) into one the
# converter misreads (test_nemotronh_config_spellings).  It is run where it was written
# to run: on a transformers without NemotronH (4.47.1), which leaves config.json as it is
REF_ON_TRANSFORMERS_4 = {"nemotronh"}
# gated DeltaNet hybrids with an MTP block (the GGUF's norms are 1 + w, A is -exp(A_log))
DELTANET = ["qwen35", "qwen35moe", "qwen3next"]
ARCHS += DELTANET
ARCHS += ["jamba"]
# Nemotron-H MoE (Nemotron 3 Super's layout: latent experts, shared expert, MTP block); its
# config.json is transformers 5's, which the reference reads right on transformers 5
ARCHS += ["nemotronhmoe"]
# parallel attention + Mamba 2 hybrid; its muP multipliers are folded into the weights
ARCHS += ["falconh1"]
# Mamba (1) with RMS norms on dt / B / C (llama.cpp's mamba with ssm.dt_b_c_rms)
ARCHS += ["falconmamba"]
# Gemma 3n text (AltUp, LAuReL, per-layer embeddings, activation sparsity); the GGUF keeps
# its per-layer embedding padded with zero rows to vocab_size, as the reference writes it,
# and GGUF -> HF gives that table back (PADDED_ROWS)
ARCHS += ["gemma3n"]
PADDED_ROWS = {"gemma3n": ("model.embed_tokens_per_layer.weight",)}
# ERNIE 4.5 (dense): the text of PaddleOCR-VL
ARCHS += ["ernie4_5"]
ARCHS += ["ernie4_5_moe"]
# GLM-4-0414 dense (glm4): fused gate_up, four norms a layer, half-rotary interleaved RoPE
ARCHS += ["glm4"]
# HunYuan dense (the text half of HunyuanVL): Q/K norms, NTK-alpha RoPE as a stretched base
ARCHS += ["hunyuan_dense"]
# EXAONE 4.0: the 1.2B layout (RoPE on every layer) and the 32B one (64 layers: the pinned
# llama.cpp runs the sliding-window / global-NoPE hybrid only at that depth)
ARCHS += ["exaone4", "exaone4_swa"]
# K-EXAONE's layout (exaone-moe): sigmoid-routed experts with a correction bias, shared expert
ARCHS += ["exaone_moe"]
# Qwen4-Exp: Qwen3.5-MoE's layers with hyper-connections and a QSA indexer (1 + w norms)
ARCHS += ["qwen4exp"]
# Ministral3ForCausalLM (mistral3 + YaRN log-multiplier and Llama 4 scaling rows; the scaling
# itself is run in tests/test_convert_ministral3.py, past its short original context)
ARCHS += ["ministral3"]
REF_TYPES = ["f32", "f16", "bf16", "q8_0"]
# llama.cpp (the pinned build) and transformers 5 give different logits for the same tiny
# DeepSeek-V3 (max 0.69): llama.cpp's own file shows the same gap as ours (docs/
# convert-architectures.md); the GGUF -> HF round trip of that model is exact
LLAMA_CPP_DIFFERS_FROM_TRANSFORMERS = {"deepseek3"}
# gpt-oss: two runtime differences of the pinned llama.cpp, not conversion ones (ours and
# the reference's files give the same logits).  Its YaRN always truncates the correction
# range where gpt-oss says ``truncate: false``: transformers is run with ``truncate: true``
# (max gap 0.0005 then, 0.010 without).  Its CPU MXFP4 matmul quantizes the activations to
# Q8_0: the MXFP4 checkpoint's gap is 0.008 from the first token on (docs/
# convert-architectures.md), pinned below a bound
HF_RUNS_AS_LLAMA_CPP = {"gptoss": {"truncate": True}, "gptoss_mxfp4": {"truncate": True}}
LLAMA_CPP_DIFFERS_FROM_TRANSFORMERS |= {"gptoss_mxfp4"}
LLAMA_CPP_GAP_BOUND = {"gptoss_mxfp4": 4e-3}
# Bamba rotates half of each head (rotate-half pairs inside that half); the reference
# permutes Q/K over the whole head, so llama.cpp rotates other pairs: 0.23 at scale 2.8,
# for its own file as for ours (test_bamba_gap_is_the_whole_head_permutation)
LLAMA_CPP_DIFFERS_FROM_TRANSFORMERS |= {"bamba"}
LLAMA_CPP_GAP_BOUND["bamba"] = 0.12
# Gemma 4 scales attention by 1 (Q and K are RMS-normed): the pinned llama.cpp's default
# f16 KV cache then moves the tiny model's logits by 0.014 (scale 3.6) from transformers',
# for its own file as for ours; with an f32 cache the gap is 0.0034, inside the bound
LLAMA_CPP_F32_KV = {"gemma4", "gemma4moe"}
LLAMA_CPP_F32_KV |= {"gemma4unified"}
# Two runtime differences of the pinned llama.cpp's gemma3n graph, not conversion ones (its
# own file and ours give the same logits): its activation sparsity cuts at mean + 1.6448534
# x the sample std (n - 1) where transformers takes the population std (n); over the tiny
# model's 128-wide MLP that moves the logits by 0.66 (scale 1.4), so transformers is run
# with the quantile that gives llama.cpp's cutoff (HF_FIELDS_AS_LLAMA_CPP).  Its GELU reads
# an f16 table: 0.0115 left (f32 KV cache, scale 1.55), pinned below a bound;
# test_gemma3n_gap_is_the_gelu_table shows it is that table
LLAMA_CPP_F32_KV |= {"gemma3n"}
LLAMA_CPP_DIFFERS_FROM_TRANSFORMERS |= {"gemma3n"}
LLAMA_CPP_GAP_BOUND["gemma3n"] = 0.01
# EXAONE 4.0's 64 narrow layers (Q/K-normed): the default f16 KV cache moves the logits by
# 0.0027 (scale 1.33, just past the bound) from transformers', for the reference's file as
# for ours; with an f32 cache the gap is 4e-6
LLAMA_CPP_F32_KV |= {"exaone4_swa"}
# Qwen4-Exp: the pinned llama.cpp's qwen4exp graph always runs the gated DeltaNet's output
# gate as sigmoid (no GGUF key), transformers as output_gate_type; the tiny model says
# sigmoid (with the default, hidden_act silu, the gap is 2.5 at scale 2.0:
# test_qwen4exp_gap_is_the_gdn_output_gate).  The default f16 KV cache then leaves 3.1e-3
# at scale 1.94; with an f32 cache 5.9e-6
LLAMA_CPP_F32_KV |= {"qwen4exp"}


def _gemma3n_sparsity_as_llama_cpp(src: Path) -> dict:
    """The activation sparsity whose population-std cutoff is llama.cpp's sample-std one."""
    import math
    from statistics import NormalDist

    cfg = json.loads((src / "config.json").read_text())
    q = [1.6448533535003662 * math.sqrt(n / (n - 1)) for n in cfg["intermediate_size"]]
    pattern = [NormalDist().cdf(x) if p > 0 else p
               for p, x in zip(cfg["activation_sparsity_pattern"], q)]  # fmt: skip
    return {"activation_sparsity_pattern": pattern}


HF_FIELDS_AS_LLAMA_CPP = {"gemma3n": _gemma3n_sparsity_as_llama_cpp}
QUANT_TYPES = ["q4_k_m", "iq4_xs"]
# MXFP4 experts: llama_model_quantize refuses to requantize them unless allowed; with
# --allow-requantize it dequantizes them (exactly) and quantizes the floats, as we do
REQUANTIZE = {"gptoss_mxfp4"}
# checkpoints whose experts are stored quantized (MXFP4 blocks + scales): GGUF -> HF
# gives them back dequantized, so they are compared with transformers' own dequantization
QUANTIZED_SOURCE = {"gptoss_mxfp4"}
BPE_VOCAB = {
    "qwen2moe",
    "qwen3moe",
    "olmo2",
    "starcoder2",
    "stablelm",
    "gpt2",
    "falcon",
    "deepseek2",
    "deepseek3",
    "phi4",
    "gptoss",
    "gptoss_mxfp4",
    "lfm2",
    "lfm2moe",
    "glm4moe",
    "llama4",
    "nemotronh",
    *DELTANET,
}
BPE_VOCAB |= {"nemotronhmoe"}
BPE_VOCAB |= {"falconh1"}
BPE_VOCAB |= {"glm4"}
BPE_VOCAB |= {"hunyuan_dense"}
BPE_VOCAB |= {"exaone4", "exaone4_swa", "exaone_moe"}
# Youtu-LLM (deepseek2: multi-head latent attention, dense MLP, tied head)
ARCHS += ["youtu"]
# BailingMoE V3 (Ling-3.0): KDA + head-gated MLA, MoE.  The reference reads the Hub's
# config spellings, which transformers 5.24's bailing_hybrid config renames
# (norm_topk_prob -> moe_renormalize): it runs on 4.47.1, which reads config.json as is
ARCHS += ["bailingmoe3"]
REF_ON_TRANSFORMERS_4 |= {"bailingmoe3"}
BPE_VOCAB |= {"bailingmoe3"}
# Granite SWA (GraniteSWA / GraniteMoeSWA: sliding-window layers with attention sinks,
# granite_swa); the dense one has a NoPE layer (rope_pattern), the MoE one fused experts
ARCHS += ["granite_swa", "granitemoe_swa"]
# NemotronHPuzzle (per-block MoE shapes in block_configs; uniform here, so transformers'
# NemotronH is the oracle and GGUF -> HF gives NemotronHForCausalLM)
ARCHS += ["nemotronhpuzzle"]
BPE_VOCAB |= {"nemotronhpuzzle"}
# Kimi Linear: KDA + NoPE MLA, MoE, in the Hub's config spellings (linear_attn_config)
ARCHS += ["kimi_linear"]
BPE_VOCAB |= {"kimi_linear"}
BPE_VOCAB |= {"youtu"}
BPE_VOCAB |= {"qwen4exp"}
# Mistral 4 (Mistral3ForConditionalGeneration over a mistral4 text: the reference's
# Mistral4Model, DeepSeek-V2's MLA with fused experts, GGUF mistral4); saved in the Hub's
# layout (language_model.model.* / language_model.lm_head), GGUF -> HF gives
# Mistral4ForCausalLM (model.* / lm_head)
ARCHS += ["mistral4"]
BPE_VOCAB |= {"mistral4"}
TEXT_HALF_AS_IS = {"mistral4": "language_model."}
# config model types whose original runs as AutoModelForImageTextToText (text-only input)
IMAGE_TEXT_TO_TEXT = {"mistral3"}
# ... and those AutoModelForCausalLM does not map (transformers 5.24 registers no mistral4
# causal LM): run as the class config.json names
NOT_IN_AUTO = {"mistral4"}
# its MLA (Q/K 48 wide, latent 64): the default f16 KV cache leaves 1.9e-3 at scale 3.6
# from transformers' logits, for the reference's file as for ours; an f32 cache 3.8e-6
LLAMA_CPP_F32_KV |= {"mistral4"}
PROMPTS = {
    "spm": [1, 5, 9, 33, 100, 7, 200, 42],
    "bpe": [9707, 11, 1879, 0, 358, 1079, 264, 2272],
}


def _prompt(arch: str) -> list[int]:
    return PROMPTS["bpe" if arch in BPE_VOCAB else "spm"]


class _Work:
    """Per arch, built on first use and kept for the module: the tiny model, the
    reference's files (one subprocess per arch) and ours."""

    def __init__(self, root: Path) -> None:
        self.root, self.ref, self.ours = root, root / "ref", root / "ours"
        self.ref.mkdir()
        self.ours.mkdir()
        self.models: dict[str, Path] = {}

    def model(self, arch: str) -> Path:
        if arch not in self.models:
            self.models[arch] = build(arch, self.root / "models" / arch)
            src = self.models[arch]
            env = oracle_env() if arch in REF_ON_TRANSFORMERS_4 else None
            _run_reference([(str(src), str(self.ref / f"{arch}-{t}.gguf"), t) for t in REF_TYPES],
                           env)  # fmt: skip
            for t in QUANT_TYPES:
                _llama_quantize(self.ref / f"{arch}-f32.gguf", self.ref / f"{arch}-{t}.gguf", t,
                                allow_requantize=arch in REQUANTIZE)  # fmt: skip
        return self.models[arch]

    def files(self, arch: str, t: str) -> tuple[Path, Path]:
        """(ours, reference) for ``arch`` at type ``t``."""
        src = self.model(arch)
        ours = self.ours / f"{arch}-{t}.gguf"
        if not ours.exists():
            hf_to_gguf(src, ours, t)
        return ours, self.ref / f"{arch}-{t}.gguf"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Iterator[_Work]:
    path = tmp_path_factory.mktemp("archs")
    yield _Work(path)
    # ~21 GB of tiny models and GGUF files: pytest keeps a factory's folders to the end of
    # the session, and the modules after this one need that disk on a CI machine
    shutil.rmtree(path, ignore_errors=True)


def _same_as_reference_f16(src: Path, tmp_path: Path) -> Path:
    """Convert ``src`` to f16 with ours and with the reference; the two files must be one
    byte for byte.  Returns ours."""
    ours, ref = tmp_path / "ours.gguf", tmp_path / "ref.gguf"
    _run_reference([(str(src), str(ref), "f16")])
    hf_to_gguf(src, ours, "f16")
    _same_file(ours, ref)
    return ours


def _same_file(ours: Path, ref: Path) -> None:
    ko, kr = _kvs(ours), _kvs(ref)
    assert list(ko) == list(kr)  # same keys in the same order
    for k in kr:
        assert ko[k] == kr[k], k
    to, tr = _tensors(ours), _tensors(ref)
    assert [x[:3] for x in to] == [x[:3] for x in tr]
    for a, b in zip(to, tr):
        assert a[3] == b[3], f"{a[0]} data differs"
    # what ggml's reader shows is not all: stored dims (trailing 1s) and KV types count too
    assert ours.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("t", REF_TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_as_reference_converter(work, arch, t):
    _same_file(*work.files(arch, t))


@pytest.mark.parametrize("t", QUANT_TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_as_llama_quantize(work, arch, t):
    _same_file(*work.files(arch, t))


def test_experts_are_stacked(work):
    """Guard against a vacuous pass: the MoE files hold 3-D expert tensors, quantized."""
    for arch, n in (("mixtral", 4), ("qwen2moe", 4), ("qwen3moe", 4), ("granitemoe", 4)):
        t = {x[0]: x for x in _tensors(work.files(arch, "q4_k_m")[0])}
        _, tid, dims, _ = t["blk.1.ffn_gate_exps.weight"]
        assert dims[2] == n and len(dims) == 3, arch
        assert tid not in (0, 1), arch  # neither F32 nor F16
    names = [x[0] for x in _tensors(work.files("qwen2moe", "f16")[0])]
    assert "blk.0.ffn_gate_inp_shexp.weight" in names


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_logits(work, arch):
    tokens = _prompt(arch)
    ours_f32, ref_f32 = work.files(arch, "f32")
    run = _llama_logits_f32_kv if arch in LLAMA_CPP_F32_KV else _llama_logits
    ours = run(ours_f32, tokens)
    ref = run(ref_f32, tokens)
    np.testing.assert_array_equal(ours, ref)
    fields = (
        HF_FIELDS_AS_LLAMA_CPP[arch](work.model(arch)) if arch in HF_FIELDS_AS_LLAMA_CPP else {}
    )
    hf = _hf_logits(work.model(arch), tokens, HF_RUNS_AS_LLAMA_CPP.get(arch), **fields)
    scale = float(np.abs(hf).max())
    gap = np.abs(ours - hf).max()
    if arch in LLAMA_CPP_DIFFERS_FROM_TRANSFORMERS:
        # llama.cpp's own file is as far from transformers as ours (asserted equal above):
        # the two runtimes disagree on this model; the gap is pinned so a change shows
        assert np.abs(ref - hf).max() == gap and gap > 2e-3 * max(scale, 1.0), arch
        assert gap <= LLAMA_CPP_GAP_BOUND.get(arch, np.inf) * max(scale, 1.0), arch
        return
    assert gap <= 2e-3 * max(scale, 1.0), arch


@pytest.mark.parametrize("arch", ARCHS)
def test_round_trip(work, arch, tmp_path):
    """HF -> GGUF (f32) -> HF: the same tensors, the same logits in transformers."""
    from safetensors.numpy import load_file

    src = work.model(arch)
    back = tmp_path / "back"
    gguf_to_hf(work.files(arch, "f32")[0], back, dtype="f32")
    orig = load_file(src / "model.safetensors")
    if arch in TEXT_HALF:  # the other modalities' tensors are not converted
        pre = TEXT_HALF[arch]
        orig = {"model." + k[len(pre) :]: v for k, v in orig.items() if k.startswith(pre)}
    if arch in TEXT_HALF_AS_IS:  # the text's tensors, the wrapper's prefix dropped
        pre = TEXT_HALF_AS_IS[arch]
        orig = {k[len(pre) :]: v for k, v in orig.items() if k.startswith(pre)}
    if arch in QUANTIZED_SOURCE:
        orig = _hf_weights(src)
        assert not any(k.endswith(("_blocks", "_scales")) for k in orig)
    got = load_file(back / "model.safetensors")
    for k in PADDED_ROWS.get(arch, ()):
        v, rows = orig[k], got[k].shape[0]
        assert rows > v.shape[0] and not got[k][v.shape[0] :].any(), k
        orig[k] = np.concatenate([v, np.zeros((rows - v.shape[0], *v.shape[1:]), v.dtype)])
    cfg = json.loads((back / "config.json").read_text())
    if cfg["tie_word_embeddings"]:
        orig.pop("lm_head.weight", None)
    assert sorted(got) == sorted(orig)
    if arch in FOLDED:
        # the GGUF keeps the weights times the multipliers, and GGUF -> HF writes them
        # with multipliers of 1: the original, folded here in float64
        orig = FOLDED[arch](orig, json.loads((src / "config.json").read_text()))
        assert all(cfg[k] == 1.0 for k in ("embedding_multiplier", "key_multiplier"))
    # norm + 1 - 1 (Gemma 2), log(-(-exp(A_log))) (the SSMs): not always the identity in float32
    exact = arch not in ("gemma2", "mamba", "mamba2", "granitehybrid", "nemotronh", *DELTANET,
                         "jamba", "nemotronhmoe", "granitehybridmoe", "bamba", *FOLDED,
                         "falconmamba", "qwen4exp", "bailingmoe3",
                         "nemotronhpuzzle", "kimi_linear")  # fmt: skip
    for k, v in orig.items():
        want = v.astype(np.float32)
        if exact:
            np.testing.assert_array_equal(got[k], want, err_msg=k)
        else:
            np.testing.assert_allclose(got[k], want, rtol=0, atol=1e-6, err_msg=k)
    tokens = _prompt(arch)
    a, b = _hf_logits(src, tokens), _hf_logits(back, tokens)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * max(1.0, float(np.abs(a).max())))


def _falcon_h1_folded(sd: dict[str, np.ndarray], cfg: dict) -> dict[str, np.ndarray]:
    """Falcon-H1's weights times its muP multipliers (float64, then float32), as its
    modeling code applies them: the embedding's and lm_head's, the MLP's gate/down,
    attention in (Q, K, V; K also times ``key_multiplier``) and out, the mixer's in
    (times ``ssm_multipliers`` per z, x, B, C, dt row block) and out."""
    gate, down = cfg["mlp_multipliers"]
    att_in = cfg["attention_in_multiplier"]
    factor = {
        "model.embed_tokens.weight": cfg["embedding_multiplier"],
        "lm_head.weight": cfg["lm_head_multiplier"],
        "feed_forward.gate_proj.weight": gate,
        "feed_forward.down_proj.weight": down,
        "self_attn.q_proj.weight": att_in,
        "self_attn.k_proj.weight": att_in * cfg["key_multiplier"],
        "self_attn.v_proj.weight": att_in,
        "self_attn.o_proj.weight": cfg["attention_out_multiplier"],
        "mamba.out_proj.weight": cfg["ssm_out_multiplier"],
    }
    d, gs = cfg["mamba_d_ssm"], cfg["mamba_n_groups"] * cfg["mamba_d_state"]
    sizes = [d, d, gs, gs, cfg["mamba_n_heads"]]
    rows = np.repeat(np.array(cfg["ssm_multipliers"], np.float64), sizes)[:, None]
    out = {}
    for k, v in sd.items():
        x = v.astype(np.float64)
        if k.endswith("mamba.in_proj.weight"):
            assert x.shape[0] == sum(sizes), k
            x = x * cfg["ssm_in_multiplier"] * rows
        for suffix, f in factor.items():
            if k.endswith(suffix):
                x = x * f
        out[k] = x.astype(np.float32)
    return out


# architectures whose GGUF holds the weights with multipliers folded in: the fold
FOLDED = {"falconh1": _falcon_h1_folded}


def _llama_logits_f32_kv(path: Path, tokens: list[int]) -> np.ndarray:
    """llama.cpp's logits with the KV cache in f32 (GGML_TYPE_F32 = 0)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)  # fmt: skip
    try:
        llm.eval(tokens)
        return np.array(llm.scores[: len(tokens)], dtype=np.float32)
    finally:
        llm.close()


def _hf_logits(folder: Path, tokens: list[int], rope: dict | None = None, **fields) -> np.ndarray:
    """transformers' logits; ``rope`` entries override the config's ``rope_parameters``,
    ``fields`` other config fields."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(folder)
    if rope:
        cfg.rope_parameters = {**cfg.rope_parameters, **rope}
    for k, v in fields.items():
        setattr(cfg, k, v)
    auto = AutoModelForCausalLM
    if cfg.model_type in IMAGE_TEXT_TO_TEXT:  # transformers maps no causal-LM class to it
        from transformers import AutoModelForImageTextToText as auto
    elif cfg.model_type in NOT_IN_AUTO:
        import transformers

        auto = getattr(transformers, cfg.architectures[0])
    m = auto.from_pretrained(folder, config=cfg, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        return m(torch.tensor([tokens])).logits[0].numpy()


def _hf_weights(folder: Path) -> dict[str, np.ndarray]:
    """The float32 weights transformers itself loads from ``folder`` (MXFP4 dequantized)."""
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return {k: v.detach().float().numpy() for k, v in m.state_dict().items()}


def test_mxfp4_passthrough(work):
    """gpt-oss MXFP4 experts are written as MXFP4 at every outtype (the file type then
    says MXFP4_MOE), and they hold exactly the values transformers dequantizes them to,
    gate and up de-interleaved (read with gguf-py's own MXFP4 decoder)."""
    want = _hf_weights(work.model("gptoss_mxfp4"))
    mxfp4 = int(gguf.GGMLQuantizationType.MXFP4)
    for t, file_type in (("f16", 38), ("q8_0", 7)):
        path = work.files("gptoss_mxfp4", t)[0]
        _, _, raw = _kvs(path)["general.file_type"]  # (type, element type, bytes)
        assert int.from_bytes(raw, "little") == file_type, t
        got = {x[0]: x for x in _tensors(path)}
        for w in ("gate", "up", "down"):
            _, tid, dims, data = got[f"blk.1.ffn_{w}_exps.weight"]
            assert tid == mxfp4, (t, w)
            if t != "f16":
                continue
            vals = gguf.quants.dequantize(np.frombuffer(data, np.uint8).reshape(
                dims[2], dims[1], -1), gguf.GGMLQuantizationType.MXFP4)  # fmt: skip
            hf = want[f"model.layers.1.mlp.experts.{'down' if w == 'down' else 'gate_up'}_proj"]
            hf = np.swapaxes(hf, -1, -2)
            if w != "down":
                hf = hf[:, 0::2] if w == "gate" else hf[:, 1::2]
            np.testing.assert_array_equal(vals, hf, err_msg=w)


def test_mxfp4_blocks_and_scales_must_agree(work, tmp_path):
    """A checkpoint whose MXFP4 scales do not match its blocks fails with a named error
    before anything is written."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from weightsmith import errors as E

    src = tmp_path / "bad"
    shutil.copytree(work.model("gptoss_mxfp4"), src)
    sd = load_file(src / "model.safetensors")
    k = "model.layers.1.mlp.experts.down_proj_scales"
    sd[k] = np.ascontiguousarray(sd[k][:, :, :-1])
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out.gguf"
    with pytest.raises(E.TensorShapeMismatch, match="down_proj"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


def test_granitehybrid_layer_types_spellings(work, tmp_path):
    """transformers 5's layer_types spelling (full_attention / linear_attention) gives the
    file the Hub's (attention / mamba) gives, which is the reference's."""
    import shutil

    src = tmp_path / "granitehybrid"
    shutil.copytree(work.model("granitehybrid"), src)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["layer_types"] == ["mamba", "attention", "mamba", "attention"]
    cfg["layer_types"] = ["linear_attention", "full_attention"] * 2
    (src / "config.json").write_text(json.dumps(cfg))
    hf_to_gguf(src, tmp_path / "o.gguf", "f16")
    assert (tmp_path / "o.gguf").read_bytes() == work.files("granitehybrid", "f16")[1].read_bytes()


def test_granitehybrid_experts_and_bamba(work, tmp_path):
    """Guard against a vacuous pass: the expert form's file holds 3-D experts (quantized
    at q4_k_m), the router and the shared MLP as the shared expert, and no dense FFN;
    Bamba's has RoPE on over half of each head and its own norms.  GGUF -> HF gives each
    back as its own HF class (the three layouts are one GGUF architecture)."""
    from weightsmith.gguf import read

    moe = {x[0]: x for x in _tensors(work.files("granitehybridmoe", "q4_k_m")[0])}
    for b in range(4):
        _, tid, dims, _ = moe[f"blk.{b}.ffn_gate_exps.weight"]
        assert list(dims) == [256, 256, 4] and tid not in (0, 1)
        assert {f"blk.{b}.ffn_gate_inp.weight", f"blk.{b}.ffn_up_shexp.weight",
                f"blk.{b}.ffn_down_shexp.weight"} <= set(moe)  # fmt: skip
        assert f"blk.{b}.ffn_gate.weight" not in moe
        assert moe[f"blk.{b}.ffn_gate_inp.weight"][1] == 0  # the router stays F32
    with read(work.files("granitehybridmoe", "f16")[0]) as f:
        md = f.metadata
        assert md["granitehybrid.expert_count"] == 4 and md["granitehybrid.expert_used_count"] == 2
        assert md["granitehybrid.rope.scaling.finetuned"] is False
    with read(work.files("bamba", "f16")[0]) as f:
        md = f.metadata
        assert md["granitehybrid.rope.scaling.finetuned"] is True
        assert md["granitehybrid.rope.dimension_count"] == 32  # of 64
        assert md["granitehybrid.context_length"] == 256
        assert list(md["granitehybrid.attention.head_count_kv"]) == [0, 2, 0, 2]
        assert "granitehybrid.expert_count" not in md
    for arch, cls in (("granitehybridmoe", "GraniteMoeHybridForCausalLM"),
                      ("bamba", "BambaForCausalLM")):  # fmt: skip
        back = tmp_path / arch
        gguf_to_hf(work.files(arch, "f16")[0], back, dtype="f32")
        cfg = json.loads((back / "config.json").read_text())
        assert cfg["architectures"] == [cls], arch


def test_granitehybrid_attention_only(tmp_path):
    """GraniteMoeHybrid without SSM layers (granite-4.0-micro's layout: attention layers
    with the shared MLP, RoPE) is a plain ``granite`` file, byte-identical to the
    reference's at f16 and f32; llama.cpp runs it as transformers does, and GGUF -> HF
    gives the GraniteMoeHybrid folder back (same tensors, same logits)."""
    from safetensors.numpy import load_file

    from support.hf_models import granitehybrid
    from weightsmith.gguf import read

    src = tmp_path / "micro"
    src.mkdir()
    granitehybrid(src, seed=30, num_hidden_layers=2, layer_types=["attention"] * 2,
                  position_embedding_type="rope")  # fmt: skip
    _run_reference([(str(src), str(tmp_path / f"ref-{t}.gguf"), t) for t in ("f16", "f32")])
    for t in ("f16", "f32"):
        hf_to_gguf(src, tmp_path / f"ours-{t}.gguf", t)
        _same_file(tmp_path / f"ours-{t}.gguf", tmp_path / f"ref-{t}.gguf")
    ours = tmp_path / "ours-f32.gguf"
    with read(ours) as f:
        assert f.metadata["general.architecture"] == "granite"
        assert list(f.metadata["granite.attention.head_count_kv"]) == [2, 2]
    tokens = _prompt("granitehybrid")
    hf = _hf_logits(src, tokens)
    assert np.abs(_llama_logits(ours, tokens) - hf).max() <= 2e-3 * max(np.abs(hf).max(), 1.0)
    back = tmp_path / "back"
    gguf_to_hf(ours, back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["GraniteMoeHybridForCausalLM"]
    assert cfg["layer_types"] == ["attention"] * 2
    orig = load_file(src / "model.safetensors")
    got = load_file(back / "model.safetensors")
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v.astype(np.float32), err_msg=k)
    np.testing.assert_allclose(_hf_logits(back, tokens), hf, rtol=0,
                               atol=1e-4 * max(1.0, float(np.abs(hf).max())))  # fmt: skip


def test_bamba_config_without_attn_rotary_emb(work, tmp_path):
    """Bamba's config.json as transformers 5 saves it (no ``attn_rotary_emb``): the whole
    head is written as the rotary size, by the reference as by us."""
    import shutil

    from weightsmith.gguf import read

    src = tmp_path / "bamba"
    shutil.copytree(work.model("bamba"), src)
    cfg = json.loads((src / "config.json").read_text())
    del cfg["attn_rotary_emb"]
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    ours = _same_as_reference_f16(src, tmp_path)
    with read(ours) as f:
        assert f.metadata["granitehybrid.rope.dimension_count"] == 64


def test_bamba_gap_is_the_whole_head_permutation(work, tmp_path):
    """Bamba's llama.cpp logits differ from transformers' because the reference permutes
    Q/K for a rotation of the whole head where Bamba rotates half of it: our file (the
    reference's, byte for byte) with Q/K re-permuted for the rotated half alone gives
    transformers' logits within the harness's bound; as written it does not."""
    import shutil

    from weightsmith.convert.arch import permute_rope, unpermute_rope

    ours = work.files("bamba", "f32")[0]
    fixed = tmp_path / "half-head.gguf"
    shutil.copy(ours, fixed)
    cfg = json.loads((work.model("bamba") / "config.json").read_text())
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    rot = cfg["attn_rotary_emb"]
    assert rot == hd // 2
    r = gguf.GGUFReader(fixed, "r+")
    for t in r.tensors:
        if t.name.endswith(("attn_q.weight", "attn_k.weight")):
            n = cfg["num_attention_heads" if "attn_q" in t.name else "num_key_value_heads"]
            w = unpermute_rope(np.array(t.data), n).reshape(n, hd, -1)
            w[:, :rot] = permute_rope(w[:, :rot].reshape(n * rot, -1), n).reshape(n, rot, -1)
            t.data[...] = w.reshape(t.data.shape)
    del r
    tokens = _prompt("bamba")
    hf = _hf_logits(work.model("bamba"), tokens)
    bound = 2e-3 * max(float(np.abs(hf).max()), 1.0)
    assert np.abs(_llama_logits(fixed, tokens) - hf).max() <= bound
    assert np.abs(_llama_logits(ours, tokens) - hf).max() > 10 * bound


CARD = """---
license: apache-2.0
language:
- en
- fr
tags:
- text-generation
- moe
base_model: mistralai/Mixtral-8x7B-v0.1
organization: Tiny Labs
finetune: Instruct
basename: Tinytral
model-index:
- name: tinytral
  results: []
---

# Tinytral
"""


def test_nemotronh_config_spellings(work, tmp_path):
    """The config transformers 5 saves (``layers_block_type`` with ``mlp`` layers, no
    ``num_hidden_layers``, MoE defaults) gives the same file as the Hub's pattern form.
    The pinned converter (on transformers 5, as installed) misreads both forms: it writes
    ``nemotron_h_moe`` with zero feed-forward widths; pinned here so a fix shows."""
    import shutil

    from weightsmith.gguf import read

    hub = work.model("nemotronh")
    src = tmp_path / "nemotronh"
    shutil.copytree(hub, src)
    c = json.loads((src / "config.json").read_text())
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    c["layers_block_type"] = [kinds[k] for k in c.pop("hybrid_override_pattern")]
    del c["num_hidden_layers"]
    c.update(num_experts_per_tok=2, n_routed_experts=8, n_group=1, topk_group=1,
             moe_intermediate_size=7688, norm_topk_prob=True)  # fmt: skip
    (src / "config.json").write_text(json.dumps(c, indent=2))
    hf_to_gguf(src, tmp_path / "o.gguf", "f16")
    assert (tmp_path / "o.gguf").read_bytes() == work.files("nemotronh", "f16")[0].read_bytes()
    with read(tmp_path / "o.gguf") as f:
        assert list(f.metadata["nemotron_h.feed_forward_length"]) == [0, 512, 0, 0, 512]
    _run_reference([(str(hub), str(tmp_path / "ref5.gguf"), "f16")])
    with read(tmp_path / "ref5.gguf") as f:
        md = f.metadata
    assert md["general.architecture"] == "nemotron_h_moe"
    assert list(md["nemotron_h_moe.feed_forward_length"]) == [0] * 5


def test_provenance_round_trip(work, tmp_path):
    """README front matter -> general.* exactly as the reference reads it; GGUF -> HF writes
    a card that reads back into the same general.* values."""
    import shutil

    from weightsmith.gguf import read

    src = tmp_path / "Tinytral-4x1M-Instruct-v0.2"
    shutil.copytree(work.model("mixtral"), src)
    (src / "README.md").write_text(CARD)
    ours, ref = tmp_path / "ours.gguf", tmp_path / "ref.gguf"
    _run_reference([(str(src), str(ref), "f16")])
    hf_to_gguf(src, ours, "f16")
    assert ours.read_bytes() == ref.read_bytes()  # the whole file, provenance included

    def general(p: Path) -> dict:
        with read(p) as f:
            return {k: f.metadata[k] for k in f.metadata if k.startswith("general.")}

    g = general(ours)
    assert g["general.license"] == "apache-2.0" and g["general.organization"] == "Tiny Labs"
    assert list(g["general.languages"]) == ["en", "fr"] and g["general.finetune"] == "Instruct"
    assert g["general.base_model.0.repo_url"].endswith("mistralai/Mixtral-8x7B-v0.1")
    back = tmp_path / "Tinytral-4x1M-Instruct-v0.2-back"
    gguf_to_hf(ours, back, dtype="bf16")
    assert (back / "README.md").read_text().startswith("---\n")
    again = tmp_path / "again.gguf"
    hf_to_gguf(back, again, "f16")
    g2 = general(again)
    for k, v in g.items():
        if k != "general.file_type":
            assert g2.get(k) == v or list(g2.get(k, [])) == list(v), k


# --------------------------------------------------------------------------- FP8 checkpoints

FP8_TYPES = ["f32", "q8_0"]  # exact values, and quantized from them (f16/bf16 checked by hand)


@pytest.fixture(scope="module")
def fp8(work) -> Path:
    """The tiny DeepSeek-V3 stored as its FP8 checkpoints are (float8_e4m3fn, 128x128 block
    scales, partial blocks at the edges), converted by the reference at each type."""
    from support.hf_models import fp8_checkpoint

    src = fp8_checkpoint(work.model("deepseek3"), work.root / "models" / "deepseek3-fp8")
    # as the Hub's DeepSeek-V3 config.json: no head_dim (AutoConfig fills qk_rope_head_dim)
    cfg = json.loads((src / "config.json").read_text())
    for k in ("head_dim", "qk_head_dim"):
        cfg.pop(k, None)
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    _run_reference([(str(src), str(work.ref / f"fp8-{t}.gguf"), t) for t in FP8_TYPES])
    return src


@pytest.mark.parametrize("t", FP8_TYPES)
def test_fp8_same_as_reference_converter(work, fp8, t):
    ours = work.ours / f"fp8-{t}.gguf"
    hf_to_gguf(fp8, ours, t)
    _same_file(ours, work.ref / f"fp8-{t}.gguf")


def test_fp8_is_dequantized(work, fp8):
    """Guard against a vacuous pass: the checkpoint really is FP8 (its weights come out
    different from the bf16 originals, within FP8's error), and no scale is written."""
    from safetensors import safe_open

    with safe_open(fp8 / "model.safetensors", "np") as f:
        names = [k for k in f.keys() if k.endswith("q_b_proj.weight")]  # noqa: SIM118 (a handle)
        kinds = {f.get_slice(k).get_dtype() for k in names}
    assert kinds == {"F8_E4M3"}
    deq = {x[0]: x for x in _tensors(work.ours / "fp8-f32.gguf")}
    orig = {x[0]: x for x in _tensors(work.files("deepseek3", "f32")[0])}
    assert sorted(deq) == sorted(orig)
    name = "blk.1.attn_q_b.weight"
    a = np.frombuffer(deq[name][3], np.float32)
    b = np.frombuffer(orig[name][3], np.float32)
    assert not np.array_equal(a, b)
    assert np.abs(a - b).max() <= np.abs(b).max() / 16  # 3 mantissa bits


def _fp8_folder(fp8: Path, dst: Path, tensors: dict) -> Path:
    from weightsmith.safetensors import save_file

    dst.mkdir()
    (dst / "config.json").write_bytes((fp8 / "config.json").read_bytes())
    save_file(tensors, dst / "model.safetensors")
    return dst


def test_fp8_bad_scales_are_named(fp8, tmp_path):
    import ml_dtypes

    from weightsmith import errors as E

    w = np.zeros((192, 64), ml_dtypes.float8_e4m3fn)
    name = "model.layers.0.self_attn.q_b_proj.weight"
    bad = _fp8_folder(
        fp8, tmp_path / "bad", {name: w, name + "_scale_inv": np.ones((1, 1), np.float32)}
    )
    with pytest.raises(E.TensorShapeMismatch, match=r"\[2, 1\]|block"):
        hf_to_gguf(bad, tmp_path / "bad.gguf", "f16")
    lone = _fp8_folder(fp8, tmp_path / "lone", {name + "_scale_inv": np.ones((2, 1), np.float32)})
    with pytest.raises(E.UnmappedTensor, match="scale without its weight"):
        hf_to_gguf(lone, tmp_path / "lone.gguf", "f16")
    assert not (tmp_path / "bad.gguf").exists() and not (tmp_path / "lone.gguf").exists()


def test_llama4_text_half_of_conditional_generation(work, tmp_path):
    """Llama 4 as the Hub publishes it (Llama4ForConditionalGeneration: ``text_config``,
    ``language_model.`` tensors beside a vision tower): the text half converts exactly
    as the reference converts it, and as the text model alone."""
    import shutil

    from safetensors.numpy import load_file, save_file

    src = tmp_path / "llama4-vlm"
    shutil.copytree(work.model("llama4"), src)
    text = json.loads((src / "config.json").read_text())
    text.pop("architectures")
    cfg = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
           "text_config": text, "vision_config": {"model_type": "llama4_vision_model",
           "hidden_size": 16}, "image_token_index": 50256}  # fmt: skip
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = {f"language_model.{k}": v for k, v in load_file(src / "model.safetensors").items()}
    rng = np.random.default_rng(0)
    sd["vision_model.patch_embedding.linear.weight"] = rng.standard_normal((16, 48), np.float32)
    sd["multi_modal_projector.linear_1.weight"] = rng.standard_normal((256, 16), np.float32)
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    ours = _same_as_reference_f16(src, tmp_path)
    text_only = _tensors(work.files("llama4", "f16")[0])
    assert _tensors(ours) == text_only


def test_llama_config_without_head_dim(tmp_path):
    """Llama 2 / Mistral 7B config.json files have no head_dim; the reference reads the
    config through AutoConfig, which fills it, and so writes attention.key_length."""
    from support.hf_models import build

    src = build("llama", tmp_path / "llama")
    cfg = json.loads((src / "config.json").read_text())
    assert cfg.pop("head_dim") == 64
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    ours = _same_as_reference_f16(src, tmp_path)
    from weightsmith.gguf import read

    with read(ours) as f:
        assert f.metadata["llama.attention.key_length"] == 64


def test_gemma4_text_half_of_conditional_generation(work, tmp_path):
    """Gemma 4 as the Hub publishes it (Gemma4ForConditionalGeneration: ``text_config``
    with ``global_head_dim`` where transformers 5 saves ``per_layer_config``,
    ``model.language_model.`` tensors beside vision and audio towers): the text half
    converts exactly as the reference converts it, and as the text model alone."""
    import shutil

    from safetensors.numpy import load_file, save_file

    src = tmp_path / "gemma4-vlm"
    shutil.copytree(work.model("gemma4"), src)
    text = json.loads((src / "config.json").read_text())
    text.pop("architectures")
    full = [int(i) for i, t in enumerate(text["layer_types"]) if t == "full_attention"]
    assert {text["per_layer_config"][str(i)]["head_dim"] for i in full} == {128}
    text.pop("per_layer_config")
    text["global_head_dim"] = 128
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
           "text_config": text, "vision_config": {"model_type": "gemma4_vision",
           "hidden_size": 16}, "audio_config": None, "image_token_id": 519}  # fmt: skip
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = {
        k.replace("model.", "model.language_model.", 1): v
        for k, v in load_file(src / "model.safetensors").items()
    }
    rng = np.random.default_rng(0)
    sd["model.vision_tower.patch_embedder.input_proj.weight"] = rng.standard_normal(
        (16, 768), np.float32
    )
    sd["model.embed_vision.embedding_projection.weight"] = rng.standard_normal(
        (256, 16), np.float32
    )
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    ours = _same_as_reference_f16(src, tmp_path)
    assert _tensors(ours) == _tensors(work.files("gemma4", "f16")[0])


GEMMA4_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun saute\n\npar-dessus  le chien",
    "<|turn>user\nnumbers 0123 are here<turn|><|channel>x<channel|>",
    "敏捷的棕色狐狸 ✓ émoji 🦙",
]


def test_gemma4_tokenizer(work, tmp_path):
    """Gemma 4's vocabulary both ways: llama.cpp tokenizes with our file as transformers
    does with the original tokenizer.json, the tokenizer GGUF -> HF writes gives
    transformers the same ids and text, and the chat tokens the reference keeps visible
    are USER_DEFINED (the others CONTROL)."""
    import llama_cpp
    from transformers import AutoTokenizer

    from weightsmith.gguf import read

    path = work.files("gemma4", "f32")[0]
    with read(path) as f:
        md = f.metadata
        tokens, types = list(md["tokenizer.ggml.tokens"]), list(md["tokenizer.ggml.token_type"])
        assert md["tokenizer.ggml.model"] == "gemma4" and "tokenizer.ggml.pre" not in md
    kind = {t: int(ty) for t, ty in zip(tokens, types)}
    assert kind["<|channel>"] == kind['<|"|>'] == 4 and kind["<|turn>"] == kind["<bos>"] == 3
    back = tmp_path / "back"
    gguf_to_hf(path, back, dtype="f32")
    orig = AutoTokenizer.from_pretrained(work.model("gemma4"))
    ours = AutoTokenizer.from_pretrained(back)
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        for text in GEMMA4_TEXTS:
            want = orig.encode(text)
            assert want[0] == 2 and len(want) > 5, text  # BOS, then real pieces
            assert llm.tokenize(text.encode(), add_bos=True, special=True) == want, text
            assert ours.encode(text) == want, text
            assert ours.decode(want) == orig.decode(want), text
    finally:
        llm.close()
    # and the HF folder converts back to the same vocabulary (control tokens included)
    again = tmp_path / "again.gguf"
    hf_to_gguf(back, again, "f16")
    with read(again) as f:
        assert list(f.metadata["tokenizer.ggml.tokens"]) == tokens
        assert list(f.metadata["tokenizer.ggml.token_type"]) == types


def test_gemma4_tokenizer_must_be_byte_fallback_bpe(work, tmp_path):
    """Gemma 4 without tokenizer.json, or with one the reference's LlamaHfVocab refuses
    (no byte fallback), fails with a named error before anything is written."""
    import shutil

    from weightsmith import errors as E

    src = tmp_path / "gemma4"
    shutil.copytree(work.model("gemma4"), src)
    tj = json.loads((src / "tokenizer.json").read_text())
    tj["model"]["byte_fallback"] = False
    (src / "tokenizer.json").write_text(json.dumps(tj))
    out = tmp_path / "out.gguf"
    with pytest.raises(E.TokenizerInconsistent, match="byte_fallback"):
        hf_to_gguf(src, out, "f16")
    (src / "tokenizer.json").unlink()
    with pytest.raises(E.TokenizerFilesMissing, match=r"tokenizer\.json"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


# --------------------------------------------------------------------------- gated DeltaNet


def test_deltanet_layers_are_exercised(work):
    """Guard against a vacuous pass: the tiny models have fewer key than value heads (so
    the V-head reorder is not the identity), DeltaNet and full-attention layers, and an MTP
    block written as llama.cpp's nextn layer after the trunk; ``ssm_a`` is ``-exp(A_log)``
    in the tiled head order (computed here from the index arithmetic alone)."""
    from support.hf_models import config
    from weightsmith.gguf import read

    for arch in DELTANET:
        cfg = config(work.model(arch))
        nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        assert nk < nv, arch
        with read(work.files(arch, "f16")[0]) as f:
            md, names = f.metadata, {t.name for t in f.tensors}
        g = md["general.architecture"]
        assert md[f"{g}.block_count"] == 5 and md[f"{g}.nextn_predict_layers"] == 1, arch
        assert list(md[f"{g}.attention.recurrent_layers"]) == [True, False, True, False, False]
        assert {"blk.4.nextn.eh_proj.weight", "blk.4.attn_q.weight", "blk.0.ssm_a"} <= names
    from safetensors.numpy import load_file

    a_log = load_file(work.model("qwen35") / "model.safetensors")[
        "model.layers.0.linear_attn.A_log"
    ]
    a_log = a_log.astype(np.float32)
    r = nv // nk
    tiled = [a_log[k * r + v] for v in range(r) for k in range(nk)]  # v0 of each k, v1 ...
    got = {x[0]: x for x in _tensors(work.files("qwen35", "f32")[0])}["blk.0.ssm_a"]
    np.testing.assert_allclose(np.frombuffer(got[3], np.float32), -np.exp(tiled), rtol=1e-6)
    assert not np.array_equal(tiled, a_log)


def test_deltanet_hub_config_forms(work, tmp_path):
    """The forms the Hub's configs take convert as the reference converts them:

    * Qwen3.5 as published: ``Qwen3_5ForConditionalGeneration`` (``text_config``,
      ``model.language_model.*`` beside a vision tower, ``mtp.*`` at the top): the text
      model's file;
    * a config without ``mrope_section``: Qwen3.5's default sections, written last;
    * a Qwen3-Next config without ``layer_types``: AutoConfig derives them from
      ``full_attention_interval`` and drops that field (the reference then writes 4)."""
    import shutil

    from safetensors.numpy import load_file, save_file

    vlm = tmp_path / "qwen35-vlm"
    shutil.copytree(work.model("qwen35"), vlm)
    text = json.loads((vlm / "config.json").read_text())
    text.pop("architectures")
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "text_config": text, "vision_config": {"model_type": "qwen3_5", "depth": 1,
           "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "out_hidden_size": 64},
           "tie_word_embeddings": True}  # fmt: skip
    (vlm / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = load_file(vlm / "model.safetensors")
    sd = {k.replace("model.", "model.language_model.", 1): v for k, v in sd.items()}
    rng = np.random.default_rng(0)
    sd["model.visual.patch_embed.proj.weight"] = rng.standard_normal((16, 3, 2, 16, 16), np.float32)
    sd["model.visual.blocks.0.attn.qkv.weight"] = rng.standard_normal((48, 16), np.float32)
    save_file(sd, vlm / "model.safetensors", metadata={"format": "pt"})

    no_sections = tmp_path / "qwen35-no-sections"
    shutil.copytree(work.model("qwen35"), no_sections)
    c = json.loads((no_sections / "config.json").read_text())
    del c["rope_parameters"]["mrope_section"]
    (no_sections / "config.json").write_text(json.dumps(c, indent=2))

    no_types = tmp_path / "qwen3next-no-layer-types"
    shutil.copytree(work.model("qwen3next"), no_types)
    c = json.loads((no_types / "config.json").read_text())
    assert c.pop("layer_types") and c["full_attention_interval"] == 2
    (no_types / "config.json").write_text(json.dumps(c, indent=2))

    folders = [vlm, no_sections, no_types]
    _run_reference([(str(d), str(tmp_path / f"{d.name}-ref.gguf"), "f16") for d in folders])
    for d in folders:
        ours = tmp_path / f"{d.name}.gguf"
        hf_to_gguf(d, ours, "f16")
        _same_file(ours, tmp_path / f"{d.name}-ref.gguf")
    assert _tensors(tmp_path / "qwen35-vlm.gguf") == _tensors(work.files("qwen35", "f16")[0])
    from weightsmith.gguf import read

    with read(tmp_path / "qwen35-no-sections.gguf") as f:
        rows = [k for k in f.metadata if k.startswith("qwen35.")]
        assert rows[-1] == "qwen35.rope.dimension_sections"  # the class's default, last
        assert list(f.metadata[rows[-1]]) == [11, 11, 10, 0]
    with read(tmp_path / "qwen3next-no-layer-types.gguf") as f:
        assert f.metadata["qwen3next.full_attention_interval"] == 4
        recurrent = list(f.metadata["qwen3next.attention.recurrent_layers"])
        assert recurrent == [True, False, True, False, False]


def test_qwen35_pre_tokenizer(work):
    """The ``qwen35`` pre-tokenizer GGUF -> HF writes (the fixture's tokenizer.json is built
    by it) splits as transformers' own Qwen3.5 tokenizer does: letters keep their
    combining marks, which Qwen2's split (the Qwen3-Next fixture's) cuts off."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    def pieces(tk: Tokenizer, text: str) -> list[str]:
        text = tk.normalizer.normalize_str(text) if tk.normalizer else text
        return [p for p, _ in tk.pre_tokenizer.pre_tokenize_str(text)]

    ours = Tokenizer.from_file(str(work.model("qwen35") / "tokenizer.json"))
    theirs = AutoTokenizer.from_pretrained(work.model("qwen35moe"))  # a qwen3_5_moe_text model
    assert type(theirs).__name__ == "Qwen3_5Tokenizer"
    qwen2 = Tokenizer.from_file(str(work.model("qwen3next") / "tokenizer.json"))
    text = "Cafe\u0301 नमस्ते x\u0308y 12345 don't  \n\n tabs\tand ünïcödé!"
    assert pieces(ours, text) == pieces(theirs.backend_tokenizer, text)
    assert pieces(ours, text) != pieces(qwen2, text)
    assert ours.encode(text).ids == theirs(text)["input_ids"]


# --------------------------------------------------------------------------- Jamba


def test_jamba_layers_are_exercised(work, tmp_path):
    """Guard against a vacuous pass: the tiny Jamba has Mamba and attention layers, each once
    with experts and once dense (llama.cpp tells them apart by ``head_count_kv`` and the
    router), the dt / B / C norms, GQA 4 that llama-quantize does not see, and GGUF -> HF
    gives the layer periods back."""
    from support.hf_models import config
    from weightsmith.gguf import read

    with read(work.files("jamba", "f16")[0]) as f:
        md, names = f.metadata, {t.name for t in f.tensors}
    assert list(md["jamba.attention.head_count_kv"]) == [0, 1, 0, 1]
    assert md["jamba.expert_count"] == 4 and md["jamba.ssm.time_step_rank"] == 16
    kinds = [(True, True), (False, False), (True, False), (False, True)]  # (mamba, MoE)
    for i, (ssm, moe) in enumerate(kinds):
        for t in ("ssm_dt_norm", "ssm_b_norm", "ssm_c_norm", "ssm_x"):
            assert (f"blk.{i}.{t}.weight" in names) == ssm, (i, t)
        assert (f"blk.{i}.attn_q.weight" in names) == (not ssm), i
        assert (f"blk.{i}.ffn_gate_inp.weight" in names) == moe, i
        assert (f"blk.{i}.ffn_gate.weight" in names) == (not moe), i
    # GQA 4, but llama-quantize reads layer 0's (a Mamba layer: 0), so attn_v is not raised
    # (to Q5_K); GGUF -> GGUF quantization reads the per-layer array the same way
    from weightsmith.quant.file import quantize_file

    ours, ref = work.files("jamba", "iq4_xs")
    types = {x[0]: x[1] for x in _tensors(ours)}
    assert {types[f"blk.{i}.attn_v.weight"] for i in (1, 3)} == {
        int(gguf.GGMLQuantizationType.IQ4_XS)
    }
    quantize_file(work.files("jamba", "f32")[1], tmp_path / "iq4_xs.gguf", "iq4_xs")
    assert (tmp_path / "iq4_xs.gguf").read_bytes() == ref.read_bytes()
    gguf_to_hf(work.files("jamba", "f16")[0], tmp_path / "back", dtype="bf16")
    orig, back = config(work.model("jamba")), config(tmp_path / "back")
    for k in ("attn_layer_period", "attn_layer_offset", "expert_layer_period",
              "expert_layer_offset", "num_experts", "num_experts_per_tok", "mamba_dt_rank",
              "mamba_expand", "mamba_d_state", "mamba_d_conv", "mamba_conv_bias",
              "mamba_proj_bias", "num_key_value_heads", "rms_norm_eps"):  # fmt: skip
        assert back[k] == orig[k], k


def _jamba_fused(src: Path, dst: Path) -> Path:
    """The tiny Jamba in transformers 5's own save layout: each MoE layer's experts fused
    into ``experts.gate_up_proj`` ``[n_expert, 2 * n_ff, n_embd]`` and ``experts.down_proj``."""
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    sd = load_file(dst / "model.safetensors")
    out = {k: v for k, v in sd.items() if ".experts." not in k}
    for pre in sorted({k.split("experts.")[0] for k in sd if ".experts." in k}):
        n = sum(1 for k in sd if k.startswith(pre + "experts.") and k.endswith("down_proj.weight"))
        x = [f"{pre}experts.{i}." for i in range(n)]
        out[pre + "experts.gate_up_proj"] = np.stack(
            [np.concatenate([sd[e + "gate_proj.weight"], sd[e + "up_proj.weight"]]) for e in x]
        )
        out[pre + "experts.down_proj"] = np.stack([sd[e + "down_proj.weight"] for e in x])
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_jamba_hub_forms(work, tmp_path):
    """The other forms of a Jamba checkpoint convert as the reference converts them, to the
    tiny model's tensors:

    * Mini-Jamba's names (``.moe.`` for ``.feed_forward.``, ``B_layernorm`` /
      ``C_layernorm``, ``pre_moe_layernorm``) and a dense layer stored as ``experts.0``,
      with no ``tokenizer.model``: the byte-fallback BPE tokenizer.json (here the one GGUF
      -> HF writes) read as LlamaHfVocab, ``add_space_prefix = false``;
    * transformers 5's own layout (fused experts, which the reference cannot map) gives
      the reference's file of the per-expert checkpoint, byte for byte."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from weightsmith.gguf import read

    src = tmp_path / "mini-jamba"
    shutil.copytree(work.model("jamba"), src)
    (src / "tokenizer.model").unlink()
    gguf_to_hf(work.files("jamba", "f32")[0], tmp_path / "back", dtype="f32")
    for f in (tmp_path / "back").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, src / f.name)
    assert (src / "tokenizer.json").is_file()
    sd = load_file(src / "model.safetensors")
    renames = [("layers.0.feed_forward.", "layers.0.moe."),
               ("layers.2.feed_forward.", "layers.2.feed_forward.experts.0."),
               ("mamba.b_layernorm", "mamba.B_layernorm"),
               ("mamba.c_layernorm", "mamba.C_layernorm"),
               ("layers.3.pre_ff_layernorm", "layers.3.pre_moe_layernorm")]  # fmt: skip
    for a, b in renames:
        sd = {k.replace(a, b): v for k, v in sd.items()}
    assert "model.layers.2.feed_forward.experts.0.up_proj.weight" in sd
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    ours = _same_as_reference_f16(src, tmp_path)
    with read(ours) as f:
        assert not f.metadata["tokenizer.ggml.add_space_prefix"]
        assert f.metadata["tokenizer.ggml.model"] == "llama"
    tiny_ref = work.files("jamba", "f16")[1]
    assert sorted(_tensors(ours)) == sorted(_tensors(tiny_ref))

    # the same folder name: general.name comes from it
    fused = _jamba_fused(work.model("jamba"), tmp_path / "fused" / "jamba")
    hf_to_gguf(fused, tmp_path / "fused.gguf", "f16")
    assert (tmp_path / "fused.gguf").read_bytes() == tiny_ref.read_bytes()


def test_jamba_tokenizer_must_be_spm_or_byte_fallback_bpe(work, tmp_path):
    """Jamba without tokenizer.model takes the reference's LlamaHfVocab path only: a
    byte-level BPE (GPT-2's) or no tokenizer at all fails with a named error before
    anything is written."""
    import shutil

    from support.hf_models import _bpe_tokenizer
    from weightsmith import errors as E

    src = tmp_path / "jamba"
    shutil.copytree(work.model("jamba"), src)
    (src / "tokenizer.model").unlink()
    out = tmp_path / "out.gguf"
    with pytest.raises(E.TokenizerFilesMissing, match=r"tokenizer\.model or tokenizer\.json"):
        hf_to_gguf(src, out, "f16")
    _bpe_tokenizer(src, "gpt-2")
    with pytest.raises(E.TokenizerInconsistent, match="byte-fallback"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


# --------------------------------------------------------------------------- Nemotron-H MoE


def test_nemotronhmoe_layers_are_exercised(work):
    """Guard against a vacuous pass: the tiny Nemotron-H MoE file is ``nemotron_h_moe``
    with experts at the ``E`` layers and the MTP block after the trunk (attention and MoE
    at once); its routed experts are 3-D, in the latent size and quantized; the latent
    projections, the shared expert and the router bias (the checkpoint's buffer) are there."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(work.files("nemotronhmoe", "f16")[0]) as f:
        md, names = f.metadata, {t.name for t in f.tensors}
    assert md["general.architecture"] == "nemotron_h_moe"
    g = "nemotron_h_moe"
    assert md[f"{g}.block_count"] == 6 and md[f"{g}.nextn_predict_layers"] == 1
    assert list(md[f"{g}.feed_forward_length"]) == [0, 256, 0, 0, 256, 256]
    assert list(md[f"{g}.attention.head_count_kv"]) == [0, 0, 0, 2, 0, 2]
    assert md[f"{g}.moe_latent_size"] == 128 and md[f"{g}.expert_count"] == 4
    mtp = {"nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
           "nextn.shared_head_norm.weight", "attn_q.weight", "post_attention_norm.weight",
           "ffn_latent_down.weight", "ffn_up_exps.weight", "exp_probs_b.bias"}  # fmt: skip
    assert {f"blk.5.{n}" for n in mtp} <= names
    assert {"blk.1.ffn_latent_up.weight", "blk.4.ffn_down_shexp.weight", "blk.0.ssm_a"} <= names
    q = {x[0]: x for x in _tensors(work.files("nemotronhmoe", "q4_k_m")[0])}
    _, tid, dims, _ = q["blk.1.ffn_down_exps.weight"]
    assert list(dims) == [256, 128, 4] and tid not in (0, 1)  # n_ff, latent, experts
    src = load_file(work.model("nemotronhmoe") / "model.safetensors")
    bias = src["backbone.layers.4.mixer.gate.e_score_correction_bias"].astype(np.float32)
    assert np.abs(bias).max() > 0.05  # not the zeros transformers initialises
    got = {x[0]: x for x in _tensors(work.files("nemotronhmoe", "f32")[0])}[
        "blk.4.exp_probs_b.bias"
    ]
    np.testing.assert_array_equal(np.frombuffer(got[3], np.float32), bias)


def test_nemotronhmoe_nano_and_hub_config(work, tmp_path):
    """The Nemotron 3 Nano layout (no latent projections, no MTP block; here with group
    routing: 2 groups of 2 experts, 1 used) converts as the reference converts it, and
    llama.cpp runs ours as it runs the reference's and as transformers runs the original;
    the Hub's config form (``hybrid_override_pattern`` with ``E``, ``num_hidden_layers``)
    gives the file transformers 5's form (``layers_block_type``) gives."""
    import shutil

    from support.hf_models import build

    nano = build("nemotronhmoe", tmp_path / "nano", latent=None, mtp=False, n_group=2,
                 topk_group=1)  # fmt: skip
    ref, ours = tmp_path / "nano-ref.gguf", tmp_path / "nano.gguf"
    _run_reference([(str(nano), str(ref), "f32")])
    hf_to_gguf(nano, ours, "f32")
    _same_file(ours, ref)
    names = {x[0] for x in _tensors(ours)}
    assert "blk.1.ffn_up_exps.weight" in names and not any("latent" in n for n in names)
    tokens = _prompt("nemotronhmoe")
    got = _llama_logits(ours, tokens)
    np.testing.assert_array_equal(got, _llama_logits(ref, tokens))
    hf = _hf_logits(nano, tokens)
    bound = 2e-3 * max(float(np.abs(hf).max()), 1.0)
    assert np.abs(got - hf).max() <= bound
    # the groups matter: without them transformers' logits move far (2.9 at scale 3.6)
    ungrouped = _hf_logits(nano, tokens, n_group=1, topk_group=1)
    assert np.abs(got - ungrouped).max() > 100 * bound

    hub = tmp_path / "nemotronhmoe"  # general.name is the folder name
    shutil.copytree(work.model("nemotronhmoe"), hub)
    c = json.loads((hub / "config.json").read_text())
    kinds = {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}
    c["hybrid_override_pattern"] = "".join(kinds[k] for k in c.pop("layers_block_type"))
    c["num_hidden_layers"] = len(c["hybrid_override_pattern"])
    (hub / "config.json").write_text(json.dumps(c, indent=2))
    hf_to_gguf(hub, tmp_path / "hub.gguf", "f16")
    want = work.files("nemotronhmoe", "f16")[1]
    assert (tmp_path / "hub.gguf").read_bytes() == want.read_bytes()


def test_nemotronhmoe_one_mtp_block(work, tmp_path):
    """More than one MTP block (the reference asserts one) is a named error before any
    output is written."""
    import shutil

    from weightsmith import errors as E

    src = tmp_path / "nemotronhmoe"
    shutil.copytree(work.model("nemotronhmoe"), src)
    c = json.loads((src / "config.json").read_text())
    c["num_nextn_predict_layers"] = 2
    (src / "config.json").write_text(json.dumps(c, indent=2))
    out = tmp_path / "out.gguf"
    with pytest.raises(E.InvalidModelConfig, match="num_nextn_predict_layers"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


def test_gemma4_unified_config_forms(work, tmp_path):
    """transformers 5 saves Gemma 4 Unified's text config without MoE fields: the pinned
    reference then stops (``KeyError`` on ``moe_intermediate_size``; pinned so a fix
    shows), ours writes the file the fixture's form (the field null) gives.  Bad
    ``suppress_tokens`` are a named error before anything is written."""
    import shutil

    from weightsmith import errors as E

    src = tmp_path / "gemma4unified"
    shutil.copytree(work.model("gemma4unified"), src)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["text_config"].pop("moe_intermediate_size", "absent") is None
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    with pytest.raises(AssertionError, match="moe_intermediate_size"):
        _run_reference([(str(src), str(tmp_path / "ref.gguf"), "f16")])
    hf_to_gguf(src, tmp_path / "o.gguf", "f16")
    assert (tmp_path / "o.gguf").read_bytes() == work.files("gemma4unified", "f16")[1].read_bytes()
    gen = json.loads((src / "generation_config.json").read_text())
    gen["suppress_tokens"] = [5, "9"]
    (src / "generation_config.json").write_text(json.dumps(gen))
    out = tmp_path / "bad.gguf"
    with pytest.raises(E.InvalidModelConfig, match="suppress_tokens"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


# --------------------------------------------------------------------------- Gemma 4 assistants

# the MTP drafters (GGUF ``gemma4-assistant``), with a plain LM head and with the ordered
# embedding the reference leaves out.  Neither runs alone: transformers runs one on the
# target's hidden states and shared KV, the pinned llama.cpp only beside the target
# model's context (``ctx_other``)
ASSISTANTS = ["gemma4assistant", "gemma4unifiedassistant"]


@pytest.mark.parametrize("t", REF_TYPES + QUANT_TYPES)
@pytest.mark.parametrize("arch", ASSISTANTS)
def test_assistant_same_as_reference(work, arch, t):
    _same_file(*work.files(arch, t))


def test_gemma4_variant_metadata(work):
    """Guard against a vacuous pass: the Unified file has the suppress tokens and no
    per-layer embeddings; the assistants' files say the target's hidden size, count every
    layer as a nextn layer, have no K/V projections and the two projections; the ordered
    embedding is not converted (as the reference leaves it out)."""
    from support.hf_models import GEMMA4_SUPPRESS
    from weightsmith.gguf import read

    with read(work.files("gemma4unified", "f16")[0]) as f:
        md, names = f.metadata, {t.name for t in f.tensors}
    assert list(md["tokenizer.ggml.suppress_tokens"]) == GEMMA4_SUPPRESS
    assert md["gemma4.embedding_length_per_layer_input"] == 0
    assert md["gemma4.attention.shared_kv_layers"] == 2
    assert not any("per_layer" in n or "vision" in n or "audio" in n for n in names)
    for arch in ASSISTANTS:
        with read(work.files(arch, "f16")[0]) as f:
            md, names = f.metadata, {t.name for t in f.tensors}
        g = "gemma4-assistant"
        assert md["general.architecture"] == g
        assert md[f"{g}.embedding_length_out"] == 256 and md[f"{g}.embedding_length"] == 128
        assert md[f"{g}.nextn_predict_layers"] == md[f"{g}.block_count"] == 2
        assert md[f"{g}.attention.shared_kv_layers"] == 2
        assert {"nextn.pre_projection.weight", "nextn.post_projection.weight"} <= names
        assert not any("attn_k" in n or "attn_v" in n or "masked" in n for n in names), arch
    from safetensors import safe_open

    with safe_open(work.model("gemma4unifiedassistant") / "model.safetensors", "np") as f:
        assert any(k.startswith("masked_embedding.") for k in f.keys())  # noqa: SIM118


def _llama_cpp_alone(path: Path) -> tuple[bool, bool]:
    """(the pinned llama.cpp loads the model at ``path``, it creates a context for it)."""
    import llama_cpp

    model = llama_cpp.llama_model_load_from_file(
        str(path).encode(), llama_cpp.llama_model_default_params()
    )
    if not model:
        return False, False
    try:
        ctx = llama_cpp.llama_init_from_model(model, _llama_cpp_ctx_params())
        if ctx:
            llama_cpp.llama_free(ctx)
        return True, bool(ctx)
    finally:
        llama_cpp.llama_model_free(model)


def _llama_cpp_ctx_params(other=None):
    import llama_cpp

    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 64
    cp.n_threads = cp.n_threads_batch = 2
    cp.type_k = cp.type_v = 0  # f32 KV, as the Gemma 4 logits checks
    if other is not None:
        cp.ctx_other = other
    return cp


def _llama_cpp_draft(assistant: Path, target: Path, prompt: list[int], token: int, h):
    """llama.cpp's drafter logits, as its speculative decoding runs it: the target decodes
    ``prompt``; the assistant, given the target's context, decodes ``token`` at the next
    position with the target hidden state ``h`` (one batch row carrying both)."""
    import ctypes

    import llama_cpp

    llama_cpp.llama_backend_init()
    models, ctxs, batches = [], [], []
    mp = llama_cpp.llama_model_default_params()
    try:
        for p in (target, assistant):
            models.append(llama_cpp.llama_model_load_from_file(str(p).encode(), mp))
            assert models[-1], p
            ctxs.append(llama_cpp.llama_init_from_model(
                models[-1], _llama_cpp_ctx_params(ctxs[0] if ctxs else None)))  # fmt: skip
            assert ctxs[-1], p
        for k, (ctx, toks) in enumerate(((ctxs[0], prompt), (ctxs[1], [token]))):
            b = llama_cpp.llama_batch_init(len(toks), 0, 1)
            batches.append(b)
            b.n_tokens = len(toks)
            for i, t in enumerate(toks):
                b.token[i], b.pos[i] = t, i + k * len(prompt)
                b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = 1, 0, i == len(toks) - 1
            if k == 1:
                emb = np.ascontiguousarray(h, dtype=np.float32)
                b.embd = emb.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            rc = llama_cpp.llama_decode(ctx, b)
            b.embd = ctypes.POINTER(ctypes.c_float)()  # not the batch's to free
            assert rc == 0, rc
        n = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(models[1]))
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctxs[1], 0), (n,)).copy()
    finally:
        for b in batches:
            llama_cpp.llama_batch_free(b)
        for ctx in reversed(ctxs):
            llama_cpp.llama_free(ctx)
        for model in reversed(models):
            llama_cpp.llama_model_free(model)


def _hf_draft(assistant: Path, target: Path, prompt: list[int], token: int, h) -> np.ndarray:
    """transformers' drafter logits for the same step (its assisted decoding's inputs: the
    target's embedding of ``token`` beside ``h``, the target's shared KV of ``prompt``)."""
    import torch
    from transformers import AutoModelForCausalLM

    tgt = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    dft = AutoModelForCausalLM.from_pretrained(assistant, dtype=torch.float32).eval()
    with torch.no_grad():
        kv = tgt(torch.tensor([prompt]), return_shared_kv_states=True).shared_kv_states
        emb = tgt.get_input_embeddings()(torch.tensor([[token]]))
        x = torch.cat([emb, torch.from_numpy(np.asarray(h, np.float32))[None, None]], -1)
        out = dft(inputs_embeds=x, position_ids=torch.tensor([[len(prompt)]]),
                  shared_kv_states=dict(kv))  # fmt: skip
    return out.logits[0, 0].numpy()


@pytest.mark.parametrize("arch", ASSISTANTS)
def test_assistant_in_llama_cpp(work, arch):
    """The pinned llama.cpp loads our assistant file as it loads the reference's; neither
    gets a context alone (the drafter reads its target's KV).  Beside a Gemma 4 target's
    context (the ``gemma4`` fixture: hidden size 256, the same head sizes and KV heads) one
    draft step gives the same logits on both files, and transformers' (the original
    assistant beside the original target) within the Gemma 4 bound.  The ordered
    embedding is not in the GGUF: llama.cpp scores every token, the original only its top
    clusters' tokens, which are compared."""
    ours, ref = work.files(arch, "f32")
    assert _llama_cpp_alone(ours) == _llama_cpp_alone(ref) == (True, False)
    target = work.files("gemma4", "f32")[0]
    prompt, token = _prompt("gemma4"), 42
    h = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    got = _llama_cpp_draft(ours, target, prompt, token, h)
    np.testing.assert_array_equal(got, _llama_cpp_draft(ref, target, prompt, token, h))
    want = _hf_draft(work.model(arch), work.model("gemma4"), prompt, token, h)
    ordered = arch == "gemma4unifiedassistant"
    scored = want > want.min() if ordered else np.ones(want.shape, bool)
    assert scored.sum() > 0 and (scored.sum() < want.size) == ordered
    # each runtime drafts from its own target's KV: the Gemma 4 target's runtime gap (see
    # LLAMA_CPP_F32_KV) carries over; measured 0.0026 at scale 1.7 (plain head) and 0.0037
    # at scale 1.9 (ordered embedding's scored tokens)
    scale = float(np.abs(want[scored]).max())
    assert np.abs(got[scored] - want[scored]).max() <= 3e-3 * max(scale, 1.0)


def _assistant_outputs(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """transformers' (projected hidden state, logits) of the assistant in ``folder`` for
    seeded target hidden states and shared KV of the fixture's shapes."""
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    # one query token, as assisted decoding drafts (with more, transformers' KV-shared
    # path slices per-layer inputs an assistant does not have)
    n, n_kv, kv_heads = 1, 8, 2
    embeds = torch.randn(1, n, 2 * m.config.backbone_hidden_size, generator=g)
    kv = {
        t: tuple(torch.randn(1, kv_heads, n_kv, hd, generator=g) for _ in range(2))
        for t, hd in (("sliding_attention", 64), ("full_attention", 128))
    }
    pos = torch.arange(n_kv, n_kv + n)[None]
    with torch.no_grad():
        out = m(inputs_embeds=embeds, shared_kv_states=kv, position_ids=pos)
    return out.last_hidden_state[0].numpy(), out.logits[0].numpy()


@pytest.mark.parametrize("arch", ASSISTANTS)
def test_assistant_round_trip(work, arch, tmp_path):
    """GGUF -> HF: transformers loads the assistant (Gemma4AssistantForCausalLM) with every
    converted tensor equal, and gives the original's outputs for the same target states.
    The ordered embedding is not in the GGUF: the rebuilt drafter scores the whole
    vocabulary, the original only its top clusters' tokens, which score the same."""
    from safetensors.numpy import load_file

    src = work.model(arch)
    back = tmp_path / "back"
    gguf_to_hf(work.files(arch, "f32")[0], back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["model_type"] == "gemma4_assistant" and cfg["text_config"]["num_hidden_layers"] == 2
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    dropped = {k for k in orig if k.startswith("masked_embedding.")}
    assert sorted(got) == sorted(set(orig) - dropped)
    for k, v in got.items():
        np.testing.assert_array_equal(v, orig[k].astype(np.float32), err_msg=k)
    h0, l0 = _assistant_outputs(src)
    h1, l1 = _assistant_outputs(back)
    np.testing.assert_allclose(h1, h0, rtol=0, atol=1e-4 * max(1.0, float(np.abs(h0).max())))
    scored = np.ones(l0.shape, bool)
    if dropped:  # the unscored positions hold one fill value below every score
        scored = l0 > l0.min()
        assert scored.sum(-1).min() > 0 and scored.sum(-1).max() < l0.shape[-1]
    atol = 1e-4 * max(1.0, float(np.abs(l1).max()))
    np.testing.assert_allclose(l1[scored], l0[scored], rtol=0, atol=atol)


# --------------------------------------------------------------------------- Falcon-H1

_MUP = ["embedding_multiplier", "lm_head_multiplier", "key_multiplier",
        "attention_in_multiplier", "attention_out_multiplier", "ssm_in_multiplier",
        "ssm_out_multiplier"]  # fmt: skip


def test_falconh1_multipliers_are_folded(work):
    """Guard against a vacuous pass: the tiny Falcon-H1's muP multipliers are none of them 1,
    and the reference's f32 file (ours is byte-identical to it) holds the weights times
    them, as :func:`_falcon_h1_folded` computes them from the modeling code's formulas."""
    from safetensors.numpy import load_file

    from support.hf_models import config

    src = work.model("falconh1")
    cfg = config(src)
    mults = [cfg[k] for k in _MUP] + cfg["mlp_multipliers"] + cfg["ssm_multipliers"]
    assert len(mults) == 14 and all(x != 1.0 for x in mults)
    orig = {k: v.astype(np.float32) for k, v in load_file(src / "model.safetensors").items()}
    want = _falcon_h1_folded(orig, cfg)
    got = {x[0]: x for x in _tensors(work.files("falconh1", "f32")[1])}
    pairs = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output.weight": "lm_head.weight",
        "blk.1.attn_q.weight": "model.layers.1.self_attn.q_proj.weight",
        "blk.1.attn_k.weight": "model.layers.1.self_attn.k_proj.weight",
        "blk.1.attn_output.weight": "model.layers.1.self_attn.o_proj.weight",
        "blk.0.ffn_gate.weight": "model.layers.0.feed_forward.gate_proj.weight",
        "blk.0.ffn_down.weight": "model.layers.0.feed_forward.down_proj.weight",
        "blk.0.ssm_in.weight": "model.layers.0.mamba.in_proj.weight",
        "blk.0.ssm_out.weight": "model.layers.0.mamba.out_proj.weight",
    }
    for g, h in pairs.items():
        _, _, _, data = got[g]
        a = np.frombuffer(data, np.float32).reshape(want[h].shape)
        np.testing.assert_allclose(a, want[h], rtol=1e-6, atol=0, err_msg=g)
        assert not np.allclose(a, orig[h], rtol=1e-3, atol=0), g
    # the one tensor the multipliers leave alone, in the GGUF's column layout
    _, _, _, data = got["blk.0.ssm_d"]
    np.testing.assert_array_equal(np.frombuffer(data, np.float32), orig["model.layers.0.mamba.D"])


def test_falconmamba_is_mamba_with_dt_b_c_rms(work, tmp_path):
    """FalconMamba is llama.cpp's ``mamba`` with ``ssm.dt_b_c_rms`` set (plain Mamba's is
    false), and that flag is what GGUF -> HF reads back into the FalconMamba class."""
    from weightsmith.gguf import read

    for arch, flag, cls in (("falconmamba", True, "FalconMambaForCausalLM"),
                            ("mamba", False, "MambaForCausalLM")):  # fmt: skip
        path = work.files(arch, "f16")[0]
        with read(path) as f:
            assert f.metadata["general.architecture"] == "mamba"
            assert f.metadata["mamba.ssm.dt_b_c_rms"] is flag, arch
        gguf_to_hf(path, tmp_path / arch, dtype="f32")
        cfg = json.loads((tmp_path / arch / "config.json").read_text())
        assert cfg["architectures"] == [cls], arch


def test_mamba_head_copy_of_the_embedding_is_dropped(work, tmp_path):
    """A Mamba checkpoint that stores its tied head as a copy of the embedding: the
    reference compares the data and writes no ``output.weight`` (llama.cpp reuses the
    embedding); ours gives the same file, and GGUF -> HF a tied model.  A head differing
    in one value is kept."""
    import shutil

    from safetensors.numpy import load_file, save_file

    src = tmp_path / "falconmamba-tied"
    shutil.copytree(work.model("falconmamba"), src)
    sd = load_file(src / "model.safetensors")
    sd["lm_head.weight"] = sd["backbone.embeddings.weight"].copy()
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    near = tmp_path / "falconmamba-near"
    shutil.copytree(src, near)
    sd["lm_head.weight"][3, 5] += 1
    save_file(sd, near / "model.safetensors", metadata={"format": "pt"})
    folders = [src, near]
    _run_reference([(str(d), str(tmp_path / f"{d.name}-ref.gguf"), "f16") for d in folders])
    for d in folders:
        ours = tmp_path / f"{d.name}.gguf"
        hf_to_gguf(d, ours, "f16")
        _same_file(ours, tmp_path / f"{d.name}-ref.gguf")
    assert "output.weight" not in {x[0] for x in _tensors(tmp_path / "falconmamba-tied.gguf")}
    assert "output.weight" in {x[0] for x in _tensors(tmp_path / "falconmamba-near.gguf")}
    gguf_to_hf(tmp_path / "falconmamba-tied.gguf", tmp_path / "back", dtype="f32")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["tie_word_embeddings"]


def test_falconh1_hub_config_and_in_proj_bias(work, tmp_path):
    """Falcon-H1's config.json as the Hub's (top-level ``rope_theta``, no
    ``rope_parameters``) converts as the reference converts it, to the same file as
    transformers 5's form; a mixer ``in_proj`` bias, which the reference cannot convert,
    is a named error before anything is written."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from weightsmith import errors as E

    hub = tmp_path / "falconh1-hub"
    shutil.copytree(work.model("falconh1"), hub)
    c = json.loads((hub / "config.json").read_text())
    c["rope_theta"] = c.pop("rope_parameters")["rope_theta"]
    (hub / "config.json").write_text(json.dumps(c, indent=2))
    _run_reference([(str(hub), str(tmp_path / "ref.gguf"), "f16")])
    hf_to_gguf(hub, tmp_path / "ours.gguf", "f16")
    _same_file(tmp_path / "ours.gguf", tmp_path / "ref.gguf")
    # the folder's name goes into general.name: the rows and tensors are the same
    five = work.files("falconh1", "f16")[0]
    assert _tensors(tmp_path / "ours.gguf") == _tensors(five)
    rows = {k: v for k, v in _kvs(tmp_path / "ours.gguf").items() if k.startswith("falcon-h1.")}
    assert rows == {k: v for k, v in _kvs(five).items() if k.startswith("falcon-h1.")}
    assert len(rows) == 16

    bias = tmp_path / "falconh1-bias"
    shutil.copytree(work.model("falconh1"), bias)
    sd = load_file(bias / "model.safetensors")
    sd["model.layers.0.mamba.in_proj.bias"] = np.zeros(1096, sd["lm_head.weight"].dtype)
    save_file(sd, bias / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "bias.gguf"
    with pytest.raises(E.UnmappedTensor, match=r"mamba\.in_proj\.bias"):
        hf_to_gguf(bias, out, "f16")
    assert not out.exists()


def test_ssm_a_of_a_float16_checkpoint(tmp_path):
    """``A = -exp(A_log)`` is computed on the tensor as the reference holds it: a float16
    checkpoint's in float16 (bfloat16 is widened to float32 first), then stored F32.
    Mamba 1 and Mamba 2 checkpoints saved in float16 give the reference's file."""
    folders = [build(arch, tmp_path / arch, dtype="float16") for arch in ("mamba", "mamba2")]
    _run_reference([(str(d), str(tmp_path / f"{d.name}-ref.gguf"), "f32") for d in folders])
    for d in folders:
        ours = tmp_path / f"{d.name}.gguf"
        hf_to_gguf(d, ours, "f32")
        _same_file(ours, tmp_path / f"{d.name}-ref.gguf")


def test_gemma3n_gap_is_the_gelu_table(work):
    """Gemma 3n's remaining llama.cpp gap (LLAMA_CPP_GAP_BOUND) is ggml's GELU, which looks
    the f16-rounded input up in an f16 table: transformers with that GELU (and llama.cpp's
    sparsity cutoff) gives our file's logits within the harness's usual bound."""
    import torch

    class F16TableGelu(torch.nn.Module):
        def forward(self, x):
            y = torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    from transformers import AutoConfig, AutoModelForCausalLM

    src, tokens = work.model("gemma3n"), _prompt("gemma3n")
    ours = _llama_logits_f32_kv(work.files("gemma3n", "f32")[0], tokens)
    cfg = AutoConfig.from_pretrained(src)
    for k, v in _gemma3n_sparsity_as_llama_cpp(src).items():
        setattr(cfg, k, v)
    m = AutoModelForCausalLM.from_pretrained(src, config=cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        plain = m(torch.tensor([tokens])).logits[0].numpy()
        swapped = [mod for mod in m.modules() if hasattr(mod, "act_fn")]
        assert len(swapped) == 2 * cfg.num_hidden_layers  # each layer's MLP and gate
        for mod in swapped:
            mod.act_fn = F16TableGelu()
        table = m(torch.tensor([tokens])).logits[0].numpy()
    bound = 2e-3 * max(float(np.abs(table).max()), 1.0)
    assert np.abs(ours - table).max() <= bound
    assert np.abs(ours - plain).max() > 2 * bound


def test_gemma3n_text_half_of_conditional_generation(work, tmp_path):
    """Gemma 3n as the Hub publishes it (Gemma3nForConditionalGeneration: ``text_config``,
    ``model.language_model.`` tensors beside the vision and audio towers and their
    embedders): the text half converts exactly as the reference converts it, and as the
    text model alone."""
    src = _gemma3n_conditional(work, tmp_path)
    ours = _same_as_reference_f16(src, tmp_path)
    assert _tensors(ours) == _tensors(work.files("gemma3n", "f16")[0])


def _gemma3n_conditional(work, tmp_path: Path) -> Path:
    """The ``gemma3n`` model as the Hub lays out Gemma3nForConditionalGeneration, with a few
    vision and audio tensors beside the text."""
    import shutil

    from safetensors.numpy import load_file, save_file

    src = tmp_path / "gemma3n-vlm"
    shutil.copytree(work.model("gemma3n"), src)
    text = json.loads((src / "config.json").read_text())
    text.pop("architectures")
    cfg = {"architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n",
           "text_config": text, "vision_config": {"model_type": "gemma3n_vision"},
           "audio_config": {"model_type": "gemma3n_audio"}}  # fmt: skip
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = {
        k.replace("model.", "model.language_model.", 1): v
        for k, v in load_file(src / "model.safetensors").items()
    }
    rng = np.random.default_rng(0)
    for name, shape in (
        ("model.vision_tower.timm_model.conv_stem.conv.weight", (8, 3, 3, 3)),
        ("model.embed_vision.embedding.weight", (4, 16)),
        ("model.embed_vision.hard_embedding_norm.weight", (16,)),
        ("model.audio_tower.subsample_conv_projection.conv_0.conv.weight", (8, 1, 3, 3)),
        ("model.embed_audio.embedding_projection.weight", (64, 16)),
    ):
        sd[name] = rng.standard_normal(shape).astype(np.float32)
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    return src


def test_gemma3n_sparsity_scale_is_torchs(monkeypatch):
    """``activation_sparsity_scale``: the reference's float32 ``Normal(0, 1).icdf`` values
    bit for bit with torch importable, over a 0.001 grid of [0, 1]; without torch (the
    plain install) within 1 ulp of them (torch's own erfinv moves by 1 ulp with the CPU)."""
    import torch

    from weightsmith.convert.arch.gemma3n import sparsity_scale

    grid = [i / 1000 for i in range(1001)]
    normal = torch.distributions.normal.Normal(0, 1)
    want = np.array([normal.icdf(torch.tensor(s, dtype=torch.float32)).item() for s in grid])
    assert np.array_equal([sparsity_scale(s) for s in grid], want)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    got = np.array([sparsity_scale(s) for s in grid], dtype=np.float32)
    want32 = want.astype(np.float32)
    assert np.isneginf(got[0]) and np.isposinf(got[-1])
    ulps = np.abs(got[1:-1].view(np.int32).astype(np.int64) - want32[1:-1].view(np.int32))
    assert ulps.max() <= 1, ulps.max()
    assert (ulps == 0).mean() > 0.9  # mostly exact: the fallback is the same math


def test_gemma3n_altup_streams_other_than_4_are_refused(work, tmp_path):
    """The reference asserts 4 AltUp streams; a config naming another count is refused
    with InvalidModelConfig before any output, where the reference stops too."""
    import shutil

    from weightsmith import errors as E

    src = tmp_path / "gemma3n"
    shutil.copytree(work.model("gemma3n"), src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["altup_num_inputs"] = 2
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "o.gguf"
    with pytest.raises(E.InvalidModelConfig, match="altup_num_inputs"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()
    with pytest.raises(AssertionError, match="altup"):
        _run_reference([(str(src), str(tmp_path / "ref.gguf"), "f16")])


def test_gemma3n_gguf_without_the_per_layer_arrays(work, tmp_path):
    """A ``gemma3n`` GGUF without ``sliding_window_pattern`` or ``feed_forward_length``
    (llama.cpp then takes every 5th layer as full, the config class's default too) still
    converts back: the default layer types, the MLP widths off ``ffn_up``; transformers
    gives the original's logits."""
    from weightsmith.gguf import edit

    src = work.files("gemma3n", "f32")[0]
    bare = edit(src, remove=["gemma3n.attention.sliding_window_pattern",
                             "gemma3n.feed_forward_length"], out=tmp_path / "bare.gguf")  # fmt: skip
    back = tmp_path / "back"
    gguf_to_hf(bare, back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    want = json.loads((work.model("gemma3n") / "config.json").read_text())["layer_types"]
    assert cfg["layer_types"] == want  # the tiny model uses the default pattern
    assert cfg["intermediate_size"] == [128] * cfg["num_hidden_layers"]
    tokens = _prompt("gemma3n")
    a, b = _hf_logits(work.model("gemma3n"), tokens), _hf_logits(back, tokens)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * max(1.0, float(np.abs(a).max())))


def test_ernie4_5_fused_paddle_layout_refused(work, tmp_path):
    """ERNIE 4.5 as the Paddle checkpoints store it (``qkv_proj``, ``up_gate_proj``
    fused): not read (transformers' class has the projections apart, so GGUF -> HF could
    not give them back); a named error naming the tensor, nothing written."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from weightsmith import errors as E

    src = tmp_path / "fused"
    shutil.copytree(work.model("ernie4_5"), src)
    sd = load_file(src / "model.safetensors")
    for i in range(2):
        att, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        sd[att + "qkv_proj.weight"] = np.concatenate(
            [sd.pop(att + x + "_proj.weight") for x in "qkv"]
        )
        sd[mlp + "up_gate_proj.weight"] = np.concatenate(
            [sd.pop(mlp + "gate_proj.weight"), sd.pop(mlp + "up_proj.weight")]
        )
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(E.UnmappedTensor, match=r"up_gate_proj|qkv_proj"):
        hf_to_gguf(src, tmp_path / "out" / "x.gguf", "f16")
    assert not (tmp_path / "out").exists()


def test_ernie4_5_moe_mtp_block_not_converted(work, tmp_path):
    """The Hub's ERNIE 4.5 MoE checkpoints carry an MTP block (``model.mtp_block.N``,
    ``mtp_emb_norm``, ``mtp_hidden_norm``, ``mtp_linear_proj``), which the reference's
    class filters out: with one added, ours is byte for byte the file without it (the
    same folder name, so the same general.name), which is the reference's."""
    import shutil

    from safetensors.numpy import load_file, save_file

    src = tmp_path / "ernie4_5_moe"
    shutil.copytree(work.model("ernie4_5_moe"), src)
    sd = load_file(src / "model.safetensors")
    rng = np.random.default_rng(5)
    w = sd["model.layers.0.self_attn.q_proj.weight"]
    for k in ("mtp_block.0.self_attn.q_proj.weight", "mtp_linear_proj.0.weight"):
        sd["model." + k] = rng.standard_normal(w.shape).astype(w.dtype)
    for k in ("mtp_emb_norm.0.weight", "mtp_hidden_norm.0.weight"):
        sd["model." + k] = rng.standard_normal(w.shape[1:]).astype(w.dtype)
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    hf_to_gguf(src, tmp_path / "ours.gguf", "f16")
    ours, ref = work.files("ernie4_5_moe", "f16")
    _same_file(ours, ref)
    assert (tmp_path / "ours.gguf").read_bytes() == ours.read_bytes()


def test_qwen4exp_gap_is_the_gdn_output_gate(work, tmp_path):
    """Where llama.cpp and transformers part on Qwen4-Exp: the gated DeltaNet's output
    gate.  The pinned llama.cpp's qwen4exp graph always gates with sigmoid; transformers
    takes ``output_gate_type``, else ``hidden_act`` (silu).  Neither converter writes the
    gate: the checkpoint saying silu gives the reference's file and ours byte for byte as
    with sigmoid.  On that one file llama.cpp agrees with transformers run with sigmoid
    (the tiny model's) and not with silu.  GGUF -> HF writes sigmoid (test_round_trip)."""
    src, tokens = work.model("qwen4exp"), _prompt("qwen4exp")
    silu = tmp_path / "silu" / src.name
    silu.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "config.json":
            (silu / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["output_gate_type"] == "sigmoid" and cfg["hidden_act"] == "silu"
    (silu / "config.json").write_text(json.dumps({**cfg, "output_gate_type": None}))
    ours = _same_as_reference_f16(silu, tmp_path)
    assert ours.read_bytes() == work.files("qwen4exp", "f16")[0].read_bytes()

    got = _llama_logits_f32_kv(work.files("qwen4exp", "f32")[0], tokens)
    sigmoid = _hf_logits(src, tokens)
    bound = 2e-3 * max(float(np.abs(sigmoid).max()), 1.0)
    assert np.abs(got - sigmoid).max() <= bound
    assert np.abs(got - _hf_logits(silu, tokens)).max() > 100 * bound


@pytest.mark.parametrize(
    "drop, field",
    [
        # transformers 5.24's own config.json: none of the Hub's switches
        (("no_kda_lora", "gated_attention_proj_granularity_type"), "no_kda_lora"),
        (("gated_attention_proj_granularity_type",), "gated_attention_proj_granularity_type"),
        (("layer_group_size",), "layer_group_size"),
    ],
)
def test_bailingmoe3_refuses_configs_the_reference_refuses(work, tmp_path, drop, field):
    """Without the Hub's KDA / gate switches (the reference asserts them) or the layer
    grouping, conversion stops by name before any output."""
    import shutil

    from weightsmith import errors as E

    src = tmp_path / "m"
    shutil.copytree(work.model("bailingmoe3"), src)
    c = json.loads((src / "config.json").read_text())
    for k in drop:
        c.pop(k)
    (src / "config.json").write_text(json.dumps(c))
    with pytest.raises(E.InvalidModelConfig) as err:
        hf_to_gguf(src, tmp_path / "o.gguf", "f16")
    assert err.value.field == field
    assert not (tmp_path / "o.gguf").exists()


def test_granite_swa_files(work):
    """Guard against a vacuous pass: the granite_swa files carry the window, the per-layer
    patterns (the dense one's last layer NoPE, the MoE one's class-default layer types)
    and the sinks; the MoE one's experts fused and quantized at q4_k_m, its shared MLP as
    one ``ffn_up_shexp``; GGUF -> HF gives each back as its own class."""
    from weightsmith.gguf import read

    with read(work.files("granite_swa", "f16")[0]) as f:
        md = f.metadata
        assert md["granite_swa.attention.sliding_window"] == 4
        assert list(md["granite_swa.attention.sliding_window_pattern"]) == [True, False] * 2
        assert list(md["granite_swa.attention.rope_pattern"]) == [True, True, True, False]
        assert "granite_swa.expert_count" not in md
    with read(work.files("granitemoe_swa", "f16")[0]) as f:
        md = f.metadata
        assert list(md["granite_swa.attention.sliding_window_pattern"]) == [False] + [True] * 3
        assert "granite_swa.attention.rope_pattern" not in md
        assert md["granite_swa.expert_count"] == 4
        assert md["granite_swa.expert_shared_feed_forward_length"] == 128
    moe = {x[0]: x for x in _tensors(work.files("granitemoe_swa", "q4_k_m")[0])}
    _, tid, dims, _ = moe["blk.1.ffn_gate_up_exps.weight"]
    assert list(dims) == [256, 512, 4] and tid not in (0, 1)
    assert list(moe["blk.1.ffn_up_shexp.weight"][2]) == [256, 256]
    assert list(moe["blk.1.attn_sinks.weight"][2]) == [4] and moe["blk.1.attn_sinks.weight"][1] == 0
    assert "blk.1.ffn_gate_exps.weight" not in moe


def test_granite_swa_layer_rope_theta_alone(work, tmp_path):
    """transformers 5 spells NoPE layers ``layer_rope_theta`` 0; the reference reads only
    ``no_rope_layers``.  Without it, the reference's file (ours the same, byte for byte) has
    no ``rope_pattern`` and llama.cpp rotates the NoPE layer too: its logits are
    transformers' for the model with RoPE on every layer, not the model's -- the gap is the
    reference's, pinned here."""
    import shutil

    src, roped = tmp_path / "m", tmp_path / "roped"
    shutil.copytree(work.model("granite_swa"), src)
    c = json.loads((src / "config.json").read_text())
    assert c.pop("no_rope_layers") == [1, 1, 1, 0] and c["layer_rope_theta"][3] == 0
    (src / "config.json").write_text(json.dumps(c))
    shutil.copytree(src, roped)
    (roped / "config.json").write_text(json.dumps({**c, "layer_rope_theta": [10000.0] * 4}))
    ours, ref = tmp_path / "ours.gguf", tmp_path / "ref.gguf"
    _run_reference([(str(src), str(ref), "f32")])
    hf_to_gguf(src, ours, "f32")
    _same_file(ours, ref)
    assert "granite_swa.attention.rope_pattern" not in _kvs(ours)
    tokens = _prompt("granite_swa")
    got = _llama_logits(ours, tokens)
    as_roped = np.abs(got - _hf_logits(roped, tokens)).max()
    assert as_roped <= 2e-3 * max(float(np.abs(got).max()), 1.0)
    assert np.abs(got - _hf_logits(src, tokens)).max() > 10 * as_roped


def test_nemotronhpuzzle_file_and_spellings(work, tmp_path):
    """The Puzzle file's per-block rows (top-k and expert width as arrays, 0 off the MoE
    blocks; no MTP row); the official BF16 checkpoint's ``model.*`` trunk and an ``mtp.*``
    head give the same metadata and tensors, as the reference normalises and drops them; GGUF -> HF refuses per-block shapes that differ (no
    transformers class computes them) by name."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from weightsmith import errors as E
    from weightsmith.gguf import read

    f16 = work.files("nemotronhpuzzle", "f16")[0]
    with read(f16) as f:
        md = f.metadata
        assert list(md["nemotron_h_moe.expert_used_count"]) == [0, 2, 0, 0, 2]
        assert list(md["nemotron_h_moe.expert_feed_forward_length"]) == [0, 256, 0, 0, 256]
        assert "nemotron_h_moe.nextn_predict_layers" not in md
    src = tmp_path / "nemotronhpuzzle"  # the folder name is general.name
    shutil.copytree(work.model("nemotronhpuzzle"), src)
    sd = load_file(src / "model.safetensors")
    sd = {"model." + k[len("backbone."):] if k.startswith("backbone.") else k: v
          for k, v in sd.items()}  # fmt: skip
    sd["mtp.layers.0.enorm.weight"] = np.ones(256, np.float32)
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    hf_to_gguf(src, tmp_path / "o.gguf", "f16")
    # the same file but for the order (lm_head now sorts before the model.* trunk)
    assert _kvs(tmp_path / "o.gguf") == _kvs(f16)
    assert sorted(_tensors(tmp_path / "o.gguf")) == sorted(_tensors(f16))

    c = json.loads((src / "config.json").read_text())
    c["block_configs"][4]["num_experts_per_tok"] = 1
    (src / "config.json").write_text(json.dumps(c))
    hf_to_gguf(src, tmp_path / "uneven.gguf", "f16")
    with pytest.raises(E.InvalidModelConfig, match="num_experts_per_tok"):
        gguf_to_hf(tmp_path / "uneven.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize(
    "hf_class, model_types",
    [
        # the reference's rwkv.py classes: transformers' only RWKV is RWKV-4 (RwkvForCausalLM,
        # model type ``rwkv``), another time-mixing than RWKV 6's / 7's, which the reference
        # does not convert
        ("Rwkv6ForCausalLM", ("rwkv6",)),
        ("Rwkv7ForCausalLM", ("rwkv7",)),
        ("RWKV7ForCausalLM", ("rwkv7",)),
        ("RWKV6Qwen2ForCausalLM", ("rwkv6qwen2",)),
        ("RwkvHybridForCausalLM", ("rwkv_hybrid", "rwkvhybrid")),
        ("Plamo2ForCausalLM", ("plamo2",)),
        # per-token embedded LoRA adapters behind a control-token router
        ("GraniteSwitchForCausalLM", ("graniteswitch", "granite_switch")),
    ],
)
def test_no_transformers_class_for(hf_class, model_types):
    """Text classes of the pinned reference left out: transformers 5.24 has no class or
    config to build a tiny one from (docs/convert-architectures.md, hybrid not-done list);
    refused by name as any unknown architecture."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from weightsmith.convert.arch import lookup

    assert not hasattr(transformers, hf_class)
    assert not set(model_types) & set(CONFIG_MAPPING_NAMES)
    assert lookup(hf_class, {}) is None


def test_kimi_linear_needs_the_hub_config(work, tmp_path):
    """transformers 5.24's own config.json folds the Hub's ``linear_attn_config`` into its
    ``linear_*`` / ``layer_types`` fields: the reference needs the dict (it reads the layer
    kinds from it), so a config without it is refused by name before any output."""
    import shutil

    from weightsmith.errors import InvalidModelConfig

    src = tmp_path / "m"
    shutil.copytree(work.model("kimi_linear"), src)
    cfg = json.loads((src / "config.json").read_text())
    del cfg["linear_attn_config"]
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out.gguf"
    with pytest.raises(InvalidModelConfig, match="linear_attn_config"):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()


# GLM-5 (GlmMoeDsaForCausalLM, GGUF glm-dsa): DeepSeek-V3's MLA + MoE with a DSA indexer on
# every layer; its top-k (64) is past the prompt, so every key is kept on both sides
ARCHS += ["glm_moe_dsa"]
BPE_VOCAB |= {"glm_moe_dsa"}
# DeepSeek-V3.2 (DeepseekV32ForCausalLM, GGUF deepseek32): the reference asserts the
# tokenizer adds BOS, which transformers 5.24 never reports when a tokenizer.json is present
# (test_deepseek_v32_reference_needs_transformers_4): it runs on 4.47.1.  Llama 3's BPE (its
# hash is taken with BOS); the indexer's top-k (64) is past the prompt, as GLM-5's
ARCHS += ["deepseek_v32"]
REF_ON_TRANSFORMERS_4 |= {"deepseek_v32"}
BPE_VOCAB |= {"deepseek_v32"}


def test_deepseek_v32_reference_needs_transformers_4(work):
    """Why DeepSeek-V3.2's reference runs on 4.47.1: its DeepseekV32Model asserts the
    tokenizer adds BOS, and transformers 5.24 reports ``add_bos_token`` False for a folder
    whose tokenizer_config.json says true (it drops the key when a tokenizer.json exists)."""
    from transformers import AutoTokenizer

    src = work.model("deepseek_v32")
    assert json.loads((src / "tokenizer_config.json").read_text())["add_bos_token"] is True
    assert AutoTokenizer.from_pretrained(src).add_bos_token is False


def test_dsa_mtp_blocks(work, tmp_path):
    """GLM-5's and DeepSeek-V3.2's tiny models carry the Hub's MTP block after the trunk
    (``model.layers.2.*``: MLA with its DSA indexer, experts, ``eh_proj`` / ``enorm`` /
    ``hnorm`` / ``shared_head.norm``, GLM-5's also ``embed_tokens`` and
    ``shared_head.head``; tests/support/hf_models.py ``_append_nextn``), so every check of
    the harness above covers it (bytes, llama-quantize types, llama.cpp loading it,
    GGUF -> HF giving each tensor back under its Hub name).  Guard against a vacuous pass:
    the block is in the files; and GLM-5's folder back keeps the Hub's layout (trunk
    count + ``num_nextn_predict_layers``), so it converts forward to our file again."""
    from support.gguf_pair import assert_same_gguf
    from weightsmith.gguf import read

    for arch, gguf_arch, own in (("glm_moe_dsa", "glm-dsa", True),
                                 ("deepseek_v32", "deepseek32", False)):  # fmt: skip
        with read(work.files(arch, "q8_0")[0]) as f:
            md = f.metadata
            types = {t.name: t.ggml_type.name for t in f.tensors}
        assert md[f"{gguf_arch}.block_count"] == 3, arch
        assert md[f"{gguf_arch}.nextn_predict_layers"] == 1, arch
        nextn = {"eh_proj", "enorm", "hnorm", "shared_head_norm"}
        nextn |= {"embed_tokens", "shared_head_head"} if own else set()
        assert {n for n in types if n.startswith("blk.2.nextn.")} == {
            f"blk.2.nextn.{n}.weight" for n in nextn
        }, arch
        assert types["blk.2.indexer.attn_q_b.weight"] == "Q8_0", arch
        assert types["blk.2.ffn_gate_exps.weight"] == "Q8_0", arch
    ours = work.files("glm_moe_dsa", "f32")[0]
    gguf_to_hf(ours, tmp_path / "back", dtype="f32")
    cfg = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_nextn_predict_layers"]) == (2, 1)
    hf_to_gguf(tmp_path / "back", tmp_path / "again.gguf", "f32", tokenizer=False)
    assert_same_gguf(tmp_path / "again.gguf", ours)


def test_dsa_layer_past_blocks_refused(work, tmp_path):
    """GLM-5's model with the MTP layer but a config that counts none: the reference's
    tensor map has 2 blocks and it stops on the layer's first tensor (``Can not map
    tensor``, measured); ours refuses that tensor by name before any output (it would
    otherwise write a block past ``block_count``)."""
    from weightsmith import errors as E

    src = tmp_path / "m"
    src.mkdir()
    for f in work.model("glm_moe_dsa").iterdir():
        if f.name != "config.json":
            (src / f.name).symlink_to(f)
    cfg = json.loads((work.model("glm_moe_dsa") / "config.json").read_text())
    del cfg["num_nextn_predict_layers"]
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out.gguf"
    with pytest.raises(E.UnmappedTensor, match=r"model\.layers\.2\."):
        hf_to_gguf(src, out, "f16")
    assert not out.exists()
