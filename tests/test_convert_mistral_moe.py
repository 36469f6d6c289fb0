"""Mistral's original layout with experts, and a real tekken table, against llama.cpp's
own ``convert_hf_to_gguf.py --mistral-format``.

* A tiny seeded Mistral MoE folder (support/mistral_moe.py: a transformers 5.24
  ``Mistral4ForCausalLM`` renamed to Mistral's names, params.json with ``moe``, ``yarn``
  and ``llama_4_scaling``): the reference's ``MistralMoeModel`` writes ``deepseek2``; ours
  is byte-identical at f32 / f16 / bf16 / q8_0, at q4_k_m / iq4_xs identical to the
  reference's f32 + ``llama_model_quantize``; llama.cpp gives ours the logits it gives
  the reference's file, bit for bit, and transformers' (the model the folder holds).
* A dense Mistral folder whose tekken.json is mistral_common's real 131k-token table
  (linked from the installed package, never copied): the whole file byte-identical.

One reference launch converts every file of both models.
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
from support.mistral_moe import (
    logits_with_and_without_l4_scaling,
    make_mistral_moe_checkpoint,
    make_mistral_real_tekken,
)
from test_convert_archs import _llama_logits_f32_kv, _same_file
from test_convert_hf_to_gguf import _llama_quantize
from weightsmith import errors as E
from weightsmith.convert import mistral_to_gguf

REF_TYPES = ["f32", "f16", "bf16", "q8_0"]
QUANT_TYPES = ["q4_k_m", "iq4_xs"]
# the reference run on each folder with --mistral-format, all jobs in one process
_DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys
    script, jobs = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(script))
    for src, out, outtype in jobs:
        sys.argv = [script, src, "--mistral-format", "--outfile", out, "--outtype", outtype]
        runpy.run_path(script, run_name="__main__")
    """
)


def _reference(jobs: list[tuple[str, str, str]]):
    from support.llama_sdist import llama_cpp_root

    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)], timeout=900)


class _Work:
    def __init__(self, root: Path) -> None:
        self.moe, self.model = make_mistral_moe_checkpoint(root / "Mistral-MoE-Tiny")
        self.tek = make_mistral_real_tekken(root / "Mistral-Tekken-Tiny")
        self.ref, self.ours = root / "ref", root / "ours"
        self.ref.mkdir()
        self.ours.mkdir()
        jobs = [(str(self.moe), str(self.ref / f"moe-{t}.gguf"), t) for t in REF_TYPES]
        jobs.append((str(self.tek), str(self.ref / "tekken-f16.gguf"), "f16"))
        # last: the MoE folder without its config.json, which the reference cannot convert
        self.bare = shutil.copytree(self.moe, root / "bare" / self.moe.name)
        (self.bare / "config.json").unlink()
        jobs.append((str(self.bare), str(self.ref / "bare-f16.gguf"), "f16"))
        r = _reference(jobs)
        self.bare_stderr = r.stderr
        assert all(Path(out).is_file() for _, out, _ in jobs[:-1]), r.stderr[-3000:]
        assert r.returncode != 0 and not (self.ref / "bare-f16.gguf").exists()
        for t in QUANT_TYPES:
            _llama_quantize(self.ref / "moe-f32.gguf", self.ref / f"moe-{t}.gguf", t)
        for t in REF_TYPES + QUANT_TYPES:
            mistral_to_gguf(self.moe, self.ours / f"moe-{t}.gguf", t)
        mistral_to_gguf(self.tek, self.ours / "tekken-f16.gguf", "f16")

    def files(self, name: str) -> tuple[Path, Path]:
        return self.ours / f"{name}.gguf", self.ref / f"{name}.gguf"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> _Work:
    return _Work(tmp_path_factory.mktemp("mistral_moe"))


@pytest.mark.parametrize("t", REF_TYPES + QUANT_TYPES)
def test_same_as_reference(work, t):
    """f32 / f16 / bf16 / q8_0: the reference's files; q4_k_m / iq4_xs: its f32 file
    through llama_model_quantize."""
    _same_file(*work.files(f"moe-{t}"))


