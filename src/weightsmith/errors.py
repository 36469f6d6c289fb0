"""The one exception hierarchy of weightsmith: every error it raises on purpose.

Every error raised on bad input is a subclass of :class:`WeightsmithError`.
Errors about malformed files or arguments also subclass :class:`ValueError`,
so ``except ValueError`` keeps working for callers that know nothing of us.

There is **one class per validation rule**: a test (or a caller) can tell
exactly which rule a file broke, and catching one rule never catches another
(a rule subclasses only its family).  Every message says where (file, field
or tensor, byte offset) and what was expected and what was found::

    HeaderNotObject: model.safetensors: header at offset 8: expected a JSON
    object, found a list

Names: a family ends in ``Error`` (``SafetensorsError``, ``GGUFError``, ...);
a rule is named for what broke it, GGUF's with a ``GGUF`` prefix:
``Unknown*`` a name we do not know, ``Unsupported*`` a known thing we do not
handle, ``*Mismatch`` two things that should agree, ``Missing*``,
``Duplicate*``, ``Invalid*`` (a value that breaks the format), ``*TooLarge`` /
``*TooLong`` / ``*TooDeep`` / ``*OutOfBounds`` (limits), ``Forbidden*``
(refused pickle content).

Every class is raised somewhere in ``src`` (tests/test_errors.py checks it).
The catalogue, in pipeline order (bases in parentheses)::

    the bases, and errors of any layer
      WeightsmithError (Exception): Base of every error weightsmith raises on purpose
      FormatError (WeightsmithError, ValueError): A file or argument breaks a rule of its format
      MissingDependencyError (WeightsmithError, ImportError): An optional extra (torch, httpx, rich, ...) is needed but not installed
      ClosedFileError (WeightsmithError, ValueError): An object was used after its file was closed
      NeedMoreData (WeightsmithError): A parser ran past the end of a *prefix* of a file that is longer
      InvalidSize (WeightsmithError, ValueError): A size string such as ``"5GB"`` could not be parsed
      OutputFolderRefused (WeightsmithError, ValueError): An output folder would be replaced as a whole but holds the input or other files
      WriteError (WeightsmithError): A writer was used out of order (wrong tensor, too many bytes) or a write came up short

    dtypes and frameworks (numpy, torch)
      UnsupportedDtype (WeightsmithError, TypeError): A dtype that the chosen framework (numpy, torch) cannot represent

    safetensors: header (8-byte length, JSON, metadata, tensor entries, data layout)
      SafetensorsError (FormatError, SafetensorError): A safetensors file breaks a rule of the format
      FileTooSmall (SafetensorsError): The file is shorter than the 8-byte header length
      HeaderTooLarge (SafetensorsError): The header length N is above 100,000,000
      HeaderOutOfBounds (SafetensorsError): 8 + N runs past the end of the file
      HeaderNotUTF8 (SafetensorsError): The header bytes are not valid UTF-8
      HeaderNotBrace (SafetensorsError): The header does not begin with ``{``
      InvalidHeaderPadding (SafetensorsError): The bytes after the JSON are not all spaces
      InvalidHeaderJSON (SafetensorsError): The header is not parseable JSON
      HeaderTooDeep (SafetensorsError): The header JSON nests deeper than any valid header can
      HeaderNotObject (SafetensorsError): The header JSON is not an object
      DuplicateMetadata (SafetensorsError): ``__metadata__`` appears more than once
      InvalidMetadata (SafetensorsError): ``__metadata__`` is not a mapping of strings to strings
      DuplicateMetadataKey (SafetensorsError): ``__metadata__`` holds the same key twice (even with an identical value)
      DuplicateTensorName (SafetensorsError): A key appears twice in the header (even with an identical value)
      InvalidTensorEntry (SafetensorsError): A tensor entry is not an object
      DuplicateTensorField (SafetensorsError): A tensor entry names one of its fields twice (even with an identical value)
      MissingTensorField (SafetensorsError): A tensor entry lacks ``dtype``, ``shape`` or ``data_offsets``
      UnknownTensorField (SafetensorsError): A tensor entry has a field other than ``dtype``, ``shape``, ``data_offsets``
      UnknownDtype (SafetensorsError): The dtype is not a known code (codes are case-sensitive)
      InvalidShape (SafetensorsError): A shape is not a list of non-negative integers that fit u64
      InvalidOffsets (SafetensorsError): ``data_offsets`` is not two non-negative integers with begin <= end
      SizeOverflow (SafetensorsError): shape x bits overflows u64
      TensorSizeMismatch (SafetensorsError): shape x bits does not equal the tensor's byte span
      MisalignedSubByte (SafetensorsError): A sub-byte tensor (F4, F6) does not end on a byte boundary
      DataHole (SafetensorsError): Sorted by offset, a tensor starts after the previous one ended
      DataOverlap (SafetensorsError): Sorted by offset, a tensor starts before the previous one ended
      TruncatedData (SafetensorsError): The data section is shorter than the tensors need
      TrailingBytes (SafetensorsError): The file has bytes after the last tensor
      TensorNotFound (SafetensorError, KeyError): A tensor name that the file does not hold
      SharedTensorsError (WeightsmithError, ValueError, RuntimeError): Tensors to be saved share or overlap memory

    safetensors: the drop-in API (each also the class HF's safetensors raises there)
      SafetensorError (WeightsmithError): HF safetensors' ``SafetensorError``, under the same name
      SafetensorsClosed (ClosedFileError, SafetensorError): A ``safe_open`` handle or one of its slices was used after close
      SliceIndexError (SafetensorError, IndexError): A ``get_slice`` index is out of range or of a kind slices do not take
      UnsupportedFramework (SafetensorError, ValueError): ``safe_open`` got a ``framework`` name it does not know
      UnsupportedBackend (SafetensorError, ValueError): ``safe_open`` / ``load_file`` got a ``backend`` other than mmap or pread
      InvalidTensorSpec (SafetensorError, ValueError): A ``TensorSpec`` or ``serialize`` argument is not a tensor it can write
      SafetensorsFileNotFound (WeightsmithError, FileNotFoundError): ``safe_open`` of a path that does not exist
      UnsupportedLayout (WeightsmithError, ValueError): A tensor to save is not dense (sparse torch tensors)

    sharded safetensors checkpoints (model.safetensors.index.json)
      ShardError (FormatError): A sharded checkpoint is inconsistent
      SeveralWeightSets (ShardError): A folder holds two weight sets (e.g. model.safetensors beside shards): never summed
      MissingShard (ShardError): The index names a shard file that does not exist
      DuplicateShardTensor (ShardError): A tensor is listed in two shards
      InvalidIndex (ShardError): The index JSON is malformed
      ShardTensorMismatch (ShardError): A shard does not hold exactly the tensors the index assigns to it

    PyTorch checkpoints: the restricted pickle interpreter, then the container
      PickleError (FormatError): A pickle inside a PyTorch checkpoint breaks a rule of our restricted interpreter
      UnsafePickleError (PickleError): The pickle was refused before anything in it could run
      ForbiddenGlobal (UnsafePickleError): GLOBAL / STACK_GLOBAL names something outside the weights-only allowlist
      ForbiddenOpcode (UnsafePickleError): An opcode that can call code or fetch objects (INST, OBJ, EXT*, buffers...)
      ForbiddenCall (UnsafePickleError): REDUCE / NEWOBJ on something that is not an allowed callable, or with bad arguments
      ForbiddenBuild (UnsafePickleError): BUILD (``__setstate__``) on an object of a type that may not be built
      ForbiddenPersistentId (UnsafePickleError): A persistent id other than a ``('storage', ...)`` tuple
      PickleLengthOutOfBounds (UnsafePickleError): A length field (LONG4, BINUNICODE, BINBYTES8, FRAME...) runs past the end of the pickle
      PickleTooDeep (UnsafePickleError): Nesting (MARK depth or containers) deeper than any checkpoint needs
      MalformedPickle (UnsafePickleError): Not a well-formed pickle: unknown opcode, stack underflow, memo miss, no STOP
      UnsupportedPickleGlobal (PickleError): A global torch's weights-only loader knows but we do not rebuild (quantized, sparse...)
      TorchFileError (FormatError): A PyTorch checkpoint breaks a rule of its container layout
      NotATorchFile (TorchFileError): Neither a zip checkpoint nor a legacy one (bad magic number or protocol)
      MissingRecord (TorchFileError): A zip checkpoint lacks ``data.pkl`` or a ``data/<key>`` storage record
      UnknownByteOrder (TorchFileError): The ``byteorder`` record is neither ``little`` nor ``big``
      UnsupportedStorage (TorchFileError): A storage type or dtype we cannot represent in numpy
      StorageSizeMismatch (TorchFileError): A storage's bytes do not match the element count its persistent id states
      StorageDtypeMismatch (TorchFileError): One storage key is used with two different dtypes or sizes
      StorageOutOfBounds (TorchFileError): A tensor's offset, size and stride reach outside its storage
      TensorLargerThanFile (TorchFileError): Materializing a tensor (an overlapping view) would need more memory than the file holds
      FlatNameCollision (TorchFileError): Two entries of a nested state dict flatten to the same dotted name
      UnsupportedTorchDtype (TorchFileError): A torch dtype (complex128, ...) that has no safetensors code

    GGUF: header, KVs, tensor infos, data layout; writer, editor, split sets
      GGUFError (FormatError): A GGUF file (or a value given to the GGUF writer) breaks a rule of the format
      GGUFTruncated (GGUFError): A fixed-size field (a count, a type, a scalar value) runs past the end of the file
      GGUFInvalidMagic (GGUFError): The file does not start with the four bytes ``GGUF``
      GGUFUnsupportedVersion (GGUFError): The version is 0 or above 3 (in either byte order)
      GGUFCountTooLarge (GGUFError): The tensor or KV count needs more bytes than the file has
      GGUFStringTooLong (GGUFError): A string length runs past the end of the file
      GGUFArrayTooLong (GGUFError): An array count x element size runs past the end of the file
      GGUFUnknownValueType (GGUFError): A KV value type or array element type is not one of the 13 GGUF types
      GGUFNestingTooDeep (GGUFError): Arrays of arrays nest deeper than the reader's limit
      GGUFEmptyKey (GGUFError): A metadata key is the empty string
      GGUFDuplicateKey (GGUFError): A metadata key appears twice
      GGUFInvalidUTF8 (GGUFError): A key or tensor name is not valid UTF-8
      GGUFDuplicateTensor (GGUFError): A tensor name appears twice
      GGUFTensorNameTooLong (GGUFError): A tensor name is 64 bytes or longer (ggml's GGML_MAX_NAME)
      GGUFTooManyDims (GGUFError): A tensor has n_dims above 4
      GGUFInvalidDim (GGUFError): A tensor dimension is zero or negative (>= 2**63 as stored)
      GGUFSizeOverflow (GGUFError): A tensor's element or byte count does not fit in int64
      GGUFUnknownGGMLType (GGUFError): A tensor's ggml type number is not in weightsmith.dtypes.GGML
      GGUFRowNotBlockMultiple (GGUFError): A tensor's row length (dims[0]) is not a multiple of its type's block size
      GGUFInvalidAlignment (GGUFError): ``general.alignment`` is not a u32, is zero, or is not a power of two
      GGUFUnalignedOffset (GGUFError): A tensor's data offset is not a multiple of the alignment
      GGUFTensorOutOfOrder (GGUFError): A tensor's offset is below the offset of the tensor before it
      GGUFTensorOverlap (GGUFError): A tensor starts before the tensor before it has ended
      GGUFDataPastEOF (GGUFError): The data section, or a tensor's bytes, run past the end of the file
      GGUFInvalidValue (GGUFError): A value given to the writer or editor cannot be stored as the requested GGUF type
      GGUFSplitError (GGUFError): A split set is inconsistent (missing shard, bad split.* keys, impossible limits)

    quantization: codecs, importance matrices, llama-quantize recipes, whole files
      QuantError (FormatError): Quantization got input it cannot take (a tensor, shape, importance matrix or argument)
      UnknownQuantType (QuantError): A ggml type name or number that weightsmith does not know
      UnsupportedQuantizeType (QuantError): The ggml type has no quantizer (e.g. Q8_1, Q8_K, or an IQ type not done yet)
      UnsupportedDequantizeType (QuantError): The ggml type has no dequantizer registered
      RowLengthNotMultiple (QuantError): The last dimension is not a multiple of the type's block size
      ByteCountMismatch (QuantError): The raw bytes do not hold exactly the elements of the requested shape
      InvalidQuantShape (QuantError): A shape that is not a tuple of non-negative integers, or a 0-d tensor to quantize
      ImatrixLengthMismatch (QuantError): The importance matrix does not have one weight per column (row length)
      InvalidImatrix (QuantError): The importance matrix holds a NaN, an inf or a negative weight
      ImatrixRequired (QuantError): The type (IQ2_XXS, IQ2_XS, IQ1_S, ...) cannot be quantized without an importance matrix
      NonFiniteInput (QuantError): NaN or inf in a tensor to quantize to a type that cannot hold them
      InvalidWorkers (QuantError): ``workers`` is not a positive integer
      InvalidImatrixFile (QuantError): An importance-matrix file (llama.cpp .gguf or legacy .dat) that cannot be read
      RecipeError (FormatError): A llama-quantize file type cannot be applied
      UnknownFileType (RecipeError): A file type name or number that llama-quantize does not know
      NoFallbackType (RecipeError): A row length fits neither the chosen type nor any fallback
      RequantizeRefused (QuantError): A tensor is already quantized; quantizing it again would compound the error

    clusters (Ray): spreading a quantization over several machines
      ClusterError (WeightsmithError): A job could not run on the Ray cluster it was given
      ClusterUnavailable (ClusterError, ConnectionError): No Ray cluster answers at the given address
      ClusterSourceMismatch (ClusterError, FormatError): A worker reads a different source than the driver planned (size, tensor type or shape)

    conversion: HF <-> GGUF (both directions), dtype casts, tokenizers
      ConvertError (FormatError): A model cannot be converted (HF -> GGUF or GGUF -> HF)
      MissingModelFile (ConvertError): config.json or the weights are missing from the model folder
      InvalidModelConfig (ConvertError): config.json lacks a field, has a wrong type, or its values are inconsistent
      UnknownArchitecture (ConvertError): config.json's ``architectures[0]`` or GGUF's ``general.architecture`` is not in the registry
      UnmappedTensor (ConvertError): A tensor has no name on the other side in the architecture's name map
      TensorShapeMismatch (ConvertError): A tensor's shape disagrees with the hyperparameters (config.json or GGUF metadata)
      MissingGGUFMetadata (ConvertError): Metadata keys that config.json needs are absent (all of them are listed)
      MissingGGUFTensor (ConvertError): A tensor the architecture requires is absent (all of them are listed)
      UnsupportedTargetDtype (ConvertError): A dtype to convert or cast tensors to that is not one of the float codes allowed there
      ProjectorMismatch (ConvertError): A projector GGUF that does not fit the text GGUF (not clip, unknown type, other width)
      UnsupportedComparison (ConvertError): Values to compare from files we do not read values from (remote, PyTorch)
      UnknownLlamaGeneration (ConvertError): A Meta original checkpoint whose Llama generation is neither given nor recognisable
      ParamsShapeMismatch (ConvertError): Meta's or Mistral's ``params.json`` (or its tokenizer) contradicts the shapes of the checkpoint's tensors
      MtpNotSupported (ConvertError): Multi-token-prediction blocks to drop or export alone for an architecture whose converter has no such blocks
      TokenizerError (FormatError): A tokenizer folder or the tokenizer.ggml.* metadata of a GGUF cannot be converted
      TokenizerFilesMissing (TokenizerError): No tokenizer.json / tokenizer.model usable for the architecture, or a GGUF without tokenizer keys
      TokenizerInconsistent (TokenizerError): Tokenizer files contradict each other or themselves (bad JSON, wrong types, ids out of range)
      VocabSizeMismatch (TokenizerError): A token id of the tokenizer is not below config.json's ``vocab_size``
      UnknownBPEPreTokenizer (TokenizerError): The BPE pre-tokenizer (llama.cpp's chktxt hash, or tokenizer.ggml.pre) is not one we know

    remote reads (HTTP, the Hub)
      RemoteError (WeightsmithError): A remote read failed (network, protocol or server error)
      RemoteHTTPError (RemoteError): The server answered with an HTTP status that is not a success
      RemoteNotFound (RemoteHTTPError): The server answered 404 for a file
      RemoteAuthError (RemoteHTTPError): The server answered 401/403: a token is missing or not accepted
      TooManyRedirects (RemoteError): A redirect chain was longer than the limit
      RemoteConnectionError (RemoteError): The server could not be reached or the connection broke (after retries)
      RemoteShortRead (RemoteError): A ranged read came back with fewer or other bytes than asked for (after retries)
      RemoteFileChanged (RemoteError): A remote file changed under a running read (ETag, size or Content-Range disagree with the first answer)
      NoWeightsFound (RemoteError): A Hub repo holds no safetensors or GGUF file to inspect

    inspection (what ``weightsmith inspect`` reads)
      UnknownTargetError (WeightsmithError, ValueError): An inspect target that is neither a known file type, a folder nor a URL
      HeaderReadLimit (WeightsmithError, ValueError): Reading a header would need more bytes than the inspect limit allows

    command line
      UsageError (WeightsmithError, ValueError): A command-line argument that cannot be used (bad KEY=VALUE, nothing to do, ...)
"""

