"""GGUF -> HF writes tokenizer.json without the ``tokenizers`` library (issue 17, 3.1).

The oracle is the library itself: the same builder run on the real ``tokenizers``
API must give the same three files, and the library must read our tokenizer.json
back to exactly the same JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import tokenizers

from support.llama_sdist import llama_cpp_root
from weightsmith import gguf
from weightsmith.convert.tokenizer import _from_gguf, hf_tokenizer_files

VOCABS = [
    "llama-spm", "llama-bpe", "qwen2", "phi-3", "gpt-2", "starcoder", "refact", "mpt",
    "gpt-neox", "falcon", "baichuan", "aquila", "bert-bge",
]  # fmt: skip


def _metadata(name: str) -> dict:
    path = llama_cpp_root() / "models" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.fail(f"{path} is missing from the llama.cpp sources")
    with gguf.read(path) as f:
        return {k: f.metadata[k] for k in f.metadata}


@pytest.mark.parametrize("name", VOCABS)
def test_same_files_as_the_tokenizers_library(name, monkeypatch):
    md = _metadata(name)
    try:
        ours = hf_tokenizer_files(md, where=name)
    except Exception as exc:  # a vocabulary neither side supports must fail on both
        monkeypatch.setattr(_from_gguf, "TOKENIZERS_API", tokenizers)
        with pytest.raises(type(exc)):
            hf_tokenizer_files(md, where=name)
        return
    monkeypatch.setattr(_from_gguf, "TOKENIZERS_API", tokenizers)
    theirs = hf_tokenizer_files(md, where=name)
    assert ours == theirs
    # and the library reads ours back to the very same JSON
    text = json.dumps(ours["tokenizer.json"], ensure_ascii=False)
    assert json.loads(tokenizers.Tokenizer.from_str(text).to_str()) == ours["tokenizer.json"]


def test_gguf_to_hf_tokenizer_needs_no_extra(tmp_path):
    # block tokenizers and sentencepiece: the files must still be written
    path = llama_cpp_root() / "models" / "ggml-vocab-llama-bpe.gguf"
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('tokenizers', 'sentencepiece', 'transformers'):\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from weightsmith.convert.tokenizer import tokenizer_json_from_vocab_gguf\n"
        "tokenizer_json_from_vocab_gguf(sys.argv[1], sys.argv[2])\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    tok = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size() > 100_000 and tok.encode(
        "Hello world", add_special_tokens=False
    ).ids == [9906, 1917]
