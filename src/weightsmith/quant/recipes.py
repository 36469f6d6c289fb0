"""llama-quantize file types: which ggml type each tensor gets.

A *file type* (``Q4_K_M``, ``IQ4_XS``, ...) is not one ggml type but a
recipe.  Given the GGUF tensor names and shapes of a model, it picks a type
per tensor by the rules of llama.cpp's ``src/llama-quant.cpp``:

1. Only tensors whose name ends in ``weight``, with two or more dims, that
   are not norms, expert gates or position/token-type embeddings are
   quantized; everything else keeps its source type (F32 for 1-D tensors).
2. The file type's default type applies, then per-category adjustments:
   ``output.weight`` (and ``token_embd.weight`` when the embeddings are
   tied) gets Q6_K, ``attn_v``/``ffn_down`` go up a type in the layers that
   ``use_more_bits`` selects, and so on.
3. A type whose block does not divide the row length falls back along a
   fixed chain (Q4_K -> Q5_0, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, ...), and to
   F16 when even the fallback does not fit.

Rule order matters: llama.cpp visits tensors sorted by layer number, then
name, and the ``attn_v`` / ``ffn_*`` rules depend on how many such tensors
came before.  :func:`plan` sorts the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..dtypes import GGML
from ..errors import NoFallbackType, UnknownFileType

__all__ = ["FILE_TYPES", "FileType", "Plan", "allows_quantization", "file_type", "plan"]


class Plan(dict):
    """``{tensor name: ggml type name}``, plus ``fallbacks``: ``{name: (wanted, used)}``
    for every tensor whose row length the wanted type's block does not divide
    (llama.cpp's "N of M tensor(s) required fallback quantization")."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.fallbacks: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class FileType:
    """One llama-quantize file type: its ``LLAMA_FTYPE_*`` number and default type."""

    name: str
    id: int
    default: str


# name, LLAMA_FTYPE number (llama.h), default ggml type (llama_ftype_get_default_type)
_ROWS = [
    ("F32", 0, "F32"),
    ("F16", 1, "F16"),
    ("Q4_0", 2, "Q4_0"),
    ("Q4_1", 3, "Q4_1"),
    ("Q8_0", 7, "Q8_0"),
    ("Q5_0", 8, "Q5_0"),
    ("Q5_1", 9, "Q5_1"),
    ("Q2_K", 10, "Q2_K"),
    ("Q3_K_S", 11, "Q3_K"),
    ("Q3_K_M", 12, "Q3_K"),
    ("Q3_K_L", 13, "Q3_K"),
    ("Q4_K_S", 14, "Q4_K"),
    ("Q4_K_M", 15, "Q4_K"),
    ("Q5_K_S", 16, "Q5_K"),
    ("Q5_K_M", 17, "Q5_K"),
    ("Q6_K", 18, "Q6_K"),
    ("IQ2_XXS", 19, "IQ2_XXS"),
    ("IQ2_XS", 20, "IQ2_XS"),
    ("Q2_K_S", 21, "Q2_K"),
    ("IQ3_XS", 22, "IQ3_S"),
    ("IQ3_XXS", 23, "IQ3_XXS"),
    ("IQ1_S", 24, "IQ1_S"),
    ("IQ4_NL", 25, "IQ4_NL"),
    ("IQ3_S", 26, "IQ3_S"),
    ("IQ3_M", 27, "IQ3_S"),
    ("IQ2_S", 28, "IQ2_XS"),
    ("IQ2_M", 29, "IQ2_S"),
    ("IQ4_XS", 30, "IQ4_XS"),
    ("IQ1_M", 31, "IQ1_M"),
    ("BF16", 32, "BF16"),
    ("TQ1_0", 36, "TQ1_0"),
    ("TQ2_0", 37, "TQ2_0"),
    ("MXFP4_MOE", 38, "MXFP4"),
    ("Q1_0", 40, "Q1_0"),
    ("Q2_0", 41, "Q2_0"),
]
FILE_TYPES: dict[str, FileType] = {n: FileType(n, i, d) for n, i, d in _ROWS}
_ALIASES = {"ALL_F32": "F32"}

# The very-low-bit IQ file types share most of their rules.
_IQ_LOW = {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}

# Row length not divisible by the block: where each 256-block type falls back to.
_FALLBACK = {
    **dict.fromkeys(
        ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"], "IQ4_NL"
    ),
    **dict.fromkeys(["Q2_0", "Q2_K", "Q3_K", "TQ1_0", "TQ2_0"], "Q4_0"),
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}

# Substrings that keep a tensor out of quantization (tensor_allows_quantization).
_NEVER_QUANTIZED = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
)
_NEVER_QUANTIZED_EXACT = ("position_embd.weight", "token_types.weight")
# ... and per architecture (GLM-5-Next's mHC, indexer, KDA gates and MLA tensors)
_NEVER_QUANTIZED_ARCH = {
    "glm5-next": (
        "hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
        "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight",
        "ssm_g_b.weight", "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight",
        "attn_v_b.weight",
    ),
}  # fmt: skip
# tensors llama_tensor_get_type_impl keeps at Q8_0 at least (any quantized type -> Q8_0)
_Q8_0_FLOOR = {"glm5-next": ("attn_q_a", "attn_q_b", "nextn.eh_proj")}


