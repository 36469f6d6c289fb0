"""DeepSeek-V4 text (GGUF ``deepseek4``) against the pinned converter and llama.cpp.

The tiny model is DeepSeek's own layout (tests/support/dsv4_models.py): MXFP4 routed
experts, one FP8 + E8M0 weight, bfloat16 / float32 tensors as published, a hash layer,
CSA (ratio 4) and HCA (ratio 128) compressed-attention layers, four hyper-connection
streams, an MTP block the text file leaves out.  Checked:

* byte-identical to ``convert_hf_to_gguf.py`` at f32 / f16 / bf16 / q8_0 (the reference
  types DeepSeek-V4 by source dtype: the four files are one), and to its f32 file
  followed by ``llama_model_quantize`` (``allow_requantize``) at q4_k_m / iq4_xs;
* llama.cpp runs our file: the same logits as on the reference's file; on a float32
  variant (same layout, dense weights float32) the logits equal transformers' 5.24
  ``DeepseekV4ForCausalLM`` holding the same values;
* the reference's bundled chat template: the one deliberate difference (not ours to ship);
* GGUF -> HF is refused by name (transformers reads DeepSeek-V4 only in DeepSeek's
  layout, which GGUF -> HF does not write).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support.dsv4_models import deepseek4
from test_convert_archs import _llama_logits_f32_kv, _same_file
from test_convert_hf_to_gguf import (
    _kvs,
    _llama_logits,
    _llama_quantize,
    _run_reference,
    _tensors,
)
from weightsmith import errors as E
from weightsmith.convert import gguf_to_hf, hf_to_gguf

REF_TYPES = ["f32", "f16", "bf16", "q8_0"]
QUANT_TYPES = ["q4_k_m", "iq4_xs"]
TOKENS = [9707, 11, 1879, 0, 358, 1079, 264, 2272]


class _Work:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.src, self.model = deepseek4(root / "published")
        self.f32src, self.f32model = deepseek4(root / "float32", dense="float32", fp8=False)
        # the same folder without a chat template of its own
        self.plain = root / "plain"
        shutil.copytree(self.src, self.plain)
        tc = json.loads((self.plain / "tokenizer_config.json").read_text())
        del tc["chat_template"]
        (self.plain / "tokenizer_config.json").write_text(json.dumps(tc))
        jobs = [(str(self.src), str(self.ref(t)), t) for t in REF_TYPES]
        jobs += [(str(self.f32src), str(root / "ref-float32.gguf"), "f32")]
        jobs += [(str(self.plain), str(root / "ref-plain.gguf"), "f32")]
        _run_reference(jobs)
        for t in QUANT_TYPES:
            _llama_quantize(self.ref("f32"), self.ref(t), t, allow_requantize=True)

    def ref(self, t: str) -> Path:
        return self.root / f"ref-{t}.gguf"

    def ours(self, t: str, src: Path | None = None, tag: str = "") -> Path:
        out = self.root / f"ours{tag}-{t}.gguf"
        if not out.exists():
            hf_to_gguf(src or self.src, out, t)
        return out


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> _Work:
    return _Work(tmp_path_factory.mktemp("dsv4"))


@pytest.mark.parametrize("t", REF_TYPES + QUANT_TYPES)
def test_same_as_reference(work, t):
    _same_file(work.ours(t), work.ref(t))


def test_layout_is_what_it_claims(work):
    """Guard against a vacuous pass: MXFP4 experts, the FP8 weight as Q8_0, BF16 matrices,
    the I32 routing table, the tokenizer's chat template; no MTP, no hash-layer bias, the
    image-token bias but no vision tensor."""
    import gguf

    tensors = _tensors(work.ours("f32"))
    types = {n: gguf.GGMLQuantizationType(t).name for n, t, _, _ in tensors}
    assert types["blk.1.ffn_gate_exps.weight"] == "MXFP4"
    assert types["blk.0.attn_q_b.weight"] == "Q8_0"
    assert types["blk.1.attn_q_b.weight"] == "BF16"
    assert types["blk.0.ffn_gate_tid2eid.weight"] == "I32"
    assert "blk.0.exp_probs_b.bias" not in types and "blk.1.exp_probs_b.bias" in types
    assert "blk.0.exp_probs_b_vl.bias" in types and not any(n.startswith("v.") for n in types)
    assert not any("nextn" in n for n in types)
    assert [x[0] for x in tensors][:4] == [
        "blk.0.ffn_gate_tid2eid.weight",
        "blk.0.ffn_gate_exps.weight",
        "blk.0.ffn_down_exps.weight",
        "blk.0.ffn_up_exps.weight",
    ]
    kv = _kvs(work.ours("f32"))
    assert kv["general.file_type"][2] == (38).to_bytes(4, "little")  # MXFP4_MOE, any outtype
    assert list(kv)[:2] == ["general.architecture", "tokenizer.chat_template"]


def test_bundled_chat_template_is_the_only_difference(work):
    """Without a chat template in the folder the reference writes llama.cpp's bundled
    DeepSeek-V4 template; we write none (it is not the model's)."""
    ours, ref = _kvs(work.ours("f32", work.plain, "-plain")), _kvs(work.root / "ref-plain.gguf")
    assert "tokenizer.chat_template" not in ours
    assert list(ref)[1] == "tokenizer.chat_template"
    del ref["tokenizer.chat_template"]
    assert list(ours) == list(ref)
    assert all(ours[k] == ref[k] for k in ref)


def test_llama_cpp_logits(work):
    """Ours runs as the reference's; on the float32 variant as transformers."""
    ours, ref = _llama_logits(work.ours("f32"), TOKENS), _llama_logits(work.ref("f32"), TOKENS)
    np.testing.assert_array_equal(ours, ref)
    f32 = work.ours("f32", work.f32src, "-float32")
    _same_file(f32, work.root / "ref-float32.gguf")
    got = _llama_logits_f32_kv(f32, TOKENS)
    hf = _hf_logits(work.f32model)
    scale = float(np.abs(hf).max())
    assert np.abs(got - hf).max() <= 2e-3 * max(scale, 1.0)


def test_published_dtypes_gap_is_the_runtime(work):
    """With the published dtypes llama.cpp multiplies BF16 weights by activations rounded
    to BF16 and the Q8_0 weight by Q8_0 activations: a gap to transformers (which computes
    in float32 from the same values) that its own file shows too, pinned below a bound."""
    got = _llama_logits_f32_kv(work.ours("f32"), TOKENS)
    ref = _llama_logits_f32_kv(work.ref("f32"), TOKENS)
    hf = _hf_logits(work.model)
    scale = float(np.abs(hf).max())
    gap = np.abs(got - hf).max()
    assert np.abs(ref - hf).max() == gap
    assert 2e-3 * scale < gap <= 2e-2 * scale


def _hf_logits(model) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].float().numpy()


