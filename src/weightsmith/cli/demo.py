"""``weightsmith demo``: the library's main job on a built-in example.

The demo is a list of steps that share a :class:`DemoContext`.  Each step is
a function ``step(ctx) -> None`` that prints what it does and raises on a
mismatch; it needs nothing beyond the core install (numpy and ml_dtypes).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import torchfile
from ..convert import hf_to_gguf, torch_to_safetensors
from ..convert.compare import compare
from ..inspection import inspect_local
from ..safetensors import load_file, safe_open
from ._output import Out
from ._render import render_report

#: A tiny Llama: Llama 3's tensor names and GQA, scaled down; rows of 256 so the
#: K-quants apply.  The built-in checkpoint (data/tiny-llama.pth) holds these weights.
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def llama_tensors(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights with Llama's names and shapes: BF16 matrices, F32 norms."""
    rng = np.random.default_rng(seed)
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = h // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * cols**-0.5).astype(
            ml_dtypes.bfloat16
        )

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(h, dtype=np.float32)).astype(np.float32)

    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": mat(vocab, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = norm()
        t[f"{p}.self_attn.q_proj.weight"] = mat(h, h)
        t[f"{p}.self_attn.k_proj.weight"] = mat(kv, h)
        t[f"{p}.self_attn.v_proj.weight"] = mat(kv, h)
        t[f"{p}.self_attn.o_proj.weight"] = mat(h, h)
        t[f"{p}.post_attention_layernorm.weight"] = norm()
        t[f"{p}.mlp.gate_proj.weight"] = mat(inter, h)
        t[f"{p}.mlp.up_proj.weight"] = mat(inter, h)
        t[f"{p}.mlp.down_proj.weight"] = mat(h, inter)
    t["model.norm.weight"] = norm()
    t["lm_head.weight"] = mat(vocab, h)
    return t


@dataclass
class DemoContext:
    folder: Path
    out: Out
    quiet: bool = False
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality (NaN-safe), dtype and shape included."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


DATA = Path(__file__).resolve().parent / "data"

#: general.name of the demo's GGUF files
DEMO_MODEL_NAME = "Tiny Llama"


def step_write(ctx: DemoContext) -> None:
    """The built-in tiny Llama ``.pth`` -> a safetensors model folder, no torch, no pickle run."""
    # where Meta's Llama repos keep it, out of the way of the HF-layout files
    pth = ctx.folder / "original" / "consolidated.00.pth"
    pth.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DATA / "tiny-llama.pth", pth)
    report = torchfile.scan(pth)
    ctx.out.line(f"{pth.name}: pickle scan says {'safe' if report.safe else 'UNSAFE'} "
                 f"({len(report.globals)} globals, nothing executed)")  # fmt: skip
    with torchfile.open(pth) as ck:
        ctx.tensors = {k: np.array(ck[k]) for k in ck}
    path = ctx.folder / "model.safetensors"
    torch_to_safetensors(pth, path)
    shutil.copyfile(DATA / "config.json", ctx.folder / "config.json")
    ctx.files["safetensors"] = path
    n = sum(a.size for a in ctx.tensors.values())
    data = sum(a.nbytes for a in ctx.tensors.values())
    ctx.out.line(
        f"wrote {path} ({len(ctx.tensors)} tensors, {n:,} parameters; "
        f"{_sizes(path.stat().st_size, data)})"
    )


def _sizes(file_size: int, data: int) -> str:
    """``file 1,234 bytes = tensor data 1,100 + header/padding 134``."""
    return f"file {file_size:,} bytes = tensor data {data:,} + header/padding {file_size - data:,}"


def step_header(ctx: DemoContext) -> None:
    """Print the header like the Hugging Face file viewer: grouped by layer."""
    render_report(inspect_local(ctx.files["safetensors"]), ctx.out, all_layers=True)


def step_load(ctx: DemoContext) -> None:
    """Load everything back, and one slice lazily, and compare bit for bit."""
    path = ctx.files["safetensors"]
    loaded = load_file(path)
    if sorted(loaded) != sorted(ctx.tensors):
        raise AssertionError(f"tensor names differ: {sorted(set(loaded) ^ set(ctx.tensors))}")
    bad = [k for k in ctx.tensors if not _same(np.asarray(loaded[k]), ctx.tensors[k])]
    if bad:
        raise AssertionError(f"values differ after the round trip: {bad[:5]}")
    name = "model.layers.0.self_attn.q_proj.weight"
    with safe_open(path, framework="np") as f:
        part = f.get_slice(name)[-2:, ::3]
    if not _same(np.asarray(part), ctx.tensors[name][-2:, ::3]):
        raise AssertionError(f"slice [-2:, ::3] of {name} differs")
    ctx.out.line(
        f"loaded {len(loaded)} tensors back: all equal bit for bit; slice [-2:, ::3] equal"
    )


def step_convert(ctx: DemoContext) -> None:
    """HF folder -> GGUF q8_0 and q4_k_m in one streaming pass each (no tokenizer: weights only)."""
    for t in ("q8_0", "q4_k_m"):
        path = ctx.folder / f"tiny-llama-{t}.gguf"
        # named after the model, not after the folder it sits in (a temp folder by default)
        res = hf_to_gguf(ctx.folder, path, t, tokenizer=False, name=DEMO_MODEL_NAME)
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
        rep = compare(ctx.folder, ctx.files[t])
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
    ("the built-in tiny Llama .pth -> safetensors", step_write),
    ("its header, grouped by layer", step_header),
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
