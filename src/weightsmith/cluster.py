"""Running tasks on a Ray cluster: what ``quantize_file(..., ray=ADDRESS)`` and
``weightsmith quantize --ray ADDRESS`` use to spread one job over several machines.

Ray is an optional extra (``pip install 'weightsmith[ray]'``), imported only when a
cluster is asked for.  The contract, for callers:

* ``task`` is a module-level function (Ray ships it by reference: every node
  imports weightsmith itself) taking plain arguments and returning bytes or
  numpy arrays;
* :func:`map_tasks` submits every argument tuple at once, so the caller bounds
  the work in flight by what it passes (quantize_file passes one output
  window, at most 256 MiB of results);
* results come back in **completion order**, tagged with their index: the
  caller puts each where it belongs, so the output never depends on which node
  ran what, nor on the order tasks finish in;
* a task whose worker process dies is run again by Ray (``max_retries``); an
  error raised *by the task* (a named :class:`~weightsmith.errors.WeightsmithError`)
  is not retried and reaches the caller as itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ._lazy import require
from .errors import ClusterUnavailable, WeightsmithError

__all__ = ["batches", "connect", "map_tasks"]

#: Times Ray re-runs a task whose worker died (a killed process, a lost node).
MAX_RETRIES = 3

T = TypeVar("T")

_remote: dict[Callable[..., Any], Any] = {}


def batches(items: Sequence[T], size: Callable[[T], int], limit: int) -> list[list[T]]:
    """``items`` cut in order into runs of total ``size`` at most ``limit`` (an item
    larger than ``limit`` makes a run of its own): windows of work and the tasks
    within them."""
    out: list[list[T]] = []
    total = limit
    for item in items:
        n = size(item)
        if total + n > limit or not out:
            out.append([])
            total = 0
        out[-1].append(item)
        total += n
    return out


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` ("auto": the one
    this machine already belongs to).  An existing connection is reused."""
    ray = require("ray", "--ray (a Ray cluster)")
    if ray.is_initialized():
        return ray
    try:
        ray.init(
            address=address,
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterUnavailable(
            f"no Ray cluster at {address!r} (start one with `ray start --head`, or give "
            f"'auto' on a machine that belongs to one): {e}"
        ) from None
    return ray


def map_tasks(
    address: str, task: Callable[..., Any], args: Sequence[tuple[Any, ...]]
) -> Iterator[tuple[int, Any]]:
    """``(i, task(*args[i]))`` for every ``i``, each run as a Ray task of one CPU,
    yielded as they complete."""
    ray = connect(address)
    remote = _remote.get(task)
    if remote is None:
        remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(task)
        _remote[task] = remote
    pending = {remote.remote(*a): i for i, a in enumerate(args)}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            i = pending.pop(ref)
            try:
                value = ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, WeightsmithError):
                    raise cause from None
                raise
            yield i, value
    finally:
        for ref in pending:  # an error or an abandoned generator: stop the rest
            ray.cancel(ref, force=False)
