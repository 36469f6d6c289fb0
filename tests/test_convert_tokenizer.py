"""Tokenizer conversion, HF <-> GGUF, against llama.cpp's converter, its tokenizer tests and transformers.

Oracles:
* llama.cpp's ``models/ggml-vocab-<name>.gguf`` with ``.inp`` / ``.out`` (texts and the ids
  the original HF tokenizer gave them) -- our rebuilt tokenizer.json, run by ``tokenizers``;
* llama.cpp's ``convert_hf_to_gguf.py --vocab-only`` on the same folder, both files read
  back by ggml's own C gguf reader (libggml-base from llama-cpp-python) -- our
  ``vocab_metadata``, written through ``weightsmith.gguf.Writer``;
* transformers' ``AutoTokenizer`` on the original folder -- the round trip HF -> GGUF -> HF.
"""

from __future__ import annotations

import ctypes
import functools
import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tokenizers
from transformers import AutoTokenizer

from support import ggml_ref, pyfork
from support.llama_sdist import llama_cpp_root
from weightsmith import errors as E
from weightsmith import gguf
from weightsmith.convert.tokenizer import (
    hf_tokenizer_files,
    tokenizer_json_from_vocab_gguf,
    vocab_metadata,
    write_hf_tokenizer,
)

REAL = ["llama-spm", "llama-bpe", "qwen2", "phi-3", "gpt-2"]
SEP = "\n__ggml_vocab_test__\n"

MULTILINGUAL = (
    "Hello world! Привет, мир! 你好，世界。 こんにちは世界 안녕하세요 مرحبا بالعالم "
    "Γειά σου Κόσμε  שלום עולם 🦙🚀 3.14159 1234567 'tis I've\n\n\tdone   it"
)


def _vocab_gguf(name: str) -> Path:
    return llama_cpp_root() / "models" / f"ggml-vocab-{name}.gguf"


@functools.cache
def _rebuilt(name: str) -> dict:
    return tokenizer_json_from_vocab_gguf(_vocab_gguf(name))


def _tests(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's test-tokenizer-0 reading: texts split on the marker, one id line per text."""
    base = _vocab_gguf(name)
    raw = Path(f"{base}.inp").read_text(encoding="utf-8")
    texts = raw.split(SEP)
    if texts and texts[-1] == "":
        texts.pop()  # the file ends with the marker
    lines = Path(f"{base}.out").read_text(encoding="utf-8").split("\n")
    assert len(lines) >= len(texts)
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


# --------------------------------------------------------------------------- GGUF -> HF


@pytest.mark.parametrize("name", REAL)
def test_real_vocab_encodes_like_llama_cpp_tests(name):
    tok = tokenizers.Tokenizer.from_str(json.dumps(_rebuilt(name)["tokenizer.json"]))
    cases = _tests(name)
    assert len(cases) > 30
    bad = [
        (t, ids, got)
        for t, ids in cases
        if (got := tok.encode(t, add_special_tokens=False).ids) != ids
    ]
    assert not bad, bad[:3]


@pytest.mark.parametrize("name", ["llama-spm", "qwen2"])
def test_rebuilt_files_carry_special_tokens_and_template(name):
    files = _rebuilt(name)
    with gguf.read(_vocab_gguf(name)) as f:
        md = f.metadata
        tokens = md["tokenizer.ggml.tokens"]
        cfg = files["tokenizer_config.json"]
        assert cfg["eos_token"] == tokens[md["tokenizer.ggml.eos_token_id"]]
        assert (
            files["special_tokens_map.json"]["bos_token"]
            == tokens[md["tokenizer.ggml.bos_token_id"]]
        )
        assert cfg.get("chat_template") == md.get("tokenizer.chat_template")
        assert cfg["add_bos_token"] is (name == "llama-spm")
    ids = {a["id"]: a for a in files["tokenizer.json"]["added_tokens"]}
    tok = tokenizers.Tokenizer.from_str(json.dumps(files["tokenizer.json"]))
    for i, a in ids.items():
        assert tok.token_to_id(a["content"]) == i


# runs of spaces, tabs and newlines, digits, CJK, emoji, special tokens
TRICKY = ["  two  spaces", " one", "   ", "a\n\n b", "\t\ttab", "x  \n  y", "12345 678",
          "你好，世界", "🙂 emoji🦙", "end  "]  # fmt: skip


@pytest.mark.parametrize("name", REAL)
def test_transformers_on_rebuilt_folder_tokenizes_as_llama_cpp(name, tmp_path):
    """The folder GGUF -> HF writes, loaded by transformers' AutoTokenizer (not just the
    tokenizers library), gives llama.cpp's ids on the same GGUF -- also where a text starts
    with spaces (transformers' own LlamaTokenizer pipeline drops a leading "▁" there)."""
    import llama_cpp

    with gguf.read(_vocab_gguf(name)) as f:
        write_hf_tokenizer(f.metadata, tmp_path / "tok")
        md = f.metadata
        specials = [md["tokenizer.ggml.tokens"][md[k]] for k in
                    ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id") if k in md]  # fmt: skip
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    llm = llama_cpp.Llama(model_path=str(_vocab_gguf(name)), vocab_only=True, verbose=False)
    try:
        texts = TRICKY + [MULTILINGUAL] + [f"{sp} after{sp}x" for sp in specials]
        for t in texts:
            want = llm.tokenize(t.encode(), add_bos=False, special=True)
            assert tok(t, add_special_tokens=False)["input_ids"] == want, repr(t)
    finally:
        llm.close()


def test_write_hf_tokenizer_loads_in_transformers(tmp_path):
    with gguf.read(_vocab_gguf("qwen2")) as f:
        paths = write_hf_tokenizer(f.metadata, tmp_path / "tok")
    assert sorted(p.name for p in paths) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    t = AutoTokenizer.from_pretrained(tmp_path / "tok")
    text, ids = _tests("qwen2")[5]
    assert t(text, add_special_tokens=False)["input_ids"] == ids
    chat = t.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in chat


# --------------------------------------------------------------------------- HF -> GGUF vs llama.cpp

_BASE_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "sliding_window": 64,
    "torch_dtype": "float32",
}
_MODEL_TYPE = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma3ForCausalLM": "gemma3_text",
    "Phi3ForCausalLM": "phi3",
}