from __future__ import annotations

import os
from typing import Any


# --------------------------------------------------------------------------- bases
class WeightsmithError(Exception):
    """Base of every error weightsmith raises on purpose."""


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


class NeedMoreData(WeightsmithError):
    """A parser ran past the end of a *prefix* of a file that is longer.

    Not an error of the file: remote readers catch it, fetch at least
    ``needed`` bytes from the start of the file, and parse again.
    """

    def __init__(self, needed: int) -> None:
        super().__init__(f"need at least {needed} bytes of the file")
        self.needed = needed


class InvalidSize(WeightsmithError, ValueError):
    """A size string such as ``"5GB"`` could not be parsed."""


class OutputFolderRefused(WeightsmithError, ValueError):
    """An output folder would be replaced as a whole but holds the input or other files."""


class WriteError(WeightsmithError):
    """A writer was used out of order (wrong tensor, too many bytes) or a write came up short."""


# --------------------------------------------------------------------------- dtypes
class UnsupportedDtype(WeightsmithError, TypeError):
    """A dtype that the chosen framework (numpy, torch) cannot represent."""


# --------------------------------------------------------------------------- safetensors
class SafetensorError(WeightsmithError):
    """HF safetensors' ``SafetensorError``, under the same name.

    Every error the drop-in API (``weightsmith.safe_open``, slices,
    ``serialize``, ``TensorSpec``) raises where HF raises its
    ``SafetensorError`` is an instance of this class, so ``except
    SafetensorError`` written for HF keeps working.
    """


