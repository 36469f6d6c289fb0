"""CogVLM (``CogVLMForCausalLM``, remote code on the Hub) against llama.cpp's converter and
runtime, on a hand-built tiny checkpoint (tests/support/cogvlm_models.py).

There is no numeric oracle for the whole model: transformers 5.24 has no CogVLM class
and the remote code is not run.  What replaces it: the reference's files, llama.cpp
running ours, and, for the text, transformers' Llama over each expert's weights (with
only text tokens CogVLM's language expert *is* a Llama with fused QKV and NeoX RoPE;
llama.cpp feeds image embeddings through the visual expert, the same Llama over the
visual expert's weights).  Checked:

* the projector (``clip``, projector type ``cogvlm``) is ``convert_hf_to_gguf.py
  --mmproj``'s byte for byte at f32, f16, bf16 and q8_0; mtmd (llama-cpp-python 0.3.36)
  loads ours with our text and encodes an image exactly as through the reference's,
  into our torch reading of the remote vision code as llama.cpp's graph computes it (the
  remote code's own features differ: two runtime gaps, pinned);
* the text: the reference cannot write a file llama.cpp loads (pinned below: a
  ``KeyError`` on the Hub's config, and with ``num_key_value_heads`` added a file without
  the visual expert, which llama.cpp refuses).  Ours is, on that config, the
  reference's file plus the ten visual-expert tensors (every other key, tensor and data
  byte equal; ``general.size_label`` counts them) at f32, f16, bf16 and q8_0; on the
  Hub's config the same without the ``head_count_kv`` row;
* q4_k_m and iq4_xs: ours is ``llama_model_quantize`` of our f32 byte for byte, and its
  tensors shared with the reference's are those of ``llama_model_quantize`` of the
  reference's f32;
* llama.cpp's logits on our text equal transformers' Llama over the language expert
  (tokens) and over the visual expert (embeddings) within 2e-3 of their scale;
* CogVLM2 (grouped-query attention) and GGUF -> HF are refused by name, nothing written;
  so is a folder without an image processor file or a tokenizer (the Hub's has neither).
"""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

from support.cogvlm_models import TEXT, cogvlm, image_features
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same
from test_convert_step35 import _reference
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANTS = ["q4_k_m", "iq4_xs"]
TOKENS = [1, 5, 9, 17, 33, 65, 129, 257, 400]
#: llama.cpp vs transformers, as a fraction of the logits' scale
TOL = 2e-3
VISEXP = ("vis_attn_qkv", "vis_attn_output", "vis_gate", "vis_up", "vis_down")


def _is_visexp(name: str) -> bool:
    return name.startswith("blk.") and name.split(".")[2] in VISEXP


