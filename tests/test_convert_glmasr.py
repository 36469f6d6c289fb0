"""GLM-ASR in the layout the pinned converter reads (``GlmasrModel``, GLM-ASR-Nano-2512's
older custom-code checkpoint) against llama.cpp's converter and runtime, on a hand-built
tiny checkpoint (tests/support/glmasr_models.py).

There is no transformers class for this layout (transformers 5.24's
``GlmAsrForConditionalGeneration`` is the Hub's later one, refused by both converters:
tests/test_convert_whisper_audio.py), so no whole-model numeric oracle.  What replaces
it: the reference's files, llama.cpp running ours, transformers' Llama over the text
weights, and transformers' Whisper encoder under our torch statement of mtmd's ``glma``
adapter.  Checked:

* ``convert --mmproj``: the text (``llama``, GLM Edge's vocabulary) and the projector
  (``clip``, projector type ``glma``) byte-identical to ``convert_hf_to_gguf.py``'s at f32,
  f16, bf16 and q8_0 (one reference launch); q4_k_m / iq4_xs the text is
  ``llama_model_quantize`` of our f32 byte for byte;
* llama.cpp's logits on our text equal transformers' Llama over ``model.*`` / ``lm_head``;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text and encodes 1 s of
  audio exactly as through the reference's pair, and into transformers' Whisper encoder
  followed by the adapter as mtmd's graph states it (LayerNorm, frames stacked by
  ``merge_factor``, Linear, GELU, Linear, begin / end rows around);
* GGUF -> HF of the pair is refused by name (no HF class holds it), nothing written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.gguf_pair import pair_jobs
from support.glmasr_models import glmasr_custom
from test_convert_archs import _llama_logits_f32_kv
from test_convert_gemma4_audio import SAMPLE_RATE, _pcm
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _mtmd_embeddings, _reference, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf

QUANTS = ["q4_k_m", "iq4_xs"]


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    """The folder; the reference's pair at each type and ours (``ref-`` / ``ours-{text,
    mmproj}-T``); our quantized texts and llama_model_quantize's of our f32 (``lq-``)."""
    from weightsmith.convert import hf_to_gguf

    root = tmp_path_factory.mktemp("glmasr")
    src = glmasr_custom(root / "glm-asr-tiny")
    _reference(pair_jobs(src, root, TYPES))
    for q in QUANTS:
        hf_to_gguf(src, root / f"ours-text-{q}.gguf", q)
        _llama_quantize(root / "ours-text-f32.gguf", root / f"lq-text-{q}.gguf", q)
    return src, root


@pytest.mark.parametrize("part", ["text", "mmproj"])
@pytest.mark.parametrize("t", TYPES)
def test_same_as_reference(glm, t, part):
    _, root = glm
    _same(root / f"ours-{part}-{t}.gguf", root / f"ref-{part}-{t}.gguf")


@pytest.mark.parametrize("q", QUANTS)
def test_text_same_as_llama_quantize(glm, q):
    _, root = glm
    _same(root / f"ours-text-{q}.gguf", root / f"lq-text-{q}.gguf")


