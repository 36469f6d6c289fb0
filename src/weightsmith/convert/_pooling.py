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
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from .. import errors as E

#: sentence-transformers pooling mode -> llama.cpp's PoolingType
POOLING = {"mean": 1, "cls": 2, "lasttoken": 3}
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


def _pooling_dir(d: Path, modules: Any) -> Path | None:
    where = d / "modules.json"
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise E.InvalidModelConfig(
            "modules.json is not a list of modules", path=where, expected="[{...}, ...]",
            found=type(modules).__name__,
        )  # fmt: skip
    for m in modules:
        if str(m.get("type", "")).endswith("Pooling"):
            rel = m.get("path")
            parts = PurePosixPath(rel).parts if isinstance(rel, str) else ("..",)
            # the path is read relative to the folder: nothing absolute, nothing above it
            if not parts or rel.startswith("/") or ".." in parts:
                raise E.InvalidModelConfig(
                    "pooling module path is not a folder inside the model folder",
                    path=where, field="path", expected="e.g. '1_Pooling'", found=repr(rel),
                )  # fmt: skip
            return d / rel
    return None


def pooling_type(d: Path) -> int | None:
    """llama.cpp's PoolingType number for the model folder ``d``, or None (no pooling module)."""
    if not (d / "modules.json").is_file():
        return None
    modules = _read(d / "modules.json", "modules.json")
    sub = _pooling_dir(d, modules)
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


def sentence_transformers_files(pooling: int, hidden_size: int) -> dict[str, Any]:
    """The sentence-transformers files (relative path -> JSON) for a GGUF pooling type."""
    mode = next((k for k, v in POOLING.items() if v == pooling), None)
    if mode is None:
        return {}
    flags = {flag: m == mode for flag, m in _FLAGS}
    return {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"},
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
