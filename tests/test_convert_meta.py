"""Meta original checkpoints -> HF folder, against transformers' own converter.

The oracle is ``convert_llama_weights_to_hf.py`` from the transformers 4.47 wheel (the
last that shipped it; scripts/test.sh fetches it, see tests/meta_oracle.py), run on
tiny checkpoints built here in Meta's layout, single-file and split 2 ways.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import weightsmith.numpy as wsnp
from support import pyfork
from support.meta_fixtures import make_meta_checkpoint, ranks_file_encoder, sample_texts
from support.meta_oracle import run_oracle
from weightsmith import errors as E
from weightsmith.convert import meta_to_hf

CASES = [("2", 1), ("2", 2), ("3.1", 1), ("3.1", 2), ("3", 1), ("3.2", 1), ("1", 2)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """generation, shards -> (meta folder, our HF folder, oracle HF folder)."""
    cache: dict = {}

    def get(generation: str, shards: int):
        key = (generation, shards)
        if key not in cache:
            base = tmp_path_factory.mktemp(f"meta{generation}x{shards}")
            src = make_meta_checkpoint(base / "original", generation, shards)
            ours = base / "ours"
            meta_to_hf(src, ours)
            oracle = run_oracle(src, base / "oracle", generation, shards)
            cache[key] = (src, ours, oracle)
        return cache[key]

    return get


def _tensors(folder):
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(wsnp.load_file(f))
    return out


@pytest.mark.parametrize(("generation", "shards"), CASES)
def test_tensors_bit_identical_to_oracle(built, generation, shards):
    _, ours, oracle = built(generation, shards)
    a, b = _tensors(ours), _tensors(oracle)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name


def _config(folder):
    from transformers import AutoConfig

    d = AutoConfig.from_pretrained(folder).to_dict()
    for k in ("_name_or_path", "transformers_version", "torch_dtype", "dtype"):
        d.pop(k, None)
    return d


def _llama3_ids(folder, cfg):
    """The script hard-codes 128000/128001, the ids every real Llama 3 tokenizer has
    (128,000 BPE ranks); the tiny tokenizers here have fewer ranks, so ours must carry
    the ids of <|begin_of_text|> and <|end_of_text|> in the tokenizer it wrote."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert cfg.pop("bos_token_id") == tok.token_to_id("<|begin_of_text|>")
    assert cfg.pop("eos_token_id") == tok.token_to_id("<|end_of_text|>")


@pytest.mark.parametrize(("generation", "shards"), CASES)
def test_config_equals_oracle(built, generation, shards):
    _, ours, oracle = built(generation, shards)
    a, b = _config(ours), _config(oracle)
    gen_ours = json.loads((ours / "generation_config.json").read_text())
    gen_oracle = json.loads((oracle / "generation_config.json").read_text())
    gen_oracle.pop("transformers_version", None)
    if generation.startswith("3"):
        assert (b["bos_token_id"], b["eos_token_id"]) == (128000, 128001)
        _llama3_ids(ours, a)
        _llama3_ids(ours, gen_ours)
        for d in (b, gen_oracle):
            del d["bos_token_id"], d["eos_token_id"]
    assert a == b
    assert gen_ours == gen_oracle


@pytest.mark.parametrize(("generation", "shards"), [("2", 2), ("3.1", 2), ("3.2", 1)])
def test_transformers_loads_ours_with_oracle_logits(built, generation, shards):
    from transformers import AutoModelForCausalLM

    _, ours, oracle = built(generation, shards)
    ids = torch.tensor([[1, 5, 9, 42, 7, 3]])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(ours, dtype=torch.float32)(ids).logits
        b = AutoModelForCausalLM.from_pretrained(oracle, dtype=torch.float32)(ids).logits
    assert torch.equal(a, b)


