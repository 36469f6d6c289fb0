"""Inputs that once raised something other than a WeightsmithError (found by
the fuzzers or the reliability harnesses); each stays fixed."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from weightsmith import torchfile  # noqa: E402


def test_scan_of_a_legacy_checkpoint_over_1_mib(tmp_path):
    # torchfile.scan maps files >= 1 MiB; closing the map while the scan
    # result still held views of it raised BufferError.
    p = tmp_path / "legacy.pt"
    torch.save({"w": torch.zeros(400_000)}, p, _use_new_zipfile_serialization=False)
    assert p.stat().st_size > 1 << 20
    report = torchfile.scan(p)
    assert report.layout == "legacy" and report.pickles


def test_scan_of_a_huge_long_over_1_mib(tmp_path):
    big = b"\x8b" + (1 << 20).to_bytes(4, "little") + b"\x01" * (1 << 20)
    p = tmp_path / "big_long.pt"
    p.write_bytes(b"\x80\x02}(X\x01\x00\x00\x00a" + big + b"u.")
    report = torchfile.scan(p)
    assert type(report.pickles[0].findings[-1]).__name__ == "PickleLengthOutOfBounds"
