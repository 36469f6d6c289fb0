"""Vision projectors (``--mmproj``) against llama.cpp's converter and runtime.

For each tiny random VLM (tests/support/vlm_models.py, built once per module):

* the projector GGUF is byte-identical to ``convert_hf_to_gguf.py --mmproj`` at f32,
  f16, bf16 and q8_0 (the whole file: KVs, tensor infos, data), and the text GGUF
  written beside it to ``convert_hf_to_gguf.py`` without ``--mmproj``;
* llama.cpp's multimodal runtime (mtmd, as llama-cpp-python 0.3.36 binds it) loads our
  projector with our text model, and encodes an image into the embeddings
  transformers' ``get_image_features`` gives for the same pixels;
* a folder that cannot give a projector is refused with a named error before any
  file is written.
"""

from __future__ import annotations

import ctypes
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.llama_sdist import llama_cpp_root
from support.mtmd_ctx import mtmd_pair
from support.vlm_models import build
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

ARCHS = ["gemma3", "llava", "qwen25vl", "qwen3vl", "mistral3", "qwen3vlmoe", "qwen35vl"]
# llama.cpp's image embeddings vs transformers' features, as a fraction of their scale:
# measured 2.3e-4 (Gemma 3), 2.5e-4 (Pixtral), 3.0e-3 (Qwen2.5-VL's window-attention
# ViT with 2-D RoPE, in ggml's float32 ops), 3.1e-4 (Qwen3-VL, deepstack features included)
TOL = {
    "gemma3": 1e-3,
    "llava": 1e-3,
    "qwen25vl": 6e-3,
    "qwen3vl": 1e-3,
    "mistral3": 1e-3,
    "qwen3vlmoe": 1e-3,
    "qwen35vl": 1e-3,
}
# more projectors, one line each
ARCHS += ["qwen35vlmoe"]
TOL["qwen35vlmoe"] = 1e-3
ARCHS += ["qwen2vl"]
TOL["qwen2vl"] = 1e-3
ARCHS += ["smolvlm"]
TOL["smolvlm"] = 1e-3
ARCHS += ["lfm2vl"]
TOL["lfm2vl"] = 1e-3
ARCHS += ["llama4vl"]
TOL["llama4vl"] = 1e-3
ARCHS += ["lightonocr"]
TOL["lightonocr"] = 1e-3
ARCHS += ["paddleocrvl"]
TOL["paddleocrvl"] = 1e-3
# the image side llama.cpp encodes as one tile, unresized (LFM2-VL: 64 tokens at least)
IMAGE_SIZE = {"lfm2vl": 256}
TYPES = ["f32", "f16", "bf16", "q8_0"]

_DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys
    script, jobs = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(script))
    for args in jobs:
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
    """
)


def _reference(jobs: list[list[str]]) -> None:
    """convert_hf_to_gguf.py once per argument list, all in one process (torch loads once)."""
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]


def convert_both(src: Path, root: Path, text_types: Sequence[str] = ("f16",)) -> None:
    """Beside ``src`` in ``root``: the reference's projector at each type (``ref-mmproj-T``,
    and its text at each of ``text_types`` as ``ref-text-T``) and ours (``ours-text-T``,
    ``ours-mmproj-T``), the reference's runs in one batch."""
    jobs = [[str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t]
            for t in text_types]  # fmt: skip
    for t in TYPES:
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    _reference(jobs)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Per arch: the model folder; the reference's text f16 and projectors; ours."""
    root = tmp_path_factory.mktemp("mmproj")
    out: dict = {"root": root}
    jobs = []
    for arch in ARCHS:
        src = build(arch, root / "models" / arch)
        out[arch] = src
        ref = root / "ref" / arch
        ref.mkdir(parents=True)
        jobs.append([str(src), "--outfile", str(ref / "text-f16.gguf"), "--outtype", "f16"])
        for t in TYPES:
            jobs.append([str(src), "--outfile", str(ref / f"mmproj-{t}.gguf"), "--outtype", t,
                         "--mmproj"])  # fmt: skip
        ours = root / "ours" / arch
        for t in TYPES:
            hf_to_gguf(src, ours / f"text-{t}.gguf", t, mmproj=ours / f"mmproj-{t}.gguf")
    _reference(jobs)
    return out


# the one tensor ours adds: the pinned converter drops the text embedding of an HF
# LLaVA-Pixtral checkpoint before it extracts this row, and mtmd refuses its file then
IMG_BREAK = "v.token_embd.img_break"
EXTRA = {"llava": IMG_BREAK, "mistral3": IMG_BREAK}