def _write_config(folder: Path, arch: str, vocab_size: int, **extra) -> dict:
    if arch == "Phi3ForCausalLM":  # its metadata rows need the LongRoPE base context
        extra = {"original_max_position_embeddings": 256, **extra}
    cfg = {
        "architectures": [arch],
        "model_type": _MODEL_TYPE[arch],
        "vocab_size": vocab_size,
        **_BASE_CONFIG,
        **extra,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    return cfg


def _folder_from_vocab(tmp: Path, name: str, arch: str) -> tuple[Path, dict]:
    d = tmp / f"{name}-{arch}"
    tokenizer_json_from_vocab_gguf(_vocab_gguf(name), d)
    with gguf.read(_vocab_gguf(name)) as f:
        n = len(f.metadata["tokenizer.ggml.tokens"])
    return d, _write_config(d, arch, n)


_SPM_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun saute par-dessus le chien paresseux.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。 素早い茶色の狐が怠け者の犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘습니다. مرحبا بالعالم",
    "Ο γρήγορος καφέ αλεπού πηδά πάνω από το τεμπέλικο σκυλί.",
    "def main(): return 42  # code!   numbers 1234567890 and emojis 🦙🚀",
]
_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def _spm_folder(d: Path, arch: str = "LlamaForCausalLM") -> tuple[Path, dict]:
    """A SentencePiece BPE trained on the fly, with added tokens and a chat template.

    For Gemma3 as Gemma's own: no dummy space prefix, pad/eos/bos/unk = 0/1/2/3.
    """
    gemma = arch == "Gemma3ForCausalLM"
    ids = (
        dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3)
        if gemma
        else dict(bos_id=1, eos_id=2, unk_id=0, pad_id=-1)
    )
    d.mkdir(parents=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_SPM_TEXT * 20),
        model_writer=model,
        vocab_size=700,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=0.9995,
        control_symbols=["<|end|>"],
        split_digits=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        add_dummy_prefix=not gemma,
        minloglevel=2,
        **ids,
    )
    (d / "tokenizer.model").write_bytes(model.getvalue())
    added = {"content": "", "normalized": False, "lstrip": False, "rstrip": False}
    cfg = {
        "tokenizer_class": "GemmaTokenizer" if gemma else "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": True,
        "added_tokens_decoder": {
            "700": {**added, "content": "<|user|>", "special": False, "single_word": False},
            "701": {**added, "content": "<|assistant|>", "special": True, "single_word": False},
        },
        "chat_template": _TEMPLATE,
    }
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    special_ids = {f"{k[:-3]}_token_id": v for k, v in ids.items() if v >= 0}
    if gemma:
        cfg["pad_token"] = "<pad>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    # the older place for added tokens, which llama.cpp's converter reads first
    (d / "added_tokens.json").write_text(json.dumps({"<|user|>": 700}))
    return d, _write_config(d, arch, 702, **special_ids)