class SafetensorsError(FormatError, SafetensorError):
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


class DuplicateMetadataKey(SafetensorsError):
    """``__metadata__`` holds the same key twice (even with an identical value)."""


class DuplicateTensorName(SafetensorsError):
    """A key appears twice in the header (even with an identical value)."""


class InvalidTensorEntry(SafetensorsError):
    """A tensor entry is not an object."""


class DuplicateTensorField(SafetensorsError):
    """A tensor entry names one of its fields twice (even with an identical value)."""


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


class TensorNotFound(SafetensorError, KeyError):
    """A tensor name that the file does not hold.

    Also a SafetensorError: HF's ``safe_open`` raises that for a missing name.
    """

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "tensor not found"


class SharedTensorsError(WeightsmithError, ValueError, RuntimeError):
    """Tensors to be saved share or overlap memory.

    Also a RuntimeError: HF's ``safetensors.torch`` raises RuntimeError here.
    """


class SafetensorsClosed(ClosedFileError, SafetensorError):
    """A ``safe_open`` handle or one of its slices was used after close."""


class SliceIndexError(SafetensorError, IndexError):
    """A ``get_slice`` index is out of range or of a kind slices do not take."""


class UnsupportedFramework(SafetensorError, ValueError):
    """``safe_open`` got a ``framework`` name it does not know."""