def _with_config(src, dst, **changes):
    """``src`` in ``dst`` (files linked) with config.json fields changed."""
    _without(src, dst, "config.json")
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _without(src, dst, name: str):
    """``src`` in ``dst`` (files linked) without the file ``name``."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != name:
            (dst / f.name).symlink_to(f)
    return dst


@pytest.fixture(scope="module")
def cog(tmp_path_factory):
    """The Hub-layout folder ``hub`` and ``kv`` (the same with ``num_key_value_heads``);
    the reference's projectors (``ref-mmproj-T``) and texts of ``kv`` (``ref-kv-T``, the
    quantized ones through llama_model_quantize), its answer on ``hub``'s text; ours
    (``ours-text-T`` / ``ours-mmproj-T`` of ``hub``, ``ours-kv-T``)."""
    root = tmp_path_factory.mktemp("cogvlm")
    # one folder name: general.name is the folder's
    src = cogvlm(root / "hub" / "cogvlm-tiny")
    kv = _with_config(
        src, root / "kv" / "cogvlm-tiny", num_key_value_heads=TEXT["num_attention_heads"]
    )
    jobs = []
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        jobs.append([str(kv), "--outfile", str(root / f"ref-kv-{t}.gguf"), "--outtype", t])
    jobs.append([str(src), "--outfile", str(root / "ref-hub-f16.gguf"), "--outtype", "f16"])
    bare = _without(src, root / "bare" / "cogvlm-tiny", "preprocessor_config.json")
    jobs.append([str(bare), "--outfile", str(root / "ref-bare.gguf"), "--outtype", "f16",
                 "--mmproj"])  # fmt: skip
    r = _reference(jobs, None)
    lines = r.stdout.splitlines()[-len(jobs) :]
    assert lines[:-2] == ["ok"] * (len(jobs) - 2), r.stdout[-2000:] + r.stderr[-3000:]
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
        hf_to_gguf(kv, root / f"ours-kv-{t}.gguf", t)
    for q in QUANTS:
        hf_to_gguf(src, root / f"ours-text-{q}.gguf", q)
        hf_to_gguf(kv, root / f"ours-kv-{q}.gguf", q)
        _llama_quantize(root / "ours-text-f32.gguf", root / f"lq-text-{q}.gguf", q)
        _llama_quantize(root / "ref-kv-f32.gguf", root / f"ref-kv-{q}.gguf", q)
    return root, lines[-2:]


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(cog, t):
    root, _ = cog
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")


def _plus_visual_expert(ours, ref, missing_key=None):
    """``ours`` is ``ref`` with the visual expert's tensors (each layer's five) added at
    their read place: the same keys in order (``missing_key`` aside) and values but the
    size label, the same other tensors (name, type, shape, data) in order."""
    from support import gguf_c_reader

    ko, to = gguf_c_reader.read(ours)
    kr, tr = gguf_c_reader.read(ref)
    assert list(ko) == [k for k in kr if k != missing_key]
    assert [k for k in ko if ko[k] != kr[k]] == ["general.size_label"]
    added = [x for x in to if _is_visexp(x[0])]
    assert len(added) == len(VISEXP) * TEXT["num_hidden_layers"]
    assert not any(_is_visexp(x[0]) for x in tr)
    rest = [x for x in to if x not in added]
    assert [x[:3] for x in rest] == [x[:3] for x in tr]
    for a, b in zip(rest, tr):
        assert a[3] == b[3], f"{a[0]} data differs"


@pytest.mark.parametrize("t", [*TYPES, *QUANTS])
def test_text_is_reference_plus_visual_expert(cog, t):
    root, _ = cog
    _plus_visual_expert(root / f"ours-kv-{t}.gguf", root / f"ref-kv-{t}.gguf")
    if t in TYPES:  # the Hub's config: no head_count_kv row, else the same file
        _plus_visual_expert(root / f"ours-text-{t}.gguf", root / f"ref-kv-{t}.gguf",
                            "cogvlm.attention.head_count_kv")  # fmt: skip


@pytest.mark.parametrize("q", QUANTS)
def test_text_same_as_llama_quantize(cog, q):
    root, _ = cog
    _same(root / f"ours-text-{q}.gguf", root / f"lq-text-{q}.gguf")


def test_contents(cog):
    """Guard against a vacuous pass: the visual expert quantized beside the language
    expert, the projector's GLU at the text's widths, the begin / end rows F32."""
    from weightsmith.gguf import read

    root, _ = cog
    with read(root / "ours-text-q4_k_m.gguf") as f:
        assert f.metadata["general.architecture"] == "cogvlm"
        assert "cogvlm.attention.head_count_kv" not in f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    h, ff = TEXT["hidden_size"], TEXT["intermediate_size"]
    for e in ("attn_qkv", "vis_attn_qkv"):
        assert types[f"blk.1.{e}.weight"][1] == (3 * h, h)
        assert types[f"blk.1.{e}.weight"][0] not in ("F32", "F16")
    assert types["blk.0.vis_down.weight"][1] == (h, ff)
    with read(root / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        ptypes = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "cogvlm"
    assert ptypes["mm.up.weight"] == ("Q8_0", (ff, h)) and ptypes["mm.down.weight"][1] == (h, ff)
    assert ptypes["mm.post_fc_norm.weight"] == ("F32", (h,))
    assert ptypes["v.boi"][0] == "F32" and ptypes["v.class_embd"][0] == "F32"


def test_reference_text_cannot_run(cog):
    """Pinned: on the Hub's config the reference stops (``num_key_value_heads`` read
    without a default), writing nothing; with it, it drops the visual expert (its text
    filter takes ``vision_`` for a vision tower) and llama.cpp refuses that file."""
    import llama_cpp

    root, (answer, _) = cog
    assert answer == "KeyError: \"could not find any of: ['n_kv_heads', 'num_key_value_heads']\""
    assert not (root / "ref-hub-f16.gguf").exists()
    with pytest.raises(ValueError, match="Failed to load model"):
        llama_cpp.Llama(model_path=str(root / "ref-kv-f32.gguf"), n_ctx=64, verbose=False)


def _expert_llama(src, expert: str):
    """transformers' Llama over CogVLM's ``language`` or ``vision`` expert weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    sd = {k: v.float() for k, v in load_file(src / "model.safetensors").items()}
    h = TEXT["hidden_size"]
    cfg = LlamaConfig(
        vocab_size=sd["lm_head.weight"].shape[0], hidden_size=h,
        intermediate_size=TEXT["intermediate_size"], num_hidden_layers=TEXT["num_hidden_layers"],
        num_attention_heads=TEXT["num_attention_heads"],
        num_key_value_heads=TEXT["num_attention_heads"], rms_norm_eps=TEXT["rms_norm_eps"],
        max_position_embeddings=TEXT["max_position_embeddings"], tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )  # fmt: skip
    w = {"model.embed_tokens.weight": sd["model.embed_tokens.weight"],
         "model.norm.weight": sd["model.norm.weight"], "lm_head.weight": sd["lm_head.weight"]}  # fmt: skip
    for i in range(TEXT["num_hidden_layers"]):
        L = f"model.layers.{i}."
        q, k, v = sd[L + f"self_attn.{expert}_expert_query_key_value.weight"].split(h)
        w |= {L + "self_attn.q_proj.weight": q, L + "self_attn.k_proj.weight": k,
              L + "self_attn.v_proj.weight": v,
              L + "self_attn.o_proj.weight": sd[L + f"self_attn.{expert}_expert_dense.weight"],
              L + "input_layernorm.weight": sd[L + "input_layernorm.weight"],
              L + "post_attention_layernorm.weight": sd[L + "post_attention_layernorm.weight"]}  # fmt: skip
        for p in ("gate_proj", "up_proj", "down_proj"):
            w[L + f"mlp.{p}.weight"] = sd[L + f"mlp.{expert}_mlp.{p}.weight"]
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(w, strict=True)
    return model.eval(), torch


