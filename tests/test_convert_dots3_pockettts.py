"""Dots3 Note and PocketTTS as transformers 5.24 saves them: what the pinned reference and
ours do with them (measured; neither is converted here, docs/convert-architectures.md
says why).

* Dots3 Note (``Dots3NoteForConditionalGeneration``): transformers writes the Hub's
  tensor names (``model.*``, ``vision_encoder.*``, ``audio_encoder.*``, experts one by
  one) but its own normalised ``config.json`` (the text under ``text_config``,
  ``per_layer_config`` for the sliding layers, no ``swa_*`` fields); the reference's
  class reads the Hub's flat config and stops on a KeyError before writing; ours (which
  converts the Hub's layout: tests/test_convert_dots3.py) names the first missing Hub
  field, before any output.
* PocketTTS: transformers' ``PocketTTSForConditionalGeneration`` (flow LM and flow
  head under ``model.*`` / ``flow_head.*``, no Mimi codec) is not the reference's
  ``PocketTTSModel`` (Kyutai's checkpoint: ``flow_lm.*`` and ``mimi.*``, no
  ``config.json``); the reference refuses the class.

Ours refuses PocketTTS with ``UnknownArchitecture`` before any output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from support import pyfork
from support.llama_sdist import llama_cpp_root
from support.muse_dots_pocket_models import dots3_note, pocket_tts
from weightsmith import errors as E
from weightsmith.convert import hf_to_gguf


def _reference(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    script = str(llama_cpp_root() / "convert_hf_to_gguf.py")
    return pyfork.run([sys.executable, script, str(src), "--outfile", str(out),
                           "--outtype", "f16", *extra])  # fmt: skip


def test_dots3_note_transformers_layout(tmp_path):
    src = dots3_note(tmp_path / "model")
    cfg = json.loads((src / "config.json").read_text())
    assert "num_hidden_layers" not in cfg and "per_layer_config" in cfg["text_config"]
    assert not any(k.startswith("swa_") for k in cfg["text_config"])
    with safe_open(src / "model.safetensors", "np") as f:
        names = set(f.keys())
    assert "vision_encoder.blocks.1.mlp.experts.3.fc1.weight" in names
    assert "model.layers.0.self_attn.indexer.wq_b.weight" in names
    r = _reference(src, tmp_path / "ref.gguf")
    assert r.returncode != 0 and "KeyError: 'num_hidden_layers'" in r.stderr
    assert not (tmp_path / "ref.gguf").exists()
    with pytest.raises(E.InvalidModelConfig, match="swa_num_attention_heads"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert not (tmp_path / "t.gguf").exists() and not (tmp_path / "m.gguf").exists()


def test_pockettts_transformers_layout(tmp_path):
    src = pocket_tts(tmp_path / "model")
    r = _reference(src, tmp_path / "ref.gguf", "--mmproj")
    assert r.returncode != 0
    assert "Model PocketTTSForConditionalGeneration is not supported" in r.stderr
    assert not list(tmp_path.glob("*.gguf"))
    with pytest.raises(E.UnknownArchitecture, match="PocketTTSForConditionalGeneration"):
        hf_to_gguf(src, tmp_path / "t.gguf", "f16")
    assert not (tmp_path / "t.gguf").exists()
