"""The registry's ``config_from_shapes`` hook and the one header read of a conversion.

A checkpoint that ships no ``config.json`` (PocketTTS, Kyutai's layout) gets its config
from the registry entry that claims its tensor shapes (:func:`by_shapes`), and a
``--mmproj`` conversion parses the checkpoint's safetensors header once for the config
guess, the text file and the projector (the byte identity of both files with the
reference's is tests/test_convert_pockettts.py's).
"""

from __future__ import annotations

import pytest

from support.pockettts_models import pockettts_kyutai
from weightsmith.convert import _hf_to_gguf as H
from weightsmith.convert import hf_to_gguf
from weightsmith.convert.arch import ENTRIES, by_shapes
from weightsmith.convert.arch.pockettts import POCKETTTS


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return pockettts_kyutai(tmp_path_factory.mktemp("hook") / "pocket-tiny")


def test_registry_claims_by_shapes(folder):
    """The entry that declares the hook claims its checkpoint's shapes, and no entry
    claims an ordinary checkpoint's (the one entry with the hook today is PocketTTS)."""
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", framework="np") as f:
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}  # noqa: SIM118
    assert by_shapes(shapes) is POCKETTTS
    assert [a for a in ENTRIES if a.config_from_shapes is not None] == [POCKETTTS]
    assert by_shapes({"model.embed_tokens.weight": (8, 4)}) is None


def test_header_parsed_once(folder, tmp_path, monkeypatch):
    """Text + projector of a checkpoint without config.json: one ``safe_open`` of its
    one file (the config guess, the text file and the projector share it)."""
    opened = []

    def counting(path, *a, **kw):
        opened.append(path)
        return safe_open(path, *a, **kw)

    safe_open = H.safe_open
    monkeypatch.setattr(H, "safe_open", counting)
    hf_to_gguf(folder, tmp_path / "t.gguf", "f16", mmproj=tmp_path / "m.gguf")
    assert opened == [folder / "model.safetensors"]
    assert (tmp_path / "t.gguf").is_file() and (tmp_path / "m.gguf").is_file()
