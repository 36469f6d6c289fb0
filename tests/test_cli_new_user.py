"""Defects a new user hit (issue 17, part 3), each checked through the console script."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest

import weightsmith.gguf
from support.cli_helpers import run

# --------------------------------------------------------------------------- scan


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_scan_safetensors_and_gguf_hold_no_code(remote_tree):
    for name, layout in (("small.safetensors", "safetensors"), ("model.gguf", "gguf")):
        target = remote_tree.files / name
        p = run("scan", target)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "holds no code" in p.stdout and "NOT" not in p.stdout
        p = run("scan", target, "--json")
        d = json.loads(p.stdout)
        assert p.returncode == 0
        assert (d["layout"], d["holds_code"], d["safe"], d["reasons"]) == (layout, False, True, [])


def test_scan_a_folder(tmp_path, remote_tree):
    import torch

    folder = tmp_path / "model"
    shutil.copytree(remote_tree.files / "sharded", folder)
    torch.save({"w": torch.ones(2)}, folder / "training_args.bin")
    p = run("scan", folder, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["safe"] is True
    assert sorted(f["layout"] for f in d["files"]) == ["safetensors"] * 3 + ["zip"]
    (folder / "optimizer.pt").write_bytes(pickle.dumps({"w": _Evil()}, protocol=2))
    p = run("scan", folder)
    assert p.returncode == 1
    assert "optimizer.pt" in p.stdout and "NOT weights-only safe" in p.stdout
    assert "pwned" not in p.stdout + p.stderr


# --------------------------------------------------------------------------- leftover shards


def _sharded_copy(tmp_path, remote_tree):
    folder = tmp_path / "model"
    shutil.copytree(remote_tree.files / "sharded", folder)
    return folder


def test_leftover_shards_are_stray_not_counted(tmp_path, remote_tree):
    from support.cli_helpers import run_json

    folder = _sharded_copy(tmp_path, remote_tree)
    clean = run_json("inspect", folder)
    # an older save with more shards left one behind: the index does not name it
    shutil.copy(
        folder / "model-00001-of-00003.safetensors", folder / "model-00004-of-00005.safetensors"
    )
    d = run_json("inspect", folder)
    assert d["totals"] == clean["totals"]
    assert d["stray_files"] == ["model-00004-of-00005.safetensors"]
    p = run("inspect", folder, "--no-tensors")
    assert p.returncode == 0, p.stderr
    assert "stray: model-00004-of-00005.safetensors" in p.stdout


def test_two_weight_sets_in_one_folder_are_an_error(tmp_path, remote_tree):
    from support.cli_helpers import assert_one_line_error

    folder = _sharded_copy(tmp_path, remote_tree)
    shutil.copy(remote_tree.files / "small.safetensors", folder / "model.safetensors")
    # beside the index: transformers would load model.safetensors, inspect the index
    for cmd in ("inspect", "validate"):
        p = run(cmd, folder)
        assert_one_line_error(p, "SeveralWeightSets")
        assert "model.safetensors" in p.stderr and "model.safetensors.index.json" in p.stderr
    # shards left without their index (what an unsharded save over a sharded one did)
    (folder / "model.safetensors.index.json").unlink()
    p = run("inspect", folder, "--json")
    assert_one_line_error(p, "SeveralWeightSets")
    assert "model-00001-of-00003.safetensors" in p.stderr and " and model.safetensors" in p.stderr


# --------------------------------------------------------------------------- CLI consistency


def _all_actions():
    import argparse

    from weightsmith.cli._main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    yield "weightsmith", parser
    yield from sub.choices.items()


def test_every_argument_has_help():
    import argparse

    missing = []
    for name, parser in _all_actions():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help:
                missing.append(f"{name} {action.dest}")
    assert missing == []


def test_one_name_for_the_size_limit():
    import argparse

    for name, parser in _all_actions():
        shown = {
            opt
            for a in parser._actions
            if a.help is not argparse.SUPPRESS
            for opt in a.option_strings
        }
        assert not shown & {"--max-shard-size", "--split-max-size"}, name
        if name in ("convert", "split"):
            assert "--max-size" in shown, name


def test_size_limit_writes_shards_under_every_spelling(tmp_path, remote_tree):
    src = remote_tree.files / "small.safetensors"
    for flag in ("--max-size", "--max-shard-size"):  # the old spelling: a hidden alias
        out = tmp_path / flag.strip("-")
        p = run("convert", src, out, flag, "100KB")
        assert p.returncode == 0, p.stderr
        assert (out / "model.safetensors.index.json").is_file()
        assert len(list(out.glob("model-*-of-*.safetensors"))) > 1


def test_mistyped_subcommand_suggests():
    p = run("inpsect", "x")
    assert p.returncode == 2
    assert "did you mean 'inspect'" in p.stderr
    p = run("qunatize", "a", "b")
    assert "did you mean 'quantize'" in p.stderr


def test_convert_gguf_to_gguf_points_to_quantize(tmp_path, remote_tree):
    from support.cli_helpers import assert_one_line_error

    p = run("convert", remote_tree.files / "model.gguf", tmp_path / "b.gguf")
    assert_one_line_error(p, "UsageError")
    assert "weightsmith quantize" in p.stderr
    assert not (tmp_path / "b.gguf").exists()


def test_requantize_refused_names_the_file_and_what_to_do(tmp_path, remote_tree):
    from support.cli_helpers import assert_one_line_error

    src = remote_tree.files / "model.gguf"  # holds Q8_0 tensors
    p = run("quantize", src, tmp_path / "x.gguf", "--type", "q4_0")
    assert_one_line_error(p, "RequantizeRefused")
    assert str(src) in p.stderr and "Q8_0" in p.stderr
    assert "quantize from the F16/BF16/F32 GGUF" in p.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_split_destination_last_part_is_a_file_prefix(tmp_path, remote_tree):
    src = remote_tree.files / "model.gguf"
    p = run("split", src, tmp_path / "out" / "part", "--max-tensors", "4")
    assert p.returncode == 0, p.stderr
    names = sorted(x.name for x in (tmp_path / "out").iterdir())
    assert names and all(n.startswith("part-0000") and n.endswith(".gguf") for n in names)
    assert not (tmp_path / "out" / "part").exists()
    # an existing folder (or a trailing /) gets the source's name
    p = run("split", src, f"{tmp_path / 'dir'}/", "--max-tensors", "4")
    assert p.returncode == 0, p.stderr
    assert (
        sorted(x.name for x in (tmp_path / "dir").iterdir())[0]
        == f"model-00001-of-{len(names):05d}.gguf"
    )


def test_inspect_says_gguf_shapes_are_numpy_order(remote_tree):
    p = run("inspect", remote_tree.files / "model.gguf")
    assert p.returncode == 0, p.stderr
    assert "numpy order" in p.stdout and "gguf-dump" in p.stdout
    p = run("inspect", remote_tree.files / "small.safetensors")
    assert "gguf-dump" not in p.stdout


# --------------------------------------------------------------------------- demo


def test_demo_says_its_files_are_removed_and_how_to_keep_them():
    p = run("demo")
    assert p.returncode == 0, p.stderr
    assert "removed at the end" in p.stdout and "--out DIR" in p.stdout
    assert "removed " in p.stdout.strip().splitlines()[-1]


def test_demo_labels_sizes_and_names_the_model(tmp_path):
    import gguf

    p = run("demo", "--out", tmp_path / "keep")
    assert p.returncode == 0, p.stderr
    assert f"the files are in {tmp_path / 'keep'}" in p.stdout
    assert "removed" not in p.stdout
    assert "tensor data" in p.stdout and "file " in p.stdout and "on disk" in p.stdout
    for t in ("q8_0", "q4_k_m"):
        path = tmp_path / "keep" / f"tiny-llama-{t}.gguf"
        reader = gguf.GGUFReader(str(path))
        name = reader.fields["general.name"].contents()
        assert name == "Tiny Llama", name
        data = sum(int(x.n_bytes) for x in reader.tensors)
        assert f"file {path.stat().st_size:,} bytes = tensor data {data:,}" in p.stdout


# --------------------------------------------------------------------------- quantize fallbacks

_LLAMA_FALLBACK = r"(\d+) of (\d+) tensor\(s\) required fallback quantization"


def _llama_quantize_log(src, dst, ftype: str) -> str:
    """llama.cpp's own log of llama_model_quantize (it prints the fallback count on stderr)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from support.recipe_models import llama_quantize\n"
        "llama_quantize(__import__('pathlib').Path(sys.argv[2]), "
        "__import__('pathlib').Path(sys.argv[3]), sys.argv[4])\n"
    )
    tests = str(Path(__file__).parent)
    p = subprocess.run(
        [sys.executable, "-c", code, tests, str(src), str(dst), ftype],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout + p.stderr


def test_quantize_reports_fallbacks_and_bits_per_weight_like_llama_cpp(tmp_path):
    import re

    import gguf

    from support.recipe_models import ModelSpec, write_model
    from weightsmith.quant.file import quantize_file

    # SmolLM2's widths: 576-wide rows do not fit Q4_K's 256-blocks
    spec = ModelSpec("smol", "llama", 2, 576, 1536, 9, 3)
    src = tmp_path / "f32.gguf"
    write_model(spec, src)
    log = _llama_quantize_log(src, tmp_path / "ref.gguf", "Q4_K_M")
    m = re.search(_LLAMA_FALLBACK, log)
    assert m, log[-2000:]
    n_fallback, n_total = int(m[1]), int(m[2])
    ref = gguf.GGUFReader(str(tmp_path / "ref.gguf"))
    ref_bpw = (
        8 * sum(int(t.n_bytes) for t in ref.tensors) / sum(int(t.n_elements) for t in ref.tensors)
    )

    # the library's result
    res = quantize_file(src, tmp_path / "lib.gguf", "q4_k_m")
    assert (len(res.fallbacks), len(res)) == (n_fallback, n_total)
    assert abs(res.bits_per_weight - ref_bpw) < 1e-9
    # the CLI, text and --json
    p = run("quantize", src, tmp_path / "a.gguf", "--type", "q4_k_m")
    assert p.returncode == 0, p.stderr
    assert f"{n_fallback} of {n_total} tensor(s) required fallback quantization" in p.stdout
    assert f"{ref_bpw:.2f} bits per weight" in p.stdout
    p = run("quantize", src, tmp_path / "b.gguf", "--type", "q4_k_m", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert len(d["fallbacks"]) == n_fallback and d["tensors"] == n_total
    assert abs(d["bits_per_weight"] - ref_bpw) < 1e-5
    assert {f["wanted"] for f in d["fallbacks"]} <= {"Q4_K", "Q6_K", "Q5_K"}


# --------------------------------------------------------------------------- no half-built outputs


@pytest.fixture(scope="module")
def llama_gguf(tmp_path_factory):
    """A tiny Llama HF folder (SentencePiece tokenizer) and its f32 GGUF, made by the CLI."""
    from support import hf_models

    root = tmp_path_factory.mktemp("atomic")
    src = hf_models.build("llama", root / "hf")
    p = run("convert", src, root / "m.gguf", "--type", "f32")
    assert p.returncode == 0, p.stderr
    return root / "m.gguf"


def _tree(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _no_temp_left(parent):
    return [p.name for p in parent.iterdir() if ".wstmp" in p.name or ".wsold" in p.name]


_BLOCK_TOKENIZERS = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('tokenizers', 'sentencepiece'):\n"
    "            raise ImportError(f'blocked: {name}')\n"
    "sys.meta_path.insert(0, Block())\n"
    "from weightsmith.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _run_blocked(*args):
    import subprocess
    import sys

    cmd = [sys.executable, "-c", _BLOCK_TOKENIZERS, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_gguf_to_hf_works_from_the_plain_install(tmp_path, llama_gguf):
    # without tokenizers and sentencepiece: the whole folder, tokenizer included
    out = tmp_path / "out"
    p = _run_blocked("convert", llama_gguf, out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {x.name for x in out.iterdir()}


def test_converters_check_inputs_and_dependencies_before_writing(tmp_path, llama_gguf):
    from support.cli_helpers import assert_one_line_error

    # GGUF -> HF: tokenizer metadata it cannot convert fails before the weights are written
    bad = tmp_path / "bad.gguf"
    p = run("edit", llama_gguf, "--set", "tokenizer.ggml.model=wordpiece", "-o", bad)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    p = run("convert", bad, out)
    assert_one_line_error(p, "TokenizerInconsistent")
    assert not out.exists() and _no_temp_left(tmp_path) == []
    # HF -> GGUF: a missing extra (the SentencePiece reader) fails before the file is written
    hf = llama_gguf.parent / "hf"
    p = _run_blocked("convert", hf, tmp_path / "x.gguf")
    assert p.returncode == 1 and "MissingDependencyError" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad.gguf"]


def test_gguf_to_hf_replaces_an_older_folder_as_a_whole(tmp_path, llama_gguf):
    out = tmp_path / "out"
    p = run("convert", llama_gguf, out, "--max-size", "200KB")
    assert p.returncode == 0, p.stderr
    assert (out / "model.safetensors.index.json").is_file()
    p = run("convert", llama_gguf, out)
    assert p.returncode == 0, p.stderr
    names = sorted(x.name for x in out.iterdir())
    assert not [n for n in names if "-of-" in n or n.endswith(".index.json")], names
    assert "model.safetensors" in names and "config.json" in names
    assert _no_temp_left(tmp_path) == []
    p = run("inspect", out, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["stray_files"] == []


def test_gguf_to_hf_failure_leaves_the_old_folder_intact(tmp_path, llama_gguf, monkeypatch):
    from weightsmith.convert import gguf_to_hf
    from weightsmith.convert import tokenizer as tok_pkg
    from weightsmith.convert.tokenizer import _from_gguf

    out = tmp_path / "out"
    gguf_to_hf(llama_gguf, out, max_shard_size="200KB")
    before = _tree(out)

    def broken(*a, **kw):
        raise RuntimeError("tokenizer metadata rejected")

    monkeypatch.setattr(_from_gguf, "hf_tokenizer_files", broken)
    monkeypatch.setattr(tok_pkg, "hf_tokenizer_files", broken)
    from weightsmith.convert import _gguf_to_hf

    monkeypatch.setattr(_gguf_to_hf, "hf_tokenizer_files", broken, raising=False)
    with pytest.raises(RuntimeError):
        gguf_to_hf(llama_gguf, out)
    assert _tree(out) == before
    assert _no_temp_left(tmp_path) == []


def test_gguf_to_hf_refuses_a_folder_it_cannot_replace_whole(tmp_path, llama_gguf):
    from support.cli_helpers import assert_one_line_error

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes").mkdir()
    p = run("convert", llama_gguf, out)
    assert_one_line_error(p, "OutputFolderRefused")
    assert sorted(x.name for x in out.iterdir()) == ["notes"]
    # the input inside the output folder: replacing it would delete the input
    inside = tmp_path / "in"
    inside.mkdir()
    shutil.copy(llama_gguf, inside / "m.gguf")
    from weightsmith.convert import gguf_to_hf
    from weightsmith.errors import OutputFolderRefused

    with pytest.raises(OutputFolderRefused, match="holds the input"):
        gguf_to_hf(inside / "m.gguf", inside)
    assert sorted(x.name for x in inside.iterdir()) == ["m.gguf"]


def _fail_on_call(monkeypatch, owner, name: str, n: int) -> None:
    """Make ``owner.name`` raise on its ``n``-th call."""
    real = getattr(owner, name)
    calls = [0]

    def wrapper(*a, **kw):
        calls[0] += 1
        if calls[0] == n:
            raise OSError("disk full (simulated)")
        return real(*a, **kw)

    monkeypatch.setattr(owner, name, wrapper)


def test_pth_shards_and_index_appear_together(tmp_path, monkeypatch):
    import torch

    import weightsmith.safetensors as st
    from weightsmith.convert import torch_to_safetensors

    src = tmp_path / "model.pth"
    torch.save({f"w{i}": torch.ones(64, 64) for i in range(6)}, src)
    out = tmp_path / "out"
    out.mkdir()
    _fail_on_call(monkeypatch, st.StreamWriter, "write", 5)  # in the third shard
    with pytest.raises(OSError, match="simulated"):
        torch_to_safetensors(src, out / "model.safetensors", max_shard_size=40_000)
    assert sorted(x.name for x in out.iterdir()) == []
    monkeypatch.undo()
    rep = torch_to_safetensors(src, out / "model.safetensors", max_shard_size=40_000)
    assert len(rep.files) == 4 and sorted(x.name for x in out.iterdir()) == sorted(
        x.rsplit("/", 1)[-1] for x in rep.files
    )


def test_split_gguf_set_appears_together(tmp_path, monkeypatch, remote_tree):
    from weightsmith import gguf
    from weightsmith.gguf import _split

    out = tmp_path / "parts"
    out.mkdir()
    _fail_on_call(monkeypatch, _split, "copy_tensors", 3)
    with pytest.raises(OSError, match="simulated"):
        gguf.split(remote_tree.files / "model.gguf", max_tensors=3, out_dir=out)
    assert sorted(x.name for x in out.iterdir()) == []


# every optional extra blocked; tokenizers and sentencepiece are core
_BLOCK_EXTRAS = _BLOCK_TOKENIZERS.replace(
    "('tokenizers', 'sentencepiece')",
    "('torch', 'transformers', 'rich', 'httpx', 'fsspec', 'safetensors', 'gguf', 'jsonschema',"
    " 'llama_cpp', 'jax', 'tensorflow', 'paddle', 'mlx')",
)


def test_hf_to_gguf_with_its_tokenizer_works_from_the_plain_install(tmp_path, llama_gguf):
    import subprocess
    import sys

    hf = llama_gguf.parent / "hf"
    out = tmp_path / "m.gguf"
    cmd = [sys.executable, "-c", _BLOCK_EXTRAS, "convert", str(hf), str(out), "--type", "q8_0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    with weightsmith.gguf.read(out) as f:
        assert f.metadata["tokenizer.ggml.model"] == "llama"
        assert len(f.metadata["tokenizer.ggml.tokens"]) > 0
