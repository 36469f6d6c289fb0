"""Subcommand implementations: each one adapts arguments to one library call."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .. import gguf, remote, torchfile
from ..byteio import RemoteOptions, is_url
from ..convert import (
    compare,
    gguf_to_hf,
    hf_to_gguf,
    is_meta_dir,
    is_mistral_dir,
    meta_to_gguf,
    meta_to_hf,
    mistral_to_gguf,
    safetensors_to_safetensors,
    torch_to_safetensors,
)
from ..errors import UnknownTargetError, UsageError
from ..inspection import inspect_local, validate_local
from ..quant.file import batch_quantize, quantize_file
from ..safetensors import parse_size
from . import demo
from ._output import Out, error_line, human_bytes
from ._render import render_report
from .progress import call_with_progress


def _out(args: argparse.Namespace) -> Out:
    return Out()


# --------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    demo.run(args.out, out=_out(args), quiet=args.quiet)
    return 0


# --------------------------------------------------------------------------- inspect


def load_report(target: str, args: argparse.Namespace):
    """Local or remote inspection of one target."""
    if remote.is_remote(target):
        return remote.inspect(
            target,
            token=getattr(args, "token", None),
            endpoint=getattr(args, "endpoint", None),
            jobs=max(1, getattr(args, "jobs", 8) or 8),
        )
    path = target[7:] if target.startswith("file://") else target
    if not os.path.exists(path):
        raise UnknownTargetError(f"{target}: no such file or folder, and not a URL or ORG/REPO")
    return inspect_local(path)


def cmd_inspect(args: argparse.Namespace) -> int:
    report = load_report(args.target, args)
    if args.json:
        d = report.to_dict(tensors=not args.no_tensors, pattern=args.tensors)
        json.dump(d, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    render_report(
        report,
        _out(args),
        tensors=not args.no_tensors,
        pattern=args.tensors,
        all_layers=args.all_layers,
    )
    return 0


# --------------------------------------------------------------------------- validate


def _validate_one(target: str, args: argparse.Namespace) -> str:
    if remote.is_remote(target):
        # headers only: structure and coverage (offsets against the file size)
        r = load_report(target, args)
        return f"{len(r.files)} file(s), {len(r.tensors)} tensors (header and coverage checked remotely)"
    if not Path(target).exists():
        raise UnknownTargetError(f"{target}: no such file or folder")
    report, n = validate_local(target)
    if report.format in ("safetensors", "gguf", "pytorch"):
        return f"{len(report.files)} file(s), {n} tensors"
    return f"{n} tensors"


def cmd_validate(args: argparse.Namespace) -> int:
    out = _out(args)
    failed = 0
    for target in args.targets:
        try:
            summary = _validate_one(target, args)
        except Exception as exc:
            if len(args.targets) == 1:
                raise
            failed += 1
            print(f"{target}: {error_line(exc)}", file=sys.stderr)
            continue
        if not args.quiet:
            out.line(f"OK  {target}: {summary}")
    return 1 if failed else 0


# --------------------------------------------------------------------------- diff


def cmd_diff(args: argparse.Namespace) -> int:
    """Exit 0 when A and B hold the same tensors (and values, with ``--values``), else 1.

    ``--json`` prints :attr:`weightsmith.convert.compare.Diff.result` (schema:
    docs/cli-diff-json-schema.json).
    """
    ra, rb = load_report(args.a, args), load_report(args.b, args)
    d = call_with_progress(
        compare.diff, args.a, args.b, ra, rb, values=args.values, description="diff",
        quiet=args.quiet or not args.values,
    )  # fmt: skip
    result = d.result
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if d.differs else 0
    out = _out(args)
    if d.arch is not None:
        out.line(
            f"names and layouts matched through the {d.arch} entry of the "
            "architecture registry (HF name -> GGUF name)"
        )
    common = result["common"]
    if d.cross and d.arch is None and not common:
        out.line(
            "note: no tensor names in common; an HF model is matched to a GGUF through "
            "the architecture registry only when its folder has a config.json"
        )
    out.line(
        f"{common} tensors in both, {len(result['only_in_a'])} only in A, "
        f"{len(result['only_in_b'])} only in B"
    )
    for n in result["only_in_a"]:
        out.line(f"- {n}")
    for n in result["only_in_b"]:
        out.line(f"+ {n}")
    for n in result.get("derived", []):
        out.line(f"  {n}: computed from config.json by the converter (not compared)")
    for x in result["shape_differs"]:
        out.line(f"~ {x['name']}: shape {x['a']} -> {x['b']}")
    if not d.cross:
        for x in result["dtype_differs"]:
            out.line(f"~ {x['name']}: dtype {x['a']} -> {x['b']}")
    if result.get("values_skipped"):
        out.line(f"values not compared: {result['values_skipped']}")
    elif args.values:
        out.table(
            ["tensor", "rmse", "max abs", "cosine"],
            [
                [_pair_name(v), f"{v['rmse']:.6g}", f"{v['max_abs']:.6g}", f"{v['cosine']:.8f}"]
                for v in result["values"]
            ],
            right=(1, 2, 3),
            title="\nValues",
        )
    out.line("identical" if not d.differs else "different")
    return 1 if d.differs else 0


def _pair_name(v: dict[str, Any]) -> str:
    b = v.get("name_b")
    return v["name"] if not b or b == v["name"] else f"{v['name']} -> {b}"


# --------------------------------------------------------------------------- convert & co


def _kind(p: str) -> str:
    path = Path(p)
    low = path.name.lower()
    if low.endswith(".gguf"):
        return "gguf"
    if low.endswith((".pth", ".pt", ".bin", ".ckpt")):
        return "pytorch"
    if low.endswith(".safetensors") or low.endswith(".index.json"):
        return "safetensors"
    if is_url(p):  # a remote model folder (hf://ORG/REPO, .../resolve/main)
        return "folder"
    if path.is_dir():
        if any(path.glob("*.safetensors")):
            return "folder"
        if any(path.glob("*.gguf")):
            return "gguf"
        if any(path.glob("*.bin")) or any(path.glob("*.pth")):
            return "pytorch"
        return "folder"
    return "folder" if not path.suffix else "unknown"


def _hf_folder(p: str) -> bool:
    return Path(p).is_dir() and (Path(p) / "config.json").is_file()


def _gguf_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of a conversion to GGUF, as hf_to_gguf takes them."""
    kw: dict[str, Any] = {"type": args.type or "auto"}
    if args.imatrix:
        kw["imatrix"] = args.imatrix
    if args.max_size:
        kw["split_max_size"] = args.max_size
    if args.no_tokenizer:
        kw["tokenizer"] = False
    return kw