@pytest.mark.parametrize(("generation", "shards"), [("2", 1), ("3.1", 1)])
def test_tokenizer_tokenizes_like_the_original(built, generation, shards):
    from transformers import AutoTokenizer

    src, ours, oracle = built(generation, shards)
    tok = AutoTokenizer.from_pretrained(ours)
    ref = AutoTokenizer.from_pretrained(oracle)
    texts = sample_texts()
    if generation.startswith("3"):
        enc = ranks_file_encoder(src)
        specials = "<|begin_of_text|>hi<|eot_id|><|start_header_id|>user<|end_header_id|>"
        texts.append(specials)
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert ids == ref(text, add_special_tokens=False)["input_ids"], text
            if text != specials:  # the raw ranks file knows no special tokens
                assert ids == enc.encode(text), text
        assert tok(specials, add_special_tokens=False)["input_ids"][0] == tok.bos_token_id
    else:
        # the original is sentencepiece: our folder tokenizes exactly as it does, both as
        # transformers loads it and as tokenizer.json alone (the oracle's folder, loaded by
        # transformers 5, rebuilds its own pipeline and splits runs of spaces differently)
        import sentencepiece as spm
        from tokenizers import Tokenizer

        sp = spm.SentencePieceProcessor(model_file=str(src / "tokenizer.model"))
        raw = Tokenizer.from_file(str(ours / "tokenizer.json"))
        for text in texts:
            want = [1, *sp.encode(text)]
            assert tok(text)["input_ids"] == want, text
            assert raw.encode(text).ids == want, text
        assert raw.encode("<s>hi</s>").ids[:2] == [1, 1]
        assert tok("<s>hi</s>")["input_ids"][:2] == ref("<s>hi</s>")["input_ids"][:2] == [1, 1]


def test_sharded_output_has_an_index(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 2)
    res = meta_to_hf(src, tmp_path / "out", max_shard_size=40_000)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in (tmp_path / "out").glob("model-*.safetensors"))
    assert len(files) > 1 and sorted(set(index["weight_map"].values())) == files
    assert res.parameters == index["metadata"]["total_parameters"]


def test_other_dtypes(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "3", 1)
    meta_to_hf(src, tmp_path / "bf16")
    meta_to_hf(src, tmp_path / "f16", dtype="f16")
    a, b = _tensors(tmp_path / "bf16"), _tensors(tmp_path / "f16")
    for name in a:
        assert b[name].dtype == np.float16
        want = torch.from_numpy(a[name].view(np.uint16).astype(np.int16)).view(torch.bfloat16)
        assert np.array_equal(b[name], want.to(torch.float16).numpy()), name


# --------------------------------------------------------------------------- bad input


def _nothing_written(dst):
    assert not dst.exists()
    assert not list(dst.parent.glob(f".{dst.name}*"))


def test_missing_shard(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 2)
    (src / "consolidated.01.pth").rename(src / "consolidated.02.pth")
    with pytest.raises(E.MissingShard, match=r"consolidated\.01\.pth"):
        meta_to_hf(src, tmp_path / "out")
    _nothing_written(tmp_path / "out")


def test_shards_that_disagree(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 2)
    part = torch.load(src / "consolidated.01.pth")
    part["layers.1.attention.wo.weight"] = part["layers.1.attention.wo.weight"][:-2]
    torch.save(part, src / "consolidated.01.pth")
    with pytest.raises(E.ShardTensorMismatch, match=r"layers\.1\.attention\.wo\.weight"):
        meta_to_hf(src, tmp_path / "out")
    _nothing_written(tmp_path / "out")


def test_replicated_norm_that_differs(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 2)
    part = torch.load(src / "consolidated.01.pth")
    part["layers.0.ffn_norm.weight"] = part["layers.0.ffn_norm.weight"] * 2
    torch.save(part, src / "consolidated.01.pth")
    with pytest.raises(E.ShardTensorMismatch, match="replicated"):
        meta_to_hf(src, tmp_path / "out")
    _nothing_written(tmp_path / "out")


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"dim": 128}, "tok_embeddings"), ({"n_layers": 3}, "n_layers"),
     ({"n_kv_heads": 4}, "attention.wk"), ({"multiple_of": 128}, "feed_forward")],
)  # fmt: skip
def test_params_that_contradict_the_tensors(tmp_path, extra, field):
    src = make_meta_checkpoint(tmp_path / "original", "2", 1, params_extra=extra)
    with pytest.raises(E.ParamsShapeMismatch, match=field):
        meta_to_hf(src, tmp_path / "out")
    _nothing_written(tmp_path / "out")


