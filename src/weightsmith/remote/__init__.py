"""Read safetensors and GGUF headers over the network, without the weights.

``inspect(target)`` accepts:

* an ``http(s)://`` URL of a ``.safetensors``, ``.gguf`` or ``*.index.json`` file;
* a Hub reference ``hf://ORG/REPO[@REV][/PATH]`` or a bare ``ORG/REPO``;
* any fsspec URL (``s3://``, ``gs://``, ``memory://`` ...) when fsspec is installed.

HTTP protocol, kept to the fewest requests:

* safetensors: one speculative ``Range: bytes=0-102399`` request (ranges are
  *inclusive*, so that is exactly 102,400 bytes) returns the size (from
  ``Content-Range``), the 8-byte header length N and, for most files, the
  whole JSON header.  Only when ``8 + N > 102400`` is a second request made,
  for ``bytes=102400-(8+N-1)``.  A ``200`` answer (Range ignored) is read only
  as far as needed and then closed; a ``416`` (empty file) is retried
  without a range.
* GGUF: growing chunks; the parser raises ``NeedMoreData(needed)``, its
  estimate of the header end from what it parsed, and the next request reads
  to a little past it, within a bounded factor of what was read
  (:func:`weightsmith.gguf.next_gguf_prefix`).
* sharded / split sets: the index (or the split file name) gives the shards,
  whose headers are fetched concurrently by a bounded thread pool.
* Hub: ``{HF_ENDPOINT or https://huggingface.co}/{repo}/resolve/{rev}/{path}``
  with the token from ``--token`` or ``HF_TOKEN``; ``HF_TOKEN`` also goes with a
  plain URL on the endpoint's own origin (a pasted resolve URL), as in
  huggingface_hub, and never to another origin.  Redirects are followed by
  hand so that ``Authorization`` is sent only to the origin (scheme, host,
  port) the token was meant for.
"""

from __future__ import annotations

from ..byteio import HTTPSource, HubRef, Session, parse_hub_ref
from ._inspect import RemoteReport, inspect, is_remote

__all__ = [
    "HTTPSource",
    "HubRef",
    "RemoteReport",
    "Session",
    "inspect",
    "is_remote",
    "parse_hub_ref",
]
