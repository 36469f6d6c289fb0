"""Subcommand implementations: each one adapts arguments to one library call."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import NotAvailableError, UnknownTargetError, UsageError
from ._lib import lib as _lib
from ._output import Out, human_bytes
from .progress import call_with_progress


def _out(args: argparse.Namespace) -> Out:
    return Out()


# --------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    demo.run(args.out, seed=args.seed, out=_out(args), quiet=args.quiet)
    return 0


# --------------------------------------------------------------------------- inspect


def load_report(target: str, args: argparse.Namespace):
    """Local or remote inspection of one target."""
    from ..remote import is_remote

    if is_remote(target):
        from .. import remote

        return remote.inspect(
            target,
            token=getattr(args, "token", None),
            endpoint=getattr(args, "endpoint", None),
            jobs=max(1, getattr(args, "jobs", 8) or 8),
        )
    from ..inspection import inspect_local

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
    from ._render import render_report

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
    from ..remote import is_remote

    if is_remote(target):
        # headers only: structure and coverage (offsets against the file size)
        r = load_report(target, args)
        return f"{len(r.files)} file(s), {len(r.tensors)} tensors (header and coverage checked remotely)"
    path = Path(target)
    if not path.exists():
        raise UnknownTargetError(f"{target}: no such file or folder")
    from ..inspection import inspect_local

    report = inspect_local(path)  # every header parsed with full validation
    fmt = report.format
    if fmt == "safetensors":
        if path.is_dir() or path.name.endswith(".index.json"):
            open_checkpoint = _lib("safetensors", "open_checkpoint", what="checkpoint validation")
            with open_checkpoint(path) as ckpt:
                n = len(list(ckpt.keys()))
        else:
            safe_open = _lib("safetensors", "safe_open", what="safetensors validation")
            with safe_open(path, framework="np") as f:
                n = len(list(f.keys()))
        return f"{len(report.files)} file(s), {n} tensors"
    if fmt == "gguf":
        check = _lib("gguf", "validate", "read", what="GGUF validation")
        for f in report.files:
            res = check(f.path)
            close = getattr(res, "close", None)
            if close is not None:
                close()
        return f"{len(report.files)} file(s), {len(report.tensors)} tensors"
    if fmt == "pytorch":
        scan = _lib("torchfile", "scan", what="the pickle scanner")
        for f in report.files:
            scan(f.path)
        return f"{len(report.files)} file(s), {len(report.tensors)} tensors"
    return f"{len(report.tensors)} tensors"


def cmd_validate(args: argparse.Namespace) -> int:
    out = _out(args)
    failed = 0
    for target in args.targets:
        try:
            summary = _validate_one(target, args)
        except NotAvailableError:
            raise
        except Exception as exc:
            if len(args.targets) == 1:
                raise
            failed += 1
            from ._main import _error_line

            print(f"{target}: {_error_line(exc)}", file=sys.stderr)
            continue
        if not args.quiet:
            out.line(f"OK  {target}: {summary}")
    return 1 if failed else 0


# --------------------------------------------------------------------------- diff


def _norm_shape(entry, fmt: str) -> tuple[int, ...]:
    # every reader reports numpy order (outermost first), GGUF included
    return tuple(entry.shape)


def cmd_diff(args: argparse.Namespace) -> int:
    ra, rb = load_report(args.a, args), load_report(args.b, args)
    ta = {t.name: t for t in ra.tensors}
    tb = {t.name: t for t in rb.tensors}
    cross = ra.format != rb.format
    only_a = sorted(set(ta) - set(tb))
    only_b = sorted(set(tb) - set(ta))
    common = sorted(set(ta) & set(tb))
    shape_diff = [
        n for n in common if _norm_shape(ta[n], ra.format) != _norm_shape(tb[n], rb.format)
    ]
    dtype_diff = [n for n in common if ta[n].dtype != tb[n].dtype]
    result: dict[str, Any] = {
        "a": args.a,
        "b": args.b,
        "only_in_a": only_a,
        "only_in_b": only_b,
        "shape_differs": [
            {"name": n, "a": list(ta[n].shape), "b": list(tb[n].shape)} for n in shape_diff
        ],
        "dtype_differs": [{"name": n, "a": ta[n].dtype, "b": tb[n].dtype} for n in dtype_diff],
        "common": len(common),
    }
    if args.values:
        result["values"] = _value_diff(args, ra, rb, [n for n in common if n not in shape_diff])
    # dtype changes are the point of a cross-format diff, not a difference
    differs = bool(only_a or only_b or shape_diff or (dtype_diff and not cross))
    if args.values:
        differs = differs or any(v["max_abs"] != 0 for v in result["values"])
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if differs else 0
    out = _out(args)
    out.line(f"{len(common)} tensors in both, {len(only_a)} only in A, {len(only_b)} only in B")
    for n in only_a:
        out.line(f"- {n}")
    for n in only_b:
        out.line(f"+ {n}")
    for d in result["shape_differs"]:
        out.line(f"~ {d['name']}: shape {d['a']} -> {d['b']}")
    for d in result["dtype_differs"]:
        out.line(f"~ {d['name']}: dtype {d['a']} -> {d['b']}")
    if args.values:
        out.table(
            ["tensor", "rmse", "max abs", "cosine"],
            [
                [v["name"], f"{v['rmse']:.6g}", f"{v['max_abs']:.6g}", f"{v['cosine']:.8f}"]
                for v in result["values"]
            ],
            right=(1, 2, 3),
            title="\nValues",
        )
    out.line("identical" if not differs else "different")
    return 1 if differs else 0


class _Loader:
    """Tensors of a local file as float64 arrays, any format (dequantizing GGUF)."""

    def __init__(self, report) -> None:
        self.report = report
        self.by_name = {t.name: t for t in report.tensors}
        self._open: dict[str, Any] = {}

    def get(self, name: str):
        import numpy as np

        t = self.by_name[name]
        fmt = self.report.format
        if fmt == "safetensors":
            if t.file not in self._open:
                safe_open = _lib("safetensors", "safe_open", what="reading safetensors")
                self._open[t.file] = safe_open(t.file, framework="np").__enter__()
            arr = np.asarray(self._open[t.file].get_tensor(name))
            return arr.astype(np.float64).reshape(t.shape)
        if fmt == "gguf":
            if t.file not in self._open:
                read = _lib("gguf", "read", what="reading GGUF")
                self._open[t.file] = read(t.file)
            arr = np.asarray(self._open[t.file].dequantize(name))
            return arr.astype(np.float64).reshape(t.shape)
        raise NotAvailableError(f"diff --values of {fmt} files is not available yet")

    def close(self) -> None:
        for f in self._open.values():
            if hasattr(f, "__exit__"):
                f.__exit__(None, None, None)
            else:
                f.close()


def _value_diff(args, ra, rb, names: list[str]) -> list[dict[str, Any]]:
    import numpy as np

    if ra.remote or rb.remote:
        raise NotAvailableError("diff --values needs local files (remote reads are headers only)")
    la, lb = _Loader(ra), _Loader(rb)
    rows = []
    try:
        for n in names:
            a, b = la.get(n).ravel(), lb.get(n).ravel()
            d = a - b
            na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
            cos = float(a @ b) / (na * nb) if na and nb else (1.0 if na == nb else 0.0)
            rows.append(
                {
                    "name": n,
                    "rmse": float(np.sqrt(np.mean(d * d))) if d.size else 0.0,
                    "max_abs": float(np.max(np.abs(d))) if d.size else 0.0,
                    "cosine": cos,
                }
            )
    finally:
        la.close()
        lb.close()
    return rows


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
    if path.is_dir():
        if any(path.glob("*.safetensors")):
            return "folder"
        if any(path.glob("*.gguf")):
            return "gguf"
        if any(path.glob("*.bin")) or any(path.glob("*.pth")):
            return "pytorch"
        return "folder"
    return "folder" if not path.suffix else "unknown"


def cmd_convert(args: argparse.Namespace) -> int:
    src, dst = _kind(args.src), _kind(args.dst)
    kw: dict[str, Any] = {}
    target = args.dst
    if src == "pytorch" and dst in ("safetensors", "folder"):
        fn = _lib("convert", "torch_to_safetensors", what="PyTorch -> safetensors conversion")
        if args.type:
            raise UsageError(
                "convert: --type is not supported for .pth -> safetensors (dtypes are kept)"
            )
        if args.max_shard_size:
            kw["max_shard_size"] = args.max_shard_size
        if dst == "folder":
            Path(args.dst).mkdir(parents=True, exist_ok=True)
            target = str(Path(args.dst) / "model.safetensors")
    elif src in ("folder", "safetensors") and dst == "gguf":
        fn = _lib("convert", "hf_to_gguf", "safetensors_to_gguf", what="HF -> GGUF conversion")
        if args.type:
            kw["type"] = args.type
    elif src == "gguf" and dst in ("folder", "safetensors"):
        fn = _lib("convert", "gguf_to_hf", "gguf_to_safetensors", what="GGUF -> HF conversion")
        if args.type:
            kw["type"] = args.type
    elif src in ("folder", "safetensors") and dst in ("folder", "safetensors"):
        fn = _lib("convert", "safetensors_to_safetensors", what="safetensors conversion")
        if args.type:
            kw["dtype"] = args.type
        if args.max_shard_size:
            kw["max_shard_size"] = args.max_shard_size
    else:
        raise UnknownTargetError(f"no conversion from {args.src} ({src}) to {args.dst} ({dst})")
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
    from ._lib import lib_or_none

    fn = lib_or_none("quant", "quantize_file")
    if fn is None:
        from ..quant._file import quantize_file as fn
    kw: dict[str, Any] = {"type": args.type}
    if args.imatrix:
        kw["imatrix"] = args.imatrix
    call_with_progress(fn, args.src, args.dst, description="quantize", quiet=args.quiet, **kw)
    _done(args, args.dst)
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
    from ..gguf._spec import value_type

    try:
        return value_type(name)
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
    edit = _lib("gguf", "edit", what="GGUF metadata editing")
    from .. import gguf

    if not args.set_ and not args.remove:
        raise UsageError("edit: nothing to do (give --set KEY=VALUE[:TYPE] or --remove KEY)")
    with open(args.file, "rb") as fh:
        import mmap

        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            header = gguf.parse(mm, len(mm), args.file)
            existing = {k: kv.type for k, kv in header.kvs.items()}
            del header
    values: dict[str, object] = {}
    for key, text, tname in (parse_set(x) for x in args.set_):
        if tname is not None:
            vt = _gguf_type(tname)
            values[key] = gguf.GGUFValue(convert_value(key, text, vt), tname)
        elif key in existing:
            values[key] = convert_value(key, text, existing[key].type)
        else:
            values[key] = _guess(text)
    out = edit(args.file, set=values, remove=list(args.remove), out=args.output)
    _done(args, str(out))
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    split = _lib("gguf", "split", what="GGUF split")
    kw: dict[str, Any] = {"out_dir": args.dst}
    if args.max_size:
        kw["max_size"] = args.max_size
    if args.max_tensors:
        kw["max_tensors"] = args.max_tensors
    Path(args.dst).mkdir(parents=True, exist_ok=True)
    paths = call_with_progress(split, args.src, description="split", quiet=args.quiet, **kw)
    if not args.quiet:
        for p in paths or []:
            _out(args).line(f"wrote {p}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    merge = _lib("gguf", "merge", what="GGUF merge")
    out = call_with_progress(merge, args.src, args.dst, description="merge", quiet=args.quiet)
    _done(args, str(out or args.dst))
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    """Exit 0 for a weights-only file, 1 when the pickle does anything else."""
    scan = _lib("torchfile", "scan", what="the pickle scanner")
    report = scan(args.file)
    if args.json:
        d = {
            "path": report.path,
            "layout": report.layout,
            "safe": report.safe,
            "supported": report.supported,
            "globals": list(report.globals),
            "opcode_classes": report.opcode_classes,
            "reasons": list(report.reasons),
        }
        json.dump(d, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        _out(args).line(str(report))
    return 0 if report.safe else 1
