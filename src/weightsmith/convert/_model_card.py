"""Provenance: a model card's YAML front matter <-> the ``general.*`` GGUF keys.

HF -> GGUF reproduces gguf-py's ``Metadata.load`` as ``convert_hf_to_gguf.py`` calls
it (no override file): the model card ``README.md`` front matter first (llama.cpp's
own keys ``name``, ``organization``, ``finetune``, ``basename``, ... then the Hub's
``license``, ``language``, ``tags``, ``pipeline_tag``, ``base_model``, ``datasets``),
then the ``_name_or_path`` heuristic (the folder path as given), then the folder
name split into name / organization / basename / finetune / version / size label.
The rows come out in ``Metadata.set_gguf_meta_model``'s order.

GGUF -> HF writes the card back (:func:`card_text`) with the keys that read into
the same ``general.*`` values.

Only the subset of YAML model cards use is read: top-level ``key: value`` scalars
(plain, single- or double-quoted), block lists (``- item``) and flow lists
(``[a, b]``); nested mappings are skipped.  No YAML library is needed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..gguf import GGUFValueType

VT = GGUFValueType

__all__ = ["card_text", "provenance_rows", "read_card"]


# --------------------------------------------------------------------------- YAML subset


def _scalar(s: str) -> Any:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        body = s[1:-1]
        if s[0] == '"':
            try:
                return json.loads(s)
            except ValueError:
                return body
        return body.replace("''", "'")
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return [_scalar(p) for p in _split_flow(inner)] if inner else []
    s = re.sub(r"\s+#.*$", "", s)
    if s in ("", "~", "null", "Null", "NULL"):
        return None
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if re.fullmatch(r"[-+]?\d+", s):
        return int(s)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", s):
        return float(s)
    return s


def _split_flow(s: str) -> list[str]:
    out, cur, q = [], "", ""
    for ch in s:
        if q:
            cur += ch
            if ch == q:
                q = ""
        elif ch in "\"'":
            q = ch
            cur += ch
        elif ch == ",":
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p for p in (x.strip() for x in out) if p]


def parse_front_matter(text: str) -> dict[str, Any]:
    """The top-level keys of a README's front matter (``---`` ... ``---``), as gguf-py
    cuts it (first line exactly ``---``; tabs as two spaces; ``- no`` stays a string)."""
    lines = text.splitlines()
    if not lines or lines[0] != "---":
        return {}
    out: dict[str, Any] = {}
    key: str | None = None
    for raw in lines[1:]:
        if raw == "---":
            break
        line = raw.replace("\t", "  ")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace() and not line.startswith("- "):
            m = re.match(r"([^:#]+?)\s*:(\s+(.*)|$)", line)
            if m is None:
                key = None
                continue
            key = m.group(1).strip().strip("\"'")
            value = (m.group(3) or "").strip()
            out[key] = _scalar(value) if value else None
            continue
        if key is None:
            continue
        item = line.strip()
        if item.startswith("- ") or item == "-":
            if out.get(key) is None:
                out[key] = []
            if isinstance(out[key], list):
                v = item[1:].strip()
                if re.match(r"[^\"'\[]+?:(\s|$)", v):
                    out[key] = _SKIP  # a list of mappings: not read
                else:
                    out[key].append(_scalar(v))
        elif out.get(key) is None:
            out[key] = _SKIP  # a nested mapping: not read
    return {k: v for k, v in out.items() if v is not _SKIP}


_SKIP: Any = object()


def read_card(folder: Any) -> dict[str, Any]:
    """The front matter of ``folder``'s README.md (a Path, or a :class:`zipfile.Path`)."""
    p = (folder if hasattr(folder, "joinpath") else Path(folder)) / "README.md"
    if not p.is_file():
        return {}
    try:
        return parse_front_matter(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


# --------------------------------------------------------------------------- gguf-py's heuristics


def _id_to_title(s: str) -> str:
    return " ".join(
        w.title() if w.islower() and not re.match(r"^(v\d+(?:\.\d+)*|\d.*)$", w) else w
        for w in s.strip().replace("-", " ").split()
    )


def _id_components(model_id: str | None, total: int) -> tuple:
    """gguf-py's ``Metadata.get_model_id_components``: (name, org, basename, finetune,
    version, size_label) of ``org/Name-7B-Instruct-v0.1`` style ids."""
    if model_id is None:
        return (None,) * 6
    if " " in model_id:
        return (model_id, None, None, None, None, None)
    org, full = model_id.split("/", 1) if "/" in model_id else (None, model_id)
    if org is not None and org[:1] == ".":
        org = None
    parts = [p for p in full.split("-") if p]
    types: list[set[str]] = [set() for _ in parts]
    for i, part in enumerate(parts):
        if re.fullmatch(r"(v|iter)?\d+([.]\d+)*", part, re.IGNORECASE):
            types[i].add("version")
        elif re.fullmatch(r"i?q\d(_\w)*|b?fp?(16|32)", part, re.IGNORECASE):
            types[i].add("type")
            parts[i] = part.upper()
        elif i > 0 and re.fullmatch(
            r"(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)",
            part,
            re.IGNORECASE,
        ):
            part = part.replace("_", ".")
            if part[-1].isdecimal():
                part = part[:-2] + "." + part[-1] + part[-2]
            if len(part) > 1 and part[-2].isdecimal() and part[-1] in "kmbt":
                part = part[:-1] + part[-1].upper()
            if total != 0:
                try:
                    label = float(part[:-1]) * pow(1000, " KMBT".find(part[-1]))
                    if (total < 0 and label < abs(total) // 8) or (
                        total > 0 and abs(label - total) > 7 * total // 8
                    ):
                        types[i].add("finetune")
                        part = part[:-1] + part[-1].lower()
                except ValueError:
                    pass
            if not types[i]:
                types[i].add("size_label")
            parts[i] = part
        elif i > 0 and re.fullmatch(r"chat|instruct|vision|lora", part, re.IGNORECASE):
            types[i].add("finetune")
    if any(c.isdecimal() for n, t in zip(parts, types) if "size_label" in t for c in n):
        for n, t in zip(parts, types):
            if "size_label" in t and all(c.isalpha() for c in n):
                t.remove("size_label")
    at_start = True
    for part, t in zip(parts, types):
        if at_start and ((not t and part[0].isalpha()) or "version" in t):
            t.add("basename")
        else:
            at_start = False
            if not t:
                t.add("finetune")
    for t in reversed(types):
        if "basename" in t and len(t) > 1:
            t.remove("basename")
        else:
            break
    basename = "-".join(n for n, t in zip(parts, types) if "basename" in t) or None
    size = "-".join(dict.fromkeys(s for s, t in zip(parts, types) if "size_label" in t)) or None
    finetune = "-".join(f for f, t in zip(parts, types) if "finetune" in t) or None
    version = (
        "-".join(v for v, t in zip(parts, types) if "version" in t and "basename" not in t) or None
    )
    if size is None and finetune is None and version is None:
        basename = None
    return full, org, basename, finetune, version, size


def _rounded(n: int) -> str:
    """gguf-py's ``model_weight_count_rounded_notation`` (two significant digits)."""
    scale, suffix = 1e-3, "K"
    for limit, sc, sx in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M")):
        if n > limit:
            scale, suffix = sc, sx
            break
    v = n * scale
    fix = max(2 - len(str(round(v)).lstrip("0")), 0)
    return f"{v:.{fix}f}{suffix}"


def size_label(shapes: list[tuple[str, tuple[int, ...]]]) -> tuple[int, str]:
    """``(total parameters, size label)`` of the output tensors, as gguf-py counts them
    (experts: ``<count>x<shared + one expert>``)."""
    total = shared = expert = expert_sum = n_exp = 0
    for name, shape in shapes:
        size = 1
        for d in shape:
            size *= d
        if "_exps." in name and len(shape) >= 3:
            count = shape[-2] if ".bias" in name else shape[-3]
            expert += size // count
            expert_sum += count
            n_exp += 1
        else:
            shared += size
        total += size
    count = expert_sum // n_exp if n_exp else 0
    label = f"{count}x{_rounded(shared + expert)}" if count > 0 else _rounded(total)
    return total, label


# --------------------------------------------------------------------------- rows


class _Meta:
    FIELDS = ("name", "author", "version", "organization", "finetune", "basename",
              "description", "quantized_by", "size_label", "license", "license_name",
              "license_link", "url", "doi", "uuid", "repo_url", "source_url", "source_doi",
              "source_uuid", "source_repo_url", "base_models", "datasets", "tags",
              "languages")  # fmt: skip

    def __init__(self) -> None:
        for f in self.FIELDS:
            setattr(self, f, None)


def _repo_entry(model_id: Any, total: int) -> dict | None:
    if isinstance(model_id, dict):
        return model_id
    if not isinstance(model_id, str):
        return None
    entry: dict[str, Any] = {}
    mid: str | None = model_id
    if model_id.startswith(("http://", "https://", "ssh://")):
        entry["repo_url"] = model_id
        m = re.match(r"https?://huggingface.co/([^/]+/[^/]+)$", model_id)
        mid = m.group(1) if m and "huggingface.co" in model_id else None
        if mid is None:
            return entry
    full, org, _, _, version, _ = _id_components(mid, total)
    if full is not None:
        entry["name"] = _id_to_title(full)
    if org is not None:
        entry["organization"] = _id_to_title(org)
    if version is not None:
        entry["version"] = version
    if "repo_url" not in entry and org is not None and full is not None:
        entry["repo_url"] = f"https://huggingface.co/{org}/{full}"
    return entry


def _as_list(v: Any) -> list:
    return [v] if isinstance(v, str) else list(v) if isinstance(v, list) else []


def _from_card(md: _Meta, card: dict, total: int) -> None:
    def use(attr: str, key: str) -> None:
        if key in card and getattr(md, attr) is None:
            setattr(md, attr, card.get(key))

    for prefix in ("", "model_"):
        for attr, key in (("name", "name"), ("author", "author"), ("version", "version"),
                          ("organization", "organization"), ("description", "description"),
                          ("finetune", "finetune"), ("basename", "basename"),
                          ("size_label", "size_label"), ("source_url", "url"),
                          ("source_doi", "doi"), ("source_uuid", "uuid"),
                          ("source_repo_url", "repo_url")):  # fmt: skip
            use(attr, prefix + key)
    use("name", "model_name")
    use("author", "model_creator")
    use("basename", "model_type")
    for attr, keys in (("base_models", ("base_model", "base_models", "base_model_sources")),
                       ("datasets", ("datasets", "dataset", "dataset_sources"))):  # fmt: skip
        if any(k in card for k in keys):
            value = next((card[k] for k in keys if k in card), None)
            items = getattr(md, attr) or []
            for mid in _as_list(value):
                e = _repo_entry(mid, total)
                if e is not None:
                    items.append(e)
            setattr(md, attr, items)
    use("license", "license")
    use("license_name", "license_name")
    use("license_link", "license_link")
    for attr, key in (("tags", "tags"), ("tags", "pipeline_tag"), ("languages", "languages"),
                      ("languages", "language")):  # fmt: skip
        if card.get(key) is not None:
            setattr(md, attr, (getattr(md, attr) or []) + _as_list(card[key]))


def _from_id(md: _Meta, model_id: str, total: int) -> None:
    full, org, basename, finetune, version, size = _id_components(model_id, total)
    for attr, v in (("name", None if full is None else _id_to_title(full)),
                    ("organization", None if org is None else _id_to_title(org)),
                    ("basename", basename), ("finetune", finetune), ("version", version),
                    ("size_label", size)):  # fmt: skip
        if getattr(md, attr) is None and v is not None:
            setattr(md, attr, v)


# generation_config.json field(s) -> general.sampling.* key and type, in gguf-py's order
_SAMPLING = (
    (("sequence",), "sequence", VT.STRING),
    (("top_k",), "top_k", VT.INT32),
    (("top_p",), "top_p", VT.FLOAT32),
    (("min_p",), "min_p", VT.FLOAT32),
    (("xtc_probability",), "xtc_probability", VT.FLOAT32),
    (("xtc_threshold",), "xtc_threshold", VT.FLOAT32),
    (("temperature",), "temp", VT.FLOAT32),
    (("penalty_last_n",), "penalty_last_n", VT.INT32),
    (("penalty_repeat", "repetition_penalty"), "penalty_repeat", VT.FLOAT32),
    (("mirostat",), "mirostat", VT.INT32),
    (("mirostat_tau",), "mirostat_tau", VT.FLOAT32),
    (("mirostat_eta",), "mirostat_eta", VT.FLOAT32),
)


def _sampling_rows(folder: Any) -> list[tuple[str, Any, GGUFValueType]]:
    p = folder / "generation_config.json"
    try:
        gen = json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}
    except (OSError, ValueError):
        gen = {}  # gguf-py ignores an unreadable generation config too
    if not isinstance(gen, dict):
        return []
    rows = []
    for fields, key, t in _SAMPLING:
        v = next((gen[f] for f in fields if f in gen), None)
        if v is not None:
            rows.append((f"general.sampling.{key}", v, t))
    return rows