def _reject(args: argparse.Namespace, what: str, *flags: str) -> None:
    for flag in flags:
        if getattr(args, flag.lstrip("-").replace("-", "_"), None):
            raise UsageError(f"convert: {flag} does not apply to {what}")


def cmd_convert(args: argparse.Namespace) -> int:
    src, dst = _kind(args.src), _kind(args.dst)
    kw: dict[str, Any] = {}
    target = args.dst
    if _hf_folder(args.src) and dst == "gguf":
        # an HF folder with .bin weights is still a model folder: hf_to_gguf reads both
        src = "folder"
    forced = getattr(args, "mistral_format", False)
    if forced and not (is_mistral_dir(args.src) and dst == "gguf"):
        raise UsageError(
            "convert: --mistral-format reads a Mistral original folder (params.json + "
            "consolidated*.safetensors) into a .gguf file"
        )
    if is_meta_dir(args.src) and dst in ("folder", "safetensors"):
        _reject(args, "Meta original -> HF", "--imatrix")
        fn = meta_to_hf
        if args.type:
            kw["dtype"] = args.type
        if args.max_size:
            kw["max_shard_size"] = args.max_size
        if args.no_tokenizer:
            kw["tokenizer"] = False
        if args.llama_version:
            kw["llama_version"] = args.llama_version
    elif is_meta_dir(args.src) and dst == "gguf":
        fn = meta_to_gguf
        kw.update(_gguf_options(args))
        if args.llama_version:
            kw["llama_version"] = args.llama_version
    elif (forced or not _hf_folder(args.src)) and is_mistral_dir(args.src) and dst == "gguf":
        # Mistral's original layout (an HF folder beside it, with config.json, wins unless
        # --mistral-format says otherwise)
        _reject(args, "Mistral original -> GGUF", "--llama-version")
        fn = mistral_to_gguf
        kw.update(_gguf_options(args))
    elif src == "pytorch" and dst in ("safetensors", "folder"):
        what = ".pth -> safetensors (dtypes are kept)"
        _reject(args, what, "--type", "--imatrix", "--no-tokenizer")
        fn = torch_to_safetensors
        if args.max_size:
            kw["max_shard_size"] = args.max_size
        if dst == "folder":  # the converter makes the folder once the input is read
            target = str(Path(args.dst) / "model.safetensors")
    elif src in ("folder", "safetensors") and dst == "gguf":
        fn = hf_to_gguf
        # hf_to_gguf reads a model folder: a file inside one stands for its folder
        if is_url(args.src):
            args.src = args.src.rstrip("/").rsplit("/", 1)[0] if src != "folder" else args.src
        else:
            source = Path(args.src)
            args.src = str(source if source.is_dir() else source.parent)
        kw.update(_gguf_options(args))
        if is_url(args.src):
            kw["remote"] = _remote_options(args)
    elif src == "gguf" and dst in ("folder", "safetensors"):
        _reject(args, "GGUF -> HF", "--imatrix")
        fn = gguf_to_hf
        if dst == "safetensors":
            raise UsageError(
                f"convert: GGUF -> HF writes a model folder; give a folder, not {args.dst}"
            )
        if args.type:
            kw["dtype"] = args.type
        if args.max_size:
            kw["max_shard_size"] = args.max_size
        if args.no_tokenizer:
            kw["tokenizer"] = False
    elif src in ("folder", "safetensors") and dst in ("folder", "safetensors"):
        _reject(args, "safetensors -> safetensors", "--imatrix", "--no-tokenizer")
        fn = safetensors_to_safetensors
        if args.type:
            kw["dtype"] = args.type
        if args.max_size:
            kw["max_shard_size"] = args.max_size
    elif src == "gguf" and dst == "gguf":
        raise UsageError(
            f"convert: {args.src} and {args.dst} are both GGUF; to change the tensor types use "
            f"`weightsmith quantize {args.src} {args.dst} --type q4_k_m` "
            "(split/merge for shards, edit for metadata)"
        )
    else:
        raise UnknownTargetError(f"no conversion from {args.src} ({src}) to {args.dst} ({dst})")
    if args.ray:
        if fn is not hf_to_gguf:
            raise UsageError("convert: --ray applies to HF folder -> GGUF (and to quantize)")
        kw["ray"] = args.ray
    if getattr(args, "mtp", None) is not None:
        if fn is not hf_to_gguf:
            raise UsageError("convert: --mtp / --no-mtp apply to HF folder -> GGUF")
        kw["mtp"] = args.mtp
    if getattr(args, "mmproj", None) is not None:  # "" is --mmproj without a path
        if fn is gguf_to_hf:  # the projector GGUF read back with the text one
            if not args.mmproj:
                raise UsageError("convert: GGUF -> HF: --mmproj needs the projector GGUF's path")
            kw["mmproj"] = args.mmproj
        elif fn is hf_to_gguf or fn is mistral_to_gguf:
            out = Path(args.dst)
            kw["mmproj"] = args.mmproj or str(out.with_name("mmproj-" + out.name))
        else:
            raise UsageError(
                "convert: --mmproj applies to HF folder <-> GGUF and Mistral folder -> GGUF"
            )
    result = call_with_progress(fn, args.src, target, description="convert", quiet=args.quiet, **kw)
    _report_conversion(args, result, target)
    return 0


