"""More encoders against llama.cpp: EmbeddingGemma (``gemma-embedding``, with its
sentence-transformers Dense heads), UMT5 / mT5, Unigram tokenizers GGUF -> HF, and the
llama-quantize types for encoders.

* HF -> GGUF byte-identical to the pinned ``convert_hf_to_gguf.py`` (EmbeddingGemma with
  ``--sentence-transformers-dense-modules``, the flag that takes the Dense heads);
* llama-cpp-python embeds with our file exactly as with the reference's, and as
  sentence-transformers' pipeline (Transformer, mean Pooling, Dense, Dense, Normalize)
  on the original;
* GGUF -> HF: transformers / sentence-transformers load the folder with the same
  embeddings (the Dense heads come back as sentence-transformers modules).

All reference conversions run in one subprocess.  llama.cpp's ``EmbeddingGemma`` keeps
its Dense module list in class attributes that grow with every conversion in a
process, so the driver resets them before each job.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from support import pyfork
from support.encoder_models import (
    gemma_embedding,
    mt5,
    nomic_bert_moe,
    t5_wide,
    umt5,
    umt5_model,
    xlmr_wide,
    xlmr_with_tokenizer,
)
from support.hf_models import build
from support.llama_sdist import llama_cpp_root
from test_convert_archs import _same_file
from test_convert_hf_to_gguf import _llama_quantize
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

REF_TYPES = ["f32", "f16", "bf16", "q8_0"]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog, again and again and again.",
    "Weights are read, transformed and written one tensor at a time.",
]

_DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys
    script, jobs = sys.argv[1], json.loads(sys.argv[2])
    sys.path.insert(0, os.path.dirname(script))
    for src, out, outtype, extra in jobs:
        if "conversion.gemma" in sys.modules:  # class-level lists grow per conversion
            g = sys.modules["conversion.gemma"].EmbeddingGemma
            g.module_paths, g.dense_features_dims = [], {}
        sys.argv = [script, src, "--outfile", out, "--outtype", outtype, *extra]
        runpy.run_path(script, run_name="__main__")
    """
)


def _run_reference(jobs: list[tuple[str, str, str, list[str]]]) -> None:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    r = pyfork.run([sys.executable, "-c", _DRIVER, script, json.dumps(jobs)])  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]


def build_and_convert(root: Path, builders: dict, files: list[tuple[str, str]]) -> dict:
    """Each tiny model built under root/models, then every (model, type) of ``files``
    converted by the reference into root/ref and by us into root/ours."""
    models = {}
    for name, make in builders.items():
        (root / "models" / name).mkdir(parents=True)
        models[name] = make(root / "models" / name)
    ref, ours = root / "ref", root / "ours"
    ref.mkdir()
    ours.mkdir()
    _run_reference([(str(models[a]), str(ref / f"{a}-{t}.gguf"), t, []) for a, t in files])
    for a, t in files:
        hf_to_gguf(models[a], ours / f"{a}-{t}.gguf", t)
    return {"root": root, "models": models, "ref": ref, "ours": ours}


