"""DeepSeek-OCR-2 (``DeepseekOCR2ForCausalLM``) against llama.cpp's converter and runtime.

The tiny model (tests/support/deepseek_ocr_models.py) is built and saved by transformers
5.24 (``DeepseekOcr2ForConditionalGeneration``: the Hub's tensor names) and given the
Hub's ``config.json`` beside it (the reference reads only that one).  Checked here:

* the projector GGUF (``deepseekocr2``: SAM ViT-B, the Qwen2 encoder with its learned
  queries, the linear projector, the view separator) is byte-identical to
  ``convert_hf_to_gguf.py --mmproj`` at f32, f16, bf16 and q8_0;
* the text GGUF (``deepseek2-ocr``: DeepSeek-V2 without MLA) is byte-identical to the
  reference's text conversion at the same types, and for llama-quantize types to its f32
  file through ``llama_model_quantize``; llama.cpp's logits on ours are those on the
  reference's and transformers' (GGUF -> HF has no class to write: refused by name);
* mtmd (llama-cpp-python 0.3.36) loads our projector with our text model and encodes an
  image (two 768 tiles and the 1024 view, as its preprocessor cuts it) into the features
  transformers computes from the same pixels.
"""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.deepseek_ocr_models import MEAN_STD, deepseek_ocr1, deepseek_ocr2, unlimited_ocr
from support.gguf_pair import pair_jobs
from support.mtmd_ctx import mtmd_pair
from test_convert_hf_to_gguf import _llama_logits, _llama_quantize
from test_convert_mmproj import TYPES, _reference, _same, convert_both
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf

QUANT_TYPES = ["q4_k_m", "iq4_xs"]
# mtmd's image embeddings vs transformers' features, as a fraction of their scale:
# measured 3.1e-5 (5.8e-5 at a scale of 1.89, tiles and global view alike)
TOL = 1e-3
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]


def _linked(ds: Path, dst: Path) -> Path:
    """A copy of the Hub folder with the weights linked, not copied."""
    dst.mkdir()
    for f in (ds / "hub").iterdir():
        if f.name == "model.safetensors":
            (dst / f.name).symlink_to(f)
        else:
            shutil.copy(f, dst / f.name)
    return dst


def _unlimited(root: Path) -> Path:
    """The Hub folder as an Unlimited-OCR one for the text conversion: the top-level class
    ``UnlimitedOCRForCausalLM``, no class in language_config, its sliding window."""
    src = _linked(root, root / "unlimited")
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = ["UnlimitedOCRForCausalLM"]
    del cfg["language_config"]["architectures"]
    cfg["language_config"]["sliding_window_size"] = 128
    (src / "config.json").write_text(json.dumps(cfg))
    return src


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    """The folder root (``hub``, ``hf``), with the reference's files (``ref-*``) and ours
    (``ours-*``) beside them; the reference's runs in one process."""
    root = tmp_path_factory.mktemp("deepseek-ocr2")
    src = deepseek_ocr2(root)
    unl = _unlimited(root)
    jobs = [[str(unl), "--outfile", str(root / "ref-unlimited-f16.gguf"), "--outtype", "f16"]]
    # Unlimited-OCR itself (its own tiny model and projector)
    uocr = unlimited_ocr(root / "uocr")
    jobs.append([str(uocr), "--outfile", str(root / "ref-uocr-text-f16.gguf"), "--outtype",
                 "f16"])  # fmt: skip
    for t in TYPES:
        jobs.append([str(uocr), "--outfile", str(root / f"ref-uocr-mmproj-{t}.gguf"),
                     "--outtype", t, "--mmproj"])  # fmt: skip
    hf_to_gguf(uocr, root / "ours-uocr-text-f16.gguf", "f16",
               mmproj=root / "ours-uocr-mmproj-f16.gguf")  # fmt: skip
    hf_to_gguf(uocr, root / "ours-uocr-text-f32.gguf", "f32",
               mmproj=root / "ours-uocr-mmproj-f32.gguf")  # fmt: skip
    for t in ("bf16", "q8_0"):
        hf_to_gguf(uocr, root / "t.gguf", t, mmproj=root / f"ours-uocr-mmproj-{t}.gguf")
    jobs += pair_jobs(src, root, TYPES)
    _reference(jobs)
    for t in QUANT_TYPES:
        _llama_quantize(root / "ref-text-f32.gguf", root / f"ref-text-{t}.gguf", t)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_projector_same_as_reference(ds, t):
    _same(ds / f"ours-mmproj-{t}.gguf", ds / f"ref-mmproj-{t}.gguf")


