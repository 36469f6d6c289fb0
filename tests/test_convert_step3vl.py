"""Step3-VL / Step-3.7 (``Step3p7ForConditionalGeneration``): why neither half converts.

transformers 5.24 builds a tiny Step-3.7 (tests/support/vlm_models.py ``step3p7``), but the
pinned reference converts neither half of it, so there is no file to match:

* the projector class (``Step3VLVisionModel``) asserts Step3-VL-10B's exact tower
  (``understand_projector_stride`` 2, image size 728, width 1536, 47 layers): "only
  validated for Step3-VL-10B";
* the text class (``Step35Model``, GGUF ``step35``) reads the Hub's Step3.5 field names
  (``num_attention_groups``, ...), which transformers 5's config (read through AutoConfig,
  as the reference does) renames: ``KeyError``.

Ours converts the Step 3.5 text in the Hub's own text-only layout (``Step3p5ForCausalLM``
with the Hub's field names: tests/test_convert_step35.py); this folder, transformers 5.24's
``Step3p7ForConditionalGeneration`` with its own config, is refused by name before anything
is written, with or without ``--mmproj``.
"""

from __future__ import annotations

import pytest

from support.vlm_models import build
from test_convert_step35 import _reference
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    return build("step3p7", tmp_path_factory.mktemp("step3p7") / "hub")


def test_reference_cannot_convert(step, tmp_path):
    """The projector: an AssertionError; the text: a KeyError; no file either way."""
    jobs = [[str(step), "--outfile", str(tmp_path / "m.gguf"), "--outtype", "f16", "--mmproj"],
            [str(step), "--outfile", str(tmp_path / "t.gguf"), "--outtype", "f16"]]  # fmt: skip
    r = _reference(jobs, None)
    lines = r.stdout.splitlines()[-2:]
    assert lines[0].startswith("AssertionError") and "Step3-VL-10B" in lines[0], r.stdout
    assert lines[1] == "KeyError: 'num_attention_groups'", r.stdout
    assert not (tmp_path / "m.gguf").exists() and not (tmp_path / "t.gguf").exists()


def test_ours_refuses_before_writing(step, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="Step3p7ForConditionalGeneration"):
        hf_to_gguf(step, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    with pytest.raises(E.UnknownArchitecture, match="Step3p7ForConditionalGeneration"):
        hf_to_gguf(step, out / "t.gguf", "f16")
    assert not out.exists()
