"""Mistral's original layout -> GGUF, as ``convert_hf_to_gguf.py --mistral-format``.

The folder Mistral publishes beside (or instead of) the HF one::

    MISTRAL_DIR/
        params.json                  dim, n_layers, head_dim, hidden_dim, n_heads,
                                     n_kv_heads, norm_eps, vocab_size, rope_theta,
                                     [max_position_embeddings], [yarn],
                                     [llama_4_scaling], [quantization]
        consolidated.safetensors     (every consolidated*.safetensors, sorted by name)
        tekken.json                  the tokenizer (:mod:`.tokenizer._tekken`), or in
        | tokenizer.model.v1/v3/v7   older releases a SentencePiece model (the same module)
        [chat_template.jinja]

Tensors carry Meta's names (``tok_embeddings``, ``layers.N.attention.wq``,
``feed_forward.w1``, ...; table in :mod:`weightsmith.convert._meta`) with Q/K rows
already in ggml's interleaved RoPE layout, so nothing is permuted.  The reference
(llama.cpp's ``MistralModel``, a ``LlamaModel`` on ``params.json``) writes a ``llama``
GGUF: the registry's :data:`~weightsmith.convert.arch.MISTRAL_NATIVE` entry holds its
rows and names; the HF -> GGUF writer does the rest, so types, quantization and
splitting are the HF route's.  With ``llama_4_scaling`` (Ministral 3, Devstral 2) the
reference names the file ``mistral3`` and adds the scaling's ``beta`` as
``attention.temperature_scale``: :data:`~weightsmith.convert.arch.MISTRAL3_NATIVE`.

FP8 releases (params.json ``quantization: {qformat_weight: fp8_e4m3}``): each quantized
``X.weight`` is float8 beside a per-tensor ``X.qscale_weight`` (and an unused
``X.qscale_act``).  The reference's ``MistralModel`` maps the block onto HF's fp8 method
without a block size; we hand the same config to the one fp8 dequantizer
(:func:`~weightsmith.convert._dequant.dequantize_sources`), so the weight is
``float32(w) * float32(scale)`` as there.  Other ``qformat_weight`` values are refused.

With a ``moe`` section (Mistral Large 3, Mistral Small 4 in Mistral's layout) the
reference is ``MistralMoeModel``, a DeepSeek-V2 class writing ``deepseek2``: params.json
also carries the MLA ranks and widths (``q_lora_rank``, ``kv_lora_rank``,
``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``), a ``yarn`` block (required)
and optionally ``llama_4_scaling``; the tensors are ``attention.wq_a`` / ``q_a_norm`` /
``wq_b`` / ``wkv_a_with_mqa`` / ``kv_a_norm`` / ``wkv_b`` / ``wo``, dense layers'
``feed_forward.w1..3``, MoE layers' ``gate``, ``experts.N.w1..3`` and
``shared_experts.w1..3``; the registry's :data:`~weightsmith.convert.arch.MISTRAL_MOE_NATIVE`
holds its rows and renames.  The reference also opens config.json there (it stops
without one); ours does not need it.  Its FP8 releases (Mistral Large 3) the reference
cannot convert: ``MistralMoeModel`` renames the scales to HF's ``weight_scale`` /
``input_scale`` but never sets the fp8 config, and stops on "Can not map tensor"; ours
dequantizes them as the dense class does (the file is the reference's of the same
checkpoint dequantized to float32).

With ``mmproj=`` (``--mmproj``) the vision projector of a params.json with a
``vision_encoder`` section (Pixtral-12B, Mistral Small 3.1 / 3.2) is written too: the
reference's ``--mistral-format --mmproj`` (:mod:`._mistral_mmproj`).

Not converted (named errors): a ``quantization`` other than ``fp8_e4m3``.  Where the
reference writes a file llama.cpp cannot load (no context length in a dense
params.json) we refuse instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .. import errors as E
from .._json import read_json
from ..progress import ProgressFn
from ..quant.imatrix import read_imatrix
from ._dequant import dequantize_sources
from ._hf_to_gguf import ConversionResult, ModelInput, convert_input, file_sources
from ._mistral_mmproj import plan_mistral_mmproj
from ._mmproj import write_mmproj
from .arch import MISTRAL3_NATIVE, MISTRAL_MOE_NATIVE, MISTRAL_NATIVE, first
from .arch.mistral_moe import moe_config
from .tokenizer import mistral_tokenizer_file, mistral_vocab_metadata

__all__ = ["is_mistral_dir", "mistral_to_gguf"]

_PART = re.compile(r"consolidated.*\.safetensors$")
# the context-length fields llama.cpp's TextModel reads (arch/_common.py COMMON)
_CONTEXT = ("max_position_embeddings", "n_ctx", "n_positions", "max_length",
            "max_sequence_length", "model_max_length")  # fmt: skip


def _parts(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if _PART.fullmatch(p.name) and p.is_file())


def is_mistral_dir(folder: str | os.PathLike[str]) -> bool:
    """True for Mistral's original layout: params.json + consolidated*.safetensors."""
    d = Path(folder)
    return d.is_dir() and (d / "params.json").is_file() and bool(_parts(d))