def _same(ours: Path, ref: Path, extra: str | None = None) -> None:
    """Equal KVs (in order), tensor infos and data; without ``extra``, equal bytes."""
    from support import gguf_c_reader

    ko, to = gguf_c_reader.read(ours)
    kr, tr = gguf_c_reader.read(ref)
    assert list(ko) == list(kr)
    for k in kr:
        assert ko[k] == kr[k], k
    if extra is not None:
        assert [x[0] for x in to].count(extra) == 1
        to = [x for x in to if x[0] != extra]
    assert [x[:3] for x in to] == [x[:3] for x in tr]
    for a, b in zip(to, tr):
        assert a[3] == b[3], f"{a[0]} data differs"
    if extra is None:
        assert ours.read_bytes() == ref.read_bytes()


# Llama 4: the pre-FFN norms the pinned gguf-py names attn_post_norm (Gemma 4's mapping
# of the same HF name wins there) are ln2 in ours, which llama.cpp's ViT graph reads
RENAMED = {"llama4vl": (".ln2.", ".attn_post_norm.")}


def _same_renamed(ours: Path, ref: Path, ours_part: str, ref_part: str) -> None:
    """Equal KVs (in order), tensor types, shapes and data, in the same order; our names
    with ``ours_part`` (at least one) are the reference's with ``ref_part``."""
    from support import gguf_c_reader

    ko, to = gguf_c_reader.read(ours)
    kr, tr = gguf_c_reader.read(ref)
    assert list(ko) == list(kr) and all(ko[k] == kr[k] for k in kr)
    assert any(ours_part in x[0] for x in to) and not any(ref_part in x[0] for x in to)
    assert [(x[0].replace(ours_part, ref_part), *x[1:]) for x in to] == tr


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_projector_same_as_reference(work, arch, t):
    root = work["root"]
    ours, ref = root / "ours" / arch / f"mmproj-{t}.gguf", root / "ref" / arch / f"mmproj-{t}.gguf"
    if arch in RENAMED:
        _same_renamed(ours, ref, *RENAMED[arch])
    else:
        _same(ours, ref, EXTRA.get(arch))


def test_img_break_row(work):
    """The added tensor is row [IMG_BREAK] of the text embedding, as llama.cpp's
    LlavaVisionModel extracts it (from a Mistral-format checkpoint)."""
    from safetensors.numpy import load_file

    from weightsmith.gguf import read

    src = work["llava"]
    tid = int(next(iter(json.loads((src / "tokenizer_config.json").read_text())[
        "added_tokens_decoder"])))  # fmt: skip
    emb = load_file(src / "model.safetensors")["language_model.model.embed_tokens.weight"]
    with read(work["root"] / "ours" / "llava" / "mmproj-f32.gguf") as f:
        t = next(x for x in f.tensors if x.name == IMG_BREAK)
        got = np.array(f.numpy(IMG_BREAK))
    assert t.ggml_type.name == "F32" and t.shape == (emb.shape[1],)
    np.testing.assert_array_equal(got, emb[tid].astype(np.float32))


@pytest.mark.parametrize("arch", ARCHS)
def test_text_same_as_reference(work, arch):
    root = work["root"]
    _same(root / "ours" / arch / "text-f16.gguf", root / "ref" / arch / "text-f16.gguf")