def test_gguf_to_hf_is_refused(work, tmp_path):
    with pytest.raises(E.UnknownArchitecture, match="deepseek4"):
        gguf_to_hf(work.ours("f32"), tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_transformers_has_no_flash_vision_tower():
    """DeepSeek-V4 Flash vision (the reference's ``DeepseekV4FlashVisionModel``, switched on
    by ``vision_n_layers > 0``) cannot be built tiny here: transformers 5.24 keeps the
    ``vision_*`` fields of such a config but its ``DeepseekV4ForCausalLM`` has no vision
    tower, aligner or image sentinels, and no other class of the model type builds them."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    cfg = DeepseekV4Config(
        vocab_size=64, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, head_dim=64, q_lora_rank=32, n_routed_experts=4,
        num_experts_per_tok=2, o_groups=2, o_lora_rank=16, index_n_heads=2,
        index_head_dim=64, index_topk=4, hc_mult=4, vision_n_layers=2, vision_dim=32,
        vision_n_heads=2, vision_inter_dim=64, vision_patch_size=14,
        vision_downsample_ratio=3, vision_min_pixels=3136,
    )  # fmt: skip
    assert cfg.vision_n_layers == 2
    names = [n for n, _ in DeepseekV4ForCausalLM(cfg).named_parameters()]
    assert names and not any(("vision" in n or "aligner" in n or "image" in n) for n in names)


@pytest.mark.parametrize("field", ["compress_ratios", "num_hash_layers", "qk_rope_head_dim"])
def test_missing_hub_field_is_refused(work, tmp_path, field):
    """The Hub config's fields transformers 5 folds away have no default: a config without
    one is refused by name before any output (the reference dies of a KeyError)."""
    src = tmp_path / "src"
    src.mkdir()
    for f in work.src.iterdir():
        (src / f.name).symlink_to(f)
    cfg = json.loads((work.src / "config.json").read_text())
    del cfg[field]
    (src / "config.json").unlink()
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.InvalidModelConfig, match=field):
        hf_to_gguf(src, tmp_path / "out.gguf", "f32")
    assert not (tmp_path / "out.gguf").exists()
