"""The round trip of the GGUF -> HF tests of a model with a projector: HF -> GGUF of the
folder written back gives the first GGUF pair again.

Compared: every hyperparameter (``general.*``, the provenance, and ``tokenizer.*``,
text GGUF -> HF's business, aside), each tensor's name, type and shape in file order,
and each tensor's values, bit for bit or, where the forward conversion itself rounds
(``1 + w`` norms, ``-exp(A_log)``), within 1 float32 ulp.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from weightsmith.convert import hf_to_gguf
from weightsmith.gguf import read

_SKIP = ("general.", "tokenizer.")


def pair_jobs(src: Path, root: Path, types: Iterable[str]) -> list[list[str]]:
    """Ours at each type (``root / ours-{text,mmproj}-T.gguf``), and the reference's
    ``convert_hf_to_gguf.py`` arguments for the same pair (``ref-{text,mmproj}-T.gguf``),
    for the caller to run in one process."""
    jobs = []
    for t in types:
        jobs.append([str(src), "--outfile", str(root / f"ref-text-{t}.gguf"), "--outtype", t])
        jobs.append([str(src), "--outfile", str(root / f"ref-mmproj-{t}.gguf"), "--outtype", t,
                     "--mmproj"])  # fmt: skip
        hf_to_gguf(src, root / f"ours-text-{t}.gguf", t, mmproj=root / f"ours-mmproj-{t}.gguf")
    return jobs


def convert_forward(folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """HF -> GGUF of ``folder`` at f32, without the tokenizer: (text, projector)."""
    text, proj = tmp_path / "text.gguf", tmp_path / "mmproj.gguf"
    hf_to_gguf(folder, text, "f32", mmproj=proj, tokenizer=False)
    return text, proj


def assert_same_gguf(
    ours: Path,
    first: Path,
    within_ulp: Callable[[str], bool] = lambda name: False,
    any_order: bool = False,
) -> None:
    """``ours`` holds what ``first`` holds (see the module docstring); ``any_order``:
    the same tensors, asserted to be in another order."""
    with read(ours) as a, read(first) as b:
        md_a = {k: v for k, v in a.metadata.items() if not k.startswith(_SKIP)}
        assert md_a == {k: v for k, v in b.metadata.items() if not k.startswith(_SKIP)}
        ta = [(t.name, t.ggml_type, tuple(t.shape)) for t in a.tensors]
        tb = [(t.name, t.ggml_type, tuple(t.shape)) for t in b.tensors]
        if any_order:
            assert ta != tb
            ta, tb = sorted(ta, key=str), sorted(tb, key=str)
        assert ta == tb
        for t in b.tensors:
            x, y = np.asarray(a.numpy(t.name)), np.asarray(b.numpy(t.name))
            if within_ulp(t.name):
                assert np.all(np.abs(x - y) <= np.float32(2.0**-23) * np.abs(y)), t.name
            else:
                np.testing.assert_array_equal(x, y, err_msg=t.name)
