"""DeepSeek-V4's MTP block (``mtp.0.*``, DeepSeek's layout: tests/support/dsv4_models.py
``with_mtp_block``) under the reference's ``--no-mtp`` and ``--mtp``
(conversion/deepseek.py ``DeepseekV4Model``: the block is left out by default and with
``--no-mtp``; ``--mtp`` writes it alone as layer ``num_hidden_layers``, ``e_proj`` /
``h_proj`` concatenated into ``nextn.eh_proj``, its ``hc_head_*`` as the root's).
Checked:

* ``mtp="only"`` byte-identical to the reference's ``--mtp`` at f32 and q8_0 (DeepSeek-V4
  is typed by source dtype: one file), ``mtp="drop"`` to its ``--no-mtp`` and to our
  default;
* guard against a vacuous pass: the draft holds the block (its MXFP4 experts, float8
  ``wq_b`` as Q8_0, ``eh_proj`` = Q8_0 of ``[e_proj | h_proj]``), the embedding, final
  norm and head, and the block's own ``hc_head_*`` (not the trunk's), with
  ``block_count`` 4, ``nextn_predict_layers`` 1 and the clamp arrays at 4;
* llama.cpp (0.3.36) loads the draft as its MTP draft with one block, then dies
  reserving the MTP graph (SIGFPE, measured: the reference's bytes are the same file);
* the CLI's ``--mtp``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from support.dsv4_models import deepseek4, with_mtp_block
from test_convert_mmproj import _same
from test_convert_mtp_flags import _DRAFT, _contents
from test_convert_step35 import _reference
from weightsmith.convert import hf_to_gguf
from weightsmith.gguf import read

TYPES = ["f32", "q8_0"]


@pytest.fixture(scope="module")
def dsv4(tmp_path_factory):
    """The model with its block; the reference's files (``ref-MODE-T``) and ours."""
    root = tmp_path_factory.mktemp("dsv4_mtp")
    src, _ = deepseek4(root / "m")
    with_mtp_block(src)
    for mode, flag, types in (("only", "--mtp", TYPES), ("drop", "--no-mtp", ["f32"])):
        jobs = [[str(src), "--outfile", str(root / f"ref-{mode}-{t}.gguf"), "--outtype", t, flag]
                for t in types]  # fmt: skip
        r = _reference(jobs, None)
        assert r.stdout.splitlines()[-len(jobs) :] == ["ok"] * len(jobs), r.stderr[-3000:]
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-only-{t}.gguf", t, mtp="only")
    hf_to_gguf(src, root / "ours-drop-f32.gguf", "f32", mtp="drop")
    hf_to_gguf(src, root / "ours-full-f32.gguf", "f32")
    return root, src


@pytest.mark.parametrize("t", TYPES)
def test_draft_same_as_reference(dsv4, t):
    root, _ = dsv4
    _same(root / f"ours-only-{t}.gguf", root / f"ref-only-{t}.gguf")


def test_dropped_same_as_reference_and_default(dsv4):
    root, _ = dsv4
    _same(root / "ours-drop-f32.gguf", root / "ref-drop-f32.gguf")
    assert (root / "ours-drop-f32.gguf").read_bytes() == (root / "ours-full-f32.gguf").read_bytes()


