"""DeepSeek-V4 Flash vision (``DeepseekV4ForCausalLM`` with ``vision_n_layers > 0``, remote
code on the Hub) against llama.cpp's converter and runtime, on a hand-built tiny
checkpoint (tests/support/dsv4_models.py: the text checkpoint of
tests/test_convert_deepseek4.py plus the ``vision_*`` config fields and seeded tower,
aligner and sentinel tensors under the names the pinned converter's
``DeepseekV4FlashVisionModel`` and mtmd's ``deepseek4v`` loader read).

There is no numeric oracle for the tower: transformers 5.24 builds no vision tower for
this model (pinned in tests/test_convert_deepseek4.py) and the remote code is not run.
What replaces it: the reference's files byte for byte, mtmd running our pair exactly as
it runs ours with the reference's projector, and the four learned sentinel rows of its
output block equal to the checkpoint's values at the places its layout puts them.
Checked:

* the projector (``clip``, projector type ``deepseek4v``) is ``convert_hf_to_gguf.py
  --mmproj``'s byte for byte at f32, f16, bf16 and q8_0 (one reference launch);
* the text half is the reference's text file byte for byte (DeepSeek-V4 is typed by
  source dtype: every outtype is one file), and q4_k_m is ``llama_model_quantize`` of the
  reference's f32;
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text and encodes an image
  into the embeddings it gives through the reference's projector;
* a tower under 3 blocks (the reference cannot map ``aligner.w2`` then: pinned) and
  GGUF -> HF of the pair are refused by name, nothing written.
"""

from __future__ import annotations

import numpy as np
import pytest

from support.dsv4_models import SENTINELS, VISION, deepseek4_flash_vision, flash_vision_grid
from test_convert_hf_to_gguf import _llama_quantize
from test_convert_mmproj import TYPES, _mtmd_embeddings, _same
from test_convert_step35 import _reference, _variant
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

#: an image mtmd leaves unresized (patch multiples, above the minimum pixels) whose 3 x 3-
#: merged patch grid (14 x 12 patches -> 5 x 4) has a padded column and an even row count
IMAGE = np.random.default_rng(7).integers(0, 256, (48, 56, 3), dtype=np.uint8)
#: mtmd vs our torch reading of its graph, as a fraction of the rows' scale
TOL = 1e-3


@pytest.fixture(scope="module")
def dsv(tmp_path_factory):
    """The folder; the reference's projectors (``ref-mmproj-T``), text (``ref-text-f32``,
    ``ref-text-q4_k_m`` through llama_model_quantize) and its answer on a 2-block tower
    (the last line of its output); ours (``ours-text-T`` / ``ours-mmproj-T``)."""
    root = tmp_path_factory.mktemp("dsv4v")
    src = deepseek4_flash_vision(root / "dsv4-flash-tiny")
    two = _variant(src, root / "two-blocks", vision_n_layers=2)
    jobs = [[str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
             "--mmproj"] for t in TYPES]  # fmt: skip
    jobs.append([str(src), "--outfile", str(root / "ref-text-f32.gguf"), "--outtype", "f32"])
    jobs.append([str(two), "--outfile", str(root / "ref-two.gguf"), "--outtype", "f32",
                 "--mmproj"])  # fmt: skip
    r = _reference(jobs, None)
    lines = r.stdout.splitlines()[-len(jobs) :]
    assert lines[:-1] == ["ok"] * (len(jobs) - 1), r.stdout[-2000:] + r.stderr[-3000:]
    for t in TYPES:
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    hf_to_gguf(src, root / "ours-text-q4_k_m.gguf", "q4_k_m")
    _llama_quantize(root / "ref-text-f32.gguf", root / "ref-text-q4_k_m.gguf", "q4_k_m",
                    allow_requantize=True)  # fmt: skip
    return root, src, two, lines[-1]


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(dsv, t):
    root, *_ = dsv
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", [*TYPES, "q4_k_m"])
def test_text_same_as_reference(dsv, t):
    root, *_ = dsv
    _same(
        root / f"ours-text-{t}.gguf", root / f"ref-text-{'q4_k_m' if t == 'q4_k_m' else 'f32'}.gguf"
    )


def test_contents(dsv):
    """Guard against a vacuous pass: the fused SwiGLU split gate first, the Linear patch
    embedding as a (3, p, p) convolution, the sentinels F32 under mtmd's names, the rows
    the deepseek4v loader reads."""
    from weightsmith.gguf import read

    root, src, *_ = dsv
    sd = _source(src)
    f = VISION["vision_inter_dim"]
    p = VISION["vision_patch_size"]
    with read(root / "ours-mmproj-f32.gguf") as g:
        md = g.metadata
        data = {t.name: g.numpy(t.name) for t in g.tensors}
    assert md["clip.projector_type"] == "deepseek4v"
    assert md["clip.vision.projector.scale_factor"] == VISION["vision_downsample_ratio"]
    assert md["clip.vision.image_min_pixels"] == VISION["vision_min_pixels"]
    w1 = sd["vision.blocks.1.mlp.w1.weight"]
    np.testing.assert_array_equal(data["v.blk.1.ffn_gate.weight"], w1[:f])
    np.testing.assert_array_equal(data["v.blk.1.ffn_up.weight"], w1[f:])
    pe = sd["vision.patch_embed.proj.weight"]
    np.testing.assert_array_equal(data["v.patch_embd.weight"], pe.reshape(-1, 3, p, p))
    for k, g_name in zip(SENTINELS, _SENTINEL_NAMES):
        np.testing.assert_array_equal(data[g_name], sd[k])