def _report_conversion(args: argparse.Namespace, result: Any, target: str) -> None:
    if args.quiet:
        return
    out = _out(args)
    files = getattr(result, "files", None) or (result if isinstance(result, list) else [target])
    for f in files:
        path = Path(f) if Path(f).is_absolute() or Path(f).exists() else Path(target).parent / f
        size = path.stat().st_size if path.is_file() else None
        out.line(f"wrote {path}" + (f" ({human_bytes(size)})" if size is not None else ""))
    for dropped, kept in (getattr(result, "aliases", None) or {}).items():
        out.line(f"note: {dropped} is the same tensor as {kept}: stored once")
    for name, text in (getattr(result, "non_tensors", None) or {}).items():
        out.line(f"note: non-tensor {name} = {text}")


def _done(args: argparse.Namespace, path: str) -> None:
    if not args.quiet:
        size = Path(path).stat().st_size if Path(path).is_file() else None
        _out(args).line(f"wrote {path}" + (f" ({human_bytes(size)})" if size is not None else ""))


def cmd_quantize(args: argparse.Namespace) -> int:
    kw: dict[str, Any] = {"type": args.type, "imatrix": args.imatrix, "ray": args.ray}
    if is_url(args.src):
        kw["remote"] = _remote_options(args)
    result = call_with_progress(
        quantize_file,
        args.src,
        args.dst,
        description="quantize",
        quiet=args.quiet or args.json,
        **kw,
    )
    if args.json:
        json.dump({"path": args.dst, **result.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    _done(args, args.dst)
    if not args.quiet:
        _out(args).line(result.summary())
    return 0


def _remote_options(args: argparse.Namespace) -> RemoteOptions:
    return RemoteOptions(
        token=args.token,
        endpoint=args.endpoint,
        cache_dir=args.cache_dir,
        cache_max_bytes=parse_size(args.cache_size),
    )


def cmd_batch_quantize(args: argparse.Namespace) -> int:
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    if not types:
        raise UsageError(f"batch-quantize: --types {args.types!r} names no file type")
    results = call_with_progress(
        batch_quantize,
        args.src,
        types,
        args.out,
        description="batch-quantize",
        quiet=args.quiet,
        imatrix=args.imatrix,
        ray=args.ray,
        remote=_remote_options(args) if is_url(args.src) else None,
    )
    for path, result in results.items():
        _done(args, path)
        if not args.quiet:
            _out(args).line("  " + result.summary())
    return 0


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def parse_set(item: str) -> tuple[str, str, str | None]:
    """``KEY=VALUE[:TYPE]`` -> (key, value, type or None); TYPE is a GGUF type name."""
    key, sep, rest = item.partition("=")
    if not sep or not key:
        raise UsageError(f"--set {item!r}: expected KEY=VALUE[:TYPE]")
    head, colon, tail = rest.rpartition(":")
    if colon and _gguf_type(tail) is not None:
        return key, head, tail
    return key, rest, None


def _gguf_type(name: str):
    try:
        return gguf.value_type(name)
    except (ValueError, KeyError):
        return None


def convert_value(key: str, text: str, vtype) -> object:
    """The Python value of ``text`` for a GGUF value type (scalars and strings)."""
    kind = vtype.name
    try:
        if kind.startswith(("UINT", "INT")):
            return int(text, 0)
        if kind.startswith("FLOAT"):
            return float(text)
    except ValueError:
        raise UsageError(f"--set {key}: {text!r} is not a {kind.lower()}") from None
    if kind == "BOOL":
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise UsageError(f"--set {key}: {text!r} is not a bool (true/false)")
    if kind == "STRING":
        return text
    raise UsageError(
        f"--set {key}: values of type {kind.lower()} cannot be given on the command line"
    )


def _guess(text: str) -> object:
    """A new key without a type: bool, int, float or str, by what the text looks like."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def cmd_edit(args: argparse.Namespace) -> int:
    if not args.set_ and not args.remove:
        raise UsageError("edit: nothing to do (give --set KEY=VALUE[:TYPE] or --remove KEY)")
    existing = gguf.kv_types(args.file)
    values: dict[str, object] = {}
    for key, text, tname in (parse_set(x) for x in args.set_):
        if tname is not None:
            vt = _gguf_type(tname)
            values[key] = gguf.GGUFValue(convert_value(key, text, vt), tname)
        elif key in existing:
            values[key] = convert_value(key, text, existing[key].type)
        else:
            values[key] = _guess(text)
    out = gguf.edit(args.file, set=values, remove=list(args.remove), out=args.output)
    _done(args, str(out))
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    kw: dict[str, Any] = {"dst": args.dst}
    if args.max_size:
        kw["max_size"] = args.max_size
    if args.max_tensors:
        kw["max_tensors"] = args.max_tensors
    paths = call_with_progress(gguf.split, args.src, description="split", quiet=args.quiet, **kw)
    if not args.quiet:
        for p in paths or []:
            _out(args).line(f"wrote {p}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    out = call_with_progress(gguf.merge, args.src, args.dst, description="merge", quiet=args.quiet)
    _done(args, str(out or args.dst))
    return 0


def _scan_dict(report) -> dict[str, Any]:
    return {
        "path": report.path,
        "layout": report.layout,
        "holds_code": report.holds_code,
        "safe": report.safe,
        "supported": report.supported,
        "globals": list(report.globals),
        "opcode_classes": report.opcode_classes,
        "reasons": list(report.reasons),
    }


def cmd_scan(args: argparse.Namespace) -> int:
    """Exit 0 for weights-only files (safetensors and GGUF hold no code), 1 otherwise."""
    report = torchfile.scan(args.file)
    if args.json:
        files = getattr(report, "files", None)
        d = (
            _scan_dict(report)
            if files is None
            else {"path": report.path, "safe": report.safe, "files": [_scan_dict(r) for r in files]}
        )
        json.dump(d, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        _out(args).line(str(report))
    return 0 if report.safe else 1
