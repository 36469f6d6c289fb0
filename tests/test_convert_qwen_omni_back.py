"""GGUF -> HF of Qwen3-Omni MoE: our text GGUF (``qwen3vlmoe``) and projector GGUF (the
Qwen3-VL tower ``qwen3vl_merger`` and the audio encoder ``qwen3a`` in one clip file) back
into one ``Qwen3OmniMoeForConditionalGeneration`` folder with audio output off (the
thinker: no talker or code2wav, which neither GGUF keeps; transformers 5.24 then builds
none and needs no other file).

The tiny seeded thinker of tests/support/vlm_models.py (``qwen3omni``, float32, with
deepstack mergers), built once: original folder -> our f32 pair -> our folder, then

* transformers 5 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's bit for bit (the experts go back one tensor each,
  as the Hub's checkpoints keep them), except the audio tower's four convolutions,
  which the forward conversion stores F16 at every type (the original's f16 rounding);
* the image features (with the deepstack features), the audio features and the text
  logits of the model loaded from our folder equal the original's on the same inputs
  (gap 0; the audio features 4.1e-5 of their scale apart, from those F16 convolutions
  alone);
* converting our folder forward again gives the same GGUF pair;
* a projector without the ``qwen3a`` audio type is refused before anything is
  written; the CLI writes the library call's folder.
"""

from __future__ import annotations

import numpy as np
import pytest

from support.gguf_pair import assert_same_gguf, convert_forward
from support.hf_load import state_dicts
from support.vlm_models import build
from weightsmith.convert import gguf_to_hf, hf_to_gguf

#: the audio tower's convolutions: the reference (and ours) stores them F16 even at f32,
#: so from the f32 pair they come back as the original's f16 rounding
F16_ALWAYS = (*(f"audio_tower.conv2d{i}.weight" for i in (1, 2, 3)), "audio_tower.conv_out.weight")


@pytest.fixture(scope="module")
def omni(tmp_path_factory) -> dict:
    """The original folder, our f32 pair, our folder, and both models (float32)."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration as Omni

    root = tmp_path_factory.mktemp("omni_back")
    src = build("qwen3omni", root / "src", dtype="float32")
    text, proj = root / "text-f32.gguf", root / "mmproj-f32.gguf"
    hf_to_gguf(src, text, "f32", mmproj=proj)
    back = root / "back"
    gguf_to_hf(text, back, "f32", mmproj=proj)
    orig = Omni.from_pretrained(src, dtype=torch.float32).eval()
    ours, info = Omni.from_pretrained(back, dtype=torch.float32, output_loading_info=True)
    return {"root": root, "back": back, "text": text, "proj": proj, "orig": orig,
            "ours": ours.eval(), "info": info}  # fmt: skip


def test_loads_with_every_tensor(omni):
    got, want = state_dicts(omni["ours"], omni["info"], omni["orig"])
    assert any(".audio_tower." in k for k in want) and any(".visual.merger_list." in k
                                                          for k in want)  # fmt: skip
    for k, w in want.items():
        if k.endswith(F16_ALWAYS):  # stored F16 by the forward conversion at every type
            w = w.astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(got[k], w, err_msg=k)
    cfg = omni["ours"].config
    assert cfg.enable_audio_output is False and not omni["ours"].has_talker
    assert cfg.thinker_config.vision_config.deepstack_visual_indexes == [1, 2]


def _cat(f):
    import torch

    return torch.cat(list(f), 0) if isinstance(f, (list, tuple)) else f


def _outputs(model) -> list[np.ndarray]:
    """Image features (merged, then each deepstack merger's), audio features, logits."""
    import torch

    g = torch.Generator().manual_seed(0)
    v = model.config.thinker_config.vision_config
    n = v.in_channels * v.temporal_patch_size * v.patch_size**2
    px, thw = torch.randn(64, n, generator=g), torch.tensor([[1, 8, 8]])
    mel = torch.randn(1, 128, 200, generator=g)
    ids = torch.randint(0, 200, (1, 12), generator=g)
    t = model.thinker
    with torch.no_grad():
        img = t.get_image_features(pixel_values=px, image_grid_thw=thw)
        deep = [_cat(d) for d in img.deepstack_features]
        aud = t.get_audio_features(mel, feature_attention_mask=torch.ones(1, 200, dtype=torch.long))
        logits = t(input_ids=ids).logits
    return [x.numpy() for x in (_cat(img.pooler_output), *deep, _cat(aud.pooler_output), logits)]


def test_same_image_audio_features_and_logits(omni):
    """Gap 0 for the image and deepstack features and the logits; the audio features
    4.1e-5 of their scale apart (measured), from the F16 convolutions alone: the
    original with its convolutions rounded to f16 gives ours exactly."""
    import torch

    orig = omni["orig"]
    want, got = _outputs(orig), _outputs(omni["ours"])
    assert len(want) == 5 and want[0].shape == (16, 64) and want[3].shape == (26, 64)
    gaps = []
    for w, g in zip(want, got):
        assert g.shape == w.shape
        gaps.append(float(np.abs(g - w).max() / np.abs(w).max()))
    assert gaps[:3] == [0.0, 0.0, 0.0] and gaps[4] == 0.0
    assert 0.0 < gaps[3] <= 1e-4, gaps
    params = {k: p for k, p in orig.named_parameters() if k.endswith(F16_ALWAYS)}
    own = {k: p.detach().clone() for k, p in params.items()}
    try:
        with torch.no_grad():
            for p in params.values():
                p.copy_(p.half().float())
        np.testing.assert_array_equal(got[3], _outputs(orig)[3])
    finally:
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(own[k])


def test_folder_converts_forward_again(omni, tmp_path):
    text, proj = convert_forward(omni["back"], tmp_path)
    assert_same_gguf(text, omni["text"])
    assert_same_gguf(proj, omni["proj"])


def test_without_its_audio_type_is_refused(omni, tmp_path):
    """The pair is told from Qwen3-VL-MoE's by ``clip.audio.projector_type`` ``qwen3a``:
    without that row it is a Qwen3-VL-MoE projector with an audio encoder, which has no
    way back (refused naming the row, before anything is written)."""
    from weightsmith import errors as E
    from weightsmith.gguf import edit

    proj = edit(omni["proj"], remove=["clip.audio.projector_type"], out=tmp_path / "p.gguf")
    with pytest.raises(E.ProjectorMismatch) as ei:
        gguf_to_hf(omni["text"], tmp_path / "out", mmproj=proj)
    assert ei.value.field == "clip.has_audio_encoder"
    assert not (tmp_path / "out").exists()


def test_cli_converts_the_pair(omni, tmp_path):
    from weightsmith.cli import main

    assert main(["convert", str(omni["text"]), str(tmp_path / "cli"), "--type", "f32",
                 "--mmproj", str(omni["proj"])]) == 0  # fmt: skip
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (omni["back"] / name).read_bytes()
