"""The run directory's layout (docs/run-directory.md) and its set-up checks.

Every path mindwatch writes is built here, and each builder refuses a part that could lead
out of ``log_dir`` (a separator, ``..``, a NUL byte) or a rank or step that is not a plain
non-negative int, so no name taken from the environment or a caller escapes the directory.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import tempfile
from typing import Any

_RANK_LOG = re.compile(r"rank_(\d+)\.jsonl$")
_SEPARATORS = tuple(sep for sep in ("/", "\\", os.sep, os.altsep) if sep)


def _index(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int; got {type(value).__name__} "
                         f"{value!r:.80}")
    return value


def _name_part(name: str, value: Any) -> str:
    if (not isinstance(value, str) or not value or "\0" in value or ".." in value
            or any(sep in value for sep in _SEPARATORS)):
        raise ValueError(f"{name} must be a non-empty name without a path separator, '..' "
                         f"or NUL; got {value!r:.80}")
    return value


def rank_log_path(log_dir: str, rank: int) -> str:
    return os.path.join(log_dir, f"rank_{_index('rank', rank)}.jsonl")


def rank_logs(log_dir: str) -> list[tuple[int, str]]:
    """``(rank, path)`` of every rank log in ``log_dir``, by rank."""
    paths = glob.glob(os.path.join(glob.escape(log_dir), "rank_*.jsonl"))
    return sorted((int(m.group(1)), p) for p in paths if (m := _RANK_LOG.search(p)))


def rank_of(path: str) -> int:
    match = _RANK_LOG.search(os.path.basename(path))
    return int(match.group(1)) if match else 0


def anomaly_report_stem(log_dir: str, step: int, rank: int, kind: str | None = None) -> str:
    """``anomalies/step<N>_rank<R>``; with ``kind``: ``..._<kind>``, for a second anomaly of
    the same step."""
    stem = os.path.join(log_dir, "anomalies",
                        f"step{_index('step', step)}_rank{_index('rank', rank)}")
    return stem if kind is None else f"{stem}_{_name_part('kind', kind)}"


def unused_report_stem(log_dir: str, step: int, rank: int, kind: str) -> str:
    """The stem of a new anomaly report that overwrites none written before: the plain one,
    else with the anomaly's kind (two anomalies of one step), else numbered (a run resumed
    over the same steps). Reports are written on the training thread, one at a time."""
    stem = anomaly_report_stem(log_dir, step, rank)
    candidates = [stem, anomaly_report_stem(log_dir, step, rank, kind)]
    for candidate in candidates:
        if not os.path.exists(candidate + ".json"):
            return candidate
    number = 2
    while os.path.exists(f"{candidates[-1]}_{number}.json"):
        number += 1
    return f"{candidates[-1]}_{number}"


def hang_report_stem(log_dir: str, step: int, rank: int) -> str:
    """``anomalies/hang_step<N>_rank<R>``: N is the last step that ended (0: none yet)."""
    return os.path.join(log_dir, "anomalies",
                        f"hang_step{_index('step', step)}_rank{_index('rank', rank)}")


# Why a checkpoint was written, the first part of its file name.
CHECKPOINT_REASONS = ("anomaly", "signal")


def checkpoint_path(log_dir: str, step: int, rank: int, reason: str = "anomaly") -> str:
    if _name_part("reason", reason) not in CHECKPOINT_REASONS:
        raise ValueError(f"reason must be one of {CHECKPOINT_REASONS}; got {reason!r}")
    return os.path.join(log_dir, "checkpoints",
                        f"{reason}_step{_index('step', step)}_rank{_index('rank', rank)}.ckpt")


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (``os.umask`` can
    only be read by setting it, which would race with other threads creating files)."""
    with contextlib.suppress(OSError, ValueError), open(
            "/proc/self/status", encoding="ascii", errors="replace") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str) -> None:
    """Give ``path`` the mode a plain ``open`` would have: ``0o666`` less the umask."""
    os.chmod(path, 0o666 & ~current_umask())


def write_text_atomically(path: str, text: str) -> None:
    """Write under a temporary name (this process's own), then rename: a reader never sees a
    partial file."""
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:          # a full disk: no half-written temporary file stays behind
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def prepare(log_dir: str, rank: int, resume: bool) -> str:
    """Create ``log_dir`` and prove it writable now, before training starts.

    Returns the rank's log path. An existing, non-empty run log is never overwritten: with
    ``resume=False`` it is refused; with ``resume=True`` the new run is appended after it.
    """
    if not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError("log_dir must be a path (str or os.PathLike); got "
                        f"{type(log_dir).__name__}")
    log_dir = os.fspath(log_dir)
    if not isinstance(log_dir, str):   # a PathLike of bytes
        raise TypeError(f"log_dir must be a str path; got {type(log_dir).__name__}")
    if not log_dir:
        raise ValueError("log_dir must not be empty")
    if "\0" in log_dir:
        raise ValueError(f"log_dir must not contain a NUL byte; got {log_dir!r}")
    path = rank_log_path(log_dir, rank)
    try:
        os.makedirs(log_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=log_dir, prefix=".mindwatch-probe-"):
            pass
    except (OSError, ValueError) as exc:    # ValueError: a name the file system cannot encode
        raise ValueError(f"log_dir {log_dir!r} cannot be written "
                         f"({getattr(exc, 'strerror', None) or exc}); "
                         "choose a directory you can write to") from exc
    if not resume and os.path.exists(path) and os.path.getsize(path) > 0:
        raise RunLogExists.at(path)
    return path


class RunLogExists(ValueError):
    """``prepare`` found a run log at ``path`` and ``resume`` is off. A framework adapter
    re-raises it with its own words for turning resume on (``at(path, how)``: a YAML key).
    Built from its message alone too, as frameworks re-raise ``type(error)(message)``."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path

    @classmethod
    def at(cls, path: str, how: str = "pass resume=True") -> RunLogExists:
        return cls(f"{path} already holds a run log; {how} to append this run to it, or "
                   "choose a new log_dir (mindwatch never overwrites a run log)", path)
