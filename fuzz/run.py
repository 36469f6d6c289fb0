"""Run one fuzz target for a while: ``python fuzz/run.py --target NAME --seconds N``.

The target runs under atheris in a subprocess (:mod:`fuzz.driver`), seeded
with the generated corpus (:mod:`fuzz.seeds`) plus ``fuzz/corpus/NAME`` if
present.  The report (also written as JSON with ``--json``) gives the
executions, the coverage reached and every finding: non-WeightsmithError
exceptions (recorded by the driver, once per signature) and libFuzzer
crashes, timeouts and out-of-memory stops (their inputs are kept in
fuzz/artifacts/NAME/, which git ignores).  If libFuzzer stops early on a hang or OOM, the run is restarted for
the time left, so a finding never hides the rest of the session.

Exit status: 0 when nothing was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fuzz import artifact_prefix, targets  # noqa: E402
from fuzz import seeds as seedmod  # noqa: E402

TARGETS = list(seedmod.SEEDS)


def run(
    target: str, seconds: float, workdir: Path, *, max_len: int = 65536, verbose: bool = False
) -> dict:
    corpus = workdir / "corpus"
    seeds_dir = seedmod.write(target, workdir / "seeds")
    corpus.mkdir(parents=True, exist_ok=True)
    findings = workdir / "findings"
    # kept after a temp workdir is gone, and never in the current folder (git-ignored)
    artifacts = Path(artifact_prefix(target))
    earlier = {p.name for p in artifacts.iterdir()}
    extra = [str(HERE / "corpus" / target)] if (HERE / "corpus" / target).is_dir() else []
    deadline = time.monotonic() + seconds
    execs = 0
    cov = ft = 0
    stops: list[str] = []
    rounds = 0
    # libFuzzer's -rss_limit_mb judges the process's peak RSS, and Linux carries a
    # parent's peak across fork + exec (a long pytest session reaches GBs): the
    # target's budget is counted on top of what this process inherited
    rss_limit = 3072 + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    while (left := deadline - time.monotonic()) > 1:
        rounds += 1
        cmd = [
            sys.executable, str(HERE / "driver.py"), target, str(findings),
            f"-max_total_time={int(left)}", f"-max_len={max_len}", "-timeout=20",
            f"-rss_limit_mb={rss_limit}", f"-artifact_prefix={artifacts}/", "-print_final_stats=1",
            str(corpus), str(seeds_dir), *extra,
        ]  # fmt: skip
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _out, log = p.communicate(timeout=left + 300)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            # libFuzzer exits without unwinding Python: remove the driver's
            # scratch files (fuzz.targets names them by pid) here
            for f in Path(targets.SCRATCH_DIR).glob(f"ws-fuzz-{p.pid}.*"):
                f.unlink(missing_ok=True)
        if verbose:
            print(log[-4000:], file=sys.stderr)
        m = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
        execs += int(m.group(1)) if m else 0
        for m in re.finditer(r"cov: (\d+) ft: (\d+)", log):
            cov, ft = max(cov, int(m.group(1))), max(ft, int(m.group(2)))
        if p.returncode != 0:
            kind = re.search(r"==\d+== ERROR: libFuzzer: ([\w-]+)", log)
            why = kind.group(1) if kind else f"exit {p.returncode}"
            stops.append(why + ": " + "\n".join(log.strip().splitlines()[-12:]))
            if not kind:
                break
    found = []
    fj = findings / "findings.jsonl"
    if fj.exists():
        found = [json.loads(line) for line in fj.read_text().splitlines() if line.strip()]
    return {
        "target": target,
        "seconds": seconds,
        "executions": execs,
        "coverage_edges": cov,
        "features": ft,
        "corpus_files": len(list(corpus.iterdir())),
        "seed_files": len(list(seeds_dir.iterdir())),
        "rounds": rounds,
        "findings": found,
        "libfuzzer_stops": stops,
        "artifacts": sorted(p.name for p in artifacts.iterdir() if p.name not in earlier),
        "artifacts_dir": str(artifacts),
        "workdir": str(workdir),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, choices=TARGETS)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workdir", help="keep corpus and findings here (default: a temp folder)")
    ap.add_argument("--max-len", type=int, default=65536)
    ap.add_argument("--json", help="write the report here as JSON")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    if a.workdir:
        work = Path(a.workdir)
        work.mkdir(parents=True, exist_ok=True)
        rep = run(a.target, a.seconds, work, max_len=a.max_len, verbose=a.verbose)
    else:
        with tempfile.TemporaryDirectory(prefix=f"wsfuzz-{a.target}-") as d:
            rep = run(a.target, a.seconds, Path(d), max_len=a.max_len, verbose=a.verbose)
    print(
        f"{rep['target']}: {rep['executions']} executions in {rep['seconds']:.0f} s, "
        f"cov {rep['coverage_edges']} ft {rep['features']}, corpus {rep['corpus_files']}, "
        f"findings {len(rep['findings'])}, libFuzzer stops {len(rep['libfuzzer_stops'])}"
    )
    for f in rep["findings"]:
        print(f"  FINDING {f['signature']}: {f['message'][:200]}")
    for s in rep["libfuzzer_stops"]:
        print("  STOP " + s.replace("\n", "\n       "))
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=2))
    return 1 if rep["findings"] or rep["libfuzzer_stops"] else 0


if __name__ == "__main__":
    sys.exit(main())
