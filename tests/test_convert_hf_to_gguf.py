"""HF -> GGUF against llama.cpp: its convert_hf_to_gguf.py, llama_model_quantize and its runtime.

Each tiny model (tests/support/hf_models.py) is converted once per type at module scope, by us
and by the reference (all reference conversions run in one subprocess, to pay the
torch import once).
"""

from __future__ import annotations

import ctypes
import json
import sys
import textwrap
from pathlib import Path

import gguf
import numpy as np
import pytest

from support import gguf_c_reader, pyfork
from support.hf_models import build, train_spm
from support.llama_sdist import llama_cpp_root
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf
from weightsmith.convert.compare import compare
from weightsmith.quant.imatrix import read_imatrix

ARCHS = ["llama", "llama3", "mistral", "qwen2", "qwen3", "gemma3"]
REF_TYPES = ["f32", "f16", "bf16", "q8_0"]
QUANT_TYPES = ["q4_k_m", "q6_k", "iq4_xs"]
# general.* fields that say where a file came from, not what it holds
PROVENANCE = {"general.name", "general.size_label", "general.basename", "general.finetune"}

_DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys
    script, jobs = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(script))
    for src, out, outtype in jobs:
        sys.argv = [script, src, "--outfile", out, "--outtype", outtype]
        runpy.run_path(script, run_name="__main__")
    """
)


def _run_reference(jobs: list[tuple[str, str, str]], env: dict | None = None) -> None:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run(
        [sys.executable, "-c", _DRIVER, script, json.dumps(jobs)],
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def _llama_quantize(
    src: Path, dst: Path, ftype: str, imatrix: dict | None = None, allow_requantize: bool = False
) -> None:
    import llama_cpp

    from weightsmith.quant.recipes import file_type

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = 2
    params.ftype = file_type(ftype).id
    params.allow_requantize = allow_requantize
    keep = []
    if imatrix:
        arr = (llama_cpp.llama_model_imatrix_data * (len(imatrix) + 1))()
        for i, (name, vals) in enumerate(sorted(imatrix.items())):
            v = np.ascontiguousarray(vals, dtype=np.float32)
            keep.append(v)
            arr[i].name = name.encode()
            arr[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = v.size
        arr[len(imatrix)].name = None
        keep.append(arr)
        params.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, f"llama_model_quantize({ftype}) returned {rc}"


def _bin_copy(src: Path, dst: Path) -> Path:
    """The model as a pytorch_model.bin whose tensors are in reverse name order."""
    import torch
    from safetensors.torch import load_file

    dst.mkdir(parents=True)
    for f in ("config.json", "tokenizer.model"):
        (dst / f).write_bytes((src / f).read_bytes())
    sd = load_file(src / "model.safetensors")
    torch.save({k: sd[k] for k in sorted(sd, reverse=True)}, dst / "pytorch_model.bin")
    return dst


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    """Model folders, reference files and our files for every arch and type."""
    root = tmp_path_factory.mktemp("hf2gguf")
    models = {a: build(a, root / "models" / a) for a in ARCHS}
    ref, ours = root / "ref", root / "ours"
    ref.mkdir()
    ours.mkdir()
    jobs = [(str(models[a]), str(ref / f"{a}-{t}.gguf"), t) for a in ARCHS for t in REF_TYPES]
    models["llama-bin"] = _bin_copy(models["llama"], root / "models" / "llama-bin")
    jobs.append((str(models["llama-bin"]), str(ref / "llama-bin-f32.gguf"), "f32"))
    _run_reference(jobs)
    for a in ARCHS:
        for t in QUANT_TYPES:
            _llama_quantize(ref / f"{a}-f32.gguf", ref / f"{a}-{t}.gguf", t)
    for a in ARCHS:
        for t in REF_TYPES + QUANT_TYPES:
            hf_to_gguf(models[a], ours / f"{a}-{t}.gguf", t)
    return {"root": root, "models": models, "ref": ref, "ours": ours}


def _kvs(path: Path) -> dict:
    """KVs as ggml's own reader sees them, provenance fields left out."""
    return {k: v for k, v in gguf_c_reader.read(path)[0].items() if k not in PROVENANCE}


def _tensors(path: Path) -> list[tuple[str, int, list[int], bytes]]:
    """(name, ggml type id, ggml dims, data bytes) as ggml's own reader sees them."""
    return gguf_c_reader.read(path)[1]


def _type_name(tid: int) -> str:
    return gguf.GGMLQuantizationType(tid).name


# --------------------------------------------------------------------------- same as the converter


