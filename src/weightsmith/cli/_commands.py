"""Subcommand implementations: each one adapts arguments to one library call."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import NotAvailableError, UnknownTargetError, UsageError
from ..quant.file import dequantize_tensor
from ._lib import lib as _lib
from ._output import Out, human_bytes
from .progress import call_with_progress


def _out(args: argparse.Namespace) -> Out:
    return Out()


# --------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    demo.run(args.out, out=_out(args), quiet=args.quiet)
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


def cmd_diff(args: argparse.Namespace) -> int:
    """Exit 0 when A and B hold the same tensors (and values, with ``--values``), else 1.

    ``--json`` (schema: docs/cli-diff-json-schema.json) keys: ``a``, ``b``, ``common`` (count), ``only_in_a``, ``only_in_b``,
    ``shape_differs`` / ``dtype_differs`` (``name``, ``a``, ``b``), and with ``--values``
    ``values`` (``name``, ``rmse``, ``max_abs``, ``cosine``).  An HF model against a
    GGUF adds ``matched_by``, ``derived`` (GGUF tensors computed from config.json),
    ``name_b`` (the tensor's name in B) and the GGUF ``type`` of each value row.
    """
    ra, rb = load_report(args.a, args), load_report(args.b, args)
    pair = _registry_pair(args, ra, rb)
    if pair is not None:
        result, cross = _registry_diff(args, pair), True
    else:
        result, cross = _plain_diff(args, ra, rb), ra.format != rb.format
    only_a, only_b = result["only_in_a"], result["only_in_b"]
    shape_diff, dtype_diff = result["shape_differs"], result["dtype_differs"]
    # dtype changes are the point of a cross-format diff, not a difference
    differs = bool(only_a or only_b or shape_diff or (dtype_diff and not cross))
    if args.values:
        differs = differs or any(v["max_abs"] != 0 for v in result["values"])
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if differs else 0
    out = _out(args)
    if pair is not None:
        out.line(
            f"names and layouts matched through the {pair.arch.gguf_arch} entry of the "
            "architecture registry (HF name -> GGUF name)"
        )
    common = result["common"]
    if cross and pair is None and not common:
        out.line(
            "note: no tensor names in common; an HF model is matched to a GGUF through "
            "the architecture registry only when its folder has a config.json"
        )
    out.line(f"{common} tensors in both, {len(only_a)} only in A, {len(only_b)} only in B")
    for n in only_a:
        out.line(f"- {n}")
    for n in only_b:
        out.line(f"+ {n}")
    for n in result.get("derived", []):
        out.line(f"  {n}: computed from config.json by the converter (not compared)")
    for d in shape_diff:
        out.line(f"~ {d['name']}: shape {d['a']} -> {d['b']}")
    if not cross:
        for d in dtype_diff:
            out.line(f"~ {d['name']}: dtype {d['a']} -> {d['b']}")
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
    out.line("identical" if not differs else "different")
    return 1 if differs else 0


def _pair_name(v: dict[str, Any]) -> str:
    b = v.get("name_b")
    return v["name"] if not b or b == v["name"] else f"{v['name']} -> {b}"


def _plain_diff(args: argparse.Namespace, ra, rb) -> dict[str, Any]:
    """Same-format diff (or cross-format with equal names): tensors matched by name."""
    ta = {t.name: t for t in ra.tensors}
    tb = {t.name: t for t in rb.tensors}
    common = sorted(set(ta) & set(tb))
    # every reader reports numpy order (outermost first), GGUF included
    shape_diff = [n for n in common if tuple(ta[n].shape) != tuple(tb[n].shape)]
    dtype_diff = [n for n in common if ta[n].dtype != tb[n].dtype]
    result: dict[str, Any] = {
        "a": args.a,
        "b": args.b,
        "only_in_a": sorted(set(ta) - set(tb)),
        "only_in_b": sorted(set(tb) - set(ta)),
        "shape_differs": [
            {"name": n, "a": list(ta[n].shape), "b": list(tb[n].shape)} for n in shape_diff
        ],
        "dtype_differs": [{"name": n, "a": ta[n].dtype, "b": tb[n].dtype} for n in dtype_diff],
        "common": len(common),
    }
    if args.values:
        result["values"] = _value_diff(args, ra, rb, [n for n in common if n not in shape_diff])
    return result


# ---- HF model against GGUF: names and layouts through the architecture registry


class _Pair:
    """An HF model (folder, or one safetensors file of it) and a GGUF of a registry arch."""

    def __init__(self, hf_dir: Path, hf_report, gguf_report, arch, hf_is_a: bool) -> None:
        self.hf_dir, self.hf, self.gguf = hf_dir, hf_report, gguf_report
        self.arch, self.hf_is_a = arch, hf_is_a


def _hf_dir_of(target: str) -> Path | None:
    p = Path(target[7:] if target.startswith("file://") else target)
    d = p if p.is_dir() else p.parent
    return d if (d / "config.json").is_file() else None


def _registry_pair(args: argparse.Namespace, ra, rb) -> _Pair | None:
    """The pair when A/B are an HF model and a GGUF the registry knows; else None
    (then tensors are matched by name, e.g. a safetensors file of GGUF-named tensors)."""
    if ra.remote or rb.remote or {ra.format, rb.format} != {"safetensors", "gguf"}:
        return None
    hf_is_a = ra.format == "safetensors"
    hf, gg = (ra, rb) if hf_is_a else (rb, ra)
    hf_dir = _hf_dir_of(args.a if hf_is_a else args.b)
    if hf_dir is None:
        return None
    from ..convert.arch import by_gguf_arch

    arch = by_gguf_arch(str(gg.files[0].metadata.get("general.architecture", "")))
    if arch is None:
        return None
    return _Pair(hf_dir, hf, gg, arch, hf_is_a)


def _n_vocab(gguf_report) -> int | None:
    tokens = gguf_report.files[0].metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, dict):
        return tokens.get("array_length")
    return len(tokens) if isinstance(tokens, list) else None


def _registry_diff(args: argparse.Namespace, pair: _Pair) -> dict[str, Any]:
    """Tensor sets and shapes in GGUF terms: each HF tensor gets the registry's GGUF
    name and the shape its transforms give; values come from convert.compare, which
    puts the HF tensors through the converter's own transforms (Q/K permutation,
    Gemma's norm + 1, ...) and dequantizes the GGUF side."""
    arch = pair.arch
    from ..convert._hf_to_gguf import _read_config  # a named error for a bad config.json

    cfg = _read_config(pair.hf_dir)
    ctx = {"n_vocab": _n_vocab(pair.gguf)}
    hf_of: dict[str, Any] = {}  # GGUF name -> HF tensor entry
    unmapped: list[str] = []
    for t in pair.hf.tensors:
        if arch.skipped(t.name):
            continue
        g = arch.gguf_name(t.name)
        if g is None:
            unmapped.append(t.name)
        else:
            hf_of[g] = t
    gg = {t.name: t for t in pair.gguf.tensors}
    derived = sorted(n for n in gg if n in arch.extra and n not in hf_of)
    common = sorted(set(hf_of) & set(gg))
    only_hf = sorted(unmapped + [hf_of[g].name for g in set(hf_of) - set(gg)])
    only_gguf = sorted(n for n in set(gg) - set(hf_of) if n not in derived)

    def shape_in_gguf(t) -> tuple[int, ...]:
        shape = tuple(t.shape)
        for tr in arch.transforms_for(t.name):
            if tr.shape is not None:
                shape = tuple(tr.shape(shape, cfg, ctx))
        return shape

    def named(g: str) -> tuple[str, str]:
        """(name in A, name in B) of a matched pair."""
        h = hf_of[g].name
        return (h, g) if pair.hf_is_a else (g, h)

    def side(hf_val: Any, gguf_val: Any) -> tuple[Any, Any]:
        return (hf_val, gguf_val) if pair.hf_is_a else (gguf_val, hf_val)

    shape_diff, dtype_diff = [], []
    for g in common:
        hs, gs = shape_in_gguf(hf_of[g]), tuple(gg[g].shape)
        na, nb = named(g)
        if hs != gs:
            a, b = side(list(hf_of[g].shape), list(gs))
            shape_diff.append({"name": na, "name_b": nb, "a": a, "b": b})
        if hf_of[g].dtype != gg[g].dtype:
            a, b = side(hf_of[g].dtype, gg[g].dtype)
            dtype_diff.append({"name": na, "name_b": nb, "a": a, "b": b})
    only_a, only_b = side(only_hf, only_gguf)
    result: dict[str, Any] = {
        "a": args.a,
        "b": args.b,
        "matched_by": f"architecture registry ({arch.gguf_arch})",
        "only_in_a": only_a,
        "only_in_b": only_b,
        "shape_differs": shape_diff,
        "dtype_differs": dtype_diff,
        "derived": derived,
        "common": len(common),
    }
    if args.values and shape_diff:
        # convert.compare puts the whole folder through the converter's plan, which needs
        # every layout to fit; with a shape mismatch there is no value comparison to make
        result["values"] = []
        result["values_skipped"] = "shapes differ: values are compared only for matching layouts"
    elif args.values:
        result["values"] = _registry_values(args, pair, common, named)
    return result


def _registry_values(args, pair: _Pair, wanted: list[str], named) -> list[dict[str, Any]]:
    compare = _lib("convert", "compare", what="HF <-> GGUF value comparison")
    keep = set(wanted)
    rows: dict[str, dict[str, Any]] = {}
    for f in pair.gguf.files:  # each shard of a split GGUF on its own
        rep = call_with_progress(compare, pair.hf_dir, f.path, description="diff", quiet=args.quiet)
        for q in rep.tensors:
            if q.name in keep:
                na, nb = named(q.name)
                rows[q.name] = {
                    "name": na,
                    "name_b": nb,
                    "type": q.type,
                    "rmse": q.rmse,
                    "max_abs": q.max_abs,
                    "cosine": q.cosine,
                }
    missing = keep - set(rows)
    if missing:
        raise NotAvailableError(
            f"diff --values: convert.compare gave no values for {len(missing)} tensor(s), "
            f"e.g. {sorted(missing)[0]}"
        )
    return [rows[g] for g in wanted]


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
            arr = np.asarray(dequantize_tensor(self._open[t.file], name))
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


def _hf_folder(p: str) -> bool:
    return Path(p).is_dir() and (Path(p) / "config.json").is_file()


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
    if src == "pytorch" and dst in ("safetensors", "folder"):
        what = ".pth -> safetensors (dtypes are kept)"
        _reject(args, what, "--type", "--imatrix", "--split-max-size", "--no-tokenizer")
        fn = _lib("convert", "torch_to_safetensors", what="PyTorch -> safetensors conversion")
        if args.max_shard_size:
            kw["max_shard_size"] = args.max_shard_size
        if dst == "folder":
            Path(args.dst).mkdir(parents=True, exist_ok=True)
            target = str(Path(args.dst) / "model.safetensors")
    elif src in ("folder", "safetensors") and dst == "gguf":
        _reject(args, "HF -> GGUF (use --split-max-size)", "--max-shard-size")
        fn = _lib("convert", "hf_to_gguf", what="HF -> GGUF conversion")
        # hf_to_gguf reads a model folder: a file inside one stands for its folder
        source = Path(args.src)
        args.src = str(source if source.is_dir() else source.parent)
        kw["type"] = args.type or "auto"
        if args.imatrix:
            kw["imatrix"] = args.imatrix
        if args.split_max_size:
            kw["split_max_size"] = args.split_max_size
        if args.no_tokenizer:
            kw["tokenizer"] = False
    elif src == "gguf" and dst in ("folder", "safetensors"):
        _reject(args, "GGUF -> HF", "--imatrix", "--split-max-size")
        fn = _lib("convert", "gguf_to_hf", what="GGUF -> HF conversion")
        if dst == "safetensors":
            raise UsageError(
                f"convert: GGUF -> HF writes a model folder; give a folder, not {args.dst}"
            )
        if args.type:
            kw["dtype"] = args.type
        if args.max_shard_size:
            kw["max_shard_size"] = args.max_shard_size
        if args.no_tokenizer:
            kw["tokenizer"] = False
    elif src in ("folder", "safetensors") and dst in ("folder", "safetensors"):
        _reject(
            args, "safetensors -> safetensors", "--imatrix", "--split-max-size", "--no-tokenizer"
        )
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
        from ..quant.file import quantize_file as fn
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


def _kv_types(path: str) -> dict[str, Any]:
    """The value type of every KV of one GGUF file (this file only, not its split set)."""
    import mmap

    from .. import gguf

    if os.path.getsize(path) == 0:  # mmap refuses empty files: let the parser name the error
        gguf.parse(b"", 0, path)
    err: BaseException | None = None
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            header = gguf.parse(mm, len(mm), path)
            existing = {k: kv.type for k, kv in header.kvs.items()}
            del header
        except Exception as exc:
            # the parser's frames in the traceback hold views of the mapping, and closing
            # a mapping with views alive raises BufferError, which would hide this error
            exc.__traceback__ = None
            err = exc
    if err is not None:
        raise err
    return existing


def cmd_edit(args: argparse.Namespace) -> int:
    edit = _lib("gguf", "edit", what="GGUF metadata editing")
    from .. import gguf

    if not args.set_ and not args.remove:
        raise UsageError("edit: nothing to do (give --set KEY=VALUE[:TYPE] or --remove KEY)")
    existing = _kv_types(args.file)
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