def test_it_is_the_moe_model(work):
    """Guard against a vacuous pass: deepseek2 with MLA, stacked (quantized) experts, the
    Mistral rows (YaRN, Llama 4 temperature) and tekken's vocabulary."""
    from weightsmith import gguf

    with gguf.read(work.files("moe-q4_k_m")[0]) as r:
        md = r.metadata
        types = {t.name: (t.ggml_type.name, tuple(t.shape)) for t in r.tensors}
    assert md["general.architecture"] == "deepseek2"
    assert md["deepseek2.expert_count"] == 4 and md["deepseek2.leading_dense_block_count"] == 1
    assert md["deepseek2.attention.temperature_scale"] == pytest.approx(0.1)
    assert md["deepseek2.attention.temperature_length"] == 4
    assert md["deepseek2.rope.scaling.yarn_log_multiplier"] == pytest.approx(0.1)
    assert md["tokenizer.ggml.pre"] == "tekken"
    gate, shape = types["blk.1.ffn_gate_exps.weight"]
    assert shape[0] == 4 and gate not in ("F32", "F16")
    assert "blk.1.attn_k_b.weight" in types and "blk.0.ffn_gate.weight" in types


def test_llama_cpp_logits(work):
    """llama.cpp on ours = on the reference's file, bit for bit; and = transformers' logits
    of the model the folder holds (3.0e-6 at scale 3.2 with an f32 KV cache; MLA's 48-wide
    heads lose ~1.7e-3 to the default f16 one, for both files), YaRN and the Llama 4
    attention scaling included: without the scaling transformers is 0.096 away."""
    tokens = [1, 5, 9, 33, 100, 7, 200, 42, 300, 64, 17, 250]
    ours = _llama_logits_f32_kv(work.files("moe-f32")[0], tokens)
    ref = _llama_logits_f32_kv(work.files("moe-f32")[1], tokens)
    np.testing.assert_array_equal(ours, ref)
    hf, unscaled = logits_with_and_without_l4_scaling(work.model, tokens)
    scale = max(float(np.abs(hf).max()), 1.0)
    assert np.abs(ours - hf).max() <= 1e-4 * scale
    assert np.abs(ours - unscaled).max() > 1e-2 * scale  # the scaling is exercised


def test_real_tekken_table(work):
    """mistral_common's tekken_240911.json (v3, 131072 ids of 150000 ranks, 1000 special):
    ours byte-identical to the reference's file, tokenizer rows included."""
    from weightsmith import gguf

    ours, ref = work.files("tekken-f16")
    assert (work.tek / "tekken.json").is_symlink()
    _same_file(ours, ref)
    with gguf.read(ours) as r:
        assert r.metadata["tokenizer.ggml.pre"] == "tekken"
        assert r.metadata["tokenizer.ggml.model"] == "gpt2"
        assert len(r.metadata["tokenizer.ggml.tokens"]) == 131072
        assert len(r.metadata["tokenizer.ggml.merges"]) > 100_000


def test_real_tekken_tokenizes_as_mistral_common(work):
    """llama.cpp's tekken pre-tokenizer over our rows and merges of the real table gives
    mistral_common's token ids (ids past 129000 reached)."""
    import llama_cpp
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    from support.meta_fixtures import sample_texts
    from support.mistral_moe import real_tekken

    tek = Tekkenizer.from_file(real_tekken())
    texts = [*sample_texts(), "def f(x):\n    return x**2  # Ça va? 12345 日本語 🙂\n\n"]
    llm = llama_cpp.Llama(model_path=str(work.files("tekken-f16")[0]), vocab_only=True,
                          verbose=False)  # fmt: skip
    try:
        ids = {t: llm.tokenize(t.encode(), add_bos=True, special=False) for t in texts}
    finally:
        llm.close()
    want = {t: tek.encode(t, bos=True, eos=False) for t in texts}
    assert ids == want
    assert max(max(v) for v in want.values()) > 129_000


def test_cli_mistral_format(work, tmp_path):
    """``--mistral-format`` converts a folder that also holds a config.json (the Hub's do;
    without the flag the HF route reads config.json)."""
    from support.cli_helpers import run

    out = tmp_path / "cli.gguf"
    p = run("convert", str(work.moe), str(out), "--type", "q8_0", "--mistral-format")
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == work.files("moe-q8_0")[0].read_bytes()


