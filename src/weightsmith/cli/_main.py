"""The ``weightsmith`` command: argument parsing, dispatch and error reporting.

A thin layer: every subcommand calls one library function.  Parsing uses the
standard library's argparse, so the core command needs no extra dependency;
rich (the ``cli`` extra) only makes tables and progress bars nicer on a
terminal.  Errors print one line, ``error: <ErrorClass>: <message>``, and
exit 1; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from .. import __version__
from ..errors import WeightsmithError
from ._output import error_line

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's formatter with the width given: without it, argparse imports shutil
    (and with it bz2 and lzma) on every start, a large part of ``--help``'s time."""
    try:
        width = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
    except (ValueError, OSError):
        width = 80
    return argparse.HelpFormatter(prog, width=width - 2)


def _common() -> argparse.ArgumentParser:
    # default=SUPPRESS lets the flags go before or after the subcommand name
    p = argparse.ArgumentParser(add_help=False, formatter_class=_formatter)
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="no progress bars and no chatter",
    )
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="weightsmith",
        description="Read, validate, write, quantize and convert safetensors and GGUF files.",
        parents=[common],
        formatter_class=_formatter,
    )
    parser.add_argument("--version", action="version", version=f"weightsmith {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help, description=help, parents=[common], formatter_class=_formatter
        )

    p = add("demo", "write a small Llama-shaped checkpoint, show its header, load it back")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="keep the files in this folder (default: a temp folder, removed at the end)",
    )

    p = add("inspect", "show the header, tensors, layer tree and parameter counts of a model")
    p.add_argument(
        "target",
        help="file, folder, *.index.json, split GGUF shard, URL, hf://ORG/REPO[@REV][/PATH] or ORG/REPO",
    )
    p.add_argument(
        "--json", action="store_true", help="machine-readable output (docs/cli-json-schema.json)"
    )
    p.add_argument("--tensors", metavar="PATTERN", help="only tensors matching a glob or substring")
    p.add_argument("--no-tensors", action="store_true", help="leave out the tensor table")
    p.add_argument(
        "--all-layers", action="store_true", help="list every layer, even identical ones"
    )
    _remote_args(p)

    p = add("validate", "strict check of a file or folder, data coverage included; exit 0 or 1")
    p.add_argument(
        "targets", nargs="+", metavar="TARGET", help="files, folders, indexes or URLs to check"
    )
    _remote_args(p)

    p = add("diff", "compare tensor sets, shapes and dtypes (and values with --values)")
    p.add_argument("a", help="first model: file, folder, index or URL")
    p.add_argument("b", help="second model: file, folder, index or URL")
    p.add_argument("--values", action="store_true", help="per-tensor RMSE, max abs error, cosine")
    p.add_argument(
        "--json",
        action="store_true",
        help="machine-readable output (docs/cli-diff-json-schema.json)",
    )
    _remote_args(p)

    p = add(
        "convert",
        "convert between formats: .pth -> safetensors, HF <-> GGUF, Meta original -> HF, "
        "safetensors -> safetensors",
    )
    p.add_argument(
        "src",
        help="HF folder, .safetensors, .gguf (any shard), .pth/.bin, a Meta original folder "
        "(params.json + consolidated.NN.pth) or, to .gguf, a Mistral original folder "
        "(params.json + consolidated.safetensors + tekken.json or tokenizer.model.v*)",
    )
    p.add_argument("dst", help="output: a folder, a .safetensors file or a .gguf file")
    p.add_argument("--type", dest="type", help="output dtype or ggml type (bf16, f16, q8_0, ...)")
    _max_size_arg(p, "at most this much per file: safetensors shards + index, or a split GGUF set")
    p.add_argument("--imatrix", help="importance matrix for HF -> GGUF quantized types")
    p.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="HF <-> GGUF: weights and config only (no tokenizer keys or files)",
    )
    p.add_argument(
        "--mmproj",
        nargs="?",
        const="",
        metavar="PATH",
        help="HF (or Mistral original) -> GGUF of a vision-language model: also write its "
        "vision projector "
        "(default path: mmproj-<DST name> beside DST); GGUF -> HF: the projector GGUF "
        "to read with the text GGUF (one *ForConditionalGeneration folder)",
    )
    p.add_argument(
        "--llama-version",
        choices=["1", "2", "3", "3.1", "3.2", "3.3"],
        help="Meta original folder: the Llama generation, when params.json cannot tell",
    )
    p.add_argument(
        "--mistral-format",
        action="store_true",
        help="to .gguf: read SRC as Mistral's original layout even when it also holds a "
        "config.json (as llama.cpp's convert_hf_to_gguf.py --mistral-format)",
    )
    mtp = p.add_mutually_exclusive_group()
    mtp.add_argument(
        "--mtp",
        dest="mtp",
        action="store_const",
        const="only",
        help="HF -> GGUF: only the multi-token-prediction (NextN) blocks, with the embedding, "
        "final norm and head they share: a speculative draft (as convert_hf_to_gguf.py --mtp)",
    )
    mtp.add_argument(
        "--no-mtp",
        "--no-nextn",
        dest="mtp",
        action="store_const",
        const="drop",
        help="HF -> GGUF: leave out the multi-token-prediction (NextN) blocks "
        "(as convert_hf_to_gguf.py --no-mtp)",
    )
    _ray_arg(p)
    _stream_args(p)

    p = add("quantize", "requantize a GGUF file from f32/f16/bf16 tensors")
    p.add_argument("src", help="GGUF file with f32/f16/bf16 tensors")
    p.add_argument("dst", help="GGUF file to write")
    p.add_argument("--type", dest="type", required=True, help="q4_k_m, q8_0, iq4_xs, ...")
    p.add_argument("--imatrix", help="importance matrix file")
    p.add_argument(
        "--json",
        action="store_true",
        help="machine-readable result: types, fallbacks, bits per weight",
    )
    _ray_arg(p)
    _stream_args(p)

    p = add(
        "batch-quantize",
        "several quantizations of one GGUF model, reading the source once",
    )
    p.add_argument("src", help="GGUF file with f32/f16/bf16 tensors")
    p.add_argument(
        "--types", required=True, help="comma-separated file types, e.g. q4_k_m,q5_k_m,q8_0"
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder for SRC-TYPE.gguf (e.g. model-Q4_K_M.gguf)",
    )
    p.add_argument("--imatrix", help="importance matrix file")
    _ray_arg(p)
    _stream_args(p)

    p = add("edit", "set or remove GGUF metadata keys")
    p.add_argument("file", help="GGUF file (edited in place unless -o)")
    p.add_argument(
        "--set",
        dest="set_",
        action="append",
        default=[],
        metavar="KEY=VALUE[:TYPE]",
        help="set a key (repeatable); TYPE is a GGUF type such as u32 or str, "
        "else the key's current type, else guessed",
    )
    p.add_argument(
        "--remove", action="append", default=[], metavar="KEY", help="remove a key (repeatable)"
    )
    p.add_argument("-o", "--output", help="write to this file instead of editing in place")

    p = add("split", "split a GGUF file into shards")
    p.add_argument("src", help="GGUF file to split")
    p.add_argument(
        "dst",
        help="out/prefix writes out/prefix-00001-of-0000N.gguf ...; "
        "an existing folder or one ending in / gets SRC's name",
    )
    g = p.add_mutually_exclusive_group(required=True)
    _max_size_arg(g, "at most this much tensor data per shard", aliases=False)
    g.add_argument("--max-tensors", type=int, help="at most this many tensors per shard")

    p = add("merge", "merge a split GGUF set into one file")
    p.add_argument("src", help="any shard of the set")
    p.add_argument("dst", help="GGUF file to write")

    p = add(
        "scan",
        "safety report: what a checkpoint's pickles would do (nothing is executed); "
        "safetensors and GGUF hold no code",
    )
    p.add_argument("file", help="checkpoint file (.pth/.pt/.bin/.safetensors/.gguf) or folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _max_size_arg(p, what: str, *, aliases: bool = True) -> None:
    """``--max-size``: the one name of the size limit (convert, split).

    The older spellings of convert (``--max-shard-size``, ``--split-max-size``)
    stay accepted, hidden from --help, so existing scripts keep working.
    """
    p.add_argument("--max-size", dest="max_size", metavar="SIZE", help=f'{what} (e.g. "2GB")')
    if aliases:
        for old in ("--max-shard-size", "--split-max-size"):
            p.add_argument(old, dest="max_size", help=argparse.SUPPRESS)


def _ray_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="quantize on this Ray cluster (host:port, or 'auto'); every node must see SRC "
        "at the same path (needs weightsmith[ray])",
    )