def test_unknown_generation(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 1, params_extra={"norm_eps": 1e-4})
    with pytest.raises(E.UnknownLlamaGeneration, match=r"norm_eps=0\.0001"):
        meta_to_hf(src, tmp_path / "out")
    with pytest.raises(E.UnknownLlamaGeneration, match=r"4\.5"):
        meta_to_hf(src, tmp_path / "out", llama_version="4.5")
    _nothing_written(tmp_path / "out")
    meta_to_hf(src, tmp_path / "out", llama_version="2")  # told, it converts
    assert (tmp_path / "out" / "config.json").is_file()


def test_existing_folder_replaced_as_a_whole(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 1)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.safetensors").write_bytes(b"x")
    meta_to_hf(src, out)
    assert not (out / "stale.safetensors").exists()
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    (bad / "consolidated.00.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(E.WeightsmithError):
        meta_to_hf(bad, out)
    assert (out / "config.json").is_file()  # the old folder is still whole


# --------------------------------------------------------------------------- inspect


def test_inspect_shows_the_merged_model(tmp_path):
    from support.cli_helpers import run_json

    src = make_meta_checkpoint(tmp_path / "original", "2", 2)
    one = make_meta_checkpoint(tmp_path / "single", "2", 1)
    data = run_json("inspect", str(src), "--json")  # validated against the documented schema
    single = run_json("inspect", str(one), "--json")
    assert data["format"] == "meta"
    assert [Path(f["path"]).name for f in data["files"]] == [
        "consolidated.00.pth",
        "consolidated.01.pth",
    ]
    # the whole model's parameters, not the sum of the shards (norms are replicated)
    whole = sum(t.numel() for t in torch.load(one / "consolidated.00.pth").values())
    assert data["totals"]["parameters"] == single["totals"]["parameters"] == whole
    assert any("2 model-parallel shard(s) merged" in n for n in data["notes"])
    shapes = {t["name"]: t["shape"] for t in data["tensors"]}
    assert shapes["layers.0.attention.wo.weight"] == [64, 64]


def test_output_inside_the_input_is_refused(tmp_path):
    src = make_meta_checkpoint(tmp_path / "original", "2", 1)
    with pytest.raises(E.OutputFolderRefused):
        meta_to_hf(src, src)  # replacing the output folder would delete the input
    assert (src / "consolidated.00.pth").is_file()


def test_cli_convert_original_dir(tmp_path):
    from support.cli_helpers import run

    src = make_meta_checkpoint(tmp_path / "original", "3.1", 2)
    p = run("convert", str(src), str(tmp_path / "cli"), "--type", "f16", "--llama-version", "3.1")
    assert p.returncode == 0, p.stderr
    meta_to_hf(src, tmp_path / "lib", dtype="f16")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "lib" / name).read_bytes()


# --------------------------------------------------------------------------- -> GGUF