def _params(d: Path) -> dict:
    path = d / "params.json"
    params = read_json(path, E.InvalidModelConfig, "params.json", expected="a JSON object")
    if not isinstance(params, dict):
        raise E.InvalidModelConfig(
            "params.json is not an object", path=path, expected="a JSON object",
            found=type(params).__name__,
        )  # fmt: skip
    moe = params.get("moe") is not None
    _quantization(path, params)
    scaling = params.get("llama_4_scaling")
    beta = scaling.get("beta") if isinstance(scaling, dict) else None
    if scaling is not None and (isinstance(beta, bool) or not isinstance(beta, (int, float))):
        # set_mistral_config reads llama_4_scaling["beta"] (a KeyError there)
        raise E.InvalidModelConfig(
            "params.json's llama_4_scaling lacks its beta", path=path,
            field="llama_4_scaling.beta", expected="a number", found=repr(scaling)[:80],
        )  # fmt: skip
    if moe:
        _moe_params(path, params)
        return params
    for key in MISTRAL_NATIVE.required:
        v = params.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise E.InvalidModelConfig(
                "params.json lacks a field or has a bad value", path=path, field=key,
                expected="a positive integer", found=repr(v),
            )  # fmt: skip
    if not isinstance(params.get("norm_eps"), (int, float)) or isinstance(params["norm_eps"], bool):
        raise E.InvalidModelConfig(
            "params.json lacks norm_eps", path=path, field="norm_eps", expected="a number",
            found=repr(params.get("norm_eps")),
        )  # fmt: skip
    if first(params, _CONTEXT) is None:
        # the reference writes no <arch>.context_length then, and llama.cpp refuses the file
        raise E.InvalidModelConfig(
            "params.json gives no context length: llama.cpp cannot load a GGUF without one",
            path=path, field="max_position_embeddings",
            expected="the model's context length (max_position_embeddings)", found="nothing",
        )  # fmt: skip
    return params


# params.json's ``quantization`` as the reference's MistralModel.dequant_model reads it:
# HF's fp8 method, one scale per tensor (X.qscale_weight beside X.weight)
_FP8 = {"quantization_config": {"quant_method": "fp8", "weight_block_size": None}}


def _quantization(path: Path, params: dict) -> None:
    """Only ``qformat_weight: fp8_e4m3`` (the reference asserts it)."""
    q = params.get("quantization")
    if q is None:
        return
    fmt = q.get("qformat_weight") if isinstance(q, dict) else None
    if fmt != "fp8_e4m3":
        raise E.UnknownArchitecture(
            "Mistral original checkpoint with this quantization is not supported", path=path,
            field="quantization.qformat_weight", expected="fp8_e4m3 (or no quantization)",
            found=repr(fmt if isinstance(q, dict) else q)[:80],
        )  # fmt: skip


def _positive(path: Path, params: dict, key: str, where: str = "") -> None:
    v = params.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise E.InvalidModelConfig(
            "params.json lacks a field or has a bad value", path=path, field=where + key,
            expected="a positive integer", found=repr(v),
        )  # fmt: skip