def _reference_vocab(folder: Path, out: Path) -> Path:
    root = llama_cpp_root()
    r = pyfork.run(
        [
            sys.executable,
            str(root / "convert_hf_to_gguf.py"),
            "--vocab-only",
            "--outfile",
            str(out),
            str(folder),
        ]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return out


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


@functools.cache
def _ggml() -> ctypes.CDLL:
    so = ctypes.CDLL(str(ggml_ref._find_library()))
    so.gguf_init_from_file.restype = ctypes.c_void_p
    so.gguf_init_from_file.argtypes = [ctypes.c_char_p, _InitParams]
    so.gguf_free.argtypes = [ctypes.c_void_p]
    so.gguf_get_n_kv.restype = ctypes.c_int64
    for name, res in [
        ("gguf_get_key", ctypes.c_char_p),
        ("gguf_get_kv_type", ctypes.c_int),
        ("gguf_get_arr_type", ctypes.c_int),
        ("gguf_get_arr_n", ctypes.c_size_t),
        ("gguf_get_arr_data", ctypes.c_void_p),
        ("gguf_get_val_u32", ctypes.c_uint32),
        ("gguf_get_val_i32", ctypes.c_int32),
        ("gguf_get_val_f32", ctypes.c_float),
        ("gguf_get_val_bool", ctypes.c_bool),
        ("gguf_get_val_str", ctypes.c_char_p),
    ]:
        getattr(so, name).restype = res
        getattr(so, name).argtypes = [ctypes.c_void_p, ctypes.c_int64]
    so.gguf_get_n_kv.argtypes = [ctypes.c_void_p]
    so.gguf_get_arr_str.restype = ctypes.c_char_p
    so.gguf_get_arr_str.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t]
    return so


_SCALAR = {4: "u32", 5: "i32", 6: "f32", 7: "bool", 8: "str"}
_NUMPY = {4: np.uint32, 5: np.int32, 6: np.float32}


def _tokenizer_fields(path: Path) -> list[tuple[str, int, int | None, object]]:
    """(key, type, element type, value) of every tokenizer.* key, read by ggml's own gguf reader."""
    so = _ggml()
    ctx = so.gguf_init_from_file(str(path).encode(), _InitParams(True, None))
    assert ctx, f"ggml cannot read {path}"
    out = []
    try:
        for k in range(so.gguf_get_n_kv(ctx)):
            key = so.gguf_get_key(ctx, k).decode()
            if not key.startswith("tokenizer."):
                continue
            t = so.gguf_get_kv_type(ctx, k)
            if t == 9:  # array
                et, n = so.gguf_get_arr_type(ctx, k), so.gguf_get_arr_n(ctx, k)
                if et == 8:
                    value = [so.gguf_get_arr_str(ctx, k, i).decode() for i in range(n)]
                else:
                    ptr = so.gguf_get_arr_data(ctx, k)
                    buf = (ctypes.c_char * (n * np.dtype(_NUMPY[et]).itemsize)).from_address(ptr)
                    value = np.frombuffer(bytes(buf), _NUMPY[et]).tolist()
                out.append((key, t, et, value))
            else:
                getter = getattr(so, f"gguf_get_val_{_SCALAR[t]}")
                value = getter(ctx, k)
                out.append((key, t, None, value.decode() if t == 8 else value))
    finally:
        so.gguf_free(ctx)
    return out


CASES = [
    ("qwen2", "Qwen2ForCausalLM"),  # byte-level BPE, pre "qwen2", chat template
    ("llama-bpe", "LlamaForCausalLM"),  # Llama 3: the llama path falls through to gpt2
    ("gpt-2", "Qwen3ForCausalLM"),
    ("phi-3", "MistralForCausalLM"),  # byte-fallback BPE tokenizer.json: "llama-hf" path
    ("spm", "LlamaForCausalLM"),  # tokenizer.model
    ("spm", "Gemma3ForCausalLM"),
    ("spm", "Phi3ForCausalLM"),  # Phi-3's own added-token rules
    ("spm-codellama", "LlamaForCausalLM"),  # vocab_size 32016: padded, plus the infill pass
]