@pytest.mark.parametrize(("generation", "shards"), [("2", 2)])
def test_gguf_runs_in_llama_cpp_like_the_oracle_folders_gguf(built, tmp_path, generation, shards):
    """Ours: Meta folder -> GGUF in one call.  Reference: llama.cpp's convert_hf_to_gguf.py
    on the folder transformers' own script wrote.  llama.cpp's logits must be equal."""
    import sys

    import llama_cpp

    from support.llama_sdist import llama_cpp_root
    from weightsmith.convert import meta_to_gguf

    src, _, oracle = built(generation, shards)
    ours = tmp_path / "ours.gguf"
    meta_to_gguf(src, ours, "f16")
    ref = tmp_path / "ref.gguf"
    script = llama_cpp_root() / "convert_hf_to_gguf.py"
    r = pyfork.run(
        [sys.executable, str(script), str(oracle), "--outtype", "f16", "--outfile", str(ref)], timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    prompt = [1, 5, 9, 42, 7, 3, 100, 200]

    def logits(path):
        m = llama_cpp.Llama(model_path=str(path), logits_all=True, verbose=False, n_ctx=64)
        try:
            m.eval(prompt)
            return np.array(m.scores[: len(prompt)], np.float32)
        finally:
            m.close()

    assert np.array_equal(logits(ours), logits(ref))


# what llama.cpp's legacy converter leaves out or derives differently, with the reason
# (docs/convert-architectures.md, "Meta original checkpoints"); everything else is equal
LEGACY_DIFFERENCES = {
    "general.name",  # it title-cases the folder name
    "general.type", "general.quantization_version", "general.sampling.temp",
    "general.sampling.top_p", "llama.attention.key_length", "llama.attention.value_length",
    "llama.rope.freq_base", "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_sep_token",
    "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
    # the vocabulary comes through the HF folder's tokenizer files, as convert_hf_to_gguf.py
    # reads them: special tokens score -1000 and <unk> is CONTROL there
    "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
}  # fmt: skip


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_gguf_tensors_equal_llama_cpps_legacy_converter(built, tmp_path, outtype):
    import sys

    from support.llama_sdist import llama_cpp_root
    from weightsmith import gguf
    from weightsmith.convert import meta_to_gguf
    from weightsmith.quant.file import dequantize_tensor

    src, _, _ = built("2", 2)
    ours, ref = tmp_path / "ours.gguf", tmp_path / "legacy.gguf"
    meta_to_gguf(src, ours, outtype)
    root = llama_cpp_root()
    r = pyfork.run(
        [sys.executable, str(root / "examples" / "convert_legacy_llama.py"), str(src),
         "--outtype", outtype, "--outfile", str(ref)], timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(root / "gguf-py")},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    with gguf.read(ours) as a, gguf.read(ref) as b:
        ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
        assert sorted(ta) == sorted(tb)
        for n in ta:
            assert (ta[n].ggml_type, ta[n].shape) == (tb[n].ggml_type, tb[n].shape), n
            if ta[n].ggml_type.name != "Q8_0":
                assert bytes(a.tensor_bytes(n)) == bytes(b.tensor_bytes(n)), n
                continue
            # the legacy script's own numpy Q8_0 divides by the scale and rounds half to
            # even; ggml's C (ours, bit for bit) multiplies by its inverse and rounds half
            # away: codes may differ by one step, never more
            x, y = dequantize_tensor(a, n), dequantize_tensor(b, n)
            step = np.abs(y).reshape(-1, 32).max(axis=1) / 127
            assert np.all(np.abs(x - y).reshape(-1, 32) <= step[:, None] * 1.001), n

        def norm(v):
            return v if isinstance(v, (str, bytes, int, float)) else list(v)

        keys = set(a.metadata) | set(b.metadata)
        differ = {
            k for k in keys
            if norm(a.metadata.get(k, "<absent>")) != norm(b.metadata.get(k, "<absent>"))
        }  # fmt: skip
        assert differ <= LEGACY_DIFFERENCES, differ - LEGACY_DIFFERENCES


@pytest.mark.parametrize(("generation", "shards"), [("2", 1), ("2", 2), ("3.1", 2)])
def test_one_pass_gguf_is_the_hf_folders_gguf(built, tmp_path, monkeypatch, generation, shards):
    """meta_to_gguf streams the merged shards straight into the HF -> GGUF plan (no
    folder written); the file is byte for byte what converting meta_to_hf's folder gives."""
    import hashlib

    from weightsmith.convert import hf_to_gguf, meta_to_gguf
    from weightsmith.convert.tokenizer import _to_gguf

    src, _, _ = built(generation, shards)
    hf = tmp_path / "two-pass" / src.name  # the same folder name: the same general.name
    meta_to_hf(src, hf)
    if generation.startswith("3"):
        # real Llama 3 tokenizers fingerprint as llama-bpe, which the one-pass route takes
        # from the generation; the tiny one here has an unknown fingerprint, so the
        # two-pass reference is told that it is llama-bpe
        tok = _to_gguf._HFTokenizer(hf)
        digest = hashlib.sha256(str(tok.encode(_to_gguf.CHKTXT)).encode()).hexdigest()
        assert digest not in _to_gguf.PRE_BY_HASH
        monkeypatch.setitem(_to_gguf.PRE_BY_HASH, digest, "llama-bpe")
    types = ["f16", "q8_0", "q4_k_m"] if generation == "2" else ["q8_0"]
    for t in types:
        one, two = tmp_path / f"one-{t}.gguf", tmp_path / f"two-{t}.gguf"
        meta_to_gguf(src, one, t)
        hf_to_gguf(hf, two, t)
        assert one.read_bytes() == two.read_bytes(), t
    # nothing but the GGUF files was written beside them
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
