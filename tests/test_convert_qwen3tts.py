"""Qwen3-TTS (``Qwen3TTSForConditionalGeneration``: remote code, no transformers 5.24
class) on a hand-built tiny checkpoint (:func:`support.qwen3tts_models.qwen3tts`).

* the ``qwen3tts`` text file (the talker) and the projector (``qwen3tts_spkenc`` speaker
  encoder + ``qwen3tts_gen`` code predictor and codec decoder) are the reference's
  (``convert_hf_to_gguf.py`` without and with ``--mmproj``) byte for byte at f32, f16,
  bf16 and q8_0; the text at q4_k_m / iq4_xs is the reference's f32 through
  ``llama_model_quantize``, byte for byte;
* llama.cpp (llama-cpp-python 0.3.36) runs our talker: its logits on the codec rows are
  transformers' ``Qwen3Model`` (the talker is a Qwen3 decoder; its M-RoPE sections are
  plain RoPE at text positions) on the same weights times ``codec_head``, -inf on the text
  rows;
* mtmd loads our projector with our text file and encodes 1 s of 24 kHz audio into the
  speaker embedding transformers' ``ECAPA_TimeDelayNet`` (Qwen2.5-Omni's speaker
  encoder: the same modules under the same names) gives on the Qwen3-TTS mel spectrogram;
* mtmd's ``GEN_CODE`` (the code predictor, greedy) gives the codes and the fed-back
  embedding of transformers' ``Qwen3Model`` run as the predictor on the same weights;
* no numeric oracle holds the whole model (remote code): the codec decoder is compared
  byte for byte only (mtmd's ``GEN_WAV`` hard-codes the real codec's sizes);
* GGUF -> HF is refused by name; a folder without the codec (``speech_tokenizer/``) is
  refused by name before any output.
"""

from __future__ import annotations

import numpy as np
import pytest

from support.gguf_pair import pair_jobs
from support.mtmd_ctx import mtmd_pair
from support.qwen3tts_models import qwen3tts
from test_convert_archs import QUANT_TYPES
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _reference, _same
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def pt(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3tts")
    src = qwen3tts(root / "q3tts-tiny")
    _reference(pair_jobs(src, root, TYPES))
    for t in QUANT_TYPES:  # the harness's llama-quantize types: llama.cpp's own on the f32
        _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{t}.gguf", t)
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t)
    return src


@pytest.mark.parametrize("t", TYPES + QUANT_TYPES)
def test_text_same_as_reference(pt, t):
    _same(pt.parent / f"ours-text-{t}.gguf", pt.parent / f"ref-text-{t}.gguf")


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(pt, t):
    _same(pt.parent / f"ours-mmproj-{t}.gguf", pt.parent / f"ref-mmproj-{t}.gguf")


def test_vocabulary(pt):
    """The text vocabulary, then the 3072 codec rows named after the talker's ids; the EOS
    the tokenizer's (it overwrites the codec EOS in place); the last 1024 ids suppressed
    but the codec EOS; no chat template."""
    from support.qwen3tts_models import N_CODEC, TALKER_IDS
    from weightsmith.gguf import read

    with read(pt.parent / "ours-text-f32.gguf") as g:
        md = dict(g.metadata)
    tokens = list(md["tokenizer.ggml.tokens"])
    n_text = len(tokens) - N_CODEC
    assert tokens[n_text + TALKER_IDS["codec_eos_token_id"]] == "<|codec_eos_token|>"
    assert tokens[n_text + 2055] == "<|codec_language_chinese|>"
    assert tokens[n_text + 3065] == "<|spk_vivian|>" and tokens[n_text + 7] == "<|codec_7|>"
    eos = n_text + TALKER_IDS["codec_eos_token_id"]
    assert list(md["tokenizer.ggml.suppress_tokens"]) == [
        i for i in range(len(tokens) - 1024, len(tokens)) if i != eos
    ]
    assert "tokenizer.chat_template" not in md