def _moe_params(path: Path, params: dict) -> None:
    """The fields MistralMoeModel reads without a default (it stops on a KeyError or
    converts nonsense otherwise)."""
    for key in MISTRAL_MOE_NATIVE.required:
        _positive(path, params, key)
    moe = params["moe"]
    if not isinstance(moe, dict):
        raise E.InvalidModelConfig(
            "params.json's moe is not an object", path=path, field="moe",
            expected="an object", found=type(moe).__name__,
        )  # fmt: skip
    for key in ("num_experts", "num_experts_per_tok"):
        _positive(path, moe, key, "moe.")
    if not isinstance(params.get("norm_eps", 1e-6), (int, float)):
        raise E.InvalidModelConfig(
            "params.json's norm_eps is not a number", path=path, field="norm_eps",
            expected="a number", found=repr(params.get("norm_eps")),
        )  # fmt: skip
    yarn = params.get("yarn")
    need = ("factor", "beta", "alpha", "original_max_position_embeddings", "apply_scale")
    if not isinstance(yarn, dict) or any(k not in yarn for k in need):
        # MistralMoeModel.set_gguf_parameters reads params["yarn"] unconditionally
        raise E.InvalidModelConfig(
            "params.json of a Mistral MoE model lacks its yarn block", path=path, field="yarn",
            expected="{" + ", ".join(need) + "}", found=repr(yarn)[:80],
        )  # fmt: skip


def _check_shapes(d: Path, want: dict[str, tuple[int, ...]], shapes: dict) -> None:
    """Each tensor params.json implies, with the shape it implies, is in the checkpoint."""
    for name, shape in want.items():
        got = shapes.get(name)
        if got != shape:
            raise E.ParamsShapeMismatch(
                "params.json contradicts the checkpoint", path=d / "params.json", field=name,
                expected=list(shape), found="no such tensor" if got is None else list(got),
            )  # fmt: skip