def test_llama_cpp_logits_language_expert(cog):
    """Text tokens: llama.cpp on ours gives transformers' Llama over the language expert."""
    root, _ = cog
    ours = _llama_logits(root / "ours-text-f32.gguf", TOKENS)
    model, torch = _expert_llama(root / "hub" / "cogvlm-tiny", "language")
    with torch.no_grad():
        hf = model(torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= TOL * max(scale, 1.0), np.abs(ours - hf).max()


def _llama_cpp_embd_logits(path, embd: np.ndarray) -> np.ndarray:
    """llama.cpp's logits for a batch of input embeddings (its visual-expert path)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=2, verbose=False)
    try:
        n, d = embd.shape
        batch = llama_cpp.llama_batch_init(n, d, 1)
        try:
            ctypes.memmove(
                batch.embd, np.ascontiguousarray(embd, np.float32).ctypes.data, embd.nbytes
            )
            for i in range(n):
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = True
            batch.n_tokens = n
            assert llama_cpp.llama_decode(llm.ctx, batch) == 0
            n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llm.model))
            rows = [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, i),
                                          shape=(n_vocab,)).copy() for i in range(n)]  # fmt: skip
            return np.stack(rows)
        finally:
            llama_cpp.llama_batch_free(batch)
    finally:
        llm.close()


def test_llama_cpp_logits_visual_expert(cog):
    """Image embeddings: llama.cpp on ours runs them through the visual expert, as
    transformers' Llama over the visual expert's weights does (and not as the language
    expert: the check bites)."""
    root, _ = cog
    embd = np.random.default_rng(5).standard_normal((6, TEXT["hidden_size"])).astype(np.float32)
    ours = _llama_cpp_embd_logits(root / "ours-text-f32.gguf", embd)
    model, torch = _expert_llama(root / "hub" / "cogvlm-tiny", "vision")
    lang, _ = _expert_llama(root / "hub" / "cogvlm-tiny", "language")
    with torch.no_grad():
        hf = model(inputs_embeds=torch.from_numpy(embd)[None]).logits[0].numpy()
        other = lang(inputs_embeds=torch.from_numpy(embd)[None]).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= TOL * max(scale, 1.0), np.abs(ours - hf).max()
    assert np.abs(ours - other).max() > 10 * TOL * max(scale, 1.0)


def test_mtmd_encodes_image(cog):
    """mtmd loads our projector with our text and encodes a 28 x 28 image into the 4
    patch rows between the begin and end rows, as through the reference's projector."""
    from weightsmith.gguf import read

    root, _ = cog
    img = np.random.default_rng(7).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    text = root / "ours-text-f32.gguf"
    got = _mtmd_embeddings(text, root / "ours-mmproj-f32.gguf", img)
    want = _mtmd_embeddings(text, root / "ref-mmproj-f32.gguf", img)
    assert got.shape == (4 + 2, TEXT["hidden_size"]) and np.isfinite(got).all()
    np.testing.assert_array_equal(got, want)
    with read(root / "ours-mmproj-f32.gguf") as f:
        boi, eoi = np.asarray(f.numpy("v.boi")).ravel(), np.asarray(f.numpy("v.eoi")).ravel()
    np.testing.assert_array_equal(got[0], boi)
    np.testing.assert_array_equal(got[-1], eoi)


#: mtmd vs our torch reading of its graph, as a fraction of the features' scale (measured
#: 2.8e-4: ggml's GELU tables); each of llama.cpp's two departures from the remote model
#: moves the features by more than GAP (measured 4.9e-3 and 2.9e-2)
FEATURE_TOL = 1e-3
GAP = 2e-3


def test_mtmd_features_vs_remote_model(cog):
    """mtmd's encoding through ours is the remote model's features as llama.cpp's graph
    reads it (within FEATURE_TOL), and not as the remote code computes them: llama.cpp
    appends the CLS row after the patches before adding the position table (the remote
    code puts it first: every patch gets its neighbour's position row), and runs the tower's
    MLP with GELU-quick (the reference writes no ``use_gelu`` row; the remote model's GELU
    is exact).  Both gaps are the pinned runtime's and the reference's (its file is ours
    byte for byte), pinned here so a change shows."""
    root, _ = cog
    src = root / "hub" / "cogvlm-tiny"
    img = np.random.default_rng(7).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", img)
    as_llama_cpp = image_features(src, img, cls_last=True, quick_gelu=True)
    scale = max(float(np.abs(as_llama_cpp).max()), 1e-6)
    assert np.abs(got - as_llama_cpp).max() <= FEATURE_TOL * scale, np.abs(got - as_llama_cpp).max()
    for kw in ({"cls_last": True}, {"quick_gelu": True}, {}):
        remote = image_features(src, img, **kw)
        assert np.abs(got - remote).max() > GAP * scale, kw


def test_cogvlm2_refused(cog, tmp_path):
    """CogVLM2's grouped-query attention is not llama.cpp's cogvlm: named, nothing written."""
    root, _ = cog
    src = _with_config(root / "hub" / "cogvlm-tiny", tmp_path / "c2", num_multi_query_heads=2)
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="num_multi_query_heads"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_back_to_hf_refused(cog, tmp_path):
    """No transformers class holds CogVLM: GGUF -> HF is refused by name, nothing written."""
    root, _ = cog
    out = tmp_path / "back"
    with pytest.raises(E.UnknownArchitecture, match="cogvlm"):
        gguf_to_hf(root / "ours-text-f32.gguf", out)
    assert not out.exists()


def test_cli_writes_both(cog, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj`` writes the same two files."""
    from weightsmith.cli._main import main

    root, _ = cog
    dst = tmp_path / "c.gguf"
    assert main(["convert", str(root / "hub" / "cogvlm-tiny"), str(dst), "--type", "f16",
                 "--mmproj", "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-c.gguf").read_bytes() == (root / "ref-mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (root / "ours-text-f16.gguf").read_bytes()


@pytest.mark.parametrize(
    ("missing", "error", "field"),
    [
        ("preprocessor_config.json", E.MissingModelFile, "image_mean"),
        ("tokenizer.model", E.TokenizerFilesMissing, "tokenizer.model"),
    ],
)
def test_hub_folder_needs_processor_and_tokenizer(cog, tmp_path, missing, error, field):
    """The Hub's checkpoint ships neither (its image transforms are code, its tokenizer is
    Vicuna's): without the image processor's mean / std, or without a tokenizer, ours
    names what is missing and writes nothing; the reference stops on the first with a
    ``KeyError`` (pinned), writing no projector."""
    root, (_, bare_answer) = cog
    assert bare_answer == "KeyError: 'image_mean'"
    assert not (root / "ref-bare.gguf").exists()
    src = _without(root / "hub" / "cogvlm-tiny", tmp_path / "c", missing)
    out = tmp_path / "out"
    with pytest.raises(error, match=field):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
