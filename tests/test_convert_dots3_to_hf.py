"""GGUF -> HF of Dots3 Note: our ``dots3note`` text GGUF and its two-tower projector
(``dots3note_v`` + ``dots3note_a``) back into one ``Dots3NoteForConditionalGeneration``
folder in the Hub's layout (flat text config, per-expert tensors, which transformers 5.24
fuses on load; ``vision_encoder.*`` / ``audio_encoder.*``).

The tiny model (tests/support/dots3_models.py, float32) -> our f32 pair -> our folder:

* transformers 5.24 loads it with no missing, unexpected or mismatched keys, and every
  tensor (transformers' fused experts included) is the original's bit for bit, except
  the ``q_a`` / ``kv_a`` latent norms: the GGUF keeps them with the latent rescale
  ``sqrt(hidden / rank)`` folded in (llama.cpp's graph has no rescale), divided out
  again here (transformers always applies it): within 1 float32 ulp;
* the image and audio features and the text logits of the model loaded from our folder
  are the original's (features: equal; logits: within 2e-6 of their scale, the norms'
  ulp; measured 6e-7);
* config.json is the Hub's, field for field, except the token ids the GGUF keeps (its
  BOS) and fields transformers or llama.cpp fix (named in the test); the image
  processor file is the Hub's;
* HF -> GGUF of our folder gives our pair again (rows, names, types, values);
* the text GGUF alone is still refused by name (no text-only class).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.dots3_models import dots3_note_hub
from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from test_convert_dots3 import TOKENS, _hf_image_features, _pcm
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

#: the latent norms the GGUF keeps rescaled (the 1 ulp exception)
RESCALED = ("q_a_layernorm.weight", "kv_a_layernorm.weight")


@pytest.fixture(scope="module")
def d3b(tmp_path_factory):
    """The original folder, our f32 GGUF pair of it, our folder back, both models."""
    import torch
    from transformers import AutoModelForImageTextToText

    root = tmp_path_factory.mktemp("dots3_back")
    src = dots3_note_hub(root / "hub")
    text, proj = root / "text-f32.gguf", root / "mmproj-f32.gguf"
    hf_to_gguf(src, text, "f32", mmproj=proj)
    gguf_to_hf(text, root / "back", "f32", mmproj=proj)
    orig = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32).eval()
    back, info = AutoModelForImageTextToText.from_pretrained(
        root / "back", dtype=torch.float32, output_loading_info=True
    )
    return {"root": root, "src": src, "orig": orig, "back": back.eval(), "info": info}


def test_loads_with_every_tensor(d3b):
    got, want = state_dicts(d3b["back"], d3b["info"], d3b["orig"])
    assert any(k.endswith("experts.gate_up_proj") for k in want)  # transformers' fused layout
    rescaled = [k for k in want if k.endswith(RESCALED)]
    assert len(rescaled) == 8
    for k, w in want.items():
        if k in rescaled:
            assert np.all(np.abs(got[k] - w) <= np.float32(2.0**-23) * np.abs(w)), k
        else:
            np.testing.assert_array_equal(got[k], w, err_msg=k)


@pytest.mark.parametrize("hw", [(64, 64), (32, 64)])
def test_same_image_features(d3b, hw):
    img = np.random.default_rng(7).integers(0, 256, (*hw, 3), dtype=np.uint8)
    want = _hf_image_features(d3b["orig"], img)
    got = _hf_image_features(d3b["back"], img)
    assert got.shape == want.shape == (hw[0] // 16 * (hw[1] // 16), 64)
    np.testing.assert_array_equal(got, want)


def test_same_audio_features(d3b):
    import torch
    from transformers.models.dots3_note.feature_extraction_dots3_note import (
        Dots3NoteFeatureExtractor,
    )

    inp = Dots3NoteFeatureExtractor()([_pcm(1.0)], sampling_rate=16000, return_tensors="pt")
    args = (inp["input_features"], inp["chunk_sample_lengths"])
    with torch.no_grad():
        want = d3b["orig"].model.get_audio_features(*args).pooler_output.numpy()
        got = d3b["back"].model.get_audio_features(*args).pooler_output.numpy()
    assert want.reshape(-1, 64).shape == (13, 64)
    np.testing.assert_array_equal(got, want)


def test_same_logits(d3b):
    """16 tokens: past the sliding window (8); the latent norms' ulp is the only gap."""
    import torch

    ids = torch.tensor([TOKENS])
    with torch.no_grad():
        want = d3b["orig"](input_ids=ids).logits.numpy()
        got = d3b["back"](input_ids=ids).logits.numpy()
    gap = float(np.abs(got - want).max())
    assert gap <= 2e-6 * float(np.abs(want).max()), gap


def test_config_is_the_hubs(d3b):
    """Every field of the Hub's config.json comes back with its value, except the BOS id
    (the GGUF's tokenizer keeps GPT-2's; the Hub's config has none); the only additions
    are the towers' model types, the dtype's transformers 5 spelling and values
    llama.cpp hard-codes (SiLU, no dynamic routing scale, no FP32 gating)."""
    want = json.loads((d3b["src"] / "config.json").read_text())
    got = json.loads((d3b["root"] / "back" / "config.json").read_text())
    extra = {"dtype", "hidden_act", "moe_gating_fp32", "use_dynamic_rsf"}
    assert set(got) - set(want) == extra
    assert set(want) - set(got) == set()
    for k in want:
        if k == "bos_token_id":
            assert want[k] is None and got[k] == 50256
        elif k in ("vision_config", "audio_config"):
            assert {f: v for f, v in got[k].items() if f != "model_type"} == want[k], k
        else:
            assert got[k] == want[k], k
    pre = (d3b["root"] / "back" / "preprocessor_config.json").read_text()
    assert json.loads(pre) == json.loads((d3b["src"] / "preprocessor_config.json").read_text())


def test_folder_converts_forward_again(d3b, tmp_path):
    """HF -> GGUF of our folder: our pair again, the rescaled norms bit for bit too
    (the ulp they lost does not come back in the GGUF)."""
    text, proj = convert_forward(d3b["root"] / "back", tmp_path)
    assert_same_gguf(text, d3b["root"] / "text-f32.gguf")
    assert_same_gguf(proj, d3b["root"] / "mmproj-f32.gguf")


def test_text_alone_refused_and_cli(d3b, tmp_path):
    """Without its projector the text GGUF has no HF class (refused by name, nothing
    written); with it, the CLI writes the folder of the library call."""
    from weightsmith.cli import main

    root = d3b["root"]
    with pytest.raises(E.UnknownArchitecture, match="dots3note"):
        gguf_to_hf(root / "text-f32.gguf", tmp_path / "alone")
    assert not (tmp_path / "alone").exists()
    out = tmp_path / "cli"
    rc = main(["convert", str(root / "text-f32.gguf"), str(out), "--mmproj",
               str(root / "mmproj-f32.gguf"), "--type", "f32", "--quiet"])  # fmt: skip
    assert rc == 0
    for name in ("model.safetensors", "config.json", "preprocessor_config.json"):
        assert (out / name).read_bytes() == (root / "back" / name).read_bytes(), name