def _check_moe_tensors(d: Path, cfg: dict, shapes: dict[str, tuple[int, ...]]) -> None:
    """params.json against the tensor shapes the reference's math depends on (the MLA
    split, the expert count, the vocabulary), before anything is written."""
    dim, vocab, n = cfg["dim"], cfg["vocab_size"], cfg["n_layers"]
    heads, nope, v = cfg["n_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    kv_lora = cfg.get("kv_lora_rank", 512)
    want = {"tok_embeddings.weight": (vocab, dim), "norm.weight": (dim,)}
    if not cfg.get("tied_embeddings"):
        want["output.weight"] = (vocab, dim)
    dense = cfg.get("first_k_dense_replace", 0)
    for i in range(n):
        want[f"layers.{i}.attention.wkv_b.weight"] = (heads * (nope + v), kv_lora)
        want[f"layers.{i}.attention_norm.weight"] = (dim,)
        if i >= dense:
            want[f"layers.{i}.gate.weight"] = (cfg["n_routed_experts"], dim)
    _check_shapes(d, want, shapes)
    extra = sorted(x for x in shapes if x.startswith("layers.") and int(x.split(".")[1]) >= n)
    if extra:
        raise E.ParamsShapeMismatch(
            "the checkpoint has layers params.json does not count", path=d / "params.json",
            field="n_layers", expected=f"layers 0..{n - 1}", found=extra[0],
        )  # fmt: skip


def _check_tensors(d: Path, p: dict, shapes: dict[str, tuple[int, ...]]) -> None:
    """params.json against the tensor shapes, before anything is written."""
    dim, hd, ffn, vocab = p["dim"], p["head_dim"], p["hidden_dim"], p["vocab_size"]
    q, kv = p["n_heads"] * hd, p["n_kv_heads"] * hd
    want = {"tok_embeddings.weight": (vocab, dim), "norm.weight": (dim,),
            "output.weight": (vocab, dim)}  # fmt: skip
    layer = {"attention.wq": (q, dim), "attention.wk": (kv, dim), "attention.wv": (kv, dim),
             "attention.wo": (dim, q), "feed_forward.w1": (ffn, dim),
             "feed_forward.w2": (dim, ffn), "feed_forward.w3": (ffn, dim),
             "attention_norm": (dim,), "ffn_norm": (dim,)}  # fmt: skip
    for i in range(p["n_layers"]):
        want.update({f"layers.{i}.{k}.weight": v for k, v in layer.items()})
    if p.get("tied_embeddings"):
        del want["output.weight"]
    _check_shapes(d, want, shapes)
    extra = sorted(n for n in shapes if n.startswith("layers.") and n not in want)
    if extra:
        raise E.ParamsShapeMismatch(
            "the checkpoint has layers params.json does not count", path=d / "params.json",
            field="n_layers", expected=f"layers 0..{p['n_layers'] - 1}", found=extra[0],
        )  # fmt: skip


def _vocab(d: Path, params: dict, arch: str) -> list:
    """The tokenizer's rows (tekken.json or SentencePiece), its size checked against the
    embeddings'."""
    rows = mistral_vocab_metadata(d, arch)
    n = next(v for k, v, _ in rows if k == f"{arch}.vocab_size")
    if n != params["vocab_size"]:
        path = mistral_tokenizer_file(d)
        raise E.ParamsShapeMismatch(
            f"{path.name}'s vocabulary size contradicts the embeddings", path=path,
            field="config.default_vocab_size" if path.name == "tekken.json" else "pieces",
            expected=f"vocab_size={params['vocab_size']} (params.json, tok_embeddings rows)",
            found=n,
        )  # fmt: skip
    return rows


def mistral_input(d: Path, stack: list, *, tokenizer: bool = True) -> ModelInput:
    """Mistral's original folder ``d`` as a conversion input (everything checked)."""
    if not d.is_dir():
        raise E.MissingModelFile("Mistral folder not found", path=d, expected="a folder",
                                 found="nothing")  # fmt: skip
    params = _params(d)
    parts = _parts(d)
    if not parts:
        raise E.MissingModelFile(
            "no consolidated*.safetensors in Mistral's original folder", path=d,
            expected="consolidated.safetensors", found="none",
        )  # fmt: skip
    if tokenizer:
        mistral_tokenizer_file(d)  # the named error for a missing tokenizer
    sources = file_sources(d, parts, stack)
    if params.get("quantization") is not None:
        sources = dequantize_sources(sources, _FP8, d)
    if params.get("moe") is not None:
        arch, cfg = MISTRAL_MOE_NATIVE, moe_config(params)
        _check_moe_tensors(d, cfg, {s.name: s.shape for s in sources})
    else:
        # the reference's MistralModel writes mistral3 when the key is there at all
        arch = MISTRAL3_NATIVE if "llama_4_scaling" in params else MISTRAL_NATIVE
        cfg = params
        _check_tensors(d, params, {s.name: s.shape for s in sources if arch.source_key(s.name)})
    return ModelInput(
        folder=d,
        given=os.fspath(d),  # d as the caller gave it (provenance reads its name)
        arch=arch,
        cfg=cfg,
        sources=sources,
        vocab=lambda: _vocab(d, params, arch.gguf_arch),
        # gguf-py reads config.json's _name_or_path when the folder has one (the Hub's
        # MoE folders do: the reference's DeepseekV2Model opens it)
        name_or_path=(d / "config.json").is_file(),
    )


def mistral_to_gguf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str = "auto",
    *,
    tokenizer: bool = True,
    name: str | None = None,
    imatrix: str | os.PathLike[str] | None = None,
    split_max_size: int | str | None = None,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    mmproj: str | os.PathLike[str] | None = None,
) -> ConversionResult:
    """Convert Mistral's original folder ``src`` (consolidated*.safetensors, params.json,
    tekken.json) to the GGUF file ``dst``: the file llama.cpp's
    ``convert_hf_to_gguf.py --mistral-format`` writes.  Options as
    :func:`~weightsmith.convert.hf_to_gguf`; ``mmproj``: also write the vision projector
    (params.json's ``vision_encoder``) there, as ``--mistral-format --mmproj``
    (:mod:`._mistral_mmproj`; planned before either file is written)."""
    stack: list = []
    try:
        im = read_imatrix(imatrix) if imatrix is not None else None
        m = mistral_input(Path(src), stack, tokenizer=tokenizer)
        proj = None if mmproj is None else plan_mistral_mmproj(m.folder, type, m.sources)
        result = convert_input(
            m, dst, type, im=im, split_max_size=split_max_size, workers=workers,
            progress=progress, name=name, tokenizer=tokenizer,
        )  # fmt: skip
        if proj is not None:
            write_mmproj(proj, src, mmproj, name=name, workers=workers,
                         name_or_path=m.name_or_path)  # fmt: skip
            result.files.append(os.fspath(mmproj))
        return result
    finally:
        for h in stack:
            h.close()
