"""Gemma 3n's projector (``gemma3nv`` MobileNetV5 vision + ``gemma3na`` conformer audio).

transformers 5.24 builds Gemma 3n's vision tower only through timm (which needs
torchvision; both live in the timm oracle folder scripts/test.sh fills, and only the
builder's subprocess imports them: tests/support/gemma3n_vlm.py).  A tiny seeded
Gemma3nForConditionalGeneration (support.gemma3n_vlm.build_gemma3n_vlm: a four-stage
MobileNetV5 with every block kind of the 300M encoder, a 2-layer conformer, the
``gemma3n`` text of the text harness):

* our projector is ``convert_hf_to_gguf.py --mmproj``'s file byte for byte at f32, f16,
  bf16 and q8_0, the text file beside it too, and the CLI writes both;
* the sub-sampler's two group-norm scales, which every transformers-built (and Hub)
  checkpoint has, stop the reference (its gguf-py has no name for them: pinned); ours
  writes them as ``a.conv1d.{i}.norm.weight`` (deliberate);
* mtmd (llama-cpp-python 0.3.36 has the ``mobilenetv5`` graph, no Gemma 3n audio graph)
  loads the projector beside a text as wide as MobileNetV5's output (2048: mtmd takes the
  projector's width from ``mm.input_projection``'s *input* side and needs the text to
  match) and encodes an image; with the reference's layout (block layer scales 1-D) the
  runtime multiplies the scales along the image width, not the channels, so the
  embeddings are not transformers' (pinned); with the scales as ``[1, C, 1, 1]`` they are
  transformers' ``get_image_features`` within 4e-3 of their scale.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.gemma3n_vlm import SSCP_NORMS, build_gemma3n_vlm, image, wide_text
from support.llama_sdist import llama_cpp_root
from test_convert_mmproj import TYPES, _mtmd_embeddings, _reference, _same
from weightsmith.convert import hf_to_gguf
from weightsmith.convert._mmproj import plan_mmproj, write_mmproj


def _projector_only(src: Path, dst: Path, t: str, fix=None) -> None:
    """Our projector alone (the ``wide`` folder has no text tensors); ``fix`` may replace
    tensor plans before writing."""
    stack: list = []
    try:
        p = plan_mmproj(src, t, stack)
        if fix is not None:
            p.tensors = [fix(tp) for tp in p.tensors]
        write_mmproj(p, src, dst)
    finally:
        for h in stack:
            h.close()


@pytest.fixture(scope="module")
def g3n(tmp_path_factory) -> dict:
    """The two folders, transformers' features, and (beside them) the reference's files
    (``ref-*``) and ours (``ours-*``); the wide text GGUF mtmd pairs with the projector."""
    root = tmp_path_factory.mktemp("gemma3n-mmproj")
    out = build_gemma3n_vlm(root)
    hub, wide = out["hub"], out["wide"]
    jobs = [[str(hub), "--outfile", str(root / "ref-text-f16.gguf"), "--outtype", "f16"]]
    for t in TYPES:
        jobs.append([str(hub), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(hub, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    jobs.append([str(wide), "--outfile", str(root / "ref-wide-f16.gguf"), "--outtype", "f16",
                 "--mmproj"])  # fmt: skip
    _reference(jobs)
    _projector_only(wide, root / "ours-wide-f16.gguf", "f16")
    hf_to_gguf(wide_text(root / "wide-text"), root / "wide-text-f16.gguf", "f16")
    return {**out, "root": root}


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(g3n, t):
    root = g3n["root"]
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")


def test_text_same_as_reference(g3n):
    root = g3n["root"]
    _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_wide_projector_same_as_reference(g3n):
    root = g3n["root"]
    _same(root / "ours-wide-f16.gguf", root / "ref-wide-f16.gguf")


def test_cli_writes_both(g3n, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the same two files as the API."""
    from weightsmith.cli._main import main

    root, dst = g3n["root"], tmp_path / "g.gguf"
    assert (
        main(["convert", str(g3n["hub"]), str(dst), "--type", "q8_0", "--mmproj", "--quiet"]) == 0
    )
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (root / "ref-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (root / "ours-text-q8_0.gguf").read_bytes()


def test_projector_contents(g3n):
    """The rows the class derives, and the layout mtmd's loader reads."""
    from support import gguf_c_reader

    kv, tensors = gguf_c_reader.read(g3n["root"] / "ours-mmproj-f16.gguf")

    def u32(k: str) -> int:
        return int(np.frombuffer(kv[k][2], np.uint32)[0])

    assert kv["clip.vision.projector_type"][2] == b"gemma3nv"
    assert kv["clip.audio.projector_type"][2] == b"gemma3na"
    assert u32("clip.vision.image_size") == 512 and u32("clip.vision.patch_size") == 2
    assert u32("clip.vision.block_count") == 128  # the class's placeholder
    assert u32("clip.audio.num_mel_bins") == 16
    shapes = {t[0]: t[2] for t in tensors}
    # four stages, numbered as the source's blocks.{stage}.{block}
    assert {n.split(".")[2] for n in shapes if n.startswith("v.blk.")} == {"0", "1", "2", "3"}
    assert "v.blk.2.1.attn.key.down_conv.weight" in shapes  # the strided-K/V attention
    assert "v.blk.3.1.attn.key.down_conv.weight" not in shapes
    assert shapes["v.conv_stem.conv.bias"] == [1, 1, 8]  # ggml order, [1, C, 1, 1] in torch's
    assert len(shapes["v.blk.1.0.layer_scale.gamma"]) == 1  # the reference's 1-D scales


def test_sscp_norms_stop_the_reference_and_ours_names_them(g3n, tmp_path):
    """The sub-sampler's norm scales (in every checkpoint transformers writes): the
    reference cannot map them; ours writes them as ``a.conv1d.{i}.norm.weight`` and the
    rest of the file as without them."""
    from safetensors.numpy import load_file, save_file

    from support import gguf_c_reader

    src = tmp_path / "hub"  # the same folder name: general.name is made from it
    shutil.copytree(g3n["hub"], src)
    sd = load_file(src / "model.safetensors")
    sd.update(g3n["sscp_norms"])
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    script = llama_cpp_root() / "convert_hf_to_gguf.py"
    ref = tmp_path / "ref.gguf"
    r = pyfork.run([sys.executable, str(script), str(src), "--outfile", str(ref),
                        "--outtype", "f32", "--mmproj"])  # fmt: skip
    assert r.returncode != 0 and f"Can not map tensor {SSCP_NORMS[0]!r}" in r.stderr
    ours = tmp_path / "ours.gguf"
    hf_to_gguf(src, tmp_path / "text.gguf", "f32", mmproj=ours)
    kv, tensors = gguf_c_reader.read(ours)
    kr, base = gguf_c_reader.read(g3n["root"] / "ours-mmproj-f32.gguf")
    assert kv == kr
    extra = {t[0]: t for t in tensors if t[0].startswith("a.conv1d.") and ".norm." in t[0]}
    assert sorted(extra) == ["a.conv1d.0.norm.weight", "a.conv1d.1.norm.weight"]
    for i, k in enumerate(SSCP_NORMS):
        assert np.frombuffer(extra[f"a.conv1d.{i}.norm.weight"][3], np.float32).tolist() == (
            g3n["sscp_norms"][k].tolist()
        )
    assert [t for t in tensors if t[0] not in extra] == base


def _mtmd_ctx(text: Path, mmproj: Path):
    """(llama, mtmd context or None), for the support checks."""
    import llama_cpp
    from llama_cpp import mtmd_cpp

    llm = llama_cpp.Llama(model_path=str(text), n_ctx=256, n_threads=2, verbose=False)
    params = mtmd_cpp.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 2
    return llm, mtmd_cpp.mtmd_init_from_file(str(mmproj).encode(), llm.model, params)


def test_mtmd_needs_a_text_as_wide_as_the_tower(g3n):
    """mtmd 0.3.36 refuses the projector beside the model's own 64-wide text (it reads the
    projector's width off ``mm.input_projection``'s input side: 2048); beside a 2048-wide
    text it loads it, with vision and without audio (no Gemma 3n audio graph)."""
    from llama_cpp import mtmd_cpp

    root = g3n["root"]
    _, ctx = _mtmd_ctx(root / "ours-text-f16.gguf", root / "ours-mmproj-f16.gguf")
    assert ctx is None
    llm, ctx = _mtmd_ctx(root / "wide-text-f16.gguf", root / "ours-wide-f16.gguf")
    assert ctx is not None
    try:
        assert mtmd_cpp.mtmd_support_vision(ctx) and not mtmd_cpp.mtmd_support_audio(ctx)
    finally:
        mtmd_cpp.mtmd_free(ctx)
    del llm


def _scales_4d(src: Path):
    """The block layer scales as ``[1, C, 1, 1]`` (the shape the reference gives the
    stem's bias; its block path skips that reshape)."""
    from safetensors.numpy import load_file

    sd = load_file(src / "model.safetensors")

    def fix(tp):
        if not tp.name.endswith("layer_scale.gamma"):
            return tp
        hf = "model.vision_tower.timm_model.blocks." + tp.name.removeprefix("v.blk.")
        x = sd[hf].reshape(1, -1, 1, 1)
        return dataclasses.replace(tp, shape=x.shape, source=None, pieces=[], make=lambda: x)

    return fix


def test_llama_cpp_encodes_image(g3n):
    """mtmd's embeddings against transformers' get_image_features (f16: mtmd 0.3.36 cannot
    run the f32 file on CPU -- its depthwise convs multiply an f32 kernel by f16 im2col
    columns, which the CPU backend refuses, measured)."""
    root, hf = g3n["root"], g3n["features"]
    scale = float(np.abs(hf).max())
    text = root / "wide-text-f16.gguf"
    as_reference = _mtmd_embeddings(text, root / "ours-wide-f16.gguf", image())
    assert as_reference.shape == hf.shape == (256, 2048)
    # the reference's 1-D scales, multiplied along the width: not transformers' features
    assert np.abs(as_reference - hf).max() > 0.5 * scale
    fixed = root / "wide-scales-4d-f16.gguf"
    _projector_only(g3n["wide"], fixed, "f16", _scales_4d(g3n["wide"]))
    emb = _mtmd_embeddings(text, fixed, image())
    assert np.abs(emb - hf).max() <= 4e-3 * scale


_LOAD = """
import sys, llama_cpp
from llama_cpp import mtmd_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
params = mtmd_cpp.mtmd_context_params_default()
params.use_gpu = False
ctx = mtmd_cpp.mtmd_init_from_file(sys.argv[2].encode(), llm.model, params)
print("loaded" if ctx else "refused")
"""


@pytest.mark.parametrize(
    "case, assertion",
    [
        # an f32 kernel against f16 im2col columns in the depthwise convs
        ("f32", "GGML_ASSERT(*cur_backend_id != -1)"),
        # 256 px: the last stage is 8 columns wide with 16 channels, and the 1-D layer
        # scales broadcast along the width
        ("256px", "GGML_ASSERT(ggml_can_repeat(b, a))"),
    ],
)
def test_mtmd_aborts(g3n, tmp_path, case, assertion):
    """Two runtime limits of mtmd 0.3.36 on the reference's layout, pinned: it aborts
    while loading (in a subprocess here)."""
    import json

    src, t = g3n["wide"], "f16"
    if case == "f32":
        t = "f32"
    else:
        src = tmp_path / "wide"
        shutil.copytree(g3n["wide"], src)
        pre = json.loads((src / "preprocessor_config.json").read_text())
        pre["size"] = {"height": 256, "width": 256}
        (src / "preprocessor_config.json").write_text(json.dumps(pre))
    proj = tmp_path / "mmproj.gguf"
    _projector_only(src, proj, t)
    r = subprocess.run([sys.executable, "-c", _LOAD, str(g3n["root"] / "wide-text-f16.gguf"),
                        str(proj)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode != 0 and "loaded" not in r.stdout
    assert assertion in r.stderr
