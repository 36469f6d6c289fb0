"""A hostile corpus: every pickle is refused before anything in it could run.

Each case is spelled opcode by opcode.  The payloads try to create a
sentinel file; the test checks the refusal (class, opcode, global, byte
offset) and that the sentinel never appears.  A few of them are run through
the real ``pickle.loads`` in a subprocess to show the payloads are live.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.torchfile_helpers import (
    APPEND,
    BINPERSID,
    BUILD,
    EMPTY_DICT,
    EMPTY_LIST,
    EMPTY_TUPLE,
    MARK,
    PROTO2,
    PROTO4,
    PROTO5,
    REDUCE,
    STOP,
    TUPLE,
    dict_,
    get,
    glob,
    i,
    make_zip,
    put,
    s,
    short_s,
    storage,
    tensor_v2,
    tup,
)
from weightsmith import errors, torchfile
from weightsmith.torchfile import _pickle

SENTINEL = "pwned_sentinel"


@dataclass
class Case:
    name: str
    parts: list[bytes]  # parts[bad] is the opcode that must be refused
    bad: int
    opcode: str
    global_name: str | None = None
    cls: type = errors.UnsafePickleError

    @property
    def data(self) -> bytes:
        return b"".join(self.parts)

    @property
    def offset(self) -> int:
        return len(b"".join(self.parts[: self.bad]))


def _call(module: str, name: str, *args: bytes, proto: bytes = PROTO2) -> Case:
    """module.name(*args) via GLOBAL + REDUCE."""
    return Case(
        f"{module}.{name}",
        [proto, glob(module, name), tup(*args) + REDUCE + STOP],
        1,
        "GLOBAL",
        f"{module}.{name}",
    )


CMD = f"touch {SENTINEL}"
PY = f"open({SENTINEL!r}, 'w').close()"
SAFE_STATE = glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE


def _corpus(tmp: Path) -> list[Case]:
    script = tmp / "payload.py"
    script.write_text(PY)
    cases = [
        _call("os", "system", s(CMD)),
        _call("posix", "system", s(CMD)),
        Case(
            "os.system STACK_GLOBAL",
            [PROTO4, short_s("os"), short_s("system"), b"\x93", tup(s(CMD)) + REDUCE + STOP],
            3,
            "STACK_GLOBAL",
            "os.system",
        ),
        Case("os.system INST", [PROTO2, MARK + s(CMD), b"ios\nsystem\n", STOP], 2, "INST"),
        Case(
            "os.system OBJ",
            [PROTO2, MARK, glob("os", "system"), s(CMD) + b"o" + STOP],
            2,
            "GLOBAL",
            "os.system",
        ),
        Case(
            "OBJ on an allowed class",
            [PROTO2, MARK + glob("collections", "OrderedDict"), b"o", STOP],
            2,
            "OBJ",
        ),
        Case(
            "INST on an allowed class",
            [PROTO2, MARK, b"icollections\nOrderedDict\n", STOP],
            2,
            "INST",
        ),
        _call("builtins", "eval", s(PY)),
        _call("builtins", "exec", s(PY)),
        _call("__builtin__", "eval", s(PY)),
        Case(
            "builtins.getattr",
            [PROTO2, glob("builtins", "getattr"), tup(SAFE_STATE, s("__init__")) + REDUCE + STOP],
            1,
            "GLOBAL",
            "builtins.getattr",
        ),
        _call("builtins", "__import__", s("os")),
        _call("pip", "main", tup(s("install"), s("evil"))),
        _call("pip._internal", "main", tup(s("install"), s("evil"))),
        _call("pkgutil", "resolve_name", s("os:system")),
        _call("runpy", "run_path", s(str(script))),
        _call("runpy", "_run_code", s(PY), EMPTY_DICT),
        _call("subprocess", "Popen", tup(s("touch"), s(SENTINEL))),
        _call("subprocess", "check_output", s(CMD)),
        _call("webbrowser", "open", s("https://example.invalid/")),
        _call("torch.storage", "_load_from_bytes", b"C\x00"),
        _call("torch", "os.system", s(CMD)),
        _call("torch.serialization", "load", s("evil.pt")),
        _call("numpy", "load", s("evil.npy")),
        Case(
            "nested REDUCE on a call result",
            [PROTO2, SAFE_STATE, tup(s(CMD)), REDUCE, STOP],
            3,
            "REDUCE",
        ),
        Case(
            "REDUCE on _codecs.encode result",
            [
                PROTO2,
                glob("_codecs", "encode") + tup(s("x"), s("latin1")) + REDUCE,
                EMPTY_TUPLE,
                REDUCE,
                STOP,
            ],
            3,
            "REDUCE",
        ),
        Case(
            "REDUCE on a storage type",
            [PROTO2, glob("torch", "FloatStorage") + tup(i(10)), REDUCE, STOP],
            2,
            "REDUCE",
        ),
        Case(
            "REDUCE on a dtype",
            [PROTO2, glob("torch", "float32") + EMPTY_TUPLE, REDUCE, STOP],
            2,
            "REDUCE",
        ),
        Case(
            "REDUCE with bad rebuild args",
            [
                PROTO2,
                glob("torch._utils", "_rebuild_tensor_v2")
                + tup(s("x"), i(0), tup(), tup(), b"\x89", EMPTY_DICT),
                REDUCE,
                STOP,
            ],
            2,
            "REDUCE",
        ),
        Case(
            "_codecs.encode with another codec",
            [PROTO2, glob("_codecs", "encode") + tup(s("x"), s("rot13")), REDUCE, STOP],
            2,
            "REDUCE",
        ),
        Case(
            "BUILD on an arbitrary class",
            [PROTO2, glob("evil.module", "Klass"), dict_(("x", i(1))) + BUILD + STOP],
            1,
            "GLOBAL",
            "evil.module.Klass",
        ),
        Case(
            "BUILD __setstate__ on a list",
            [PROTO2, EMPTY_LIST + dict_(("__setstate__", s(CMD))), BUILD, STOP],
            2,
            "BUILD",
        ),
        Case(
            "BUILD on a dict",
            [PROTO2, EMPTY_DICT + dict_(("__class__", s("os"))), BUILD, STOP],
            2,
            "BUILD",
        ),
        Case(
            "BUILD on a tensor",
            [
                PROTO2,
                tensor_v2(storage("FloatStorage", "0", 1), 0, (1,), (1,)) + tup(i(1)),
                BUILD,
                STOP,
            ],
            2,
            "BUILD",
        ),
        Case(
            "BUILD on a global token",
            [PROTO2, glob("torch", "Size") + dict_(("x", i(1))), BUILD, STOP],
            2,
            "BUILD",
        ),
        Case(
            "memo: allowed global overwritten by a banned one",
            [
                PROTO2,
                glob("collections", "OrderedDict") + put(0) + b"0",
                glob("os", "system"),
                put(0) + b"0" + get(0) + tup(s(CMD)) + REDUCE + STOP,
            ],
            2,
            "GLOBAL",
            "os.system",
        ),
        Case(
            "memo: STACK_GLOBAL names swapped in the memo",
            [
                PROTO4,
                short_s("collections")
                + put(0)
                + short_s("OrderedDict")
                + put(1)
                + b"00"
                + short_s("os")
                + put(0)
                + short_s("system")
                + put(1)
                + b"00"
                + get(0)
                + get(1),
                b"\x93",
                EMPTY_TUPLE + REDUCE + STOP,
            ],
            2,
            "STACK_GLOBAL",
            "os.system",
        ),
        Case(
            "memo: GET of a key never PUT",
            [PROTO2, get(7), EMPTY_TUPLE + REDUCE + STOP],
            1,
            "BINGET",
            cls=errors.MalformedPickle,
        ),
        Case(
            "STACK_GLOBAL on non-strings",
            [PROTO4, SAFE_STATE + i(3), b"\x93", STOP],
            2,
            "STACK_GLOBAL",
        ),
        Case(
            "broken pickle: payload then garbage",
            [PROTO2, glob("os", "system"), tup(s(CMD)) + REDUCE + b"\xff\xfe garbage"],
            1,
            "GLOBAL",
            "os.system",
        ),
        Case(
            "broken pickle: payload then no STOP",
            [PROTO2, glob("os", "system"), tup(s(CMD)) + REDUCE],
            1,
            "GLOBAL",
            "os.system",
        ),
        Case(
            "broken pickle: payload then truncated string",
            [PROTO2, glob("subprocess", "call"), tup(s(CMD)) + REDUCE + b"X\x10\x00\x00\x00ab"],
            1,
            "GLOBAL",
            "subprocess.call",
        ),
        Case(
            "huge LONG4",
            [PROTO2, b"\x8b" + struct.pack("<i", 2**31 - 1), b"\x00" * 16 + STOP],
            1,
            "LONG4",
            cls=errors.PickleLengthOutOfBounds,
        ),
        Case(
            "huge BINUNICODE",
            [PROTO2, b"X" + struct.pack("<I", 2**32 - 1), b"abc" + STOP],
            1,
            "BINUNICODE",
            cls=errors.PickleLengthOutOfBounds,
        ),
        Case(
            "huge BINUNICODE8",
            [PROTO4, b"\x8d" + struct.pack("<Q", 2**63), b"abc" + STOP],
            1,
            "BINUNICODE8",
            cls=errors.PickleLengthOutOfBounds,
        ),
        Case(
            "huge BINBYTES8",
            [PROTO4, b"\x8e" + struct.pack("<Q", 2**64 - 1), b"abc" + STOP],
            1,
            "BINBYTES8",
            cls=errors.PickleLengthOutOfBounds,
        ),
        Case(
            "huge FRAME",
            [PROTO4, b"\x95" + struct.pack("<Q", 2**62), STOP],
            1,
            "FRAME",
            cls=errors.PickleLengthOutOfBounds,
        ),
        Case(
            "deep MARK nesting",
            [PROTO2, MARK * _pickle.MAX_MARK_DEPTH, MARK * 100_000 + STOP],
            2,
            "MARK",
            cls=errors.PickleTooDeep,
        ),
        Case(
            "deep list nesting through the memo",
            [
                PROTO2,
                EMPTY_LIST
                + put(0)
                + (
                    EMPTY_LIST
                    + put(1)
                    + b"0"
                    + get(0)
                    + get(1)
                    + APPEND
                    + b"0"
                    + get(1)
                    + put(0)
                    + b"0"
                )
                * 5000,
                STOP,
            ],
            2,
            "STOP",
            cls=errors.PickleTooDeep,
        ),
        Case(
            "deep tuple chain used as a dict key (hash() would overflow the C stack)",
            [
                PROTO2,
                EMPTY_DICT + i(1) + b"\x85" * _pickle.MAX_CONTAINER_DEPTH,
                b"\x85",
                b"\x85" * 1_000_000 + i(2) + b"s" + STOP,
            ],
            2,
            "TUPLE1",
            cls=errors.PickleTooDeep,
        ),
        Case(
            "shared lists that expand exponentially (2**100 entries)",
            [
                PROTO2,
                EMPTY_LIST
                + put(0)
                + (MARK + get(0) + get(0) + b"l" + put(0) + b"0") * 100
                + get(0),
                STOP,
            ],
            2,
            "STOP",
            cls=errors.PickleTooDeep,
        ),
        Case(
            "list that contains itself",
            [PROTO2, EMPTY_LIST + put(0) + get(0) + APPEND, STOP],
            2,
            "STOP",
            cls=errors.PickleTooDeep,
        ),
        Case(
            "persistent id that is not a storage",
            [PROTO2, tup(s("module"), s("os"), s("x")), BINPERSID, STOP],
            2,
            "BINPERSID",
        ),
        Case(
            "persistent id with a banned storage type",
            [PROTO2, MARK + s("storage"), glob("os", "system"), TUPLE + BINPERSID + STOP],
            2,
            "GLOBAL",
            "os.system",
        ),
        Case("text PERSID", [PROTO2, b"Pevil\n", STOP], 1, "PERSID"),
        Case("NEXT_BUFFER", [PROTO5, b"\x97", STOP], 1, "NEXT_BUFFER"),
        Case("READONLY_BUFFER", [PROTO5, s("x"), b"\x98", STOP], 2, "READONLY_BUFFER"),
        Case(
            "EXT1 extension registry", [PROTO2, b"\x82\x01", EMPTY_TUPLE + REDUCE + STOP], 1, "EXT1"
        ),
        Case("EXT4 extension registry", [PROTO2, b"\x84\x01\x00\x00\x00", STOP], 1, "EXT4"),
        Case(
            "NEWOBJ_EX",
            [PROTO4, glob("collections", "OrderedDict") + EMPTY_TUPLE + EMPTY_DICT, b"\x92", STOP],
            2,
            "NEWOBJ_EX",
        ),
        Case(
            "NEWOBJ on torch.Size",
            [PROTO2, glob("torch", "Size") + tup(i(1)), b"\x81", STOP],
            2,
            "NEWOBJ",
        ),
        Case(
            "GLOBAL with a NUL in the module",
            [PROTO2, glob("os\x00", "system"), STOP],
            1,
            "GLOBAL",
            "os\x00.system",
        ),
        Case("protocol-0 STRING", [PROTO2, b"S'x'\n", STOP], 1, "STRING"),
    ]
    return cases


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Case]:
    return _corpus(tmp_path_factory.mktemp("corpus"))


def test_corpus_is_large_enough(corpus):
    assert len(corpus) >= 30
    names = {c.global_name for c in corpus}
    for g in ("os.system", "builtins.eval", "builtins.exec", "builtins.getattr", "builtins.__import__", "pip.main",
              "pkgutil.resolve_name", "runpy.run_path", "subprocess.Popen", "webbrowser.open"):  # fmt: skip
        assert g in names


def _check(exc: errors.UnsafePickleError, case: Case) -> None:
    assert isinstance(exc, case.cls), (case.name, type(exc), exc)
    assert exc.offset == case.offset, (case.name, exc)
    assert exc.opcode == case.opcode, (case.name, exc)
    assert case.opcode in str(exc) and f"offset {case.offset}" in str(exc)
    if case.global_name:
        assert exc.global_name == case.global_name
        assert case.global_name in str(exc)


def _layouts(tmp: Path, case: Case, k: int) -> list[Path]:
    """The pickle as data.pkl of a zip (normal and oddly named archive) and as a legacy file."""
    z = make_zip(tmp / f"c{k}.pt", case.data, {})
    odd = make_zip(tmp / f"o{k}.pt", case.data, {}, archive="..\\ü .. odd\u202efolder")
    legacy = tmp / f"l{k}.pt"
    legacy.write_bytes(case.data)
    return [z, odd, legacy]


def test_every_case_is_refused(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for k, case in enumerate(corpus):
        with pytest.raises(errors.UnsafePickleError) as e:
            _pickle.load(case.data, member="data.pkl")
        _check(e.value, case)
        for p in _layouts(tmp_path, case, k):
            with pytest.raises(errors.UnsafePickleError) as e:
                torchfile.open(p)
            _check(e.value, case)
            rep = torchfile.scan(p)
            assert not rep.safe, (case.name, str(rep))
            if case.global_name:
                assert case.global_name in rep.globals
        assert not (tmp_path / SENTINEL).exists()
    assert not any(SENTINEL in str(q) for q in Path(tmp_path).rglob("*"))


def test_scan_lists_everything_past_the_first_refusal(tmp_path):
    data = (
        PROTO2
        + glob("os", "system") + tup(s(CMD)) + REDUCE + b"0"
        + glob("builtins", "eval") + tup(s(PY)) + REDUCE + b"0"
        + MARK + b"isubprocess\ncall\n" + b"0"
        + dict_(("w", tensor_v2(storage("FloatStorage", "0", 1), 0, (1,), (1,))))
        + STOP
    )  # fmt: skip
    p = make_zip(tmp_path / "x.pt", data, {"0": bytes(4)})
    rep = torchfile.scan(p)
    assert not rep.safe
    assert rep.globals[:2] == ["os.system", "builtins.eval"]
    assert "torch._utils._rebuild_tensor_v2" in rep.globals
    assert rep.opcode_classes["instantiate"] == 1 and rep.opcode_classes["call"] >= 2
    assert len(rep.reasons) == 3
    assert "os.system" in str(rep)


def test_scan_checks_every_pkl_member(tmp_path):
    p = tmp_path / "x.pt"
    good = PROTO2 + dict_(("w", tensor_v2(storage("FloatStorage", "0", 1), 0, (1,), (1,)))) + STOP
    make_zip(p, good, {"0": bytes(4)})
    with zipfile.ZipFile(p, "a") as z:
        z.writestr(
            "archive/extra/constants.pkl",
            PROTO2 + glob("os", "system") + tup(s(CMD)) + REDUCE + STOP,
        )
    rep = torchfile.scan(p)
    assert not rep.safe and "os.system" in rep.globals
    with torchfile.open(p) as ck:  # open() runs data.pkl only; the other pickle never runs
        assert ck["w"].tolist() == [0.0]


def test_no_allocation_for_huge_lengths():
    # 4 GiB claimed by a 20-byte pickle: refused before any buffer is made
    case = PROTO2 + b"X" + struct.pack("<I", 2**32 - 1) + b"abc" + STOP
    with pytest.raises(errors.PickleLengthOutOfBounds) as e:
        _pickle.load(case)
    assert "at most 4 bytes" in str(e.value)


LIVE = ["os.system", "builtins.exec", "subprocess.Popen", "runpy.run_path", "memo: allowed global overwritten by a banned one",
        "broken pickle: payload then garbage"]  # fmt: skip


def test_payloads_are_live_under_real_pickle(corpus, tmp_path):
    """The real unpickler runs these payloads: our refusal is what stops them."""
    for case in (c for c in corpus if c.name in LIVE):
        work = tmp_path / f"live{LIVE.index(case.name)}"
        work.mkdir()
        (work / "p.pkl").write_bytes(case.data)
        code = "import pickle\ntry:\n    pickle.loads(open('p.pkl','rb').read())\nexcept Exception:\n    pass\n"
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=work,
            check=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": ""},
        )
        assert (work / SENTINEL).exists(), case.name


def test_mutated_checkpoints_only_raise_named_errors(tmp_path):
    """Random byte flips, cuts and insertions in real pickles: a named error or a clean read."""
    import random

    import torch

    rng = random.Random(5)
    obj = {
        "m": torch.nn.Linear(3, 2).state_dict(),
        "e": 3,
        "l": [torch.ones(2), (1, 2.5, "x")],
        "t": torch.arange(6).reshape(2, 3).t(),
    }
    torch.save(obj, tmp_path / "z.pt")
    torch.save(obj, tmp_path / "l.pt", _use_new_zipfile_serialization=False)
    with zipfile.ZipFile(tmp_path / "z.pt") as z:
        pkl = z.read("z/data.pkl")
        storages = {n.rsplit("/", 1)[1]: z.read(n) for n in z.namelist() if "/data/" in n}
    legacy = (tmp_path / "l.pt").read_bytes()
    target = tmp_path / "m.pt"
    for it in range(400):
        d = bytearray(pkl if it % 2 == 0 else legacy)
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(min(len(d), 700))
            r = rng.random()
            if r < 0.5:
                d[k] = rng.randrange(256)
            elif r < 0.7:
                del d[k : k + rng.randint(1, 8)]
            else:
                d[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        if it % 2 == 0:
            make_zip(target, bytes(d), storages, archive="z")
        else:
            target.write_bytes(bytes(d))
        try:
            with torchfile.open(target) as ck:
                for n in ck:
                    ck[n].copy()
        except errors.WeightsmithError:
            pass
        torchfile.scan(target)  # never raises on a readable file