def test_draft_contents(dsv4):
    from safetensors import safe_open

    from weightsmith.quant import dequantize

    root, src = dsv4
    md, full = _contents(root / "ours-full-f32.gguf")
    assert md["deepseek4.block_count"] == 3 and "deepseek4.nextn_predict_layers" not in md
    assert not any(x.startswith("blk.3.") for x in full)
    md_o, only = _contents(root / "ours-only-f32.gguf")
    assert md_o["deepseek4.block_count"] == 4 and md_o["deepseek4.nextn_predict_layers"] == 1
    assert len(md_o["deepseek4.swiglu_clamp_exp"]) == 4
    roots = {"token_embd.weight", "output_norm.weight", "output.weight"}
    roots |= {f"output_hc_{k}.weight" for k in ("fn", "base", "scale")}
    assert {x for x in only if not x.startswith("blk.3.")} == roots
    for k in ("ffn_gate_exps", "nextn.eh_proj", "nextn.enorm", "nextn.shared_head_norm",
              "attn_q_b", "hc_attn_fn", "exp_probs_b"):  # fmt: skip
        assert any(x.startswith(f"blk.3.{k}.") for x in only), k
    with safe_open(src / "model.safetensors", "pt") as f:
        e, h = (f.get_tensor(f"mtp.0.{k}_proj.weight").float().numpy() for k in "eh")
        hc_mtp, hc_trunk = f.get_tensor("mtp.0.hc_head_fn").numpy(), f.get_tensor("hc_head_fn")
    with read(root / "ours-only-f32.gguf") as g:
        t = {x.name: x for x in g.tensors}
        eh = t["blk.3.nextn.eh_proj.weight"]
        assert eh.ggml_type.name == "Q8_0" and t["blk.3.attn_q_b.weight"].ggml_type.name == "Q8_0"
        assert t["blk.3.ffn_gate_exps.weight"].ggml_type.name == "MXFP4"
        got = dequantize(g.tensor_bytes(eh.name), eh.ggml_type, (64, 128))
        want = np.concatenate([e, h], axis=1)
        assert np.abs(got - want).max() <= np.abs(want).max() / 127 + 1e-6
        hc = np.asarray(g.numpy("output_hc_fn.weight")).reshape(hc_mtp.shape)
        np.testing.assert_array_equal(hc, hc_mtp)
        assert not np.array_equal(hc, hc_trunk.numpy())


def test_draft_in_llama_cpp(dsv4):
    """llama.cpp loads the draft as its MTP draft (``load_mtp``) with its one block; making
    the MTP context then dies in the pinned build (SIGFPE reserving the graph; the
    reference's file is the same bytes): pinned, so a fixed llama.cpp shows up here."""
    root, _ = dsv4
    r = subprocess.run([sys.executable, "-c", _DRAFT, str(root / "ours-only-f32.gguf")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.stdout.split()[:2] == ["nextn", "1"], r.stderr[-2000:]
    assert r.returncode == -8, r.stderr[-2000:]


def test_cli(dsv4, tmp_path):
    from weightsmith.cli._main import main

    root, src = dsv4
    dst = tmp_path / "draft.gguf"
    assert main(["convert", str(src), str(dst), "--type", "q8_0", "--quiet", "--mtp"]) == 0
    assert dst.read_bytes() == (root / "ours-only-q8_0.gguf").read_bytes()


def _variant(src, dst, drop=(), **cfg):
    """A copy of ``src`` without the tensors ``drop`` and with config fields ``cfg``."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    sd = load_file(dst / "model.safetensors")
    save_file({k: v for k, v in sd.items() if k not in drop}, dst / "model.safetensors")
    c = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**c, **cfg}))
    return dst


@pytest.mark.parametrize(
    ("drop", "cfg", "error", "match"),
    [
        # the reference: KeyError (no e/h pair)
        (("mtp.0.h_proj.weight",), {}, "TensorShapeMismatch", "e_proj without h_proj"),
        # the reference: ValueError (Unexpected DeepSeek-V4 MTP layer 0)
        ((), {"num_nextn_predict_layers": 0}, "UnmappedTensor", r"mtp\.0\."),
    ],
)
def test_draft_refused(dsv4, tmp_path, drop, cfg, error, match):
    """A block without ``h_proj``, or one the config does not count: refused by name
    before any output, where the reference stops too (measured here)."""
    from weightsmith import errors as E

    _, src = dsv4
    bad = _variant(src, tmp_path / "bad", drop, **cfg)
    r = _reference([[str(bad), "--outfile", str(tmp_path / "ref.gguf"), "--outtype", "f32",
                     "--mtp"]], None)  # fmt: skip
    assert r.stdout.splitlines()[-1] != "ok" and not (tmp_path / "ref.gguf").exists()
    with pytest.raises(getattr(E, error), match=match):
        hf_to_gguf(bad, tmp_path / "o.gguf", "f32", mtp="only")
    assert not (tmp_path / "o.gguf").exists()
