"""Dots3 Note's multi-token-prediction block, both ways (GLM-5's and DeepSeek-V3.2's are in
their text harness models: tests/test_convert_archs.py, ``test_dsa_mtp_blocks``).

transformers 5.24 builds no Dots3 MTP block and ignores it on load, so the block is added
to the tiny model as the Hub stores it (tests/support/dots3_models.py ``with_mtp``: layer
``num_hidden_layers`` with the sliding-attention MLA, a dense MLP, ``eh_proj`` / ``enorm``
/ ``hnorm`` / ``shared_head.norm``, and ``model.mtp.embed_tokens``).  There is no numeric
oracle of the block itself: no transformers class runs it and llama.cpp 0.3.36 has no
dots3note MTP graph (its loader reads the block's tensors and skips them).  Checked:

* the text file byte-identical to the pinned ``convert_hf_to_gguf.py`` (on transformers
  4.47.1, as tests/test_convert_dots3.py) at f32, bf16 and q8_0, and at q4_k_m to its f32
  through ``llama_model_quantize``; the block is in it (guard);
* llama.cpp loads ours, and its logits are those of the reference's file and
  transformers' (the trunk: neither runs the block);
* GGUF -> HF (with the projector: transformers has no text-only class) writes the block
  back as the Hub keeps it, every tensor bit for bit (the rescaled latent norms within 1
  ulp, as the trunk's), the config without an MTP count (the Hub's has none); that
  folder converts forward to our text file again, and transformers loads it (only the
  block's keys unexpected) with the original's logits.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from support.dots3_models import dots3_note_hub, with_mtp
from support.gguf_pair import assert_same_gguf, convert_forward
from support.meta_oracle import oracle_env
from test_convert_archs import _llama_logits_f32_kv
from test_convert_dots3 import TOKENS, _reference
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import _same
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TYPES = ["f32", "bf16", "q8_0"]
QUANT = "q4_k_m"
#: the latent norms the GGUF keeps with the rescale folded in (1 ulp back)
RESCALED = ("q_a_layernorm.weight", "kv_a_layernorm.weight")
#: the block's keys as transformers reports them unloaded (its own text prefix)
_MTP_KEY = re.compile(r"^model\.(language_model\.)?(layers\.4|mtp)\.")


@pytest.fixture(scope="module")
def d3m(tmp_path_factory):
    """The tiny Dots3 Note with its MTP block; the reference's text files (one launch on
    transformers 4.47.1; q4_k_m through llama_model_quantize) and ours (the f32 with its
    projector); our folder back from that pair."""
    root = tmp_path_factory.mktemp("dots3_mtp")
    src = with_mtp(dots3_note_hub(root / "hub"))
    jobs = [[str(src), "--outfile", str(root / f"ref-{t}.gguf"), "--outtype", t] for t in TYPES]
    r = _reference(jobs, oracle_env())
    assert r.returncode == 0, r.stderr[-3000:]
    _llama_quantize(root / "ref-f32.gguf", root / f"ref-{QUANT}.gguf", QUANT)
    for t in [*TYPES, QUANT]:
        hf_to_gguf(src, root / f"ours-{t}.gguf", t,
                   mmproj=root / "ours-mmproj-f32.gguf" if t == "f32" else None)  # fmt: skip
    gguf_to_hf(root / "ours-f32.gguf", root / "back", "f32", mmproj=root / "ours-mmproj-f32.gguf")
    return root


@pytest.mark.parametrize("t", [*TYPES, QUANT])
def test_text_same_as_reference(d3m, t):
    _same(d3m / f"ours-{t}.gguf", d3m / f"ref-{t}.gguf")


def test_mtp_block_in_file(d3m):
    """Guard against a vacuous pass: the block is block 4 (counted in ``block_count`` and
    the head counts, not in the sliding or indexer patterns), with the sliding layers'
    MLA, a dense MLP, no indexer, the five nextn tensors; its embedding is the Hub's
    ``model.mtp.embed_tokens``."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    with read(d3m / "ours-f32.gguf") as f:
        md = f.metadata
        shapes = {t.name: tuple(t.shape) for t in f.tensors}
        emb = np.array(f.numpy("blk.4.nextn.embed_tokens.weight"))
        eh = np.array(f.numpy("blk.4.nextn.eh_proj.weight"))
    assert md["dots3note.block_count"] == 5 and md["dots3note.nextn_predict_layers"] == 1
    assert list(md["dots3note.attention.head_count"]) == [4, 4, 2, 2, 2]
    assert len(md["dots3note.attention.sliding_window_pattern"]) == 4
    assert list(md["dots3note.attention.indexer.types"]) == [True, True, False, False]
    nextn = ["eh_proj", "enorm", "hnorm", "embed_tokens", "shared_head_norm"]
    assert {n for n in shapes if n.startswith("blk.4.nextn.")} == {
        f"blk.4.nextn.{n}.weight" for n in nextn
    }
    assert shapes["blk.4.attn_k_b.weight"] == shapes["blk.3.attn_k_b.weight"] == (2, 32, 16)
    assert shapes["blk.4.ffn_gate.weight"] == shapes["blk.0.ffn_gate.weight"]
    assert not any(n.startswith("blk.4.indexer.") or n.startswith("blk.4.ffn_gate_exps")
                   for n in shapes)  # fmt: skip
    hub = load_file(d3m / "hub" / "model.safetensors")
    np.testing.assert_array_equal(emb, hub["model.mtp.embed_tokens.weight"])
    np.testing.assert_array_equal(eh, hub["model.layers.4.eh_proj.weight"])


