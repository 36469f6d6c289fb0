"""Qwen embedding models against llama.cpp: the bare ``Qwen3Model`` (Qwen3-Embedding) and
``Qwen2Model`` (gte-Qwen2), which the reference registers on its Qwen3 / Qwen2 classes
(conversion/qwen.py).

* HF -> GGUF byte-identical to the pinned ``convert_hf_to_gguf.py``: Qwen3Model at f32 /
  f16 / bf16 / q8_0, and q4_k_m equal to the reference's f32 file through
  ``llama_model_quantize``; Qwen2Model at f32 and q8_0.
  The folders are what ``save_pretrained`` of the bare classes writes (no ``model.``
  prefix, no ``lm_head``) with Qwen3-Embedding's sentence-transformers modules (last-token
  pooling, Normalize): ``<arch>.pooling_type = 3`` (LAST).  Without ``modules.json`` the
  reference writes no pooling type, and neither do we (the same file).
* llama-cpp-python (``embedding=True``) embeds with our file exactly as with the
  reference's, and within cosine 0.9999 of transformers' last-token hidden state,
  normalised (what sentence-transformers computes).
* GGUF -> HF: the folder loads in transformers as the bare class with the same hidden
  states, with the sentence-transformers modules (lasttoken pooling) written back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.qwen_embed_models import qwen2_embedding, qwen3_embedding
from test_convert_archs import _same_file
from test_convert_encoders_more import build_and_convert
from test_convert_hf_to_gguf import _llama_quantize
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = ["f32", "f16", "bf16", "q8_0"]
ARCHS = ["qwen3_emb", "qwen2_emb", "qwen3_nopool"]
# Qwen2Model at two types only (test time: the 151k-token vocabulary costs each
# conversion seconds); its per-type paths are Qwen2ForCausalLM's, all types in
# test_convert_archs.py
FILES = [*(("qwen3_emb", t) for t in TYPES), ("qwen2_emb", "f32"), ("qwen2_emb", "q8_0")]
FILES += [("qwen3_nopool", "f16")]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog, again and again.",
    "Weights are read, transformed and written one tensor at a time.",
    "敏捷的棕色狐狸跳过了懒狗。",
]
CLASSES = {"qwen3_emb": "Qwen3Model", "qwen2_emb": "Qwen2Model"}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("qwen_embed")
    builders = {
        "qwen3_emb": qwen3_embedding,
        "qwen2_emb": qwen2_embedding,
        # the same folder without the sentence-transformers files
        "qwen3_nopool": lambda d: shutil.copytree(
            d.parent / "qwen3_emb", d, dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("modules.json", "1_Pooling", "2_Normalize"),
        ),
    }  # fmt: skip
    w = build_and_convert(root, builders, FILES)
    # the reference's f32 file through llama_model_quantize
    _llama_quantize(w["ref"] / "qwen3_emb-f32.gguf", w["ref"] / "qwen3_emb-q4_k_m.gguf", "q4_k_m")
    hf_to_gguf(w["models"]["qwen3_emb"], w["ours"] / "qwen3_emb-q4_k_m.gguf", "q4_k_m")
    return w


@pytest.mark.parametrize(("arch", "t"), [*FILES, ("qwen3_emb", "q4_k_m")])
def test_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


def test_metadata_is_real(work):
    """Guard against a vacuous pass: the checkpoints have no ``model.`` prefix and no
    ``lm_head``; the files are qwen3 / qwen2 with LAST pooling, no output tensor; without
    modules.json no pooling type at all."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    with safe_open(work["models"]["qwen3_emb"] / "model.safetensors", "np") as st:
        keys = list(st.keys())
    assert "embed_tokens.weight" in keys and "norm.weight" in keys
    assert not any(k.startswith(("model.", "lm_head")) for k in keys)
    for a, arch in (("qwen3_emb", "qwen3"), ("qwen2_emb", "qwen2")):
        with read(work["ours"] / f"{a}-q8_0.gguf") as f:
            assert f.metadata["general.architecture"] == arch
            assert f.metadata[f"{arch}.pooling_type"] == 3
            assert "output.weight" not in f and "blk.1.attn_q.weight" in f
    with read(work["ours"] / "qwen2_emb-f32.gguf") as f:
        assert "blk.0.attn_q.bias" in f
    with read(work["ours"] / "qwen3_nopool-f16.gguf") as f:
        assert "qwen3.pooling_type" not in f.metadata
    with read(work["ours"] / "qwen3_emb-q4_k_m.gguf") as f:
        assert f.metadata["general.file_type"] == 15


def _llama_embed(path: Path) -> tuple[list[list[int]], np.ndarray]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=64, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        ids = [llm.tokenize(s.encode(), add_bos=True, special=False) for s in SENTENCES]
        return ids, np.array(llm.embed(SENTENCES, normalize=True), dtype=np.float32)
    finally:
        llm.close()


def _hf_last_token(folder: Path, ids: list[list[int]]) -> np.ndarray:
    """transformers' last-token hidden state, normalised: sentence-transformers' pipeline."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for x in ids:
            h = model(input_ids=torch.tensor([x])).last_hidden_state[0, -1].numpy()
            out.append(h / np.linalg.norm(h))
    return np.array(out)


@pytest.mark.parametrize("arch", ARCHS[:2])
def test_embeddings_in_llama_cpp(work, arch):
    """Ours embeds as the reference's file, bit for bit (f32), and as transformers'
    last-token pooled, normalised hidden state (cosine >= 0.9999; q8_0 >= 0.999)."""
    from transformers import AutoTokenizer

    ids, got = _llama_embed(work["ours"] / f"{arch}-f32.gguf")
    ids_ref, ref = _llama_embed(work["ref"] / f"{arch}-f32.gguf")
    assert ids == ids_ref and all(len(x) > 5 for x in ids)
    tok = AutoTokenizer.from_pretrained(work["models"][arch])
    assert ids == [tok(s)["input_ids"] for s in SENTENCES]
    np.testing.assert_array_equal(got, ref)
    want = _hf_last_token(work["models"][arch], ids)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1)
    assert cos.min() >= 0.9999, cos
    _, q8 = _llama_embed(work["ours"] / f"{arch}-q8_0.gguf")
    assert ((q8 * want).sum(1) / np.linalg.norm(q8, axis=1)).min() >= 0.999


@pytest.mark.parametrize("arch", ARCHS[:2])
def test_round_trip(work, arch, tmp_path):
    """GGUF (f32) -> HF: the bare class with every tensor and the same hidden states; the
    sentence-transformers modules with last-token pooling; the same tokens."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModel, AutoTokenizer

    src, back = work["models"][arch], tmp_path / "back"
    gguf_to_hf(work["ours"] / f"{arch}-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == [CLASSES[arch]]
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    got = {k.removeprefix("model."): v for k, v in got.items()}
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    modules = json.loads((back / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    pool = json.loads((back / "1_Pooling" / "config.json").read_text())
    assert pool["pooling_mode_lasttoken"] is True and pool["pooling_mode_mean_tokens"] is False
    a_tok, b_tok = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(back)
    assert [b_tok(s)["input_ids"] for s in SENTENCES] == [a_tok(s)["input_ids"] for s in SENTENCES]
    model = AutoModel.from_pretrained(back).eval()
    assert type(model).__name__ == CLASSES[arch]
    x = torch.tensor([a_tok(SENTENCES[0])["input_ids"]])
    with torch.no_grad():
        a = AutoModel.from_pretrained(src).eval()(input_ids=x).last_hidden_state
        b = model(input_ids=x).last_hidden_state
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-5)
