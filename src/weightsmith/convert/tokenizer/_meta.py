"""Meta's original ``tokenizer.model`` -> ``tokenizer.ggml.*``-shaped metadata.

Two file kinds sit under that one name in Meta's downloads:

* **SentencePiece** (Llama 1/2): a ``ModelProto``; read with sentencepiece, exactly
  as the HF -> GGUF converter reads a folder's ``tokenizer.model``.
* **tiktoken** (Llama 3.x): one line per token, ``<base64 bytes> <rank>``, ranks
  0..n-1 in order.  The BPE merges are implied by the ranks: a token of rank r is
  the merge of every split ``(left, right)`` whose halves are both tokens, ranked by
  r and then by the halves' ranks (what tiktoken's byte-pair loop does).  The 256
  special tokens follow at ids n..n+255, named as Meta's ``tokenizer.py`` names them.

The result is the mapping :func:`weightsmith.convert.tokenizer.hf_tokenizer_files`
takes (the same shape as a GGUF's ``tokenizer.ggml.*`` metadata), so the Meta route
and the GGUF -> HF route build ``tokenizer.json`` with one piece of code.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from ... import errors as E
from ._from_gguf import CONTROL, NORMAL
from ._to_gguf import _spm_vocab

__all__ = ["LLAMA3_CHAT_TEMPLATE", "meta_tokenizer_metadata", "read_tiktoken", "tiktoken_merges"]

# The Llama 3 instruct chat format (Meta's model card): header-delimited turns, each
# closed by <|eot_id|>; used for every 3.x generation (3.1+ adds tool calling on top).
LLAMA3_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
# The Llama 2 chat format: [INST] ... [/INST] turns, an optional <<SYS>> block.
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = '<<SYS>>\n' + messages[0]['content'] | trim + '\n<</SYS>>\n\n' %}"
    "{% set messages = messages[1:] %}{% else %}{% set system = '' %}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (system if loop.index0 == 0 else '') "
    "+ message['content'] | trim + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)


def _specials(generation: str) -> list[str]:
    """The 256 special tokens of a Llama 3.x tokenizer, in id order."""
    if generation == "3":
        named = [
            "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
            "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
            "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|reserved_special_token_4|>", "<|eot_id|>",
        ]  # fmt: skip
        first_reserved = 5
    else:
        named = [
            "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
            "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
            "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
        ]  # fmt: skip
        first_reserved = 3
    rest = 256 - len(named)
    return named + [
        f"<|reserved_special_token_{i}|>" for i in range(first_reserved, first_reserved + rest)
    ]


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (byte-level BPE's alphabet)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def read_tiktoken(path: Path) -> list[bytes]:
    """The tokens of a tiktoken ranks file, by rank; every line checked."""
    tokens: list[bytes] = []
    seen: set[bytes] = set()
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            where = offset
            offset += len(line)
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise E.TokenizerInconsistent(
                    "not a tiktoken ranks line", path=path, offset=where,
                    expected="'<base64> <rank>'", found=repr(line[:40]),
                )  # fmt: skip
            try:
                token = base64.b64decode(parts[0], validate=True)
            except (binascii.Error, ValueError):
                raise E.TokenizerInconsistent(
                    "token is not base64", path=path, offset=where, expected="base64",
                    found=repr(parts[0][:40]),
                ) from None  # fmt: skip
            rank = int(parts[1])
            if rank != len(tokens) or token in seen:
                raise E.TokenizerInconsistent(
                    "tiktoken ranks must run 0, 1, 2, ... over distinct tokens", path=path,
                    offset=where, expected=f"rank {len(tokens)} of a new token",
                    found=f"rank {rank}" + (" of a repeated token" if token in seen else ""),
                )  # fmt: skip
            seen.add(token)
            tokens.append(token)
    return tokens


def tiktoken_merges(tokens: list[str]) -> list[str]:
    """BPE merges (``"left right"``) that reproduce tiktoken's rank-ordered merging."""
    rank = {t: i for i, t in enumerate(tokens)}
    merges: list[str] = []
    for token in tokens:
        splits = []
        for k in range(1, len(token)):
            left, right = token[:k], token[k:]
            lr, rr = rank.get(left), rank.get(right)
            if lr is not None and rr is not None:
                splits.append((lr, rr, left, right))
        splits.sort()
        merges.extend(f"{s[2]} {s[3]}" for s in splits)
    return merges


def meta_tokenizer_metadata(
    folder: Path,
    kind: str,
    generation: str,
    vocab_size: int,
    context_length: int,
    instruct: bool = False,
) -> dict[str, Any]:
    """The ``tokenizer.ggml.*`` mapping of Meta's ``tokenizer.model`` in ``folder``."""
    path = folder / "tokenizer.model"
    md: dict[str, Any] = {
        "general.architecture": "llama",
        "llama.context_length": context_length,
    }
    if kind == "spm":
        tokens, scores, types = _spm_vocab(folder, {"vocab_size": vocab_size})
        md.update({
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_eos_token": False,
        })  # fmt: skip
        if instruct:
            md["tokenizer.chat_template"] = LLAMA2_CHAT_TEMPLATE
        return md
    chars = _byte_chars()
    tokens = ["".join(chars[b] for b in t) for t in read_tiktoken(path)]
    specials = _specials(generation)
    if len(tokens) + len(specials) != vocab_size:
        raise E.ParamsShapeMismatch(
            "tokenizer size contradicts the embeddings", path=path,
            expected=f"{vocab_size - len(specials)} ranks + {len(specials)} special tokens "
            f"= {vocab_size} (tok_embeddings rows)",
            found=f"{len(tokens)} ranks",
        )  # fmt: skip
    n = len(tokens)
    eos = specials.index("<|eot_id|>" if instruct else "<|end_of_text|>")
    md.update({
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": tokens + specials,
        "tokenizer.ggml.token_type": [NORMAL] * n + [CONTROL] * len(specials),
        "tokenizer.ggml.merges": tiktoken_merges(tokens),
        "tokenizer.ggml.bos_token_id": n,
        "tokenizer.ggml.eos_token_id": n + eos,
        "tokenizer.ggml.add_bos_token": True,
    })  # fmt: skip
    if instruct:
        md["tokenizer.chat_template"] = LLAMA3_CHAT_TEMPLATE
    return md
