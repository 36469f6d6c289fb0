"""CamemBERT and the DistilBERT reranker against llama.cpp (the reference's conversion/bert.py
``BertModel`` and ``DistilBertModel`` classes).

* HF -> GGUF byte-identical to the pinned ``convert_hf_to_gguf.py`` at f32 / f16 / bf16 /
  q8_0.  ``CamembertModel`` is converted as BERT: the same tensor names, no position cut
  (CamemBERT counts positions from ``pad_token_id + 1`` as RoBERTa does, but the
  reference's BertModel keeps the whole table), and the vocabulary through the WordPiece
  route (``get_vocab_base`` + phantom spaces), which needs a tokenizer whose chktxt
  fingerprint llama.cpp knows.  CamemBERT's own SentencePiece Unigram tokenizer has none:
  the reference stops (``NotImplementedError``), ours raises ``UnknownBPEPreTokenizer``
  before writing.
* ``DistilBertForSequenceClassification``: ``pre_classifier`` as ``cls``, ``classifier`` as
  ``cls.output``, the label.
* llama-cpp-python embeds (CamemBERT) and scores (the reranker, RANK pooling) with our
  file exactly as with the reference's; the values are what the reference's choices make
  llama.cpp compute: CamemBERT's hidden states with positions counted from 0, and the
  reranker's head with a tanh where DistilBERT has a ReLU.  Both differences are pinned.
* GGUF -> HF: CamemBERT comes back as a ``BertModel`` (the GGUF is a BERT one; its
  hidden states are CamemBERT's with positions from 0), the reranker as a
  ``DistilBertForSequenceClassification`` with the same logits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.encoder_models import camembert, distilbert_reranker
from support.llama_sdist import llama_cpp_root
from test_convert_archs import _same_file
from test_convert_encoders_more import build_and_convert
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = ["f32", "f16", "bf16", "q8_0"]
FILES = [(a, t) for a in ("camembert", "rerank_distilbert") for t in TYPES]
TEXT = "The quick brown fox jumps over the lazy dog, again and again and again."


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("encoders_camembert")
    builders = {"camembert": camembert, "rerank_distilbert": distilbert_reranker}
    return build_and_convert(root, builders, FILES)


@pytest.mark.parametrize(("arch", "t"), FILES)
def test_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


def test_metadata_is_real(work):
    """Guard against a vacuous pass: CamemBERT as BERT with its whole position table and
    WordPiece vocabulary; the reranker's head and label."""
    from weightsmith.gguf import read

    with read(work["ours"] / "camembert-f16.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "bert" and md["bert.pooling_type"] == 1
        assert md["bert.context_length"] == 66  # not cut by pad + 1 as RoBERTa's
        assert f.tensor("position_embd.weight").shape == (66, 64)
        assert md["tokenizer.ggml.model"] == "bert" and md["tokenizer.ggml.pre"] == "jina-v2-en"
    with read(work["ours"] / "rerank_distilbert-q8_0.gguf") as f:
        md = f.metadata
        assert md["bert.classifier.output_labels"] == ["LABEL_0"]
        assert md["bert.attention.layer_norm_epsilon"] == pytest.approx(1e-12)
        assert "bert.pooling_type" not in md and "token_types.weight" not in f
        assert f.tensor("cls.weight").shape == (64, 64)
        assert f.tensor("cls.output.weight").shape == (1, 64)


def test_camembert_unigram_refused_as_the_reference_refuses(work):
    """CamemBERT's own tokenizer (SentencePiece Unigram, tokenizer.json by
    CamembertTokenizer): the reference's WordPiece route fingerprints it, finds no match and
    stops; ours names the fingerprint and writes nothing."""
    src = work["root"] / "models" / "camembert_unigram"
    src.mkdir()
    camembert(src, unigram=True)
    ref_out, ours_out = work["ref"] / "camembert_unigram.gguf", work["ours"] / "cu.gguf"
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, script, str(src), "--outfile", str(ref_out),
                        "--outtype", "f32"])  # fmt: skip
    assert r.returncode != 0 and "BPE pre-tokenizer was not recognized" in r.stderr
    with pytest.raises(E.UnknownBPEPreTokenizer, match="chktxt sha256"):
        hf_to_gguf(src, ours_out, "f32")
    assert not ours_out.exists()


def test_distilbert_reranker_placeholder_labels_refused(work, tmp_path):
    """With AutoConfig's two placeholder labels the reference maps ``classifier`` to a
    second ``cls`` and its writer fails on the duplicate; ours names the tensor first."""
    import json
    import shutil

    bad = shutil.copytree(work["models"]["rerank_distilbert"], tmp_path / "two")
    cfg = json.loads((bad / "config.json").read_text())
    cfg["id2label"], cfg["label2id"] = (
        {"0": "LABEL_0", "1": "LABEL_1"},
        {"LABEL_0": 0, "LABEL_1": 1},
    )
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.UnmappedTensor, match="classifier"):
        hf_to_gguf(bad, tmp_path / "two.gguf", "f32")
    assert not (tmp_path / "two.gguf").exists()


