"""Mistral's own layout of a VLM (``--mistral-format --mmproj``) against llama.cpp.

Two tiny seeded checkpoints as Mistral publishes Pixtral-12B-2409 and Mistral Small 3.1
(tests/support/mistral_vlm.py: params.json with a ``vision_encoder``, the tower under
Mistral's names in consolidated.safetensors, a trained tekken.json), each the same
weights as a transformers model saved beside it.  Checked:

* the projector byte-identical to ``convert_hf_to_gguf.py --mistral-format --mmproj``
  (llama.cpp's ``PixtralModel``) at f32, f16, bf16 and q8_0 (and ``auto``), and the text
  written with it to ``--mistral-format`` (the tower's tensors left out of it, as the
  reference's filter);
* mtmd encodes an image through our text + projector exactly as through the reference's
  pair, and into transformers' image features (the HF model's vision tower + projector),
  the [IMG_BREAK] row after each row of patches;
* the CLI writes both files;
* what cannot give a projector is refused by name before any file is written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from support import pyfork
from support.llama_sdist import llama_cpp_root
from support.mistral_vlm import img_break_row, mistral_vlm
from test_convert_mmproj import _DRIVER, IMG_BREAK, _hf_image_features, _image, _mtmd_embeddings
from weightsmith import errors as E
from weightsmith.convert import mistral_to_gguf

KINDS = ["pixtral", "mistral3"]
TYPES = ["f32", "f16", "bf16", "q8_0"]


def _reference(jobs: list[list[str]]) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per kind: (mistral folder, hf folder); ours and the reference's files in root:
    ``{who}-{kind}-mmproj-{t}.gguf`` and ``{who}-{kind}-text-f32.gguf``."""
    root = tmp_path_factory.mktemp("mistralvis")
    out: dict = {"root": root}
    jobs = []
    for kind in KINDS:
        mis, hf = mistral_vlm(root / kind, kind)
        out[kind] = (mis, hf)
        jobs.append([str(mis), "--mistral-format", "--outtype", "f32",
                     "--outfile", str(root / f"ref-{kind}-text-f32.gguf")])  # fmt: skip
        for t in TYPES:
            jobs.append([str(mis), "--mistral-format", "--mmproj", "--outtype", t,
                         "--outfile", str(root / f"ref-{kind}-mmproj-{t}.gguf")])  # fmt: skip
            mistral_to_gguf(mis, root / f"ours-{kind}-text-{t}.gguf", t,
                            mmproj=root / f"ours-{kind}-mmproj-{t}.gguf")  # fmt: skip
    r = _reference(jobs)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_projector_same_as_reference(work, kind, t):
    root = work["root"]
    ours, ref = root / f"ours-{kind}-mmproj-{t}.gguf", root / f"ref-{kind}-mmproj-{t}.gguf"
    assert ours.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("kind", KINDS)
def test_text_same_as_reference(work, kind):
    root = work["root"]
    ours, ref = root / f"ours-{kind}-text-f32.gguf", root / f"ref-{kind}-text-f32.gguf"
    assert ours.read_bytes() == ref.read_bytes()


