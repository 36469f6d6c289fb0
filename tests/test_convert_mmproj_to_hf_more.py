"""GGUF -> HF of more vision-language models (tests/test_convert_mmproj_to_hf.py does the
first families): MiniCPM-V 4.6, EXAONE 4.5 and Kimi-K2.5 back into their
``*ForConditionalGeneration`` folders; Janus-Pro refused.

For each tiny random VLM (the forward tests' builders, float32, built once per module):
original folder -> our GGUF pair (f32; EXAONE 4.5 also f16) -> our HF folder, then

* transformers 5.24 loads the folder with no missing, unexpected or mismatched keys;
* every tensor equals the original's bit for bit from the f32 pair, except MiniCPM-V
  4.6's Qwen3.5 text (its RMS norms stored ``+ 1`` and ``A_log`` as ``-exp``: within
  1 ulp, as Qwen3.5's own round trip); from the f16 pair, at most the f16 rounding apart;
* the vision config is the original's (the values GGUF does not keep are transformers'
  defaults, which the tiny models use); the image processor gives the original's pixels;
* the image features and the text logits of the model loaded from our folder equal
  the original's on the same inputs;
* converting our folder forward again gives the same GGUF pair;
* Janus-Pro (whose image-generation half neither GGUF keeps) and a MiniCPM-V 4.6
  projector in ``4x`` mode (no window merger, which transformers' tower always builds)
  are named errors before anything is written.
"""

from __future__ import annotations

import pytest

from support.vlm_models import build
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf


def test_janus_refused(tmp_path):
    """Janus-Pro: JanusForConditionalGeneration always builds the image-generation half
    (VQ-VAE, generation embeddings / aligner / head), and neither GGUF holds it (the pair
    holds exactly the other tensors): refused by projector type, nothing written."""
    from safetensors import safe_open

    from weightsmith.gguf import read

    src = build("janus", tmp_path / "janus", dtype="float32")
    text, proj = tmp_path / "text.gguf", tmp_path / "mmproj.gguf"
    hf_to_gguf(src, text, "f32", mmproj=proj)
    with safe_open(src / "model.safetensors", "np") as f:
        names = list(f.keys())
    gen = [k for k in names if k.startswith(("model.vqmodel.", "model.generation_"))]
    assert gen  # the generation half is in the checkpoint (and in transformers' class) ...
    with read(text) as a, read(proj) as b:  # ... and not in the pair
        assert len(a.tensors) + len(b.tensors) == len(names) - len(gen)
    out = tmp_path / "out"
    with pytest.raises(E.ProjectorMismatch, match="image-generation") as ei:
        gguf_to_hf(text, out, mmproj=proj)
    assert ei.value.field == "clip.projector_type"
    assert not out.exists()
