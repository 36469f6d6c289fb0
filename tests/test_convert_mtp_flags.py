"""The reference's ``--no-mtp`` (alias ``--no-nextn``) and ``--mtp``: the model without its
multi-token-prediction (NextN) blocks, or those blocks alone as a speculative draft.

The tiny models of the families with MTP blocks (the ones their own modules build: GLM-4.5,
GLM-5, DeepSeek-V3.2, Dots3 Note, MiMo-V2-Flash, Step 3.5, Qwen3.5, Nemotron-H MoE) are
converted by the pinned
``convert_hf_to_gguf.py`` with each flag (one process per flag and environment: the flags
are class attributes the reference sets once per run) and by ours with ``mtp="drop"`` /
``"only"``.  Checked:

* byte-identical files at f32 and q8_0 (DeepSeek-V3.2: f32), for each family and flag;
* guard against a vacuous pass: the dropped file has no block past the trunk, the trunk's
  ``block_count`` and no ``nextn_predict_layers``; the draft has the blocks, the embedding,
  final norm and head only, the full file's metadata;
* llama.cpp loads the dropped file with the full file's logits (it runs no MTP graph);
  the draft it loads as its speculative MTP draft (``load_mtp``, an MTP context), but for
  Dots3 Note's and MiMo's (the exact refusals pinned);
* a class the reference refuses the flags for: refused by name, nothing written (the
  reference's refusal measured on the same folder); the CLI's flags, their alias and
  their exclusion.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
#: family -> (GGUF architecture, MTP blocks, reference on transformers 4.47.1, types);
#: DeepSeek-V3.2 (GLM-5's entry with another vocabulary, 128k rows) at f32 only
FAMILIES = {
    "glm4moe": ("glm4moe", 1, False, TYPES),
    "glm_moe_dsa": ("glm-dsa", 1, False, TYPES),
    "deepseek_v32": ("deepseek32", 1, True, ["f32"]),
    "dots3": ("dots3note", 1, True, TYPES),
    "mimo": ("mimo2", 3, True, TYPES),
    "step35": ("step35", 1, True, TYPES),
    # Qwen3.5 (_QwenMtpMixin: mtp.* renamed after the trunk; Qwen3-Next's and Qwen3.5-MoE's
    # entries are made by the same function)
    "qwen35": ("qwen35", 1, False, TYPES),
    # Nemotron 3 Super's layout (the block folded from mtp.layers.0 / .1)
    "nemotronhmoe": ("nemotron_h_moe", 1, False, TYPES),
}
CASES = [(f, m, t) for f, v in FAMILIES.items() for m in MODES for t in v[3]]


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
                    for f, v in FAMILIES.items() if v[2] == on4 for t in v[3]]  # fmt: skip
            r = _reference(jobs, oracle_env() if on4 else None)
            got = r.stdout.splitlines()[-len(jobs) :]
            assert got == ["ok"] * len(jobs), r.stdout[-2000:] + r.stderr[-3000:]
    for fam, src in srcs.items():
        hf_to_gguf(src, root / f"ours-{fam}-full-f32.gguf", "f32")
        for mode in MODES:
            for t in FAMILIES[fam][3]:
                hf_to_gguf(src, root / f"ours-{fam}-{mode}-{t}.gguf", t, mtp=mode)
    return root, srcs


@pytest.mark.parametrize(("fam", "mode", "t"), CASES)
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
    arch, n_mtp, _, _ = FAMILIES[fam]
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
    assert {"token_embd.weight", "output_norm.weight"} <= set(only)  # Qwen3.5's head is tied
    skip = ("general.", "tokenizer.")
    assert {k: v for k, v in md_o.items() if not k.startswith(skip)} == {
        k: v for k, v in md.items() if not k.startswith(skip)
    }


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_dropped_runs_as_full(mtp, fam):
    """llama.cpp loads the file without the blocks and gives the full file's logits."""
    root, _ = mtp
    full = _llama_logits_f32_kv(root / f"ours-{fam}-full-f32.gguf", BPE)
    drop = _llama_logits_f32_kv(root / f"ours-{fam}-drop-f32.gguf", BPE)
    np.testing.assert_array_equal(drop, full)


