"""HF -> GGUF streams: peak memory tracks the largest tensor, not the model.

The model (tests/support/hf_models.big_llama) holds 18 FFN matrices of 16 MiB each in
float32 (144 MiB of bf16 on disk); the child process's peak RSS (VmHWM, reset after
imports) must stay within 3x one such matrix in float32 -- the issue's bound without
its 256 MiB allowance, which here would hide a converter that loads everything.
"""

from __future__ import annotations

import gguf
import pytest

from support.hf_models import big_llama, peak_rss

MiB = 2**20


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return big_llama(tmp_path_factory.mktemp("big") / "m")


@pytest.mark.parametrize("type", ["f16", "q8_0"])
def test_peak_memory_is_a_few_tensors(big, tmp_path, type):
    folder, largest = big
    out = tmp_path / "o.gguf"
    r = peak_rss(folder, out, type)
    grown = r["peak"] - r["base"]
    model_f32 = sum(4 * t.n_elements for t in gguf.GGUFReader(str(out)).tensors)
    bound = 3 * 4 * largest
    print(f"{type}: peak {r['peak'] / MiB:.1f} MiB, grown {grown / MiB:.1f} MiB, "
          f"bound {bound / MiB:.0f} MiB, model {model_f32 / MiB:.0f} MiB in f32")  # fmt: skip
    assert model_f32 > 6 * bound  # the bound means something: the model is much larger
    assert grown <= bound
    assert r["peak"] <= bound + 256 * MiB
