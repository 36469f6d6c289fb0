"""BailingMoE V3 (Ling-3.0) with its multi-token-prediction block, as the Hub's checkpoints
carry it (``model.layers.{n}.*`` after the trunk: tests/support/hf_models.py
``bailingmoe3_mtp``), against the pinned reference, which includes the block by default
(``conversion/bailingmoe3.py``: ``block_count`` = trunk + ``num_nextn_predict_layers``,
``blk.{n}.nextn.*``), leaves it out with ``--no-mtp`` and writes it alone with ``--mtp``.
The reference runs on transformers 4.47.1 (it reads the Hub's config spellings, which
5.24's ``bailing_hybrid`` renames), one process per flag (the flags are class attributes).
Checked:

* byte-identical at f32 and q8_0 for the default, ``mtp="drop"`` and ``mtp="only"``;
* guard against a vacuous pass: the default file has the block (``nextn`` tensors, the
  block's MLA and experts, its KV-head entry), the dropped one is its trunk, the draft the
  block and the three shared tensors with the full file's metadata;
* llama.cpp (0.3.36) gives the default file exactly the dropped file's logits (it skips the
  block unless asked for its MTP graph), and loads the draft as its speculative MTP draft;
* GGUF -> HF of the full file keeps the Hub's layout (trunk count, the block as
  ``model.layers.2.*``), so it converts forward to the same file again;
* a layer past the trunk the config does not count: refused by name, nothing written;
* Ling-3.0 VL's text file over the same text (``text_config`` counts the block): the
  reference's bytes at f32 under each flag.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from support.bailingvl_models import ling3vl, qwen3vl_tower
from support.gguf_pair import assert_same_gguf
from support.hf_models import bailingmoe3_mtp
from support.meta_oracle import oracle_env
from test_convert_archs import _llama_logits_f32_kv, _prompt
from test_convert_mmproj import _same
from test_convert_mtp_flags import _DRAFT, _blk, _contents
from test_convert_step35 import _reference
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = ["f32", "q8_0"]
#: our mode -> the reference's flag (None: its default, the block included)
MODES = {"full": None, "drop": "--no-mtp", "only": "--mtp"}


@pytest.fixture(scope="module")
def ling(tmp_path_factory):
    """The model; the reference's files (``ref-MODE-T``) and ours (``ours-MODE-T``)."""
    root = tmp_path_factory.mktemp("ling_mtp")
    src = bailingmoe3_mtp(root / "ling")
    # Ling-3.0 VL over that text (its text file: the same entry from text_config)
    vl = ling3vl(qwen3vl_tower(root / "tower"), src, root / "ling-vl")
    for mode, flag in MODES.items():
        jobs = [[str(s), "--outfile", str(root / f"ref-{tag}{mode}-{t}.gguf"), "--outtype", t,
                 *([flag] if flag else [])]
                for s, tag, types in ((src, "", TYPES), (vl, "vl-", ["f32"])) for t in types]  # fmt: skip
        r = _reference(jobs, oracle_env())
        assert r.stdout.splitlines()[-len(jobs) :] == ["ok"] * len(jobs), r.stderr[-3000:]
    for mode in MODES:
        kw = {} if mode == "full" else {"mtp": mode}
        for t in TYPES:
            hf_to_gguf(src, root / f"ours-{mode}-{t}.gguf", t, **kw)
        hf_to_gguf(vl, root / f"ours-vl-{mode}-f32.gguf", "f32", **kw)
    return root, src


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("mode", list(MODES))
def test_same_as_reference(ling, mode, t):
    root, _ = ling
    _same(root / f"ours-{mode}-{t}.gguf", root / f"ref-{mode}-{t}.gguf")


