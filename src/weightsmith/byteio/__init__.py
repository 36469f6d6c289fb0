"""Bytes of remote files, for the format readers: lazy, ranged, checked, optionally cached.

This package sits just below the formats (docs/architecture.md), so that
``safe_open``, ``open_checkpoint`` and ``gguf.read`` can read ``hf://``,
``http(s)://`` and fsspec URLs themselves; :mod:`weightsmith.remote` (the
remote ``inspect``) builds on the same sources.

* :mod:`weightsmith.byteio._http` -- HTTP Range requests (manual redirects,
  retries honouring ``Retry-After``, ETag / Content-Range checks) and fsspec;
* :mod:`weightsmith.byteio._hub` -- Hub references and the token rules;
* :mod:`weightsmith.byteio._ranged` -- :class:`RemoteFile`: header prefix,
  parallel ranged reads in a bounded window, the block cache;
* :mod:`weightsmith.byteio._cache` -- :class:`BlockCache`.

httpx (the ``remote`` extra) and fsspec (the ``fsspec`` extra) are imported
on first use.
"""

from __future__ import annotations

from ._cache import BlockCache
from ._http import (
    CachedSource,
    FsspecSource,
    HTTPSource,
    Response,
    Session,
    origin,
    raise_for_status,
)
from ._hub import (
    DEFAULT_ENDPOINT,
    HubRef,
    endpoint_url,
    hub_listing,
    hub_token,
    is_url,
    parse_hub_ref,
    resolve_url,
    sibling_url,
    url_name,
    url_token,
)
from ._ranged import (
    RemoteFile,
    RemoteOptions,
    blob_to_resolve,
    fetch_whole,
    open_remote,
    source_for,
)

__all__ = [
    "DEFAULT_ENDPOINT",
    "BlockCache",
    "CachedSource",
    "FsspecSource",
    "HTTPSource",
    "HubRef",
    "RemoteFile",
    "RemoteOptions",
    "Response",
    "Session",
    "blob_to_resolve",
    "endpoint_url",
    "fetch_whole",
    "hub_listing",
    "hub_token",
    "is_url",
    "open_remote",
    "origin",
    "parse_hub_ref",
    "raise_for_status",
    "resolve_url",
    "sibling_url",
    "source_for",
    "url_name",
    "url_token",
]
