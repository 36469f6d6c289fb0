"""Safe import of PyTorch checkpoints (``.pth``, ``.pt``, ``.bin``) without torch.

Nothing in the file is imported or called: pickles are read by our own
restricted interpreter (:mod:`._pickle`), which accepts only what a
weights-only checkpoint needs and refuses everything else before it could run.

* :func:`open` -- a read-only mapping ``name -> numpy array`` (lazy, zero-copy
  from an mmap where the layout allows): zip checkpoints (:mod:`._zip`),
  legacy ones (:mod:`._legacy`) and transformers-style shards with their
  ``.index.json``;
* :func:`scan` -- every global and opcode class the pickles use, and whether
  the file is weights-only safe, without executing it.
"""

from __future__ import annotations

import os

from ._pickle import GlobalUse, StorageRef, TensorRef
from ._reader import ShardedCheckpoint, TensorInfo, TorchCheckpoint, open_checkpoint
from ._scan import FolderScan, PickleScan, ScanReport, scan


def open(path: str | os.PathLike[str]) -> TorchCheckpoint | ShardedCheckpoint:
    """Open a checkpoint file, a ``*.index.json`` shard index, or a folder holding one.

    Use as a context manager; arrays are read-only views and stay valid after close.
    """
    return open_checkpoint(path)


__all__ = [
    "FolderScan",
    "GlobalUse",
    "PickleScan",
    "ScanReport",
    "ShardedCheckpoint",
    "StorageRef",
    "TensorInfo",
    "TensorRef",
    "TorchCheckpoint",
    "open",
    "scan",
]