DENSE_FLAG = ["--sentence-transformers-dense-modules"]
T5_FAMILY_FILES = [(a, t) for a in ("mt5", "umt5") for t in ("f32", "f16", "q8_0")]
T5_FAMILY_FILES += [("umt5_model", "f16")]
# 256 wide (k-quant rows without fallback), and EmbeddingGemma (its Dense heads)
QUANT_ARCHS = ["xlmr_wide", "t5_wide", "gemma_emb"]
QUANT_TYPES = ["q4_k_m", "iq4_xs"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("encoders_more")
    models = {
        "gemma_emb": gemma_embedding(_mk(root / "models" / "gemma_emb")),
        "xlmr": xlmr_with_tokenizer(_mk(root / "models" / "xlmr")),
        "xlmr_json": xlmr_with_tokenizer(_mk(root / "models" / "xlmr_json"), json_only=True),
        "t5": build("t5", root / "models" / "t5"),
        "xlmr_wide": xlmr_wide(_mk(root / "models" / "xlmr_wide")),
        "t5_wide": t5_wide(_mk(root / "models" / "t5_wide")),
        "mt5": mt5(_mk(root / "models" / "mt5")),
        "umt5": umt5(_mk(root / "models" / "umt5")),
        "umt5_model": umt5_model(_mk(root / "models" / "umt5_model")),
        "nomic_moe": nomic_bert_moe(_mk(root / "models" / "nomic_moe")),
    }
    ref, ours = root / "ref", root / "ours"
    ref.mkdir()
    ours.mkdir()
    jobs = [(str(models["gemma_emb"]), str(ref / f"gemma_emb-{t}.gguf"), t, DENSE_FLAG)
            for t in REF_TYPES]  # fmt: skip
    # without the flag the reference leaves the Dense heads out
    jobs.append((str(models["gemma_emb"]), str(ref / "gemma_emb-nodense.gguf"), "f16", []))
    jobs += [
        (str(models[a]), str(ref / f"{a}-f32.gguf"), "f32", [])
        for a in ("xlmr", "xlmr_json", "nomic_moe")
    ]
    jobs += [
        (str(models[a]), str(ref / f"{a}-{t}.gguf"), t, [])
        for a, t in T5_FAMILY_FILES + [(a, "f32") for a in QUANT_ARCHS if a != "gemma_emb"]
    ]
    _run_reference(jobs)
    ours_jobs = [*jobs[: len(REF_TYPES)], *jobs[len(REF_TYPES) + 1 :]]
    ours_jobs.append((None, str(ours / "t5-f32.gguf"), "f32", []))
    for a in QUANT_ARCHS:
        for t in QUANT_TYPES:  # the reference's f32 file through llama_model_quantize
            _llama_quantize(ref / f"{a}-f32.gguf", ref / f"{a}-{t}.gguf", t)
            ours_jobs.append((None, str(ours / f"{a}-{t}.gguf"), t, []))
    for _, out, t, _ in ours_jobs:
        name = Path(out).name
        if not (ours / name).exists():
            hf_to_gguf(models[name.rsplit("-", 1)[0]], ours / name, t)
    return {"root": root, "models": models, "ref": ref, "ours": ours}


def _mk(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


# --------------------------------------------------------------------------- EmbeddingGemma


@pytest.mark.parametrize("t", REF_TYPES)
def test_gemma_embedding_same_as_reference(work, t):
    _same_file(work["ours"] / f"gemma_emb-{t}.gguf", work["ref"] / f"gemma_emb-{t}.gguf")


def test_gemma_embedding_metadata_is_real(work):
    """Guard against a vacuous pass: the Dense heads, their sizes and the pooling are in
    the file (and the reference without its flag has none of them)."""
    from weightsmith.gguf import read

    with read(work["ours"] / "gemma_emb-q8_0.gguf") as f:
        md = f.metadata
        assert md["general.architecture"] == "gemma-embedding"
        assert md["gemma-embedding.pooling_type"] == 1
        assert [
            md[f"gemma-embedding.dense_{k}"]
            for k in ("2_feat_in", "2_feat_out", "3_feat_in", "3_feat_out")
        ] == [64, 256, 256, 64]
        assert [t.name for t in f.tensors][:2] == ["dense_2.weight", "dense_3.weight"]
        assert f.tensor("dense_2.weight").ggml_type.name == "Q8_0"
    with read(work["ref"] / "gemma_emb-nodense.gguf") as f:
        assert "dense_2.weight" not in f and "gemma-embedding.dense_2_feat_in" not in f.metadata


def _st_pipeline(folder: Path, ids: list[int]) -> np.ndarray:
    """sentence-transformers' modules by hand on the original folder: the model's hidden
    states, mean pooling, 2_Dense, 3_Dense, L2 normalisation."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        h = model(input_ids=torch.tensor([ids])).last_hidden_state[0].mean(0)
        for sub in ("2_Dense", "3_Dense"):
            h = load_file(folder / sub / "model.safetensors")["linear.weight"].float() @ h
    return torch.nn.functional.normalize(h, dim=0).numpy()


def _llama_embed(path: Path, text: str) -> tuple[list[int], np.ndarray]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=64, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        ids = llm.tokenize(text.encode(), add_bos=True, special=False)
        e = np.array(llm.embed(text, normalize=False), dtype=np.float32)
        return ids, e / np.linalg.norm(e)
    finally:
        llm.close()


def test_gemma_embedding_in_llama_cpp(work):
    """Ours embeds as the reference's file, bit for bit, and as the sentence-transformers
    pipeline does (the window of 8 is narrower than the sentences: SWA layers count)."""
    for text in SENTENCES:
        ids, got = _llama_embed(work["ours"] / "gemma_emb-f32.gguf", text)
        ids_ref, ref = _llama_embed(work["ref"] / "gemma_emb-f32.gguf", text)
        assert ids == ids_ref and len(ids) > 10 and got.shape == (64,)
        np.testing.assert_array_equal(got, ref)
        want = _st_pipeline(work["models"]["gemma_emb"], ids)
        cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cos >= 0.9999, cos
        assert np.abs(got - want).max() <= 1e-3


def test_gemma_embedding_round_trip(work, tmp_path):
    """GGUF (f32) -> HF: every tensor back (norms within 1e-6: w + 1 - 1), the Dense heads
    as sentence-transformers modules, and sentence-transformers on the folder embeds as
    llama.cpp on the GGUF."""
    import torch
    from safetensors.numpy import load_file
    from sentence_transformers import SentenceTransformer

    src, back = work["models"]["gemma_emb"], tmp_path / "back"
    gguf_to_hf(work["ours"] / "gemma_emb-f32.gguf", back, dtype="f32")
    orig = load_file(src / "model.safetensors")
    got = {k.removeprefix("model."): v for k, v in load_file(back / "model.safetensors").items()}
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_allclose(got[k], v, rtol=0, atol=1e-6, err_msg=k)
    for sub in ("2_Dense", "3_Dense"):
        a = load_file(src / sub / "model.safetensors")["linear.weight"]
        np.testing.assert_array_equal(
            load_file(back / sub / "model.safetensors")["linear.weight"], a
        )
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma3TextModel"] and cfg["use_bidirectional_attention"]
    st = SentenceTransformer(str(back), device="cpu")
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Dense", "Dense",
                                             "Normalize"]  # fmt: skip
    for text in SENTENCES:
        ids, want = _llama_embed(work["ours"] / "gemma_emb-f32.gguf", text)
        assert st.tokenizer(text)["input_ids"] == ids
        with torch.no_grad():
            e = st.encode([text])[0]
        assert np.abs(e - want).max() <= 1e-3


def test_gemma_embedding_remote_is_the_local_conversion(
    work, nginx, remote_tree, tmp_path, monkeypatch
):
    """A remote conversion (Hub listing, and an https folder probed file by file) reads
    modules.json and the module files it names (pooling, the Dense heads): the file is the
    local one, byte for byte."""
    import shutil

    local = work["models"]["gemma_emb"]
    repo = remote_tree.root / "org/gemma_emb/resolve/main"
    shutil.copytree(local, repo)
    listing = {"id": "org/gemma_emb", "siblings": [
        {"rfilename": str(p.relative_to(local))} for p in sorted(local.rglob("*")) if p.is_file()
    ]}  # fmt: skip
    api = remote_tree.root / "api/models/org/gemma_emb"
    api.write_text(json.dumps(listing))
    monkeypatch.setenv("HF_ENDPOINT", nginx.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    try:
        want = (work["ours"] / "gemma_emb-q8_0.gguf").read_bytes()
        hf_to_gguf("hf://org/gemma_emb", tmp_path / "hub" / "o.gguf", "q8_0")
        assert (tmp_path / "hub" / "o.gguf").read_bytes() == want
        url = f"{nginx.url}/org/gemma_emb/resolve/main"
        hf_to_gguf(url, tmp_path / "https" / "o.gguf", "q8_0")
        assert (tmp_path / "https" / "o.gguf").read_bytes() == want
    finally:
        shutil.rmtree(remote_tree.root / "org/gemma_emb")
        api.unlink()


def test_gemma_embedding_bad_dense_is_named(work, tmp_path):
    import shutil

    d = shutil.copytree(work["models"]["gemma_emb"], tmp_path / "m")
    cfg = json.loads((d / "2_Dense" / "config.json").read_text())
    (d / "2_Dense" / "config.json").write_text(
        json.dumps(cfg | {"activation_function": "torch.nn.modules.activation.Tanh"})
    )
    out = tmp_path / "out.gguf"
    with pytest.raises(E.InvalidModelConfig, match="activation"):
        hf_to_gguf(d, out, "f16")
    (d / "2_Dense" / "config.json").write_text(json.dumps(cfg | {"out_features": 128}))
    with pytest.raises(E.TensorShapeMismatch, match="Dense"):
        hf_to_gguf(d, out, "f16")
    (d / "2_Dense" / "config.json").unlink()
    with pytest.raises(E.MissingModelFile, match="Dense"):
        hf_to_gguf(d, out, "f16")
    assert not out.exists()


# --------------------------------------------------------------------------- Unigram vocabularies


@pytest.mark.parametrize("arch", ["xlmr", "xlmr_json"])
def test_xlmr_same_as_reference(work, arch):
    """XLM-R with its HF tokenizer files, and from tokenizer.json alone (the reference reads
    that through transformers' tokenizer object; ours from the JSON)."""
    _same_file(work["ours"] / f"{arch}-f32.gguf", work["ref"] / f"{arch}-f32.gguf")


UNIGRAM_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Héllo  WORLD: naïve café, 3.14 and 敏捷的狐狸!",
    "  leading and trailing  ",
    "Der schnelle braune Fuchs ① ＡＢＣ",
]


@pytest.mark.parametrize("arch", ["t5", "xlmr"])
def test_unigram_tokenizer_round_trip(work, arch, tmp_path, monkeypatch):
    """GGUF -> HF rebuilds the Unigram tokenizer (precompiled charsmap, Metaspace): the
    same ids as the original HF tokenizer and as llama.cpp on the GGUF; the JSON equals
    what the tokenizers library builds from the same calls.  XLM-R comes back as
    XLMRobertaModel with the same hidden states."""
    import llama_cpp
    import tokenizers
    import torch
    from transformers import AutoModel, AutoTokenizer

    from weightsmith.convert.tokenizer import _from_gguf, hf_tokenizer_files
    from weightsmith.gguf import read

    gguf = work["ours"] / f"{arch}-f32.gguf"
    back = tmp_path / "back"
    gguf_to_hf(gguf, back, dtype="f32")
    orig, ours = (
        AutoTokenizer.from_pretrained(work["models"][arch]),
        AutoTokenizer.from_pretrained(back),
    )
    llm = llama_cpp.Llama(model_path=str(gguf), embedding=arch != "t5", n_ctx=64, n_threads=2,
                          verbose=False)  # fmt: skip
    try:
        for text in UNIGRAM_TEXTS:
            ids = orig(text)["input_ids"]
            assert ours(text)["input_ids"] == ids, text
            assert llm.tokenize(text.encode(), add_bos=True, special=False) == ids, text
    finally:
        llm.close()
    assert 3 in orig(UNIGRAM_TEXTS[1])["input_ids"] or arch == "t5"  # <unk> was exercised
    with read(gguf) as f:
        md = {k: f.metadata[k] for k in f.metadata}
    mine = hf_tokenizer_files(md)
    monkeypatch.setattr(_from_gguf, "TOKENIZERS_API", tokenizers)
    assert hf_tokenizer_files(md) == mine
    cfg = json.loads((back / "config.json").read_text())
    if arch == "xlmr":
        assert cfg["architectures"] == ["XLMRobertaModel"]
        x = torch.tensor([orig(UNIGRAM_TEXTS[0])["input_ids"]])
        with torch.no_grad():
            a = AutoModel.from_pretrained(work["models"][arch]).eval()(input_ids=x)
            b = AutoModel.from_pretrained(back).eval()(input_ids=x)
        np.testing.assert_allclose(b.last_hidden_state.numpy(), a.last_hidden_state.numpy(),
                                   rtol=0, atol=1e-5)  # fmt: skip


def test_xlmr_json_without_precompiled_is_named(work, tmp_path):
    """A tokenizer.json whose normalizer is not a bare Precompiled one (transformers 4's
    Sequence): the reference fails on it; ours names it before any output."""
    import shutil

    d = shutil.copytree(work["models"]["xlmr_json"], tmp_path / "m")
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["normalizer"] = {"type": "Sequence", "normalizers": [tj["normalizer"]]}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    out = tmp_path / "out.gguf"
    with pytest.raises(E.TokenizerInconsistent, match="normalizer"):
        hf_to_gguf(d, out, "f16")
    assert not out.exists()


# --------------------------------------------------------------------------- mT5 / UMT5


@pytest.mark.parametrize(("arch", "t"), T5_FAMILY_FILES)
def test_t5_family_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


@pytest.mark.parametrize("arch", ["mt5", "umt5"])
def test_t5_family_in_llama_cpp_and_back(work, arch, tmp_path):
    """llama.cpp runs mT5 and UMT5 (a relative attention bias in every block) as it runs T5:
    logits within 2e-3 of the scale of transformers'; GGUF -> HF gives the same class,
    tensors and logits, and a tokenizer that tokenizes as llama.cpp."""
    import llama_cpp
    import torch
    import transformers
    from safetensors.numpy import load_file
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from weightsmith.gguf import read

    gguf = work["ours"] / f"{arch}-f32.gguf"
    with read(gguf) as f:  # guard: UMT5's per-block bias is really there
        assert ("enc.blk.1.attn_rel_b.weight" in f) == (arch == "umt5")
    src, dec = [5, 9, 33, 100, 7, 42, 1], [0, 10, 20, 30]
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=64, n_threads=2, logits_all=True,
                          verbose=False)  # fmt: skip
    try:
        arr = (llama_cpp.llama_token * len(src))(*src)
        assert llama_cpp.llama_encode(llm.ctx, llama_cpp.llama_batch_get_one(arr, len(src))) == 0
        llm.eval(dec)
        got = np.array(llm.scores[: len(dec)], dtype=np.float32)
        text = UNIGRAM_TEXTS[1]
        llama_ids = llm.tokenize(text.encode(), add_bos=True, special=False)
    finally:
        llm.close()
    cls = {"mt5": "MT5ForConditionalGeneration", "umt5": "UMT5ForConditionalGeneration"}[arch]
    x, d = torch.tensor([src]), torch.tensor([dec])
    orig = getattr(transformers, cls).from_pretrained(work["models"][arch]).eval()
    with torch.no_grad():
        want = orig(input_ids=x, decoder_input_ids=d).logits[0].numpy()
    assert np.abs(got - want).max() <= 2e-3 * max(1.0, float(np.abs(want).max()))

    back = tmp_path / "back"
    gguf_to_hf(gguf, back, dtype="f32")
    assert json.loads((back / "config.json").read_text())["architectures"] == [cls]
    a, b = (
        load_file(work["models"][arch] / "model.safetensors"),
        load_file(back / "model.safetensors"),
    )
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=k)
    model = AutoModelForSeq2SeqLM.from_pretrained(back).eval()
    assert type(model).__name__ == cls
    with torch.no_grad():
        np.testing.assert_allclose(model(input_ids=x, decoder_input_ids=d).logits[0].numpy(), want,
                                   rtol=0, atol=1e-5)  # fmt: skip
    assert AutoTokenizer.from_pretrained(back)(text)["input_ids"] == llama_ids


