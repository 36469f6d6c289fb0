"""The reference's ``--no-mtp`` (alias ``--no-nextn``) and ``--mtp``: the model without its
multi-token-prediction (NextN) blocks, or those blocks alone as a speculative draft.

The tiny models of the families with MTP blocks (the ones their own modules build: GLM-4.5,
GLM-5, DeepSeek-V3.2, Dots3 Note, MiMo-V2-Flash, Step 3.5) are converted by the pinned
``convert_hf_to_gguf.py`` with each flag (one process per flag and environment: the flags
are class attributes the reference sets once per run) and by ours with ``mtp="drop"`` /
``"only"``.  Checked:

* byte-identical files at f32 and q8_0, for each family and flag;
* guard against a vacuous pass: the dropped file has no block past the trunk, the trunk's
  ``block_count`` and no ``nextn_predict_layers``; the draft has the blocks, the embedding,
  final norm and head only, the full file's metadata;
* llama.cpp loads the dropped file with the full file's logits (it runs no MTP graph);
  the draft it refuses (its loader wants the trunk's tensors: the exact message pinned);
* a class the reference refuses the flags for: refused by name, nothing written (the
  reference's refusal measured on the same folder); the CLI's flags, their alias and
  their exclusion.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support import step35_models
from support.dots3_models import dots3_note_hub
from support.dots3_models import with_mtp as dots3_mtp
from support.hf_models import build
from support.meta_oracle import oracle_env
from support.mimo_models import mimo_v2_flash
from support.mimo_models import with_mtp as mimo_mtp
from test_convert_archs import _llama_logits_f32_kv
from test_convert_mmproj import _same
from test_convert_step35 import _reference
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf
from weightsmith.gguf import read

TYPES = ["f32", "q8_0"]
MODES = {"drop": "--no-mtp", "only": "--mtp"}
BPE = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
#: family -> (GGUF architecture, trunk layers, MTP blocks, reference on transformers 4.47.1)
FAMILIES = {
    "glm4moe": ("glm4moe", 2, 1, False),
    "glm_moe_dsa": ("glm-dsa", 2, 1, False),
    "deepseek_v32": ("deepseek32", 2, 1, True),
    "dots3": ("dots3note", 4, 1, True),
    "mimo": ("mimo2", None, 3, True),
    "step35": ("step35", None, 1, True),
}


def _model(fam: str, root) -> object:
    if fam == "dots3":
        return dots3_mtp(dots3_note_hub(root / fam))
    if fam == "mimo":
        return mimo_mtp(mimo_v2_flash(root / "mimo-trunk"), root / fam)
    if fam == "step35":
        src, _ = step35_models.step35(root / "step35-trunk")
        return step35_models.with_mtp(src, root / fam)
    return build(fam, root / fam)


@pytest.fixture(scope="module")
def mtp(tmp_path_factory):
    """Each family's model; the reference's files under each flag (``ref-FAM-MODE-T``) and
    ours (``ours-FAM-MODE-T``, and ``ours-FAM-full-f32``)."""
    root = tmp_path_factory.mktemp("mtp_flags")
    srcs = {fam: _model(fam, root) for fam in FAMILIES}
    for on4 in (False, True):
        for mode, flag in MODES.items():
            jobs = [[str(srcs[f]), "--outfile", str(root / f"ref-{f}-{mode}-{t}.gguf"),
                     "--outtype", t, flag]
                    for f, v in FAMILIES.items() if v[3] == on4 for t in TYPES]  # fmt: skip
            r = _reference(jobs, oracle_env() if on4 else None)
            got = r.stdout.splitlines()[-len(jobs) :]
            assert got == ["ok"] * len(jobs), r.stdout[-2000:] + r.stderr[-3000:]
    for fam, src in srcs.items():
        hf_to_gguf(src, root / f"ours-{fam}-full-f32.gguf", "f32")
        for mode in MODES:
            for t in TYPES:
                hf_to_gguf(src, root / f"ours-{fam}-{mode}-{t}.gguf", t, mtp=mode)
    return root, srcs


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("fam", list(FAMILIES))
def test_same_as_reference(mtp, fam, mode, t):
    root, _ = mtp
    _same(root / f"ours-{fam}-{mode}-{t}.gguf", root / f"ref-{fam}-{mode}-{t}.gguf")


def _contents(path):
    with read(path) as f:
        return dict(f.metadata), [t.name for t in f.tensors]


def _blk(name: str) -> int:
    return int(name.split(".")[1]) if name.startswith("blk.") else -1


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_contents(mtp, fam):
    """The dropped file is the full one's trunk (its tensors in order, the trunk's
    ``block_count``, no MTP count); the draft holds the blocks past the trunk and the
    three shared tensors, with the full file's metadata."""
    root, _ = mtp
    arch, _, n_mtp, _ = FAMILIES[fam]
    md, full = _contents(root / f"ours-{fam}-full-f32.gguf")
    n = md[f"{arch}.block_count"] - n_mtp
    assert md[f"{arch}.nextn_predict_layers"] == n_mtp
    assert any(_blk(x) >= n for x in full) and any(".nextn." in x for x in full)
    md_d, drop = _contents(root / f"ours-{fam}-drop-f32.gguf")
    assert drop == [x for x in full if _blk(x) < n]
    assert md_d[f"{arch}.block_count"] == n
    assert f"{arch}.nextn_predict_layers" not in md_d
    md_o, only = _contents(root / f"ours-{fam}-only-f32.gguf")
    shared = {"token_embd.weight", "output_norm.weight", "output.weight"}
    assert only == [x for x in full if _blk(x) >= n or x in shared]
    assert shared <= set(only)
    skip = ("general.", "tokenizer.")
    assert {k: v for k, v in md_o.items() if not k.startswith(skip)} == {
        k: v for k, v in md.items() if not k.startswith(skip)
    }


def _tokens(fam: str) -> list[int]:
    return BPE


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_dropped_runs_as_full(mtp, fam):
    """llama.cpp loads the file without the blocks and gives the full file's logits."""
    root, _ = mtp
    full = _llama_logits_f32_kv(root / f"ours-{fam}-full-f32.gguf", _tokens(fam))
    drop = _llama_logits_f32_kv(root / f"ours-{fam}-drop-f32.gguf", _tokens(fam))
    np.testing.assert_array_equal(drop, full)