@pytest.mark.parametrize("t", TYPES + QUANT_TYPES)
def test_text_same_as_reference(ds, t):
    ours = ds / f"ours-text-{t}.gguf"
    if t in QUANT_TYPES:
        hf_to_gguf(ds / "hub", ours, t)
    _same(ours, ds / f"ref-text-{t}.gguf")


def test_saved_in_hub_layout(ds):
    """transformers 5.24 writes the Hub's tensor names (the reference's input); only its
    config.json is its own."""
    from safetensors import safe_open

    with safe_open(ds / "hf" / "model.safetensors", "np") as f:
        names = set(f.keys())
    assert {"model.sam_model.blocks.2.attn.rel_pos_h", "model.qwen2_model.query_768.weight",
            "model.projector.layers.weight", "model.view_seperator",
            "model.layers.1.mlp.experts.3.up_proj.weight"} <= names  # fmt: skip
    assert not any(n.startswith("model.vision_tower.") for n in names)
    cfg = json.loads((ds / "hf" / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekOcr2ForConditionalGeneration"]


def test_contents(ds):
    """Guard against a vacuous pass: the rows mtmd reads, the F32 tables, the separator
    as one row; the text file without MLA tensors or vision tensors."""
    from weightsmith.gguf import read

    with read(ds / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "deepseekocr2"
    assert md["clip.vision.block_count"] == 4 and md["clip.vision.sam.block_count"] == 3
    assert md["clip.vision.attention.head_count_kv"] == 2
    assert md["clip.vision.preproc_max_tiles"] == 6
    assert types["v.sam.pos_embd.weight"] == ("F32", (1, 64, 64, 32))
    assert types["v.sam.blk.2.attn.pos_h.weight"][0] == "F32"
    assert types["v.sam.net_3.weight"][0] == "F32" and types["v.sam.neck.2.weight"][0] == "F32"
    assert types["v.view_seperator"] == ("F32", (1, 64))
    assert types["v.resample_query_768.weight"] == ("Q8_0", (144, 64))
    assert types["v.blk.3.attn_k.weight"] == ("Q8_0", (32, 64))
    with read(ds / "ours-text-f16.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    assert md["general.architecture"] == "deepseek2-ocr"
    assert md["deepseek2-ocr.attention.head_count_kv"] == 4
    assert "deepseek2-ocr.attention.kv_lora_rank" not in md
    assert md["tokenizer.chat_template"] == "{% for m in messages %}{{m['content']}}{% endfor %}"
    assert {"blk.0.attn_q.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_gate_shexp.weight"} <= (
        names
    )
    assert all(n.startswith(("blk.", "token_embd", "output")) for n in names)


def _hf_text_logits(folder: Path, tokens: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForImageTextToText

    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return m(input_ids=torch.tensor([tokens])).logits[0].numpy()


def test_text_in_llama_cpp(ds, tmp_path):
    """llama.cpp's logits on our text file are those on the reference's and transformers'
    (within 2e-3 of their scale); GGUF -> HF has no class for it (transformers'
    DeepSeek-V2 is MLA only, its OCR text model has no causal-LM class): a named error,
    nothing written."""
    from weightsmith.convert import gguf_to_hf

    ours = _llama_logits(ds / "ours-text-f32.gguf", PROMPT)
    np.testing.assert_array_equal(ours, _llama_logits(ds / "ref-text-f32.gguf", PROMPT))
    want = _hf_text_logits(ds / "hf", PROMPT)
    scale = max(float(np.abs(want).max()), 1.0)
    assert np.abs(ours - want).max() <= 2e-3 * scale, np.abs(ours - want).max()
    with pytest.raises(E.UnknownArchitecture, match="deepseek2-ocr"):
        gguf_to_hf(ds / "ours-text-f16.gguf", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def _mtmd_image_rows(text: Path, mmproj: Path, img: np.ndarray) -> np.ndarray:
    """mtmd's embeddings of every image chunk of ``img`` (HWC uint8), in order: DeepSeek-
    OCR-2's tiles are chunks of their own, then the global view with its separator."""
    import llama_cpp
    from llama_cpp import mtmd_cpp

    # no warmup: a full 1024 encode otherwise
    with mtmd_pair(text, mmproj, n_ctx=1024, warmup=False) as (llm, ctx):
        h, w, _ = img.shape
        buf = (ctypes.c_uint8 * img.size).from_buffer_copy(img.tobytes())
        bitmap = mtmd_cpp.mtmd_bitmap_init(w, h, buf)
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        inp = mtmd_cpp.mtmd_input_text()
        prompt = b"see " + mtmd_cpp.mtmd_default_marker()  # kept alive: a pointer
        inp.text, inp.text_len = prompt, len(prompt)
        inp.add_special, inp.parse_special = False, True
        bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
        n_embd = llama_cpp.llama_model_n_embd_inp(llm.model)
        rows = []
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
            if mtmd_cpp.mtmd_input_chunk_get_type(chunk) != mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                continue
            n = mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
            assert mtmd_cpp.mtmd_encode_chunk(ctx, chunk) == 0
            out = mtmd_cpp.mtmd_get_output_embd(ctx)
            rows.append(np.ctypeslib.as_array(out, shape=(n * n_embd,)).reshape(n, n_embd))
            rows[-1] = rows[-1].copy()
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        mtmd_cpp.mtmd_bitmap_free(bitmap)
        return np.concatenate(rows)


def _hf_image_features(
    folder: Path, img: np.ndarray, grid: tuple[int, int], tile: int = 768
) -> np.ndarray:
    """transformers' features of the pixels mtmd's preprocessor makes of ``img``: the
    1024 view (fitted, Pillow bicubic, centred on grey 127) and the ``grid`` (columns,
    rows) of ``tile``-pixel tiles of the image resized to it."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    def pixels(im):
        x = (np.asarray(im, dtype=np.float32) / 255 - np.float32(MEAN_STD["image_mean"])) / (
            np.float32(MEAN_STD["image_std"])
        )
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))

    h, w = img.shape[:2]
    s = min(1024 / w, 1024 / h)
    nw, nh = min(round(w * s), 1024), min(round(h * s), 1024)
    view = Image.new("RGB", (1024, 1024), (127, 127, 127))
    view.paste(Image.fromarray(img).resize((nw, nh), Image.BICUBIC),
               (round((1024 - nw) / 2), round((1024 - nh) / 2)))  # fmt: skip
    cols, rows = grid
    big = Image.fromarray(img).resize((tile * cols, tile * rows), Image.BICUBIC)
    tiles = [big.crop((c * tile, r * tile, c * tile + tile, r * tile + tile))
             for r in range(rows) for c in range(cols)]  # fmt: skip
    m = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    kw = {"patches_grid": [[cols, rows]]} if tile != 768 else {}  # Unlimited-OCR's rows
    with torch.no_grad():
        f = m.model.get_image_features(
            pixel_values=pixels(view)[None],
            pixel_values_local=torch.stack([pixels(t) for t in tiles]),
            num_local_patches=[len(tiles)],
            **kw,
        )
    return torch.cat(list(f.pooler_output), 0).float().numpy()


def test_llama_cpp_encodes_image(ds):
    """An 800 x 400 image: mtmd cuts two 768 tiles (144 query tokens each) and the 1024
    view (256 and the view separator); every row is transformers' for the same pixels."""
    img = np.random.default_rng(7).integers(0, 256, (400, 800, 3), dtype=np.uint8)
    got = _mtmd_image_rows(ds / "ours-text-f32.gguf", ds / "ours-mmproj-f32.gguf", img)
    want = _hf_image_features(ds / "hf", img, (2, 1))
    assert want.shape == (2 * 144 + 256 + 1, 64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= TOL * max(scale, 1.0), np.abs(got - want).max()


def test_cli_writes_both(ds, tmp_path):
    """``weightsmith convert DIR out.gguf --mmproj``: the two files of the library call."""
    from weightsmith.cli._main import main

    dst = tmp_path / "g.gguf"
    assert main(["convert", str(ds / "hub"), str(dst), "--type", "q8_0", "--mmproj",
                 "--quiet"]) == 0  # fmt: skip
    assert (tmp_path / "mmproj-g.gguf").read_bytes() == (ds / "ours-mmproj-q8_0.gguf").read_bytes()
    assert dst.read_bytes() == (ds / "ours-text-q8_0.gguf").read_bytes()


def test_other_configs_refused(ds, tmp_path):
    """What the reference cannot convert is a named error, nothing written: transformers'
    own config (``DeepseekOcr2ForConditionalGeneration``: neither a text nor a projector
    class there); a language config naming no class (the text class is then
    ``DeepseekOCR2ForCausalLM``, which the reference has no text conversion for)."""
    out = tmp_path / "out"
    with pytest.raises(E.UnknownArchitecture, match="DeepseekOcr2ForConditionalGeneration"):
        hf_to_gguf(ds / "hf", out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()
    src = _linked(ds, tmp_path / "h")
    cfg = json.loads((src / "config.json").read_text())
    del cfg["language_config"]["architectures"]
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.UnknownArchitecture, match="DeepseekOCR2ForCausalLM"):
        hf_to_gguf(src, out / "t.gguf", "f16", mmproj=out / "m.gguf")
    assert not out.exists()


def test_unlimited_ocr_text(ds, tmp_path):
    """The reference's text classes of DeepSeek-OCR and Unlimited-OCR convert where
    language_config names no class: the same ``deepseek2-ocr`` file, here with
    Unlimited-OCR's sliding window written (the decoder ignores it), byte-identical to
    the reference's (the weights are DeepSeek-OCR-2's tiny ones: the text layout is the
    same)."""
    from weightsmith.gguf import read

    hf_to_gguf(ds / "unlimited", tmp_path / "ours.gguf", "f16")
    _same(tmp_path / "ours.gguf", ds / "ref-unlimited-f16.gguf")
    with read(tmp_path / "ours.gguf") as f:
        assert f.metadata["deepseek2-ocr.attention.sliding_window"] == 128


# --------------------------------------------------------------------------- Unlimited-OCR


@pytest.mark.parametrize("t", TYPES)
def test_unlimited_projector_same_as_reference(ds, t):
    """Unlimited-OCR's projector (``deepseekocr``: SAM ViT-B, DeepSeek-OCR's CLIP-L over the
    SAM features, the projector over both, newline row and view separator, up to 32
    tiles) is the reference's file byte for byte; the text beside it too."""
    _same(ds / f"ours-uocr-mmproj-{t}.gguf", ds / f"ref-uocr-mmproj-{t}.gguf")
    if t == "f16":
        _same(ds / "ours-uocr-text-f16.gguf", ds / "ref-uocr-text-f16.gguf")


def test_unlimited_contents_and_text(ds):
    """The CLIP rows as the reference merges them (image 224, patch 14, feed-forward
    length 4 x heads, scale factor 1); llama.cpp's logits on the text are transformers'
    (its reference sliding window of 128 covers the prompt)."""
    from weightsmith.gguf import read

    with read(ds / "ours-uocr-mmproj-q8_0.gguf") as f:
        md = f.metadata
        types = {t.name: (t.ggml_type.name, t.shape) for t in f.tensors}
    assert md["clip.projector_type"] == "deepseekocr" and md["clip.vision.preproc_max_tiles"] == 32
    assert (md["clip.vision.image_size"], md["clip.vision.patch_size"]) == (224, 14)
    assert md["clip.vision.feed_forward_length"] == 8 and md["clip.vision.block_count"] == 4
    assert md["clip.vision.projector.scale_factor"] == 1
    assert types["v.position_embd.weight"] == ("F32", (257, 32))
    assert types["v.class_embd"][0] == "F32" and types["v.blk.3.attn_qkv.weight"][0] == "Q8_0"
    assert types["mm.model.fc.weight"] == ("Q8_0", (64, 64)) and "v.image_newline" in types
    with read(ds / "ours-uocr-text-f16.gguf") as f:
        assert f.metadata["deepseek2-ocr.attention.sliding_window"] == 128
    got = _llama_logits(ds / "ours-uocr-text-f32.gguf", PROMPT)
    want = _hf_text_logits(ds / "uocr" / "hf", PROMPT)
    scale = max(float(np.abs(want).max()), 1.0)
    assert np.abs(got - want).max() <= 2e-3 * scale, np.abs(got - want).max()


def _as_mtmd_tiles(monkeypatch, table: np.ndarray) -> None:
    """Make transformers' Unlimited-OCR resize its position tables for a tile as mtmd
    0.3.36's ``deepseekocr`` graph does (tools/mtmd/models/deepseekocr.cpp, as read):

    * CLIP (``table``: the GGUF's ``[n_pos, n_embd]``): the first ``n_pos - 1`` rows (the
      class row 0 among them, the last patch row left out) go to ``ggml_interpolate`` as
      the flat ``[n_embd, n_pos - 1]`` matrix, sized to ``side x side`` over the channel
      and position axes (bicubic) and to ``n_embd`` over the third (nearest: copies); that
      ``[side, side, n_embd]`` block is read back as ``side^2`` rows of ``n_embd``.  The
      row appended for the class is a view at byte offset ``(n_pos - 1)``: floats
      ``(n_pos - 1) / 4`` on, not row ``n_pos - 1``.  Token k gets row k (the class token
      row 0, the last patch the appended row);
    * SAM: its table resized bicubic without transformers' antialiasing."""
    import torch
    import torch.nn.functional as F
    from transformers.models.unlimited_ocr import modeling_unlimited_ocr as M

    clip_orig = M.UnlimitedOcrVisionEmbeddings.interpolate_pos_encoding
    n_grid, n_embd = table.shape[0] - 1, table.shape[1]

    def clip(self, embeddings, height, width):
        side = round((embeddings.shape[1] - 1) ** 0.5)
        if side * side == n_grid:
            return clip_orig(self, embeddings, height, width)
        flat = torch.from_numpy(np.ascontiguousarray(table[:n_grid]))[None, None]
        small = F.interpolate(flat, size=(side, side), mode="bicubic", align_corners=False)
        rows = small.flatten().repeat(n_embd).reshape(side * side, n_embd)
        cls = torch.from_numpy(table.reshape(-1)[n_grid // 4 :][:n_embd].copy())
        return torch.cat([rows, cls[None]])[None].to(embeddings.dtype)

    def sam(self, height, width):
        if tuple(self.pos_embed.shape[1:3]) == (height, width):
            return self.pos_embed
        x = self.pos_embed.permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=(height, width), mode="bicubic", align_corners=False)
        return x.permute(0, 2, 3, 1).to(self.pos_embed.dtype)

    monkeypatch.setattr(M.UnlimitedOcrVisionEmbeddings, "interpolate_pos_encoding", clip)
    monkeypatch.setattr(M.UnlimitedOcrSamVisionEncoder, "interpolate_pos_encoding", sam)


def test_unlimited_llama_cpp_encodes_image(ds, monkeypatch):
    """mtmd encodes an 800 x 400 image as one row of two 640 tiles (10 x 10 tokens each,
    a newline after each row) and the 1024 view (16 rows of 16 + newline, the view
    separator).  The view and every newline are transformers' features within 1e-3 of
    their scale (measured 4.9e-5); the tile tokens are not (measured 1.8e-2): mtmd 0.3.36
    resizes the position tables for a 640 tile (CLIP's 16 x 16 -> 10 x 10, SAM's 64 x 64
    -> 40 x 40) otherwise than transformers -- a runtime fault (our file's table is the
    reference's and transformers'), pinned.  The cause, measured: transformers with the
    tables resized as mtmd's source does (_as_mtmd_tiles) gives mtmd's tile tokens (4.2e-5
    of scale; 3.4e-4 with SAM's table still antialiased)."""
    _encodes_as_mtmd_resizes(
        ds / "ours-uocr-text-f32.gguf",
        ds / "ours-uocr-mmproj-f32.gguf",
        ds / "uocr" / "hf",
        monkeypatch,
    )


def _encodes_as_mtmd_resizes(text: Path, mmproj: Path, hf: Path, monkeypatch) -> None:
    """The ``deepseekocr`` image check (800 x 400: two 640 tiles and the view): view and
    newlines are transformers' features of ``hf``, the tile tokens are not (pinned), and
    they are transformers' with the tables resized as mtmd's graph does."""
    from weightsmith.gguf import read

    img = np.random.default_rng(7).integers(0, 256, (400, 800, 3), dtype=np.uint8)
    got = _mtmd_image_rows(text, mmproj, img)
    want = _hf_image_features(hf, img, (2, 1), tile=640)
    assert want.shape == (10 * 21 + 16 * 17 + 1, 64)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1.0)
    tiles = np.zeros(len(want), bool)
    tiles[:210] = True
    tiles[20:210:21] = False  # the tile rows' newlines
    err = np.abs(got - want).max(1)
    assert err[~tiles].max() <= TOL * scale, err[~tiles].max()
    assert err[tiles].max() > 1e-2 * scale, err[tiles].max()

    with read(mmproj) as f:
        table = np.array(f.numpy("v.position_embd.weight"), dtype=np.float32)
    _as_mtmd_tiles(monkeypatch, table)
    as_mtmd = _hf_image_features(hf, img, (2, 1), tile=640)
    assert np.abs(got - as_mtmd).max() <= TOL * scale, np.abs(got - as_mtmd).max()


# --------------------------------------------------------------------------- DeepSeek-OCR (1)


@pytest.fixture(scope="module")
def ocr1(tmp_path_factory) -> Path:
    """DeepSeek-OCR (1)'s tiny folder (``hub``, ``hf``) with the reference's projector at
    every type and text at f16 (``ref-*``) and ours (``ours-*``) beside it."""
    root = tmp_path_factory.mktemp("deepseek-ocr1")
    convert_both(deepseek_ocr1(root), root)
    return root


@pytest.mark.parametrize("t", TYPES)
def test_ocr1_projector_same_as_reference(ocr1, t):
    """DeepSeek-OCR (1)'s projector (the reference's ``DeepseekOCRVisionModel``: Unlimited-
    OCR's tensors and rows, at most 9 tiles) is the reference's file byte for byte; the
    text beside it too (``deepseek2-ocr`` through the language config's
    ``DeepseekV2ForCausalLM``, no sliding window)."""
    _same(ocr1 / f"ours-mmproj-{t}.gguf", ocr1 / f"ref-mmproj-{t}.gguf")
    if t == "f16":
        _same(ocr1 / "ours-text-f16.gguf", ocr1 / "ref-text-f16.gguf")


def _mtmd_image_tokens(text: Path, mmproj: Path, img: np.ndarray) -> int:
    """How many image tokens mtmd cuts ``img`` into (tokenized, not encoded)."""
    from llama_cpp import mtmd_cpp

    with mtmd_pair(text, mmproj, n_ctx=256, warmup=False) as (_llm, ctx):
        h, w, _ = img.shape
        buf = (ctypes.c_uint8 * img.size).from_buffer_copy(img.tobytes())
        bitmap = mtmd_cpp.mtmd_bitmap_init(w, h, buf)
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        inp = mtmd_cpp.mtmd_input_text()
        prompt = mtmd_cpp.mtmd_default_marker()
        inp.text, inp.text_len = prompt, len(prompt)
        inp.add_special, inp.parse_special = False, True
        bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
        n = 0
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
            if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                n += mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        mtmd_cpp.mtmd_bitmap_free(bitmap)
        return n


def test_ocr1_contents_and_text(ocr1, ds):
    """The rows are Unlimited-OCR's but the tile limit (9) and the text has no window;
    mtmd cuts a 1200 x 100 image into 9 x 1 tiles with ours (12 x 1 with Unlimited-OCR's
    32); llama.cpp's logits on the text are transformers' (the full-attention model)."""
    from weightsmith.gguf import read

    with read(ocr1 / "ours-mmproj-q8_0.gguf") as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
    with read(ds / "ours-uocr-mmproj-q8_0.gguf") as f:
        u_md = f.metadata
        u_names = {t.name for t in f.tensors}
    assert md["clip.projector_type"] == "deepseekocr" and md["clip.vision.preproc_max_tiles"] == 9
    assert {k: v for k, v in md.items() if k != "clip.vision.preproc_max_tiles"} == {
        k: v for k, v in u_md.items() if k != "clip.vision.preproc_max_tiles"
    }
    assert names == u_names
    with read(ocr1 / "ours-text-f16.gguf") as f:
        assert f.metadata["general.architecture"] == "deepseek2-ocr"
        assert "deepseek2-ocr.attention.sliding_window" not in f.metadata
    img = np.random.default_rng(8).integers(0, 256, (100, 1200, 3), dtype=np.uint8)

    def tokens(cols: int) -> int:  # 10 rows of 10 x cols + newline, the view, separator
        return 10 * (10 * cols + 1) + 16 * 17 + 1

    got = _mtmd_image_tokens(ocr1 / "ours-text-f32.gguf", ocr1 / "ours-mmproj-f32.gguf", img)
    assert got == tokens(9)
    got = _mtmd_image_tokens(ds / "ours-uocr-text-f32.gguf", ds / "ours-uocr-mmproj-f32.gguf", img)
    assert got == tokens(12)
    got = _llama_logits(ocr1 / "ours-text-f32.gguf", PROMPT)
    want = _hf_text_logits(ocr1 / "hf", PROMPT)
    scale = max(float(np.abs(want).max()), 1.0)
    assert np.abs(got - want).max() <= 2e-3 * scale, np.abs(got - want).max()


def test_ocr1_llama_cpp_encodes_image(ocr1, monkeypatch):
    """mtmd loads our DeepSeek-OCR (1) projector with our text and encodes an 800 x 400
    image (two 640 tiles, the view) as for Unlimited-OCR: the view and the newlines are
    transformers' features of the model it was built from (1e-3 of scale), the tile tokens
    are transformers' once its position tables are resized as mtmd 0.3.36's graph does
    (the runtime fault, pinned above)."""
    _encodes_as_mtmd_resizes(
        ocr1 / "ours-text-f32.gguf", ocr1 / "ours-mmproj-f32.gguf", ocr1 / "hf", monkeypatch
    )
