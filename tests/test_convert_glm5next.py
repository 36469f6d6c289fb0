"""GLM-5-Next (``Glm5NextForConditionalGeneration``, GLM-5.3-Flash): its text half
(``glm5-next``: KDA linear attention, nope-only MLA with a DSA indexer, mHC
hyper-connections, experts) and its projector (``glm5v``) against llama.cpp's converter
and runtime.

The tiny model (tests/support/vlm_models.py ``glm5next``) is saved by transformers 5.24,
its text config then in the Hub's spelling the reference reads.  Checked here:

* the text GGUF and the projector GGUF (``--mmproj``) byte-identical to
  ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and the text at q4_k_m / iq4_xs
  to the reference's f32 through ``llama_model_quantize``;
* llama.cpp (llama-cpp-python 0.3.36) runs our text file with transformers' logits;
* mtmd loads our projector with our text file and encodes an image into transformers'
  ``get_image_features``;
* transformers' own config spelling (which the reference cannot read either) is refused
  by name before any output; the text file alone has no HF class (transformers 5.24 has
  no text-only GLM-5-Next): GGUF -> HF refuses it.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from support.vlm_models import build
from test_convert_archs import QUANT_TYPES, _llama_logits
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _image, _mtmd_embeddings, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

# the prompt's ids are inside the tiny GPT-2 + GLM vocabulary
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
# mtmd's image embeddings vs transformers' features, as a fraction of max(scale, 1)
TOL = 1e-3


@pytest.fixture(scope="module")
def g5(tmp_path_factory):
    """The model folder; the reference's text files and projectors; ours."""
    root = tmp_path_factory.mktemp("glm5next")
    src = build("glm5next", root / "model")
    convert_both(src, root, text_types=TYPES)
    for t in QUANT_TYPES:
        _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{t}.gguf", t)
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_same_as_reference(g5, t):
    _same(g5 / f"ours-text-{t}.gguf", g5 / f"ref-text-{t}.gguf")
    _same(g5 / f"ours-mmproj-{t}.gguf", g5 / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", QUANT_TYPES)
def test_same_as_llama_quantize(g5, t):
    """llama-quantize's types: its GLM-5-Next exceptions (mHC, indexer, KDA gates and MLA
    tensors left unquantized; ``attn_q_a`` / ``attn_q_b`` at Q8_0 at least)."""
    _same(g5 / f"ours-text-{t}.gguf", g5 / f"ref-text-{t}.gguf")


def test_contents(g5):
    """Guard against a vacuous pass: what the files say and hold."""
    from weightsmith.gguf import read

    with read(g5 / "ours-mmproj-f16.gguf") as f:
        md = f.metadata
    assert md["clip.projector_type"] == "glm5v"
    assert md["clip.vision.spatial_merge_size"] == 2
    assert md["clip.vision.swiglu_clamp"] == 10.0
    # 4 and 16 merged tokens of 2 x 2 patches of 8 px
    assert (md["clip.vision.image_min_pixels"], md["clip.vision.image_max_pixels"]) == (1024, 4096)
    with read(g5 / "ours-text-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: t.ggml_type.name for t in f.tensors}
        conv = f.tensors[[t.name for t in f.tensors].index("blk.0.ssm_conv1d_q.weight")]
    assert md["general.architecture"] == "glm5-next"
    assert list(md["glm5-next.attention.head_count_kv"]) == [0, 0, 0, 1]
    assert md["glm5-next.hyper_connection.count"] == 4
    # the mHC, k-pool, conv and indexer weights F32 at q8_0, as the reference keeps them
    for n in ("blk.1.hc_attn_fn.weight", "blk.3.indexer_compressor_gate.weight",
              "blk.0.ssm_conv1d_q.weight", "blk.3.indexer.proj.weight"):  # fmt: skip
        assert types[n] == "F32", n
    assert types["blk.3.attn_k_b.weight"] == types["blk.1.ffn_up_exps.weight"] == "Q8_0"
    assert tuple(conv.shape) == (1, 128, 1, 4)  # [C, 1, K] as [1, C, 1, K]


def test_text_in_llama_cpp(g5):
    """llama.cpp's logits on our text file equal transformers' (text-only input)."""
    import torch
    from transformers import AutoModelForImageTextToText

    got = _llama_logits(g5 / "ours-text-f32.gguf", TOKENS)
    m = AutoModelForImageTextToText.from_pretrained(g5 / "model", dtype=torch.float32).eval()
    with torch.no_grad():
        want = m(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0)


def test_llama_cpp_encodes_image(g5):
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    img = _image(64)
    got = _mtmd_embeddings(g5 / "ours-text-f32.gguf", g5 / "ours-mmproj-f32.gguf", img)
    m = AutoModelForImageTextToText.from_pretrained(g5 / "model", dtype=torch.float32).eval()
    out = AutoImageProcessor.from_pretrained(g5 / "model")(
        images=[img], return_tensors="pt", do_resize=False
    )
    with torch.no_grad():
        f = m.get_image_features(pixel_values=out["pixel_values"],
                                 image_grid_thw=out["image_grid_thw"])  # fmt: skip
    f = getattr(f, "pooler_output", f)
    if isinstance(f, (list, tuple)):
        f = torch.cat(list(f), 0)
    want = f.reshape(-1, f.shape[-1]).float().numpy()
    assert got.shape == want.shape == (16, 128)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_transformers_spelling_refused(g5, tmp_path):
    """transformers' own config.json (``linear_*`` fields, no ``linear_attn_config``,
    ``mla_use_nope``): the reference fails on it (KeyError); ours names the field before
    writing anything."""
    bad = tmp_path / "model"
    shutil.copytree(g5 / "model", bad)
    cfg = json.loads((bad / "config.json").read_text())
    lin = cfg["text_config"].pop("linear_attn_config")
    cfg["text_config"].update(linear_head_dim=lin["head_dim"], linear_num_heads=lin["num_heads"])
    (bad / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="linear_attn_config"):
        hf_to_gguf(bad, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    cfg["text_config"]["linear_attn_config"] = lin
    del cfg["text_config"]["mla_use_nope"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match="mla_use_nope"):
        hf_to_gguf(bad, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_text_alone_has_no_hf_class(g5, tmp_path):
    with pytest.raises(E.UnknownArchitecture, match="glm5-next"):
        gguf_to_hf(g5 / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()