def test_cli_mistral_format_needs_a_mistral_folder(work, tmp_path):
    """``--mistral-format`` on an HF folder (config.json, no params.json) or to a folder
    output: a named usage error, nothing written."""
    from support.cli_helpers import assert_one_line_error, run

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    p = run("convert", str(hf), str(tmp_path / "o.gguf"), "--mistral-format")
    assert_one_line_error(p, "UsageError")
    p = run("convert", str(work.moe), str(tmp_path / "o"), "--mistral-format")
    assert_one_line_error(p, "UsageError")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["hf"]


def test_without_config_json(work, tmp_path):
    """The reference's DeepseekV2Model opens config.json (its OCR check) and stops without
    one; ours converts such a folder to the file the reference writes with it."""
    tail = work.bare_stderr[-600:]
    assert "FileNotFoundError" in tail and "config.json" in tail, tail
    mistral_to_gguf(work.bare, tmp_path / "out.gguf", "q8_0")
    assert (tmp_path / "out.gguf").read_bytes() == work.files("moe-q8_0")[1].read_bytes()


# --------------------------------------------------------------------------- bad input


def _edit(work, tmp_path, fn) -> Path:
    src = shutil.copytree(work.moe, tmp_path / "m")
    params = json.loads((src / "params.json").read_text())
    fn(params)
    (src / "params.json").write_text(json.dumps(params))
    return src


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [(lambda p: p.pop("yarn"), E.InvalidModelConfig, "yarn"),
     (lambda p: p.pop("qk_nope_head_dim"), E.InvalidModelConfig, "qk_nope_head_dim"),
     (lambda p: p["moe"].update(num_experts=8), E.ParamsShapeMismatch, r"layers\.1\.gate"),
     (lambda p: p.update(v_head_dim=16), E.ParamsShapeMismatch, "wkv_b"),
     (lambda p: p.update(n_layers=1), E.ParamsShapeMismatch, "n_layers"),
     (lambda p: p.update(quantization={"qformat_weight": "fp4_e2m1"}), E.UnknownArchitecture,
      "quantization")],
)  # fmt: skip
def test_bad_params_refused_before_output(work, tmp_path, edit, error, match):
    src = _edit(work, tmp_path, edit)
    dst = tmp_path / "out.gguf"
    with pytest.raises(error, match=match):
        mistral_to_gguf(src, dst, "f16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_gguf_to_hf_is_mistral4(work, tmp_path):
    """GGUF -> HF of our file: transformers' Mistral4ForCausalLM (the same model: the Llama
    4 beta from the temperature row, the experts fused back into ``gate_up_proj``), every
    tensor the original's bit for bit, the same logits."""
    import torch
    from transformers import Mistral4ForCausalLM

    from weightsmith.convert import gguf_to_hf

    gguf_to_hf(work.files("moe-f32")[0], tmp_path / "back", "f32", tokenizer=False)
    back = Mistral4ForCausalLM.from_pretrained(tmp_path / "back", dtype=torch.float32).eval()
    assert back.config.rope_parameters["llama_4_scaling_beta"] == pytest.approx(0.1)
    want, got = work.model.state_dict(), back.state_dict()
    assert set(got) == set(want)
    for k, v in want.items():
        assert torch.equal(got[k], v), k
    tokens = torch.tensor([[1, 5, 9, 33, 100, 7, 200, 42, 300, 64, 17, 250]])
    with torch.no_grad():
        assert torch.equal(back(tokens).logits, work.model(tokens).logits)


def test_gguf_to_hf_tekken_vocabulary_refused(work, tmp_path):
    """With the tokenizer: tekken's pre-tokenizer has no HF form here (as for the dense
    Mistral files): a named error before anything is written."""
    from weightsmith.convert import gguf_to_hf

    with pytest.raises(E.UnknownBPEPreTokenizer, match="tekken"):
        gguf_to_hf(work.files("moe-f32")[0], tmp_path / "back")
    assert list(tmp_path.iterdir()) == []
