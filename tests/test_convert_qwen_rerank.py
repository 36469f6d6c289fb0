"""Qwen3 rerankers (Qwen3-Reranker) against llama.cpp: the reference's reranker mode of its
Qwen3 class (conversion/qwen.py, ``Qwen3Model._is_qwen3_reranker``).

* HF -> GGUF byte-identical to the pinned ``convert_hf_to_gguf.py``: a reranker with its
  own head, told by its README, at f32 / f16 / bf16 / q8_0, and q4_k_m equal to the
  reference's f32 file through ``llama_model_quantize``; one with tied embeddings, told by
  its folder name, at f32 (its other types take the same paths; test time); a
  Qwen3-VL-Reranker's text file (``qwen3vl``, the same rows before the deepstack count) at
  f32.  The files are ``qwen3`` with RANK pooling (4), the
  labels yes / no, the ``rerank`` chat template and ``cls.output`` = the head's yes / no
  rows (no ``output.weight``).
* llama-cpp-python (RANK pooling) scores prompts built from the file's ``rerank``
  template with our file exactly as with the reference's; its two outputs are
  ``softmax([logit(yes), logit(no)])`` at the last token, which is Qwen3-Reranker's own
  recipe in transformers (``p(yes)`` of a softmax over no / yes): equal within 1e-4 at
  f32 (measured 3.4e-5 / 4.9e-5 over ~80-token prompts; the scores spread over 0.034 by
  pair), 5e-3 at q8_0 (measured 2.4e-3).
  The Qwen3-VL reranker's text file scores text prompts as the reference's and as
  ``Qwen3VLForConditionalGeneration``'s last-token logits.
* GGUF -> HF: ``Qwen3ForSequenceClassification`` (``score`` = ``cls.output``): transformers
  loads it and its two logits give the same probabilities (the full vocabulary head is
  not in the file, so ``*ForCausalLM`` cannot be rebuilt).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.qwen_rerank_models import (
    qwen3_reranker_readme,
    qwen3_reranker_tied,
    qwen3_vl_reranker,
)
from test_convert_archs import _same_file
from test_convert_encoders_more import build_and_convert
from test_convert_hf_to_gguf import _llama_quantize
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf
from weightsmith.gguf import read

TYPES = ["f32", "f16", "bf16", "q8_0"]
# the README-told reranker (own head) at every type; the folder-name-told one (tied) at two
TIED = "tiny-Qwen3-Reranker"
FILES = [*(("rr_readme", t) for t in TYPES), (TIED, "f32"), ("vlrr", "f32")]
PAIRS = [
    ("What is the capital of China?", "The capital of China is Beijing."),
    ("What is the capital of China?", "Gravity pulls objects toward each other."),
    ("Explain gravity", "Gravity is a force that attracts two bodies towards each other."),
    ("Explain gravity", "敏捷的棕色狐狸跳过了懒狗。"),
]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("qwen_rr")
    builders = {
        "rr_readme": qwen3_reranker_readme,
        TIED: qwen3_reranker_tied,
        "vlrr": qwen3_vl_reranker,
    }
    w = build_and_convert(root, builders, FILES)
    _llama_quantize(w["ref"] / "rr_readme-f32.gguf", w["ref"] / "rr_readme-q4_k_m.gguf", "q4_k_m")
    hf_to_gguf(w["models"]["rr_readme"], w["ours"] / "rr_readme-q4_k_m.gguf", "q4_k_m")
    return w


@pytest.mark.parametrize(("arch", "t"), [*FILES, ("rr_readme", "q4_k_m")])
def test_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


def _yes_no(folder: Path) -> tuple[int, int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    return tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")


def test_reranker_file(work):
    """Guard against a vacuous pass: RANK pooling, the labels and template, and
    ``cls.output`` equal to the yes / no rows of the head (the embedding when tied), the
    head itself not written; nothing marks the README folder but its README."""
    from safetensors.numpy import load_file

    assert "qwen3-reranker" not in str(work["models"]["rr_readme"]).lower()
    for name, head in (("rr_readme", "lm_head.weight"), (TIED, "model.embed_tokens.weight")):
        st = load_file(work["models"][name] / "model.safetensors")
        assert ("lm_head.weight" in st) == (name == "rr_readme")
        yes, no = _yes_no(work["models"][name])
        with read(work["ours"] / f"{name}-f32.gguf") as f:
            md = f.metadata
            assert md["general.architecture"] == "qwen3"
            assert md["qwen3.pooling_type"] == 4
            assert md["qwen3.classifier.output_labels"] == ["yes", "no"]
            assert md["tokenizer.chat_templates"] == ["rerank"]
            assert "{query}" in md["tokenizer.chat_template.rerank"]
            assert "output.weight" not in f
            cls = f.numpy("cls.output.weight")
            np.testing.assert_array_equal(cls, st[head][[yes, no]])
            emb = f.numpy("token_embd.weight")
            np.testing.assert_array_equal(emb, st["model.embed_tokens.weight"])
    with read(work["ours"] / "rr_readme-q4_k_m.gguf") as f:
        assert f.metadata["general.file_type"] == 15 and "cls.output.weight" in f


def test_plain_qwen3_is_not_a_reranker(work, tmp_path):
    """The same folder without its README is a plain Qwen3ForCausalLM (no pooling type,
    ``output.weight``), as in the reference (its bytes: tests/test_convert_archs.py)."""
    from weightsmith.convert._hf_to_gguf import hf_input, plan_input

    plain = tmp_path / "plain"
    shutil.copytree(work["models"]["rr_readme"], plain, ignore=shutil.ignore_patterns("*.md"))
    stack: list = []
    m = hf_input(plain, stack)
    try:
        assert "_rerank" not in m.cfg
        plan = plan_input(m, "f32", tokenizer=False)
        names = {t.name for t in plan.tensors}
        assert "output.weight" in names and "cls.output.weight" not in names
        assert all(k != "qwen3.pooling_type" for k, _, _ in m.arch.metadata(m.cfg))
    finally:
        for h in stack:
            h.close()


def _prompts(template: str) -> list[str]:
    return [template.replace("{query}", q).replace("{document}", d) for q, d in PAIRS]


def _llama_rank(path: Path) -> tuple[list[str], list[list[int]], np.ndarray]:
    """llama.cpp's RANK pooling output per prompt (``n_cls_out`` floats; llama-cpp-python's
    ``embed`` reads ``n_embd`` floats, so the context is driven directly)."""
    import llama_cpp

    with read(path) as f:
        prompts = _prompts(f.metadata["tokenizer.chat_template.rerank"])
    llm = llama_cpp.Llama(
        model_path=str(path), embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK,
        n_ctx=256, n_threads=2, verbose=False,
    )  # fmt: skip
    try:
        n = llama_cpp.llama_model_n_cls_out(llm.model)
        labels = [llama_cpp.llama_model_cls_label(llm.model, i).decode() for i in range(n)]
        ids, out = [], []
        for p in prompts:
            toks = llm.tokenize(p.encode(), add_bos=False, special=True)
            llm._batch.reset()
            llm._ctx.kv_cache_clear()
            llm._batch.add_sequence(toks, 0, True)
            llm._ctx.decode(llm._batch)
            ptr = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)
            ids.append(toks)
            out.append(ptr[:n])
        return labels, ids, np.array(out, dtype=np.float64)
    finally:
        llm.close()


def _hf_scores(folder: Path, ids: list[list[int]]) -> np.ndarray:
    """Qwen3-Reranker's recipe in transformers: the last token's logits of no and yes,
    log-softmaxed, ``exp`` of yes's; returned as ``[p(yes), p(no)]``."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3VLForConditionalGeneration

    yes, no = _yes_no(folder)
    vl = json.loads((folder / "config.json").read_text())["model_type"] == "qwen3_vl"
    cls = Qwen3VLForConditionalGeneration if vl else AutoModelForCausalLM
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for x in ids:
            logits = model(input_ids=torch.tensor([x])).logits[0, -1]
            scores = torch.log_softmax(torch.stack([logits[no], logits[yes]]), 0).exp()
            out.append([float(scores[1]), float(scores[0])])
    return np.array(out)


