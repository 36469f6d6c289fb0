"""RoBERTa, DistilBERT, EuroBERT and the rerankers against llama.cpp (the reference's
conversion/bert.py classes).

* HF -> GGUF byte-identical to the pinned ``convert_hf_to_gguf.py`` at f32 / f16 / bf16 /
  q8_0 (RoBERTa: the ``pad_token_id + 1`` position rows cut, GPT-2's byte-level BPE from
  tokenizer.json; DistilBERT: its own tensor names, no token types, the MLM head and
  ``distilbert.`` prefix of ``DistilBertForMaskedLM`` dropped);
* llama-cpp-python (``embedding=True``) embeds with our file exactly as with the
  reference's, and as transformers' model (mean pooling) on the same token ids;
* rerankers (``XLMRobertaForSequenceClassification`` as bge-reranker,
  ``RobertaForSequenceClassification``): the head as ``cls`` / ``cls.output`` and the
  labels; llama-cpp-python's RANK pooling scores as transformers' logit.
  ``BertForSequenceClassification`` is pinned as the reference leaves it (pooler
  dropped), ``ModernBertForSequenceClassification`` checked by file and metadata only;
* ``ModernBertForMaskedLM``: its prediction head as ``cls`` / ``cls.norm``; with a
  decoder bias (every released checkpoint) the reference and we refuse it by name;
  GGUF -> HF gives back the masked LM (tied decoder) with the same logits;
* GGUF -> HF: transformers loads the folder (RoBERTa; DistilBERT, told from BERT by
  its missing token types) with the same hidden states and the tokenizer tokenizes as
  the original.

All reference conversions run in one subprocess.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.encoder_models import (
    bert_reranker,
    distilbert,
    eurobert,
    modernbert_mlm,
    modernbert_reranker,
    reranker,
    roberta,
)
from support.llama_sdist import llama_cpp_root
from test_convert_archs import _same_file
from test_convert_encoders_more import build_and_convert
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = ["f32", "f16", "bf16", "q8_0"]
FILES = [(a, t) for a in ("roberta", "distilbert", "eurobert") for t in TYPES]
FILES += [("distilbert_mlm", "f32")]
RERANKERS = ["rerank_xlmr", "rerank_roberta"]
FILES += [(a, t) for a in RERANKERS for t in ("f32", "q8_0")]
FILES += [("rerank_bert", "f32"), ("rerank_bert2", "f32")]
FILES += [("rerank_modernbert", t) for t in ("f32", "q8_0")]
# ModernBertForMaskedLM without a decoder bias (the reference refuses one: see below)
FILES += [("modernbert_mlm", t) for t in TYPES]
# no '"' (GPT-2's id 1, RoBERTa's padding id here: transformers would count it as padding)
TEXT = "The quick brown fox jumps over the lazy dog, again and again and again."


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("encoders3")
    builders = {
        "roberta": roberta,
        "distilbert": distilbert,
        "distilbert_mlm": lambda p: distilbert(p, masked_lm=True),
        "rerank_xlmr": lambda p: reranker(p, "xlmroberta"),
        "rerank_roberta": lambda p: reranker(p, "roberta"),
        "rerank_bert": bert_reranker,  # one label: the classifier is cls.output
        "rerank_bert2": lambda p: bert_reranker(p, labels=2),  # placeholders: cls
        "rerank_modernbert": modernbert_reranker,
        "modernbert_mlm": lambda p: modernbert_mlm(p, decoder_bias=False),
        "modernbert_mlm_bias": modernbert_mlm,  # ModernBERT-base's layout: refused
        "eurobert": eurobert,
    }
    return build_and_convert(root, builders, FILES)


@pytest.mark.parametrize(("arch", "t"), FILES)
def test_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


def test_metadata_is_real(work):
    """Guard against a vacuous pass: the cut positions, the vocabularies, DistilBERT's
    epsilon and missing token types."""
    from weightsmith.gguf import read

    with read(work["ours"] / "roberta-f16.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "bert" and md["bert.pooling_type"] == 1
        assert md["bert.context_length"] == 64  # 66 - (pad 1 + 1)
        assert f.tensor("position_embd.weight").shape == (64, 64)
        assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.token_type_count"] == 1
        assert len(md["tokenizer.ggml.merges"]) > 1000
    for name in ("distilbert-q8_0.gguf", "distilbert_mlm-f32.gguf"):
        with read(work["ours"] / name) as f:
            md = f.metadata
            assert md["bert.attention.layer_norm_epsilon"] == pytest.approx(1e-12)
            assert md["bert.block_count"] == 2 and md["bert.feed_forward_length"] == 128
            assert md["tokenizer.ggml.model"] == "bert"
            names = [t.name for t in f.tensors]
            assert "token_types.weight" not in names and len(names) == 4 + 2 * 16
            assert not any(n.startswith(("vocab_", "distilbert")) for n in names)


def test_eurobert_metadata_and_late_pooling_refused(work, tmp_path):
    """EuroBERT: bidirectional, RoPE type none, both poolings, no BOS added; the config
    default ``classifier_pooling = late`` is refused as the reference refuses it."""
    import json
    import shutil

    from weightsmith import errors as E
    from weightsmith.gguf import read

    with read(work["ours"] / "eurobert-q8_0.gguf") as f:
        md = f.metadata
        assert md["eurobert.attention.causal"] is False
        assert md["eurobert.rope.scaling.type"] == "none"
        assert md["eurobert.pooling_type"] == 1 and md["eurobert.classifier.pooling_type"] == 1
        assert md["tokenizer.ggml.add_bos_token"] is False
        assert f.tensor("blk.0.attn_k.weight").shape == (32, 64)  # GQA: 2 of 4 heads
    bad = shutil.copytree(work["models"]["eurobert"], tmp_path / "late")
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["classifier_pooling"]  # EuroBertConfig's default: late
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match="classifier_pooling"):
        hf_to_gguf(bad, tmp_path / "late.gguf", "f32")
    assert not (tmp_path / "late.gguf").exists()


def test_reranker_head_is_written(work):
    """The classification head as llama.cpp's ``cls`` / ``cls.output``, the one label; no
    pooling type in the file (the reference writes none without modules.json: the caller
    asks for RANK)."""
    from weightsmith.gguf import read

    for arch in RERANKERS:
        with read(work["ours"] / f"{arch}-q8_0.gguf") as f:
            md = f.metadata
            assert md["bert.classifier.output_labels"] == ["LABEL_0"]
            assert "bert.pooling_type" not in md
            assert f.tensor("cls.weight").shape == (64, 64)
            assert f.tensor("cls.output.weight").shape == (1, 64)
            assert f.tensor("cls.output.bias").shape == (1,)


def test_modernbert_reranker_head_is_written(work):
    """ModernBertForSequenceClassification: head.dense / head.norm / classifier as
    ``cls`` / ``cls.norm`` / ``cls.output``, CLS classifier pooling, the label.  The
    pinned llama.cpp refuses ModernBERT files (test_convert_encoders.py pins that), so
    no score is compared."""
    from weightsmith.gguf import read

    with read(work["ours"] / "rerank_modernbert-q8_0.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "modern-bert"
        assert md["modern-bert.classifier.pooling_type"] == 2
        assert md["modern-bert.classifier.output_labels"] == ["LABEL_0"]
        assert [t.name for t in f.tensors if t.name.startswith("cls")] == [
            "cls.output.bias", "cls.output.weight", "cls.weight", "cls.norm.weight"
        ]  # fmt: skip


def _llama_rank(path: Path) -> tuple[list[int], float]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=64, n_threads=2,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK,
                          verbose=False)  # fmt: skip
    try:
        ids = llm.tokenize(TEXT.encode(), add_bos=True, special=False)
        # RANK pooling leaves one score per label first (the rest of the row is unset)
        return ids, float(llm.embed(TEXT, normalize=False)[0])
    finally:
        llm.close()


@pytest.mark.parametrize("arch", RERANKERS)
def test_reranker_score_in_llama_cpp(work, arch):
    """llama.cpp's RANK score on our file is the reference file's, bit for bit, and
    transformers' logit on the same ids (classifier.dense, tanh, out_proj on <s>)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    ids, got = _llama_rank(work["ours"] / f"{arch}-f32.gguf")
    assert (ids, got) == _llama_rank(work["ref"] / f"{arch}-f32.gguf")
    model = AutoModelForSequenceClassification.from_pretrained(work["models"][arch]).eval()
    with torch.no_grad():
        want = float(model(input_ids=torch.tensor([ids])).logits[0, 0])
    assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (got, want)
    _, q8 = _llama_rank(work["ours"] / f"{arch}-q8_0.gguf")
    assert abs(q8 - want) <= 0.05 * max(1.0, abs(want)), (q8, want)