def _talker_logits(src, tokens: list[int]) -> np.ndarray:
    """transformers' Qwen3Model with the talker's layers, its embedding the text table
    through ``text_projection`` (torch's ops) with the codec table appended, its last
    hidden states times ``codec_head``."""
    import torch
    from safetensors.numpy import load_file
    from transformers import Qwen3Config, Qwen3Model

    from support.qwen3tts_models import DIM, FF, HEAD_DIM, HEADS, KV, LAYERS

    w = load_file(src / "model.safetensors")
    t = {k: torch.from_numpy(v) for k, v in w.items() if k.startswith("talker.")}
    f = torch.nn.functional
    p = "talker.text_projection.linear_fc"
    with torch.no_grad():
        h = f.silu(
            f.linear(t["talker.model.text_embedding.weight"], t[p + "1.weight"], t[p + "1.bias"])
        )
        text = f.linear(h, t[p + "2.weight"], t[p + "2.bias"])
    table = torch.cat([text, t["talker.model.codec_embedding.weight"]])
    cfg = Qwen3Config(vocab_size=table.shape[0], hidden_size=DIM, intermediate_size=FF,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=KV, head_dim=HEAD_DIM, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, max_position_embeddings=256)  # fmt: skip
    model = Qwen3Model(cfg).eval()
    sd = {k[len("talker.model.") :]: v for k, v in t.items()
          if k.startswith("talker.model.layers.") or k == "talker.model.norm.weight"}  # fmt: skip
    sd["embed_tokens.weight"] = table
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    with torch.no_grad():
        hs = model(input_ids=torch.tensor([tokens])).last_hidden_state[0]
        return (hs @ t["talker.codec_head.weight"].T).numpy()


def test_llama_cpp_runs_talker(pt):
    """llama.cpp's logits on our f32 text file: -inf on every text row, on the 3072 codec
    rows transformers' within 2e-5 of the scale (measured 5.8e-6: 2.4e-5 at scale 4.1); the
    prompt holds text and codec tokens."""
    import llama_cpp

    from support.qwen3tts_models import N_CODEC

    with_text = 49152  # the StarCoder vocabulary's size
    tokens = [5, 100, 7000, with_text + 2149, with_text + 5, with_text + 2055, 42]
    llm = llama_cpp.Llama(model_path=str(pt.parent / "ours-text-f32.gguf"), n_ctx=64,
                          n_threads=2, logits_all=True, verbose=False, type_k=0, type_v=0)  # fmt: skip
    try:
        assert llm.n_vocab() == with_text + N_CODEC
        llm.eval(tokens)
        got = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    finally:
        llm.close()
    assert np.isneginf(got[:, :with_text]).all()
    want = _talker_logits(pt, tokens)
    assert want.shape == (len(tokens), N_CODEC)
    err = float(np.abs(got[:, with_text:] - want).max() / np.abs(want).max())
    assert err < 2e-5, err


def _mel(pcm: np.ndarray) -> np.ndarray:
    """Qwen3-TTS's speaker-encoder front end (``mel_spectrogram``: 24 kHz, n_fft 1024,
    hop 256, Hann window, reflect padding of (n_fft - hop) / 2, no centring, magnitude with
    1e-9 under the root, 128 Slaney mel bands up to 12 kHz, log clamped at 1e-5):
    ``[frames, 128]``."""
    import torch
    from transformers.audio_utils import mel_filter_bank

    basis = mel_filter_bank(num_frequency_bins=513, num_mel_filters=128, min_frequency=0.0,
                            max_frequency=12000.0, sampling_rate=24000, norm="slaney",
                            mel_scale="slaney")  # fmt: skip
    y = torch.nn.functional.pad(torch.from_numpy(pcm)[None, None], (384, 384), mode="reflect")[0]
    spec = torch.stft(y, 1024, hop_length=256, win_length=1024, window=torch.hann_window(1024),
                      center=False, return_complex=True)  # fmt: skip
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.from_numpy(basis.T.astype(np.float32)) @ mag[0]
    return torch.log(torch.clamp(mel, min=1e-5)).T.numpy()