def test_contents(work):
    """Guard against a vacuous pass: Pixtral projectors with Mistral's hyperparameters,
    the tower, the adapter (Pixtral: biases; Mistral Small 3.1: norm + patch merger) and
    the [IMG_BREAK] row of the text embedding; no text tensor."""
    from weightsmith.gguf import read

    root = work["root"]
    for kind in KINDS:
        with read(root / f"ours-{kind}-mmproj-f16.gguf") as f:
            md = f.metadata
            types = {t.name: t.ggml_type.name for t in f.tensors}
            row = np.array(f.numpy(IMG_BREAK))
        assert md["general.architecture"] == "clip" and md["general.type"] == "mmproj"
        assert md["clip.projector_type"] == "pixtral" and md["clip.use_silu"] is True
        assert md["clip.vision.projection_dim"] == 256 and md["clip.vision.block_count"] == 3
        assert md["clip.rope.freq_base"] == 10000.0
        assert md["clip.vision.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
        assert list(md["clip.vision.image_mean"]) == pytest.approx(
            [0.48145466, 0.4578275, 0.40821073]
        )
        assert types["v.patch_embd.weight"] == "F16" and types["v.blk.2.ffn_gate.weight"] == "F16"
        assert types[IMG_BREAK] == "F32"
        np.testing.assert_array_equal(row, img_break_row(work[kind][0]))
        assert not any(n.startswith(("blk.", "token_embd", "output")) for n in types)
        if kind == "pixtral":
            assert {"mm.1.bias", "mm.2.bias"} <= set(types)
            assert "clip.vision.spatial_merge_size" not in md
        else:
            assert md["clip.vision.spatial_merge_size"] == 2
            assert {"mm.input_norm.weight", "mm.patch_merger.weight"} <= set(types)
            assert "mm.1.bias" not in types
    with read(root / "ours-mistral3-mmproj-q8_0.gguf") as f:
        types = {t.name: t.ggml_type.name for t in f.tensors}
    assert types["mm.patch_merger.weight"] == "F32" and types["mm.2.weight"] == "Q8_0"


def _rows(got: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """(patch rows, [IMG_BREAK] rows) of mtmd's output: a break after each row but the last."""
    rows = [got[r * (side + 1) : r * (side + 1) + side] for r in range(side)]
    return np.concatenate(rows), got[[r * (side + 1) + side for r in range(side - 1)]]


@pytest.mark.parametrize("kind", KINDS)
def test_llama_cpp_encodes_image(work, kind):
    """mtmd loads each pair; ours encodes a 64 x 64 image exactly as the reference's pair,
    and into transformers' features of the same weights in HF layout."""
    root = work["root"]
    img = _image(64)
    ours = _mtmd_embeddings(root / f"ours-{kind}-text-f32.gguf",
                            root / f"ours-{kind}-mmproj-f32.gguf", img)  # fmt: skip
    ref = _mtmd_embeddings(root / f"ref-{kind}-text-f32.gguf",
                           root / f"ref-{kind}-mmproj-f32.gguf", img)  # fmt: skip
    side = 64 // 8 // (2 if kind == "mistral3" else 1)
    assert ours.shape == ref.shape == (side * side + side - 1, 256)
    (patches, breaks), (ref_patches, _) = _rows(ours, side), _rows(ref, side)
    # the runtime's occasional NaNs fall only in the break rows (test_convert_mmproj)
    assert not np.isnan(patches).any()
    np.testing.assert_array_equal(patches, ref_patches)
    ok = ~np.isnan(breaks)
    row = img_break_row(work[kind][0])
    np.testing.assert_array_equal(breaks[ok], np.broadcast_to(row, breaks.shape)[ok])
    want = _hf_image_features(work[kind][1], img)
    assert patches.shape == want.shape
    scale = max(float(np.abs(want).max()), 1.0)
    assert np.abs(patches - want).max() <= 1e-3 * scale, np.abs(patches - want).max()


def test_cli_writes_both(work, tmp_path):
    from support.cli_helpers import run

    mis = work["mistral3"][0]
    dst = tmp_path / "out.gguf"
    p = run("convert", str(mis), str(dst), "--mistral-format", "--mmproj", "--type", "f16")
    assert p.returncode == 0, p.stderr
    root = work["root"]
    assert dst.read_bytes() == (root / "ours-mistral3-text-f16.gguf").read_bytes()
    got = (tmp_path / "mmproj-out.gguf").read_bytes()
    assert got == (root / "ref-mistral3-mmproj-f16.gguf").read_bytes()


def test_auto_reads_the_folders_first_matrix(work, tmp_path):
    """``auto``: the type of the first 2-D tensor of the whole folder (bf16 here), as the
    reference's guess."""
    mis = work["pixtral"][0]
    mistral_to_gguf(mis, tmp_path / "t.gguf", "auto", mmproj=tmp_path / "m.gguf")
    ref = work["root"] / "ref-pixtral-mmproj-bf16.gguf"
    assert (tmp_path / "m.gguf").read_bytes() == ref.read_bytes()


def test_placeholder_id_read_from_tekken(work, tmp_path):
    """image_break_token_id -1 (Mistral Medium 3.5's placeholder): the id tekken.json
    gives, as the reference's get_mistral_token_id: the same file."""
    src = _edit(work["pixtral"][0], tmp_path, lambda p: p["vision_encoder"].update(
        image_break_token_id=-1))  # fmt: skip
    mistral_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    ref = work["root"] / "ref-pixtral-mmproj-f16.gguf"
    assert (tmp_path / "m.gguf").read_bytes() == ref.read_bytes()


# --------------------------------------------------------------------------- bad input


def _edit(folder, tmp_path, change=None, tensors=None):
    """A copy of ``folder`` with params.json changed in place by ``change`` and the
    tensor dict changed by ``tensors``."""
    src = shutil.copytree(folder, tmp_path / folder.name)
    if change is not None:
        params = json.loads((src / "params.json").read_text())
        change(params)
        (src / "params.json").write_text(json.dumps(params))
    if tensors is not None:
        from safetensors.torch import load_file, save_file

        sd = load_file(src / "consolidated.safetensors")
        tensors(sd)
        save_file(sd, str(src / "consolidated.safetensors"))
    return src


def _drop(key):
    return lambda p: p["vision_encoder"].pop(key)


def _set(**kw):
    return lambda p: p["vision_encoder"].update(kw)


def _no_vision_tensors(sd):
    for k in [k for k in sd if k.startswith(("vision_", "patch_merger", "pre_mm"))]:
        del sd[k]


def _untekken(folder):
    tj = json.loads((folder / "tekken.json").read_text())
    for t in tj["special_tokens"]:
        if t["token_str"] == "[IMG_BREAK]":
            t["token_str"] = "[IMG_BREAK_X]"
    (folder / "tekken.json").write_text(json.dumps(tj))


@pytest.mark.parametrize(
    ("change", "tensors", "error", "match"),
    [
        (lambda p: p.pop("vision_encoder"), None, E.InvalidModelConfig, "vision_encoder"),
        (lambda p: p.update(vision_encoder=None), None, E.InvalidModelConfig, "vision_encoder"),
        (_drop("rope_theta"), None, E.InvalidModelConfig, "rope_theta"),
        (_drop("num_hidden_layers"), None, E.InvalidModelConfig, "num_hidden_layers"),
        (_drop("spatial_merge_size"), None, E.InvalidModelConfig, "spatial_merge_size"),
        (_drop("image_break_token_id"), None, E.InvalidModelConfig, "image_break_token_id"),
        (_set(image_break_token_id=0), None, E.InvalidModelConfig, "image_break_token_id"),
        (_set(image_break_token_id="12"), None, E.InvalidModelConfig, "image_break_token_id"),
        (_set(image_break_token_id=10**6), None, E.TensorShapeMismatch, "IMG_BREAK"),
        (_set(image_size="big"), None, E.InvalidModelConfig, "vision_encoder"),
        (lambda p: p.pop("norm_eps"), None, E.InvalidModelConfig, "norm_eps"),
        (None, _no_vision_tensors, E.MissingModelFile, "vision tower tensors"),
        (None, lambda sd: sd.update({"vision_encoder.extra.weight": sd["norm.weight"].clone()}),
         E.UnmappedTensor, "vision_encoder.extra"),
        (_set(image_break_token_id=-1), "untekken", E.MissingModelFile, "IMG_BREAK"),
    ],
)  # fmt: skip
def test_refused_before_writing(work, tmp_path, change, tensors, error, match):
    untekken = tensors == "untekken"
    src = _edit(work["mistral3"][0], tmp_path, change, None if untekken else tensors)
    if untekken:
        _untekken(src)
    text, proj = tmp_path / "out" / "t.gguf", tmp_path / "out" / "m.gguf"
    with pytest.raises(error, match=match):
        mistral_to_gguf(src, text, "f16", mmproj=proj)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_reference_asserts_without_vision_encoder(work, tmp_path):
    """What ours names (above) stops the reference on an assert."""
    src = _edit(work["mistral3"][0], tmp_path, lambda p: p.pop("vision_encoder"))
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, script, str(src), "--mistral-format", "--mmproj",
                    "--outfile", str(tmp_path / "ref.gguf")])  # fmt: skip
    assert r.returncode != 0 and "does not support multimodal" in r.stderr


def test_with_the_hf_files_beside(work, tmp_path):
    """Mistral's repositories hold the HF files beside the original ones: with config.json
    there (gguf-py reads its name) the projector is still the reference's."""
    mis, hf = work["mistral3"]
    src = _edit(mis, tmp_path)
    for f in ("config.json", "preprocessor_config.json", "tokenizer_config.json"):
        shutil.copy(hf / f, src / f)
    mistral_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    r = _reference([[str(src), "--mistral-format", "--mmproj", "--outtype", "f16",
                     "--outfile", str(tmp_path / "ref.gguf")]])  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "m.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()