class UnsupportedBackend(SafetensorError, ValueError):
    """``safe_open`` / ``load_file`` got a ``backend`` other than mmap or pread."""


class InvalidTensorSpec(SafetensorError, ValueError):
    """A ``TensorSpec`` or ``serialize`` argument is not a tensor it can write."""


class SafetensorsFileNotFound(WeightsmithError, FileNotFoundError):
    """``safe_open`` of a path that does not exist.

    A FileNotFoundError (errno, filename kept) whose message is HF's,
    ``No such file or directory: PATH``, which callers match on.
    """

    def __str__(self) -> str:
        return f"No such file or directory: {self.filename}"


class UnsupportedLayout(WeightsmithError, ValueError):
    """A tensor to save is not dense (sparse torch tensors)."""


# --------------------------------------------------------------------------- shards
class ShardError(FormatError):
    """A sharded checkpoint is inconsistent."""


class SeveralWeightSets(ShardError):
    """A folder holds two weight sets (e.g. ``model.safetensors`` beside shards): never summed."""


class MissingShard(ShardError):
    """The index names a shard file that does not exist."""


class DuplicateShardTensor(ShardError):
    """A tensor is listed in two shards."""


class InvalidIndex(ShardError):
    """The index JSON is malformed."""


class ShardTensorMismatch(ShardError):
    """A shard does not hold exactly the tensors the index assigns to it."""


