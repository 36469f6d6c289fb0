"""validate, edit, split, merge and scan through the console script, and every command's error line.

diff is in tests/test_cli_diff.py, convert in tests/test_cli_convert.py.
"""

from __future__ import annotations

import json
import pickle
import shutil

import gguf
import numpy as np
import pytest
import torch

from support.cli_helpers import assert_one_line_error, run

# --------------------------------------------------------------------------- validate


def test_validate_good_files(remote_tree):
    f = remote_tree.files
    split = sorted((f / "split").glob("*.gguf"))
    for target in (f / "small.safetensors", f / "sharded", f / "model.gguf", split[0]):
        p = run("validate", target)
        assert p.returncode == 0, (target, p.stderr)
        assert p.stdout.startswith("OK  ")


def test_validate_bad_files(tmp_path, remote_tree):
    good = (remote_tree.files / "small.safetensors").read_bytes()
    (tmp_path / "trailing.safetensors").write_bytes(good + b"\0")
    assert_one_line_error(run("validate", tmp_path / "trailing.safetensors"), "TrailingBytes")
    (tmp_path / "short.safetensors").write_bytes(good[:5])
    assert_one_line_error(run("validate", tmp_path / "short.safetensors"), "FileTooSmall")
    # a shard named by the index is missing
    folder = tmp_path / "sharded"
    shutil.copytree(remote_tree.files / "sharded", folder)
    (folder / "model-00002-of-00003.safetensors").unlink()
    assert_one_line_error(run("validate", folder), "MissingShard")


def test_validate_many_reports_each(tmp_path, remote_tree):
    (tmp_path / "bad.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}" + b"x")
    p = run("validate", remote_tree.files / "small.safetensors", tmp_path / "bad.safetensors")
    assert p.returncode == 1
    assert "OK  " in p.stdout
    assert "bad.safetensors: error: TrailingBytes" in p.stderr


def test_validate_remote_header(nginx):
    p = run("validate", f"{nginx.url}/files/small.safetensors")
    assert p.returncode == 0, p.stderr


# --------------------------------------------------------------------------- GGUF edit / split / merge


def test_edit_set_and_remove(tmp_path):
    src = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_name("before")
    w.add_context_length(256)
    w.add_tensor("t", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = tmp_path / "out.gguf"
    p = run(
        "edit", src, "--set", "general.name=after", "--set", "llama.context_length=4096",
        "--set", "my.flag=true:bool", "--set", "my.ratio=0.25:f64", "--remove", "general.architecture",
        "-o", out,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    r = gguf.GGUFReader(str(out))
    f = r.fields
    assert f["general.name"].contents() == "after"
    assert f["llama.context_length"].contents() == 4096
    assert f["llama.context_length"].types == [gguf.GGUFValueType.UINT32]  # kept its type
    assert f["my.flag"].contents() is True and f["my.flag"].types == [gguf.GGUFValueType.BOOL]
    assert f["my.ratio"].contents() == 0.25 and f["my.ratio"].types == [gguf.GGUFValueType.FLOAT64]
    assert "general.architecture" not in f
    assert np.array_equal(r.get_tensor(0).data, np.arange(8, dtype=np.float32))
    assert_one_line_error(run("edit", src, "--set", "llama.context_length=big"), "UsageError")
    assert_one_line_error(run("edit", src), "UsageError")


def test_split_then_merge(tmp_path, remote_tree):
    src = remote_tree.files / "model.gguf"
    p = run("split", src, f"{tmp_path / 'parts'}/", "--max-tensors", "3")
    assert p.returncode == 0, p.stderr
    parts = sorted((tmp_path / "parts").glob("*.gguf"))
    assert len(parts) == 3
    # llama.cpp's split metadata, read by gguf-py
    assert gguf.GGUFReader(str(parts[0])).fields["split.count"].contents() == 3
    p = run("merge", parts[1], tmp_path / "merged.gguf")
    assert p.returncode == 0, p.stderr
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(tmp_path / "merged.gguf"))
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.tensor_type == tb.tensor_type and bytes(ta.data.tobytes()) == bytes(
            tb.data.tobytes()
        )


# --------------------------------------------------------------------------- scan


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_scan_safe_and_unsafe(tmp_path):
    torch.save({"w": torch.ones(2, 2)}, tmp_path / "ok.pth")
    p = run("scan", tmp_path / "ok.pth", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["safe"] is True and d["reasons"] == []
    (tmp_path / "evil.pth").write_bytes(pickle.dumps({"w": Evil()}, protocol=2))
    p = run("scan", tmp_path / "evil.pth")
    assert p.returncode == 1
    assert "NOT weights-only safe" in p.stdout and "system" in p.stdout
    assert "pwned" not in p.stdout + p.stderr  # never executed


# --------------------------------------------------------------------------- error paths


ERROR_CASES = [
    (("inspect", "{bad}.gguf"), "GGUFInvalidMagic"),
    (("inspect", "{missing}"), "UnknownTargetError"),
    (("validate", "{bad}.safetensors"), "HeaderTooLarge"),
    (("diff", "{bad}.gguf", "{bad}.gguf"), "GGUFInvalidMagic"),
    (("diff", "{bad}.safetensors", "{bad}.gguf", "--values"), "HeaderTooLarge"),
    (("convert", "{bad}.gguf", "{tmp}/out"), "GGUFInvalidMagic"),
    (("convert", "{tmp}", "{tmp}/x.gguf"), "MissingModelFile"),
    (("convert", "{tmp}/a.txt", "{tmp}/b.txt"), "UnknownTargetError"),
    (("quantize", "{bad}.gguf", "{tmp}/o.gguf", "--type", "q4_k_m"), "GGUFInvalidMagic"),
    (("edit", "{bad}.gguf", "--set", "a=1"), "GGUFInvalidMagic"),
    (("edit", "{empty}.gguf", "--set", "a=1"), "GGUFInvalidMagic"),
    (("split", "{bad}.gguf", "{tmp}/sp", "--max-size", "1M"), "GGUFInvalidMagic"),
    (("merge", "{bad}.gguf", "{tmp}/m.gguf"), "GGUFInvalidMagic"),
    (("scan", "{missing}.pth"), "FileNotFoundError"),
]


@pytest.mark.parametrize(
    ("argv", "name"), ERROR_CASES, ids=[c[0][0] + str(i) for i, c in enumerate(ERROR_CASES)]
)
def test_every_command_fails_with_one_named_line(tmp_path, argv, name):
    (tmp_path / "bad.gguf").write_bytes(b"garbage, not a GGUF file\n")
    (tmp_path / "bad.safetensors").write_bytes(b"garbage, not a safetensors file\n")
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "a.txt").write_text("x")
    names = {
        "bad": tmp_path / "bad",
        "empty": tmp_path / "empty",
        "missing": tmp_path / "nope",
        "tmp": tmp_path,
    }
    args = [a.format(**names) for a in argv]
    p = run(*args)
    assert_one_line_error(p, name)
    # --debug: the same line, after the traceback
    p = run(*args, "--debug")
    assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: {name}: ")
