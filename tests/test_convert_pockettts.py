"""PocketTTS in Kyutai's layout (the reference's ``PocketTTSModel``): the ``pockettts``
text file and the audio projector (``pockettts_spkenc`` + ``pockettts_gen``).

The tiny checkpoint (:func:`support.pockettts_models.pockettts_kyutai`) is seeded random
tensors of the shapes Kyutai's modules give, not transformers' models renamed:
transformers 5.24's ``PocketTTSForConditionalGeneration`` holds the backbone and flow
head but no Mimi codec, and its ``PocketTTSAudioTokenizer`` is a separate model of
another structure, so the one checkpoint file with both halves is written directly (no
``config.json``: the reference and ours derive the hyperparameters from the shapes).

* the projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32, f16,
  bf16 and q8_0;
* the text file is the reference's byte for byte, the embedding's last row (``bos_emb``
  through ``input_linear``) included: ours computes that dot product with torch's
  ``F.linear`` as the reference does (the order of torch's BLAS kernel for the machine);
  without torch, in float64 rounded once (2.4e-7 from torch's here, measured);
* llama.cpp (llama-cpp-python 0.3.36's ``pockettts``) runs our text file and its logits
  are transformers' ``PocketTTSModel`` backbone on the same weights (Q/K rows from
  Kyutai's interleaved RoPE pairs to transformers' halves; its learned BOS latent through
  ``audio_latent_proj`` at the ``<|audio_bos|>`` position) times the embedding;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text and runs both halves
  against transformers' modules on the same weights: the voice-prompt encoder (Mimi
  encoder + speaker projection: ``PocketTTSAudioTokenizer``'s encoder), the flow net
  (``GEN_CODE``: ``PocketTTSFlowHead``) and the Mimi decoder (``GEN_WAV``:
  ``PocketTTSAudioTokenizer.decode``);
* GGUF -> HF is refused by name (no transformers class loads Kyutai's layout).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from support.mtmd_ctx import mtmd_pair
from support.pockettts_models import pockettts_kyutai
from test_convert_archs import QUANT_TYPES
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


@pytest.fixture(scope="module")
def pt(tmp_path_factory):
    root = tmp_path_factory.mktemp("pockettts")
    src = pockettts_kyutai(root / "pocket-tiny")
    convert_both(src, root, text_types=TYPES)
    for t in QUANT_TYPES:  # the harness's llama-quantize types: llama.cpp's own on the f32
        _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{t}.gguf", t)
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t)
    return src


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(pt, t):
    _same(pt.parent / f"ours-mmproj-{t}.gguf", pt.parent / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", TYPES + QUANT_TYPES)
def test_text_same_as_reference(pt, t):
    """The whole file byte for byte, the folded ``audio_bos`` row of ``token_embd``
    included; the llama-quantize types against ``llama_model_quantize`` of the
    reference's f32 file."""
    from weightsmith.gguf import read

    _same(pt.parent / f"ours-text-{t}.gguf", pt.parent / f"ref-text-{t}.gguf")
    with read(pt.parent / f"ours-text-{t}.gguf") as g:
        md = dict(g.metadata)
    assert md["general.architecture"] == "pockettts" and md["tokenizer.ggml.model"] == "t5"
    tokens = list(md["tokenizer.ggml.tokens"])
    assert tokens[-3:] == ["<|pad|>", "<|bos_before_voice|>", "<|audio_bos|>"]