@pytest.mark.parametrize(("name", "arch"), CASES)
def test_vocab_metadata_equals_convert_hf_to_gguf(tmp_path, name, arch):
    if name.startswith("spm"):
        folder, config = _spm_folder(tmp_path / "spm", arch)
        if name == "spm-codellama":
            config = _write_config(folder, arch, 32016, bos_token_id=1, eos_token_id=2)
    else:
        folder, config = _folder_from_vocab(tmp_path, name, arch)
    ref = _reference_vocab(folder, tmp_path / "ref.gguf")
    ours = tmp_path / "ours.gguf"
    with gguf.Writer(ours, arch="x") as w:
        for key, value, vt in vocab_metadata(folder, config):
            w.add(key, value, vt)
    want, got = _tokenizer_fields(ref), _tokenizer_fields(ours)
    assert [g[:3] for g in got] == [w[:3] for w in want]  # keys, order and types
    for g, w in zip(got, want):
        assert g[3] == w[3], g[0]
    if name in ("qwen2", "llama-bpe"):
        # llama.cpp's get_vocab_base_pre recognised our rebuilt tokenizer.json
        assert dict((k, v) for k, _, _, v in want)["tokenizer.ggml.pre"] == name


# --------------------------------------------------------------------------- round trips


def _ids(x) -> list[int]:
    return list(x["input_ids"] if hasattr(x, "keys") else x)


def _round_trip(tmp_path: Path, src: Path, config: dict) -> tuple:
    md = {k: v for k, v, _ in vocab_metadata(src, config)}
    write_hf_tokenizer(md, tmp_path / "back")
    return AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "back")


def _assert_same(orig, back, texts: list[str], messages: list[dict]) -> None:
    for text in texts:
        assert _ids(back(text)) == _ids(orig(text)), text
        assert _ids(back(text, add_special_tokens=False)) == _ids(
            orig(text, add_special_tokens=False)
        )
    for gen in (False, True):
        a = orig.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen)
        b = back.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen)
        assert _ids(b) == _ids(a)
        assert len(_ids(a)) > 20


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM"])
def test_round_trip_sentencepiece(tmp_path, arch):
    src, config = _spm_folder(tmp_path / "src", arch)
    orig, back = _round_trip(tmp_path, src, config)
    texts = [
        MULTILINGUAL,
        f"<|user|>{MULTILINGUAL}<|end|><|assistant|> ok</s>",
        "<s> leading and  double  spaces ",
    ]
    messages = [
        {"role": "user", "content": MULTILINGUAL},
        {"role": "assistant", "content": "Быстрая 🦙 <|end|> done"},
    ]
    if arch in ("LlamaForCausalLM", "Phi3ForCausalLM"):
        # transformers' own LlamaTokenizer (legacy Metaspace) differs from sentencepiece and
        # llama.cpp on text right after a special token; the rebuilt folder follows llama.cpp
        import llama_cpp

        assert _ids(back(texts[0])) == _ids(orig(texts[0]))  # no special token in it
        ref = _reference_vocab(src, tmp_path / "vocab.gguf")
        llm = llama_cpp.Llama(model_path=str(ref), vocab_only=True, verbose=False)
        try:
            rendered = [back.apply_chat_template(messages, tokenize=False, add_generation_prompt=g)
                        for g in (False, True)]  # fmt: skip
            for t in texts + rendered:
                want = llm.tokenize(t.encode(), add_bos=False, special=True)
                assert _ids(back(t, add_special_tokens=False)) == want, t
        finally:
            llm.close()
    else:
        _assert_same(orig, back, texts, messages)
    assert back.bos_token == "<s>" and back.eos_token == "</s>"
    assert back.decode(_ids(back(MULTILINGUAL)), skip_special_tokens=True) == MULTILINGUAL


def test_round_trip_bpe_qwen2(tmp_path):
    src, config = _folder_from_vocab(tmp_path, "qwen2", "Qwen2ForCausalLM")
    orig, back = _round_trip(tmp_path, src, config)
    texts = [MULTILINGUAL, f"<|im_start|>user\n{MULTILINGUAL}<|im_end|>\n<|endoftext|>"]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": MULTILINGUAL},
        {"role": "assistant", "content": "好的 🦙"},
    ]
    _assert_same(orig, back, texts, messages)


# --------------------------------------------------------------------------- named errors


