"""GGUF -> HF folder (weightsmith.convert.gguf_to_hf), checked with transformers.

Oracles: transformers (the folder loads; logits against the original model's),
the ``safetensors`` library (tensor values against the original checkpoint) and
llama.cpp's own ``convert_hf_to_gguf.py`` (GGUFs we did not write).  Tiny random
models come from tests/support/hf_models.py, one per architecture of the registry.
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as st_load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from support import hf_models, pyfork
from support.llama_sdist import llama_cpp_root
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf
from weightsmith.convert._hf_to_gguf import hf_to_gguf
from weightsmith.gguf import Writer, read, split

ARCHS = ["llama", "llama3", "mistral", "qwen2", "qwen3", "gemma3"]
# token ids below every test vocabulary's size (the SentencePiece ones have 512)
PROMPT = [1, 5, 9, 200, 17, 33, 100, 7, 2, 300, 41, 12, 8, 90, 11, 3, 4, 60, 70, 80, 250, 511]
TEXT = (
    "Hello world! The quick brown fox. Привет, мир. 你好，世界。 Ça va? "
    "Grüße aus Köln 🙂 12345 tokens\n\ttabs  and  spaces"
)
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Bonjour ! 你好 — how are you?"},
    {"role": "assistant", "content": "Fine, merci."},
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """arch -> tiny HF folder (built once per module, on first use)."""
    root = tmp_path_factory.mktemp("hf")
    cache: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in cache:
            folder = hf_models.build(arch, root / arch)
            if arch not in ("qwen2", "qwen3"):
                _spm_tokenizer_config(folder, arch)
            cache[arch] = folder
        return cache[arch]

    return get


# a chat template over the SentencePiece test vocabularies' special tokens
SPM_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '</s>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def _spm_tokenizer_config(folder: Path, arch: str) -> None:
    """The tokenizer_config.json a Hub repo ships beside tokenizer.model.

    hf_models writes only tokenizer.model; from that alone transformers 5 guesses the
    tokenizer's settings (no BOS, another prefix-space rule), which is neither how such
    models are published nor what llama.cpp's converter assumes.
    """

    cfg = {
        "tokenizer_class": "GemmaTokenizer" if arch == "gemma3" else "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": True,
        "chat_template": SPM_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))


def _logits(folder: Path) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


def _original_tokenizer(src: Path):
    """The class the folder's tokenizer_config.json names (AutoTokenizer overrides that with
    a generic SentencePiece conversion for model_type mistral)."""
    import transformers

    cfg_path = src / "tokenizer_config.json"
    name = json.loads(cfg_path.read_text()).get("tokenizer_class") if cfg_path.exists() else None
    cls = getattr(transformers, name) if name else AutoTokenizer
    return cls.from_pretrained(src)


def _ids(x) -> list[int]:
    return list(x["input_ids"] if hasattr(x, "keys") else x)


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """Mean over positions of KL(p || q) of the next-token distributions, in nats."""
    lp = torch.log_softmax(p_logits.double(), -1)
    lq = torch.log_softmax(q_logits.double(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def _ours_gguf(src: Path, out: Path, type: str) -> Path:
    hf_to_gguf(src, out, type=type)
    return out


def _reference_gguf(src: Path, out: Path, outtype: str = "f32") -> Path:
    script = llama_cpp_root() / "convert_hf_to_gguf.py"
    r = pyfork.run(
        [sys.executable, str(script), str(src), "--outtype", outtype, "--outfile", str(out)],
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return out


# --------------------------------------------------------------------------- lossless


@pytest.mark.parametrize("arch", ARCHS)
def test_lossless_round_trip(arch, models, tmp_path):
    src = models(arch)
    gguf = _ours_gguf(src, tmp_path / "m.gguf", "f32")
    out = tmp_path / "back"
    gguf_to_hf(gguf, out, dtype="f32")

    # same logits, bit for bit
    a, b = _logits(src), _logits(out)
    assert torch.equal(a, b), (a - b).abs().max()

    # every tensor equals the original checkpoint's (in float32)
    orig = st_load_file(src / "model.safetensors")
    back = st_load_file(out / "model.safetensors")
    cfg = json.loads((out / "config.json").read_text())
    if cfg["tie_word_embeddings"]:
        orig.pop("lm_head.weight", None)
    assert sorted(back) == sorted(orig)
    for k in orig:
        np.testing.assert_array_equal(back[k], orig[k].astype(np.float32), err_msg=k)

    # the config says the same model
    want = hf_models.config(src)
    for key in ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "intermediate_size", "vocab_size", "rms_norm_eps",
                "tie_word_embeddings", "max_position_embeddings"):  # fmt: skip
        assert cfg[key] == want[key], key
    if arch == "mistral":  # the GGUF has no window: full attention, as llama.cpp runs it
        assert cfg["sliding_window"] is None
    if arch == "gemma3":
        assert cfg["sliding_window"] == want["sliding_window"]

    # the tokenizer loads and encodes as the original does
    ta = _original_tokenizer(src)
    tb = AutoTokenizer.from_pretrained(out)
    assert tb(TEXT)["input_ids"] == ta(TEXT)["input_ids"]
    specials = f"{ta.bos_token or ''}{TEXT}{ta.eos_token or ''}"
    assert tb(specials)["input_ids"] == ta(specials)["input_ids"]
    assert ta.chat_template and tb.chat_template == ta.chat_template
    for gen in (False, True):
        want_ids = _ids(ta.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=gen))
        got_ids = _ids(tb.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=gen))
        assert got_ids == want_ids and len(want_ids) > 20


def test_llama3_rope_scaling_is_rebuilt(models, tmp_path):
    src = models("llama3")
    gguf = _ours_gguf(src, tmp_path / "m.gguf", "f32")
    gguf_to_hf(gguf, tmp_path / "back", dtype="f32", tokenizer=False)
    got = json.loads((tmp_path / "back" / "config.json").read_text())
    want = hf_models.config(src)["rope_parameters"]
    assert got["rope_theta"] == want["rope_theta"]
    rs = got["rope_scaling"]
    assert rs["rope_type"] == "llama3"
    for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        assert rs[k] == want[k], k


def test_linear_rope_scaling_is_rebuilt(models, tmp_path):
    """rope.scaling.type/factor back to rope_scaling: logits equal at positions it changes."""
    import shutil

    src = tmp_path / "linear"
    shutil.copytree(models("llama"), src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
    (src / "config.json").write_text(json.dumps(cfg))
    gguf = _ours_gguf(src, tmp_path / "m.gguf", "f32")
    with read(gguf) as f:
        assert f.metadata["llama.rope.scaling.type"] == "linear"
    gguf_to_hf(gguf, tmp_path / "back", dtype="f32", tokenizer=False)
    got = json.loads((tmp_path / "back" / "config.json").read_text())["rope_scaling"]
    assert got["rope_type"] == "linear" and got["factor"] == 4.0
    assert torch.equal(_logits(src), _logits(tmp_path / "back"))


@pytest.mark.parametrize("arch", ["mistral", "gemma3"])
def test_bf16_output_equals_bf16_original(arch, models, tmp_path):
    """The default dtype: a bf16 model comes back with the very same bf16 bits."""
    src = models(arch)
    gguf = _ours_gguf(src, tmp_path / "m.gguf", "f32")
    gguf_to_hf(gguf, tmp_path / "back", tokenizer=False)
    orig = st_load_file(src / "model.safetensors")
    back = st_load_file(tmp_path / "back" / "model.safetensors")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["dtype"] == "bfloat16"
    for k, v in back.items():
        assert v.dtype == orig[k].dtype
        np.testing.assert_array_equal(v.view(np.uint16), orig[k].view(np.uint16), err_msg=k)


# --------------------------------------------------------------------------- quantized

# mean KL(original || round trip) bounds, nats; measured values are printed (-s)
KL_BOUND = {"q8_0": 5e-3, "q4_k_m": 0.3}


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k_m"])
@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_round_trip(arch, qtype, models, tmp_path):
    src = models(arch)
    gguf = _ours_gguf(src, tmp_path / "m.gguf", qtype)
    with read(gguf) as f:
        assert any(t.ggml_type.name.startswith("Q") for t in f.tensors)
    out = tmp_path / "back"
    gguf_to_hf(gguf, out, dtype="f32", tokenizer=False)
    a, b = _logits(src), _logits(out)
    kl = _kl(a, b)
    print(f"\nKL {arch} {qtype}: {kl:.3e} nats (mean over {len(PROMPT)} positions)")
    assert 0 < kl < KL_BOUND[qtype]


def _llama_cpp_logits(gguf: Path) -> torch.Tensor:
    import llama_cpp

    m = llama_cpp.Llama(model_path=str(gguf), logits_all=True, verbose=False, n_ctx=64)
    try:
        m.eval(PROMPT)
        return torch.tensor(np.array(m.scores[: len(PROMPT)], np.float32))
    finally:
        m.close()


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_quantized_loss_matches_llama_cpp(arch, models, tmp_path):
    """The HF folder of a q4_k_m GGUF loses what llama.cpp itself loses on that GGUF.

    KL(original || our folder) in transformers against KL(f32 GGUF || q4_k_m GGUF) in
    llama.cpp: a wrong dequantization or inverse transform would move ours far away.
    """
    src = models(arch)
    f32 = _ours_gguf(src, tmp_path / "f32.gguf", "f32")
    q = _ours_gguf(src, tmp_path / "q.gguf", "q4_k_m")
    gguf_to_hf(q, tmp_path / "back", dtype="f32", tokenizer=False)
    ours = _kl(_logits(src), _logits(tmp_path / "back"))
    ref = _kl(_llama_cpp_logits(f32), _llama_cpp_logits(q))
    print(f"\nKL {arch} q4_k_m: transformers round trip {ours:.3e}, llama.cpp {ref:.3e}")
    assert 0.5 < ours / ref < 2


# --------------------------------------------------------------------------- llama.cpp's GGUFs


@pytest.mark.parametrize("arch", ARCHS)
def test_reference_converter_gguf(arch, models, tmp_path):
    src = models(arch)
    gguf = _reference_gguf(src, tmp_path / "ref.gguf")
    out = tmp_path / "back"
    gguf_to_hf(gguf, out, dtype="f32")
    a, b = _logits(src), _logits(out)
    assert torch.equal(a, b), (a - b).abs().max()
    AutoTokenizer.from_pretrained(out)


@pytest.mark.parametrize("arch", ["mistral", "qwen3", "gemma3"])
def test_reference_converter_bf16_gguf(arch, models, tmp_path):
    """llama.cpp's bf16 GGUF of a bf16 model comes back bit for bit in bf16 (the default)."""
    src = models(arch)
    gguf = _reference_gguf(src, tmp_path / "ref.gguf", "bf16")
    gguf_to_hf(gguf, tmp_path / "back", tokenizer=False)
    orig = st_load_file(src / "model.safetensors")
    back = st_load_file(tmp_path / "back" / "model.safetensors")
    if "lm_head.weight" not in back:
        orig.pop("lm_head.weight", None)
    assert sorted(back) == sorted(orig)
    for k, v in back.items():
        np.testing.assert_array_equal(v.view(np.uint16), orig[k].view(np.uint16), err_msg=k)


