"""llama.cpp (llama-cpp-python) loads and runs tiny Llama models whose GGUF we wrote.

The model: n_embd 64, 2 layers, 4 heads, f32 random weights, an SPM ("llama")
vocabulary of <unk>, <s>, </s>, the 256 byte tokens and a few words.  The
same model is also loaded after split (from the first shard), merge, and a
metadata edit; the logits must not change.
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import Llama

from weightsmith.gguf import Writer, edit, merge, split

N_EMBD, N_LAYER, N_HEAD, N_FF = 64, 2, 4, 128
WORDS = ["▁a", "▁b", "▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁hello", "▁world"]


def vocab():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + WORDS
    types = [2, 3, 3] + [6] * 256 + [1] * len(WORDS)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(WORDS))]
    return tokens, np.array(scores, np.float32), np.array(types, np.int32)


def tensors(n_vocab):
    rng = np.random.default_rng(42)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    out = [("token_embd.weight", w(n_vocab, N_EMBD))]
    for i in range(N_LAYER):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", np.ones(N_EMBD, np.float32)),
            (b + "attn_q.weight", w(N_EMBD, N_EMBD)),
            (b + "attn_k.weight", w(N_EMBD, N_EMBD)),
            (b + "attn_v.weight", w(N_EMBD, N_EMBD)),
            (b + "attn_output.weight", w(N_EMBD, N_EMBD)),
            (b + "ffn_norm.weight", np.ones(N_EMBD, np.float32)),
            (b + "ffn_gate.weight", w(N_FF, N_EMBD)),
            (b + "ffn_down.weight", w(N_EMBD, N_FF)),
            (b + "ffn_up.weight", w(N_FF, N_EMBD)),
        ]
    out += [
        ("output_norm.weight", np.ones(N_EMBD, np.float32)),
        ("output.weight", w(n_vocab, N_EMBD)),
    ]
    return out


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama") / "tiny.gguf"
    tokens, scores, types = vocab()
    with Writer(path, arch="llama") as wr:
        wr.add("general.name", "tiny-llama")
        wr.add("llama.context_length", 128, "u32")
        wr.add("llama.embedding_length", N_EMBD, "u32")
        wr.add("llama.block_count", N_LAYER, "u32")
        wr.add("llama.feed_forward_length", N_FF, "u32")
        wr.add("llama.attention.head_count", N_HEAD, "u32")
        wr.add("llama.attention.head_count_kv", N_HEAD, "u32")
        wr.add("llama.rope.dimension_count", N_EMBD // N_HEAD, "u32")
        wr.add("llama.attention.layer_norm_rms_epsilon", 1e-5)
        wr.add("general.file_type", 0, "u32")
        wr.add("tokenizer.ggml.model", "llama")
        wr.add("tokenizer.ggml.tokens", tokens)
        wr.add("tokenizer.ggml.scores", scores)
        wr.add("tokenizer.ggml.token_type", types)
        wr.add("tokenizer.ggml.bos_token_id", 1, "u32")
        wr.add("tokenizer.ggml.eos_token_id", 2, "u32")
        wr.add("tokenizer.ggml.unknown_token_id", 0, "u32")
        ts = tensors(len(tokens))
        for name, arr in ts:
            wr.add_tensor_info(name, "F32", arr.shape)
        for name, arr in ts:
            wr.write_tensor(name, arr)
    return path


def run(path) -> np.ndarray:
    llm = Llama(
        model_path=str(path), n_ctx=32, n_threads=1, n_batch=8, verbose=False, logits_all=True
    )
    try:
        toks = llm.tokenize(b"hello the cat")
        assert len(toks) >= 3 and toks[0] == 1
        llm.eval(toks)
        logits = np.array(llm.scores[: len(toks)], dtype=np.float32)
        assert logits.shape[1] == llm.n_vocab() == 3 + 256 + len(WORDS)
        assert np.isfinite(logits).all() and np.abs(logits).max() > 0
        return logits
    finally:
        llm.close()


def test_llama_cpp_runs_our_file(tiny_llama):
    run(tiny_llama)


def test_llama_cpp_runs_split_merged_and_edited(tiny_llama, tmp_path):
    base = run(tiny_llama)
    shards = split(tiny_llama, max_tensors=7, out_dir=tmp_path)
    assert len(shards) == 3
    np.testing.assert_array_equal(run(shards[0]), base)
    merged = merge(shards[0], tmp_path / "merged.gguf")
    np.testing.assert_array_equal(run(merged), base)
    edited = edit(tiny_llama, set={"general.name": "renamed " * 40}, out=tmp_path / "edited.gguf")
    np.testing.assert_array_equal(run(edited), base)
