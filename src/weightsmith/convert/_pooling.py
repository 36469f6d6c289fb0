"""sentence-transformers pooling <-> GGUF ``<arch>.pooling_type``.

A sentence-transformers folder lists its modules in ``modules.json``
(``[{"idx", "name", "path", "type"}, ...]``); the one whose ``type`` ends in
``Pooling`` keeps its settings in ``<path>/config.json``.  llama.cpp's converter
(``TextModel._try_set_pooling_type``) reads the first true of
``pooling_mode_mean_tokens`` / ``pooling_mode_cls_token`` / ``pooling_mode_lasttoken``,
else the string ``pooling_mode`` (``mean``, ``cls``, ``lasttoken``), and writes
llama.cpp's ``PoolingType`` number (:data:`POOLING`).  Without ``modules.json`` (a
plain BERT checkpoint) it writes no key, and neither do we.

Normalisation (the ``Normalize`` module) is not stored in GGUF: llama.cpp's
embedding API normalises by default.  GGUF -> HF writes the three modules a
sentence-transformers embedding model has (Transformer, Pooling, Normalize).

``Dense`` modules (EmbeddingGemma's ``2_Dense`` and ``3_Dense``: linear maps applied
after pooling) are read as llama.cpp's ``EmbeddingGemma`` with
``--sentence-transformers-dense-modules`` reads them (:func:`dense_modules`): each
module listed in ``modules.json`` whose ``<path>/model.safetensors`` exists gives its
``linear.weight`` as the GGUF tensor ``dense_2.weight`` (module path ``2_Dense``) or
``dense_3.weight`` (any other path), and its ``config.json`` ``in_features`` /
``out_features`` as ``<arch>.dense_N_feat_in`` / ``_out``.  llama.cpp applies no
bias and no activation after them, so a module with either is refused.

Qwen3 rerankers (Qwen3-Reranker: a ``Qwen3ForCausalLM`` scored by its ``yes`` / ``no``
logits) are llama.cpp's RANK pooling (4: a classifier head on the last token).  The
reference (``Qwen3Model._is_qwen3_reranker``) calls a folder a reranker when its
``README.md`` has a ``# Qwen3-Reranker`` (or ``# Qwen3-VL-Reranker``) heading, when the
folder's path (the ``_name_or_path`` AutoConfig gives it), ``model_type`` or class names
``qwen3-reranker`` / ``qwen3-vl-reranker``, or the class is a ``*SequenceClassification``
(all case-insensitive); it then reads the ids of the tokens ``yes`` and ``no``
(:func:`rerank_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .. import errors as E

#: sentence-transformers pooling mode -> llama.cpp's PoolingType
POOLING = {"mean": 1, "cls": 2, "lasttoken": 3}
_RERANK_HINTS = ("qwen3-reranker", "qwen3-vl-reranker")
_FLAGS = (
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_lasttoken", "lasttoken"),
)


def _read(path: Any, what: str) -> Any:
    """JSON from a Path or a zipfile.Path (folders held in memory), or a named error."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise E.InvalidModelConfig(
            f"cannot read {what}", path=path, expected="a JSON file", found=str(exc)
        ) from None


def _pooling_dir(d: Path, modules: list[dict]) -> Path | None:
    for m in modules:
        if str(m.get("type", "")).endswith("Pooling"):
            return _module_dir(d, m, "pooling")
    return None


def _module_dir(d: Path, m: dict, kind: str) -> Path:
    """``d / m["path"]``, refusing a path that is absolute or leaves the folder."""
    rel = m.get("path")
    parts = PurePosixPath(rel).parts if isinstance(rel, str) else ("..",)
    # the path is read relative to the folder: nothing absolute, nothing above it
    if not parts or rel.startswith("/") or ".." in parts:
        raise E.InvalidModelConfig(
            f"{kind} module path is not a folder inside the model folder",
            path=d / "modules.json", field="path", expected="e.g. '1_Pooling'",
            found=repr(rel),
        )  # fmt: skip
    return d / rel


def _modules(d: Path) -> list[dict]:
    where = d / "modules.json"
    modules = _read(where, "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise E.InvalidModelConfig(
            "modules.json is not a list of modules", path=where, expected="[{...}, ...]",
            found=type(modules).__name__,
        )  # fmt: skip
    return modules


@dataclass(frozen=True)
class DenseModule:
    """One sentence-transformers ``Dense`` module as GGUF holds it."""

    tensor: str  # GGUF name: dense_2.weight or dense_3.weight
    file: Path  # <module>/model.safetensors
    n_in: int
    n_out: int


_IDENTITY = ("torch.nn.modules.linear.Identity", "torch.nn.Identity", None)


