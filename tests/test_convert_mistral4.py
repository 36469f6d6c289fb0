"""Mistral 4 VLMs (``Mistral3ForConditionalGeneration`` over a ``mistral4`` text) against
llama.cpp's converter and runtime.

The pinned reference's ``Mistral3Model`` hands a ``mistral4`` text to its
``Mistral4Model``, a ``DeepseekV2Model`` (GGUF ``mistral4``), whose ``set_vocab`` reads a
tokenizer.json through its pre-tokenizer hash (``_set_vocab_gpt2``; the Hub's Mistral 4
ships tekken's, a 131072-token table).  The tiny VLM (tests/support/vlm_models.py
``mistral4vl``) has GPT-2's BPE with ``[IMG_BREAK]`` added.  Checked:

* text and projector byte-identical to ``convert_hf_to_gguf.py`` (``--mmproj``) at f32,
  f16, bf16 and q8_0 (the projector with the one tensor ours adds for every Pixtral
  projector, ``v.token_embd.img_break``: see tests/test_convert_mmproj.py);
* mtmd loads our projector with our text and encodes an image into transformers' features;
* GGUF -> HF: the pair as the whole ``Mistral3ForConditionalGeneration`` (a ``mistral4``
  text), every tensor, the original's image features and text logits;
* the CLI writes both;
* llama.cpp runs the text without the Llama 4 attention scaling (the reference writes no
  row for it): equal to transformers with ``llama_4_scaling_beta`` 0, not past the
  original context with the config's;
* ``Mistral4ForCausalLM`` alone is refused, as by the reference;
* a SentencePiece vocabulary: the reference stops in ``set_vocab`` (the measurement that
  kept this model out before), ours refuses it by name before writing.

The text's whole harness (llama-quantize types, logits, GGUF -> HF) is
tests/test_convert_archs.py ``mistral4``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support import pyfork
from support.gguf_pair import pair_jobs
from support.llama_sdist import llama_cpp_root
from support.vlm_models import build
from test_convert_mmproj import (
    _DRIVER,
    IMG_BREAK,
    TYPES,
    _hf_image_features,
    _image,
    _mtmd_embeddings,
    _same,
)
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

# GPT-2 ids (the text harness's BPE prompt)
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]


def _reference(jobs: list[list[str]]) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])  # fmt: skip


@pytest.fixture(scope="module")
def m4(tmp_path_factory):
    """The Mistral 4 VLM folder (``hub``); the reference's text and projector at each type
    (one process) and ours, beside it."""
    root = tmp_path_factory.mktemp("mistral4")
    src = build("mistral4vl", root / "hub")
    jobs = pair_jobs(src, root, TYPES)
    r = _reference(jobs)
    assert r.returncode == 0, r.stderr[-3000:]
    return root


@pytest.mark.parametrize("t", TYPES)
def test_text_same_as_reference(m4, t):
    _same(m4 / f"ours-text-{t}.gguf", m4 / f"ref-text-{t}.gguf")


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(m4, t):
    _same(m4 / f"ours-mmproj-{t}.gguf", m4 / f"ref-mmproj-{t}.gguf", IMG_BREAK)


def test_contents(m4):
    """Guard against a vacuous pass: a mistral4 text with MLA rows and fused experts,
    the [IMG_BREAK] row in its vocabulary; a Pixtral projector."""
    from weightsmith.gguf import read

    with read(m4 / "ours-text-f16.gguf") as f:
        md, names = f.metadata, {t.name for t in f.tensors}
    assert md["general.architecture"] == "mistral4"
    assert md["mistral4.attention.kv_lora_rank"] == 32
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "gpt-2"
    assert md["tokenizer.ggml.tokens"][-1] == "[IMG_BREAK]"
    assert {"blk.1.ffn_gate_up_exps.weight", "blk.1.attn_k_b.weight"} <= names
    with read(m4 / "ours-mmproj-f16.gguf") as f:
        assert f.metadata["clip.projector_type"] == "pixtral"


def test_llama_cpp_encodes_image(m4):
    """mtmd loads our projector with our text and encodes a 64 x 64 image into
    transformers' features, the [IMG_BREAK] row after each row of 2x2-merged patches but
    the last."""
    from weightsmith.gguf import read

    img = _image(64)
    got = _mtmd_embeddings(m4 / "ours-text-f32.gguf", m4 / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(m4 / "hub", img)
    side = 64 // 8 // 2
    rows = [got[r * (side + 1) : r * (side + 1) + side] for r in range(side)]
    breaks = got[[r * (side + 1) + side for r in range(side - 1)]]
    with read(m4 / "ours-mmproj-f32.gguf") as f:
        row = np.array(f.numpy(IMG_BREAK))
    ok = ~np.isnan(breaks)  # the runtime's occasional NaNs there: test_convert_mmproj
    np.testing.assert_array_equal(breaks[ok], np.broadcast_to(row, breaks.shape)[ok])
    got = np.concatenate(rows)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def _hf_logits(folder) -> np.ndarray:
    """transformers' logits of the VLM's text (8 tokens, inside the original context of
    64 positions: the Llama 4 scaling is 1 there)."""
    import torch
    from transformers import AutoModelForImageTextToText

    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        return m.eval()(input_ids=torch.tensor([TOKENS])).logits[0].numpy()


def test_pair_back_to_hf(m4, tmp_path):
    """Text + projector -> Mistral3ForConditionalGeneration with a mistral4 text: it
    loads with every tensor, the original's image features and text logits.  The file
    has no Llama 4 scaling row, so ``llama_4_scaling_beta`` comes back 0."""
    import torch
    from transformers import AutoModelForImageTextToText

    back = tmp_path / "back"
    gguf_to_hf(m4 / "ours-text-f32.gguf", back, "f32", mmproj=m4 / "ours-mmproj-f32.gguf")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Mistral3ForConditionalGeneration"]
    assert cfg["text_config"]["model_type"] == "mistral4"
    assert cfg["text_config"]["rope_parameters"]["llama_4_scaling_beta"] == 0.0
    m, info = AutoModelForImageTextToText.from_pretrained(
        back, dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), info
    orig = AutoModelForImageTextToText.from_pretrained(m4 / "hub", dtype=torch.float32)
    want = orig.state_dict()
    for k, v in m.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert set(m.state_dict()) == set(want)
    img = _image(64)
    np.testing.assert_array_equal(_hf_image_features(back, img),
                                  _hf_image_features(m4 / "hub", img))  # fmt: skip
    np.testing.assert_array_equal(_hf_logits(back), _hf_logits(m4 / "hub"))


def test_text_runs_without_llama4_scaling(m4):
    """The reference writes no ``attention.temperature_scale`` for a mistral4 text, so
    llama.cpp runs it without the Llama 4 scaling transformers applies past the original
    context (64 positions here).  Over 80 tokens llama.cpp on our text = on the
    reference's, = transformers' with ``llama_4_scaling_beta`` 0 (measured 1.2e-6 at
    scale 2.2), and transformers with the config's 0.1 departs from the 65th token on
    (measured 0.0076 to 0.017)."""
    import llama_cpp
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    toks = [int(x) for x in np.random.default_rng(3).integers(300, 50000, 80)]

    def run(path):
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=2, logits_all=True,
                              verbose=False, type_k=0, type_v=0)  # fmt: skip
        try:
            llm.eval(toks)
            return np.array(llm.scores[: len(toks)], dtype=np.float32)
        finally:
            llm.close()

    def hf(beta=None):
        cfg = AutoConfig.from_pretrained(m4 / "hub")
        if beta is not None:
            rp = cfg.text_config.rope_parameters
            cfg.text_config.rope_parameters = {**rp, "llama_4_scaling_beta": beta}
        m = AutoModelForImageTextToText.from_pretrained(m4 / "hub", config=cfg,
                                                        dtype=torch.float32)  # fmt: skip
        with torch.no_grad():
            return m.eval()(input_ids=torch.tensor([toks])).logits[0].numpy()

    ours = run(m4 / "ours-text-f32.gguf")
    np.testing.assert_array_equal(ours, run(m4 / "ref-text-f32.gguf"))
    off = hf(0.0)
    bound = 2e-3 * max(float(np.abs(off).max()), 1.0)
    assert np.abs(ours - off).max() <= bound, np.abs(ours - off).max()
    gap = np.abs(ours - hf()).max(1)
    assert gap[:64].max() <= bound and gap[64:].min() > bound, gap


def test_text_only_class_refused(m4, tmp_path):
    """``Mistral4ForCausalLM`` (the text alone, as GGUF -> HF writes it) is not a class
    the reference converts ("not supported"); ours refuses it by name, nothing written."""
    back = tmp_path / "back"
    gguf_to_hf(m4 / "ours-text-f32.gguf", back, dtype="f32")
    assert json.loads((back / "config.json").read_text())["architectures"] == [
        "Mistral4ForCausalLM"
    ]
    r = _reference([[str(back), "--outfile", str(tmp_path / "ref.gguf"), "--outtype", "f16"]])
    assert r.returncode != 0
    assert "Model Mistral4ForCausalLM is not supported" in r.stderr, r.stderr[-2000:]
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="Mistral4ForCausalLM"):
        hf_to_gguf(back, out / "t.gguf", "f16")
    assert not out.exists()


def test_cli_writes_both(m4, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(m4 / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (m4 / "ours-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (m4 / "ours-text-q8_0.gguf").read_bytes()


def test_sentencepiece_vocab_refused(tmp_path):
    """With a SentencePiece tokenizer.model (no tokenizer.json) the reference's DeepSeek-V2
    ``set_vocab`` stops: ``_set_vocab_gpt2`` fails, and its fallback (AutoTokenizer, then
    the pre-tokenizer hash, for Kimi-K2's tiktoken) finds no known hash
    (``NotImplementedError``), so there is no file to match; ours refuses it by name
    (``TokenizerFilesMissing``) before writing anything."""
    src = build("mistral4vl", tmp_path / "m4", vocab="spm")
    assert (src / "tokenizer.model").is_file() and not (src / "tokenizer.json").exists()
    r = _reference([[str(src), "--outfile", str(tmp_path / "ref.gguf"), "--outtype", "f16"]])
    assert r.returncode != 0
    tail = r.stderr[-2000:]
    assert "conversion/deepseek.py" in tail and "in set_vocab" in tail, tail
    assert "NotImplementedError: BPE pre-tokenizer was not recognized" in tail, tail
    out = tmp_path / "out"
    with pytest.raises(E.TokenizerFilesMissing, match=r"tokenizer\.json"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