# --------------------------------------------------------------------------- torch
class PickleError(FormatError):
    """A pickle inside a PyTorch checkpoint breaks a rule of our restricted interpreter."""


class UnsafePickleError(PickleError):
    """The pickle was refused before anything in it could run.

    ``field`` is the pickle (``archive/data.pkl``), ``offset`` the byte offset
    of the refused opcode inside it; ``opcode`` and ``global_name`` (if any)
    are set as attributes and are in the message.
    """

    opcode: str | None = None
    global_name: str | None = None


class ForbiddenGlobal(UnsafePickleError):
    """GLOBAL / STACK_GLOBAL names something outside the weights-only allowlist."""


class ForbiddenOpcode(UnsafePickleError):
    """An opcode that can call code or fetch objects (INST, OBJ, EXT*, buffers...)."""


class ForbiddenCall(UnsafePickleError):
    """REDUCE / NEWOBJ on something that is not an allowed callable, or with bad arguments."""


class ForbiddenBuild(UnsafePickleError):
    """BUILD (``__setstate__``) on an object of a type that may not be built."""


class ForbiddenPersistentId(UnsafePickleError):
    """A persistent id other than a ``('storage', ...)`` tuple."""


class PickleLengthOutOfBounds(UnsafePickleError):
    """A length field (LONG4, BINUNICODE, BINBYTES8, FRAME...) runs past the end of the pickle."""