def test_projector_contents(work):
    """Guard against a vacuous pass: the files hold the tower and projector, typed as
    llama.cpp wants them, and say what they are."""
    from weightsmith.gguf import read

    with read(work["root"] / "ours" / "gemma3" / "mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: t.ggml_type.name for t in f.tensors}
    assert md["general.architecture"] == "clip" and md["general.type"] == "mmproj"
    assert md["clip.projector_type"] == "gemma3" and md["clip.vision.projection_dim"] == 256
    assert md["clip.vision.projector.scale_factor"] == 2
    assert types["mm.input_projection.weight"] == "F16"  # forced, even at q8_0
    assert types["v.patch_embd.weight"] == "F32" and types["v.blk.1.attn_q.weight"] == "Q8_0"
    assert not any(n.startswith(("blk.", "token_embd")) for n in types)
    with read(work["root"] / "ours" / "llava" / "mmproj-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["clip.projector_type"] == "pixtral" and md["clip.use_silu"] is True
    assert {"mm.1.weight", "mm.2.bias", "v.pre_ln.weight", "v.blk.1.ffn_gate.weight"} <= names
    with read(work["root"] / "ours" / "qwen25vl" / "mmproj-f16.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "qwen2.5vl_merger" and md["clip.vision.n_wa_pattern"] == 2
    # the Conv3d kernel as two Conv2d kernels, and the fused QKV as three
    assert types["v.patch_embd.weight"] == types["v.patch_embd.weight.1"] == ("F16", (64, 3, 8, 8))
    assert {"v.blk.3.attn_q.bias", "v.blk.3.attn_k.weight", "v.blk.3.attn_v.weight"} <= set(types)
    with read(work["root"] / "ours" / "qwen3vl" / "mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "qwen3vl_merger" and md["clip.use_gelu"] is True
    # deepstack mergers after tower layers 1 and 2, named by the layer they follow
    assert list(md["clip.vision.is_deepstack_layers"]) == [False, True, True, False]
    assert {"v.deepstack.1.fc1.weight", "v.deepstack.2.norm.bias"} <= set(types)
    assert not any(n.startswith("v.deepstack.0.") for n in types)
    assert types["v.blk.0.attn_qkv.weight"] == ("Q8_0", (192, 64))  # kept fused
    assert types["v.patch_embd.weight.1"] == ("F32", (64, 3, 8, 8))
    assert types["v.position_embd.weight"][0] == "F32"
    with read(work["root"] / "ours" / "qwen3vl" / "text-f16.gguf") as f:
        md = f.metadata
    assert md["general.architecture"] == "qwen3vl" and md["qwen3vl.n_deepstack_layers"] == 2
    assert list(md["qwen3vl.rope.dimension_sections"]) == [2, 3, 3, 0]
    with read(work["root"] / "ours" / "mistral3" / "mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "pixtral" and md["clip.vision.spatial_merge_size"] == 2
    assert types["mm.patch_merger.weight"] == ("F32", (64, 256))  # forced: F32 unless f16
    assert types["mm.input_norm.weight"][0] == "F32" and types["mm.2.weight"][0] == "Q8_0"
    with read(work["root"] / "ours" / "mistral3" / "text-f16.gguf") as f:
        assert f.metadata["general.architecture"] == "mistral3"


def test_projector_type_with_other_text_types(work, tmp_path):
    """``auto`` reads the vision tensors' dtype (bf16 here); a llama-quantize type for the
    text file leaves the projector at f16 (llama-quantize does not quantize projectors)."""
    ours = work["root"] / "ours" / "gemma3"
    hf_to_gguf(work["gemma3"], tmp_path / "t.gguf", "q4_k_m", mmproj=tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == (ours / "mmproj-f16.gguf").read_bytes()
    hf_to_gguf(work["gemma3"], tmp_path / "t2.gguf", "auto", mmproj=tmp_path / "m2.gguf")
    assert (tmp_path / "m2.gguf").read_bytes() == (ours / "mmproj-bf16.gguf").read_bytes()


# --------------------------------------------------------------------------- llama.cpp runs it


def _image(size: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.integers(0, 256, (size, size, 3), dtype=np.uint8)


def _mtmd_embeddings(
    text: Path,
    mmproj: Path,
    img: np.ndarray | None,
    pcm: np.ndarray | None = None,
    *,
    flash_attn: bool | None = None,
) -> np.ndarray:
    """llama.cpp's embeddings of ``img`` (HWC uint8), or of ``pcm`` (float32 mono samples
    at the projector's rate), through our projector.

    Encoded again (at most twice) when the result holds a NaN: the pinned mtmd's Pixtral
    path leaves NaNs in some [IMG_BREAK] rows (and only there) in a few encodes of the
    same file (measured 2026-11-27: llava 5 of 6,873 and mistral3 6 of 6,563 encodes at two
    threads, 0.4 % at one; 4 of 7,452 still after three tries), a runtime fault our
    byte-identical file shares with the reference's.  The patch rows were never NaN.
    ``flash_attn``: mtmd's own choice (auto: on for the CPU) unless given."""
    for _ in range(3):
        emb = _mtmd_encode(text, mmproj, img, pcm, flash_attn)
        if not np.isnan(emb).any():
            break
    return emb


def _mtmd_encode(
    text: Path,
    mmproj: Path,
    img: np.ndarray | None,
    pcm: np.ndarray | None,
    flash_attn: bool | None = None,
):
    import llama_cpp
    from llama_cpp import mtmd_cpp

    extra = {}
    if flash_attn is not None:
        extra["flash_attn_type"] = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
    with mtmd_pair(text, mmproj, **extra) as (llm, ctx):
        if pcm is None:
            assert mtmd_cpp.mtmd_support_vision(ctx)
            h, w, _ = img.shape
            buf = (ctypes.c_uint8 * img.size).from_buffer_copy(img.tobytes())
            bitmap = mtmd_cpp.mtmd_bitmap_init(w, h, buf)
            kind = mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE
        else:
            assert mtmd_cpp.mtmd_support_audio(ctx)
            samples = np.ascontiguousarray(pcm, dtype=np.float32)
            data = (ctypes.c_float * samples.size).from_buffer_copy(samples.tobytes())
            bitmap = mtmd_cpp.mtmd_bitmap_init_from_audio(samples.size, data)
            kind = mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_AUDIO
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        marker = mtmd_cpp.mtmd_default_marker()
        inp = mtmd_cpp.mtmd_input_text()
        prompt = b"see " + marker  # kept alive: the struct holds a pointer to it
        inp.text = prompt
        inp.text_len = len(prompt)
        inp.add_special = False
        inp.parse_special = True
        bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
            if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == kind:
                n = mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
                assert mtmd_cpp.mtmd_encode_chunk(ctx, chunk) == 0
                out = mtmd_cpp.mtmd_get_output_embd(ctx)
                # the input width: Qwen3-VL's deepstack features ride beside the
                # embedding (n_embd * (1 + n_deepstack))
                n_embd = llama_cpp.llama_model_n_embd_inp(llm.model)
                emb = np.ctypeslib.as_array(out, shape=(n * n_embd,)).copy()
                break
        else:
            raise AssertionError("no image (or audio) chunk")
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        mtmd_cpp.mtmd_bitmap_free(bitmap)
        return emb.reshape(n, n_embd)


def _hf_image_features(folder: Path, img: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    pre = json.loads((folder / "preprocessor_config.json").read_text())
    x = (img.astype(np.float32) / 255.0 - np.float32(pre["image_mean"])) / np.float32(
        pre["image_std"]
    )
    pixels = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)[None]))
    cfg = AutoConfig.from_pretrained(folder)
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    kw = {}
    if cfg.model_type in ("llava", "mistral3", "lighton_ocr"):
        kw["image_sizes"] = torch.tensor([list(img.shape[:2])])
    if cfg.model_type in ("idefics3", "smolvlm"):  # [batch, images, C, H, W]
        pixels = pixels[:, None]
    if cfg.model_type == "lfm2_vl":
        # NaFlex input (its image processor needs torchvision): the patches row by row,
        # each flattened channel-last, with their grid and an all-ones mask
        p = cfg.vision_config.patch_size
        c, h, w = pixels.shape[1:]
        pixels = pixels.reshape(1, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        pixels = pixels.reshape(1, (h // p) * (w // p), p * p * c)
        kw["spatial_shapes"] = torch.tensor([[h // p, w // p]])
        kw["pixel_attention_mask"] = torch.ones(1, pixels.shape[1], dtype=torch.bool)
    if cfg.model_type in (
        "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen2_vl",
        "paddleocr_vl",
    ):  # fmt: skip  # flattened patches
        from transformers import AutoImageProcessor

        out = AutoImageProcessor.from_pretrained(folder)(
            images=[img], return_tensors="pt", do_resize=False
        )
        pixels, kw["image_grid_thw"] = out["pixel_values"], out["image_grid_thw"]
    with torch.no_grad():
        f = m.get_image_features(pixel_values=pixels, **kw)
        if cfg.model_type == "llama4":  # the projection is applied by forward, not here
            f = m.multi_modal_projector(f.last_hidden_state)
    deep = getattr(f, "deepstack_features", None)
    f = getattr(f, "pooler_output", f)
    if isinstance(f, (list, tuple)):
        f = torch.cat(list(f), 0)
    if deep:  # Qwen3-VL: llama.cpp's rows are [merger, deepstack 0, deepstack 1, ...]
        f = torch.cat([f, *(torch.cat(list(d), 0) for d in deep)], -1)
    return f.reshape(-1, f.shape[-1]).float().numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_encodes_image(work, arch):
    ours = work["root"] / "ours" / arch
    img = _image(IMAGE_SIZE.get(arch, 64))
    got = _mtmd_embeddings(ours / "text-f32.gguf", ours / "mmproj-f32.gguf", img)
    want = _hf_image_features(work[arch], img)
    if arch in EXTRA:
        # Pixtral: llama.cpp puts the [IMG_BREAK] embedding (our added tensor) after each
        # row of patches (Mistral 3: of 2x2-merged patches) but the last; transformers'
        # features are the patches alone
        side = 64 // 8 // (2 if arch == "mistral3" else 1)
        rows = [got[r * (side + 1) : r * (side + 1) + side] for r in range(side)]
        breaks = got[[r * (side + 1) + side for r in range(side - 1)]]
        from weightsmith.gguf import read

        with read(ours / "mmproj-f32.gguf") as f:
            row = np.array(f.numpy(IMG_BREAK))
        # the runtime's NaNs (see _mtmd_embeddings) fall only in these rows (measured: in
        # 9 of 7,103 encodes, at times all of them): every value it computes is the file's
        ok = ~np.isnan(breaks)
        np.testing.assert_array_equal(breaks[ok], np.broadcast_to(row, breaks.shape)[ok])
        got = np.concatenate(rows)
    if arch == "llama4vl":
        # llama.cpp's pixel shuffle emits the 4 x 4 token grid transposed against
        # transformers' (measured: each token equal to the transposed one's)
        side = int(len(want) ** 0.5)
        want = want.reshape(side, side, -1).transpose(1, 0, 2).reshape(len(want), -1)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL[arch] * max(scale, 1.0), np.abs(got - want).max()


def test_llama4_reference_projector_wrong_in_mtmd(work):
    """Why ours names Llama 4's pre-FFN norms ln2: mtmd runs the reference's file (the
    norms as attn_post_norm) as a ViT with no norm before the FFN; its embeddings are off
    by more than a tenth of their scale (measured 0.17 at scale 0.45), ours within 1e-3
    (test_llama_cpp_encodes_image)."""
    root = work["root"]
    img = _image(64)
    got = _mtmd_embeddings(root / "ours" / "llama4vl" / "text-f32.gguf",
                           root / "ref" / "llama4vl" / "mmproj-f32.gguf", img)  # fmt: skip
    want = _hf_image_features(work["llama4vl"], img)
    side = int(len(want) ** 0.5)  # the token grid transposed, as for ours
    want = want.reshape(side, side, -1).transpose(1, 0, 2).reshape(len(want), -1)
    assert got.shape == want.shape
    assert np.abs(got - want).max() > 0.1 * float(np.abs(want).max())


def test_qwen3vlmoe_text_in_llama_cpp(work):
    """The fused experts in the Hub's layout (transposed against Qwen3-MoE's): llama.cpp's
    logits on our text file are transformers' (which transposes them on load)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from test_convert_hf_to_gguf import _llama_logits
    from weightsmith.gguf import read

    ours = work["root"] / "ours" / "qwen3vlmoe"
    with read(ours / "text-f16.gguf") as f:
        types = {t.name: t.shape for t in f.tensors}
    assert types["blk.0.ffn_gate_exps.weight"] == (4, 96, 64)  # [n_expert, n_ff, n_embd]
    assert types["blk.0.ffn_down_exps.weight"] == (4, 64, 96)
    tokens = [9707, 11, 1879, 0, 358, 1079, 264, 2272]
    got = _llama_logits(ours / "text-f32.gguf", tokens)
    m = AutoModelForImageTextToText.from_pretrained(work["qwen3vlmoe"], dtype=torch.float32)
    with torch.no_grad():
        want = m.eval()(input_ids=torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_qwen3vlmoe_transformers_layout_refused(work, tmp_path):
    """A folder as transformers 5 saves it (experts transposed against the Hub's) would
    convert to wrong experts: a named error, nothing written."""
    import shutil

    from safetensors.torch import load_file, save_file

    src = tmp_path / "q"
    shutil.copytree(work["qwen3vlmoe"], src)
    sd = load_file(src / "model.safetensors")
    for k in [k for k in sd if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        sd[k] = sd[k].transpose(1, 2).contiguous()
    save_file(sd, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(E.TensorShapeMismatch, match="transformers 5 saves the transpose"):
        hf_to_gguf(src, tmp_path / "out" / "t.gguf", "f16")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- refused


def test_refused_before_writing(work, tmp_path):
    import shutil

    src = tmp_path / "vlm"
    shutil.copytree(work["gemma3"], src)
    (src / "preprocessor_config.json").unlink()
    (src / "processor_config.json").unlink()
    out = tmp_path / "out"
    with pytest.raises(E.MissingModelFile, match="image processor") as ei:
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert "image_mean" in str(ei.value)
    assert not out.exists()
    cfg = json.loads((work["gemma3"] / "config.json").read_text())
    del cfg["vision_config"]
    shutil.copy(work["gemma3"] / "preprocessor_config.json", src)
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match="vision"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    # transformers 5's own names (model.vision_tower.*) are not the Hub's: refused, as the
    # reference would write an empty projector
    from support.vlm_models import hub_layout

    shutil.copy(work["gemma3"] / "config.json", src)
    hub_layout(src, lambda k: "model." + k if not k.startswith("language_model.") else k)
    with pytest.raises(E.MissingModelFile, match="no vision tower tensors"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


@pytest.mark.parametrize(
    ("arch", "gguf_arch"),
    [
        ("qwen25vl", "qwen2vl"),
        ("qwen3vl", "qwen3vl"),
        ("mistral3", "mistral3"),
        ("qwen3vlmoe", "qwen3vlmoe"),
    ],
)
def test_vlm_text_alone_has_no_hf_class(work, tmp_path, arch, gguf_arch):
    """These text GGUFs have no HF class of their own: a named error, nothing written."""
    from weightsmith.convert import gguf_to_hf

    with pytest.raises(E.UnknownArchitecture, match=gguf_arch):
        gguf_to_hf(work["root"] / "ours" / arch / "text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_cli_writes_both(work, tmp_path):
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(work["gemma3"]), str(dst), "--type", "f16", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    ours = work["root"] / "ours" / "gemma3"  # the same folder name: the same general.name
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (ours / "mmproj-f16.gguf").read_bytes()
    assert dst.read_bytes() == (ours / "text-f16.gguf").read_bytes()
    # GGUF -> HF has no projector to write: a usage error, nothing written
    back = tmp_path / "back"
    assert main(["convert", str(dst), str(back), "--mmproj", "--quiet"]) != 0
    assert not back.exists()


# --------------------------------------------------------------------------- Gemma 4


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory) -> Path:
    """The tiny Gemma 4 VLM; the reference's projector at each type and its text f16, and
    ours (``ref-*`` / ``ours-*`` beside the model folder)."""
    root = tmp_path_factory.mktemp("gemma4-mmproj")
    src = build("gemma4", root / "model")
    convert_both(src, root)
    return src


@pytest.mark.parametrize("t", TYPES)
def test_gemma4_projector_same_as_reference(gemma4, t):
    """Gemma 4's vision projector (``gemma4v``: the patch embedding as a Conv2d kernel,
    the position table F32, the clippable linears' bounds as 1-element F32 tensors) is
    the reference's file byte for byte; so is the text file beside it."""
    root = gemma4.parent
    _same(root / f"ours-mmproj-{t}.gguf", root / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(root / "ours-text-f16.gguf", root / "ref-text-f16.gguf")


def test_gemma4_projector_runs_in_mtmd(gemma4):
    """llama.cpp's multimodal runtime loads our Gemma 4 projector with our text model and
    encodes an image into text-width embeddings (llama.cpp resizes the image itself and
    pools by 3: 81 tokens for this one).  Compared with transformers' features in
    test_gemma4_embeddings_vs_transformers."""
    from weightsmith.gguf import read

    root = gemma4.parent
    with read(root / "ours-mmproj-f32.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.vision.projector_type"] == "gemma4v"
    assert types["v.patch_embd.weight"] == ("F32", (64, 3, 8, 8))
    assert types["v.blk.1.attn_q.input_max"] == ("F32", (1,))
    got = _mtmd_embeddings(root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf", _image(64))
    assert got.shape == (81, 256) and np.isfinite(got).all() and np.abs(got).max() > 0


def _gemma4_hf_features(
    folder: Path, img: np.ndarray, *, gelu_quick: bool = False, f16_pixels: bool = False
) -> np.ndarray:
    """transformers' Gemma 4 ``get_image_features`` of ``img`` through its own processor
    (``do_resize=False``: the image keeps mtmd's size, 27 x 27 patches padded to the
    processor's 2,520), optionally fed two things mtmd 0.3.36 does: ``gelu_quick``, the
    tower MLPs' activation mtmd falls back to without ``clip.use_gelu`` -- ggml's CPU
    form, input and output rounded to F16 through its lookup table; ``f16_pixels``, the
    patch input ``2 * pixel - 1`` rounded to F16 (ggml_conv_2d's im2col of an F32 kernel
    is F16)."""
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    out = AutoImageProcessor.from_pretrained(folder)(
        images=[img], return_tensors="pt", do_resize=False
    )
    pixels, positions = out["pixel_values"], out["image_position_ids"]
    if f16_pixels:  # exact in float32: the model maps it back to the F16 value
        pixels = ((pixels * 2 - 1).half().float() + 1) / 2
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    if gelu_quick:

        class GgmlGeluQuick(torch.nn.Module):
            def forward(self, x):
                h = x.half().float()
                return (h * torch.sigmoid(1.702 * h)).half().float()

        for layer in m.model.vision_tower.encoder.layers:
            layer.mlp.act_fn = GgmlGeluQuick()
    with torch.no_grad():
        f = m.model.get_image_features(pixel_values=pixels, image_position_ids=positions)
    return torch.cat(list(f.pooler_output), 0).numpy()


def test_gemma4_embeddings_vs_transformers(gemma4, tmp_path):
    """Why mtmd's Gemma 4 image embeddings are not transformers' (2.6e-2 of their scale):
    the projector (ours, byte for byte the reference's) has no ``clip.use_gelu``, so mtmd
    0.3.36 runs the tower's gated MLPs with GELU-quick instead of Gemma 4's
    ``gelu_pytorch_tanh``.  transformers fed that activation (and mtmd's F16 patch input)
    gives mtmd's embeddings within 1e-3 of scale; the same file with the one key
    ``clip.use_gelu = true`` added gives transformers' as shipped within 1e-3.  Flash
    attention (mtmd's default on the CPU: F16 K/V) is turned off for those two
    comparisons; the default runtime's honest gap is pinned."""
    from weightsmith.gguf import edit, read

    root = gemma4.parent
    text, proj = root / "ours-text-f32.gguf", root / "ours-mmproj-f32.gguf"
    with read(proj) as f:
        assert "clip.use_gelu" not in f.metadata and "clip.use_silu" not in f.metadata
    # 216 px: mtmd's preprocessor keeps the size (a multiple of 8 * 3 within its bounds)
    img = _image(216)
    want = _gemma4_hf_features(gemma4, img)
    scale = float(np.abs(want).max())
    got = _mtmd_embeddings(text, proj, img)
    assert got.shape == want.shape == (81, 256)
    honest = float(np.abs(got - want).max()) / scale
    assert 1e-2 < honest < 5e-2, honest  # measured 2.6e-2 at scale 1.7
    # mtmd's activation and input in transformers: the gap is gone
    exact = _mtmd_embeddings(text, proj, img, flash_attn=False)
    assert float(np.abs(exact - want).max()) / scale > 1e-2
    mimic = _gemma4_hf_features(gemma4, img, gelu_quick=True, f16_pixels=True)
    assert float(np.abs(exact - mimic).max()) <= 1e-3 * scale  # measured 2.2e-4
    # the file with the activation key: transformers' own activation closes it
    fixed = edit(proj, set={"clip.use_gelu": True}, out=tmp_path / "use-gelu.gguf")
    tanh = _mtmd_embeddings(text, fixed, img, flash_attn=False)
    shipped = _gemma4_hf_features(gemma4, img, f16_pixels=True)
    assert float(np.abs(tanh - shipped).max()) <= 1e-3 * scale  # measured 5.6e-4


# --------------------------------------------------------------------------- OCR VLMs


def test_paddleocr_projector_contents(work, tmp_path):
    """PaddleOCR-VL: the Hub checkpoint's packed-sequence position table and SigLIP head
    are in the folder and not in the projector; the image size is the square root of
    ``max_pixels``; the text GGUF carries the M-RoPE sections and has no HF class of its
    own (a named error, nothing written)."""
    from safetensors import safe_open

    from weightsmith.convert import gguf_to_hf
    from weightsmith.gguf import read

    src, ours = work["paddleocrvl"], work["root"] / "ours" / "paddleocrvl"
    with safe_open(src / "model.safetensors", "np") as f:
        keys = set(f.keys())
    assert "visual.vision_model.head.probe" in keys
    assert "visual.vision_model.embeddings.packing_position_embedding.weight" in keys
    with read(ours / "mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "paddleocr" and md["clip.vision.image_size"] == 64
    assert md["clip.vision.image_min_pixels"] == md["clip.vision.image_max_pixels"] == 4096
    assert types["v.position_embd.weight"] == ("F32", (64, 64))
    assert types["mm.1.weight"][0] == "Q8_0" and types["mm.input_norm.bias"][0] == "F32"
    assert len(types) == 2 + 1 + 2 + 3 * 16 + 6  # patch, position, post_ln, blocks, mm
    with read(ours / "text-f16.gguf") as f:
        md = f.metadata
    assert md["general.architecture"] == "paddleocr"
    assert list(md["paddleocr.rope.dimension_sections"]) == [2, 3, 3, 0]
    with pytest.raises(E.UnknownArchitecture, match="paddleocr"):
        gguf_to_hf(ours / "text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_paddleocr_needs_the_pixel_bounds(work, tmp_path):
    """The projector's image size and bounds come from the image processor's
    ``min_pixels`` / ``max_pixels`` (the reference fails without them), and its class from
    ``vision_config.architectures``: without either, a named error before any file is
    written."""
    import shutil

    src = tmp_path / "p"
    shutil.copytree(work["paddleocrvl"], src)
    pre = json.loads((src / "preprocessor_config.json").read_text())
    del pre["min_pixels"]
    (src / "preprocessor_config.json").write_text(json.dumps(pre))
    out = tmp_path / "out"
    with pytest.raises(E.InvalidModelConfig, match="min_pixels"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    # the vision config naming no class (as transformers 5 saves it): the top-level class
    # has no projector entry, in the reference as here
    shutil.copy(work["paddleocrvl"] / "preprocessor_config.json", src)
    cfg = json.loads((src / "config.json").read_text())
    del cfg["vision_config"]["architectures"]
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.UnknownArchitecture, match="PaddleOCRVLForConditionalGeneration"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_paddleocr_text_in_llama_cpp(work):
    """llama.cpp runs our ``paddleocr`` text file (M-RoPE; text positions are equal in
    every section) with transformers' logits for the same tokens."""
    import torch
    from transformers import AutoModelForImageTextToText

    from test_convert_hf_to_gguf import _llama_logits

    ours = work["root"] / "ours" / "paddleocrvl"
    tokens = [1, 5, 9, 33, 100, 7, 200, 42]
    got = _llama_logits(ours / "text-f32.gguf", tokens)
    m = AutoModelForImageTextToText.from_pretrained(work["paddleocrvl"], dtype=torch.float32)
    with torch.no_grad():
        want = m.eval()(input_ids=torch.tensor([tokens])).logits[0].numpy()
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 2e-3 * max(scale, 1.0), np.abs(got - want).max()


def test_cli_writes_both_ocr(work, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj`` on the OCR VLMs: the two files the
    API wrote (the same folder names, so the same general.name)."""
    from weightsmith.cli._main import main

    for arch in ("lightonocr", "paddleocrvl"):
        dst = tmp_path / arch / "t.gguf"
        assert main(["convert", str(work[arch]), str(dst), "--type", "q8_0", "--mmproj",
                     "--quiet"]) == 0  # fmt: skip
        ours = work["root"] / "ours" / arch
        assert (dst.parent / "mmproj-t.gguf").read_bytes() == (
            ours / "mmproj-q8_0.gguf"
        ).read_bytes()
        assert dst.read_bytes() == (ours / "text-q8_0.gguf").read_bytes()


def test_lightonocr_transformers_spelling_refused(work, tmp_path):
    """transformers 5's own config (``LightOnOcrForConditionalGeneration``, no
    ``text_config.architectures``) names a class the reference has neither a text nor a
    projector conversion for: a named error, nothing written (the Hub's config, which
    the tiny folder copies, converts)."""
    import shutil

    src = tmp_path / "l"
    shutil.copytree(work["lightonocr"], src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = ["LightOnOcrForConditionalGeneration"]
    del cfg["text_config"]["architectures"]
    (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="LightOnOcrForConditionalGeneration"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_lightonocr_text_back_to_hf(work, tmp_path):
    """GGUF -> HF of LightOnOCR's text file (a plain ``qwen3`` GGUF): a Qwen3ForCausalLM
    whose logits are the VLM's own for the same tokens (the vision part has no way back:
    see docs/convert-architectures.md)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from weightsmith.convert import gguf_to_hf

    back = tmp_path / "back"
    gguf_to_hf(work["root"] / "ours" / "lightonocr" / "text-f32.gguf", back, dtype="f32")
    assert json.loads((back / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    tokens = torch.tensor([[1, 5, 9, 33, 100, 7, 200, 42]])
    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(back).eval()(input_ids=tokens).logits
        vlm = AutoModelForImageTextToText.from_pretrained(work["lightonocr"], dtype=torch.float32)
        want = vlm.eval()(input_ids=tokens).logits
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-4 * max(scale, 1.0)