# --------------------------------------------------------------------------- layout


def test_sharded_output_and_split_input(models, tmp_path):
    src = models("llama")
    gguf = _ours_gguf(src, tmp_path / "m.gguf", "f32")
    # a split GGUF set, opened through its second shard
    (tmp_path / "parts").mkdir()
    paths = split(gguf, max_tensors=7, out_dir=tmp_path / "parts")
    assert len(paths) > 1
    out = tmp_path / "sharded"
    calls = []
    gguf_to_hf(
        paths[1], out, dtype="f32", max_shard_size="300KB", progress=lambda *a: calls.append(a)
    )
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted({*index["weight_map"].values()})
    assert len(shards) > 2 and all((out / s).is_file() for s in shards)
    assert not (out / "model.safetensors").exists()
    for s in shards:  # no shard over the limit unless it holds a single tensor
        names = [k for k, v in index["weight_map"].items() if v == s]
        assert (out / s).stat().st_size <= 300_000 + 4096 or len(names) == 1
    assert torch.equal(_logits(src), _logits(out))
    n = len(index["weight_map"])
    assert (
        calls[-1][2:] == (n, n) and calls[-1][0] == calls[-1][1] == index["metadata"]["total_size"]
    )
    # converting again unsharded removes the index
    gguf_to_hf(gguf, out, dtype="f32")
    assert not (out / "model.safetensors.index.json").exists()
    assert torch.equal(_logits(src), _logits(out))