def test_bert_reranker_as_the_reference_leaves_it(work):
    """BertForSequenceClassification, pinned as the reference converts it: the pooler
    (dense + tanh before the classifier) is dropped, so llama.cpp's RANK score is the
    classifier on the [CLS] state alone, not transformers' logit; with AutoConfig's two
    placeholder labels the classifier becomes ``cls`` and llama.cpp refuses the file."""
    import llama_cpp
    import torch
    from transformers import AutoModelForSequenceClassification

    from weightsmith.gguf import read

    with read(work["ours"] / "rerank_bert-f32.gguf") as f:
        assert f.metadata["bert.classifier.output_labels"] == ["LABEL_0"]
        assert "cls.weight" not in f and f.tensor("cls.output.weight").shape == (1, 64)
    with read(work["ours"] / "rerank_bert2-f32.gguf") as f:
        assert "bert.classifier.output_labels" not in f.metadata
        assert f.tensor("cls.weight").shape == (2, 64) and "cls.output.weight" not in f
    ids, got = _llama_rank(work["ours"] / "rerank_bert-f32.gguf")
    assert (ids, got) == _llama_rank(work["ref"] / "rerank_bert-f32.gguf")
    model = AutoModelForSequenceClassification.from_pretrained(work["models"]["rerank_bert"])
    with torch.no_grad():
        out = model.eval()(input_ids=torch.tensor([ids]), output_hidden_states=True)
        no_pooler = float(model.classifier(out.hidden_states[-1][0, 0])[0])
    assert abs(got - no_pooler) <= 1e-3 * max(1.0, abs(no_pooler)), (got, no_pooler)
    assert abs(got - float(out.logits[0, 0])) > 0.05  # the pooler mattered
    for where in ("ours", "ref"):
        with pytest.raises(ValueError, match="Failed to load model"):
            llama_cpp.Llama(model_path=str(work[where] / "rerank_bert2-f32.gguf"),
                            embedding=True, verbose=False)  # fmt: skip