class PickleTooDeep(UnsafePickleError):
    """Nesting (MARK depth or containers) deeper than any checkpoint needs."""


class MalformedPickle(UnsafePickleError):
    """Not a well-formed pickle: unknown opcode, stack underflow, memo miss, no STOP..."""


class UnsupportedPickleGlobal(PickleError):
    """A global torch's weights-only loader knows but we do not rebuild (quantized, sparse...)."""


class TorchFileError(FormatError):
    """A PyTorch checkpoint breaks a rule of its container layout."""


class NotATorchFile(TorchFileError):
    """Neither a zip checkpoint nor a legacy one (bad magic number or protocol)."""


class MissingRecord(TorchFileError):
    """A zip checkpoint lacks ``data.pkl`` or a ``data/<key>`` storage record."""


class UnknownByteOrder(TorchFileError):
    """The ``byteorder`` record is neither ``little`` nor ``big``."""


class UnsupportedStorage(TorchFileError):
    """A storage type or dtype we cannot represent in numpy."""


class StorageSizeMismatch(TorchFileError):
    """A storage's bytes do not match the element count its persistent id states."""


class StorageDtypeMismatch(TorchFileError):
    """One storage key is used with two different dtypes or sizes."""


class StorageOutOfBounds(TorchFileError):
    """A tensor's offset, size and stride reach outside its storage."""


class TensorLargerThanFile(TorchFileError):
    """Materializing a tensor (an overlapping view) would need more memory than the file holds."""


class FlatNameCollision(TorchFileError):
    """Two entries of a nested state dict flatten to the same dotted name."""


class UnsupportedTorchDtype(TorchFileError):
    """A torch dtype (complex128, ...) that has no safetensors code."""


# --------------------------------------------------------------------------- gguf
class GGUFError(FormatError):
    """A GGUF file (or a value given to the GGUF writer) breaks a rule of the format."""


class GGUFTruncated(GGUFError):
    """A fixed-size field (a count, a type, a scalar value) runs past the end of the file."""


class GGUFInvalidMagic(GGUFError):
    """The file does not start with the four bytes ``GGUF``."""