def _source(src) -> dict[str, np.ndarray]:
    """The checkpoint's vision tensors as float32."""
    from safetensors.torch import load_file

    sd = load_file(src / "model.safetensors")
    keep = ("vision.", "aligner.", "image_")
    return {k: v.float().numpy() for k, v in sd.items() if k.startswith(keep)}


_SENTINEL_NAMES = ("v.image_newline", "v.token_embd.img_start", "v.token_embd.img_end",
                   "v.token_embd.img_pad")  # fmt: skip


def test_mtmd_encodes_as_with_reference(dsv):
    """mtmd loads our pair and encodes the image as through the reference's projector;
    its output block is ``[PAD]* [START] rows (each + NEWLINE) [END]``: the sentinel rows
    are the checkpoint's values where that layout puts them, the grid rows our torch
    reading of mtmd's graph (support.dsv4_models.flash_vision_grid)."""
    root, src, *_ = dsv
    ours = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", IMAGE)
    ref = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ref-mmproj-f32.gguf", IMAGE)
    assert np.isfinite(ours).all()
    np.testing.assert_array_equal(ours, ref)
    sd = _source(src)
    sent = {k: sd[k] for k in SENTINELS}
    rows = ours.reshape(-1, sent["image_start"].shape[0])
    kind = []
    for r in rows:
        hit = [k for k, v in sent.items() if np.allclose(r, v, rtol=0, atol=1e-6)]
        assert len(hit) <= 1
        kind.append(hit[0] if hit else "grid")
    start = kind.index("image_start")
    assert set(kind[:start]) <= {"image_pad"} and start <= 3  # aligned to blocks of 4
    assert kind[-1] == "image_end" and kind.count("image_start") == 1
    # 14 x 12 patches merged 3 x 3 (padded): a 5 x 4 grid, a newline after each row
    assert kind.count("grid") == 5 * 4 and kind.count("image_newline") == 4
    assert kind[start + 1 : -1].count("image_pad") == 0
    # the grid rows are our torch reading of mtmd's graph over the checkpoint (pairs of
    # aligner rows interleaved by column: each row once, in mtmd's order)
    want = flash_vision_grid(src, IMAGE)
    got = rows[[i for i, k in enumerate(kind) if k == "grid"]]
    scale = float(np.abs(want).max())
    err = np.abs(got[:, None, :] - want[None, :, :]).max(-1)
    order = err.argmin(1)
    assert sorted(order) == list(range(len(want)))
    assert err[np.arange(len(got)), order].max() <= TOL * scale
    assert list(order[:4]) == [0, 5, 1, 6]  # rows 0 and 1 of the 5-wide grid, interleaved


def test_two_block_tower_refused(dsv, tmp_path):
    """Pinned: the reference maps ``aligner.w{bid}`` through the tower's block map, so a
    tower under 3 blocks stops it at ``aligner.w2``; ours refuses it by name before any
    output (text or projector)."""
    *_, two, answer = dsv
    assert answer == "ValueError: Can not map tensor 'aligner.w2.bias'"
    out, proj = tmp_path / "t.gguf", tmp_path / "p.gguf"
    with pytest.raises(E.InvalidModelConfig, match="vision_n_layers"):
        hf_to_gguf(two, out, "f32", mmproj=proj)
    assert not out.exists() and not proj.exists()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"vision_max_n_token": 256}, "vision_max_n_token"),
        ({"vision_dim": None}, "vision_dim"),
        # a field of the wrong kind: named, not a TypeError from the tower's arithmetic
        ({"vision_patch_size": 16.0, "vision_downsample_ratio": "2"}, "vision fields"),
    ],
)
def test_bad_vision_config_refused(dsv, tmp_path, changes, field):
    """The class's asserts (llama.cpp hard-codes the token cap and aspect ratio) and a
    missing ``vision_*`` field: refused by name, nothing written."""
    _, src, *_ = dsv
    bad = _variant(src, tmp_path / "bad", **changes)
    out, proj = tmp_path / "t.gguf", tmp_path / "p.gguf"
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(bad, out, "f32", mmproj=proj)
    assert not out.exists() and not proj.exists()


def test_no_tower_has_no_projector(dsv, tmp_path):
    """``vision_n_layers: 0`` (the text model): no projector to write, refused by name."""
    _, src, *_ = dsv
    bad = _variant(src, tmp_path / "text", vision_n_layers=0)
    with pytest.raises(E.InvalidModelConfig, match="vision_config"):
        hf_to_gguf(bad, tmp_path / "t.gguf", "f32", mmproj=tmp_path / "p.gguf")
    assert not (tmp_path / "t.gguf").exists()


def test_gguf_to_hf_refused(dsv, tmp_path):
    """No transformers class holds the pair (transformers reads DeepSeek-V4's text only in
    DeepSeek's layout and builds no Flash vision tower): the pair is refused naming the
    projector type with its text model, the text alone naming ``deepseek4``; nothing
    written."""
    root, *_ = dsv
    with pytest.raises(E.ProjectorMismatch, match="'deepseek4v' with a 'deepseek4' text"):
        gguf_to_hf(root / "ours-text-f32.gguf", tmp_path / "back",
                   mmproj=root / "ours-mmproj-f32.gguf")  # fmt: skip
    with pytest.raises(E.UnknownArchitecture, match="deepseek4"):
        gguf_to_hf(root / "ours-text-f32.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()
