"""Mistral's original layout beyond the plain bf16 / tekken folder, against llama.cpp's
``convert_hf_to_gguf.py --mistral-format``.

FP8 releases (params.json ``quantization: {qformat_weight: fp8_e4m3}``, ``X.weight`` in
float8 beside a per-tensor ``X.qscale_weight`` and an unused ``X.qscale_act``):

* dense (the reference's ``MistralModel``, which maps the block onto HF's fp8 method):
  ours byte-identical at f32 / bf16 / q8_0; llama.cpp's logits on ours = on the
  reference's file, and near the unquantized model's (the scales are applied);
* with experts (``MistralMoeModel``): the reference renames the scales to
  ``weight_scale`` / ``input_scale`` but never dequantizes, and stops ("Can not map
  tensor ... input_scale"): a measured deliberate difference.  Ours dequantizes as the
  dense class does and writes, byte for byte, the file the reference writes from the
  same checkpoint dequantized to float32 (by torch here); llama.cpp on it gives
  transformers' logits of the Mistral 4 model holding the dequantized weights.

A dense ``llama_4_scaling`` (Ministral 3 / Devstral 2, FP8 or not): ``mistral3``, byte-
identical, and llama.cpp's logits = transformers' ``Ministral3ForCausalLM``'s; GGUF -> HF
gives that model back.

SentencePiece folders (``tokenizer.model.v1`` / ``.v3`` / ``.v7``, no tekken.json: the
reference's ``MistralVocab`` spm path): byte-identical, and llama.cpp tokenizes as
mistral_common.

One reference launch converts every file.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.mistral_fixtures import (
    fp8_quantize,
    make_ministral3_checkpoint,
    make_mistral_checkpoint,
)
from support.mistral_moe import (
    load_mistral_weights,
    logits_with_and_without_l4_scaling,
    make_mistral_moe_checkpoint,
)
from test_convert_archs import _llama_logits_f32_kv, _same_file
from test_convert_ministral3 import _llama_logits
from weightsmith import errors as E
from weightsmith.convert import mistral_to_gguf

TYPES = ["f32", "bf16", "q8_0"]
M3_FP8_TYPES = ["f32", "q8_0"]
SPM = ["v1", "v3", "v7", "model"]  # "model": a bare tokenizer.model (v1 to mistral_common)
TOKENS = [1, 5, 9, 33, 100, 7, 200, 42, 300, 64, 17, 250]
_DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys, traceback
    script, jobs = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(script))
    for src, out, outtype in jobs:
        sys.argv = [script, src, "--mistral-format", "--outfile", out, "--outtype", outtype]
        try:
            runpy.run_path(script, run_name="__main__")
        except BaseException:
            traceback.print_exc()
            print("JOB FAILED", out, file=sys.stderr)
    """
)