@pytest.mark.parametrize("t", REF_TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_as_reference_converter(work, arch, t):
    ours, ref = work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf"
    ko, kr = _kvs(ours), _kvs(ref)
    assert list(ko) == list(kr)  # same keys in the same order
    for k in kr:
        assert ko[k] == kr[k], k
    to, tr = _tensors(ours), _tensors(ref)
    assert [x[:3] for x in to] == [x[:3] for x in tr]
    for a, b in zip(to, tr):
        assert a[3] == b[3], f"{a[0]} data differs"


@pytest.mark.parametrize("t", QUANT_TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_same_as_llama_quantize(work, arch, t):
    to = _tensors(work["ours"] / f"{arch}-{t}.gguf")
    tr = _tensors(work["ref"] / f"{arch}-{t}.gguf")
    assert [x[:3] for x in to] == [x[:3] for x in tr]
    for a, b in zip(to, tr):
        assert a[3] == b[3], f"{a[0]} ({a[1]}) data differs"
    kr = _kvs(work["ref"] / f"{arch}-{t}.gguf")
    ko = _kvs(work["ours"] / f"{arch}-{t}.gguf")
    assert list(ko) == list(kr)  # llama-quantize moves the two version keys to the end
    assert ko == kr


def test_pytorch_bin_checkpoint(work):
    """.bin weights (read without torch) come out in torch.load's order, as the reference's."""
    out = work["ours"] / "llama-bin-f32.gguf"
    hf_to_gguf(work["models"]["llama-bin"], out, "f32")
    ref = work["ref"] / "llama-bin-f32.gguf"
    assert _kvs(out) == _kvs(ref)
    assert _tensors(out) == _tensors(ref)
    assert _tensors(ref)[0][0] == "output_norm.weight"  # not the sorted order


def test_types_and_transforms_are_real(work):
    """Guard against a vacuous pass: the models exercise permutes, +1 norms, rope_freqs, K-quants."""
    names = {x[0]: _type_name(x[1]) for x in _tensors(work["ours"] / "llama3-q4_k_m.gguf")}
    assert names["rope_freqs.weight"] == "F32"
    assert names["blk.0.attn_q.weight"] == "Q4_K"
    assert "output.weight" not in names  # tied
    q = {x[0]: x for x in _tensors(work["ours"] / "qwen2-f32.gguf")}
    assert "blk.0.attn_q.bias" in q
    g = {x[0]: x for x in _tensors(work["ours"] / "gemma3-f32.gguf")}
    norm = np.frombuffer(g["blk.0.attn_norm.weight"][3], dtype="<f4")
    assert float(np.mean(norm)) > 1.5  # stored as 1 + w, w ~ 1


# --------------------------------------------------------------------------- llama.cpp runs it

PROMPT = [1, 5, 9, 33, 100, 7, 200, 42]


def _llama_logits(path: Path, tokens: list[int]) -> np.ndarray:
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=64, n_threads=2, logits_all=True, verbose=False
    )
    try:
        llm.eval(tokens)
        return np.array(llm.scores[: len(tokens)], dtype=np.float32)
    finally:
        llm.close()


def _hf_logits(folder: Path, tokens: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        return m(torch.tensor([tokens])).logits[0].numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_logits(work, arch):
    tokens = PROMPT if not arch.startswith("qwen") else [9707, 11, 1879, 0, 358, 1079, 264, 2272]
    ours = _llama_logits(work["ours"] / f"{arch}-f32.gguf", tokens)
    ref = _llama_logits(work["ref"] / f"{arch}-f32.gguf", tokens)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5)
    hf = _hf_logits(work["models"][arch], tokens)
    scale = float(np.abs(hf).max())
    assert np.abs(ours - hf).max() <= 2e-3 * max(scale, 1.0), arch
    q_ours = _llama_logits(work["ours"] / f"{arch}-q4_k_m.gguf", tokens)
    q_ref = _llama_logits(work["ref"] / f"{arch}-q4_k_m.gguf", tokens)
    np.testing.assert_allclose(q_ours, q_ref, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- imatrix, split, compare


def _write_imatrix_gguf(path: Path, entries: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    w = gguf.GGUFWriter(str(path), arch="imatrix")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["tiny.txt"])
    w.add_uint32("imatrix.chunk_count", 3)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, (sums, counts) in entries.items():
        w.add_tensor(name + ".in_sum2", sums.astype(np.float32))
        w.add_tensor(name + ".counts", counts.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_imatrix_dat(path: Path, entries: dict[str, tuple[np.ndarray, int]]) -> None:
    parts = [np.int32(len(entries)).tobytes()]
    for name, (vals, ncall) in entries.items():
        b = name.encode()
        parts += [np.int32(len(b)).tobytes(), b, np.int32(ncall).tobytes()]
        parts += [np.int32(vals.size).tobytes(), vals.astype("<f4").tobytes()]
    parts += [np.int32(3).tobytes(), np.int32(8).tobytes(), b"tiny.txt"]
    path.write_bytes(b"".join(parts))


def _imatrix_entries(ours_f32: Path) -> dict[str, int]:
    return {n: dims[0] for n, _, dims, _ in _tensors(ours_f32) if len(dims) == 2}


@pytest.mark.parametrize("fmt", ["gguf", "dat"])
def test_imatrix_matches_llama_quantize(work, fmt):
    root = work["root"]
    cols = _imatrix_entries(work["ours"] / "llama-f32.gguf")
    rng = np.random.default_rng(7)
    values: dict[str, np.ndarray] = {}
    if fmt == "gguf":
        raw = {n: (rng.random(c).astype(np.float32) * 8, np.array([4.0])) for n, c in cols.items()}
        path = root / "im.gguf"
        _write_imatrix_gguf(path, raw)
        values = {n: s / np.float32(4.0) for n, (s, _) in raw.items()}
    else:
        raw_dat = {n: (rng.random(c).astype(np.float32) * 8, 4) for n, c in cols.items()}
        path = root / "im.dat"
        _write_imatrix_dat(path, raw_dat)
        values = {n: v / np.float32(4) for n, (v, _) in raw_dat.items()}
    im = read_imatrix(path)
    assert im.chunk_count == 3 and im.datasets == ["tiny.txt"]
    for n, v in values.items():
        np.testing.assert_array_equal(im.entries[n], v)
    for t in ("q4_k_m", "iq4_xs"):
        ref = root / f"im-ref-{fmt}-{t}.gguf"
        _llama_quantize(work["ref"] / "llama-f32.gguf", ref, t, imatrix=values)
        ours = root / f"im-ours-{fmt}-{t}.gguf"
        hf_to_gguf(work["models"]["llama"], ours, t, imatrix=path)
        to, tr = _tensors(ours), _tensors(ref)
        assert [x[:3] for x in to] == [x[:3] for x in tr]
        for a, b in zip(to, tr):
            assert a[3] == b[3], f"{a[0]} differs with imatrix ({fmt}, {t})"
        plain = _tensors(work["ours"] / f"llama-{t}.gguf")
        assert any(a[3] != b[3] for a, b in zip(to, plain))  # the imatrix changed something


def test_bad_imatrix_is_named(tmp_path):
    p = tmp_path / "bad.dat"
    p.write_bytes(np.int32(2).tobytes() + np.int32(1000).tobytes() + b"abc")
    with pytest.raises(E.InvalidImatrixFile) as ei:
        read_imatrix(p)
    assert "bad.dat" in str(ei.value)


def test_split_output_loads_in_llama_cpp(work):
    out = work["root"] / "split" / "llama.gguf"
    res = hf_to_gguf(work["models"]["llama"], out, "q8_0", split_max_size="300K")
    assert len(res.files) > 1 and all(Path(f).is_file() for f in res.files)
    assert Path(res.files[0]).name == f"llama-00001-of-{len(res.files):05d}.gguf"
    assert not out.exists()
    whole = _llama_logits(work["ours"] / "llama-q8_0.gguf", PROMPT)
    split = _llama_logits(Path(res.files[0]), PROMPT)
    np.testing.assert_array_equal(whole, split)


def test_auto_keeps_source_float_type(work):
    out = work["root"] / "auto-mistral.gguf"
    res = hf_to_gguf(work["models"]["mistral"], out, "auto")  # mistral is saved in bf16
    assert res.type == "bf16"
    assert _tensors(out) == _tensors(work["ref"] / "mistral-bf16.gguf")


def test_progress_reports_every_tensor(work):
    calls = []
    hf_to_gguf(
        work["models"]["qwen3"],
        work["root"] / "p.gguf",
        "f16",
        progress=lambda *a: calls.append(a),
    )
    n = len(_tensors(work["root"] / "p.gguf"))
    assert len(calls) == n
    assert calls[-1][0] == calls[-1][1] and calls[-1][2:] == (n, n)


def test_compare_report(work):
    rep = compare(work["models"]["llama"], work["ours"] / "llama-q4_k_m.gguf")
    by = {t.name: t for t in rep.tensors}
    assert by["blk.0.attn_norm.weight"].rmse == 0.0
    assert 0.99 < by["blk.0.attn_q.weight"].cosine < 1.0
    assert by["blk.0.attn_q.weight"].type == "Q4_K"
    assert 4.0 < rep.bits_per_weight < 8.0
    exact = compare(work["models"]["llama"], work["ours"] / "llama-f32.gguf")
    assert all(t.max_abs == 0.0 for t in exact.tensors)
    assert "bits per weight" in rep.format()


# --------------------------------------------------------------------------- bad input


def _copy_model(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_config(d: Path, **changes) -> None:
    cfg = json.loads((d / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


def test_unknown_architecture_lists_supported(work, tmp_path):
    d = _copy_model(work["models"]["llama"], tmp_path / "m")
    _edit_config(d, architectures=["BloomForCausalLM"])
    with pytest.raises(E.UnknownArchitecture) as ei:
        hf_to_gguf(d, tmp_path / "o.gguf", "f16")
    msg = str(ei.value)
    assert "BloomForCausalLM" in msg and "config.json" in msg
    from weightsmith.convert.arch import supported

    assert all(a in msg for a in supported())  # every supported one is listed
    assert not (tmp_path / "o.gguf").exists() and list(tmp_path.iterdir()) == [d]


def test_heads_not_dividing_hidden(work, tmp_path):
    d = _copy_model(work["models"]["llama"], tmp_path / "m")
    _edit_config(d, num_attention_heads=3, num_key_value_heads=None, head_dim=None)
    with pytest.raises(E.InvalidModelConfig) as ei:
        hf_to_gguf(d, tmp_path / "o.gguf", "f16")
    assert "num_attention_heads" in str(ei.value) and "config.json" in str(ei.value)


def test_missing_hyperparameter(work, tmp_path):
    d = _copy_model(work["models"]["qwen2"], tmp_path / "m")
    _edit_config(d, hidden_size=None)
    with pytest.raises(E.InvalidModelConfig, match="hidden_size"):
        hf_to_gguf(d, tmp_path / "o.gguf", "f16")


def test_missing_shard(work, tmp_path):
    d = _copy_model(work["models"]["llama"], tmp_path / "m")
    from weightsmith.safetensors import safe_open

    with safe_open(d / "model.safetensors") as f:
        names = f.keys()
    index = {
        "metadata": {},
        "weight_map": {
            n: ("model-00001-of-00002.safetensors" if i % 2 else "model-00002-of-00002.safetensors")
            for i, n in enumerate(names)
        },
    }
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(E.MissingShard) as ei:
        hf_to_gguf(d, tmp_path / "o.gguf", "f16")
    assert "model-00002-of-00002.safetensors" in str(ei.value)


def test_sharded_model_same_as_single(work, tmp_path):
    from weightsmith.safetensors import safe_open, save_sharded

    src = work["models"]["qwen3"]
    d = tmp_path / "sharded"
    d.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            (d / f.name).write_bytes(f.read_bytes())
    with safe_open(src / "model.safetensors") as f:
        tensors = {n: f.get_tensor(n) for n in f.keys()}  # noqa: SIM118
        save_sharded(tensors, d, max_shard_size="3MB")
    assert (d / "model.safetensors.index.json").is_file()
    hf_to_gguf(d, tmp_path / "o.gguf", "f32")
    assert _tensors(tmp_path / "o.gguf") == _tensors(work["ref"] / "qwen3-f32.gguf")


def test_tokenizer_larger_than_vocab_size(work, tmp_path):
    d = _copy_model(work["models"]["llama"], tmp_path / "m")
    _edit_config(d, vocab_size=300)
    with pytest.raises((E.VocabSizeMismatch, E.TensorShapeMismatch)) as ei:
        hf_to_gguf(d, tmp_path / "o.gguf", "f16")
    assert "vocab" in str(ei.value)


def test_embedding_rows_not_vocab_size(work, tmp_path):
    d = _copy_model(work["models"]["llama"], tmp_path / "m")
    _edit_config(d, vocab_size=600)  # tokenizer pads to 600, the weights have 512 rows
    with pytest.raises(E.TensorShapeMismatch) as ei:
        hf_to_gguf(d, tmp_path / "o.gguf", "f16")
    msg = str(ei.value)  # names the first embedding-shaped weight read (lm_head sorts first)
    assert "lm_head.weight" in msg and "vocab_size=600" in msg and "[512, 256]" in msg


def test_missing_config_and_weights(tmp_path):
    with pytest.raises(E.MissingModelFile, match=r"config\.json"):
        hf_to_gguf(tmp_path, tmp_path / "o.gguf")
    train_spm(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_hidden_layers": 1,
                "intermediate_size": 128,
                "vocab_size": 512,
            }
        )
    )
    with pytest.raises(E.MissingModelFile, match=r"no weights"):
        hf_to_gguf(tmp_path, tmp_path / "o.gguf")