def _llama(path: Path, rank: bool) -> tuple[list[int], np.ndarray]:
    import llama_cpp

    kw = {"pooling_type": llama_cpp.LLAMA_POOLING_TYPE_RANK} if rank else {}
    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=64, n_threads=2,
                          verbose=False, **kw)  # fmt: skip
    try:
        ids = llm.tokenize(TEXT.encode(), add_bos=True, special=False)
        return ids, np.array(llm.embed(TEXT, normalize=False), dtype=np.float32)
    finally:
        llm.close()


def test_camembert_embeddings_in_llama_cpp(work):
    """Ours embeds as the reference's file, bit for bit; that is CamemBERT's mean hidden
    state with positions from 0 (llama.cpp's), not from pad + 1 (transformers' own)."""
    import torch
    from transformers import AutoModel

    ids, got = _llama(work["ours"] / "camembert-f32.gguf", rank=False)
    ids_ref, ref = _llama(work["ref"] / "camembert-f32.gguf", rank=False)
    assert ids == ids_ref and ids[0] == 101 and ids[-1] == 102 and len(ids) > 10
    np.testing.assert_array_equal(got, ref)
    model = AutoModel.from_pretrained(work["models"]["camembert"]).eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        from0 = model(input_ids=x, position_ids=torch.arange(len(ids))[None])
        own = model(input_ids=x)
    want = from0.last_hidden_state[0].mean(0).numpy()
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
    assert np.abs(got - own.last_hidden_state[0].mean(0).numpy()).max() > 0.05


def test_distilbert_reranker_score_in_llama_cpp(work):
    """llama.cpp's RANK score on ours is the reference file's, bit for bit: the head on
    the [CLS] state with a tanh between pre_classifier and classifier (llama.cpp's BERT
    head), not transformers' ReLU, so not transformers' logit."""
    import torch
    from transformers import AutoModelForSequenceClassification

    ids, got = _llama(work["ours"] / "rerank_distilbert-f32.gguf", rank=True)
    ids_ref, ref = _llama(work["ref"] / "rerank_distilbert-f32.gguf", rank=True)
    assert ids == ids_ref and got[0] == ref[0]
    model = AutoModelForSequenceClassification.from_pretrained(work["models"]["rerank_distilbert"])
    with torch.no_grad():
        out = model.eval()(input_ids=torch.tensor([ids]), output_hidden_states=True)
        h = out.hidden_states[-1][0, 0]
        tanh = float(model.classifier(torch.tanh(model.pre_classifier(h)))[0])
    assert abs(got[0] - tanh) <= 1e-3 * max(1.0, abs(tanh)), (got[0], tanh)
    # the activation mattered: ten times the tolerance above away from transformers' logit
    assert abs(got[0] - float(out.logits[0, 0])) > 0.01, (got[0], float(out.logits[0, 0]))
    _, q8 = _llama(work["ours"] / "rerank_distilbert-q8_0.gguf", rank=True)
    assert abs(q8[0] - tanh) <= 0.05 * max(1.0, abs(tanh)), (q8[0], tanh)


@pytest.mark.parametrize("arch", ["camembert", "rerank_distilbert"])
def test_round_trip(work, arch, tmp_path):
    """GGUF (f32) -> HF: every tensor comes back; CamemBERT as a BertModel (the hidden
    states of CamemBERT with positions from 0), the reranker as a
    DistilBertForSequenceClassification (the same logits); the same tokens."""
    import json

    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    src, back = work["models"][arch], tmp_path / "back"
    gguf_to_hf(work["ours"] / f"{arch}-f32.gguf", back, dtype="f32")
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    cfg = json.loads((back / "config.json").read_text())
    if arch == "rerank_distilbert":
        orig = {k.removeprefix("distilbert."): v for k, v in orig.items()}
        assert cfg["architectures"] == ["DistilBertForSequenceClassification"]
        assert cfg["id2label"] == {"0": "LABEL_0"}
    else:
        assert cfg["architectures"] == ["BertModel"]
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    assert AutoTokenizer.from_pretrained(back)(TEXT) == AutoTokenizer.from_pretrained(src)(TEXT)
    ids = AutoTokenizer.from_pretrained(src)(TEXT)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        if arch == "rerank_distilbert":
            a = AutoModelForSequenceClassification.from_pretrained(src).eval()(input_ids=x).logits
            b = AutoModelForSequenceClassification.from_pretrained(back).eval()(input_ids=x).logits
        else:
            pos = torch.arange(len(ids))[None]
            a = AutoModel.from_pretrained(src).eval()(input_ids=x, position_ids=pos)
            b = AutoModel.from_pretrained(back).eval()(input_ids=x)
            a, b = a.last_hidden_state, b.last_hidden_state
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-5)