class _Work:
    def __init__(self, root: Path) -> None:
        import torch

        name = "Ministral-FP8-Tiny"
        self.plain = make_mistral_checkpoint(root / "plain" / name)
        self.dense = shutil.copytree(self.plain, root / "fp8" / name)
        fp8_quantize(self.dense)
        self.moe, self.model = make_mistral_moe_checkpoint(root / "fp8" / "Mistral-MoE-FP8")
        self.moe_deq = root / "deq" / self.moe.name
        deq = fp8_quantize(self.moe, self.moe_deq)
        load_mistral_weights(self.model, {k: v.float() for k, v in deq.items()})
        with torch.no_grad():
            self.hf_logits = self.model(torch.tensor([TOKENS])).logits[0].numpy()
        self.m3, self.m3_model = make_ministral3_checkpoint(root / "m3" / "Ministral-3-Tiny")
        self.m3fp8 = shutil.copytree(self.m3, root / "fp8" / self.m3.name)
        fp8_quantize(self.m3fp8)
        self.spm = {v: make_mistral_checkpoint(root / "spm" / v / "Mistral-SPM-Tiny",
                                               version=v, spm=True) for v in SPM}  # fmt: skip
        self.ref, self.ours = root / "ref", root / "ours"
        self.ref.mkdir()
        self.ours.mkdir()
        jobs = [(str(self.dense), str(self.ref / f"dense-{t}.gguf"), t) for t in TYPES]
        jobs += [(str(self.moe_deq), str(self.ref / f"moe-{t}.gguf"), t) for t in TYPES]
        jobs += [(str(self.m3), str(self.ref / f"m3-{t}.gguf"), t) for t in TYPES]
        jobs += [(str(self.m3fp8), str(self.ref / f"m3fp8-{t}.gguf"), t) for t in M3_FP8_TYPES]
        jobs += [(str(f), str(self.ref / f"spm-{v}.gguf"), "f16") for v, f in self.spm.items()]
        jobs.append((str(self.moe), str(self.ref / "moe-fp8.gguf"), "f32"))
        from support.llama_sdist import llama_cpp_root

        script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
        r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)], timeout=900)
        self.stderr = r.stderr
        assert all(Path(out).is_file() for _, out, _ in jobs[:-1]), r.stderr[-3000:]
        for t in TYPES:
            mistral_to_gguf(self.dense, self.ours / f"dense-{t}.gguf", t)
            mistral_to_gguf(self.moe, self.ours / f"moe-{t}.gguf", t)
            mistral_to_gguf(self.m3, self.ours / f"m3-{t}.gguf", t)
        for t in M3_FP8_TYPES:
            mistral_to_gguf(self.m3fp8, self.ours / f"m3fp8-{t}.gguf", t)
        mistral_to_gguf(self.plain, self.ours / "plain-f32.gguf", "f32")
        for v, f in self.spm.items():
            mistral_to_gguf(f, self.ours / f"spm-{v}.gguf", "f16")

    def files(self, name: str) -> tuple[Path, Path]:
        return self.ours / f"{name}.gguf", self.ref / f"{name}.gguf"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> _Work:
    return _Work(tmp_path_factory.mktemp("mistral_fp8"))


@pytest.mark.parametrize("t", TYPES)
def test_dense_same_as_reference(work, t):
    _same_file(*work.files(f"dense-{t}"))


@pytest.mark.parametrize("t", TYPES)
def test_moe_same_as_reference_of_the_dequantized_checkpoint(work, t):
    _same_file(*work.files(f"moe-{t}"))


def test_it_is_an_fp8_checkpoint(work):
    """Guard against a vacuous pass: the sources are float8 with scales, the outputs have
    neither the scales nor float8 values (a weight is its float8 times its scale)."""
    from safetensors import safe_open

    from weightsmith import gguf

    with safe_open(work.moe / "consolidated.safetensors", "pt") as f:
        names = set(f.keys())
        w = f.get_tensor("layers.1.experts.2.w3.weight")
        s = f.get_tensor("layers.1.experts.2.w3.qscale_weight")
    assert str(w.dtype) == "torch.float8_e4m3fn" and s.shape == ()
    assert sum(n.endswith(".qscale_act") for n in names) > 20
    with gguf.read(work.files("moe-f32")[0]) as r:
        assert not any("scale" in t.name for t in r.tensors)
        up = r.numpy("blk.1.ffn_up_exps.weight")[2]
    assert np.array_equal(up, (w.float() * s.float()).numpy())
    assert not np.array_equal(up, w.float().numpy())


def test_reference_moe_fp8_fails(work):
    """The deliberate difference, measured: the reference stops on the FP8 MoE folder."""
    assert not work.files("moe-fp8")[1].exists()
    tail = work.stderr[-1500:]
    assert "Can not map tensor" in tail and "input_scale" in tail, tail


