"""A restricted pickle interpreter for PyTorch checkpoints.

This is *not* :class:`pickle.Unpickler`: it is an explicit loop over the
opcodes, and nothing named by the pickle is ever imported or called.

Layouts that carry pickles
--------------------------
* zip checkpoints (``torch.save`` since 1.6): the member ``<archive>/data.pkl``
  holds the object; storages are ``<archive>/data/<key>`` (see ``_zip.py``);
* legacy checkpoints: five pickles back to back -- magic number, protocol
  version, sys_info, the object, the list of storage keys -- then the raw
  storages (see ``_legacy.py``).

Opcodes accepted
----------------
* framing: ``PROTO`` (0..5), ``FRAME`` (length checked), ``STOP``;
* constants: ``NONE NEWTRUE NEWFALSE INT BININT BININT1 BININT2 LONG LONG1
  LONG4 FLOAT BINFLOAT SHORT_BINSTRING BINSTRING SHORT_BINBYTES BINBYTES
  BINBYTES8 BYTEARRAY8 SHORT_BINUNICODE BINUNICODE BINUNICODE8``;
* containers: ``MARK POP POP_MARK DUP EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3
  EMPTY_LIST LIST APPEND APPENDS EMPTY_DICT DICT SETITEM SETITEMS EMPTY_SET
  ADDITEMS FROZENSET`` (APPEND/SETITEM/ADDITEMS only on real lists, dicts
  and sets);
* memo: ``PUT BINPUT LONG_BINPUT MEMOIZE GET BINGET LONG_BINGET``;
* ``GLOBAL`` / ``STACK_GLOBAL`` only for the names in :data:`ALLOWED`; the name
  is checked when the opcode is read, and an allowed name becomes an inert
  :class:`Global` token -- never an imported object;
* ``REDUCE`` / ``NEWOBJ`` only on a :class:`Global` token whose "call" this
  module performs itself (``_rebuild_tensor_v2`` -> :class:`TensorRef`,
  ``OrderedDict`` -> a dict, ``torch.Size`` -> a tuple, ``_codecs.encode`` ->
  bytes...), with argument types checked;
* ``BUILD`` only on an ``OrderedDict`` (its attributes, e.g. ``_metadata``);
* ``BINPERSID`` only for ``('storage', <storage type>, key, location, numel
  [, view])`` tuples, which become :class:`StorageRef` records.

Everything else is refused with an :class:`~weightsmith.errors.UnsafePickleError`
subclass naming the opcode (and global), and its byte offset in the pickle:
``INST OBJ NEWOBJ_EX EXT1 EXT2 EXT4 PERSID NEXT_BUFFER READONLY_BUFFER STRING
UNICODE``.  Every length field is checked against the bytes that remain before
anything is allocated, MARK nesting and container depth are bounded, and the
interpreter uses explicit stacks only (no recursion).
"""

from __future__ import annotations

import struct
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from .. import errors
from ..dtypes import TORCH_STORAGE_CLASSES, torch_dtype

MAX_MARK_DEPTH = 256  # checkpoints nest a handful of levels
MAX_CONTAINER_DEPTH = 200  # far below the C recursion limits of repr/hash/==
MAX_LONG_BYTES = 1024  # no checkpoint stores a 8000-bit integer
MAX_LINE = 1024  # protocol-0 text arguments

# --------------------------------------------------------------------------- opcode table
# byte -> name, from the pickle format (Lib/pickletools.py documents it).
OPCODES: dict[int, str] = {
    ord(c): n
    for c, n in [
        ("I", "INT"), ("J", "BININT"), ("K", "BININT1"), ("M", "BININT2"),
        ("L", "LONG"), ("\x8a", "LONG1"), ("\x8b", "LONG4"),
        ("S", "STRING"), ("T", "BINSTRING"), ("U", "SHORT_BINSTRING"),
        ("B", "BINBYTES"), ("C", "SHORT_BINBYTES"), ("\x8e", "BINBYTES8"),
        ("\x96", "BYTEARRAY8"), ("\x97", "NEXT_BUFFER"), ("\x98", "READONLY_BUFFER"),
        ("N", "NONE"), ("\x88", "NEWTRUE"), ("\x89", "NEWFALSE"),
        ("V", "UNICODE"), ("\x8c", "SHORT_BINUNICODE"), ("X", "BINUNICODE"),
        ("\x8d", "BINUNICODE8"), ("F", "FLOAT"), ("G", "BINFLOAT"),
        ("]", "EMPTY_LIST"), ("a", "APPEND"), ("e", "APPENDS"), ("l", "LIST"),
        (")", "EMPTY_TUPLE"), ("t", "TUPLE"), ("\x85", "TUPLE1"), ("\x86", "TUPLE2"),
        ("\x87", "TUPLE3"), ("}", "EMPTY_DICT"), ("d", "DICT"), ("s", "SETITEM"),
        ("u", "SETITEMS"), ("\x8f", "EMPTY_SET"), ("\x90", "ADDITEMS"), ("\x91", "FROZENSET"),
        ("0", "POP"), ("2", "DUP"), ("(", "MARK"), ("1", "POP_MARK"),
        ("g", "GET"), ("h", "BINGET"), ("j", "LONG_BINGET"),
        ("p", "PUT"), ("q", "BINPUT"), ("r", "LONG_BINPUT"), ("\x94", "MEMOIZE"),
        ("\x82", "EXT1"), ("\x83", "EXT2"), ("\x84", "EXT4"),
        ("c", "GLOBAL"), ("\x93", "STACK_GLOBAL"), ("R", "REDUCE"), ("b", "BUILD"),
        ("i", "INST"), ("o", "OBJ"), ("\x81", "NEWOBJ"), ("\x92", "NEWOBJ_EX"),
        ("\x80", "PROTO"), (".", "STOP"), ("\x95", "FRAME"),
        ("P", "PERSID"), ("Q", "BINPERSID"),
    ]
}  # fmt: skip

