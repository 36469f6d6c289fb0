"""``subprocess.run([sys.executable, ...])`` for the reference converters, without their imports.

A reference conversion (llama.cpp's ``convert_hf_to_gguf.py``) of a tiny model is well
under a second of work behind ~3.5 s of CPU spent importing torch, transformers and
mistral_common in a fresh interpreter, and the suite launches it a few hundred times.
:func:`run` runs the same command line in a process forked from a server that has
imported those libraries once (one server per environment but pytest's per-test
``PYTEST_CURRENT_TEST``, the two last used kept, started on first use, ended with the
test process).  The server itself runs nothing: every request is a new child
of that clean parent, so no state is carried from one request to the next, and the
converter's own modules (and gguf) are imported afresh in each child, as in a new
interpreter.  The child gets the command's ``argv``, ``sys.path[0]``, ``__main__``,
environment, working directory and stdin (``/dev/null``); its stdout and stderr go to
files, and its exit status and output come back as the
:class:`subprocess.CompletedProcess` of ``subprocess.run(cmd, capture_output=True,
text=True, env=env)``.

Only ``[sys.executable, "-c", CODE, *args]`` and ``[sys.executable, SCRIPT, *args]``
are taken; a timeout kills the child and raises :class:`subprocess.TimeoutExpired`.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap

# Reads one JSON request a line; forks; the child runs the command and ``os._exit``s with
# the status the interpreter would give.  Replies: the child's pid, then its status.
_SERVER = textwrap.dedent(
    """
    import json, os, sys
    import torch, transformers
    from transformers import AutoConfig, AutoTokenizer  # the lazy module's imports
    import numpy, safetensors
    try:  # what the converter's conversion/base.py imports (0.5 s more)
        import jsonschema
    except ImportError:
        pass
    try:
        import mistral_common.tokens.tokenizers.base
        import mistral_common.tokens.tokenizers.multimodal
        import mistral_common.tokens.tokenizers.sentencepiece
        import mistral_common.tokens.tokenizers.tekken
    except ImportError:
        pass

    def child(req):
        os.environ.clear()
        os.environ.update(req["env"])
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        for n, path in ((1, req["stdout"]), (2, req["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(out, n)
        os.chdir(req["cwd"])
        argv = req["argv"]
        code = 0
        try:
            if argv[0] == "-c":
                import types
                sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
                main = sys.modules["__main__"] = types.ModuleType("__main__")
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            else:
                import runpy
                sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        try:
            import atexit
            atexit._run_exitfuncs()
        finally:
            for s in (sys.stdout, sys.stderr):
                try:
                    s.flush()
                except Exception:
                    pass
            os._exit(code & 0xFF)

    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(req)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
    """
)

_servers: dict[frozenset, subprocess.Popen] = {}
# pytest sets PYTEST_CURRENT_TEST to each test's id: a server per value would be a server
# per test, each holding torch and transformers; the child gets the request's own value
_VOLATILE = ("PYTEST_CURRENT_TEST",)
# a server holds ~0.5 GB: keep the two last used (the default and the 4.47.1 oracle's env)
_MAX_SERVERS = 2


def _end(p: subprocess.Popen) -> None:
    p.stdin.close()
    p.wait()


@atexit.register
def _close() -> None:
    """End the servers with the test process (and count their CPU time in its own)."""
    for p in _servers.values():
        _end(p)
    _servers.clear()


def _server(env: dict[str, str]) -> subprocess.Popen:
    key = frozenset((k, v) for k, v in env.items() if k not in _VOLATILE)
    p = _servers.pop(key, None)
    if p is None or p.poll() is not None:
        while len(_servers) >= _MAX_SERVERS:
            _end(_servers.pop(next(iter(_servers))))
        p = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    _servers[key] = p  # last used last
    return p


def _read_line(p: subprocess.Popen, deadline: float | None) -> str:
    import time

    if deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            raise TimeoutError
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"pyfork server exited ({p.poll()})")
    return line


def run(cmd: list[str], env: dict[str, str] | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """``subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)``
    for ``cmd = [sys.executable, "-c", CODE, *args]`` or ``[sys.executable, SCRIPT, *args]``."""
    import time

    assert cmd[0] == sys.executable and len(cmd) >= 2, cmd
    env = dict(os.environ if env is None else env)
    deadline = None if timeout is None else time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="pyfork-") as d:
        out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        for f in (out, err):
            open(f, "w").close()
        p = _server(env)
        req = {"argv": [str(a) for a in cmd[1:]], "cwd": os.getcwd(), "env": env,
               "stdout": out, "stderr": err}  # fmt: skip
        p.stdin.write(json.dumps(req) + "\n")
        p.stdin.flush()
        pid = int(_read_line(p, None))
        try:
            rc = int(_read_line(p, deadline))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            int(_read_line(p, None))
            raise subprocess.TimeoutExpired(cmd, timeout) from None
        with open(out, encoding="utf-8", errors="replace") as f:
            stdout = f.read()
        with open(err, encoding="utf-8", errors="replace") as f:
            stderr = f.read()
    return subprocess.CompletedProcess(cmd, rc, stdout, stderr)