@pytest.mark.parametrize("mode", list(MODES))
def test_vl_text_same_as_reference(ling, mode):
    """Ling-3.0 VL's text file with the block (the count in ``text_config``), at f32."""
    root, _ = ling
    _same(root / f"ours-vl-{mode}-f32.gguf", root / f"ref-vl-{mode}-f32.gguf")
    md, names = _contents(root / f"ours-vl-{mode}-f32.gguf")
    assert md["bailingmoe3.block_count"] == (2 if mode == "drop" else 3)
    assert any(".nextn." in x for x in names) == (mode != "drop")


def test_contents(ling):
    """The block is in the default file (counted, its nextn tensors, MLA and experts);
    dropped: the trunk; the draft: the block and the shared tensors, same metadata."""
    root, _ = ling
    md, full = _contents(root / "ours-full-f32.gguf")
    assert md["bailingmoe3.block_count"] == 3 and md["bailingmoe3.nextn_predict_layers"] == 1
    assert list(md["bailingmoe3.attention.head_count_kv"]) == [0, 1, 1]
    block = {x for x in full if _blk(x) == 2}
    assert {f"blk.2.nextn.{n}.weight" for n in ("eh_proj", "enorm", "hnorm")} <= block
    assert {"blk.2.layer_output_norm.weight", "blk.2.attn_gate.weight",
            "blk.2.attn_k_b.weight", "blk.2.ffn_gate_exps.weight"} <= block  # fmt: skip
    md_d, drop = _contents(root / "ours-drop-f32.gguf")
    assert drop == [x for x in full if _blk(x) < 2]
    assert md_d["bailingmoe3.block_count"] == 2 and "bailingmoe3.nextn_predict_layers" not in md_d
    assert list(md_d["bailingmoe3.attention.head_count_kv"]) == [0, 1]
    md_o, only = _contents(root / "ours-only-f32.gguf")
    shared = {"token_embd.weight", "output_norm.weight", "output.weight"}
    assert only == [x for x in full if _blk(x) == 2 or x in shared] and shared <= set(only)
    skip = ("general.", "tokenizer.")
    assert {k: v for k, v in md_o.items() if not k.startswith(skip)} == {
        k: v for k, v in md.items() if not k.startswith(skip)
    }


def test_llama_cpp(ling):
    """The default file runs as the dropped one (no MTP graph: the same logits); the draft
    loads as llama.cpp's speculative MTP draft with one block and gets its context."""
    root, _ = ling
    tokens = _prompt("bailingmoe3")
    full = _llama_logits_f32_kv(root / "ours-full-f32.gguf", tokens)
    drop = _llama_logits_f32_kv(root / "ours-drop-f32.gguf", tokens)
    np.testing.assert_array_equal(full, drop)
    r = subprocess.run([sys.executable, "-c", _DRAFT, str(root / "ours-only-f32.gguf")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["nextn", "1", "context", "True"]


def test_round_trip_keeps_the_block(ling, tmp_path):
    """GGUF -> HF writes the Hub's layout (the trunk count, the block counted by
    ``num_nextn_predict_layers`` as ``model.layers.2.*``, which transformers ignores on
    load), so the folder converts forward to the same file."""
    from safetensors import safe_open

    root, _ = ling
    back = tmp_path / "back"
    gguf_to_hf(root / "ours-full-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_nextn_predict_layers"]) == (2, 1)
    assert len(cfg["layer_types"]) == 2
    with safe_open(back / "model.safetensors", "np") as f:
        assert "model.layers.2.eh_proj.weight" in set(f.keys())
    hf_to_gguf(back, tmp_path / "again.gguf", "f32", tokenizer=False)
    assert_same_gguf(tmp_path / "again.gguf", root / "ours-full-f32.gguf")


def test_layer_past_the_count_refused(ling, tmp_path):
    """The block in the checkpoint but no ``num_nextn_predict_layers``: the reference's
    tensor map has the trunk's blocks only and cannot map the layer; ours refuses its
    first tensor by name before any output."""
    _, src = ling
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["num_nextn_predict_layers"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.UnmappedTensor, match=r"model\.layers\.2\."):
        hf_to_gguf(bad, tmp_path / "o.gguf", "f32")
    assert not (tmp_path / "o.gguf").exists()