def _llama_embed(path: Path) -> tuple[list[int], np.ndarray]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=64, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        ids = llm.tokenize(TEXT.encode(), add_bos=True, special=False)
        return ids, np.array(llm.embed(TEXT, normalize=False), dtype=np.float32)
    finally:
        llm.close()


def _hf_mean(folder: Path, ids: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).last_hidden_state[0].mean(0).numpy()


@pytest.mark.parametrize("arch", ["roberta", "distilbert", "distilbert_mlm", "eurobert"])
def test_embeddings_in_llama_cpp(work, arch):
    """Ours embeds as the reference's file, bit for bit, and as transformers on the same
    ids (RoBERTa counts positions from pad + 1, llama.cpp from 0 on the cut table)."""
    ids, got = _llama_embed(work["ours"] / f"{arch}-f32.gguf")
    ids_ref, ref = _llama_embed(work["ref"] / f"{arch}-f32.gguf")
    assert ids == ids_ref and len(ids) > 10
    np.testing.assert_array_equal(got, ref)
    if arch.startswith("distilbert"):
        assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
    want = _hf_mean(work["models"][arch], ids)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


@pytest.mark.parametrize("arch", ["roberta", "distilbert_mlm", "eurobert"])
def test_round_trip(work, arch, tmp_path):
    """GGUF (f32) -> HF: every tensor llama.cpp keeps comes back (RoBERTa's position rows
    before pad + 1, never looked up, as zeros; DistilBERT as a DistilBertModel, not a
    BertModel with invented token types), the same hidden states, the same tokens."""
    import json

    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModel, AutoTokenizer

    src, back = work["models"][arch], tmp_path / "back"
    gguf_to_hf(work["ours"] / f"{arch}-f32.gguf", back, dtype="f32")
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    if arch == "distilbert_mlm":  # the embedding model: no MLM head, no prefix
        orig = {k[11:]: v for k, v in orig.items() if k.startswith("distilbert.")}
        assert json.loads((back / "config.json").read_text())["architectures"] == [
            "DistilBertModel"
        ]
    if arch == "eurobert":  # written with Llama's "model." prefix; transformers strips it
        got = {k.removeprefix("model."): v for k, v in got.items()}
    assert sorted(got) == sorted(orig)
    pos = "embeddings.position_embeddings.weight"
    if arch == "roberta":
        assert not got[pos][:2].any()
        got[pos][:2] = orig[pos][:2]
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    assert AutoTokenizer.from_pretrained(back)(TEXT) == AutoTokenizer.from_pretrained(src)(TEXT)
    x = torch.tensor([AutoTokenizer.from_pretrained(src)(TEXT)["input_ids"]])
    with torch.no_grad():
        a = AutoModel.from_pretrained(src).eval()(input_ids=x).last_hidden_state
        b = AutoModel.from_pretrained(back).eval()(input_ids=x).last_hidden_state
    np.testing.assert_array_equal(b.numpy(), a.numpy())


