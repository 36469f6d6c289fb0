"""The one exception hierarchy of weightsmith.

Every error raised on bad input is a subclass of :class:`WeightsmithError`.
Errors about malformed files or arguments also subclass :class:`ValueError`,
so ``except ValueError`` keeps working for callers that know nothing of us.

There is **one class per validation rule**: a test (or a caller) can tell
exactly which rule a file broke.  Every message says where (file, field or
tensor, byte offset) and what was expected and what was found::

    HeaderNotObject: model.safetensors: header at offset 8: expected a JSON
    object, found a list
"""

from __future__ import annotations

import os
from typing import Any


class WeightsmithError(Exception):
    """Base of every error weightsmith raises on purpose."""


class MissingDependencyError(WeightsmithError, ImportError):
    """An optional extra (torch, httpx, rich, ...) is needed but not installed."""

    def __init__(self, package: str, extra: str, purpose: str = "") -> None:
        why = f" for {purpose}" if purpose else ""
        super().__init__(
            f"{package} is needed{why}; install it with `pip install 'weightsmith[{extra}]'`"
        )
        self.package = package
        self.extra = extra


class ClosedFileError(WeightsmithError, ValueError):
    """An object was used after its file was closed."""


class FormatError(WeightsmithError, ValueError):
    """A file or argument breaks a rule of its format.

    ``path``, ``field``, ``offset``, ``expected`` and ``found`` are kept as
    attributes, and the message is built from them in one fixed shape.
    """

    def __init__(
        self,
        what: str = "",
        *,
        path: str | os.PathLike[str] | None = None,
        field: str | None = None,
        offset: int | None = None,
        expected: Any = None,
        found: Any = None,
    ) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.field = field
        self.offset = offset
        self.expected = expected
        self.found = found
        self.what = what
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        loc = self.field or ""
        if self.offset is not None:
            loc = f"{loc} at offset {self.offset}" if loc else f"offset {self.offset}"
        if loc:
            where.append(loc)
        parts = [": ".join(where)] if where else []
        if self.what:
            parts.append(self.what)
        if self.expected is not None or self.found is not None:
            parts.append(f"expected {self.expected}, found {self.found}")
        return ": ".join(parts) if parts else type(self).__name__

    def __reduce__(self):  # keep errors picklable (multiprocessing workers)
        return (
            _rebuild,
            (type(self), self.what, self.path, self.field, self.offset, self.expected, self.found),
        )


def _rebuild(cls, what, path, field, offset, expected, found):
    return cls(what, path=path, field=field, offset=offset, expected=expected, found=found)


# --------------------------------------------------------------------------- safetensors
class SafetensorsError(FormatError):
    """A safetensors file breaks a rule of the format."""


class FileTooSmall(SafetensorsError):
    """The file is shorter than the 8-byte header length."""


class HeaderTooLarge(SafetensorsError):
    """The header length N is above 100,000,000."""


class HeaderOutOfBounds(SafetensorsError):
    """8 + N runs past the end of the file."""


class HeaderNotUTF8(SafetensorsError):
    """The header bytes are not valid UTF-8."""


class HeaderNotBrace(SafetensorsError):
    """The header does not begin with ``{``."""


class InvalidHeaderPadding(SafetensorsError):
    """The bytes after the JSON are not all spaces."""


class InvalidHeaderJSON(SafetensorsError):
    """The header is not parseable JSON."""


class HeaderTooDeep(SafetensorsError):
    """The header JSON nests deeper than any valid header can."""


class HeaderNotObject(SafetensorsError):
    """The header JSON is not an object."""


class DuplicateMetadata(SafetensorsError):
    """``__metadata__`` appears more than once."""


class InvalidMetadata(SafetensorsError):
    """``__metadata__`` is not a mapping of strings to strings."""


class DuplicateTensorName(SafetensorsError):
    """A key appears twice in the header (even with an identical value)."""


class InvalidTensorEntry(SafetensorsError):
    """A tensor entry is not an object."""


class MissingTensorField(SafetensorsError):
    """A tensor entry lacks ``dtype``, ``shape`` or ``data_offsets``."""


class UnknownTensorField(SafetensorsError):
    """A tensor entry has a field other than ``dtype``, ``shape``, ``data_offsets``."""


class UnknownDtype(SafetensorsError):
    """The dtype is not a known code (codes are case-sensitive)."""


class InvalidShape(SafetensorsError):
    """A shape is not a list of non-negative integers that fit u64."""


class InvalidOffsets(SafetensorsError):
    """``data_offsets`` is not two non-negative integers with begin <= end."""


class SizeOverflow(SafetensorsError):
    """shape x bits overflows u64."""


class TensorSizeMismatch(SafetensorsError):
    """shape x bits does not equal the tensor's byte span."""


class MisalignedSubByte(SafetensorsError):
    """A sub-byte tensor (F4, F6) does not end on a byte boundary."""


class DataHole(SafetensorsError):
    """Sorted by offset, a tensor starts after the previous one ended."""


class DataOverlap(SafetensorsError):
    """Sorted by offset, a tensor starts before the previous one ended."""


class TruncatedData(SafetensorsError):
    """The data section is shorter than the tensors need."""


class TrailingBytes(SafetensorsError):
    """The file has bytes after the last tensor."""


class TensorNotFound(WeightsmithError, KeyError):
    """A tensor name that the file does not hold."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "tensor not found"


class SharedTensorsError(WeightsmithError, ValueError):
    """Tensors to be saved share or overlap memory."""


class ShardError(FormatError):
    """A sharded checkpoint is inconsistent."""


class MissingShard(ShardError):
    """The index names a shard file that does not exist."""


class DuplicateShardTensor(ShardError):
    """A tensor is listed in two shards."""


class InvalidIndex(ShardError):
    """The index JSON is malformed."""


class InvalidSize(WeightsmithError, ValueError):
    """A size string such as ``"5GB"`` could not be parsed."""


class WriteError(WeightsmithError):
    """A writer was used out of order (wrong tensor, too many bytes, ...)."""


class NeedMoreData(WeightsmithError):
    """A parser ran past the end of a *prefix* of a file that is longer.

    Not an error of the file: remote readers catch it, fetch at least
    ``needed`` bytes from the start of the file, and parse again.
    """

    def __init__(self, needed: int) -> None:
        super().__init__(f"need at least {needed} bytes of the file")
        self.needed = needed


# --------------------------------------------------------------------------- remote / cli
class NotAvailableError(WeightsmithError):
    """A capability the CLI offers whose library part is not in this build yet."""


class UnknownTargetError(WeightsmithError, ValueError):
    """An inspect target that is neither a known file type, a folder nor a URL."""


class RemoteError(WeightsmithError):
    """A remote read failed (network, protocol or server error)."""


class RemoteHTTPError(RemoteError):
    """The server answered with an HTTP status that is not a success."""

    def __init__(self, url: str, status: int, what: str = "") -> None:
        extra = f": {what}" if what else ""
        super().__init__(f"{url}: HTTP {status}{extra}")
        self.url = url
        self.status = status


class RemoteNotFound(RemoteHTTPError):
    """The server answered 404 for a file."""


class RemoteAuthError(RemoteHTTPError):
    """The server answered 401/403: a token is missing or not accepted."""


class TooManyRedirects(RemoteError):
    """A redirect chain was longer than the limit."""


class NoWeightsFound(RemoteError):
    """A Hub repo holds no safetensors or GGUF file to inspect."""