# What each opcode does, for scan(): which classes of power a pickle uses.
OPCODE_CLASS: dict[str, str] = {
    **dict.fromkeys(["PROTO", "FRAME", "STOP"], "framing"),
    **dict.fromkeys(["MARK", "POP", "POP_MARK", "DUP"], "stack"),
    **dict.fromkeys(
        ["PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET"], "memo"
    ),
    **dict.fromkeys(["GLOBAL", "STACK_GLOBAL"], "global"),
    **dict.fromkeys(["REDUCE", "NEWOBJ"], "call"),
    "BUILD": "build",
    **dict.fromkeys(["INST", "OBJ", "NEWOBJ_EX"], "instantiate"),
    **dict.fromkeys(["EXT1", "EXT2", "EXT4"], "extension-registry"),
    **dict.fromkeys(["PERSID", "BINPERSID"], "persistent-id"),
    **dict.fromkeys(["NEXT_BUFFER", "READONLY_BUFFER"], "out-of-band-buffer"),
}  # everything else: "data"

FORBIDDEN_OPCODES = frozenset(
    ["INST", "OBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4", "PERSID", "NEXT_BUFFER",
     "READONLY_BUFFER", "STRING", "UNICODE"]
)  # fmt: skip


def opcode_class(name: str) -> str:
    return OPCODE_CLASS.get(name, "data")


# --------------------------------------------------------------------------- globals
REBUILD_FUNCTIONS = frozenset(
    ["_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
     "_rebuild_parameter", "_rebuild_parameter_with_state"]
)  # fmt: skip

_PLAIN_ALLOWED = {
    "collections.OrderedDict": "ordereddict",
    "torch.Size": "size",
    "_codecs.encode": "encode",
    "builtins.set": "set",
    "builtins.frozenset": "frozenset",
    "builtins.complex": "complex",
    "builtins.bytearray": "bytearray",
    "torch._tensor._rebuild_from_type_v2": "from_type",
    "torch.Tensor": "tensor_type",
    "torch.nn.parameter.Parameter": "tensor_type",
    **{f"torch._utils.{n}": "rebuild" for n in REBUILD_FUNCTIONS},
}

# torch's weights-only loader accepts these, but we do not rebuild them.
KNOWN_UNSUPPORTED = frozenset(
    [f"torch._utils.{n}" for n in (
        "_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
        "_rebuild_nested_tensor", "_rebuild_wrapper_subclass",
        "_rebuild_device_tensor_from_numpy", "_rebuild_device_tensor_from_cpu_tensor")]
    + ["torch.serialization._get_layout", "torch.device", "collections.Counter"]
    + [f"torch.{q}" for q in ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                               "per_channel_symmetric", "per_channel_affine_float_qparams")]
    + [f"torch.{s}" for s in ("QInt8Storage", "QUInt8Storage", "QInt32Storage",
                               "QUInt4x2Storage", "QUInt2x4Storage")]
)  # fmt: skip

_CODECS = {
    "latin1": "latin-1",
    "latin-1": "latin-1",
    "utf-8": "utf-8",
    "utf8": "utf-8",
    "ascii": "ascii",
}


def classify_global(module: str, name: str) -> str | None:
    """The kind of an allowed global, or None if it is not allowed."""
    if module == "__builtin__":  # protocol <= 2 spells builtins the Python 2 way
        module = "builtins"
    full = f"{module}.{name}"
    kind = _PLAIN_ALLOWED.get(full)
    if kind is not None:
        return kind
    if module in ("torch", "torch.cuda") and name in TORCH_STORAGE_CLASSES:
        return "storage"
    if full in ("torch.storage.UntypedStorage", "torch.UntypedStorage"):
        return "storage"
    if module == "torch":
        try:
            torch_dtype(name)
        except KeyError:
            return None
        return "dtype"
    return None


@dataclass(frozen=True)
class Global:
    """An allowed global, as an inert token: the module is never imported."""

    module: str
    name: str
    kind: str

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


class Opaque:
    """Stand-in for a refused value while scanning (scan() keeps going)."""

    def __repr__(self) -> str:
        return "<refused>"