def dense_modules(d: Path) -> list[DenseModule]:
    """The ``Dense`` modules of the sentence-transformers folder ``d`` that llama.cpp's
    converter takes (those with a ``model.safetensors``), in ``modules.json`` order."""
    if not (d / "modules.json").is_file():
        return []
    out: list[DenseModule] = []
    for m in _modules(d):
        if not str(m.get("type", "")).endswith("Dense"):
            continue
        sub = _module_dir(d, m, "Dense")
        if not (sub / "model.safetensors").is_file():
            continue  # as the reference: a module without safetensors weights is left out
        cfg_path = sub / "config.json"
        cfg = _read(cfg_path, "Dense config.json") if cfg_path.is_file() else None
        if not isinstance(cfg, dict):
            raise E.MissingModelFile(
                "a Dense module needs its config.json (in_features, out_features)",
                path=cfg_path, expected="a JSON object", found="no such file or not an object",
            )  # fmt: skip
        for key in ("in_features", "out_features"):
            v = cfg.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise E.InvalidModelConfig(
                    "Dense module size missing or invalid", path=cfg_path, field=key,
                    expected="a positive integer", found=v,
                )  # fmt: skip
        if cfg.get("bias") or cfg.get("activation_function") not in _IDENTITY:
            raise E.InvalidModelConfig(
                "Dense module with a bias or an activation: llama.cpp applies neither",
                path=cfg_path, field="bias, activation_function",
                expected="false, torch.nn.modules.linear.Identity",
                found=f"{cfg.get('bias')}, {cfg.get('activation_function')}",
            )  # fmt: skip
        name = "dense_2.weight" if m.get("path") == "2_Dense" else "dense_3.weight"
        if any(x.tensor == name for x in out):
            raise E.InvalidModelConfig(
                "more Dense modules than llama.cpp's two (2_Dense, then one other)",
                path=d / "modules.json", field="path", expected="2_Dense and one more",
                found=repr(m.get("path")),
            )  # fmt: skip
        out.append(DenseModule(name, sub / "model.safetensors", cfg["in_features"],
                               cfg["out_features"]))  # fmt: skip
    return out


def module_files(modules_json: bytes) -> list[str]:
    """The files of the modules ``modules.json`` names that conversion reads (each
    module's ``config.json``; a Dense module's ``model.safetensors``), as relative paths;
    unreadable or unsafe entries are skipped (reading the folder names them)."""
    try:
        modules = json.loads(modules_json.decode("utf-8"))
    except (ValueError, RecursionError):
        return []
    out = []
    for m in modules if isinstance(modules, list) else []:
        rel = m.get("path") if isinstance(m, dict) else None
        parts = PurePosixPath(rel).parts if isinstance(rel, str) else ()
        if not parts or rel.startswith("/") or ".." in parts:
            continue
        out.append(f"{rel}/config.json")
        if str(m.get("type", "")).endswith("Dense"):
            out.append(f"{rel}/model.safetensors")
    return out


def pooling_type(d: Path) -> int | None:
    """llama.cpp's PoolingType number for the model folder ``d``, or None (no pooling module)."""
    if not (d / "modules.json").is_file():
        return None
    sub = _pooling_dir(d, _modules(d))
    if sub is None:
        return None
    path = sub / "config.json"
    if not path.is_file():
        raise E.MissingModelFile(
            "modules.json names a pooling module without its config.json",
            path=path, expected="the pooling settings", found="no such file",
        )  # fmt: skip
    cfg = _read(path, "pooling config.json")
    if not isinstance(cfg, dict):
        raise E.InvalidModelConfig(
            "pooling config is not an object", path=path, expected="a JSON object",
            found=type(cfg).__name__,
        )  # fmt: skip
    for flag, mode in _FLAGS:
        if cfg.get(flag):
            return POOLING[mode]
    mode = cfg.get("pooling_mode")
    if mode in POOLING:
        return POOLING[mode]
    raise E.InvalidModelConfig(
        "pooling mode not supported by llama.cpp",
        path=path, field="pooling_mode", expected="mean, cls or lasttoken",
        found=repr(mode) if mode is not None else "no pooling_mode_* flag set",
    )  # fmt: skip