@pytest.mark.parametrize(("arch", "q8"), [("rr_readme", True), (TIED, False), ("vlrr", False)])
def test_rank_scores_in_llama_cpp(work, arch, q8):
    """Ours scores as the reference's file, bit for bit (f32), and as transformers'
    Qwen3-Reranker recipe (within 1e-4 at f32; 5e-3 at q8_0, converted for the own-head one)."""
    from transformers import AutoTokenizer

    labels, ids, got = _llama_rank(work["ours"] / f"{arch}-f32.gguf")
    _, ids_ref, ref = _llama_rank(work["ref"] / f"{arch}-f32.gguf")
    assert labels == ["yes", "no"]
    assert ids == ids_ref and all(len(x) > 60 for x in ids)
    with read(work["ours"] / f"{arch}-f32.gguf") as f:
        prompts = _prompts(f.metadata["tokenizer.chat_template.rerank"])
    tok = AutoTokenizer.from_pretrained(work["models"][arch])
    assert ids == [tok(p)["input_ids"] for p in prompts]
    np.testing.assert_array_equal(got, ref)
    want = _hf_scores(work["models"][arch], ids)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    # not a constant: the scores differ by pair far more than the tolerances, and the
    # labels' order matters (p(yes) is far from p(no))
    assert np.ptp(want[:, 0]) > 0.02 and np.abs(want[:, 0] - want[:, 1]).min() > 0.05, want
    if q8:  # the own-head reranker's q8_0 file (the tied one is converted at f32 only)
        _, _, q8_scores = _llama_rank(work["ours"] / f"{arch}-q8_0.gguf")
        np.testing.assert_allclose(q8_scores, want, rtol=0, atol=5e-3)