class GGUFUnsupportedVersion(GGUFError):
    """The version is 0 or above 3 (in either byte order)."""


class GGUFCountTooLarge(GGUFError):
    """The tensor or KV count needs more bytes than the file has."""


class GGUFStringTooLong(GGUFError):
    """A string length runs past the end of the file."""


class GGUFArrayTooLong(GGUFError):
    """An array count x element size runs past the end of the file."""


class GGUFUnknownValueType(GGUFError):
    """A KV value type or array element type is not one of the 13 GGUF types."""


class GGUFNestingTooDeep(GGUFError):
    """Arrays of arrays nest deeper than the reader's limit."""


class GGUFEmptyKey(GGUFError):
    """A metadata key is the empty string."""


class GGUFDuplicateKey(GGUFError):
    """A metadata key appears twice."""


class GGUFInvalidUTF8(GGUFError):
    """A key or tensor name is not valid UTF-8."""


class GGUFDuplicateTensor(GGUFError):
    """A tensor name appears twice."""


class GGUFTensorNameTooLong(GGUFError):
    """A tensor name is 64 bytes or longer (ggml's GGML_MAX_NAME)."""


class GGUFTooManyDims(GGUFError):
    """A tensor has n_dims above 4."""


class GGUFInvalidDim(GGUFError):
    """A tensor dimension is zero or negative (>= 2**63 as stored)."""


class GGUFSizeOverflow(GGUFError):
    """A tensor's element or byte count does not fit in int64."""


class GGUFUnknownGGMLType(GGUFError):
    """A tensor's ggml type number is not in weightsmith.dtypes.GGML."""


class GGUFRowNotBlockMultiple(GGUFError):
    """A tensor's row length (dims[0]) is not a multiple of its type's block size."""


class GGUFInvalidAlignment(GGUFError):
    """``general.alignment`` is not a u32, is zero, or is not a power of two."""


class GGUFUnalignedOffset(GGUFError):
    """A tensor's data offset is not a multiple of the alignment."""


class GGUFTensorOutOfOrder(GGUFError):
    """A tensor's offset is below the offset of the tensor before it."""


class GGUFTensorOverlap(GGUFError):
    """A tensor starts before the tensor before it has ended."""


class GGUFDataPastEOF(GGUFError):
    """The data section, or a tensor's bytes, run past the end of the file."""


class GGUFInvalidValue(GGUFError):
    """A value given to the writer or editor cannot be stored as the requested GGUF type."""


class GGUFSplitError(GGUFError):
    """A split set is inconsistent (missing shard, bad split.* keys, impossible limits)."""


# --------------------------------------------------------------------------- quant
class QuantError(FormatError):
    """Quantization got input it cannot take (a tensor, shape, importance matrix or argument)."""


class UnknownQuantType(QuantError):
    """A ggml type name or number that weightsmith does not know."""


class UnsupportedQuantizeType(QuantError):
    """The ggml type has no quantizer (e.g. Q8_1, Q8_K, or an IQ type not done yet)."""


class UnsupportedDequantizeType(QuantError):
    """The ggml type has no dequantizer registered."""


class RowLengthNotMultiple(QuantError):
    """The last dimension is not a multiple of the type's block size."""


class ByteCountMismatch(QuantError):
    """The raw bytes do not hold exactly the elements of the requested shape."""


class InvalidQuantShape(QuantError):
    """A shape that is not a tuple of non-negative integers, or a 0-d tensor to quantize."""


class ImatrixLengthMismatch(QuantError):
    """The importance matrix does not have one weight per column (row length)."""


class InvalidImatrix(QuantError):
    """The importance matrix holds a NaN, an inf or a negative weight."""


class ImatrixRequired(QuantError):
    """The type (IQ2_XXS, IQ2_XS, IQ1_S, ...) cannot be quantized without an importance matrix."""


class NonFiniteInput(QuantError):
    """NaN or inf in a tensor to quantize to a type that cannot hold them."""


class InvalidWorkers(QuantError):
    """``workers`` is not a positive integer."""


class InvalidImatrixFile(QuantError):
    """An importance-matrix file (llama.cpp .gguf or legacy .dat) that cannot be read."""


class RecipeError(FormatError):
    """A llama-quantize file type cannot be applied."""


