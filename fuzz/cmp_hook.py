"""A leak-free comparison hook for atheris.

atheris traces every comparison in instrumented code through its native
``atheris._trace_cmp``.  In atheris 3.0 that hook leaks a reference whenever
the comparison does not yield a plain bool -- numpy's ``a > 3`` on an array:
about 180 bytes a call.  Over a long session this grew the safetensors target
(1.5M executions) to libFuzzer's 3 GB RSS limit and stopped it with an
"out-of-memory" whose input, replayed alone, peaks at ~40 MB.

:func:`install` puts :func:`trace_cmp` in its place: comparisons of plain
scalars (what libFuzzer learns from: ints, strings, bytes) still go to the
native hook; any other comparison is done here in Python.  ``atheris.Fuzz()``
binds its native hooks when it starts, so install from the first input.
"""

from __future__ import annotations

import operator

import atheris

try:  # how this Python encodes the operator in COMPARE_OP's argument
    from atheris.version_dependent import CMP_OP_SHIFT_AMOUNT
except ImportError:  # pragma: no cover - older atheris
    CMP_OP_SHIFT_AMOUNT = 0

_CMP = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge)
_SCALARS = (int, float, bool, str, bytes)
_native = None


def trace_cmp(left, right, op, counter, is_const):
    """atheris' ``_trace_cmp(left, right, op, counter, is_const)`` contract."""
    if type(left) in _SCALARS and type(right) in _SCALARS:
        return _native(left, right, op, counter, is_const)
    return _CMP[op if op < len(_CMP) else op >> CMP_OP_SHIFT_AMOUNT](left, right)


def install() -> None:
    """Wrap the native hook (once; cheap to call on every input)."""
    global _native
    if _native is None:
        _native = atheris._trace_cmp
        atheris._trace_cmp = trace_cmp