def _stream_args(p: argparse.ArgumentParser) -> None:
    """Options of a remote source (hf://, https://, s3:// ...) read while converting."""
    p.add_argument("--token", help="Hub/HTTP bearer token for a remote SRC (default: $HF_TOKEN)")
    p.add_argument(
        "--endpoint", help="Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co)"
    )
    p.add_argument(
        "--cache-dir", help="remote SRC: keep fetched blocks in this folder (off by default)"
    )
    p.add_argument(
        "--cache-size", default="8GB", help="remote SRC: block cache limit (default 8GB)"
    )


def _remote_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token", help="Hub/HTTP bearer token (default: $HF_TOKEN)")
    p.add_argument(
        "--endpoint", help="Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co)"
    )
    p.add_argument("--jobs", type=int, default=8, help="shard headers fetched at once (default 8)")


def _unknown_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """``unknown command 'X'; did you mean 'Y'?`` for a mistyped subcommand, else None."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in commands:
        return None
    close = difflib.get_close_matches(word, list(commands), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown command {word!r}{hint} (commands: {', '.join(commands)})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    unknown = _unknown_command(parser, argv)
    if unknown is not None:
        parser.print_usage(sys.stderr)
        print(f"weightsmith: error: {unknown}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    args.debug = getattr(args, "debug", False)
    args.quiet = getattr(args, "quiet", False)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    for stream in (sys.stdout, sys.stderr):
        # a non-UTF-8 terminal must not turn "×" in a table into a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    # The commands (and numpy, gguf, remote, convert behind them) load only when one
    # runs: importing them up front made `weightsmith --help` take ~0.7 s of CPU.
    commands = importlib.import_module(f"{__package__}._commands")
    handler = getattr(commands, "cmd_" + args.command.replace("-", "_"))
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `weightsmith inspect ... | head`
        return EXIT_OK
    except Exception as exc:  # one clear line; the traceback only on request
        if args.debug:
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        if not args.debug and not _is_ours(exc):
            print(
                "(an unexpected error: run again with --debug for the traceback)", file=sys.stderr
            )
        return EXIT_ERROR


def _is_ours(exc: BaseException) -> bool:
    return isinstance(exc, (WeightsmithError, OSError, ValueError, KeyError))
