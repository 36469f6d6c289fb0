"""``weightsmith demo``: the library's main job on a built-in example.

The demo is a list of steps that share a :class:`DemoContext`.  Each step is
a function ``step(ctx) -> None`` that prints what it does and raises on a
mismatch; it needs nothing beyond the core install (numpy, ml_dtypes and the compiled core).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import torchfile
from ..convert import MetaCheckpoint, hf_to_gguf, meta_to_hf
from ..convert.compare import compare
from ..inspection import inspect_local
from ..safetensors import load_file, safe_open
from ._output import Out
from ._render import render_report

#: The built-in checkpoint (data/, made by tools/make_demo_checkpoint.py): a tiny Llama 3.1
#: as Meta's download lays it out -- rows of 256 so the K-quants apply, GQA 4:2 heads.
ORIGINAL_FILES = ("consolidated.00.pth", "params.json", "tokenizer.model")


@dataclass
class DemoContext:
    folder: Path
    out: Out
    quiet: bool = False
    files: dict[str, Path] = field(default_factory=dict)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality (NaN-safe), dtype and shape included."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


DATA = Path(__file__).resolve().parent / "data"

#: general.name of the demo's GGUF files
DEMO_MODEL_NAME = "Tiny Llama"


def step_original(ctx: DemoContext) -> None:
    """The built-in download from Meta: checked without running its pickle, then inspected."""
    original = ctx.folder / "original"
    original.mkdir(parents=True, exist_ok=True)
    for name in ORIGINAL_FILES:
        shutil.copyfile(DATA / name, original / name)
    pth = original / "consolidated.00.pth"
    report = torchfile.scan(pth)
    ctx.out.line(f"{pth.name}: pickle scan says {'safe' if report.safe else 'UNSAFE'} "
                 f"({len(report.globals)} globals, nothing executed)")  # fmt: skip
    ctx.files["original"] = original
    render_report(inspect_local(original), ctx.out, all_layers=False)


def step_to_hf(ctx: DemoContext) -> None:
    """Meta's layout -> a Hugging Face folder: names, RoPE permutation, config, tokenizer."""
    hf = ctx.folder / "hf"
    res = meta_to_hf(ctx.files["original"], hf)
    path = hf / "model.safetensors"
    ctx.files["safetensors"] = path
    data = inspect_local(path).total_bytes
    ctx.out.line(
        f"Llama {res.generation}: wrote {hf} ({res.tensors} tensors, {res.parameters:,} "
        f"parameters; model.safetensors {_sizes(path.stat().st_size, data)})"
    )
    ctx.out.line("  " + ", ".join(sorted(p.name for p in hf.iterdir())))


def _sizes(file_size: int, data: int) -> str:
    """``file 1,234 bytes = tensor data 1,100 + header/padding 134``."""
    return f"file {file_size:,} bytes = tensor data {data:,} + header/padding {file_size - data:,}"


def step_header(ctx: DemoContext) -> None:
    """Print the header like the Hugging Face file viewer: grouped by layer."""
    render_report(inspect_local(ctx.files["safetensors"]), ctx.out, all_layers=True)


def step_load(ctx: DemoContext) -> None:
    """Load everything back, and one slice lazily, and compare with the original bit for bit."""
    path = ctx.files["safetensors"]
    loaded = load_file(path)
    with MetaCheckpoint(ctx.files["original"]) as ck:
        want = {t.hf_name: ck.read(t) for t in ck.tensors}
    if sorted(loaded) != sorted(want):
        raise AssertionError(f"tensor names differ: {sorted(set(loaded) ^ set(want))}")
    bad = [k for k in want if not _same(np.asarray(loaded[k]), want[k])]
    if bad:
        raise AssertionError(f"values differ from the original: {bad[:5]}")
    name = "model.layers.0.self_attn.q_proj.weight"
    with safe_open(path, framework="np") as f:
        part = f.get_slice(name)[-2:, ::3]
    if not _same(np.asarray(part), want[name][-2:, ::3]):
        raise AssertionError(f"slice [-2:, ::3] of {name} differs")
    ctx.out.line(
        f"loaded {len(loaded)} tensors back: all equal bit for bit to the merged, permuted "
        "original; slice [-2:, ::3] equal"
    )


def step_convert(ctx: DemoContext) -> None:
    """HF folder -> GGUF q8_0 and q4_k_m in one streaming pass each (no tokenizer: weights only)."""
    for t in ("q8_0", "q4_k_m"):
        path = ctx.folder / f"tiny-llama-{t}.gguf"
        # named after the model, not after the folder it sits in (a temp folder by default)
        res = hf_to_gguf(ctx.folder / "hf", path, t, tokenizer=False, name=DEMO_MODEL_NAME)
        ctx.files[t] = path
        kinds: dict[str, int] = {}
        for v in res.tensor_types.values():
            kinds[v] = kinds.get(v, 0) + 1
        mix = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
        data = inspect_local(path).total_bytes
        ctx.out.line(f"wrote {path} ({_sizes(path.stat().st_size, data)}; {mix})")


def step_inspect_gguf(ctx: DemoContext) -> None:
    """The q4_k_m file's metadata and tensors, grouped by layer."""
    render_report(inspect_local(ctx.files["q4_k_m"]), ctx.out, all_layers=False)


def step_quality(ctx: DemoContext) -> None:
    """RMSE, max abs error and cosine of each quantized tensor against the source."""
    for t in ("q8_0", "q4_k_m"):
        rep = compare(ctx.folder / "hf", ctx.files[t])
        worst = rep.worst(1)[0]
        ctx.out.line(
            f"{t}: {rep.bits_per_weight:.2f} bits per weight, "
            f"{rep.src_bytes:,} -> {rep.dst_bytes:,} bytes; worst tensor {worst.name} "
            f"({worst.type}) cosine {worst.cosine:.5f}, rmse {worst.rmse:.2e}"
        )
    if not ctx.quiet:
        ctx.out.line(rep.format())


Step = Callable[[DemoContext], None]

#: (title, step) in order.
STEPS: list[tuple[str, Step]] = [
    ("the built-in download from Meta: original/consolidated.00.pth + params.json", step_original),
    ("Meta's layout -> a Hugging Face folder (no torch)", step_to_hf),
    ("its safetensors header, grouped by layer", step_header),
    ("load it back", step_load),
    ("convert to GGUF q8_0 and q4_k_m", step_convert),
    ("inspect the q4_k_m GGUF", step_inspect_gguf),
    ("quality report", step_quality),
]


def run(out_dir: str | None = None, out: Out | None = None, quiet: bool = False) -> None:
    """Run every step, in a temp folder (removed after) unless ``out_dir`` is given."""
    out = out or Out()
    tmp = None
    if out_dir is None:
        tmp = tempfile.mkdtemp(prefix="weightsmith-demo-")
        folder = Path(tmp)
    else:
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(folder, out, quiet=quiet)
    if tmp is not None:
        out.line(
            f"writing to the temporary folder {folder}, removed at the end "
            "(weightsmith demo --out DIR keeps the files)"
        )
    try:
        for i, (title, step) in enumerate(STEPS, 1):
            out.heading(f"\n[{i}/{len(STEPS)}] {title}")
            step(ctx)
        out.line("\ndemo finished.")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            out.line(f"removed {folder} and the files above; keep them with --out DIR")
        else:
            out.line(f"the files are in {folder}")