def test_llama_cpp_logits(work):
    """Dense: llama.cpp on ours = on the reference's file, and within FP8's rounding of
    the unquantized checkpoint's (raw float8 values, unscaled, are far off).  MoE:
    llama.cpp on ours = on the reference's file of the dequantized checkpoint, and
    transformers' Mistral 4 holding the dequantized weights (3.3e-6 at scale 3.1)."""
    ours = _llama_logits_f32_kv(work.files("dense-f32")[0], TOKENS)
    ref = _llama_logits_f32_kv(work.files("dense-f32")[1], TOKENS)
    plain = _llama_logits_f32_kv(work.ours / "plain-f32.gguf", TOKENS)
    assert np.isfinite(ours).all() and np.array_equal(ours, ref)
    scale = max(float(np.abs(plain).max()), 1e-3)
    assert 0 < np.abs(ours - plain).max() <= 0.1 * scale  # 0.058 x measured
    moe = _llama_logits_f32_kv(work.files("moe-f32")[0], TOKENS)
    np.testing.assert_array_equal(moe, _llama_logits_f32_kv(work.files("moe-f32")[1], TOKENS))
    hf = work.hf_logits
    assert np.abs(moe - hf).max() <= 1e-4 * max(float(np.abs(hf).max()), 1.0)


# --------------------------------------------------------------------------- mistral3


@pytest.mark.parametrize("name", [f"m3-{t}" for t in TYPES] + [f"m3fp8-{t}" for t in M3_FP8_TYPES])
def test_llama_4_scaling_same_as_reference(work, name):
    """A dense params.json with ``llama_4_scaling`` (Ministral 3 / Devstral 2, which also
    ship FP8): the reference's MistralModel writes ``mistral3``; so do we, byte for byte."""
    _same_file(*work.files(name))


def test_llama_4_scaling_rows(work):
    from weightsmith import gguf

    with gguf.read(work.files("m3fp8-q8_0")[0]) as r:
        md = r.metadata
        types = {t.name: t.ggml_type.name for t in r.tensors}
    assert md["general.architecture"] == "mistral3"
    assert md["mistral3.attention.temperature_scale"] == pytest.approx(0.1)
    assert md["mistral3.rope.scaling.type"] == "yarn"
    assert md["mistral3.rope.scaling.original_context_length"] == 4
    assert md["tokenizer.ggml.pre"] == "tekken"
    assert types["blk.1.attn_q.weight"] == "Q8_0"


def test_llama_4_scaling_llama_cpp_vs_transformers(work):
    """llama.cpp on ours = on the reference's file, and transformers' Ministral3ForCausalLM
    (the model the folder holds, Q/K rows un-interleaved by llama.cpp's own layout) within
    1e-4 of scale (f32 KV cache, the file's YaRN betas); with the scaling off in
    transformers they are far apart from the 5th token on (the row is read and run)."""
    ours = _llama_logits(work.files("m3-f32")[0], TOKENS)
    np.testing.assert_array_equal(ours, _llama_logits(work.files("m3-f32")[1], TOKENS))
    hf, unscaled = logits_with_and_without_l4_scaling(work.m3_model, TOKENS)
    scale = max(float(np.abs(hf).max()), 1.0)
    assert np.abs(ours - hf).max() <= 1e-4 * scale, np.abs(ours - hf).max()
    off = np.abs(ours - unscaled).max(1)
    assert off[:4].max() <= 1e-4 * scale and off[4:].min() > 1e-2 * scale, off


def test_llama_4_scaling_gguf_to_hf(work, tmp_path):
    """GGUF -> HF of our mistral3 file (the scaling row makes it the Ministral 3 variant):
    transformers' Ministral3ForCausalLM, every tensor the folder's model's bit for bit (Q/K
    rows back in HF's order), the same rope parameters and logits."""
    import torch
    from transformers import Ministral3ForCausalLM

    from weightsmith.convert import gguf_to_hf

    gguf_to_hf(work.files("m3-f32")[0], tmp_path / "back", "f32", tokenizer=False)
    back = Ministral3ForCausalLM.from_pretrained(tmp_path / "back", dtype=torch.float32).eval()
    assert back.config.rope_parameters == work.m3_model.config.rope_parameters
    want, got = work.m3_model.state_dict(), back.state_dict()
    assert set(got) == set(want)
    for k, v in want.items():
        assert torch.equal(got[k], v), k
    with torch.no_grad():
        t = torch.tensor([TOKENS])
        assert torch.equal(back(t).logits, work.m3_model(t).logits)


