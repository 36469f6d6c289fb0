"""Defects a new user hit (issue 17, part 3), each checked through the console script."""

from __future__ import annotations

import json
import pickle
import shutil

from cli_helpers import run

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
    from cli_helpers import run_json

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
    from cli_helpers import assert_one_line_error

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
    from cli_helpers import assert_one_line_error

    p = run("convert", remote_tree.files / "model.gguf", tmp_path / "b.gguf")
    assert_one_line_error(p, "UsageError")
    assert "weightsmith quantize" in p.stderr
    assert not (tmp_path / "b.gguf").exists()


def test_requantize_refused_names_the_file_and_what_to_do(tmp_path, remote_tree):
    from cli_helpers import assert_one_line_error

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
        "from recipe_models import llama_quantize\n"
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

    from recipe_models import ModelSpec, write_model
    from weightsmith.quant._file import quantize_file

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