def test_audio_bos_row(pt, monkeypatch):
    """The last embedding row is ``input_linear(bos_emb)``: the reference's and ours are
    torch's ``F.linear`` (in this process, on this machine) bit for bit; without torch
    (the plain install) ours is that product summed in float64 and rounded once, within
    2.4e-7 of torch's (scale 3.1; 78 of 128 elements differ in the last bits, measured)."""
    import sys

    import torch
    from safetensors.numpy import load_file

    from weightsmith.convert.arch.pockettts import embedding_rows
    from weightsmith.gguf import read

    w = load_file(pt / "model.safetensors")
    emb, bos = w["flow_lm.conditioner.embed.weight"], w["flow_lm.bos_emb"]
    lin = w["flow_lm.input_linear.weight"]
    torch_row = torch.nn.functional.linear(torch.from_numpy(bos), torch.from_numpy(lin)).numpy()
    tables = {}
    for who in ("ours", "ref"):
        with read(pt.parent / f"{who}-text-f32.gguf") as g:
            tables[who] = np.array(g.numpy("token_embd.weight"))
    ours, ref = tables["ours"], tables["ref"]
    assert ours.shape == (emb.shape[0] + 2, emb.shape[1])
    assert np.array_equal(ours[: emb.shape[0]], emb)
    assert np.array_equal(ours[-2], w["flow_lm.bos_before_voice"].reshape(-1))
    assert np.array_equal(ref[-1], torch_row)
    assert np.array_equal(ours[-1], torch_row)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    plain = embedding_rows(w)[-1]
    exact = (lin.astype(np.float64) @ bos.astype(np.float64)).astype(np.float32)
    assert np.array_equal(plain, exact)
    assert not np.array_equal(plain, torch_row)  # the other path, really taken
    assert np.abs(plain - torch_row).max() <= 2.4e-7 * np.abs(torch_row).max()


