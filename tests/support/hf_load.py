"""The first check of every GGUF -> HF test of a model with a projector: the folder written
back loads in transformers as the original's class, with no key missing, unexpected or
mismatched."""

from __future__ import annotations

from typing import Any

import numpy as np


def state_dicts(back: Any, info: dict, orig: Any) -> tuple[dict[str, np.ndarray], dict]:
    """``back`` (loaded with ``info``, transformers' loading info) is ``orig``'s class with
    every key and no other: (ours, the original's) state dicts as numpy arrays."""
    assert type(back) is type(orig)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    want = {k: v.numpy() for k, v in orig.state_dict().items()}
    got = {k: v.numpy() for k, v in back.state_dict().items()}
    assert set(got) == set(want)
    return got, want