# --------------------------------------------------------------------------- ModernBERT MLM


def test_modernbert_mlm_head_is_written(work):
    """ModernBertForMaskedLM without a decoder bias: head.dense / head.norm as ``cls`` /
    ``cls.norm`` (no labels, no ``cls.output``: llama.cpp's RANK head would be dense,
    GELU, norm only), the tied decoder not written."""
    from weightsmith.gguf import read

    with read(work["ours"] / "modernbert_mlm-f16.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "modern-bert"
        assert "modern-bert.classifier.output_labels" not in md
        assert md["modern-bert.vocab_size"] == 50257
        assert [(t.name, tuple(t.shape)) for t in f.tensors if not t.name.startswith("blk.")] == [
            ("cls.weight", (64, 64)), ("cls.norm.weight", (64,)),
            ("token_embd_norm.weight", (64,)), ("token_embd.weight", (50257, 64)),
            ("output_norm.weight", (64,)),
        ]  # fmt: skip


def test_modernbert_mlm_decoder_bias_refused(work, tmp_path):
    """ModernBertConfig's default ``decoder_bias`` (ModernBERT-base and every released
    MLM checkpoint): ``decoder.bias`` has no GGUF name.  The reference fails on it
    ("Can not map tensor 'decoder.bias'"); ours names it before writing anything."""
    import sys

    src = work["models"]["modernbert_mlm_bias"]
    with pytest.raises(E.UnmappedTensor, match=r"'decoder\.bias'"):
        hf_to_gguf(src, tmp_path / "ours" / "out.gguf", "f32")
    assert not (tmp_path / "ours").exists() or not any((tmp_path / "ours").iterdir())
    script = llama_cpp_root() / "convert_hf_to_gguf.py"
    r = pyfork.run([sys.executable, str(script), str(src), "--outfile",
                        str(tmp_path / "ref.gguf"), "--outtype", "f32"])  # fmt: skip
    assert r.returncode != 0 and "Can not map tensor 'decoder.bias'" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "ref.gguf").exists()


def test_modernbert_mlm_not_run_by_pinned_llama_cpp(work):
    """As for every ModernBERT file (test_convert_encoders.py): the pinned llama.cpp
    refuses the reference's and ours alike, so no embedding is compared."""
    import llama_cpp

    for d in ("ref", "ours"):
        with pytest.raises(ValueError, match="Failed to load model"):
            llama_cpp.Llama(model_path=str(work[d] / "modernbert_mlm-f32.gguf"),
                            embedding=True, verbose=False)  # fmt: skip


def test_modernbert_mlm_round_trip(work, tmp_path):
    """GGUF (f32) -> HF: ``ModernBertForMaskedLM`` again (the body under ``model.``, the
    head, no decoder bias, the decoder tied), every tensor bit-equal under its original
    name; transformers' MLM logits and the tokenizer's ids are the original's."""
    import json

    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    src, back = work["models"]["modernbert_mlm"], tmp_path / "back"
    gguf_to_hf(work["ours"] / "modernbert_mlm-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["ModernBertForMaskedLM"]
    assert cfg["decoder_bias"] is False and cfg["tie_word_embeddings"] is True
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    assert sorted(got) == sorted(orig) and "head.dense.weight" in got
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    ids = AutoTokenizer.from_pretrained(src)(TEXT)["input_ids"]
    assert AutoTokenizer.from_pretrained(back)(TEXT)["input_ids"] == ids
    x = torch.tensor([ids])
    with torch.no_grad():
        a = AutoModelForMaskedLM.from_pretrained(src).eval()(input_ids=x).logits
        b = AutoModelForMaskedLM.from_pretrained(back).eval()(input_ids=x).logits
    assert float(a.abs().max()) > 0.1  # not a vacuous zero head
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-6)
