"""Tiny GGUF models with the tensor lists of real architectures, and llama.cpp's own
llama-quantize run on them: the oracle for weightsmith.quant.recipes.

Shapes are kept minimal but realistic where the rules look at them (row lengths
divisible by 256 or not, GQA ratio, tied embeddings, layer counts).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np

from weightsmith.gguf import Writer


@dataclass(frozen=True)
class ModelSpec:
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int = 256
    tied: bool = False
    qkv_bias: bool = False
    extra: dict = field(default_factory=dict)

    def tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """GGUF tensor names and numpy-order shapes, as llama.cpp's converter names them."""
        head_dim = self.n_embd // self.n_head
        kv = head_dim * self.n_head_kv
        out = [
            ("token_embd.weight", (self.n_vocab, self.n_embd)),
            ("output_norm.weight", (self.n_embd,)),
        ]
        if not self.tied:
            out.append(("output.weight", (self.n_vocab, self.n_embd)))
        for i in range(self.n_layer):
            b = f"blk.{i}."
            out += [
                (b + "attn_norm.weight", (self.n_embd,)),
                (b + "attn_q.weight", (self.n_embd, self.n_embd)),
                (b + "attn_k.weight", (kv, self.n_embd)),
                (b + "attn_v.weight", (kv, self.n_embd)),
                (b + "attn_output.weight", (self.n_embd, self.n_embd)),
                (b + "ffn_norm.weight", (self.n_embd,)),
                (b + "ffn_gate.weight", (self.n_ff, self.n_embd)),
                (b + "ffn_up.weight", (self.n_ff, self.n_embd)),
                (b + "ffn_down.weight", (self.n_embd, self.n_ff)),
            ]
            if self.qkv_bias:
                out += [
                    (b + "attn_q.bias", (self.n_embd,)),
                    (b + "attn_k.bias", (kv,)),
                    (b + "attn_v.bias", (kv,)),
                ]
        return out


MODELS = {
    # Llama 3 8B's layout (32 layers, GQA 4) at tiny width.
    "llama32": ModelSpec("llama32", "llama", 32, 256, 256, 32, 8),
    # Qwen2 7B's layout (28 layers, q/k/v biases, GQA) at tiny width.
    "qwen2_28": ModelSpec("qwen2_28", "qwen2", 28, 256, 256, 16, 4, qkv_bias=True),
    # Row lengths not divisible by 256 (fallbacks), ffn rows not even by 32 (F16),
    # tied embeddings (no output.weight), no GQA.
    "odd_tied": ModelSpec("odd_tied", "llama", 8, 288, 300, 8, 8, tied=True),
}

FILE_TYPES = [
    "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
    "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
    "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0",
]  # fmt: skip


def write_model(
    spec: ModelSpec,
    path: Path,
    seed: int = 0,
    unit_dim: frozenset = frozenset(),
    dtype: str = "f32",
) -> None:
    """Write ``spec`` as an f32 (or ``dtype`` "f16" / "bf16") GGUF with gguf-py, with the
    metadata llama.cpp's loader needs.

    Tensors named in ``unit_dim`` get an extra outer dim of 1 (stored dims ``[..., 1]``)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_context_length(128)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_file_type({"f32": 0, "f16": 1, "bf16": 32}[dtype])
    for name, shape in spec.tensors():
        shape = (1, *shape) if name in unit_dim else shape
        x = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        if dtype == "f16":
            w.add_tensor(name, x.astype(np.float16))
        elif dtype == "bf16":
            half = x.astype(ml_dtypes.bfloat16).view(np.uint8)
            w.add_tensor(name, half, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_quantize(
    src: Path, dst: Path, ftype: str, nthread: int = 2, imatrix_for: ModelSpec | None = None
) -> dict[str, str]:
    """Run llama.cpp's llama_model_quantize and return the tensor types it chose.

    With ``imatrix_for``, an all-ones importance matrix covering every 2-D
    tensor of that model is passed, which switches on the imatrix-only rules.
    """
    import llama_cpp

    from weightsmith.quant.recipes import file_type

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = nthread
    params.ftype = file_type(ftype).id
    keep = []
    if imatrix_for is not None:
        entries = [(n, s[-1]) for n, s in imatrix_for.tensors() if len(s) >= 2]
        arr = (llama_cpp.llama_model_imatrix_data * (len(entries) + 1))()
        for i, (name, ncols) in enumerate(entries):
            data = np.ones(ncols, dtype=np.float32)
            keep.append(data)
            arr[i].name = name.encode()
            arr[i].data = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = ncols
        arr[len(entries)].name = None  # the list ends with a NULL name
        keep.append(arr)
        params.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({ftype}) returned {rc}")
    reader = gguf.GGUFReader(str(dst))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    del reader
    return types


def write_nan_model(path: Path) -> None:
    """One F32 weight with a NaN at row 41, column 7: what every quantizer must refuse."""
    w = Writer(path)
    w.add("general.architecture", "llama")
    x = np.zeros((64, 256), np.float32)
    x[41, 7] = np.nan
    w.add_tensor_info("blk.0.ffn_up.weight", "F32", x.shape)
    w.write_tensor("blk.0.ffn_up.weight", x)
    w.close()
