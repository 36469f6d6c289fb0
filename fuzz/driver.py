"""atheris entry point: ``python fuzz/driver.py TARGET FINDINGS_DIR [libFuzzer args]``.

weightsmith is instrumented for coverage; numpy and the standard library are
not (they are not what we are testing, and instrumenting them is slow).  An
exception that is not a WeightsmithError is recorded in FINDINGS_DIR -- the
input plus a signature (exception type and the innermost weightsmith frame)
-- once per signature, and the run goes on, so one session reports every
distinct bug rather than stopping at the first.  Hangs and out-of-memory are
left to libFuzzer (``-timeout``, ``-rss_limit_mb``), which stops the run and
writes the input with ``-artifact_prefix``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# imported before the hook: the harness is not instrumented
from fuzz import cmp_hook, with_artifact_prefix

with atheris.instrument_imports(include=["weightsmith", "fuzz"]):
    from fuzz import targets

TARGET = sys.argv[1]
FINDINGS = sys.argv[2]
_seen: set[str] = set()
sys.setrecursionlimit(5000)


def _signature(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "weightsmith" in f.filename] or frames
    f = ours[-1]
    return f"{type(exc).__name__} at {os.path.basename(f.filename)}:{f.lineno} ({f.name})"


def test_one_input(data: bytes) -> None:
    cmp_hook.install()  # after atheris.Fuzz() has bound its native hooks
    try:
        targets.check(TARGET, data)
    except Exception as exc:
        sig = _signature(exc)
        if sig in _seen:
            return
        _seen.add(sig)
        digest = hashlib.sha1(data).hexdigest()[:16]
        os.makedirs(FINDINGS, exist_ok=True)
        with open(os.path.join(FINDINGS, f"{digest}.bin"), "wb") as f:
            f.write(data)
        record = {
            "signature": sig,
            "input": f"{digest}.bin",
            "message": str(exc)[:500],
            "traceback": traceback.format_exception(exc)[-6:],
        }
        with open(os.path.join(FINDINGS, "findings.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"FINDING {sig}", file=sys.stderr, flush=True)


def main() -> None:
    try:
        args = with_artifact_prefix(TARGET, sys.argv[3:])  # never into the current folder
        atheris.Setup([sys.argv[0], *args], test_one_input)
        atheris.Fuzz()
    finally:
        targets.cleanup()


if __name__ == "__main__":
    main()
