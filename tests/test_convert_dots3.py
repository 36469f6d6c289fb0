"""Dots3 Note (``Dots3NoteForConditionalGeneration``) against llama.cpp's converter and
runtime: the ``dots3note`` text and the projector (vision ``dots3note_v`` and audio
``dots3note_a`` in one file).

The tiny model (tests/support/dots3_models.py) is built by transformers 5.24 from the
Hub's flat config and saved with that config (transformers' own normalised one has no
``swa_*`` fields; tests/test_convert_dots3_pockettts.py).  The pinned reference is run on
transformers 4.47.1 (which does not know the model type and reads config.json as
written), as for Nemotron-H and MiniMax-M3: on 5.24 its AutoConfig view loses the Hub's
``rope_theta`` and its file has no ``rope.freq_base`` (measured; not pinned here: a
second reference run costs 28 s).  Checked:

* text: byte-identical to ``convert_hf_to_gguf.py`` at f32, f16, bf16 and q8_0, and at
  q4_k_m to its f32 through ``llama_model_quantize``; llama.cpp's logits on ours are those
  on the reference's file, and transformers' (16 tokens: the sliding layers' window of 8
  is exceeded, the indexer keeps every key; with ``index_topk`` 8 they differ, located:
  NeoX RoPE on llama.cpp's indexer and ggml's top-k tie order, with which transformers'
  model gives llama.cpp's logits); GGUF -> HF of the text alone refused by
  name (with its projector: tests/test_convert_dots3_to_hf.py);
* projector: byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32, f16, bf16 and
  q8_0; mtmd (llama-cpp-python 0.3.36) loads ours with our text file and encodes images
  into transformers' ``get_image_features`` and audio into its ``get_audio_features``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support import pyfork
from support.dots3_models import dots3_note_hub
from support.gguf_pair import pair_jobs
from support.llama_sdist import llama_cpp_root
from support.meta_oracle import oracle_env
from test_convert_archs import _llama_logits_f32_kv
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import _DRIVER, TYPES, _mtmd_embeddings, _same
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

QUANT = "q4_k_m"
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272, 50, 60, 70, 80, 90, 100, 110, 120]


def _reference(jobs: list[list[str]], env: dict | None) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)], env=env)  # fmt: skip


@pytest.fixture(scope="module")
def d3(tmp_path_factory):
    """The model folder; the reference's text files (each type, q4_k_m through
    llama_model_quantize) and projectors, on transformers 4.47.1; ours."""
    root = tmp_path_factory.mktemp("dots3")
    src = dots3_note_hub(root / "hub")
    jobs = pair_jobs(src, root, TYPES)
    r = _reference(jobs, oracle_env())
    assert r.returncode == 0, r.stderr[-3000:]
    _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{QUANT}.gguf", QUANT)
    hf_to_gguf(src, root / f"ours-text-{QUANT}.gguf", QUANT)
    return root


@pytest.fixture(scope="module")
def hf_model(d3):
    import torch
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(d3 / "hub", dtype=torch.float32).eval()


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(d3, t):
    _same(d3 / f"ours-mmproj-{t}.gguf", d3 / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", [*TYPES, QUANT])
def test_text_same_as_reference(d3, t):
    _same(d3 / f"ours-text-{t}.gguf", d3 / f"ref-text-{t}.gguf")


def test_contents(d3):
    """Guard against a vacuous pass: per-layer head counts, the sliding and indexer
    patterns, the two kinds' k_b / v_b, the latent rescale folded into the norms."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(d3 / "ours-text-f32.gguf") as f:
        md = f.metadata
        types = {t.name: t.shape for t in f.tensors}
        qn = np.array(f.numpy("blk.2.attn_q_a_norm.weight"))
        kvn = np.array(f.numpy("blk.0.attn_kv_a_norm.weight"))
    assert md["general.architecture"] == "dots3note"
    assert list(md["dots3note.attention.head_count"]) == [4, 4, 2, 2]
    assert list(md["dots3note.attention.sliding_window_pattern"]) == [False, False, True, True]
    assert list(md["dots3note.attention.indexer.types"]) == [True, True, False, False]
    assert md["dots3note.rope.freq_base_swa"] == 50000.0
    assert md["tokenizer.ggml.eot_token_id"] == 50257
    assert types["blk.0.attn_k_b.weight"] == (4, 32, 16)
    assert types["blk.3.attn_k_b.weight"] == (2, 32, 16)
    assert types["blk.2.attn_gate.weight"] == (2, 64)
    assert "blk.1.indexer.attn_q_b.weight" in types and "blk.2.indexer.proj.weight" not in types
    hub = load_file(d3 / "hub" / "model.safetensors")
    # sqrt(64 / 32): the rescale of the 32-wide latents, in float32
    s = np.float32(np.sqrt(2.0))
    np.testing.assert_array_equal(qn, hub["model.layers.2.self_attn.q_a_layernorm.weight"] * s)
    np.testing.assert_array_equal(kvn, hub["model.layers.0.self_attn.kv_a_layernorm.weight"] * s)


