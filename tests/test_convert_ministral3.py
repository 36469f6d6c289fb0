"""Mistral 3 texts of the newer types against llama.cpp's converter and runtime.

Ministral 3 (``Mistral3ForConditionalGeneration`` whose ``text_config.model_type`` is
``ministral3``; the tiny VLM of tests/support/vlm_models.py ``ministral3vl``): the pinned
reference's ``Mistral3Model`` writes the ``mistral3`` text of Mistral Small 3.1 plus two
rows, ``rope.scaling.yarn_log_multiplier`` (YaRN's ``mscale_all_dim``) and
``attention.temperature_scale`` (``llama_4_scaling_beta``: Q times
``1 + beta log(1 + floor(pos / original context))``).  Its text config has an original
context of 4 positions, so the 8-token prompt runs the scaling.  Checked:

* text and projector byte-identical to ``convert_hf_to_gguf.py`` (``--mmproj``) at f32,
  f16, bf16 and q8_0 (the projector with the one tensor ours adds for every Pixtral
  projector, ``v.token_embd.img_break``: see tests/test_convert_mmproj.py);
* llama.cpp's logits on our text are those on the reference's, and transformers' (f32 KV
  cache, the file's YaRN betas); transformers without the scaling is far off;
* mtmd loads our projector with our text and encodes an image into transformers' features;
* GGUF -> HF: the text alone as ``Ministral3ForCausalLM``, the pair as the whole
  ``Mistral3ForConditionalGeneration``, both with the original's logits;
* a ``ministral3`` config without the scaling key is refused by name, nothing written.

The text-only class (``Ministral3ForCausalLM``) has the whole text harness in
tests/test_convert_archs.py (``ministral3``).
"""

from __future__ import annotations

import json
import shutil
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

TOKENS = [1, 5, 9, 33, 100, 7, 200, 42]


def _reference(jobs: list[list[str]]) -> None:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def m3(tmp_path_factory):
    """The Ministral 3 folder (``hub``); the reference's text and projector at each type
    (one process) and ours, beside it."""
    root = tmp_path_factory.mktemp("ministral3")
    src = build("ministral3vl", root / "hub")
    jobs = pair_jobs(src, root, TYPES)
    _reference(jobs)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_text_same_as_reference(m3, t):
    _same(m3 / f"ours-text-{t}.gguf", m3 / f"ref-text-{t}.gguf")


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(m3, t):
    _same(m3 / f"ours-mmproj-{t}.gguf", m3 / f"ref-mmproj-{t}.gguf", IMG_BREAK)


def test_contents(m3):
    """Guard against a vacuous pass: the two Ministral 3 rows after LlamaModel's, YaRN's."""
    from weightsmith.gguf import read

    with read(m3 / "ours-text-f16.gguf") as f:
        md = f.metadata
    assert md["general.architecture"] == "mistral3"
    keys = list(md)
    i = keys.index("mistral3.rope.dimension_count")
    assert keys[i + 1 : i + 3] == [
        "mistral3.rope.scaling.yarn_log_multiplier",
        "mistral3.attention.temperature_scale",
    ]
    assert md["mistral3.rope.scaling.yarn_log_multiplier"] == 1.0
    assert abs(md["mistral3.attention.temperature_scale"] - 0.1) < 1e-7
    assert md["mistral3.rope.scaling.type"] == "yarn"
    assert md["mistral3.rope.scaling.original_context_length"] == 4


def _llama_logits(path, tokens: list[int]) -> np.ndarray:
    """llama.cpp's logits, f32 KV cache, with the file's YaRN betas (llama-cpp-python
    otherwise passes 32 / 1 over them)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0, yarn_beta_fast=-1.0,
                          yarn_beta_slow=-1.0)  # fmt: skip
    try:
        llm.eval(tokens)
        return np.array(llm.scores[: len(tokens)], dtype=np.float32)
    finally:
        llm.close()


def _hf_logits(folder, beta: float | None = None) -> np.ndarray:
    """transformers' logits of the VLM's text (``beta``: another llama_4_scaling_beta)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = AutoConfig.from_pretrained(folder)
    if beta is not None:
        rp = cfg.text_config.rope_parameters
        cfg.text_config.rope_parameters = {**rp, "llama_4_scaling_beta": beta}
    m = AutoModelForImageTextToText.from_pretrained(folder, config=cfg, dtype=torch.float32)
    with torch.no_grad():
        return m.eval()(input_ids=torch.tensor([TOKENS])).logits[0].numpy()