def test_round_trip(work, tmp_path):
    """GGUF (f32) -> HF: Qwen3ForSequenceClassification with the trunk's tensors equal and
    ``score`` = the yes / no rows; its two logits at the last token give the
    probabilities of the original's recipe (1e-6) and llama.cpp's RANK pooling (1e-4)."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForSequenceClassification

    src, back = work["models"]["rr_readme"], tmp_path / "back"
    gguf_to_hf(work["ours"] / "rr_readme-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForSequenceClassification"]
    assert cfg["id2label"] == {"0": "yes", "1": "no"}
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    yes, no = _yes_no(src)
    np.testing.assert_array_equal(got.pop("score.weight"), orig.pop("lm_head.weight")[[yes, no]])
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    _, ids, llama = _llama_rank(work["ours"] / "rr_readme-f32.gguf")
    model = AutoModelForSequenceClassification.from_pretrained(back).eval()
    assert type(model).__name__ == "Qwen3ForSequenceClassification"
    with torch.no_grad():
        probs = [torch.softmax(model(input_ids=torch.tensor([x])).logits[0], 0).numpy()
                 for x in ids]  # fmt: skip
    # the original's recipe (same torch graph: equal up to float rounding), llama.cpp's RANK
    np.testing.assert_allclose(np.array(probs), _hf_scores(src, ids), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.array(probs), llama, rtol=0, atol=1e-4)


def test_missing_label_token_refused(work, tmp_path):
    """A folder the reference calls a reranker whose tokenizer lacks ``yes`` is refused by
    name before any output (the reference fails its assert)."""
    d = tmp_path / "Qwen3-Reranker-broken"
    d.mkdir()
    src = work["models"]["rr_readme"]
    shutil.copy(src / "config.json", d / "config.json")
    tj = json.loads((src / "tokenizer.json").read_text())
    del tj["model"]["vocab"]["yes"]
    (d / "tokenizer.json").write_text(json.dumps(tj))
    out = tmp_path / "out.gguf"
    with pytest.raises(E.TokenizerInconsistent, match="'yes'"):
        hf_to_gguf(d, out, "f32")
    assert not out.exists()


def test_vl_reranker_back_refused(work, tmp_path):
    """The Qwen3-VL reranker's text file alone has no HF class (as any qwen3vl text
    file): refused by name, nothing written."""
    with read(work["ours"] / "vlrr-f32.gguf") as f:
        assert f.metadata["qwen3vl.pooling_type"] == 4 and "cls.output.weight" in f
        assert "output.weight" not in f
    with pytest.raises(E.UnknownArchitecture, match="qwen3vl"):
        gguf_to_hf(work["ours"] / "vlrr-f32.gguf", tmp_path / "back", dtype="f32")
    assert not (tmp_path / "back").exists()


def test_other_qwen3_class_in_reranker_mode_refused(work, tmp_path):
    """Qwen3-ASR's text class is the reference's Qwen3 class too: a folder it would call a
    reranker is refused by name (not done), not converted as a plain model."""
    d = tmp_path / "Qwen3-Reranker-asr"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3ASRForConditionalGeneration"]})
    )
    shutil.copy(work["models"]["rr_readme"] / "tokenizer.json", d / "tokenizer.json")
    with pytest.raises(E.UnknownArchitecture, match="reranker"):
        hf_to_gguf(d, tmp_path / "out.gguf", "f32")
    assert not (tmp_path / "out.gguf").exists()