# --------------------------------------------------------------------------- llama-quantize types


@pytest.mark.parametrize("t", QUANT_TYPES)
@pytest.mark.parametrize("arch", QUANT_ARCHS)
def test_encoder_quant_types_same_as_llama_quantize(work, arch, t):
    """Reference f32 + llama_model_quantize: every KV (in order), tensor info and byte."""
    from weightsmith.gguf import read

    ours = work["ours"] / f"{arch}-{t}.gguf"
    _same_file(ours, work["ref"] / f"{arch}-{t}.gguf")
    with read(ours) as f:  # guard: the type's own blocks, not only its fallbacks
        assert any(x.ggml_type.name in ("Q4_K", "IQ4_XS") for x in f.tensors)


# --------------------------------------------------------------------------- nomic-bert MoE

# NomicBertConfig (transformers 5) ignores the checkpoint's own fields: the reference writes
# its class defaults for these (and key/value lengths from its head_dim); ours config.json's
NOMIC_MOE_FROM_CONFIG = {
    "block_count": 2, "context_length": 512, "embedding_length": 64,
    "feed_forward_length": 128, "attention.head_count": 4, "rope.freq_base": 10000.0,
    "attention.layer_norm_epsilon": np.float32(1e-5),
}  # fmt: skip


def test_nomic_bert_moe_against_reference(work):
    """Every tensor (experts cut and transposed, router, GELU MLP, biases) and every other
    KV byte-identical to the reference's file, in order; the sizes are config.json's."""
    from support import gguf_c_reader
    from weightsmith.gguf import read

    ours, ref = work["ours"] / "nomic_moe-f32.gguf", work["ref"] / "nomic_moe-f32.gguf"
    (ko, to), (kr, tr) = gguf_c_reader.read(ours), gguf_c_reader.read(ref)
    assert to == tr
    lengths = {f"nomic-bert-moe.attention.{k}_length" for k in ("key", "value")}  # theirs only
    assert [k for k in kr if k not in lengths] == list(ko)
    differ = {f"nomic-bert-moe.{k}" for k in NOMIC_MOE_FROM_CONFIG}
    assert all(ko[k] == kr[k] for k in ko if k not in differ and k != "general.name")
    with read(ours) as f:
        md = f.metadata
        for k, v in NOMIC_MOE_FROM_CONFIG.items():
            assert md[f"nomic-bert-moe.{k}"] == v, k
        assert md["nomic-bert-moe.moe_every_n_layers"] == 2
        assert md["nomic-bert-moe.expert_used_count"] == 2
        assert md["tokenizer.ggml.model"] == "t5"
        assert f.tensor("blk.1.ffn_down_exps.weight").shape == (4, 64, 128)