def _config_name_or_path(folder: Any) -> str | None:
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the converter reports a bad config.json itself
    v = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    return v if isinstance(v, str) else None


def provenance_rows(
    folder: Any,
    given: str,
    shapes: list[tuple[str, tuple[int, ...]]],
    name: str | None = None,
    *,
    name_or_path: bool = True,
) -> list[tuple[str, Any, GGUFValueType]]:
    """The ``general.*`` rows after ``general.type`` for the model folder ``folder``
    (a Path, or a :class:`zipfile.Path` of files held in memory; ``given``: the path
    as the user passed it), ``shapes`` the output tensors: sampling defaults from
    ``generation_config.json``, then the provenance.  ``name_or_path=False``: the
    model has no config.json, so gguf-py has no ``_name_or_path`` to read."""
    total, label = size_label(shapes)
    md = _Meta()
    _from_card(md, read_card(folder), total)
    if name_or_path:
        # gguf-py reads config.json's own _name_or_path (older transformers saved the Hub id
        # there); AutoConfig's, the path as given, otherwise
        nop = _config_name_or_path(folder)
        if nop is None:
            nop = given
        if nop.count("/") <= 1:
            _from_id(md, nop, total)
    _from_id(md, Path(given).name or Path(given).resolve().name, total)
    if name is not None:
        md.name = name
    if md.size_label is None and total > 0:
        md.size_label = label
    rows = _sampling_rows(folder)
    rows.append(("general.name", md.name, VT.STRING))
    for attr in ("author", "version", "organization", "finetune", "basename", "description",
                 "quantized_by", "size_label"):  # fmt: skip
        if getattr(md, attr) is not None:
            rows.append((f"general.{attr}", str(getattr(md, attr)), VT.STRING))
    if md.license is not None:
        lic = md.license
        rows.append(("general.license", ",".join(lic) if isinstance(lic, list) else str(lic),
                     VT.STRING))  # fmt: skip
    for attr in ("license_name", "license_link", "url", "doi", "uuid", "repo_url",
                 "source_url", "source_doi", "source_uuid", "source_repo_url"):  # fmt: skip
        v = getattr(md, attr)
        if v is not None:
            key = attr.replace("license_", "license.").replace("source_", "source.")
            rows.append((f"general.{key}", str(v), VT.STRING))
    for attr, key in (("base_models", "base_model"), ("datasets", "dataset")):
        items = getattr(md, attr)
        if items is None:
            continue
        rows.append((f"general.{key}.count", len(items), VT.UINT32))
        for i, e in enumerate(items):
            for f in ("name", "author", "version", "organization", "description", "url",
                      "doi", "uuid", "repo_url"):  # fmt: skip
                if f in e:
                    rows.append((f"general.{key}.{i}.{f}", str(e[f]), VT.STRING))
    if md.tags is not None:
        rows.append(("general.tags", [str(t) for t in md.tags], VT.STRING))
    if md.languages is not None:
        rows.append(("general.languages", [str(t) for t in md.languages], VT.STRING))
    return rows