class UnknownFileType(RecipeError):
    """A file type name or number that llama-quantize does not know."""


class NoFallbackType(RecipeError):
    """A row length fits neither the chosen type nor any fallback."""


class RequantizeRefused(QuantError):
    """A tensor is already quantized; quantizing it again would compound the error."""


# --------------------------------------------------------------------------- clusters
class ClusterError(WeightsmithError):
    """A job could not run on the Ray cluster it was given."""


class ClusterUnavailable(ClusterError, ConnectionError):
    """No Ray cluster answers at the given address."""


class ClusterSourceMismatch(ClusterError, FormatError):
    """A worker reads a different source than the driver planned (size, tensor type or shape)."""


# --------------------------------------------------------------------------- convert
class ConvertError(FormatError):
    """A model cannot be converted (HF -> GGUF or GGUF -> HF)."""


class MissingModelFile(ConvertError):
    """config.json or the weights are missing from the model folder."""


class InvalidModelConfig(ConvertError):
    """config.json lacks a field, has a wrong type, or its values are inconsistent."""


class UnknownArchitecture(ConvertError):
    """config.json's ``architectures[0]`` or GGUF's ``general.architecture`` is not in the registry."""


class UnmappedTensor(ConvertError):
    """A tensor has no name on the other side in the architecture's name map."""


class TensorShapeMismatch(ConvertError):
    """A tensor's shape disagrees with the hyperparameters (config.json or GGUF metadata)."""


class MissingGGUFMetadata(ConvertError):
    """Metadata keys that config.json needs are absent (all of them are listed)."""


class MissingGGUFTensor(ConvertError):
    """A tensor the architecture requires is absent (all of them are listed)."""


class UnsupportedTargetDtype(ConvertError):
    """A dtype to convert or cast tensors to that is not one of the float codes allowed there."""


class ProjectorMismatch(ConvertError):
    """A projector GGUF that does not fit the text GGUF (not clip, unknown type, other width)."""


class UnsupportedComparison(ConvertError):
    """Values to compare from files we do not read values from (remote, PyTorch)."""


class UnknownLlamaGeneration(ConvertError):
    """A Meta original checkpoint whose Llama generation is neither given nor recognisable."""


class ParamsShapeMismatch(ConvertError):
    """Meta's or Mistral's ``params.json`` (or its tokenizer) contradicts the shapes of the checkpoint's tensors."""


class MtpNotSupported(ConvertError):
    """Multi-token-prediction blocks to drop or export alone for an architecture whose converter has no such blocks."""


class TokenizerError(FormatError):
    """A tokenizer folder or the tokenizer.ggml.* metadata of a GGUF cannot be converted."""


class TokenizerFilesMissing(TokenizerError):
    """No tokenizer.json / tokenizer.model usable for the architecture, or a GGUF without tokenizer keys."""


class TokenizerInconsistent(TokenizerError):
    """Tokenizer files contradict each other or themselves (bad JSON, wrong types, ids out of range)."""


class VocabSizeMismatch(TokenizerError):
    """A token id of the tokenizer is not below config.json's ``vocab_size``."""


class UnknownBPEPreTokenizer(TokenizerError):
    """The BPE pre-tokenizer (llama.cpp's chktxt hash, or tokenizer.ggml.pre) is not one we know."""


# --------------------------------------------------------------------------- remote
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


class RemoteConnectionError(RemoteError):
    """The server could not be reached or the connection broke (after retries)."""


class RemoteShortRead(RemoteError):
    """A ranged read came back with fewer or other bytes than asked for (after retries)."""


class RemoteFileChanged(RemoteError):
    """A remote file changed under a running read (ETag, size or Content-Range disagree with the first answer)."""


class NoWeightsFound(RemoteError):
    """A Hub repo holds no safetensors or GGUF file to inspect."""


# --------------------------------------------------------------------------- inspection
class UnknownTargetError(WeightsmithError, ValueError):
    """An inspect target that is neither a known file type, a folder nor a URL."""


class HeaderReadLimit(WeightsmithError, ValueError):
    """Reading a header would need more bytes than the inspect limit allows."""


# --------------------------------------------------------------------------- cli
class UsageError(WeightsmithError, ValueError):
    """A command-line argument that cannot be used (bad KEY=VALUE, nothing to do, ...)."""