def _hf_logits(folder) -> tuple[np.ndarray, list[str]]:
    """transformers' logits on TOKENS, and the keys it did not load."""
    import torch
    from transformers import AutoModelForImageTextToText

    m, info = AutoModelForImageTextToText.from_pretrained(
        folder, dtype=torch.float32, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    with torch.no_grad():
        return m.eval()(input_ids=torch.tensor([TOKENS])).logits[0].numpy(), info["unexpected_keys"]


def test_llama_cpp_logits(d3m):
    """llama.cpp loads ours (the block's tensors read and skipped) with the logits of
    the reference's file, and transformers' within 1e-4 of scale (neither runs the
    block); transformers leaves only the block's keys unloaded."""
    ours = _llama_logits_f32_kv(d3m / "ours-f32.gguf", TOKENS)
    ref = _llama_logits_f32_kv(d3m / "ref-f32.gguf", TOKENS)
    np.testing.assert_array_equal(ours, ref)
    hf, unexpected = _hf_logits(d3m / "hub")
    assert unexpected and all(_MTP_KEY.match(k) for k in unexpected), unexpected
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 1e-4 * max(scale, 1.0), np.abs(ours - hf).max()


def test_back_keeps_the_block(d3m, tmp_path):
    """GGUF -> HF writes every tensor of the original's safetensors (the block under the
    Hub's names) with its values (the rescaled norms within 1 ulp), the config with the
    trunk's layer count and no MTP field; HF -> GGUF of that folder is our text file
    again, and transformers' logits on it are the original's."""
    from safetensors.numpy import load_file

    want = load_file(d3m / "hub" / "model.safetensors")
    got = load_file(d3m / "back" / "model.safetensors")
    want = {k: v for k, v in want.items() if not k.startswith(("vision_", "audio_"))}
    got = {k: v for k, v in got.items() if not k.startswith(("vision_", "audio_"))}
    assert "model.mtp.embed_tokens.weight" in got and "model.layers.4.eh_proj.weight" in got
    # the original's experts per expert as the Hub stores them; ours too
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        if k.endswith(RESCALED):
            assert np.all(np.abs(got[k] - w) <= np.float32(2.0**-23) * np.abs(w)), k
        else:
            np.testing.assert_array_equal(got[k], w, err_msg=k)
    cfg = json.loads((d3m / "back" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 4 and "num_nextn_predict_layers" not in cfg
    text, _ = convert_forward(d3m / "back", tmp_path)
    assert_same_gguf(text, d3m / "ours-f32.gguf")
    a, _ = _hf_logits(d3m / "hub")
    b, unexpected = _hf_logits(d3m / "back")
    assert unexpected and all(_MTP_KEY.match(k) for k in unexpected), unexpected
    np.testing.assert_allclose(b, a, rtol=0, atol=2e-6 * max(1.0, float(np.abs(a).max())))


def test_block_without_its_embedding_refused(d3m, tmp_path):
    """The block's layer without ``model.mtp.embed_tokens``: the reference counts no block
    and stops on the layer's first tensor (``Can not map tensor
    'model.layers.4.eh_proj.weight'``, measured); ours refuses that tensor by name before
    any output (it would otherwise write a block past ``block_count``)."""
    from safetensors.numpy import load_file, save_file

    from weightsmith import errors as E

    src = tmp_path / "m"
    src.mkdir()
    for f in (d3m / "hub").iterdir():
        if f.name != "model.safetensors":
            (src / f.name).symlink_to(f)
    sd = load_file(d3m / "hub" / "model.safetensors")
    del sd["model.mtp.embed_tokens.weight"]
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out.gguf"
    with pytest.raises(E.UnmappedTensor, match=r"model\.layers\.4\."):
        hf_to_gguf(src, out, "f32")
    assert not out.exists()