def sentence_transformers_files(
    pooling: int, hidden_size: int, dense: Sequence[tuple[int, int]] = ()
) -> dict[str, Any]:
    """The sentence-transformers files (relative path -> JSON) for a GGUF pooling type;
    ``dense``: ``(in, out)`` of each Dense module after the pooling (their weights are
    the caller's to write, as ``<k>_Dense/model.safetensors`` ``linear.weight``)."""
    mode = next((k for k, v in POOLING.items() if v == pooling), None)
    if mode is None:
        return {}
    flags = {flag: m == mode for flag, m in _FLAGS}
    modules = [
        ("", "Transformer"),
        ("1_Pooling", "Pooling"),
        *[(f"{2 + i}_Dense", "Dense") for i in range(len(dense))],
        (f"{2 + len(dense)}_Normalize", "Normalize"),
    ]
    out: dict[str, Any] = {}
    for i, (n_in, n_out) in enumerate(dense):
        out[f"{2 + i}_Dense/config.json"] = {
            "in_features": n_in, "out_features": n_out, "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity",
        }  # fmt: skip
    return out | {
        "modules.json": [
            {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{t}"}
            for i, (path, t) in enumerate(modules)
        ],
        "1_Pooling/config.json": {
            "word_embedding_dimension": hidden_size,
            "pooling_mode_cls_token": flags["pooling_mode_cls_token"],
            "pooling_mode_mean_tokens": flags["pooling_mode_mean_tokens"],
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": flags["pooling_mode_lasttoken"],
            "include_prompt": True,
        },
    }  # fmt: skip


def late_interaction_files(folder: str, n_in: int, n_out: int) -> dict[str, Any]:
    """The files (relative path -> JSON) of a late-interaction (ColBERT) model as PyLate
    saves it: the Transformer, then one ``Dense`` module in ``folder`` (``n_in`` ->
    ``n_out``, no bias, identity) and no pooling (one vector per token); the Dense
    weight is the caller's to write as ``<folder>/model.safetensors`` ``linear.weight``."""
    return {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": folder, "type": "pylate.models.Dense.Dense"},
        ],
        f"{folder}/config.json": {
            "in_features": n_in, "out_features": n_out, "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity",
        },
    }  # fmt: skip


def is_qwen3_reranker(d: Any, given: str, cfg: dict) -> bool:
    """Whether the reference converts the folder ``d`` (given as ``given``) as a Qwen3
    reranker: a README heading, or a hint in the path, ``model_type`` or class name."""
    readme = d / "README.md"
    if readme.is_file():
        text = readme.read_bytes().decode("utf-8", errors="replace").lower()
        if any(f"# {h}" in text for h in _RERANK_HINTS):
            return True
    archs = cfg.get("architectures")
    cls = str(archs[0]) if isinstance(archs, list) and archs else ""
    hints = [given, str(cfg.get("model_type") or ""), cls]
    if any(h in x.lower() for x in hints for h in _RERANK_HINTS):
        return True
    return "sequenceclassification" in cls.lower()


def rerank_tokens(d: Any, vocab_size: int | None) -> tuple[int, int]:
    """The ids of the tokens ``yes`` and ``no`` (the reranker's two labels), looked up as
    transformers' ``convert_tokens_to_ids`` does: the added tokens, then the model's
    vocabulary (``tokenizer.json``, else ``vocab.json``); a missing one, or one not below
    ``vocab_size`` (a row of the head), is refused by name."""
    where = d / "tokenizer.json"
    table: dict = {}
    if where.is_file():
        tj = _read(where, "tokenizer.json")
        model = tj.get("model") if isinstance(tj, dict) else None
        vocab = model.get("vocab") if isinstance(model, dict) else None
        table = dict(vocab) if isinstance(vocab, dict) else {}
        for t in tj.get("added_tokens") or [] if isinstance(tj, dict) else []:
            if isinstance(t, dict) and isinstance(t.get("content"), str):
                table[t["content"]] = t.get("id")
    elif (d / "vocab.json").is_file():
        where = d / "vocab.json"
        vocab = _read(where, "vocab.json")
        table = vocab if isinstance(vocab, dict) else {}
    else:
        raise E.TokenizerFilesMissing(
            "a Qwen3 reranker needs its tokenizer for the ids of 'yes' and 'no'",
            path=d, expected="tokenizer.json or vocab.json", found="neither",
        )  # fmt: skip
    ids = []
    for token in ("yes", "no"):
        i = table.get(token)
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise E.TokenizerInconsistent(
                "a Qwen3 reranker's tokenizer lacks a label token",
                path=where, field=f"token {token!r}", expected="a token id", found=i,
            )  # fmt: skip
        # a vocab_size of the wrong kind is left to the config check that follows
        if isinstance(vocab_size, int) and i >= vocab_size:
            raise E.VocabSizeMismatch(
                "a Qwen3 reranker's label token is not a row of the head",
                path=where, field=f"token {token!r}", expected=f"an id below {vocab_size}",
                found=i,
            )  # fmt: skip
        ids.append(i)
    return ids[0], ids[1]