# llama.cpp's draft loading (common/common.cpp for ``--spec-type draft-mtp``): the model
# with ``load_mtp`` (its trunk is optional when the file has none), an MTP context
_DRAFT = textwrap.dedent(
    """
    import sys, llama_cpp as L
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.load_mtp = True
    m = L.llama_model_load_from_file(sys.argv[1].encode(), mp)
    if not m:
        print("no model", flush=True)
        sys.exit(3)
    print("nextn", L.llama_model_n_layer_nextn(m), flush=True)
    cp = L.llama_context_default_params()
    cp.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
    cp.n_ctx = 64
    print("context", bool(L.llama_init_from_model(m, cp)), flush=True)
    """
)
#: what llama.cpp 0.3.36 does with the draft (measured): loads it and makes its MTP
#: context, or the line it stops with (Dots3 Note: no MTP-only loading; MiMo: its MTP
#: graph takes MiMo-V2.5's fused qkv_proj only, the tiny V2-Flash has q/k/v)
DRAFT_REFUSED = {
    "dots3": "check_tensor_dims: tensor 'blk.0.attn_norm.weight' not found",
    "mimo": 'GGML_ASSERT(layer.wqkv && "MIMO2 MTP requires fused attn_qkv") failed',
}


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_draft_in_llama_cpp(mtp, fam):
    """llama.cpp loads the draft as its speculative MTP draft (``load_mtp``, an MTP
    context) with the blocks counted; where it cannot, the refusal is pinned."""
    root, _ = mtp
    r = subprocess.run([sys.executable, "-c", _DRAFT, str(root / f"ours-{fam}-only-f32.gguf")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    if fam in DRAFT_REFUSED:
        assert r.returncode != 0 and DRAFT_REFUSED[fam] in r.stderr, r.stderr[-2000:]
    else:
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == ["nextn", str(FAMILIES[fam][1]), "context", "True"]


def test_refused_for_a_class_without_blocks(mtp, tmp_path):
    """GLM-4 dense (``Glm4ForCausalLM``, no ``supports_mtp_export``): the reference stops
    with its message under either flag; ours raises MtpNotSupported naming the class,
    nothing written."""
    src = build("glm4", tmp_path / "glm4")
    jobs = [[str(src), "--outfile", str(tmp_path / f"ref-{m}.gguf"), "--outtype", "f32", f]
            for m, f in MODES.items()]  # fmt: skip
    r = _reference(jobs, None)
    assert r.stdout.splitlines()[-2:] == ["SystemExit: 1"] * 2, r.stdout[-2000:]
    assert r.stderr.count("--mtp / --no-nextn are not supported for Glm4ForCausalLM") == 2
    for mode in MODES:
        out = tmp_path / f"ours-{mode}.gguf"
        with pytest.raises(E.MtpNotSupported, match="Glm4ForCausalLM") as ex:
            hf_to_gguf(src, out, "f32", mtp=mode)
        assert "Glm4MoeForCausalLM" in str(ex.value)
        assert not out.exists() and not list(tmp_path.glob("ours-*"))


def test_draft_of_a_checkpoint_without_blocks_refused(mtp, tmp_path):
    """Step 3.5 without its MTP block: the reference's ``--mtp`` writes a file of the
    three shared tensors (no block: nothing a runtime can draft with; measured here);
    ours refuses by name, nothing written (a deliberate difference; Nemotron-H's
    reference refuses too).  Our ``mtp="drop"`` of it is the plain conversion."""
    _, srcs = mtp
    trunk = srcs["step35"].parent / "step35-trunk"
    ref = tmp_path / "ref.gguf"
    r = _reference([[str(trunk), "--outfile", str(ref), "--outtype", "f32", "--mtp"]],
                   oracle_env())  # fmt: skip
    assert r.stdout.splitlines()[-1:] == ["ok"], r.stderr[-2000:]
    md, names = _contents(ref)
    assert sorted(names) == ["output.weight", "output_norm.weight", "token_embd.weight"]
    assert "step35.nextn_predict_layers" not in md
    out = tmp_path / "ours.gguf"
    with pytest.raises(E.MtpNotSupported, match="has none"):
        hf_to_gguf(trunk, out, "f32", mtp="only")
    assert not out.exists()
    hf_to_gguf(trunk, out, "f32", mtp="drop")
    hf_to_gguf(trunk, tmp_path / "plain.gguf", "f32")
    assert out.read_bytes() == (tmp_path / "plain.gguf").read_bytes()


def test_bad_mode_refused(mtp, tmp_path):
    _, srcs = mtp
    with pytest.raises(E.UsageError, match="mtp='all'"):
        hf_to_gguf(srcs["step35"], tmp_path / "x.gguf", "f32", mtp="all")
    assert not (tmp_path / "x.gguf").exists()


def test_cli(mtp, tmp_path, capsys):
    """``--no-mtp``, its alias ``--no-nextn`` and ``--mtp`` give the library's files; two
    of them together are refused by argparse; on another conversion, by name."""
    from weightsmith.cli._main import main

    root, srcs = mtp
    src = str(srcs["step35"])
    for flags, mode in ((["--no-mtp"], "drop"), (["--no-nextn"], "drop"), (["--mtp"], "only")):
        dst = tmp_path / f"{flags[0]}.gguf"
        assert main(["convert", src, str(dst), "--type", "q8_0", "--quiet", *flags]) == 0
        assert dst.read_bytes() == (root / f"ours-step35-{mode}-q8_0.gguf").read_bytes()
    with pytest.raises(SystemExit) as ex:
        main(["convert", src, str(tmp_path / "y.gguf"), "--mtp", "--no-nextn"])
    assert ex.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    back = tmp_path / "back"
    assert main(["convert", str(root / "ours-step35-full-f32.gguf"), str(back), "--mtp"]) != 0
    assert "--mtp / --no-mtp apply to HF folder -> GGUF" in capsys.readouterr().err
    assert not back.exists()