def _hf_backbone_logits(src, tokens: list[int]) -> np.ndarray:
    """transformers' ``PocketTTSModel`` on the checkpoint's backbone, its last hidden
    states times the embedding (llama.cpp's logits: the table is its output too)."""
    import torch
    from safetensors.numpy import load_file
    from transformers import PocketTTSConfig
    from transformers.models.pocket_tts.modeling_pocket_tts import PocketTTSModel

    from support.pockettts_models import DIM, FF, LAYERS, LDIM

    w = load_file(src / "model.safetensors")
    heads, hd = DIM // 64, 64
    emb = w["flow_lm.conditioner.embed.weight"]
    n = emb.shape[0] + 2
    cfg = PocketTTSConfig(vocab_size=n, hidden_size=DIM, num_hidden_layers=LAYERS,
                          num_attention_heads=heads, num_key_value_heads=heads,
                          intermediate_size=FF, latent_dim=LDIM, audio_bos_token_id=n - 1,
                          audio_prompt_token_id=n - 4, audio_latent_token_id=n - 5,
                          audio_prompt_bos_token_id=n - 6, pad_token_id=3, rope_theta=10000.0,
                          layer_norm_eps=1e-5,
                          flow_head_config=dict(hidden_size=64, num_hidden_layers=2,
                                                condition_dim=DIM, frequency_embedding_size=64))  # fmt: skip
    model = PocketTTSModel(cfg).eval()

    def halves(x: np.ndarray) -> np.ndarray:  # Kyutai's interleaved RoPE pairs -> halves
        return x.reshape(heads, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(heads * hd, -1)

    table = np.concatenate([emb, w["flow_lm.bos_before_voice"].reshape(1, -1),
                            np.zeros((1, DIM), np.float32)])  # fmt: skip
    sd = {"embed_tokens.weight": table, "norm.weight": w["flow_lm.out_norm.weight"],
          "norm.bias": w["flow_lm.out_norm.bias"], "bos_latent": w["flow_lm.bos_emb"],
          "audio_latent_proj.weight": w["flow_lm.input_linear.weight"]}  # fmt: skip
    for i in range(LAYERS):
        p, o = f"flow_lm.transformer.layers.{i}.", f"layers.{i}."
        q, k, v = np.split(w[p + "self_attn.in_proj.weight"], 3)
        sd |= {o + "self_attn.q_proj.weight": halves(q), o + "self_attn.k_proj.weight": halves(k),
               o + "self_attn.v_proj.weight": v,
               o + "self_attn.o_proj.weight": w[p + "self_attn.out_proj.weight"],
               o + "mlp.fc1.weight": w[p + "linear1.weight"],
               o + "mlp.fc2.weight": w[p + "linear2.weight"]}  # fmt: skip
        for hf, ky in (("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2")):
            sd |= {f"{o}{hf}.{s}": w[f"{p}{ky}.{s}"] for s in ("weight", "bias")}
    missing, unexpected = model.load_state_dict(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False
    )
    assert missing == ["audio_prompt_proj.weight"] and not unexpected  # the voice path, unused
    with torch.no_grad():
        h = model(input_ids=torch.tensor([tokens])).last_hidden_state[0]
        out = table.copy()
        out[-1] = (model.audio_latent_proj(model.bos_latent)).numpy()
        return (h @ torch.from_numpy(out).T).numpy()


def test_llama_cpp_runs_ours(pt):
    """llama.cpp's logits on our f32 text file: transformers' within 1e-4 of the scale
    (measured 8.3e-5 at scale 83: ggml's tanh-GELU); the prompt holds both learned rows
    (``<|bos_before_voice|>``, ``<|audio_bos|>``)."""
    import llama_cpp

    tokens = [5, 17, 42, 9, 97, 63, 98, 30]
    llm = llama_cpp.Llama(model_path=str(pt.parent / "ours-text-f32.gguf"), n_ctx=64,
                          n_threads=2, logits_all=True, verbose=False, type_k=0, type_v=0)  # fmt: skip
    try:
        llm.eval(tokens)
        got = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    finally:
        llm.close()
    want = _hf_backbone_logits(pt, tokens)
    assert got.shape == want.shape == (len(tokens), 99)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, err


#: Kyutai's Mimi transformer layer names -> transformers' PocketTTSAudioTokenizer ones
_MIMI_NAMES = {"self_attn.out_proj.weight": "self_attn.o_proj.weight",
               "linear1.weight": "mlp.fc1.weight", "linear2.weight": "mlp.fc2.weight",
               "norm1.weight": "input_layernorm.weight", "norm1.bias": "input_layernorm.bias",
               "norm2.weight": "post_attention_layernorm.weight",
               "norm2.bias": "post_attention_layernorm.bias",
               "layer_scale_1.scale": "self_attn_layer_scale.scale",
               "layer_scale_2.scale": "mlp_layer_scale.scale"}  # fmt: skip


def _mimi_state_dict(w: dict, side: str, prefix: str) -> dict:
    """Kyutai's ``mimi.{side}oder`` SEANet and ``mimi.{side}oder_transformer`` under
    transformers' names (``prefix`` before them): ``model.N`` as ``layers.N``, the fused
    ``in_proj`` split with Q/K rows from interleaved RoPE pairs to halves."""
    from support.pockettts_models import MIMI

    heads, hd = MIMI // 64, 64

    def halves(x: np.ndarray) -> np.ndarray:
        return x.reshape(heads, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(heads * hd, -1)

    sd = {}
    seanet = rf"mimi\.{side}oder\.model\.(\d+)\.(block\.\d+\.)?(conv\.conv|convtr\.convtr)\.(\w+)"
    tfm = rf"mimi\.{side}oder_transformer\.transformer\.layers\.(\d+)\.(.+)"
    for k, v in w.items():
        if m := re.fullmatch(seanet, k):
            sd[f"{prefix}{side}oder_seanet.layers.{m[1]}.{m[2] or ''}conv.{m[4]}"] = v
        elif m := re.fullmatch(tfm, k):
            o = f"{prefix}{side}oder_transformer.layers.{m[1]}."
            if m[2] == "self_attn.in_proj.weight":
                q, kk, vv = np.split(v, 3)
                sd |= {o + "self_attn.q_proj.weight": halves(q),
                       o + "self_attn.k_proj.weight": halves(kk), o + "self_attn.v_proj.weight": vv}  # fmt: skip
            else:
                sd[o + _MIMI_NAMES[m[2]]] = v
    return sd


def _mimi(latent_dim: int):
    """A transformers ``PocketTTSAudioTokenizerModel`` of the tiny Mimi's sizes."""
    from transformers import PocketTTSAudioTokenizerConfig, PocketTTSAudioTokenizerModel

    from support.pockettts_models import FILTERS, MIMI, MIMI_FF, MIMI_LAYERS

    cfg = PocketTTSAudioTokenizerConfig(hidden_size=MIMI, num_filters=FILTERS,
                                        intermediate_size=MIMI_FF, num_attention_heads=MIMI // 64,
                                        num_key_value_heads=MIMI // 64,
                                        num_hidden_layers=MIMI_LAYERS, latent_dim=latent_dim,
                                        upsample_groups=MIMI)  # fmt: skip
    return PocketTTSAudioTokenizerModel(cfg).eval()


def _load(model, sd: dict) -> None:
    import torch

    missing, unexpected = model.load_state_dict(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False
    )
    assert not unexpected, unexpected
    return missing


def _hf_speaker_embeddings(src, pcm: np.ndarray) -> np.ndarray:
    """transformers' ``PocketTTSAudioTokenizer`` encoder (Kyutai's Mimi encoder under its
    names: the SEANet ``model.N`` convs as ``layers.N``, the transformer's fused
    ``in_proj`` split with Q/K rows from interleaved RoPE pairs to halves, the
    downsampling conv) on the checkpoint's weights, then ``flow_lm.speaker_proj_weight``
    (the reference's voice-prompt path; transformers has no such projection)."""
    import torch
    from safetensors.numpy import load_file

    from support.pockettts_models import MIMI

    w = load_file(src / "model.safetensors")
    # latent_dim = the width: Kyutai's downsampling conv keeps it (the codec's latent
    # projection is the decoder's quant_out, not read here)
    enc = _mimi(MIMI).encoder
    sd = _mimi_state_dict(w, "enc", "")
    sd["downsample.conv.weight"] = w["mimi.downsample.conv.conv.weight"]
    assert not _load(enc, sd)
    with torch.no_grad():
        x = enc(torch.from_numpy(pcm)[None, None]).latents[0].numpy()  # [width, T]
    return x.T @ w["flow_lm.speaker_proj_weight"].T


def test_mtmd_speaker_encoder(pt):
    """mtmd (llama-cpp-python 0.3.36) loads our projector with our text file and encodes
    0.96 s of 24 kHz audio (a whole number of 12.5 Hz frames) into 12 voice-prompt rows:
    transformers' Mimi encoder + the speaker projection within 2e-3 of the scale
    (measured 7.9e-4 at scale 1.44: the file's F16 conv kernels, ggml's F16 im2col).

    Not compared: a length that is not a whole number of frames (mtmd pads the last one
    with zeros on the right, transformers' downsampling conv replicates: the last row then
    differs by 0.52, the others agree)."""
    from pathlib import Path

    from test_convert_mmproj import _mtmd_encode

    root = Path(pt).parent
    rng = np.random.default_rng(3)
    t = np.arange(23040) / 24000
    pcm = (0.4 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )
    got = _mtmd_encode(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", None, pcm)
    want = _hf_speaker_embeddings(pt, pcm)
    assert got.shape == want.shape == (12, 128), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 2e-3, err


@pytest.fixture(scope="module")
def gen(pt) -> dict:
    """mtmd's generation half through our f32 pair: one ``GEN_CODE`` step (the flow net
    and the EOS head) on a seeded backbone state, with noise of std 1e-7 (``temp``
    1e-14: mtmd takes 0 for its default 0.7), then ``GEN_WAV`` (the Mimi decoder) on 12
    seeded latents.  GEN_CODE goes first: a first GEN_WAV call aborts in mtmd 0.3.36's
    warm-up (it builds that call's graph from a 1 x 1 placeholder, which the flow-net
    half reshapes to the text width: ``GGML_ASSERT`` in ``ggml_reshape_2d``)."""
    import ctypes

    from llama_cpp import mtmd_cpp

    from support.pockettts_models import DIM, LDIM

    root = pt.parent
    out: dict = {"h": np.random.default_rng(7).standard_normal(DIM).astype(np.float32),
                 "feats": np.random.default_rng(5).standard_normal((12, LDIM)).astype(np.float32)}  # fmt: skip
    with mtmd_pair(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", n_ctx=256) as (
        _llm,
        ctx,
    ):
        info = mtmd_cpp.mtmd_gen_audio_get_info(ctx)
        out["info"] = (info.type, info.sample_rate, info.model_variant)
        code = mtmd_cpp.mtmd_gen_inp_default(ctx)
        code.type = mtmd_cpp.MTMD_GEN_PROCESS_TYPE_GEN_CODE
        h = (ctypes.c_float * DIM).from_buffer_copy(out["h"].tobytes())
        code.embd = ctypes.cast(h, ctypes.POINTER(ctypes.c_float))
        code.temp, code.seed = 1e-14, 1
        res = mtmd_cpp.mtmd_gen_out()
        assert mtmd_cpp.mtmd_gen_audio_process(ctx, ctypes.byref(code), ctypes.byref(res)) == 0
        out["latent"] = np.ctypeslib.as_array(res.feats, shape=(res.n_feats,)).copy()
        out["embd"] = np.ctypeslib.as_array(res.embd, shape=(DIM,)).copy()
        out["eos"] = bool(res.is_eos)
        feats = out["feats"]
        inp = mtmd_cpp.mtmd_gen_inp_default(ctx)
        inp.type = mtmd_cpp.MTMD_GEN_PROCESS_TYPE_GEN_WAV
        buf = (ctypes.c_float * feats.size).from_buffer_copy(feats.tobytes())
        inp.feats, inp.n_feats = ctypes.cast(buf, ctypes.POINTER(ctypes.c_float)), feats.size
        res = mtmd_cpp.mtmd_gen_out()
        assert mtmd_cpp.mtmd_gen_audio_process(ctx, ctypes.byref(inp), ctypes.byref(res)) == 0
        out["pcm"] = np.ctypeslib.as_array(res.audio, shape=(res.n_samples,)).copy()
    return out


def test_mtmd_flow_net(pt, gen):
    """mtmd's ``GEN_CODE`` through our projector: the flow net's one LSD step from
    (nearly) zero noise is transformers' ``PocketTTSFlowHead`` (Kyutai's ``flow_net``
    under its names) at times 0 -> 1 on the same backbone state, within 1.7e-6 at scale
    2.7 (asserted 1e-5 of scale); the returned embedding is ``input_linear`` of it; the
    EOS flag is ``out_eos(h) > -4`` (mtmd's threshold)."""
    import torch
    from safetensors.numpy import load_file
    from transformers.models.pocket_tts.configuration_pocket_tts import PocketTTSFlowHeadConfig
    from transformers.models.pocket_tts.modeling_pocket_tts import PocketTTSFlowHead

    from support.pockettts_models import DIM, FLOW, FLOW_DEPTH, LDIM

    w = load_file(pt / "model.safetensors")
    n = "flow_lm.flow_net."
    sd = {}
    for hf, ky in (("input_proj", "input_proj"), ("cond_proj", "cond_embed"),
                   ("final_layer.adaln_proj", "final_layer.adaLN_modulation.1"),
                   ("final_layer.proj", "final_layer.linear")):  # fmt: skip
        sd |= {f"{hf}.{s}": w[f"{n}{ky}.{s}"] for s in ("weight", "bias")}
    for i in range(2):
        t, o = f"{n}time_embed.{i}.", f"timestep_embeddings.{i}."
        sd |= {o + "freqs": w[t + "freqs"], o + "norm.weight": w[t + "mlp.3.alpha"]}
        sd |= {f"{o}fc{j}.{s}": w[f"{t}mlp.{k}.{s}"] for j, k in ((1, 0), (2, 2))
               for s in ("weight", "bias")}  # fmt: skip
    for i in range(FLOW_DEPTH):
        r = f"{n}res_blocks.{i}."
        for hf, ky in (("norm", "in_ln"), ("fc1", "mlp.0"), ("fc2", "mlp.2"),
                       ("adaln_proj", "adaLN_modulation.1")):  # fmt: skip
            sd |= {f"layers.{i}.{hf}.{s}": w[f"{r}{ky}.{s}"] for s in ("weight", "bias")}
    cfg = PocketTTSFlowHeadConfig(hidden_size=FLOW, num_hidden_layers=FLOW_DEPTH,
                                  condition_dim=DIM, frequency_embedding_size=FLOW,
                                  latent_dim=LDIM)  # fmt: skip
    head = PocketTTSFlowHead(cfg).eval()
    head.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})
    with torch.no_grad():
        want = head(torch.zeros(1, LDIM), torch.from_numpy(gen["h"])[None],
                    [torch.zeros(1, 1), torch.ones(1, 1)])[0].numpy()  # fmt: skip
    got = gen["latent"]
    assert got.shape == want.shape == (LDIM,)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, err
    lin = w["flow_lm.input_linear.weight"]
    assert np.abs(gen["embd"] - lin @ got).max() <= 1e-5 * np.abs(lin @ got).max()
    score = float((w["flow_lm.out_eos.weight"] @ gen["h"] + w["flow_lm.out_eos.bias"])[0])
    assert gen["eos"] == (score > -4.0), score


def test_mtmd_mimi_decoder(pt, gen):
    """mtmd reports a PocketTTS generation model (24 kHz, variant = the folder's name) and
    its ``GEN_WAV`` decodes 12 latents through our projector's Mimi decoder into 23,040
    samples (0.96 s), as transformers' ``PocketTTSAudioTokenizer.decode`` (latent
    projection, depthwise upsampling, transformer, SEANet decoder) on the latents
    denormalised by ``emb_std`` / ``emb_mean``: within 2e-3 of the scale (measured
    1.07e-3 at 1.0: the F16 conv kernels)."""
    import torch
    from llama_cpp import mtmd_cpp
    from safetensors.numpy import load_file

    from support.pockettts_models import LDIM

    w = load_file(pt / "model.safetensors")
    assert gen["info"] == (mtmd_cpp.MTMD_GEN_AUDIO_TYPE_POCKETTTS, 24000, pt.name.encode())
    model = _mimi(LDIM)
    sd = _mimi_state_dict(w, "dec", "decoder.")
    sd["latent_proj.weight"] = w["mimi.quantizer.output_proj.weight"]
    sd["decoder.upsample.conv.weight"] = w["mimi.upsample.convtr.convtr.weight"]
    assert all(k.startswith("encoder.") for k in _load(model, sd))
    latents = gen["feats"] * w["flow_lm.emb_std"] + w["flow_lm.emb_mean"]
    with torch.no_grad():
        want = model.decode(torch.from_numpy(latents)[None]).audio_values[0, 0].numpy()
    got = gen["pcm"]
    assert got.shape == want.shape == (12 * 1920,), (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 2e-3, err


def test_cli_writes_both(pt, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's projector, our text."""
    from weightsmith.cli._main import main

    dst = tmp_path / "a.gguf"
    assert main(["convert", str(pt), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    assert (tmp_path / "mmproj-a.gguf").read_bytes() == (
        pt.parent / "ref-mmproj-q8_0.gguf"
    ).read_bytes()
    assert dst.read_bytes() == (pt.parent / "ours-text-q8_0.gguf").read_bytes()


def test_gguf_to_hf_refused(pt, tmp_path):
    """No transformers class loads Kyutai's layout: GGUF -> HF is refused by name."""
    from weightsmith.convert import gguf_to_hf

    with pytest.raises(E.UnknownArchitecture, match="pockettts"):
        gguf_to_hf(pt.parent / "ours-text-f32.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_missing_shape_tensor_refused(pt, tmp_path):
    """A checkpoint without a tensor the hyperparameters are read from (the reference
    stops on a KeyError): named, nothing written."""
    from safetensors.numpy import load_file, save_file

    src = tmp_path / "m"
    src.mkdir()
    w = load_file(pt / "model.safetensors")
    del w["mimi.encoder_transformer.transformer.layers.0.linear1.weight"]
    save_file(w, str(src / "model.safetensors"))
    (src / "tokenizer.model").write_bytes((pt / "tokenizer.model").read_bytes())
    with pytest.raises(E.MissingModelFile, match=r"encoder_transformer\.transformer\.layers\.0"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert not list(tmp_path.glob("*.gguf"))
