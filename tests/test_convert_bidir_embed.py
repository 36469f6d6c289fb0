"""LFM2-ColBERT (``Lfm2Model``), LFM2.5-Embedding (``Lfm2BidirectionalModel``) and
llama-embed-nemotron (``LlamaBidirectionalModel``) against the reference's
``LFM2ColBertModel`` (conversion/lfm2.py) and ``LlamaEmbedNemotronModel`` (conversion/llama.py).

* HF -> GGUF byte-identical to the pinned ``convert_hf_to_gguf.py`` at f32 / f16 / bf16 /
  q8_0 (the bidirectional LFM2, ColBERT's conversion with other rows, at f32 / q8_0).
  ColBERT: PyLate's ``1_Dense`` as ``dense_2.weight``, first, ``embedding_length_out``
  before ``general.type``, no pooling; bidirectional LFM2: ``attention.causal = false``
  and the mean pooling; nemotron: GGUF ``llama-embed``, neither flag (as the reference);
* llama-cpp-python (``embedding=True``): ours embeds exactly as the reference's file.
  Per-token vectors are read at llama.cpp's ``n_embd_out`` (the high-level ``embed``
  slices them at the hidden width).  ColBERT's equal transformers' ``Lfm2Model`` hidden
  states through the Dense weight.  The bidirectional models have no transformers class
  (the Hub's are remote code): the LFM2 oracle is ``Lfm2Model`` with non-causal attention
  and centred short convolutions (llama.cpp's non-causal LFM2), the causal model shown to
  differ; nemotron's is ``LlamaModel``, causal (the file's default) and unmasked (causal
  attention switched off in llama.cpp);
* GGUF -> HF: ColBERT back to ``Lfm2Model`` + its ``1_Dense`` module (same hidden states,
  same Dense weight, and converted again the same tensors); the bidirectional files are
  refused by name.

All reference conversions run in one subprocess.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.bidir_embed_models import lfm2_bidirectional, lfm2_colbert, llama_bidirectional
from test_convert_archs import _same_file
from test_convert_encoders_more import build_and_convert
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf
from weightsmith.gguf import read

TYPES = ["f32", "f16", "bf16", "q8_0"]
FILES = [(a, t) for a in ("colbert", "nemotron") for t in TYPES]
# the bidirectional LFM2 is ColBERT's conversion with other rows: two types are enough
FILES += [("bidir", t) for t in ("f32", "q8_0")]
TEXT = "The quick brown fox jumps over the lazy dog, again and again."


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bidir_embed")
    builders = {
        "colbert": lfm2_colbert,
        "bidir": lfm2_bidirectional,
        "nemotron": llama_bidirectional,
    }
    return build_and_convert(root, builders, FILES)


@pytest.mark.parametrize(("arch", "t"), FILES)
def test_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


def test_metadata_is_real(work):
    """Guard against a vacuous pass: the Dense head, its width, the causal flag, pooling."""
    with read(work["ours"] / "colbert-q8_0.gguf") as f:
        md = f.metadata
        assert list(md)[:3] == ["general.architecture", "lfm2.embedding_length_out", "general.type"]
        assert md["lfm2.embedding_length_out"] == 32
        assert "lfm2.pooling_type" not in md and "lfm2.attention.causal" not in md
        assert f.tensors[0].name == "dense_2.weight" and f.tensors[0].shape == (32, 64)
        assert f.tensors[0].ggml_type.name == "Q8_0"
    with read(work["ours"] / "bidir-q8_0.gguf") as f:
        md = f.metadata
        assert md["lfm2.attention.causal"] is False and md["lfm2.pooling_type"] == 1  # mean
        assert list(md["lfm2.attention.head_count_kv"]) == [0, 2, 0, 2]
        assert "dense_2.weight" not in f and "lfm2.embedding_length_out" not in md
    with read(work["ours"] / "nemotron-bf16.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "llama-embed"
        assert md["tokenizer.ggml.pre"] == "llama-bpe" and md["llama-embed.block_count"] == 2
        # as the reference: no causal flag and no pooling type, though the folder has one
        assert not any(k.endswith((".attention.causal", ".pooling_type")) for k in md)
        assert "output.weight" not in f and f.tensor("blk.0.attn_k.weight").shape == (32, 64)


def _llama_embed(path, text: str, per_token: bool, causal: bool | None = None):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=64, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        ids = llm.tokenize(text.encode(), add_bos=True, special=False)
        if causal is not None:
            llama_cpp.llama_set_causal_attn(llm.ctx, causal)
        if not per_token:
            return ids, np.array(llm.embed(text, normalize=False), dtype=np.float32)
        arr = (llama_cpp.llama_token * len(ids))(*ids)
        assert llama_cpp.llama_decode(llm.ctx, llama_cpp.llama_batch_get_one(arr, len(ids))) == 0
        n = llama_cpp.llama_model_n_embd_out(llm.model)
        p = llama_cpp.llama_get_embeddings(llm.ctx)
        return ids, np.ctypeslib.as_array(p, shape=(len(ids) * n,)).reshape(len(ids), n).copy()
    finally:
        llm.close()


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_colbert_in_llama_cpp(work):
    """One 32-wide vector per token, as the reference's file gives and as transformers'
    ``Lfm2Model`` hidden states times the Dense weight (max gap 8e-4 of values up to 2.3
    measured at f32)."""
    import torch
    from transformers import Lfm2Model

    from weightsmith.safetensors import load_file

    ids, got = _llama_embed(work["ours"] / "colbert-f32.gguf", TEXT, per_token=True)
    ids_ref, ref = _llama_embed(work["ref"] / "colbert-f32.gguf", TEXT, per_token=True)
    assert ids == ids_ref and np.array_equal(got, ref)
    folder = work["models"]["colbert"]
    model = Lfm2Model.from_pretrained(folder).eval()
    w = load_file(folder / "1_Dense" / "model.safetensors")["linear.weight"]
    with torch.no_grad():
        h = model(input_ids=torch.tensor([ids])).last_hidden_state[0].numpy()
    want = h @ w.T
    assert got.shape == (len(ids), 32)
    assert np.abs(got - want).max() < 3e-3 * np.abs(want).max()
    assert _cos(got, want).min() > 0.9999


def _bidirectional_hidden(folder, ids: list[int], causal: bool) -> np.ndarray:
    """transformers' ``Lfm2Model`` run as llama.cpp runs a non-causal LFM2: attention
    without a mask, each short convolution a centred window (``(L - 1) / 2`` each side)."""
    import torch
    import transformers.models.lfm2.modeling_lfm2 as lfm2
    from transformers import Lfm2Model

    model = Lfm2Model.from_pretrained(folder).eval()
    if causal:
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).last_hidden_state[0].numpy()

    def centred(x, w, bias=None, **_):
        return torch.nn.functional.conv1d(
            x, w.unsqueeze(1), bias, padding=(w.shape[-1] - 1) // 2, groups=x.shape[1]
        )

    for layer in model.layers:
        if layer.is_attention_layer:
            layer.self_attn.is_causal = False
    masks = {"full_attention": None, "conv": None}
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        mp.setattr(lfm2, "causal_conv1d_fn", centred)
        return (
            model(input_ids=torch.tensor([ids]), attention_mask=masks).last_hidden_state[0].numpy()
        )


def test_bidirectional_in_llama_cpp(work):
    """Mean-pooled, as the reference's file and as the bidirectional oracle (cosine 1.0,
    max gap 4e-4 of values up to 1.7 measured at f32); the causal model is far off."""
    ids, got = _llama_embed(work["ours"] / "bidir-f32.gguf", TEXT, per_token=False)
    ids_ref, ref = _llama_embed(work["ref"] / "bidir-f32.gguf", TEXT, per_token=False)
    assert ids == ids_ref and np.array_equal(got, ref)
    folder = work["models"]["bidir"]
    want = _bidirectional_hidden(folder, ids, causal=False).mean(0)
    assert np.abs(got - want).max() < 2e-3 * np.abs(want).max()
    assert _cos(got, want) > 0.99999
    causal = _bidirectional_hidden(folder, ids, causal=True).mean(0)
    assert np.abs(got - causal).max() > 0.05 * np.abs(want).max()


def test_colbert_round_trip(work, tmp_path):
    """GGUF -> HF: ``Lfm2Model`` with the same hidden states, the ``1_Dense`` module
    (PyLate's, no pooling) with the same weight; converted again, the same file."""
    import torch
    from transformers import Lfm2Model

    from weightsmith.safetensors import load_file

    back = tmp_path / "back"
    gguf_to_hf(work["ours"] / "colbert-f32.gguf", back, "f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Lfm2Model"] and cfg["model_type"] == "lfm2"
    modules = json.loads((back / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Dense"]
    orig = work["models"]["colbert"]
    w0 = load_file(orig / "1_Dense" / "model.safetensors")["linear.weight"]
    w1 = load_file(back / "1_Dense" / "model.safetensors")["linear.weight"]
    assert w1.dtype == np.float32 and np.array_equal(w0, w1)
    ids = torch.tensor([[50256, 464, 2068, 7586, 21831, 18045, 625, 262]])
    with torch.no_grad():
        want = Lfm2Model.from_pretrained(orig).eval()(input_ids=ids).last_hidden_state
        got = Lfm2Model.from_pretrained(back).eval()(input_ids=ids)
    assert torch.equal(got.last_hidden_state, want)
    hf_to_gguf(back, tmp_path / "again.gguf", "f32")
    with read(tmp_path / "again.gguf") as a, read(work["ours"] / "colbert-f32.gguf") as b:
        assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
        assert a.metadata["lfm2.embedding_length_out"] == 32
        for t in b.tensors:
            assert np.array_equal(np.asarray(a.tensor(t.name)), np.asarray(b.tensor(t.name)))


def test_bidirectional_refused_back_by_name(work, tmp_path):
    """transformers 5.24 has no bidirectional LFM2 class (the Hub's is remote code): GGUF ->
    HF names it and writes nothing, rather than a causal model with other outputs."""
    import transformers

    assert not hasattr(transformers, "Lfm2BidirectionalModel")
    with pytest.raises(E.UnknownArchitecture, match="Lfm2BidirectionalModel"):
        gguf_to_hf(work["ours"] / "bidir-f32.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def _llama_hidden(folder, ids: list[int], causal: bool) -> np.ndarray:
    """transformers' ``LlamaModel`` on the checkpoint, causal or with no mask at all."""
    import torch
    import transformers.models.llama.modeling_llama as llama
    from transformers import LlamaModel

    model = LlamaModel.from_pretrained(folder).eval()
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        if not causal:
            for layer in model.layers:
                layer.self_attn.is_causal = False
            mp.setattr(llama, "create_causal_mask", lambda **_: None)
        return model(input_ids=torch.tensor([ids])).last_hidden_state[0].numpy()


def test_nemotron_in_llama_cpp(work):
    """Per-token vectors (the file names no pooling) equal the reference file's, and
    transformers' ``LlamaModel`` (the Hub's class is remote code) within 1.5e-6 of values up
    to 3.2 measured: causal as the file runs by default, bidirectional (the model's own
    attention) once the caller switches causal attention off; the two differ."""
    folder = work["models"]["nemotron"]
    got = {}
    for causal in (True, False):
        ids, got[causal] = _llama_embed(
            work["ours"] / "nemotron-f32.gguf", TEXT, per_token=True, causal=causal
        )
        ids_ref, ref = _llama_embed(
            work["ref"] / "nemotron-f32.gguf", TEXT, per_token=True, causal=causal
        )
        assert ids == ids_ref and ids[0] == 128000 and np.array_equal(got[causal], ref)
        want = _llama_hidden(folder, ids, causal)
        assert got[causal].shape == want.shape
        assert np.abs(got[causal] - want).max() < 1e-4 * np.abs(want).max()
    assert np.abs(got[True] - got[False]).max() > 0.1


def test_nemotron_refused_back_by_name(work, tmp_path):
    """transformers 5.24 has no bidirectional Llama (``LlamaBidirectionalModel`` is remote
    code): GGUF -> HF names it and writes nothing."""
    import transformers

    assert not hasattr(transformers, "LlamaBidirectionalModel")
    with pytest.raises(E.UnknownArchitecture, match="LlamaBidirectionalModel"):
        gguf_to_hf(work["ours"] / "nemotron-f32.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()
