"""HunYuan's vocabulary (route ``hunyuan``), as llama.cpp's ``HunYuanModel.set_vocab``.

A ``tokenizer.json`` is read as GPT-2's byte-level BPE (``gpt2`` route: tokens, types,
the chktxt pre-tokenizer, merges and special tokens), then two upstream config fixes are
written over it, in place, as the reference does::

    tokenizer.ggml.eos_token_id   u32   config ``eod_token_id`` (the text config's in a VLM)
    tokenizer.ggml.eot_token_id   u32   the first of generation_config.json's
                                        ``eos_token_id`` list (two or more)

The tiktoken folders of the first HunYuan releases (no ``tokenizer.json``, remote code) are
not read: the reference needs ``trust_remote_code`` for them.
"""

from __future__ import annotations

from pathlib import Path

from ._to_gguf import MORE_ROUTES, VT, _Entries, _json_if, _missing, _set_gpt2


def set_hunyuan(out: _Entries, d: Path, config: dict) -> None:
    if not (d / "tokenizer.json").is_file():
        raise _missing(d, "tokenizer.json (HunYuan's tiktoken files need remote code)")
    _set_gpt2(out, d, config)
    merged = {**config, **(config.get("text_config") or {})}
    eod = merged.get("eod_token_id")
    if eod is not None:
        out.add("ggml.eos_token_id", eod, VT.UINT32)
    eos = (_json_if(d / "generation_config.json") or {}).get("eos_token_id")
    if isinstance(eos, list) and len(eos) >= 2:
        out.add("ggml.eot_token_id", eos[0], VT.UINT32)


MORE_ROUTES["hunyuan"] = set_hunyuan