def test_missing_tokenizer_files(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 10}
    with pytest.raises(E.TokenizerFilesMissing, match=r"tokenizer.model or tokenizer.json"):
        vocab_metadata(tmp_path, config)


def test_vocab_larger_than_config_spm(tmp_path):
    src, config = _spm_folder(tmp_path / "src")
    config["vocab_size"] = 500
    with pytest.raises(E.VocabSizeMismatch, match=r"tokenizer.model") as exc:
        vocab_metadata(src, config)
    assert exc.value.found == 500


def test_vocab_larger_than_config_bpe(tmp_path):
    src, config = _folder_from_vocab(tmp_path, "gpt-2", "Qwen2ForCausalLM")
    config["vocab_size"] = 50000
    with pytest.raises(E.VocabSizeMismatch, match=r"tokenizer.json"):
        vocab_metadata(src, config)


def test_unknown_bpe_pre_tokenizer(tmp_path):
    src, config = _folder_from_vocab(tmp_path, "gpt-2", "Qwen2ForCausalLM")
    tj = json.loads((src / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Whitespace"}
    (src / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(E.UnknownBPEPreTokenizer, match="qwen2") as exc:
        vocab_metadata(src, config)
    assert exc.value.field == "pre_tokenizer"


def test_bad_tokenizer_json(tmp_path):
    src, config = _folder_from_vocab(tmp_path, "gpt-2", "Qwen2ForCausalLM")
    (src / "tokenizer.json").write_text("{not json")
    with pytest.raises(E.TokenizerInconsistent, match=r"tokenizer.json"):
        vocab_metadata(src, config)


def test_config_files_that_are_not_objects(tmp_path):
    src, config = _spm_folder(tmp_path / "src")
    (src / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(E.TokenizerInconsistent, match="not a JSON object"):
        vocab_metadata(src, config)
    (src / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": [1]}))
    with pytest.raises(E.TokenizerInconsistent, match="added_tokens_decoder"):
        vocab_metadata(src, config)
    (src / "tokenizer_config.json").write_text("{}")
    (src / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    with pytest.raises(E.TokenizerInconsistent, match="SentencePiece"):
        vocab_metadata(src, config)


def test_gguf_side_errors():
    with gguf.read(_vocab_gguf("gpt-2")) as f:
        md = dict(f.metadata)
    with pytest.raises(E.UnknownBPEPreTokenizer, match="llama-bpe"):
        hf_tokenizer_files({**md, "tokenizer.ggml.pre": "no-such-pre"})
    with pytest.raises(E.TokenizerInconsistent, match="token_type"):
        hf_tokenizer_files({**md, "tokenizer.ggml.token_type": [1, 1]})
    with pytest.raises(E.TokenizerInconsistent, match="arr"):
        hf_tokenizer_files({**md, "tokenizer.ggml.tokens": "abc"})
    with pytest.raises(E.TokenizerFilesMissing, match=r"tokenizer.ggml.model"):
        hf_tokenizer_files({k: v for k, v in md.items() if k != "tokenizer.ggml.model"})
    with pytest.raises(E.TokenizerInconsistent, match=r"tokenizer.ggml.model"):
        hf_tokenizer_files({**md, "tokenizer.ggml.model": "rwkv"})


def test_atomic_output_leaves_no_partial_folder(tmp_path):
    with gguf.read(_vocab_gguf("gpt-2")) as f:
        md = dict(f.metadata)
    bad = {**md, "tokenizer.ggml.merges": ["a b c"]}
    with pytest.raises(E.TokenizerInconsistent, match="merges"):
        write_hf_tokenizer(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    shutil.rmtree(tmp_path / "out", ignore_errors=True)


def test_merge_pairs_joined_or_named(tmp_path):
    """transformers >= 4.45's pair-format merges become gguf-py's strings (a space inside
    a part as U+0120); a pair that is not two strings is a named error, not a crash."""
    from weightsmith.convert.tokenizer._to_gguf import _merges_from_tokenizer_json

    path = tmp_path / "tokenizer.json"
    got = _merges_from_tokenizer_json({"model": {"merges": [["a", "b c"], [" ", "d"]]}}, path)
    assert got == ["a b\u0120c", "\u0120 d"]
    for bad in (["x"], ["x", "y", "z"], ["x", 1]):
        with pytest.raises(E.TokenizerInconsistent, match="merge pair") as exc:
            _merges_from_tokenizer_json({"model": {"merges": [["a", "b"], bad]}}, path)
        assert repr(bad) in str(exc.value)