def test_peak_memory_of_tensor_pipeline(models, tmp_path):
    """Python-heap peak (numpy buffers included) stays under 3x the largest f32 tensor."""
    src = models("qwen3")  # 151936 x 64 embedding and output: the largest tensors
    gguf = _ours_gguf(src, tmp_path / "m.gguf", "q8_0")
    with read(gguf) as f:
        largest = max(t.n_elements for t in f.tensors) * 4
    tracemalloc.start()
    try:
        gguf_to_hf(gguf, tmp_path / "back", dtype="bf16", tokenizer=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"\npeak traced {peak / 2**20:.1f} MiB, largest tensor f32 {largest / 2**20:.1f} MiB")
    assert peak <= 3 * largest


# --------------------------------------------------------------------------- errors


def _tiny_gguf(path: Path, arch: str = "llama", drop: tuple[str, ...] = (), tensors=None) -> Path:
    md = {
        "general.architecture": arch,
        f"{arch}.block_count": 1,
        f"{arch}.context_length": 32,
        f"{arch}.embedding_length": 8,
        f"{arch}.feed_forward_length": 16,
        f"{arch}.attention.head_count": 2,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
    }
    if tensors is None:
        tensors = {"token_embd.weight": np.ones((4, 8), np.float32)}
    with Writer(path, arch=arch) as w:
        for k, v in md.items():
            if k not in drop and k != "general.architecture":
                w.add(k, v, "f32" if isinstance(v, float) else "u32")
        for name, arr in tensors.items():
            w.add_tensor_info(name, "F32", arr.shape)
        for name, arr in tensors.items():
            w.write_tensor(name, np.asarray(arr, np.float32))
    return path


