"""Meta original checkpoint folder -> Hugging Face folder, the job of transformers'
``convert_llama_weights_to_hf.py`` (no longer shipped by transformers 5), without torch.

What the folder holds (as that script writes it):

* ``model.safetensors``, or with ``max_shard_size`` ``model-0000N-of-0000M.safetensors``
  + ``model.safetensors.index.json``: the merged, renamed tensors (Q/K permuted into
  HF's rotary layout; see :mod:`weightsmith.convert._meta`), sorted by name, in
  ``dtype`` (bf16 by default);
* ``config.json``: a ``LlamaForCausalLM`` with the script's values for the generation
  (context length, llama3 rope scaling, token ids, tied embeddings for 3.2);
* ``generation_config.json``: ``do_sample``, ``temperature`` 0.6, ``top_p`` 0.9 and the
  token ids;
* ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``.

Everything is checked and built in memory or in a temp folder beside ``dst`` first;
the folder then appears by one rename (an existing folder is replaced as a whole).

:func:`meta_to_gguf` writes the GGUF of that folder in one pass, without the folder:
the merged tensors (cast to the folder's bf16) stream into the HF -> GGUF plan, and
the small files are a :class:`zipfile.Path` over an in-memory archive that the HF
route's readers read as they would the folder.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors as E
from .._atomic import atomic_folder
from ..dtypes import DType, safetensors_dtype
from ..quant.imatrix import read_imatrix
from ..safetensors import (
    INDEX_NAME,
    StreamWriter,
    parse_size,
    shard_names,
    split_shards,
    write_index,
)
from ._hf_to_gguf import ConversionResult, _memory_folder, _Source, convert_input, hf_input
from ._meta import _CONTEXT, MetaCheckpoint, is_llama3
from .tokenizer import hf_tokenizer_files, meta_tokenizer_metadata

__all__ = ["MetaConversion", "meta_config", "meta_to_gguf", "meta_to_hf"]

_DTYPES = {"bf16": "BF16", "bfloat16": "BF16", "f16": "F16", "float16": "F16",
           "f32": "F32", "float32": "F32"}  # fmt: skip
_TORCH_NAME = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


@dataclass
class MetaConversion:
    """What :func:`meta_to_hf` wrote."""

    folder: str
    generation: str
    shards: int  # model-parallel shards read
    files: list[str] = field(default_factory=list)
    tensors: int = 0
    parameters: int = 0


def _token_ids(ck: MetaCheckpoint, instruct: bool) -> tuple[int, int | list[int]]:
    if not is_llama3(ck.generation):
        return 1, 2
    n = ck.vocab_size - 256  # the 256 special tokens follow the BPE ranks
    bos, eos = n, n + 1
    if instruct:  # <|end_of_text|>, <|eom_id|>, <|eot_id|>
        return bos, [n + 1, n + 8, n + 9]
    return bos, eos


def meta_config(ck: MetaCheckpoint, dtype: str = "BF16", instruct: bool = False) -> dict:
    """``config.json`` as transformers' converter writes it for this checkpoint."""
    p, gen = ck.params, ck.generation
    if p.rope_theta > 10000.0 and not is_llama3(gen):
        context = 16384  # Code Llama's long-context base
    else:
        context = _CONTEXT[gen]
    rope_scaling = None
    if gen in ("3.1", "3.2", "3.3"):
        factor = p.rope_scaling_factor or (32.0 if gen == "3.2" else 8.0)
        rope_scaling = {
            "factor": factor,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        }
    bos, eos = _token_ids(ck, instruct)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "head_dim": p.head_dim,
        "hidden_act": "silu",
        "hidden_size": p.dim,
        "initializer_range": 0.02,
        "intermediate_size": p.intermediate_size,
        "max_position_embeddings": context,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": p.n_heads,
        "num_hidden_layers": p.n_layers,
        "num_key_value_heads": p.n_kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": p.norm_eps,
        "rope_scaling": rope_scaling,
        "rope_theta": p.rope_theta,
        "tie_word_embeddings": ck.tied,
        "torch_dtype": _TORCH_NAME[dtype],
        "use_cache": True,
        "vocab_size": ck.vocab_size,
    }
    return cfg


def _generation_config(cfg: dict) -> dict:
    return {
        "bos_token_id": cfg["bos_token_id"],
        "do_sample": True,
        "eos_token_id": cfg["eos_token_id"],
        "temperature": 0.6,
        "top_p": 0.9,
    }


def _out_dtype(dtype: str) -> DType:
    code = _DTYPES.get(str(dtype).lower())
    if code is None:
        raise E.UnsupportedTargetDtype(
            "output dtype not supported for an HF folder", field="dtype",
            expected="bf16, f16 or f32", found=dtype,
        )  # fmt: skip
    return safetensors_dtype(code)


def _cast(x: np.ndarray, out: DType) -> np.ndarray:
    if x.dtype == out.numpy:
        return np.ascontiguousarray(x)
    # widen first: bf16 -> f16 must round once, from the exact value (as torch does)
    return np.asarray(x, np.float32).astype(out.numpy)


def _json_bytes(obj: Any, sort_keys: bool = True) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n").encode()