def _ecapa_embedding(src, pcm: np.ndarray) -> np.ndarray:
    import torch
    from safetensors.numpy import load_file
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniDiTConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import ECAPA_TimeDelayNet

    from support.qwen3tts_models import DIM, SPK_ATT, SPK_C, SPK_SE

    cfg = Qwen2_5OmniDiTConfig(mel_dim=128, enc_dim=DIM, enc_channels=[SPK_C] * 4 + [3 * SPK_C],
                               enc_kernel_sizes=[5, 3, 3, 3, 1], enc_dilations=[1, 2, 3, 4, 1],
                               enc_attention_channels=SPK_ATT, enc_res2net_scale=8,
                               enc_se_channels=SPK_SE)  # fmt: skip
    net = ECAPA_TimeDelayNet(cfg).eval()
    w = load_file(src / "model.safetensors")
    sd = {k[len("speaker_encoder.") :]: torch.from_numpy(v) for k, v in w.items()
          if k.startswith("speaker_encoder.")}  # fmt: skip
    net.load_state_dict(sd)
    with torch.no_grad():
        return net(torch.from_numpy(_mel(pcm))[None])[0].numpy()


def test_mtmd_speaker_encoder(pt):
    """mtmd (llama-cpp-python 0.3.36) loads our projector (both halves: it refuses a codec
    transformer of other than 8 layers) with our text file and encodes 1 s of 24 kHz audio
    into one speaker embedding: transformers' ECAPA-TDNN on the mel spectrogram, within
    1e-5 of the scale (measured 2.4e-7 at scale 1.6: mtmd's mel front end is the model's)."""
    from test_convert_mmproj import _mtmd_encode

    rng = np.random.default_rng(4)
    t = np.arange(24000) / 24000
    pcm = (0.4 * np.sin(2 * np.pi * 330 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )
    root = pt.parent
    got = _mtmd_encode(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _ecapa_embedding(pt, pcm)
    assert got.shape == (1, want.shape[0]), got.shape
    err = float(np.abs(got[0] - want).max() / np.abs(want).max())
    assert err < 1e-5, err


def test_gguf_to_hf_refused(pt, tmp_path):
    """No transformers class holds Qwen3-TTS: GGUF -> HF is refused by name."""
    from weightsmith.convert import gguf_to_hf

    with pytest.raises(E.UnknownArchitecture, match="qwen3tts"):
        gguf_to_hf(pt.parent / "ours-text-f32.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_missing_codec_refused(pt, tmp_path):
    """A folder without the codec's weights (the reference stops on a FileNotFoundError
    after writing nothing): named before any output; the text file alone converts."""
    import shutil

    src = tmp_path / "m"
    shutil.copytree(pt, src)
    (src / "speech_tokenizer" / "model.safetensors").unlink()
    with pytest.raises(E.MissingModelFile, match="speech_tokenizer"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert not list(tmp_path.glob("*.gguf"))


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [("hidden_act", "swish", "hidden_act"), ("codec_bos_id", 3072, "codec_bos_id")],
)
def test_bad_talker_config_refused(pt, tmp_path, field, value, named):
    """A talker config the reference stops on (an activation its fold does not know; a
    codec id past the codec rows: KeyError / IndexError): named, nothing written."""
    import json
    import shutil

    src = tmp_path / "m"
    shutil.copytree(pt, src, ignore=shutil.ignore_patterns("speech_tokenizer"))
    cfg = json.loads((src / "config.json").read_text())
    cfg["talker_config"][field] = value
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=named):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16")
    assert not list(tmp_path.glob("*.gguf"))


def test_cli_writes_both(pt, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""
    from weightsmith.cli._main import main

    dst = tmp_path / "a.gguf"
    assert main(["convert", str(pt), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert dst.read_bytes() == (pt.parent / "ref-text-q8_0.gguf").read_bytes()
    assert (tmp_path / "mmproj-a.gguf").read_bytes() == (
        pt.parent / "ref-mmproj-q8_0.gguf"
    ).read_bytes()


def _gen_code(root, h: np.ndarray, code0: int) -> tuple[np.ndarray, np.ndarray]:
    """mtmd's ``GEN_CODE`` through our f32 pair, greedy (``top_k`` 1): the 16 codes and the
    embedding fed back to the talker."""
    import ctypes

    from llama_cpp import mtmd_cpp

    with mtmd_pair(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", n_ctx=64) as (
        _llm,
        ctx,
    ):
        info = mtmd_cpp.mtmd_gen_audio_get_info(ctx)
        assert (info.type, info.sample_rate) == (mtmd_cpp.MTMD_GEN_AUDIO_TYPE_QWEN3TTS, 24000)
        inp = mtmd_cpp.mtmd_gen_inp_default(ctx)
        inp.type = mtmd_cpp.MTMD_GEN_PROCESS_TYPE_GEN_CODE
        buf = (ctypes.c_float * h.size).from_buffer_copy(h.astype(np.float32).tobytes())
        inp.embd = ctypes.cast(buf, ctypes.POINTER(ctypes.c_float))
        inp.code0, inp.top_k, inp.seed, inp.temp = code0, 1, 1, 1.0
        out = mtmd_cpp.mtmd_gen_out()
        assert mtmd_cpp.mtmd_gen_audio_process(ctx, ctypes.byref(inp), ctypes.byref(out)) == 0
        codes = np.ctypeslib.as_array(out.codes, shape=(out.n_codes,)).copy()
        embd = np.ctypeslib.as_array(out.embd, shape=(h.size,)).copy()
    return codes, embd


def test_mtmd_code_predictor(pt):
    """mtmd's ``GEN_CODE`` (the code predictor) through our projector, greedy: transformers'
    ``Qwen3Model`` with the predictor's layer(s) on ``small_to_mtp_projection`` of [the
    talker state, codebook-0 embedding of ``code0``, then each predicted code's embedding
    in its codebook], ``lm_head.g`` at step g, argmax: the same 15 codes, and the embedding
    fed back (the 16 codebook embeddings summed) within 1e-6 of the scale (measured 8.3e-8
    at scale 11.5: float32 sums).  (``GEN_WAV``,
    the codec decoder, is not run: mtmd 0.3.36 hard-codes the real codec's 512-wide,
    16-head transformer and aborts on a tiny one, measured: ``GGML_ASSERT(n_dims % 2 ==
    0)`` in its RoPE.)"""
    import torch
    from safetensors.numpy import load_file
    from transformers import Qwen3Config, Qwen3Model

    from support.qwen3tts_models import CP_DIM, CP_FF, CP_HEAD_DIM, CP_HEADS, CP_VOCAB, DIM

    h = np.random.default_rng(6).standard_normal(DIM).astype(np.float32)
    code0 = 2055
    codes, embd = _gen_code(pt.parent, h, code0)
    w = {k: torch.from_numpy(v) for k, v in load_file(pt / "model.safetensors").items()}
    cp = "talker.code_predictor."
    cfg = Qwen3Config(vocab_size=CP_VOCAB, hidden_size=CP_DIM, intermediate_size=CP_FF,
                      num_hidden_layers=1, num_attention_heads=CP_HEADS, num_key_value_heads=1,
                      head_dim=CP_HEAD_DIM, rms_norm_eps=1e-6, rope_theta=1000000.0,
                      max_position_embeddings=64)  # fmt: skip
    model = Qwen3Model(cfg).eval()
    sd = {k[len(cp + "model.") :]: v for k, v in w.items()
          if k.startswith(cp + "model.layers.") or k == cp + "model.norm.weight"}  # fmt: skip
    sd["embed_tokens.weight"] = torch.zeros(CP_VOCAB, CP_DIM)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    proj = lambda x: torch.nn.functional.linear(  # noqa: E731
        x, w[cp + "small_to_mtp_projection.weight"], w[cp + "small_to_mtp_projection.bias"]
    )
    rows = [torch.from_numpy(h), w["talker.model.codec_embedding.weight"][code0]]
    want = [code0]
    with torch.no_grad():
        for g in range(15):
            x = proj(torch.stack(rows))[None]
            last = model(inputs_embeds=x).last_hidden_state[0, -1]
            want.append(int(torch.argmax(w[f"{cp}lm_head.{g}.weight"] @ last)))
            rows.append(w[f"{cp}model.codec_embedding.{g}.weight"][want[-1]])
    assert codes.tolist() == want
    fed = rows[1] + sum(rows[2:])
    err = float(np.abs(embd - fed.numpy()).max() / np.abs(fed.numpy()).max())
    assert err < 1e-6, err


def test_half_precision_checkpoints(pt, tmp_path):
    """The Hub's checkpoints are bfloat16: the reference widens them to float32 before its
    fold (float16 stays float16, folded in float16 ops); ours folds the same values in the
    same dtype: the text file at f32 is the reference's byte for byte for both."""
    import shutil

    import ml_dtypes
    from safetensors.numpy import load_file, save_file

    w = load_file(pt / "model.safetensors")
    jobs = []
    for name, dt in (("bf16", ml_dtypes.bfloat16), ("f16", np.float16)):
        d = tmp_path / name
        shutil.copytree(pt, d, ignore=shutil.ignore_patterns("speech_tokenizer"))
        save_file({k: v.astype(dt) for k, v in w.items()}, str(d / "model.safetensors"))
        hf_to_gguf(d, tmp_path / f"ours-{name}.gguf", "f32")
        jobs.append([str(d), "--outfile", str(tmp_path / f"ref-{name}.gguf"), "--outtype", "f32"])
    _reference(jobs)
    for name in ("bf16", "f16"):
        _same(tmp_path / f"ours-{name}.gguf", tmp_path / f"ref-{name}.gguf")


_GEN_WAV = """
import ctypes, sys
import llama_cpp
from llama_cpp import mtmd_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, verbose=False)
params = mtmd_cpp.mtmd_context_params_default()
params.use_gpu, params.n_threads, params.print_timings = False, 2, False
ctx = mtmd_cpp.mtmd_init_from_file(sys.argv[2].encode(), llm.model, params)
codes = (ctypes.c_int32 * 16)(*([1] * 16))
inp = mtmd_cpp.mtmd_gen_inp_default(ctx)
inp.type = mtmd_cpp.MTMD_GEN_PROCESS_TYPE_GEN_WAV
inp.codes, inp.n_codes = ctypes.cast(codes, ctypes.POINTER(ctypes.c_int32)), 16
out = mtmd_cpp.mtmd_gen_out()
print("rc", mtmd_cpp.mtmd_gen_audio_process(ctx, ctypes.byref(inp), ctypes.byref(out)))
"""


def test_mtmd_codec_decoder_needs_the_real_sizes(pt):
    """Pinned: mtmd 0.3.36's ``GEN_WAV`` hard-codes the real codec's transformer (512
    wide, 16 heads) and aborts on the tiny one (in a child process: ggml's RoPE gets a
    1-wide head), so the codec decoder is checked byte for byte only."""
    import os
    import sys

    from support import pyfork

    root = pt.parent
    env = {**os.environ, "GGML_NO_BACKTRACE": "1"}  # no gdb attach on the abort
    r = pyfork.run([sys.executable, "-c", _GEN_WAV, str(root / "ours-text-f32.gguf"),
                    str(root / "ours-mmproj-f32.gguf")], env=env)  # fmt: skip
    assert r.returncode != 0 and "GGML_ASSERT(n_dims % 2 == 0)" in r.stderr, r.stderr[-2000:]
