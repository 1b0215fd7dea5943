"""The run directory's layout (docs/run-directory.md) and its set-up checks."""
from __future__ import annotations

import glob
import os
import re
import tempfile
from typing import List, Tuple

_RANK_LOG = re.compile(r"rank_(\d+)\.jsonl$")


def rank_log_path(log_dir: str, rank: int) -> str:
    return os.path.join(log_dir, f"rank_{rank}.jsonl")


def rank_logs(log_dir: str) -> List[Tuple[int, str]]:
    """``(rank, path)`` of every rank log in ``log_dir``, by rank."""
    paths = glob.glob(os.path.join(glob.escape(log_dir), "rank_*.jsonl"))
    return sorted((int(m.group(1)), p) for p in paths if (m := _RANK_LOG.search(p)))


def rank_of(path: str) -> int:
    match = _RANK_LOG.search(os.path.basename(path))
    return int(match.group(1)) if match else 0


def anomaly_report_stem(log_dir: str, step: int, rank: int) -> str:
    return os.path.join(log_dir, "anomalies", f"step{step}_rank{rank}")


def checkpoint_path(log_dir: str, step: int, rank: int) -> str:
    return os.path.join(log_dir, "checkpoints", f"anomaly_step{step}_rank{rank}.ckpt")


def write_text_atomically(path: str, text: str) -> None:
    """Write under a temporary name (this process's own), then rename: a reader never sees a
    partial file."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def prepare(log_dir: str, rank: int, resume: bool) -> str:
    """Create ``log_dir`` and prove it writable now, before training starts.

    Returns the rank's log path. An existing, non-empty run log is never overwritten: with
    ``resume=False`` it is refused; with ``resume=True`` the new run is appended after it.
    """
    if not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError(f"log_dir must be a path (str or os.PathLike); got {type(log_dir).__name__}")
    log_dir = os.fspath(log_dir)
    if not log_dir:
        raise ValueError("log_dir must not be empty")
    try:
        os.makedirs(log_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=log_dir, prefix=".mindwatch-probe-"):
            pass
    except OSError as exc:
        raise ValueError(f"log_dir {log_dir!r} cannot be written ({exc.strerror or exc}); "
                         "choose a directory you can write to") from exc
    path = rank_log_path(log_dir, rank)
    if not resume and os.path.exists(path) and os.path.getsize(path) > 0:
        raise ValueError(
            f"{path} already holds a run log; pass resume=True to append this run to it, or "
            "choose a new log_dir (mindwatch never overwrites a run log)")
    return path