def _nomic_moe_oracle(folder: Path):
    """transformers' NomicBertModel with the checkpoint's weights, its attention given the
    Q/K/V/output biases and its MLPs replaced by the checkpoint's (GELU fc1/fc2; softmax
    top-2 experts, weights not renormalised, plus the experts' output bias)."""
    import torch
    from safetensors.torch import load_file
    from torch import nn
    from transformers import NomicBertConfig, NomicBertModel

    cfg = json.loads((folder / "config.json").read_text())
    sd = load_file(folder / "model.safetensors")
    h, k = cfg["n_embd"], cfg["moe_top_k"]
    model = NomicBertModel(NomicBertConfig(
        vocab_size=cfg["vocab_size"], hidden_size=h, num_hidden_layers=cfg["n_layer"],
        num_attention_heads=cfg["n_head"], intermediate_size=cfg["n_inner"],
        layer_norm_eps=cfg["layer_norm_epsilon"], type_vocab_size=cfg["type_vocab_size"],
        rope_parameters={"rope_theta": float(cfg["rotary_emb_base"]), "rope_type": "default"},
    )).eval()  # fmt: skip

    class Dense(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            p = self.p
            y = nn.functional.gelu(x @ sd[p + "fc1.weight"].T + sd[p + "fc1.bias"])
            return y @ sd[p + "fc2.weight"].T + sd[p + "fc2.bias"]

    class Moe(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            p, e = self.p, sd[self.p + "router.layer.weight"].shape[0]
            w1 = sd[p + "experts.mlp.w1"].view(e, -1, h)
            w2 = sd[p + "experts.mlp.w2"].view(e, -1, h)
            probs = torch.softmax(x @ sd[p + "router.layer.weight"].T, dim=-1)
            top, idx = probs.topk(k, dim=-1)
            out = torch.zeros_like(x)
            for j in range(e):
                gate = (top * (idx == j)).sum(-1, keepdim=True)
                out = out + gate * (nn.functional.gelu(x @ w1[j].T) @ w2[j])
            return out + sd[p + "experts.bias"]

    new = {
        "embeddings.word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
        "embeddings.LayerNorm.weight": sd["emb_ln.weight"],
        "embeddings.LayerNorm.bias": sd["emb_ln.bias"],
    }
    for i, layer in enumerate(model.layers):
        a, b = f"encoder.layers.{i}.", f"layers.{i}."
        att = layer.self_attn
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(att, n, nn.Linear(h, h, bias=True))
        q, kk, v = sd[a + "attn.Wqkv.weight"].split(h)
        qb, kb, vb = sd[a + "attn.Wqkv.bias"].split(h)
        new |= {b + "self_attn.q_proj.weight": q, b + "self_attn.q_proj.bias": qb,
                b + "self_attn.k_proj.weight": kk, b + "self_attn.k_proj.bias": kb,
                b + "self_attn.v_proj.weight": v, b + "self_attn.v_proj.bias": vb,
                b + "self_attn.o_proj.weight": sd[a + "attn.out_proj.weight"],
                b + "self_attn.o_proj.bias": sd[a + "attn.out_proj.bias"]}  # fmt: skip
        for x, y in (("norm1", "post_attention_layernorm"), ("norm2", "post_mlp_layernorm")):
            new[f"{b}{y}.weight"], new[f"{b}{y}.bias"] = sd[f"{a}{x}.weight"], sd[f"{a}{x}.bias"]
        moe = i % cfg["moe_every_n_layers"] == 1
        layer.mlp = (Moe if moe else Dense)(a + "mlp.")
    model.load_state_dict(new, strict=True)
    return model


def test_nomic_bert_moe_embedding_in_llama_cpp(work):
    """llama.cpp runs our file (the reference's it refuses: wrong sizes); its mean embedding
    equals the oracle's (``_nomic_moe_oracle``) with the same token ids."""
    import llama_cpp
    import torch

    model = _nomic_moe_oracle(work["models"]["nomic_moe"])
    for text in SENTENCES:
        llm = llama_cpp.Llama(model_path=str(work["ours"] / "nomic_moe-f32.gguf"),
                              embedding=True, n_ctx=64, n_threads=2, verbose=False)  # fmt: skip
        try:
            tokens = llm.tokenize(text.encode(), add_bos=True, special=False)
            got = np.array(llm.embed(text, normalize=False), dtype=np.float32)
        finally:
            llm.close()
        with torch.no_grad():
            want = model(input_ids=torch.tensor([tokens])).last_hidden_state[0].numpy().mean(0)
        assert tokens[0] == 0 and tokens[-1] == 2 and len(tokens) > 10  # <s> ... </s>
        assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max(), np.abs(got - want).max()
    with pytest.raises(ValueError, match="Failed to load model"):
        llama_cpp.Llama(model_path=str(work["ref"] / "nomic_moe-f32.gguf"), embedding=True,
                        verbose=False)  # fmt: skip