# --------------------------------------------------------------------------- GGUF -> card


def _yaml_str(v: Any) -> str:
    return json.dumps(str(v), ensure_ascii=False)


def card_text(md: dict[str, Any]) -> str | None:
    """A README.md whose front matter reads back into the same ``general.*`` values
    (None when the GGUF carries no provenance beyond its name)."""
    lines: list[str] = []

    def scalar(key: str, gkey: str) -> None:
        v = md.get(gkey)
        if isinstance(v, str):
            lines.append(f"{key}: {_yaml_str(v)}")

    for key in ("name", "author", "version", "organization", "finetune", "basename",
                "description", "quantized_by", "size_label"):  # fmt: skip
        scalar(key, f"general.{key}")
    lic = md.get("general.license")
    if isinstance(lic, str):
        parts = lic.split(",")
        lines.append("license: " + (_yaml_str(lic) if len(parts) == 1 else
                                    "[" + ", ".join(_yaml_str(p) for p in parts) + "]"))  # fmt: skip
    scalar("license_name", "general.license.name")
    scalar("license_link", "general.license.link")
    for key in ("url", "doi", "uuid", "repo_url"):
        scalar(key, f"general.source.{key}")
    for card_key, gkey in (("base_model", "base_model"), ("datasets", "dataset")):
        n = md.get(f"general.{gkey}.count")
        if not isinstance(n, int) or n <= 0:
            continue
        ids = []
        for i in range(n):
            url = md.get(f"general.{gkey}.{i}.repo_url")
            m = re.match(r"https?://huggingface.co/([^/]+/[^/]+)$", url or "")
            ids.append(m.group(1) if m else url or md.get(f"general.{gkey}.{i}.name"))
        lines.append(f"{card_key}:")
        lines += [f"- {_yaml_str(i)}" for i in ids if i]
    for card_key, gkey in (("tags", "general.tags"), ("language", "general.languages")):
        v = md.get(gkey)
        if isinstance(v, list) and v:
            lines.append(f"{card_key}:")
            lines += [f"- {_yaml_str(x)}" for x in v]
    if not lines:
        return None
    title = md.get("general.name") or "model"
    return "---\n" + "\n".join(lines) + f"\n---\n\n# {title}\n"
