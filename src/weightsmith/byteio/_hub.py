"""Remote targets: Hub references, resolve URLs, and which origin a token goes to.

* ``hf://ORG/REPO[@REV][/PATH]`` (or a bare ``ORG/REPO`` for ``inspect``) names a
  file of a Hub repo; its bytes are at
  ``{HF_ENDPOINT or https://huggingface.co}/{ORG/REPO}/resolve/{REV}/{PATH}``.
* Token rules: a token given explicitly goes to the origin (scheme, host, port)
  of the URL it was given with; ``HF_TOKEN`` goes only to the Hub endpoint's own
  origin (also for a pasted ``.../resolve/...`` URL there, as huggingface_hub
  does).  Redirects are followed by hand (:class:`~weightsmith.byteio.Session`),
  so a redirect to another origin carries no token.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import NoWeightsFound, RemoteNotFound, UnknownTargetError
from ._http import HTTPSource, Session, origin

DEFAULT_ENDPOINT = "https://huggingface.co"

_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w.-]+)?$")


@dataclass(frozen=True)
class HubRef:
    repo: str
    revision: str = "main"
    path: str | None = None


def parse_hub_ref(target: str, bare: bool = True) -> HubRef | None:
    """``hf://ORG/REPO[@REV][/PATH]`` (or, with ``bare``, ``ORG/REPO``) -> HubRef, else None."""
    if target.startswith("hf://"):
        rest = target[5:].strip("/")
    elif bare and _REPO_RE.match(target) and not os.path.exists(target):
        rest = target
    else:
        return None
    parts = rest.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise UnknownTargetError(f"{target}: a Hub reference is hf://ORG/REPO[@REV][/PATH]")
    name, _, rev = parts[1].partition("@")
    path = "/".join(parts[2:]) or None
    return HubRef(f"{parts[0]}/{name}", rev or "main", path)


def is_url(target: object) -> bool:
    """True for ``hf://``, ``http(s)://`` and other fsspec URLs (not ``file://``, not paths)."""
    if not isinstance(target, str):
        return False
    scheme, sep, _ = target.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme.lower() != "file"


def endpoint_url(endpoint: str | None = None) -> str:
    """The Hub endpoint: ``endpoint``, else ``HF_ENDPOINT``, else huggingface.co."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_url(ref: HubRef, path: str, endpoint: str | None = None) -> str:
    rev = quote(ref.revision, safe="")
    return f"{endpoint_url(endpoint)}/{ref.repo}/resolve/{rev}/{quote(path)}"


def url_token(url: str, token: str | None, endpoint: str | None) -> tuple[str | None, str | None]:
    """``(token, origin it is sent to)`` for a plain http(s) URL.

    As huggingface_hub does, ``HF_TOKEN`` goes with requests to the Hub
    endpoint's own origin (``https://huggingface.co``, or ``HF_ENDPOINT``), so a
    pasted ``.../resolve/main/...`` URL of a gated repo works; it never goes to
    another origin.  A token given explicitly is for the URL's own origin.
    """
    if token:
        return token, url
    hub = endpoint_url(endpoint)
    env = os.environ.get("HF_TOKEN") or None
    if env and origin(url) == origin(hub):
        return env, hub
    return None, None


def hub_token(token: str | None, endpoint: str | None) -> tuple[str | None, str]:
    """``(token, origin)`` for an ``hf://`` reference: ``token`` or ``HF_TOKEN``, to the endpoint."""
    return token or os.environ.get("HF_TOKEN") or None, endpoint_url(endpoint)


def hub_listing(ref: HubRef, session: Session, endpoint: str | None) -> list[str]:
    """The file names of a Hub repo at a revision (``/api/models/ORG/REPO``'s siblings)."""
    api = f"{endpoint_url(endpoint)}/api/models/{ref.repo}"
    if ref.revision != "main":
        api += f"/revision/{quote(ref.revision, safe='')}"
    src = HTTPSource(api, session)
    try:
        data = json.loads(src.read_all(16 * 1024 * 1024))
    except RemoteNotFound:
        raise NoWeightsFound(f"{ref.repo}: repository not found at {api}") from None
    # ValueError: bad JSON or UTF-8, or an integer past int()'s digit limit
    except ValueError as e:
        raise NoWeightsFound(f"{api}: the repo listing is not JSON ({e})") from None
    siblings = data.get("siblings") if isinstance(data, dict) else None
    return [
        s["rfilename"]
        for s in siblings or []
        if isinstance(s, dict) and isinstance(s.get("rfilename"), str)
    ]


def sibling_url(url: str, name: str) -> str:
    """The URL of ``name`` in the same folder as ``url`` (a query string is kept)."""
    u = urlsplit(url)
    folder = u.path.rsplit("/", 1)[0]
    return urlunsplit((u.scheme, u.netloc, f"{folder}/{quote(name)}", u.query, ""))


def url_name(url: str) -> str:
    """The file name at the end of a URL's path."""
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])