def _small_files(
    ck: MetaCheckpoint, dtype: str, instruct: bool, tokenizer: bool
) -> dict[str, bytes]:
    """``config.json``, ``generation_config.json`` and the tokenizer files of the HF folder."""
    cfg = meta_config(ck, dtype, instruct)
    small: dict[str, bytes] = {
        "config.json": _json_bytes(cfg),
        "generation_config.json": _json_bytes(_generation_config(cfg)),
    }
    if tokenizer:
        if ck.tokenizer_kind is None:
            raise E.TokenizerFilesMissing(
                "no tokenizer.model in the original checkpoint folder (or pass tokenizer=False)",
                path=ck.path / "tokenizer.model",
                expected="tokenizer.model (SentencePiece or tiktoken)",
                found="nothing",
            )
        md = meta_tokenizer_metadata(
            ck.path, ck.tokenizer_kind, ck.generation, ck.vocab_size,
            cfg["max_position_embeddings"], instruct,
        )  # fmt: skip
        for name, content in hf_tokenizer_files(md, where=os.fspath(ck.path)).items():
            small[name] = _json_bytes(content, sort_keys=False)
    return small


def meta_to_hf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    dtype: str = "bf16",
    max_shard_size: int | str | None = None,
    llama_version: str | None = None,
    instruct: bool = False,
    tokenizer: bool = True,
    progress: Callable[[int, int | None, int | None, int | None], None] | None = None,
) -> MetaConversion:
    """Convert Meta's original Llama folder ``src`` into an HF folder ``dst``.

    ``llama_version`` ("1", "2", "3", "3.1", "3.2", "3.3") overrides detection;
    ``instruct`` selects the chat tokens and template.  Nothing is written until the
    checkpoint, the tokenizer and the options are checked.
    """
    out_dtype = _out_dtype(dtype)
    limit = parse_size(max_shard_size) if max_shard_size is not None else None
    with MetaCheckpoint(src, llama_version) as ck:
        small = _small_files(ck, out_dtype.name, instruct, tokenizer)
        plan = sorted(ck.tensors, key=lambda t: t.hf_name)
        sizes = [(t.hf_name, math.prod(t.shape) * out_dtype.itemsize) for t in plan]
        groups = split_shards(sizes, limit) if limit else [[t.hf_name for t in plan]]
        names = shard_names(len(groups)) if len(groups) > 1 else ["model.safetensors"]
        by_name = {t.hf_name: t for t in plan}
        total = sum(s for _, s in sizes)
        size_of = dict(sizes)
        result = MetaConversion(os.fspath(dst), ck.generation, len(ck.shard_paths))
        done = 0
        with atomic_folder(dst, inputs=(ck.path,)) as tmp:
            for fname, group in zip(names, groups):
                specs = [(n, out_dtype.name, by_name[n].shape) for n in group]
                with StreamWriter(tmp / fname, specs, {"format": "pt"}) as w:
                    for n in group:
                        w.write(n, _cast(ck.read(by_name[n]), out_dtype))
                        done += size_of[n]
                        result.tensors += 1
                        result.parameters += math.prod(by_name[n].shape)
                        if progress is not None:
                            progress(done, total, result.tensors, len(plan))
            if len(groups) > 1:
                write_index(
                    tmp / INDEX_NAME,
                    {n: f for f, g in zip(names, groups) for n in g},
                    total_size=total,
                    total_parameters=result.parameters,
                )
                names.append(INDEX_NAME)
            for name, data in small.items():
                (tmp / name).write_bytes(data)
                names.append(name)
        result.files = [os.fspath(Path(dst) / n) for n in names]
    return result


def meta_to_gguf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    type: str = "auto",
    *,
    llama_version: str | None = None,
    instruct: bool = False,
    tokenizer: bool = True,
    name: str | None = None,
    imatrix: str | os.PathLike[str] | None = None,
    split_max_size: int | str | None = None,
    workers: int | None = None,
    progress: Callable[[int, int | None, int | None, int | None], None] | None = None,
) -> ConversionResult:
    """Meta's original folder ``src`` -> the GGUF file ``dst``, in one pass.

    The file is the one :func:`~weightsmith.convert.hf_to_gguf` writes for the HF
    folder :func:`meta_to_hf` would write (bf16), without that folder: the merged,
    Q/K-permuted, bf16 tensors stream from the shards into the HF -> GGUF plan one at
    a time, and its ``config.json``, ``generation_config.json`` and tokenizer files are
    built in memory and read by the HF route's own readers.  The Llama 3 pre-tokenizer
    is ``llama-bpe`` by the generation (not fingerprinted).  Options as ``hf_to_gguf``.
    """
    bf16 = safetensors_dtype("BF16")
    stack: list = []
    with MetaCheckpoint(src, llama_version) as ck:
        try:
            im = read_imatrix(imatrix) if imatrix is not None else None
            folder = _memory_folder(_small_files(ck, bf16.name, instruct, tokenizer), ck.path)
            # the HF folder's order: one model.safetensors, tensors sorted by name
            sources = [
                _Source(t.hf_name, t.shape, bf16.name, lambda t=t: _cast(ck.read(t), bf16))
                for t in sorted(ck.tensors, key=lambda t: t.hf_name)
            ]
            pre = "llama-bpe" if is_llama3(ck.generation) else None
            m = hf_input(folder, stack, sources=sources, pre=pre, given=os.fspath(src))
            return convert_input(
                m, dst, type, im=im, split_max_size=split_max_size, workers=workers,
                progress=progress, name=name, tokenizer=tokenizer,
            )  # fmt: skip
        finally:
            for h in stack:
                h.close()
