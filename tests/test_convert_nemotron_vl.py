"""Nemotron Nano VL (``NemotronH_Nano_VL_V2``): the text half converts, the projector cannot.

The checkpoint is remote code on the Hub (RADIO v2.5-h tower + ``mlp1`` + NemotronH text):
tests/support/nemotron_vl_models.py builds it by hand, the text half being the tiny
NemotronH of tests/support/hf_models.py under ``language_model.``.

* The text half: the reference reads ``llm_config`` as the text config and converts the
  NemotronH under ``language_model.``; ours writes the same bytes (f32, f16, bf16, q8_0).
  The text harness (tests/test_convert_archs.py ``nemotronh``) holds the rest (quantize
  types, llama-cpp-python logits, GGUF -> HF) for the same tensors.
* The projector: the reference's ``NemotronNanoV2VLModel`` writes RADIO v2.5-h's ViT-H
  sizes (width 1280, MLP 5120, 32 blocks, 16 heads) whatever the checkpoint holds -- the
  Hub's ``vision_config`` names a timm model, not a width or a depth.  A tower narrower
  than 1280 does not convert at all (the patch embedder is reshaped to 1280 rows); a
  1280-wide tower of one block converts into a file whose rows are not its tensors
  (``block_count`` 32 for one block, ``feed_forward_length`` 5120 for an MLP of 64), which
  mtmd refuses (it asks for block 1).  A consistent file needs the whole ViT-H (~630 M
  parameters): not a test model, so there is no file to match.  Ours refuses the
  projector by name (the vision config's ``RADIOModel``) before writing anything.
"""

from __future__ import annotations

import pytest

from support.hf_models import nemotronh
from support.nemotron_vl_models import nemotron_vl
from test_convert_step35 import _reference
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf
from weightsmith.gguf import read

TYPES = ("f32", "f16", "bf16", "q8_0")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """(root, wide, outcomes): the folders, the reference's files, each run's outcome."""
    root = tmp_path_factory.mktemp("nemotron_vl")
    text = nemotronh(root / "text", dtype="float16")
    wide = nemotron_vl(root / "wide", text, width=1280, layers=1, ffn=64)
    narrow = nemotron_vl(root / "narrow", text, width=32, layers=1, ffn=64)
    jobs = [[str(wide), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t]
            for t in TYPES]  # fmt: skip
    jobs.append([str(wide), "--outfile", str(root / "ref-mmproj.gguf"), "--outtype", "f16", "--mmproj"])  # fmt: skip
    jobs.append([str(narrow), "--outfile", str(root / "ref-narrow.gguf"), "--outtype", "f16", "--mmproj"])  # fmt: skip
    r = _reference(jobs, None)
    return root, wide, narrow, r.stdout.splitlines()[-len(jobs) :]


def test_text_half_matches_reference(work):
    root, wide, _, outcomes = work
    assert outcomes[: len(TYPES)] == ["ok"] * len(TYPES), outcomes
    for t in TYPES:
        ours = root / f"ours-text-{t}.gguf"
        hf_to_gguf(wide, ours, t)
        assert ours.read_bytes() == (root / f"ref-text-{t}.gguf").read_bytes(), t
        with read(ours) as f:
            assert f.metadata["general.architecture"] == "nemotron_h"


def test_reference_projector_rows_are_vit_h(work, capfd):
    """A 1280-wide tower of one block: the reference writes ViT-H's 32 blocks and MLP 5120
    (the image side and the merge are the config's); mtmd asks for block 1 and fails."""
    root, _, _, outcomes = work
    assert outcomes[len(TYPES)] == "ok", outcomes
    proj = root / "ref-mmproj.gguf"
    with read(proj) as f:
        md = f.metadata
        assert md["clip.projector_type"] == "nemotron_v2_vl"
        assert (md["clip.vision.embedding_length"], md["clip.vision.feed_forward_length"],
                md["clip.vision.block_count"], md["clip.vision.attention.head_count"]) == (
                    1280, 5120, 32, 16)  # fmt: skip
        assert (md["clip.vision.image_size"], md["clip.vision.projector.scale_factor"]) == (64, 2)
        names = [t.name for t in f.tensors]
        blocks = {n.split(".")[2] for n in names if n.startswith("v.blk.")}
        assert blocks == {"0"}  # one block, where the file says 32
        up = next(t for t in f.tensors if t.name == "v.blk.0.ffn_up.weight")
        assert list(up.dims) == [1280, 64]  # an MLP of 64, where the file says 5120
    import llama_cpp
    from llama_cpp import mtmd_cpp

    llm = llama_cpp.Llama(model_path=str(root / "ref-text-f32.gguf"), n_ctx=64, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        p = mtmd_cpp.mtmd_context_params_default()
        p.use_gpu, p.n_threads, p.print_timings = False, 2, False
        capfd.readouterr()
        ctx = mtmd_cpp.mtmd_init_from_file(str(proj).encode(), llm.model, p)
        err = capfd.readouterr().err
    finally:
        llm.close()
    assert ctx is None
    assert "unable to find tensor v.blk.1.attn_out.weight" in err


def test_reference_cannot_convert_a_narrow_tower(work):
    root, _, _, outcomes = work
    assert outcomes[-1].startswith("RuntimeError: shape '[1280, 3, 16, 16]' is invalid"), outcomes
    assert not (root / "ref-narrow.gguf").exists()


@pytest.mark.parametrize("which", ["wide", "narrow"])
def test_ours_refuses_the_projector_before_writing(work, tmp_path, which):
    _, wide, narrow, _ = work
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="RADIOModel"):
        hf_to_gguf(
            wide if which == "wide" else narrow, out / "t.gguf", "f16", mmproj=out / "m.gguf"
        )
    assert not out.exists()