def file_type(name: str | int | FileType) -> FileType:
    """Look a file type up by name (``"q4_k_m"``, case-insensitive) or number."""
    if isinstance(name, FileType):
        return name
    if isinstance(name, int) and not isinstance(name, bool):
        for ft in FILE_TYPES.values():
            if ft.id == name:
                return ft
    elif isinstance(name, str):
        key = name.upper()
        key = _ALIASES.get(key, key)
        if key in FILE_TYPES:
            return FILE_TYPES[key]
    raise UnknownFileType(
        "unknown llama-quantize file type",
        field="file type",
        expected="one of " + ", ".join(FILE_TYPES),
        found=repr(name),
    )


def allows_quantization(name: str, shape: Sequence[int], arch: str = "") -> bool:
    """Whether llama-quantize would quantize this tensor at all (``arch``: the GGUF
    architecture, for its own exceptions)."""
    if len(shape) < 2 or not name.endswith("weight"):
        return False
    if name in _NEVER_QUANTIZED_EXACT:
        return False
    never = (*_NEVER_QUANTIZED, *_NEVER_QUANTIZED_ARCH.get(arch, ()))
    return not any(s in name for s in never)


def _category(name: str) -> str:
    """The broad tensor category llama-quant.cpp's rules switch on."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (
        ("attn_qkv.weight", "attn_qkv"),
        ("attn_kv_b.weight", "attn_kv_b"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if key in name:
            return cat
    return "other"


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    # The first and last eighth of the layers, and every third one between.
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or _cdiv_mod(i_layer - n_layers // 8, 3) == 2
    )


def _cdiv_mod(a: int, b: int) -> int:
    """C's ``a % b`` (sign follows the dividend), not Python's."""
    r = abs(a) % b
    return -r if a < 0 else r


_LAYER = re.compile(r"blk\.(\d+)\.")


def _layer_of(name: str) -> int:
    m = _LAYER.match(name)
    return int(m.group(1)) if m else -1


@dataclass
class _State:
    """The counters llama-quant.cpp keeps while it walks the tensors."""

    ftype: str
    arch: str
    n_layer: int
    n_gqa: int
    n_expert: int
    is_70b: bool
    has_imatrix: bool
    tied: bool
    n_attn_v: int
    i_attn_v: int = 0
    i_ffn_down: int = 0
    i_ffn_gate: int = 0
    i_ffn_up: int = 0

    def layer(self, counter: int, name: str) -> tuple[int, int]:
        # Mixture-of-experts tensors are not in layer order, so the layer comes from the name.
        if max(1, self.n_expert) > 1:
            return _layer_of(name), self.n_layer
        return counter, self.n_layer


def _output_type(st: _State, new: str, ncols: int) -> str:
    ft = st.ftype
    if ft == "MXFP4_MOE" or st.arch == "falcon" or ncols % GGML[new].block_size:
        return "Q8_0"
    if ft in _IQ_LOW or ft == "IQ3_XXS":
        return "Q5_K"
    return "Q6_K" if new != "Q8_0" else new


def _token_embd_type(st: _State, new: str) -> str:
    ft = st.ftype
    if ft in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
        return "Q2_K"
    if ft in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
        return "IQ3_S"
    if ft in ("TQ1_0", "TQ2_0", "Q2_0"):
        return "Q4_K"
    return new


def _iq_low_type(st: _State, new: str, cat: str) -> str:
    ft = st.ftype
    iq2s_or_m = ft in ("IQ2_S", "IQ2_M")
    if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
        if st.n_gqa >= 4 or st.n_expert >= 4:
            new = "Q4_K"
        else:
            new = "IQ3_S" if iq2s_or_m else "Q2_K"
        st.i_attn_v += 1
    elif st.n_expert == 8 and cat == "attn_k":
        new = "Q4_K"
    elif cat == "ffn_down":
        if st.i_ffn_down < st.n_layer // 8:
            new = "IQ3_S" if iq2s_or_m else "Q2_K"
        st.i_ffn_down += 1
    elif cat == "attn_output":
        if st.n_expert == 8:
            new = "Q5_K"
        elif ft in ("IQ1_S", "IQ1_M"):
            new = "IQ2_XXS"
        elif iq2s_or_m:
            new = "IQ3_S"
    return new


def _attn_v_type(st: _State, new: str) -> str:
    ft, gqa4 = st.ftype, st.n_gqa >= 4
    if ft == "Q2_K":
        new = "Q4_K" if gqa4 else "Q3_K"
    elif ft == "Q2_K_S" and gqa4:
        new = "Q4_K"
    elif ft == "IQ3_XXS":
        new = "Q4_K" if gqa4 else ("IQ3_XXS" if st.has_imatrix else "IQ3_S")
    elif (ft in ("IQ3_XS", "IQ3_S") and gqa4) or ft == "IQ3_M":
        new = "Q4_K"
    elif ft == "Q3_K_M":
        new = "Q5_K" if st.i_attn_v < 2 else "Q4_K"
    elif ft == "Q3_K_L" or (ft in ("IQ4_NL", "IQ4_XS") and gqa4):
        new = "Q5_K"
    elif ft in ("Q4_K_M", "Q5_K_M") and _use_more_bits(st.i_attn_v, st.n_attn_v):
        new = "Q6_K"
    elif ft == "Q4_K_S" and st.i_attn_v < 4:
        new = "Q5_K"
    if st.is_70b and new in ("Q3_K", "Q4_K"):
        # 70B shares attn_v across 8 heads: it is small, so more bits cost little.
        new = "Q5_K"
    if st.n_expert == 8:
        new = "Q8_0"
    st.i_attn_v += 1
    return new


def _ffn_down_type(st: _State, new: str, name: str) -> str:
    ft, falcon = st.ftype, st.arch == "falcon"
    i, n = st.layer(st.i_ffn_down, name)
    if ft == "Q2_K":
        new = "Q3_K"
    elif ft == "Q2_K_S":
        if i < n // 8:
            new = "Q4_K"
    elif ft == "IQ3_XXS" and not st.has_imatrix:
        new = "Q4_K" if i < n // 8 else "Q3_K"
    elif ft == "Q3_K_M":
        if i < n // 16:
            new = "Q5_K"
        elif not falcon or _use_more_bits(i, n):
            new = "Q4_K"
        else:
            new = "Q3_K"
    elif ft == "IQ3_M" and (i < n // 8 or (st.n_expert == 8 and _use_more_bits(i, n))):
        new = "Q4_K"
    elif ft == "Q3_K_L":
        new = "Q4_K" if falcon else "Q5_K"
    elif ft == "Q4_K_M":
        if falcon:
            new = "Q6_K" if i < n // 16 else ("Q5_K" if _use_more_bits(i, n) else "Q4_K")
        elif _use_more_bits(i, n):
            new = "Q6_K"
    elif i < n // 8 and ft in ("IQ4_NL", "IQ4_XS") and not st.has_imatrix:
        new = "Q5_K"
    elif ft == "Q5_K_M" and _use_more_bits(i, n):
        new = "Q6_K"
    elif ft == "Q4_K_S" and not falcon and i < n // 8:
        new = "Q5_K"
    elif ft in ("Q4_0", "Q5_0") and st.has_imatrix and i < n // 8:
        # Early ffn_down layers misbehave even with an imatrix for Q4_0/Q5_0.
        new = "Q4_1" if ft == "Q4_0" else "Q5_1"
    st.i_ffn_down += 1
    return new


_MOE8_ATTN_OUTPUT_Q5K = {
    "Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL",
    "Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M", "IQ4_XS",
}  # fmt: skip
_ATTN_OUTPUT = {
    "Q2_K": "Q3_K",
    "IQ3_XXS": "IQ3_S",
    "Q3_K_M": "Q4_K",
    "Q3_K_L": "Q5_K",
    "IQ3_M": "Q4_K",
}


def _attn_output_type(st: _State, new: str) -> str:
    ft = st.ftype
    if st.arch == "falcon":
        return "Q4_K" if ft == "Q3_K_L" else new
    if st.n_expert == 8:
        return "Q5_K" if ft in _MOE8_ATTN_OUTPUT_Q5K else new
    return _ATTN_OUTPUT.get(ft, new)


def _adjust(st: _State, new: str, name: str, ncols: int, n_planes: int) -> str:
    """llama_tensor_get_type_impl: the file type's per-category adjustments."""
    ft, cat = st.ftype, _category(name)
    if any(s in name for s in _Q8_0_FLOOR.get(st.arch, ())):
        return "Q8_0"
    if cat == "output" or (st.tied and cat == "token_embd"):
        return _output_type(st, new, ncols)
    if ft == "MXFP4_MOE":
        return "MXFP4" if n_planes > 1 else "Q8_0"
    if cat == "token_embd":
        return _token_embd_type(st, new)
    if ft in _IQ_LOW:
        return _iq_low_type(st, new, cat)
    if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
        return _attn_v_type(st, new)
    if cat == "attn_k":
        if st.n_expert == 8:
            return "Q8_0"
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft, new)
    if cat == "attn_q":
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft, new)
    if cat == "ffn_down":
        return _ffn_down_type(st, new, name)
    if cat == "attn_output":
        return _attn_output_type(st, new)
    if cat in ("ffn_gate", "ffn_up"):
        counter = "i_ffn_gate" if cat == "ffn_gate" else "i_ffn_up"
        i, n = st.layer(getattr(st, counter), name)
        if ft == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
            new = "IQ3_XXS"
        setattr(st, counter, getattr(st, counter) + 1)
    return new