def test_contents(glm):
    """Guard against a vacuous pass: GLM Edge's vocabulary on a llama text; the glma
    rows and tensors (stack factor, pre-norm with bias, begin / end rows F32)."""
    from weightsmith.gguf import read

    _, root = glm
    with read(root / "ours-text-q8_0.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "llama"
        assert md["tokenizer.ggml.model"] == "gpt2"
        tokens = md["tokenizer.ggml.tokens"]
        assert tokens[md["tokenizer.ggml.eot_token_id"]] == "<|user|>"
        assert tokens[md["tokenizer.ggml.bos_token_id"]] == "<|endoftext|>"
        assert not any(t.name.startswith(("a.", "mm.", "v.")) for t in f.tensors)
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "glma" and md["clip.has_audio_encoder"]
    assert md["clip.audio.projector.stack_factor"] == 4
    assert types["v.boi"] == ("F32", (256,)) and types["v.eoi"] == ("F32", (256,))
    assert types["mm.a.norm_pre.bias"] == ("F32", (64,))
    assert types["mm.a.mlp.1.weight"] == ("Q8_0", (96, 256))
    assert types["mm.a.mlp.2.weight"] == ("Q8_0", (256, 96))
    assert types["a.conv1d.1.weight"][0] == "F16" and types["a.position_embd.weight"][0] == "F32"


def test_cli_writes_the_pair(glm, tmp_path):
    from weightsmith.cli._main import main

    src, root = glm
    dst = tmp_path / "glm-asr.gguf"
    assert main(["convert", str(src), str(dst), "--type", "bf16", "--mmproj", "--quiet"]) == 0
    assert dst.read_bytes() == (root / "ref-text-bf16.gguf").read_bytes()
    assert (tmp_path / "mmproj-glm-asr.gguf").read_bytes() == (
        root / "ref-mmproj-bf16.gguf"
    ).read_bytes()


def test_text_logits(glm):
    """llama.cpp on our f32 text against transformers' Llama over the text weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    src, root = glm
    cfg = json.loads((src / "config.json").read_text())["lm_config"]
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    sd = load_file(src / "model.safetensors")
    model.load_state_dict({k: v.float() for k, v in sd.items() if not k.startswith("audio_")})
    tokens = [1, 5, 17, 42, 99, 7, 300, 11]
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].numpy()
    got = _llama_logits_f32_kv(root / "ours-text-f32.gguf", tokens)
    scale = max(float(np.abs(want).max()), 1.0)
    assert float(np.abs(got - want).max()) <= 2e-3 * scale


def _glma_features(folder, pcm: np.ndarray) -> np.ndarray:
    """transformers' Whisper encoder (its feature extractor's mel) over
    ``audio_encoder.whisper.*`` -- the oracle for the tower -- then our torch statement
    of the adapter as mtmd's ``glma`` graph computes it: LayerNorm (eps 1e-5), frames
    stacked by ``merge_factor``, Linear, GELU, Linear, the begin / end rows around."""
    import torch
    from safetensors.torch import load_file
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = json.loads((folder / "config.json").read_text())
    sd = {k: v.float() for k, v in load_file(folder / "model.safetensors").items()}
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=SAMPLE_RATE)
    feats = fe([pcm], sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_features"]
    enc = WhisperEncoder(WhisperConfig(**cfg["whisper_config"])).eval()
    tower = "audio_encoder.whisper."
    enc.load_state_dict({k[len(tower) :]: v for k, v in sd.items() if k.startswith(tower)})
    a = "audio_encoder."
    with torch.no_grad():
        h = enc(feats).last_hidden_state[0]
        h = torch.nn.functional.layer_norm(
            h, h.shape[-1:], sd[a + "layer_norm.weight"], sd[a + "layer_norm.bias"], 1e-5
        )
        h = h.reshape(-1, h.shape[-1] * cfg["merge_factor"])
        h = torch.nn.functional.linear(h, sd[a + "adapting.0.weight"], sd[a + "adapting.0.bias"])
        h = torch.nn.functional.gelu(h)
        h = torch.nn.functional.linear(h, sd[a + "adapting.2.weight"], sd[a + "adapting.2.bias"])
        be = sd[a + "audio_bos_eos_token.weight"]
        return torch.cat([be[:1], h, be[1:]]).numpy()


def test_mtmd_encodes_audio(glm):
    """mtmd loads our pair and encodes 1 s of audio: 375 frames + begin / end = 377 rows,
    exactly as through the reference's pair, and within 1e-3 of the scale (measured 1.7e-4) of the
    transformers Whisper tower + the adapter above."""
    src, root = glm
    pcm = _pcm(1.0)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    ref = _mtmd_embeddings(root / "ref-text-f32.gguf", root / "ref-mmproj-f32.gguf", None, pcm)
    assert np.array_equal(got, ref)
    want = _glma_features(src, pcm)
    assert got.shape == want.shape == (377, 256), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-3, err


def test_gguf_to_hf_refused(glm, tmp_path):
    """No HF class holds this layout (transformers' GlmAsr is the other one): the pair is
    refused by its projector type before anything is written."""
    _, root = glm
    dst = tmp_path / "back"
    with pytest.raises(E.ProjectorMismatch, match="found 'glma' with a 'llama' text model"):
        gguf_to_hf(root / "ours-text-f32.gguf", dst, mmproj=root / "ours-mmproj-f32.gguf")
    assert not dst.exists()


def test_adapter_proj_refused(glm, tmp_path):
    """An ``audio_encoder.proj`` tensor: the reference renames it to a name gguf-py cannot
    map (its skip of it never matches; measured by hand: "Can not map tensor
    'audio.multi_modal_projector.proj.bias'"), so no file to match; ours refuses it by
    name before writing either file."""
    import torch
    from safetensors.torch import load_file, save_file

    from weightsmith.convert import hf_to_gguf

    src, _ = glm
    dst = tmp_path / "glm-asr-tiny"
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).symlink_to(f)
    sd = load_file(src / "model.safetensors")
    sd["audio_encoder.proj.weight"] = torch.zeros(4, 4, dtype=torch.bfloat16)
    save_file(sd, dst / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(E.UnmappedTensor, match=r"audio_encoder\.proj\.weight"):
        hf_to_gguf(dst, tmp_path / "t.gguf", "f32", mmproj=tmp_path / "p.gguf")
    assert not list(tmp_path.glob("*.gguf"))