def test_projector_contents(d3):
    """Guard against a vacuous pass: both halves, the pyramid MoE stacked and routed in F32
    at q8_0, the audio fc1 split, the convolutions F32."""
    from weightsmith.gguf import read

    with read(d3 / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.vision.projector_type"] == "dots3note_v"
    assert md["clip.audio.projector_type"] == "dots3note_a"
    assert list(md["clip.vision.expert_count_per_layer"]) == [0, 4]
    assert md["clip.vision.embedding_length"] == 32 and md["clip.vision.image_size"] == 0
    assert types["v.blk.1.ffn_gate_exps.weight"] == ("Q8_0", (4, 32, 32))
    assert types["v.blk.1.ffn_gate_inp.weight"] == ("F32", (4, 32))
    assert types["v.blk.0.ffn_gate.weight"] == ("Q8_0", (64, 32))
    assert types["a.blk.0.ffn_gate.weight"] == types["a.blk.0.ffn_up.weight"] == ("Q8_0", (64, 32))
    assert types["a.conv2d.2.weight"] == ("F32", (16, 16, 3, 3))
    assert types["a.conv_out.weight"] == ("F32", (32, 256))


def _hf_image_features(model, img: np.ndarray) -> np.ndarray:
    """transformers' features of ``img`` (a multiple of 16 px: no resize), patched as the
    Qwen2-VL-style processor does (one frame): 2x2 merge windows in row order."""
    import torch

    p, mg = 8, 2
    x = (img.astype(np.float32) / 255.0 - np.float32(0.5)) / np.float32(0.5)
    gh, gw = img.shape[0] // p, img.shape[1] // p
    pt = x.transpose(2, 0, 1).reshape(3, gh // mg, mg, p, gw // mg, mg, p)
    pt = pt.transpose(1, 4, 2, 5, 0, 3, 6).reshape(gh * gw, 3 * p * p)
    with torch.no_grad():
        f = model.model.get_image_features(pixel_values=torch.from_numpy(np.ascontiguousarray(pt)),
                                           image_grid_thw=torch.tensor([[1, gh, gw]]))  # fmt: skip
    return torch.cat(list(f.pooler_output), 0).numpy()


@pytest.mark.parametrize("hw", [(64, 64), (32, 64), (64, 32)])
def test_llama_cpp_encodes_image(d3, hf_model, hw):
    """mtmd's image embeddings through our projector vs transformers' features, within
    1e-3 of their scale (measured 8.6e-5, 1.3e-4, 1.1e-4 at a scale of 3)."""
    h, w = hw
    img = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    got = _mtmd_embeddings(d3 / "ours-text-f32.gguf", d3 / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(hf_model, img)
    assert want.shape == (h // 16 * (w // 16), 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def _pcm(seconds: float) -> np.ndarray:
    """A seeded 16 kHz waveform: a tone and noise, float32."""
    t = np.arange(int(16000 * seconds)) / 16000
    noise = 0.05 * np.random.default_rng(3).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + noise).astype(np.float32)


@pytest.mark.parametrize("seconds", [1.0, 2.5])
def test_llama_cpp_encodes_audio(d3, hf_model, seconds):
    """mtmd's audio embeddings (its Dots3Note log-mel and the ``dots3note_a`` graph)
    through our projector vs transformers' (Dots3NoteFeatureExtractor +
    ``get_audio_features``): 13 and 32 tokens, within 1e-3 of their scale (measured
    8.9e-5 and 1.7e-4 at a scale of 1.6)."""
    import torch
    from transformers.models.dots3_note.feature_extraction_dots3_note import (
        Dots3NoteFeatureExtractor,
    )

    pcm = _pcm(seconds)
    got = _mtmd_embeddings(d3 / "ours-text-f32.gguf", d3 / "ours-mmproj-f32.gguf", None, pcm)
    inp = Dots3NoteFeatureExtractor()([pcm], sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        out = hf_model.model.get_audio_features(inp["input_features"], inp["chunk_sample_lengths"])
    want = out.pooler_output.reshape(-1, 64).numpy()
    assert want.shape == ({1.0: 13, 2.5: 32}[seconds], 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 1e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_text_in_llama_cpp(d3, hf_model):
    """llama.cpp's logits on our text file are those on the reference's, and
    transformers' within 1e-4 of scale (measured 1.3e-6 at scale 2.0).  16 tokens: the
    sliding window (8) is exceeded, the indexer's top 16 keys are all of them."""
    import torch

    ours = _llama_logits_f32_kv(d3 / "ours-text-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(d3 / "ref-text-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    with torch.no_grad():
        hf = hf_model(input_ids=torch.tensor([TOKENS])).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 1e-4 * max(scale, 1.0), np.abs(ours - hf).max()


def test_cli_writes_both(d3, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the reference's two files."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(d3 / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (d3 / "ref-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (d3 / "ref-text-q8_0.gguf").read_bytes()


def test_text_has_no_way_back(d3, tmp_path):
    """GGUF -> HF of the text alone: transformers 5.24 has no text-only class; refused
    by name (with its projector it converts: tests/test_convert_dots3_to_hf.py)."""
    with pytest.raises(E.UnknownArchitecture, match="dots3note"):
        gguf_to_hf(d3 / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("field", ["swa_num_attention_heads", "sliding_window_size"])
def test_missing_hub_field_refused(d3, tmp_path, field):
    """A config without one of the Hub's fields: a named error before any file is
    written.  The weights are linked, not copied."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (d3 / "hub").iterdir():
        if f.name != "config.json":
            (src / f.name).symlink_to(f)
    cfg = json.loads((d3 / "hub" / "config.json").read_text())
    del cfg[field]
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16")
    assert not (tmp_path / "t.gguf").exists()


@pytest.mark.parametrize(
    ("path", "value"),
    [("vision_config.adapter_type", "mlp"), ("audio_config.whisper_config.activation_function",
                                             "gelu")],
)  # fmt: skip
def test_other_tower_variant_refused(d3, tmp_path, path, value):
    """A tower variant the reference's projector class asserts against: a named error
    before either file is written."""
    src = tmp_path / "m"
    src.mkdir()
    for f in (d3 / "hub").iterdir():
        if f.name != "config.json":
            (src / f.name).symlink_to(f)
    cfg = json.loads((d3 / "hub" / "config.json").read_text())
    *outer, last = path.split(".")
    node = cfg
    for k in outer:
        node = node[k]
    node[last] = value
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=path.replace(".", r"\.")):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "p.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "p.gguf").exists()


def _ggml_top_k(row: list[float], k: int) -> list[int]:
    """The positions ggml's CPU top-k (``std::partial_sort`` with ``score[a] > score[b]``,
    libstdc++'s heap selection) keeps, sorted: the first ``k`` positions are made a heap
    whose top is the lowest score, and each later position with a strictly higher score
    replaces that top, so which of several equal scores survive depends on the heap's
    layout (not the lowest or the highest positions)."""
    a = list(range(k))

    def first(i: int, j: int) -> bool:  # the comparator: a higher score sorts first
        return row[i] > row[j]

    def sift(hole: int, n: int, value: int) -> None:  # __adjust_heap, then __push_heap
        top = child = hole
        while child < (n - 1) // 2:
            child = 2 * (child + 1)
            if first(a[child], a[child - 1]):
                child -= 1
            a[hole], hole = a[child], child
        if n % 2 == 0 and child == (n - 2) // 2:
            child = 2 * (child + 1)
            a[hole], hole = a[child - 1], child - 1
        parent = (hole - 1) // 2
        while hole > top and first(a[parent], value):
            a[hole], hole = a[parent], parent
            parent = (hole - 1) // 2
        a[hole] = value

    for parent in range((k - 2) // 2, -1, -1):  # __make_heap
        sift(parent, k, a[parent])
    for j in range(k, len(row)):  # __heap_select
        if first(j, a[0]):
            sift(0, k, j)
    return sorted(a)


def _indexer_forward(ix, rope: str, ties: str):
    """A forward for transformers' Dots3 indexer module ``ix`` (its own weights and
    scoring) with the RoPE of its rotary part ``interleaved`` (transformers': pairs
    ``(2i, 2i + 1)``) or ``neox`` (llama.cpp's ``LLAMA_ROPE_TYPE_NEOX``: pairs ``(i, i +
    r/2)``), and ties among equal scores broken by ``torch.topk`` or as ggml does."""
    import torch
    from transformers.models.dots3_note.modeling_dots3_note import (
        apply_rotary_pos_emb_interleave,
    )

    def forward(hidden_states, q_resid, position_embeddings, attention_mask, position_ids=None,
                cache=None):  # fmt: skip
        b, s, _ = hidden_states.shape
        r, d, h = ix.qk_rope_head_dim, ix.head_dim, ix.n_heads
        q = ix.wq_b(q_resid).view(b, s, h, d)
        k = ix.k_norm(ix.wk(hidden_states)).unsqueeze(2)
        cos, sin = position_embeddings
        if rope == "interleaved":
            qr, kr = apply_rotary_pos_emb_interleave(q[..., :r], k[..., :r], cos, sin,
                                                     unsqueeze_dim=2)  # fmt: skip
        else:
            c, sn = cos[..., : r // 2].unsqueeze(2), sin[..., : r // 2].unsqueeze(2)

            def neox(x):
                x1, x2 = x[..., : r // 2], x[..., r // 2 :]
                return torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)

            qr, kr = neox(q[..., :r]), neox(k[..., :r])
        q = torch.cat([qr, q[..., r:]], -1)
        k = torch.cat([kr, k[..., r:]], -1).squeeze(2)
        scores = torch.relu(torch.matmul(q, k.transpose(-1, -2).unsqueeze(1)) * d**-0.5)
        w = ix.weights_proj(hidden_states) * h**-0.5
        idx = torch.matmul(w.unsqueeze(-2), scores).squeeze(-2)
        idx = idx.masked_fill(~attention_mask, float("-inf"))
        n = min(ix.index_topk, idx.shape[-1])
        if ties == "torch":
            return idx.topk(n, dim=-1).indices.to(torch.int32)
        rows = [_ggml_top_k(row, n) for row in idx.reshape(-1, idx.shape[-1]).tolist()]
        return torch.tensor(rows, dtype=torch.int32).reshape(*idx.shape[:-1], n)

    return forward


def test_indexer_top_k_disagreement_located(d3, tmp_path):
    """With ``index_topk`` 8 < 16 tokens the indexer's selection matters, and llama.cpp
    0.3.36's logits are not transformers 5.24's (1.16 apart at scale 2.0).  Two
    differences, both needed, reproduce llama.cpp exactly (within 1e-5 of scale; measured
    1.2e-6): (1) llama.cpp's dots3note graph ropes the indexer's query and key with NeoX
    RoPE (pairs ``(i, i + 8)``, as its DeepSeek-V3.2 graph it was adapted from), where
    transformers' Dots3 indexer (and llama.cpp's own GLM-DSA graph) ropes interleaved
    pairs; (2) with ReLU'd scores, many keys score exactly 0 (every head negative), and
    which of the tied keys are kept is ggml's ``std::partial_sort`` heap order, not
    ``torch.topk``'s.  Either alone still leaves the logits 0.9+ apart.  Our own indexer
    forward with transformers' choices gives transformers' logits (guard)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from weightsmith.gguf import edit

    gguf = edit(d3 / "ours-text-f32.gguf", {"dots3note.attention.indexer.top_k": 8},
                out=tmp_path / "k8.gguf")  # fmt: skip
    ll = _llama_logits_f32_kv(gguf, TOKENS)
    cfg = AutoConfig.from_pretrained(d3 / "hub")
    cfg.text_config.index_topk = 8
    model = AutoModelForImageTextToText.from_pretrained(d3 / "hub", config=cfg,
                                                        dtype=torch.float32).eval()  # fmt: skip
    ids = torch.tensor([TOKENS])
    with torch.no_grad():
        hf = model(input_ids=ids, use_cache=False).logits[0].numpy()
    scale = float(np.abs(hf).max())
    assert np.abs(ll - hf).max() > 0.1 * scale
    indexers = [la.self_attn.indexer for la in model.model.language_model.layers
                if la.self_attn.indexer is not None]  # fmt: skip
    assert len(indexers) == 2
    got = {}
    for rope in ("interleaved", "neox"):
        for ties in ("torch", "ggml"):
            for ix in indexers:
                ix.forward = _indexer_forward(ix, rope, ties)
            with torch.no_grad():
                got[rope, ties] = model(input_ids=ids, use_cache=False).logits[0].numpy()
    assert np.abs(got["interleaved", "torch"] - hf).max() <= 1e-5 * scale
    for one in (("neox", "torch"), ("interleaved", "ggml")):
        assert np.abs(got[one] - ll).max() > 0.1 * scale, one
    gap = float(np.abs(got["neox", "ggml"] - ll).max())
    assert gap <= 1e-5 * scale, gap
