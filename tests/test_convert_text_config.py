"""The nested text-config registry (``convert/arch/_text_config.py``): where a multimodal
config.json keeps its text model's config and how the reader merges it up.  The byte
tests of each family (InternVL, DeepSeek-OCR, GLM-ASR, LFM2-Audio, Qwen3-TTS, the Qwen
omni models) cover the rows end to end; these pin the contract of the table itself."""

from __future__ import annotations

import pytest

from weightsmith.convert.arch import _text_config as T
from weightsmith.convert.arch import text_merged


def _sub(arch: str | None, **kw) -> dict:
    return {"architectures": [arch] if arch else None, "hidden_size": 8, "bos_token_id": 5, **kw}


def test_llm_config_merged_without_token_ids():
    """InternVL: merged up as it is, the special-token ids the top level's, no text_config."""
    cfg = {"architectures": ["InternVLChatModel"], "bos_token_id": 1,
           "llm_config": _sub("Qwen2ForCausalLM", eos_token_id=7)}  # fmt: skip
    out = text_merged(cfg)
    assert out["architectures"] == ["Qwen2ForCausalLM"] and out["hidden_size"] == 8
    assert out["bos_token_id"] == 1 and "eos_token_id" not in out and "text_config" not in out


@pytest.mark.parametrize(
    ("key", "top", "keep_top"),
    [
        ("language_config", "DeepseekOCRForCausalLM", True),
        ("lm_config", "GlmasrModel", True),
        ("lfm", "Lfm2AudioForConditionalGeneration", False),
    ],
)
def test_renamed_and_merged_up(key, top, keep_top):
    """Read as text_config and merged up; the rows whose text class tells the family by
    the top-level class keep it as ``_top_architectures``."""
    cfg = {"architectures": [top], key: _sub("LlamaForCausalLM", hidden_size=16)}
    out = text_merged(cfg)
    assert out["text_config"] == cfg[key] and out["hidden_size"] == 16
    assert out["architectures"] == ["LlamaForCausalLM"]
    assert out.get(T.TOP_ARCHITECTURES) == ([top] if keep_top else None)


def test_thinker_text_config():
    """Qwen2.5-Omni / Qwen3-Omni: the thinker's text_config, merged up; a null class in it
    leaves the top level's."""
    cfg = {"architectures": ["Qwen2_5OmniModel"], "thinker_config": {"text_config": _sub(None)}}
    out = text_merged(cfg)
    assert out["text_config"]["hidden_size"] == 8 == out["hidden_size"]
    assert out["architectures"] == ["Qwen2_5OmniModel"]


def test_talker_only_for_its_class():
    """Qwen3-TTS's hook (the talker's text vocabulary) applies to its class only."""
    talker = {"hidden_size": 4, "vocab_size": 3072, "text_vocab_size": 100}
    out = text_merged({"architectures": ["Qwen3TTSForConditionalGeneration"],
                       "talker_config": talker})  # fmt: skip
    assert out["vocab_size"] == 100 and out["hidden_size"] == 4
    other = {"architectures": ["SomethingElse"], "talker_config": talker, "hidden_size": 2}
    assert text_merged(other) == other


def test_plain_text_config_and_top_level_classes():
    """No nested layout: text_config merged up; Sarashina2-VL's top-level class wins over
    the one its text_config names; a config without any is returned as it is."""
    plain = {"architectures": ["LlavaForConditionalGeneration"], "text_config": _sub("X")}
    assert text_merged(plain)["architectures"] == ["X"]
    sara = {"architectures": ["Sarashina2VisionForCausalLM"], "text_config": _sub("X")}
    assert text_merged(sara)["architectures"] == ["Sarashina2VisionForCausalLM"]
    flat = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8}
    assert text_merged(flat) == flat


def test_a_new_layout_is_one_row(monkeypatch):
    """The reader names no family: a row added to the table is applied by it."""
    cfg = {"architectures": ["NewModel"], "brain_config": _sub("LlamaForCausalLM")}
    assert "hidden_size" not in text_merged(cfg)
    row = T.NestedText(("brain_config",), T.rename, archs=("NewModel",))
    monkeypatch.setattr(T, "NESTED_TEXT", (*T.NESTED_TEXT, row))
    out = text_merged(cfg)
    assert out["hidden_size"] == 8 and out["architectures"] == ["LlamaForCausalLM"]


#: one config per layout (the real class, the text config under its real key, a top-level
#: width that differs from the text one) and the text config it holds
_LAYOUTS = {
    "llm_config": ("InternVLChatModel", ("llm_config",)),
    "talker_config": ("Qwen3TTSForConditionalGeneration", ("talker_config",)),
    "thinker_config": ("Qwen2_5OmniModel", ("thinker_config", "text_config")),
    "lfm": ("Lfm2AudioForConditionalGeneration", ("lfm",)),
    "lm_config": ("GlmasrModel", ("lm_config",)),
    "language_config": ("DeepseekOCRForCausalLM", ("language_config",)),
    "text_config": ("LlavaForConditionalGeneration", ("text_config",)),
}


def _layout(top: str, path: tuple[str, ...]) -> tuple[dict, dict]:
    text = _sub("LlamaForCausalLM", hidden_size=48, text_vocab_size=10)
    cfg: dict = {"architectures": [top], "hidden_size": 2, "vision_config": {"hidden_size": 4}}
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = text
    if top == "Qwen2_5OmniModel":  # the towers and a talker beside the thinker's text
        cfg["thinker_config"]["vision_config"] = cfg.pop("vision_config")
        cfg["talker_config"] = {"hidden_size": 3, "vocab_size": 9, "text_vocab_size": 9}
    return cfg, text


@pytest.mark.parametrize("layout", _LAYOUTS)
def test_one_lookup_for_text_and_projector(layout):
    """Each layout's text config is found by ``text_config_of``, and the text reader and
    the projector's vision view both read it: the merged width, the projector's text
    width (clip.*.projection_dim) and the text_config its rows read are the same config."""
    from weightsmith.convert.arch.mmproj import GLOBAL, TEXT_WIDTH, vision_view

    cfg, text = _layout(*_LAYOUTS[layout])
    assert T.text_config_of(cfg) is text
    assert text_merged(cfg)["hidden_size"] == 48
    view = vision_view(cfg, {})
    assert view[TEXT_WIDTH] == 48 and view[GLOBAL]["text_config"] == text
    assert view["hidden_size"] == 4  # the tower's own width stays the vision config's


def test_no_text_config():
    """A config with no nested layout and no text_config: no text config, the projector's
    text width the top level's."""
    from weightsmith.convert.arch.mmproj import GLOBAL, TEXT_WIDTH, vision_view

    cfg = {"architectures": ["SomethingElse"], "n_embd": 6, "talker_config": {"hidden_size": 3}}
    assert T.text_config_of(cfg) is None
    view = vision_view(cfg, {})
    assert view[TEXT_WIDTH] == 6 and "text_config" not in view[GLOBAL]


def test_a_new_layout_reaches_the_projector(monkeypatch):
    """A row added to the table is the projector's text config too (no second lookup)."""
    from weightsmith.convert.arch.mmproj import TEXT_WIDTH, vision_view

    cfg = {"architectures": ["NewModel"], "hidden_size": 2, "brain_config": _sub(None)}
    assert vision_view(cfg, {})[TEXT_WIDTH] == 2
    row = T.NestedText(("brain_config",), T.rename, archs=("NewModel",))
    monkeypatch.setattr(T, "NESTED_TEXT", (*T.NESTED_TEXT, row))
    assert vision_view(cfg, {})[TEXT_WIDTH] == 8