def test_unsupported_architecture(tmp_path):
    p = _tiny_gguf(tmp_path / "rwkv6.gguf", arch="rwkv6")  # bert is supported since issue 15
    with pytest.raises(E.UnknownArchitecture) as ei:
        gguf_to_hf(p, tmp_path / "out", tokenizer=False)
    assert "rwkv6" in str(ei.value) and "gemma3" in str(ei.value) and "qwen3" in str(ei.value)
    assert not (tmp_path / "out" / "config.json").exists()


def test_missing_metadata_lists_every_key(tmp_path):
    drop = ("llama.block_count", "llama.feed_forward_length")
    p = _tiny_gguf(tmp_path / "m.gguf", drop=drop)
    with pytest.raises(E.MissingGGUFMetadata) as ei:
        gguf_to_hf(p, tmp_path / "out", tokenizer=False)
    for k in drop:
        assert k in str(ei.value)
    assert not (tmp_path / "out").exists()


def test_missing_tokenizer_is_named(tmp_path):
    p = _tiny_gguf(tmp_path / "m.gguf")
    with pytest.raises(E.MissingGGUFMetadata, match=r"tokenizer\.ggml\.model"):
        gguf_to_hf(p, tmp_path / "out")


def test_missing_embedding(tmp_path):
    p = _tiny_gguf(tmp_path / "m.gguf", tensors={"output_norm.weight": np.ones(8, np.float32)})
    with pytest.raises(E.MissingGGUFTensor, match=r"token_embd\.weight"):
        gguf_to_hf(p, tmp_path / "out", tokenizer=False)


def test_unmapped_tensor(tmp_path):
    t = {
        "token_embd.weight": np.ones((4, 8), np.float32),
        "blk.0.mystery.weight": np.ones(8, np.float32),
    }
    p = _tiny_gguf(tmp_path / "m.gguf", tensors=t)
    with pytest.raises(E.UnmappedTensor, match=r"blk\.0\.mystery\.weight"):
        gguf_to_hf(p, tmp_path / "out", tokenizer=False)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_head_count_that_does_not_fit(tmp_path):
    t = {
        "token_embd.weight": np.ones((4, 8), np.float32),
        "blk.0.attn_q.weight": np.ones((6, 8), np.float32),  # 6 rows: not 2 heads of even size
    }
    p = _tiny_gguf(tmp_path / "m.gguf", tensors=t)
    with pytest.raises(E.TensorShapeMismatch, match="attn_q"):
        gguf_to_hf(p, tmp_path / "out", tokenizer=False)
    assert not any((tmp_path / "out").glob("*.safetensors"))


@pytest.mark.parametrize("dtype", ["int8", "q8_0", "f64"])
def test_bad_dtype(dtype, tmp_path):
    p = _tiny_gguf(tmp_path / "m.gguf")
    with pytest.raises(E.UnsupportedTargetDtype):
        gguf_to_hf(p, tmp_path / "out", dtype=dtype, tokenizer=False)