def _fallback(new: str, ncols: int) -> str:
    """tensor_type_fallback: a type whose block does not divide the row length."""
    block = GGML[new].block_size
    if ncols % block == 0:
        return new
    out = _FALLBACK.get(new)
    if out is None:
        if block > 32:
            raise NoFallbackType(
                f"row length {ncols} is not a multiple of the block size {block}",
                field=new,
                expected="a type with a fallback",
                found=new,
            )
        out = new
    return out if ncols % GGML[out].block_size == 0 else "F16"


def _layer0(v: int | Sequence[int]) -> int:
    return int(v[0] if len(v) else 0) if isinstance(v, Sequence) else int(v)


def plan(
    tensors: Iterable[tuple[str, Sequence[int]]],
    ftype: str | int | FileType,
    *,
    arch: str = "llama",
    n_layer: int | None = None,
    n_head: int | Sequence[int] = 1,
    n_head_kv: int | Sequence[int] | None = None,
    n_expert: int = 0,
    has_imatrix: bool = False,
    source_types: dict[str, str] | None = None,
) -> dict[str, str]:
    """The ggml type name llama-quantize gives each tensor for ``ftype``.

    ``tensors`` are ``(gguf_name, shape)`` with numpy-order shapes (the row
    length is the last dim).  ``n_layer`` defaults to the number of ``blk.N``
    layers seen.  Tensors that are not quantized keep ``source_types[name]``
    (default F32).  ``n_head`` / ``n_head_kv`` may be per-layer arrays (hybrids):
    llama.cpp's ``n_gqa()`` is layer 0's, so a hybrid whose layer 0 is SSM (KV heads 0)
    gets no GQA upgrades.  The result is a :class:`Plan` (a dict that also lists the
    fallbacks).
    """
    ft = file_type(ftype)
    items = sorted(((n, tuple(s)) for n, s in tensors), key=lambda t: (_layer_of(t[0]), t[0]))
    if n_layer is None:
        n_layer = 1 + max((_layer_of(n) for n, _ in items), default=-1)
    n_head = _layer0(n_head)
    n_head_kv = n_head if n_head_kv is None else _layer0(n_head_kv)
    cats = [_category(n) for n, _ in items]
    st = _State(
        ftype=ft.name,
        arch=arch,
        n_layer=n_layer,
        n_gqa=n_head // n_head_kv if n_head_kv else 0,
        n_expert=n_expert,
        # llama.cpp's model type: an 80-layer Llama with GQA is "70B".
        is_70b=arch == "llama" and n_layer == 80 and n_head != n_head_kv,
        has_imatrix=has_imatrix,
        tied="output" not in cats,
        n_attn_v=sum(c in ("attn_v", "attn_qkv", "attn_kv_b") for c in cats),
    )
    source_types = source_types or {}
    default = ft.default
    out = Plan()
    for name, shape in items:
        if not allows_quantization(name, shape, arch):
            out[name] = source_types.get(name, "F32")
            continue
        new = default
        if GGML[default].quantized:
            ncols = shape[-1]
            n_planes = shape[-3] if len(shape) >= 3 else 1
            wanted = _adjust(st, new, name, ncols, n_planes)
            new = _fallback(wanted, ncols)
            if ncols % GGML[wanted].block_size:
                out.fallbacks[name] = (wanted, new)
        out[name] = new
    return out