def test_text_in_llama_cpp(m3):
    """llama.cpp's logits on our text = on the reference's, and transformers' within 2e-3
    of scale (measured 2.4e-6 at scale 2.7); with the scaling off in transformers they are
    0.07 to 0.10 apart from the 5th token on (the rows are read and run)."""
    ours = _llama_logits(m3 / "ours-text-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, _llama_logits(m3 / "ref-text-f32.gguf", TOKENS))
    hf = _hf_logits(m3 / "hub")
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0), np.abs(ours - hf).max()
    off = np.abs(ours - _hf_logits(m3 / "hub", beta=0.0)).max(1)
    assert off[:4].max() <= 2e-3 * max(scale, 1.0) and off[4:].min() > 0.02, off


def test_llama_cpp_encodes_image(m3):
    """mtmd loads our projector with our text and encodes a 64 x 64 image into
    transformers' features (the [IMG_BREAK] row after each row of 2x2-merged patches but
    the last, as for Mistral Small 3.1); measured 2.0e-4 at scale 0.53."""
    from weightsmith.gguf import read

    img = _image(64)
    got = _mtmd_embeddings(m3 / "ours-text-f32.gguf", m3 / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(m3 / "hub", img)
    side = 64 // 8 // 2
    rows = [got[r * (side + 1) : r * (side + 1) + side] for r in range(side)]
    breaks = got[[r * (side + 1) + side for r in range(side - 1)]]
    with read(m3 / "ours-mmproj-f32.gguf") as f:
        row = np.array(f.numpy(IMG_BREAK))
    ok = ~np.isnan(breaks)  # the runtime's occasional NaNs there: test_convert_mmproj
    np.testing.assert_array_equal(breaks[ok], np.broadcast_to(row, breaks.shape)[ok])
    got = np.concatenate(rows)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_text_back_to_hf(m3, tmp_path):
    """The text GGUF alone -> Ministral3ForCausalLM (YaRN and the scaling back in its
    rope_parameters): every tensor the VLM's text, the VLM's text logits."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    back = tmp_path / "back"
    gguf_to_hf(m3 / "ours-text-f32.gguf", back, dtype="f32")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Ministral3ForCausalLM"]
    assert cfg["rope_parameters"]["llama_4_scaling_beta"] == pytest.approx(0.1)
    assert cfg["rope_parameters"]["original_max_position_embeddings"] == 4
    orig = load_file(m3 / "hub" / "model.safetensors")
    got = load_file(back / "model.safetensors")
    pre = "language_model."
    want = {k[len(pre) :]: v for k, v in orig.items() if k.startswith(pre)}
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v.astype(np.float32), err_msg=k)
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(back).eval()(torch.tensor([TOKENS]))
    np.testing.assert_array_equal(logits.logits[0].numpy(), _hf_logits(m3 / "hub"))


def test_pair_back_to_hf(m3, tmp_path):
    """Text + projector -> Mistral3ForConditionalGeneration with a ministral3 text: it
    loads with every tensor, the original's image features and text logits."""
    import torch
    from transformers import AutoModelForImageTextToText

    back = tmp_path / "back"
    gguf_to_hf(m3 / "ours-text-f32.gguf", back, "f32", mmproj=m3 / "ours-mmproj-f32.gguf")
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Mistral3ForConditionalGeneration"]
    assert cfg["text_config"]["model_type"] == "ministral3"
    m, info = AutoModelForImageTextToText.from_pretrained(
        back, dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), info
    orig = AutoModelForImageTextToText.from_pretrained(m3 / "hub", dtype=torch.float32)
    want = orig.state_dict()
    for k, v in m.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert set(m.state_dict()) == set(want)
    img = _image(64)
    np.testing.assert_array_equal(_hf_image_features(back, img),
                                  _hf_image_features(m3 / "hub", img))  # fmt: skip
    np.testing.assert_array_equal(_hf_logits(back), _hf_logits(m3 / "hub"))


def test_scaling_key_missing_refused(m3, tmp_path):
    """The reference stops on a ministral3 text without ``llama_4_scaling_beta`` (a
    KeyError): a named error here, before any file is written."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (m3 / "hub").iterdir():
        (src / f.name).symlink_to(f)
    cfg = json.loads((m3 / "hub" / "config.json").read_text())
    del cfg["text_config"]["rope_parameters"]["llama_4_scaling_beta"]
    (src / "config.json").unlink()
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="llama_4_scaling_beta"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    shutil.rmtree(src)


def test_cli_writes_both(m3, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(m3 / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (m3 / "ours-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (m3 / "ours-text-q8_0.gguf").read_bytes()
