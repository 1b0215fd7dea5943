"""Reading the ranks' logs of a run side by side, one process per CPU.

Parsing is CPU-bound Python, so threads would take turns; processes do not. A worker returns
the rank's ``RankLog`` (its scan: a few arrays, pickled as raw bytes), never its records.
One log may be read here, beside the workers (``local``): the one whose scan is the largest
(the report's rank with its state columns), which then is never pickled, and this process
works instead of waiting.
Small runs are read in this process: starting workers costs ~50 ms (fork) to ~300 ms
(forkserver), more than reading tens of megabytes. The result, errors included, is the
sequential one: the first rank (in rank order) that fails raises its RunLogError.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from .reader import RankLog

# Below this many bytes of logs in all, the ranks are read one after the other here.
PARALLEL_MIN_BYTES = 32 * 2**20


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:           # not on Linux
        return os.cpu_count() or 1


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:                  # the reader says why, in rank order
        return 0


def read_logs(ranked: list[tuple[int, str]], read: Callable[..., RankLog],
              states: list[bool], local: int | None = None) -> list[RankLog]:
    """``read(path, rank, states=states[i])`` of each ``ranked[i]`` (rank, path);
    ``ranked[local]`` in this process when the others go to workers."""
    workers = min(cpus(), len(ranked))
    sizes = [_size(path) for _, path in ranked]
    if workers < 2 or sum(sizes) < PARALLEL_MIN_BYTES:
        return [read(path, rank, states=keep) for (rank, path), keep in
                zip(ranked, states, strict=True)]
    # The largest logs first, so that no worker is left with a big one at the end.
    order = sorted(range(len(ranked)), key=lambda i: -sizes[i])
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(_method()),
                               initializer=_ignore_interrupts)
    try:
        futures = {i: pool.submit(read, ranked[i][1], ranked[i][0], states=states[i])
                   for i in order if i != local}
        here: RankLog | Exception | None = None
        if local is not None:
            try:
                here = read(ranked[local][1], ranked[local][0], states=states[local])
            except Exception as exc:           # raised in rank order, below
                here = exc
        found = []
        for i in range(len(ranked)):
            if i != local:
                found.append(futures[i].result())
            elif isinstance(here, Exception):
                raise here
            else:
                found.append(cast("RankLog", here))
        return found
    finally:
        pool.shutdown(cancel_futures=True)     # after an error: the other ranks need not finish


def _ignore_interrupts() -> None:
    """Ctrl-C is the caller's to handle (the command says "interrupted" in one line); a
    worker would print a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _method() -> str:
    """fork is fastest, but forking a process that runs other threads can copy a lock in the
    middle of its use (MindSpore's, for one); then a fresh server process forks the workers."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"
