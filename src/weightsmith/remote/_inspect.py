"""``weightsmith.remote.inspect``: targets, Hub references, shard sets."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from ..byteio import (
    FsspecSource,
    HTTPSource,
    HubRef,
    Session,
    blob_to_resolve,
    hub_listing,
    hub_token,
    parse_hub_ref,
    resolve_url,
    sibling_url,
    url_token,
)
from ..errors import NoWeightsFound, RemoteNotFound, UnknownTargetError
from ..inspection import (
    FileReport,
    Report,
    natural_key,
    parse_index,
    read_gguf,
    read_safetensors,
    split_siblings,
)

#: shard headers fetched at the same time, at most
DEFAULT_JOBS = 8
RemoteReport = Report  # the dataclass remote.inspect returns (same model as local)


def is_remote(target: str) -> bool:
    """True for URLs and Hub references (a local path that exists wins)."""
    if "://" in target:
        return not target.startswith("file://")
    try:
        return parse_hub_ref(target) is not None
    except UnknownTargetError:
        return False


# --------------------------------------------------------------------------- readers


def _read_file(src: Any) -> FileReport:
    name = urlsplit(src.name).path.lower() if "://" in src.name else src.name.lower()
    if name.endswith((".bin", ".pth", ".pt", ".ckpt")):
        raise UnknownTargetError(
            f"{src.name}: PyTorch pickle checkpoints are inspected from a local copy only "
            "(their tensor table is at the end of a zip, not in a header)"
        )
    if name.endswith(".gguf"):
        return read_gguf(src)
    if name.endswith(".safetensors"):
        return read_safetensors(src)
    # no telling extension: sniff the first bytes (one small request, reused)
    head = src.prefix(4)
    return read_gguf(src) if head == b"GGUF" else read_safetensors(src)


def _read_many(make_source, names: list[str], jobs: int) -> list[FileReport]:
    """Headers of several files, fetched concurrently, in the given order."""
    if len(names) == 1:
        return [_read_file(make_source(names[0]))]
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(names)))) as pool:
        return list(pool.map(lambda n: _read_file(make_source(n)), names))


def _inspect_url(url: str, make_source, jobs: int, target: str) -> Report:
    base = urlsplit(url).path.rsplit("/", 1)[-1] if "://" in url else os.path.basename(url)
    if base.endswith(".index.json"):
        src = make_source(url)
        meta, wm = parse_index(src.read_all(), url)
        shards = sorted(set(wm.values()), key=natural_key)
        files = _read_many(make_source, [sibling_url(url, s) for s in shards], jobs)
        rep = Report(target, files[0].format if files else "safetensors", files, meta, remote=True)
        rep.notes.append(f"index: {url}")
        _add_overhead(rep, src.requests, src.bytes_fetched, note=False)
        return rep
    siblings = split_siblings(base)
    if siblings:
        names = [sibling_url(url, s) for s in siblings]
        return Report(target, "gguf", _read_many(make_source, names, jobs), remote=True)
    fr = _read_file(make_source(url))
    return Report(target, fr.format, [fr], remote=True)


def _inspect_hub(
    ref: HubRef, session: Session, jobs: int, endpoint: str | None, target: str
) -> Report:
    def make(url: str) -> HTTPSource:
        return HTTPSource(url, session)

    if ref.path:
        return _inspect_url(resolve_url(ref, ref.path, endpoint), make, jobs, target)
    requests = 0
    # Probe the usual names first: a hit costs exactly the requests of the read.
    for probe in ("model.safetensors", "model.safetensors.index.json"):
        try:
            rep = _inspect_url(resolve_url(ref, probe, endpoint), make, jobs, target)
        except RemoteNotFound:
            requests += 1
            continue
        _add_overhead(rep, requests)
        return rep
    before = session.requests
    names = hub_listing(ref, session, endpoint)
    requests += session.requests - before
    chosen = _choose_from_listing(names)
    if chosen is None:
        raise NoWeightsFound(f"{ref.repo}: no .safetensors or .gguf file in the repo listing")
    rep = _inspect_url(resolve_url(ref, chosen, endpoint), make, jobs, target)
    others = sorted(
        {n for n in names if n.endswith(".gguf") and n != chosen and not _same_split(n, chosen)},
        key=natural_key,
    )
    if others:
        rep.notes.append(
            "other GGUF files in this repo: "
            + ", ".join(f"hf://{ref.repo}/{n}" for n in others[:20])
            + (" ..." if len(others) > 20 else "")
        )
    _add_overhead(rep, requests)
    return rep


def _same_split(a: str, b: str) -> bool:
    sa, sb = split_siblings(a), split_siblings(b)
    return bool(sa and sb and sa == sb)


def _choose_from_listing(names: list[str]) -> str | None:
    for idx in sorted(n for n in names if n.endswith(".safetensors.index.json")):
        return idx
    st = sorted((n for n in names if n.endswith(".safetensors")), key=natural_key)
    if st:
        return st[0]
    gg = sorted((n for n in names if n.endswith(".gguf")), key=natural_key)
    # a split set is named by its first shard; otherwise the first file
    for n in gg:
        sib = split_siblings(n)
        if sib is None or sib[0] == n:
            return n
    return None


def _add_overhead(rep: Report, requests: int, nbytes: int = 0, note: bool = True) -> None:
    """Count requests made outside the header reads (index, probes, listing) in the totals."""
    if requests and rep.files:
        rep.files[0].requests += requests
        rep.files[0].bytes_fetched += nbytes
        if note:
            rep.notes.append(f"{requests} probe/listing request(s) before the header read")


# --------------------------------------------------------------------------- entry point


def inspect(
    target: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    jobs: int = DEFAULT_JOBS,
    storage_options: dict | None = None,
) -> Report:
    """Headers of a remote model: per-file tensor infos, metadata, parameter counts.

    Returns a :class:`~weightsmith.inspection.Report` (``files``, ``tensors``,
    ``counts_by_dtype()``, ``parameter_count``, ``requests``, ``bytes_fetched``).
    """
    hub = parse_hub_ref(target) if not target.startswith(("http://", "https://")) else None
    if hub is not None:
        tok, tok_origin = hub_token(token, endpoint)
        with Session(token=tok, token_origin=tok_origin) as s:
            return _inspect_hub(hub, s, jobs, endpoint, target)
    scheme = urlsplit(target).scheme.lower()
    if scheme in ("http", "https"):
        target_url = blob_to_resolve(target, endpoint)
        if target_url != target:
            return inspect(target_url, token=token, endpoint=endpoint, jobs=jobs)
        tok, tok_origin = url_token(target, token, endpoint)
        with Session(token=tok, token_origin=tok_origin) as s:
            return _inspect_url(target, lambda u: HTTPSource(u, s), jobs, target)
    if scheme:
        return _inspect_url(target, lambda u: FsspecSource(u, storage_options), jobs, target)
    raise UnknownTargetError(f"{target}: not a URL or a Hub reference")
