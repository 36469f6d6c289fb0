"""Build the compiled kernel core: every ``csrc/<name>.c`` becomes ``weightsmith._native.<name>``.

The flags keep float arithmetic exactly as written, which the bit-exactness with
ggml's reference depends on: no FMA contraction, no value-changing math.  A failed
compile stops the install with a message that says what is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
CSRC = Path("csrc")

# -ffp-contract=off: a*b+c must not become one fused multiply-add (ggml's
# reference rounds twice).  -fno-fast-math is the default; say it anyway so a
# CFLAGS=-ffast-math from the environment cannot silently change results.
# -fno-trapping-math and -fno-math-errno change no value (IEEE results stay
# exact; only FP exception traps and errno after sqrtf & co. are not kept,
# and nothing reads them): without them gcc will not if-convert the
# branch-free selects of the kernels, so loops over blocks stay scalar.
CFLAGS = [
    "-std=c11",
    "-O3",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fno-trapping-math",
    "-fno-math-errno",
    "-fvisibility=hidden",
    "-Wno-psabi",  # inlined helpers returning vectors: no ABI is crossed
]


class BuildExt(build_ext):
    """build_ext that turns a compiler failure into an actionable message."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # distutils raises several unrelated types
            sys.stderr.write(
                "\nweightsmith: building the compiled kernel core failed.\n"
                "It needs a C11 compiler (gcc or clang) and the Python development headers.\n"
                "On Debian/Ubuntu: apt-get install gcc python3-dev\n"
                f"The build said: {exc}\n\n"
            )
            raise


def extensions() -> list[Extension]:
    headers = sorted(str(p) for p in CSRC.glob("*.h"))
    return [
        Extension(
            f"weightsmith._native.{src.stem}",
            sources=[str(src)],
            depends=headers,
            include_dirs=[str(CSRC)],
            extra_compile_args=[*CFLAGS, "-pthread"],
            extra_link_args=["-pthread"],  # the kernels' thread pool (csrc/ws_threads.h)
        )
        for src in sorted(CSRC.glob("*.c"))
    ]


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