# --------------------------------------------------------------------------- SentencePiece


@pytest.mark.parametrize("v", SPM)
def test_spm_same_as_reference(work, v):
    """The reference's MistralVocab spm rows (pieces, scores, types, ids, pad = eos) and
    its community template name by version (mistral-v1 / -v3 / -v7)."""
    from weightsmith import gguf

    ours, ref = work.files(f"spm-{v}")
    _same_file(ours, ref)
    with gguf.read(ours) as r:
        md = r.metadata
    assert md["tokenizer.ggml.model"] == "llama" and "tokenizer.ggml.pre" not in md
    want = {"v1": "mistral-v1", "model": "mistral-v1", "v3": "mistral-v3", "v7": "mistral-v7"}
    assert md["tokenizer.chat_template"] == want[v]
    assert md["tokenizer.ggml.padding_token_id"] == md["tokenizer.ggml.eos_token_id"] == 2
    types = md["tokenizer.ggml.token_type"]
    assert (types[3] == 3) == (v in ("v3", "v7"))  # [INST]: a control token from v3 on


def test_spm_tokenizes_as_mistral_common(work):
    import llama_cpp
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

    from support.meta_fixtures import sample_texts

    tok = SentencePieceTokenizer(work.spm["v3"] / "tokenizer.model.v3")
    llm = llama_cpp.Llama(model_path=str(work.files("spm-v3")[0]), vocab_only=True,
                          verbose=False)  # fmt: skip
    try:
        ids = {t: llm.tokenize(t.encode(), add_bos=True, special=False) for t in sample_texts()}
    finally:
        llm.close()
    assert ids == {t: tok.encode(t, bos=True, eos=False) for t in sample_texts()}


# --------------------------------------------------------------------------- bad input


def _edit(src: Path, tmp_path: Path, params=None, tensors=None) -> Path:
    from safetensors.torch import load_file, save_file

    d = shutil.copytree(src, tmp_path / "m")
    if params is not None:
        p = json.loads((d / "params.json").read_text())
        params(p)
        (d / "params.json").write_text(json.dumps(p))
    if tensors is not None:
        sd = load_file(str(d / "consolidated.safetensors"))
        tensors(sd)
        save_file(sd, str(d / "consolidated.safetensors"))
    return d


def _reshape(sd: dict) -> None:
    import torch

    sd["layers.0.attention.wk.qscale_weight"] = torch.ones(3)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [({"params": lambda p: p.update(quantization={"qformat_weight": "fp4_e2m1"})},
      E.UnknownArchitecture, "qformat_weight"),
     ({"params": lambda p: p.update(quantization="fp8")}, E.UnknownArchitecture,
      "qformat_weight"),
     ({"tensors": lambda sd: sd.pop("layers.1.feed_forward.w2.weight")}, E.UnmappedTensor,
      r"layers\.1\.feed_forward\.w2\.qscale_weight"),
     ({"tensors": _reshape}, E.TensorShapeMismatch, r"attention\.wk\.qscale_weight"),
     ({"params": lambda p: p.update(llama_4_scaling={"original_max_position_embeddings": 4})},
      E.InvalidModelConfig, r"llama_4_scaling\.beta")],
)  # fmt: skip
def test_bad_fp8_refused_before_output(work, tmp_path, kw, error, match):
    src = _edit(work.dense, tmp_path, **kw)
    with pytest.raises(error, match=match):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_bad_spm_refused_before_output(work, tmp_path):
    """A SentencePiece file that is not one: TokenizerInconsistent; none at all (and no
    tekken.json): TokenizerFilesMissing; nothing written either way."""
    src = shutil.copytree(work.spm["v3"], tmp_path / "m")
    (src / "tokenizer.model.v3").write_bytes(b"not a model")
    with pytest.raises(E.TokenizerInconsistent, match=r"tokenizer\.model\.v3"):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    (src / "tokenizer.model.v3").unlink()
    with pytest.raises(E.TokenizerFilesMissing, match=r"tekken\.json"):
        mistral_to_gguf(src, tmp_path / "out.gguf", "f16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
