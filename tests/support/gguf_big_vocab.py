"""A Gemma-3-like GGUF with a 262,144-token vocabulary, header only, as a sparse file.

Written by gguf-py (the oracle writer): the KV metadata of a Gemma 3 270M file
(a SentencePiece vocabulary of 262,144 tokens with scores and token types, the
biggest part of the header, ~6 MB) and its tensor infos; the tensor data is
not written, the file is extended with ``truncate`` to its size, so a 40 GB
file costs a few MB of disk.  The remote tests and ``benchmarks/bench_remote.py``
serve these through nginx.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

N_VOCAB = 262_144
N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM = 640, 2048, 18, 4, 1, 256

_PIECES = [
    "the", "ing", "tion", "▁", "er", "an", "ou", "ment", "ly", "st", "re", "al",
    "ção", "schaft", "ност", "的", "了", "こと", "없", "ства", "ة", "ी", "<0x0A>",
]  # fmt: skip


def tokens(n: int = N_VOCAB, seed: int = 0) -> list[str]:
    """``n`` distinct token strings with a vocabulary-like mix of lengths and scripts."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(_PIECES), size=(n, 3))
    parts = rng.integers(1, 4, size=n)
    out = []
    for i in range(n):
        body = "".join(_PIECES[j] for j in picks[i, : parts[i]])
        out.append(f"▁{body}{i:x}" if i % 3 else f"{body}{i:x}")
    return out


def tensor_infos() -> list[tuple[str, tuple[int, ...], int]]:
    """(name, numpy-order shape, ggml type) of a Gemma 3 270M GGUF (BF16 = 30, F32 = 0)."""
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    out = [("token_embd.weight", (N_VOCAB, N_EMBD), 30)]
    for i in range(N_LAYER):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (N_EMBD,), 0),
            (b + "attn_q.weight", (q, N_EMBD), 30),
            (b + "attn_k.weight", (kv, N_EMBD), 30),
            (b + "attn_v.weight", (kv, N_EMBD), 30),
            (b + "attn_q_norm.weight", (HEAD_DIM,), 0),
            (b + "attn_k_norm.weight", (HEAD_DIM,), 0),
            (b + "attn_output.weight", (N_EMBD, q), 30),
            (b + "post_attention_norm.weight", (N_EMBD,), 0),
            (b + "ffn_norm.weight", (N_EMBD,), 0),
            (b + "ffn_gate.weight", (N_FF, N_EMBD), 30),
            (b + "ffn_up.weight", (N_FF, N_EMBD), 30),
            (b + "ffn_down.weight", (N_EMBD, N_FF), 30),
            (b + "post_ffw_norm.weight", (N_EMBD,), 0),
        ]
    out.append(("output_norm.weight", (N_EMBD,), 0))
    return out


def expected_tensors(header: int, n_vocab: int = N_VOCAB) -> dict[str, tuple]:
    """name -> (ggml type, numpy-order shape, absolute offset) as written: the tensors in
    order, each at the next multiple of 32 of the data section that starts at ``header``."""
    out, off = {}, 0
    for name, shape, gtype in tensor_infos():
        if name == "token_embd.weight":
            shape = (n_vocab, shape[1])
        out[name] = ("BF16" if gtype == 30 else "F32", shape, header + off)
        off += -(-int(np.prod(shape)) * (2 if gtype == 30 else 4) // 32) * 32
    return out


def write(path: Path, file_size: int | None = None, n_vocab: int = N_VOCAB) -> tuple[int, int]:
    """Write the header to ``path`` and extend it (sparse) to ``file_size`` bytes
    (default: header + tensor data).  Returns ``(header size, file size)``."""
    import gguf

    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("Gemma 3 270m It")
    w.add_context_length(32768)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    toks = tokens(n_vocab)
    w.add_token_list(toks)
    w.add_token_scores(np.linspace(0, -1000, n_vocab, dtype=np.float32).tolist())
    w.add_token_types([1] * n_vocab)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_chat_template("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    data = 0
    for name, shape, gtype in tensor_infos():
        if name == "token_embd.weight":
            shape = (n_vocab, shape[1])
        itemsize = 2 if gtype == 30 else 4
        nbytes = int(np.prod(shape)) * itemsize
        dt = np.float32 if gtype == 0 else np.float16
        w.add_tensor_info(name, shape, dt, nbytes, raw_dtype=gguf.GGMLQuantizationType(gtype))
        data += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = -(-path.stat().st_size // 32) * 32  # the data section starts aligned
    size = header + data if file_size is None else file_size
    if size < header + data:
        raise ValueError(f"{path}: {size} bytes cannot hold the {header + data} the tensors need")
    os.truncate(path, size)
    return header, size