@dataclass(eq=False)
class StorageRef:
    """A ``('storage', type, key, location, numel[, view])`` persistent id."""

    type_name: str  # "FloatStorage", ..., or "UntypedStorage"
    key: str
    location: str
    numel: int  # elements of the typed storage (bytes for UntypedStorage)
    view: tuple[str, int, int] | None  # legacy: (view key, offset, numel)
    offset: int  # where BINPERSID is in the pickle, for messages

    @property
    def torch_dtype(self) -> str:
        """The element type named by the storage type ("uint8" for untyped)."""
        return TORCH_STORAGE_CLASSES.get(self.type_name, "uint8")


@dataclass(eq=False)
class TensorRef:
    """What ``_rebuild_tensor*`` would have built: a strided view of a storage."""

    storage: StorageRef
    offset: int  # storage offset, in elements of ``dtype``
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch dtype name
    parameter: bool = False
    requires_grad: bool = False


class StateDict(OrderedDict):
    """An ``OrderedDict`` from the pickle; ``attrs`` holds what BUILD set on it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.attrs: dict[str, Any] = {}


@dataclass
class GlobalUse:
    name: str
    opcode: str
    offset: int
    verdict: str  # "allowed", "unsupported" or "forbidden"


@dataclass
class PickleResult:
    value: Any
    end: int  # offset just past STOP
    storages: list[StorageRef] = field(default_factory=list)
    globals: list[GlobalUse] = field(default_factory=list)
    opcodes: Counter = field(default_factory=Counter)
    protocol: int | None = None
    findings: list[errors.PickleError] = field(default_factory=list)


_MARK = object()  # never escapes the interpreter


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Machine:
    """One run of the interpreter over ``data[start:]``."""

    def __init__(self, data: bytes | memoryview, start: int, *, path: Any, member: str, scan: bool):
        self.data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self.pos = start
        self.start = start
        self.end = len(data)
        self.path = path
        self.member = member
        self.scan = scan
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.depths: dict[int, tuple[Any, int]] = {}
        self.dispatch = {
            n: getattr(self, "op_" + n) for n in OPCODES.values() if hasattr(self, "op_" + n)
        }
        self.result = PickleResult(None, start)
        self.op_name = ""
        self.op_pos = start

    # ------------------------------------------------------------------ errors
    def error(
        self,
        cls: type[errors.PickleError],
        what: str,
        *,
        expected: Any = None,
        found: Any = None,
        global_name: str | None = None,
    ) -> errors.PickleError:
        if expected is None and found is None:
            expected, found = "a weights-only pickle", f"opcode {self.op_name}"
        exc = cls(
            f"{what} ({self.op_name})",
            path=self.path,
            field=self.member,
            offset=self.op_pos - self.start,
            expected=expected,
            found=found,
        )
        exc.opcode = self.op_name
        exc.global_name = global_name
        return exc

    def refuse(self, cls: type[errors.PickleError], what: str, **kw: Any) -> None:
        """Raise, or while scanning record the refusal and carry on."""
        exc = self.error(cls, what, **kw)
        if not self.scan:
            raise exc
        self.result.findings.append(exc)

    def malformed(self, what: str, **kw: Any) -> errors.PickleError:
        return self.error(errors.MalformedPickle, what, **kw)

    # ------------------------------------------------------------------ reading
    def read(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise self.malformed(
                "pickle ends inside an opcode argument",
                expected=f"{n} more bytes",
                found=f"{self.end - self.pos}",
            )
        b = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return b

    def read_len(self, n: int, limit: int | None = None) -> bytes:
        """Read a length-prefixed argument, checking the length before allocating."""
        left = self.end - self.pos
        if n > left or (limit is not None and n > limit):
            bound = left if limit is None else min(left, limit)
            raise self.error(
                errors.PickleLengthOutOfBounds,
                "length field larger than the pickle allows",
                expected=f"at most {bound} bytes",
                found=f"{n}",
            )
        return self.read(n)

    def readline(self) -> bytes:
        stop = min(self.end, self.pos + MAX_LINE)
        buf = bytes(self.data[self.pos : stop])
        nl = buf.find(b"\n")
        if nl < 0:
            raise self.malformed("text argument without a newline", expected="a line", found="none")
        self.pos += nl + 1
        return buf[:nl]

    def u(self, fmt: str, n: int) -> int:
        return struct.unpack(fmt, self.read(n))[0]

    # ------------------------------------------------------------------ stack
    def pop(self) -> Any:
        if not self.stack:
            raise self.malformed("stack underflow", expected="a value", found="empty stack")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise self.malformed("stack underflow", expected="a value", found="empty stack")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise self.malformed("no MARK to pop to", expected="a MARK", found="none")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def push(self, v: Any) -> None:
        self.stack.append(v)

    # ------------------------------------------------------------------ main loop
    def run(self) -> PickleResult:
        data, res = self.data, self.result
        while True:
            if self.pos >= self.end:
                self.op_pos, self.op_name = self.pos, "EOF"
                raise self.malformed(
                    "pickle ends without STOP", expected="STOP", found="end of data"
                )
            self.op_pos = self.pos
            code = data[self.pos]
            self.pos += 1
            name = OPCODES.get(code)
            if name is None:
                self.op_name = f"0x{code:02x}"
                raise self.malformed(
                    "unknown opcode", expected="a pickle opcode", found=f"byte 0x{code:02x}"
                )
            self.op_name = name
            res.opcodes[name] += 1
            if name == "STOP":
                res.value = self.pop()
                res.end = self.pos
                try:
                    check_depth(res.value, self, expansion_limit(res))
                except errors.PickleTooDeep as e:
                    if not self.scan:
                        raise
                    res.findings.append(e)
                return res
            if name in FORBIDDEN_OPCODES:
                self.refuse(errors.ForbiddenOpcode, "opcode not allowed in a weights-only pickle")
                self.skip_forbidden(name)
                continue
            self.dispatch[name]()

    def skip_forbidden(self, name: str) -> None:
        """While scanning, step over a refused opcode's argument and leave a stand-in."""
        if name in ("EXT1", "EXT2", "EXT4"):
            self.read({"EXT1": 1, "EXT2": 2, "EXT4": 4}[name])
            self.push(Opaque())
        elif name == "INST":
            self.readline()
            self.readline()
            self.pop_mark()
            self.push(Opaque())
        elif name == "OBJ":
            self.pop_mark()
            self.push(Opaque())
        elif name == "NEWOBJ_EX":
            self.pop(), self.pop(), self.pop()
            self.push(Opaque())
        elif name == "PERSID":
            self.readline()
            self.push(Opaque())
        elif name == "NEXT_BUFFER":
            self.push(Opaque())
        elif name == "READONLY_BUFFER":
            self.top()
        else:  # STRING / UNICODE: text argument
            self.readline()
            self.push(Opaque())

    # ------------------------------------------------------------------ framing
    def op_PROTO(self) -> None:
        p = self.read(1)[0]
        if p > 5:
            raise self.malformed("unknown pickle protocol", expected="0..5", found=p)
        self.result.protocol = p

    def op_FRAME(self) -> None:
        n = self.u("<Q", 8)
        if n > self.end - self.pos:
            raise self.error(
                errors.PickleLengthOutOfBounds,
                "frame longer than the pickle",
                expected=f"at most {self.end - self.pos} bytes",
                found=n,
            )

    # ------------------------------------------------------------------ constants
    def op_NONE(self) -> None:
        self.push(None)

    def op_NEWTRUE(self) -> None:
        self.push(True)

    def op_NEWFALSE(self) -> None:
        self.push(False)

    def op_BININT(self) -> None:
        self.push(self.u("<i", 4))

    def op_BININT1(self) -> None:
        self.push(self.read(1)[0])

    def op_BININT2(self) -> None:
        self.push(self.u("<H", 2))

    def _text_int(self) -> int:
        line = self.readline().rstrip(b"L")
        try:
            return int(line, 10)
        except ValueError:
            raise self.malformed(
                "bad integer literal", expected="digits", found=line[:40]
            ) from None

    def op_INT(self) -> None:
        # protocol 0 spells booleans as I00 / I01
        if bytes(self.data[self.pos : self.pos + 3]) in (b"00\n", b"01\n"):
            self.push(self.read(3) == b"01\n")
            return
        self.push(self._text_int())

    def op_LONG(self) -> None:
        self.push(self._text_int())

    def op_LONG1(self) -> None:
        n = self.read(1)[0]
        self.push(int.from_bytes(self.read_len(n), "little", signed=True))

    def op_LONG4(self) -> None:
        n = self.u("<i", 4)
        if n < 0:
            raise self.malformed("negative LONG4 length", expected=">= 0", found=n)
        self.push(int.from_bytes(self.read_len(n, MAX_LONG_BYTES), "little", signed=True))

    def op_FLOAT(self) -> None:
        line = self.readline()
        try:
            self.push(float(line))
        except ValueError:
            raise self.malformed("bad float literal", expected="a float", found=line[:40]) from None

    def op_BINFLOAT(self) -> None:
        self.push(self.u(">d", 8))

    def op_SHORT_BINSTRING(self) -> None:
        # Python 2 str: kept as bytes, like torch's weights-only loader does
        self.push(self.read_len(self.read(1)[0]))

    def op_BINSTRING(self) -> None:
        n = self.u("<i", 4)
        if n < 0:
            raise self.malformed("negative BINSTRING length", expected=">= 0", found=n)
        self.push(self.read_len(n))

    def op_SHORT_BINBYTES(self) -> None:
        self.push(self.read_len(self.read(1)[0]))

    def op_BINBYTES(self) -> None:
        self.push(self.read_len(self.u("<I", 4)))

    def op_BINBYTES8(self) -> None:
        self.push(self.read_len(self.u("<Q", 8)))

    def op_BYTEARRAY8(self) -> None:
        self.push(self.read_len(self.u("<Q", 8)))

    def _str(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise self.malformed("string is not UTF-8", expected="UTF-8", found=raw[:40]) from None

    def op_SHORT_BINUNICODE(self) -> None:
        self.push(self._str(self.read_len(self.read(1)[0])))

    def op_BINUNICODE(self) -> None:
        self.push(self._str(self.read_len(self.u("<I", 4))))

    def op_BINUNICODE8(self) -> None:
        self.push(self._str(self.read_len(self.u("<Q", 8))))

    # ------------------------------------------------------------------ containers
    def op_MARK(self) -> None:
        if len(self.metastack) >= MAX_MARK_DEPTH:
            raise self.error(
                errors.PickleTooDeep,
                "MARK nesting too deep",
                expected=f"at most {MAX_MARK_DEPTH}",
                found="more",
            )
        self.metastack.append(self.stack)
        self.stack = []

    def op_POP(self) -> None:
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def op_POP_MARK(self) -> None:
        self.pop_mark()

    def op_DUP(self) -> None:
        self.push(self.top())

    def op_EMPTY_TUPLE(self) -> None:
        self.push(())

    def op_TUPLE(self) -> None:
        self.push(self._tuple(self.pop_mark()))

    def op_TUPLE1(self) -> None:
        a = self.pop()
        self.push(self._tuple([a]))

    def op_TUPLE2(self) -> None:
        b, a = self.pop(), self.pop()
        self.push(self._tuple([a, b]))

    def op_TUPLE3(self) -> None:
        c, b, a = self.pop(), self.pop(), self.pop()
        self.push(self._tuple([a, b, c]))

    def _tuple(self, items: list[Any], kind: type = tuple) -> Any:
        """A tuple (or frozenset) whose nesting depth is known and bounded.

        hash() and == recurse through nested tuples in C without a recursion
        check, so a deep chain used as a dict key would crash the process.
        Tuples are immutable, so their depth is fixed when they are built.
        """
        depth = 1
        for x in items:
            if type(x) in (tuple, frozenset):
                known = self.depths.get(id(x))
                depth = max(depth, (known[1] if known is not None and known[0] is x else 1) + 1)
        if depth > MAX_CONTAINER_DEPTH:
            raise self.error(
                errors.PickleTooDeep,
                "tuples nested too deeply",
                expected=f"at most {MAX_CONTAINER_DEPTH} levels",
                found="more",
            )
        out = kind(items)
        if depth > 1:
            self.depths[id(out)] = (out, depth)  # holds a reference, so the id stays unique
        return out

    def op_EMPTY_LIST(self) -> None:
        self.push([])

    def op_LIST(self) -> None:
        self.push(self.pop_mark())

    def _target(self, kind: type, what: str) -> Any:
        t = self.top()
        if isinstance(t, Opaque):
            return None
        if not isinstance(t, kind):
            self.refuse(
                errors.ForbiddenCall,
                f"{what} on a {type(t).__name__}",
                expected=kind.__name__,
                found=type(t).__name__,
            )
            return None
        return t

    def op_APPEND(self) -> None:
        v = self.pop()
        t = self._target(list, "APPEND")
        if t is not None:
            t.append(v)

    def op_APPENDS(self) -> None:
        items = self.pop_mark()
        t = self._target(list, "APPENDS")
        if t is not None:
            t.extend(items)

    def op_EMPTY_DICT(self) -> None:
        self.push({})

    def _setitems(self, d: dict | None, items: list[Any]) -> None:
        if d is None:
            return
        for k, v in zip(items[::2], items[1::2]):
            try:
                d[k] = v
            except TypeError:
                raise self.malformed(
                    "unhashable dict key", expected="a hashable key", found=type(k).__name__
                ) from None

    def op_DICT(self) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise self.malformed(
                "odd number of items for DICT", expected="key/value pairs", found=len(items)
            )
        d: dict = {}
        self._setitems(d, items)
        self.push(d)

    def op_SETITEM(self) -> None:
        v, k = self.pop(), self.pop()
        self._setitems(self._target(dict, "SETITEM"), [k, v])

    def op_SETITEMS(self) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise self.malformed(
                "odd number of items for SETITEMS", expected="key/value pairs", found=len(items)
            )
        self._setitems(self._target(dict, "SETITEMS"), items)

    def op_EMPTY_SET(self) -> None:
        self.push(set())

    def _hashables(self, items: list[Any]) -> list[Any]:
        for v in items:
            try:
                hash(v)
            except TypeError:
                raise self.malformed(
                    "unhashable set item", expected="a hashable item", found=type(v).__name__
                ) from None
        return items

    def op_ADDITEMS(self) -> None:
        items = self._hashables(self.pop_mark())
        t = self._target(set, "ADDITEMS")
        if t is not None:
            t.update(items)

    def op_FROZENSET(self) -> None:
        self.push(self._tuple(self._hashables(self.pop_mark()), frozenset))

    # ------------------------------------------------------------------ memo
    def _get(self, i: int) -> None:
        if i not in self.memo:
            raise self.malformed("memo key not set", expected="a key set by PUT", found=i)
        self.push(self.memo[i])

    def op_GET(self) -> None:
        self._get(self._text_int())

    def op_BINGET(self) -> None:
        self._get(self.read(1)[0])

    def op_LONG_BINGET(self) -> None:
        self._get(self.u("<I", 4))

    def op_PUT(self) -> None:
        i = self._text_int()
        if i < 0:
            raise self.malformed("negative memo key", expected=">= 0", found=i)
        self.memo[i] = self.top()

    def op_BINPUT(self) -> None:
        self.memo[self.read(1)[0]] = self.top()

    def op_LONG_BINPUT(self) -> None:
        self.memo[self.u("<I", 4)] = self.top()

    def op_MEMOIZE(self) -> None:
        self.memo[len(self.memo)] = self.top()

    # ------------------------------------------------------------------ globals
    def _global(self, module: str, name: str) -> None:
        full = f"{module}.{name}"
        kind = classify_global(module, name)
        res = self.result
        if kind is not None:
            res.globals.append(GlobalUse(full, self.op_name, self.op_pos - self.start, "allowed"))
            self.push(Global(module, name, kind))
            return
        if full in KNOWN_UNSUPPORTED:
            res.globals.append(
                GlobalUse(full, self.op_name, self.op_pos - self.start, "unsupported")
            )
            self.refuse(
                errors.UnsupportedPickleGlobal,
                "global is weights-only safe but not supported by weightsmith",
                expected="a dense tensor rebuild",
                found=full,
                global_name=full,
            )
        else:
            res.globals.append(GlobalUse(full, self.op_name, self.op_pos - self.start, "forbidden"))
            self.refuse(
                errors.ForbiddenGlobal,
                "global not allowed",
                expected="a weights-only global",
                found=full,
                global_name=full,
            )
        self.push(Opaque())

    def op_GLOBAL(self) -> None:
        module = self.readline()
        name = self.readline()
        try:
            self._global(module.decode("utf-8"), name.decode("utf-8"))
        except UnicodeDecodeError:
            raise self.malformed(
                "GLOBAL name is not UTF-8", expected="UTF-8", found=module[:40] + b" " + name[:40]
            ) from None

    def op_STACK_GLOBAL(self) -> None:
        name, module = self.pop(), self.pop()
        if not (isinstance(module, str) and isinstance(name, str)):
            self.refuse(
                errors.ForbiddenGlobal,
                "STACK_GLOBAL on values that are not strings",
                expected="two str",
                found=f"{type(module).__name__}, {type(name).__name__}",
            )
            self.push(Opaque())
            return
        self._global(module, name)

    # ------------------------------------------------------------------ calls
    def op_REDUCE(self) -> None:
        args = self.pop()
        func = self.pop()
        self.push(self.call(func, args))

    def op_NEWOBJ(self) -> None:
        args = self.pop()
        cls = self.pop()
        if (
            isinstance(cls, Global)
            and cls.kind in ("ordereddict", "set", "frozenset")
            and args == ()
        ):
            self.push(self.call(cls, args))
            return
        if not isinstance(cls, Opaque):
            self.refuse(
                errors.ForbiddenCall,
                "NEWOBJ of a class that may not be created",
                expected="OrderedDict",
                found=_scalar(cls),
            )
        self.push(Opaque())

    def call(self, func: Any, args: Any) -> Any:
        if isinstance(func, Opaque) or isinstance(args, Opaque):
            return Opaque()
        if isinstance(args, tuple) and any(isinstance(a, Opaque) for a in args):
            return Opaque()
        if not isinstance(func, Global) or func.kind in ("dtype", "storage", "tensor_type"):
            shown = repr(func) if isinstance(func, Global) else f"a {type(func).__name__}"
            self.refuse(
                errors.ForbiddenCall,
                "call of something that is not an allowed function",
                expected="an allowed function",
                found=shown[:80],
            )
            return Opaque()
        if not isinstance(args, tuple):
            self.refuse(
                errors.ForbiddenCall,
                "call arguments are not a tuple",
                expected="tuple",
                found=type(args).__name__,
            )
            return Opaque()
        try:
            return getattr(self, "call_" + func.kind)(func, args)
        except _BadArgs as e:
            self.refuse(
                errors.ForbiddenCall,
                f"bad arguments to {func!r}: {e}",
                expected=e.expected,
                found=e.found,
                global_name=repr(func),
            )
            return Opaque()

    def call_ordereddict(self, func: Global, args: tuple) -> StateDict:
        if args == ():
            return StateDict()
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            pairs = args[0]
            if all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
                d = StateDict()
                self._setitems(d, [x for p in pairs for x in p])
                return d
        raise _BadArgs("() or a list of pairs", _shape(args))

    def call_size(self, func: Global, args: tuple) -> tuple[int, ...]:
        if (
            len(args) == 1
            and isinstance(args[0], (list, tuple))
            and all(_is_int(x) for x in args[0])
        ):
            return tuple(args[0])
        raise _BadArgs("a tuple of ints", _shape(args))

    def call_encode(self, func: Global, args: tuple) -> bytes:
        if (
            len(args) == 2
            and isinstance(args[0], str)
            and isinstance(args[1], str)
            and args[1].lower() in _CODECS
        ):
            try:
                return args[0].encode(_CODECS[args[1].lower()])
            except UnicodeEncodeError:
                raise _BadArgs("text encodable in " + args[1], "other text") from None
        raise _BadArgs("(str, 'latin1')", _shape(args))

    def call_set(self, func: Global, args: tuple) -> set:
        if args == ():
            return set()
        if len(args) == 1 and isinstance(args[0], (list, tuple, set, frozenset)):
            return set(self._hashables(list(args[0])))
        raise _BadArgs("() or a list", _shape(args))

    def call_frozenset(self, func: Global, args: tuple) -> frozenset:
        return self._tuple(list(self.call_set(func, args)), frozenset)

    def call_complex(self, func: Global, args: tuple) -> complex:
        if 1 <= len(args) <= 2 and all(isinstance(a, (int, float)) for a in args):
            return complex(*args)
        raise _BadArgs("(real, imag)", _shape(args))

    def call_bytearray(self, func: Global, args: tuple) -> bytes:
        if args == ():
            return b""
        if len(args) == 1 and isinstance(args[0], bytes):
            return args[0]
        raise _BadArgs("bytes", _shape(args))

    def call_from_type(self, func: Global, args: tuple) -> TensorRef:
        # _rebuild_from_type_v2(func, new_type, args, state): a tensor with attributes
        if len(args) == 4 and isinstance(args[0], Global) and args[0].kind == "rebuild":
            new_type = args[1]
            if (
                isinstance(new_type, Global)
                and new_type.kind == "tensor_type"
                and isinstance(args[2], tuple)
            ):
                t = self.call(args[0], args[2])
                if isinstance(t, TensorRef):
                    return replace(t, parameter=t.parameter or new_type.name == "Parameter")
                raise _BadArgs("a tensor rebuild", _shape(args[2]))
        raise _BadArgs("(rebuild function, torch.Tensor or Parameter, args, state)", _shape(args))

    def call_rebuild(self, func: Global, args: tuple) -> TensorRef:
        n = func.name
        if n in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            if len(args) in (3, 4) and isinstance(args[0], TensorRef):
                # a copy: the memo may share args[0] with a plain-tensor entry
                return replace(args[0], parameter=True, requires_grad=bool(args[1]))
            raise _BadArgs("(tensor, requires_grad, hooks[, state])", _shape(args))
        want = {
            "_rebuild_tensor": (4, 4),
            "_rebuild_tensor_v2": (6, 7),
            "_rebuild_tensor_v3": (7, 8),
        }[n]
        if not want[0] <= len(args) <= want[1]:
            raise _BadArgs(f"{want[0]}..{want[1]} arguments", f"{len(args)}")
        storage, offset, size, stride = args[:4]
        if not isinstance(storage, StorageRef):
            raise _BadArgs("a storage (BINPERSID)", type(storage).__name__)
        if not _is_int(offset) or offset < 0:
            raise _BadArgs("a non-negative storage offset", _scalar(offset))
        for what, t in (("size", size), ("stride", stride)):
            if not isinstance(t, (tuple, list)) or not all(_is_int(x) and x >= 0 for x in t):
                raise _BadArgs(f"{what} as a tuple of non-negative ints", _shape(t))
        if len(size) != len(stride):
            raise _BadArgs("size and stride of one length", f"{len(size)} and {len(stride)}")
        dtype = storage.torch_dtype
        if n == "_rebuild_tensor_v3":
            dt = args[6]
            if not (isinstance(dt, Global) and dt.kind == "dtype"):
                raise _BadArgs("a torch dtype", _scalar(dt))
            if storage.type_name != "UntypedStorage" and dt.name != dtype:
                raise _BadArgs(f"dtype {dtype} of {storage.type_name}", dt.name)
            dtype = dt.name
        elif storage.type_name == "UntypedStorage":
            raise _BadArgs("a typed storage", "UntypedStorage without a dtype")
        rg = bool(args[4]) if len(args) > 4 else False
        return TensorRef(storage, offset, tuple(size), tuple(stride), dtype, requires_grad=rg)

    # ------------------------------------------------------------------ BUILD / persistent ids
    def op_BUILD(self) -> None:
        state = self.pop()
        inst = self.top()
        if isinstance(inst, Opaque) or isinstance(state, Opaque):
            return
        if isinstance(inst, StateDict):
            slots = None
            if isinstance(state, tuple) and len(state) == 2:
                state, slots = state
            if all(
                s is None or (isinstance(s, dict) and all(isinstance(k, str) for k in s))
                for s in (state, slots)
            ):
                inst.attrs.update(state or {})
                inst.attrs.update(slots or {})
                return
            self.refuse(
                errors.ForbiddenBuild,
                "BUILD state of an OrderedDict is not a dict of str",
                expected="dict",
                found=type(state).__name__,
            )
            return
        shown = repr(inst) if isinstance(inst, Global) else type(inst).__name__
        self.refuse(
            errors.ForbiddenBuild,
            "BUILD on an object that may not be built",
            expected="OrderedDict",
            found=shown[:80],
        )

    def op_BINPERSID(self) -> None:
        pid = self.pop()
        if isinstance(pid, Opaque) or (
            isinstance(pid, tuple) and any(isinstance(x, Opaque) for x in pid)
        ):
            self.push(Opaque())  # built from something already refused (scan mode only)
            return
        ref = self._storage_ref(pid)
        if ref is None:
            self.refuse(
                errors.ForbiddenPersistentId,
                "persistent id is not a storage",
                expected="('storage', type, key, location, numel)",
                found=_shape(pid),
            )
            self.push(Opaque())
            return
        self.result.storages.append(ref)
        self.push(ref)

    def _storage_ref(self, pid: Any) -> StorageRef | None:
        if not isinstance(pid, tuple) or len(pid) not in (5, 6):
            return None
        tag, stype, key, location, numel = pid[:5]
        if isinstance(tag, bytes):
            tag = tag.decode("ascii", "replace")
        if isinstance(location, bytes):
            location = location.decode("ascii", "replace")
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if (
            tag != "storage"
            or not (isinstance(stype, Global) and stype.kind == "storage")
            or not isinstance(key, str)
            or not isinstance(location, str)
            or not _is_int(numel)
            or numel < 0
        ):
            return None
        view = pid[5] if len(pid) == 6 else None
        if view is not None:
            if not (
                isinstance(view, tuple)
                and len(view) == 3
                and isinstance(view[0], (str, int))
                and _is_int(view[1])
                and _is_int(view[2])
                and view[1] >= 0
                and view[2] >= 0
            ):
                return None
            view = (str(view[0]), view[1], view[2])
        return StorageRef(stype.name, key, location, numel, view, self.op_pos - self.start)


class _BadArgs(Exception):
    def __init__(self, expected: str, found: str) -> None:
        super().__init__(expected)
        self.expected = expected
        self.found = found


def _scalar(v: Any) -> str:
    """repr of a scalar, type name of anything else (repr of a deep container could recurse)."""
    if isinstance(v, (int, float, str, bytes, bool, type(None), Global)):
        return repr(v)[:40]
    return type(v).__name__


def _shape(v: Any) -> str:
    """A short description of a value for messages (never the whole value)."""
    if isinstance(v, tuple):
        return (
            "(" + ", ".join(type(x).__name__ for x in v[:6]) + (", ..." if len(v) > 6 else "") + ")"
        )
    return type(v).__name__


def expansion_limit(res: PickleResult) -> int:
    """How many entries flattening may visit: sharing may repeat entries, not explode them."""
    return 16 * sum(res.opcodes.values()) + 1024


_CONTAINERS = (dict, list, tuple, set, frozenset)


def check_depth(root: Any, m: _Machine | None = None, limit: int | None = None) -> None:
    """Refuse container nesting deeper than MAX_CONTAINER_DEPTH, or cycles.

    An iterative post-order walk that visits each container once (shared
    ones too, so a DAG cannot make it exponential) and computes its height.
    """
    height: dict[int, int] = {}
    size: dict[int, int] = {}
    on_path: set[int] = set()
    keep: list[Any] = []  # ids stay unique while we hold the objects
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        v, leaving = stack.pop()
        if not isinstance(v, (dict, list, tuple, set, frozenset)):
            continue
        i = id(v)
        children = list(v.values()) if isinstance(v, dict) else list(v)
        if isinstance(v, StateDict):
            children.extend(v.attrs.values())
        if leaving:
            on_path.discard(i)
            h = 1 + max((height.get(id(c), 0) for c in children), default=0)
            height[i] = h
            if h > MAX_CONTAINER_DEPTH:
                _too_deep("containers nested too deeply", m)
            # entries a flattening walk would visit: shared containers count each time
            n = 1 + sum(size.get(id(c), 1) for c in children)
            size[i] = n
            if limit is not None and n > limit:
                _too_deep(f"shared containers expand to more than {limit} entries", m)
            continue
        if i in height:
            continue
        if i in on_path:
            _too_deep("container contains itself", m)
        on_path.add(i)
        keep.append(v)
        stack.append((v, True))
        stack.extend((c, False) for c in children if isinstance(c, _CONTAINERS))


def _too_deep(what: str, m: _Machine | None) -> None:
    if m is not None:
        raise m.error(
            errors.PickleTooDeep,
            what,
            expected=f"at most {MAX_CONTAINER_DEPTH} levels, no cycles",
            found="more",
        )
    raise errors.PickleTooDeep(what)


def load(
    data: bytes | memoryview,
    start: int = 0,
    *,
    path: Any = None,
    member: str = "pickle",
) -> PickleResult:
    """Interpret one pickle starting at ``data[start]``; raise on anything refused."""
    return _Machine(data, start, path=path, member=member, scan=False).run()


def scan(
    data: bytes | memoryview,
    start: int = 0,
    *,
    path: Any = None,
    member: str = "pickle",
) -> PickleResult:
    """Walk one pickle recording every global, opcode and refusal; raise nothing.

    A malformed pickle stops the walk; the error is the last finding.
    """
    m = _Machine(data, start, path=path, member=member, scan=True)
    try:
        return m.run()
    except errors.PickleError as e:
        m.result.findings.append(e)
        m.result.end = m.pos
        return m.result


__all__ = [
    "OPCODES",
    "GlobalUse",
    "PickleResult",
    "StateDict",
    "StorageRef",
    "TensorRef",
    "classify_global",
    "load",
    "opcode_class",
    "scan",
]
