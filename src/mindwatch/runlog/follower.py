"""Following run logs as they grow, for the live view (``mindwatch watch``).

Each ``rank_*.jsonl`` is tailed by byte offset, read in chunks, and only whole new records are
returned: a line without its newline yet is kept back until it is complete, and a bad line is
skipped and counted (``lines.LineDecoder``), as the whole-file reader does.

A log over ``TAIL_BYTES`` is not read from its start before the first frame: ``poll`` starts
at the first line of its last ``TAIL_BYTES`` (after checking its first record, in its first
``history.HEAD_BYTES``), and the part before is read by ``read_history``, a chunk at a time,
between frames (``history.py`` says what the view keeps of it). Line numbers of lines skipped
in the tail are known once the history is read; until then they are counted, not numbered.
"""
from __future__ import annotations

import os
from stat import S_ISREG
from typing import BinaryIO

from ..basics.run_dir import rank_logs, rank_of
from ..records import Common
from .history import History
from .lines import SHOWN_SKIPS, LineDecoder, Record, RunLogError, too_many_bad
from .reader import CHUNK_BYTES

TAIL_BYTES = 2**20       # ~3,000 step records: the latest of everything the view shows
KEEP_STEPS = 16          # steps of the history the view keeps (its sparkline)


def tail_start(handle: BinaryIO, size: int) -> int | None:
    """Where a log of ``size`` bytes is followed from: the first line of its last
    ``TAIL_BYTES``; None to read it from its start (a small log, or one line longer than the
    tail)."""
    if size <= TAIL_BYTES:
        return None
    handle.seek(size - TAIL_BYTES)
    cut = handle.read(TAIL_BYTES).find(b"\n")
    return None if cut < 0 else size - TAIL_BYTES + cut + 1


class _Tail:
    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.inode: int | None = None
        self.decoder = LineDecoder(path)   # keeps a line back until its newline is written
        self.history: History | None = None

    def start(self, handle: BinaryIO, size: int) -> None:
        """Where to read from, the first time: the start, or the first line of the tail."""
        self.offset, self.decoder, self.history = 0, LineDecoder(self.path), None
        start = tail_start(handle, size)
        if start is None:
            return
        self.offset = start
        self.decoder = LineDecoder(self.path, at_start=False)
        self.history = History(self.path, self.offset, KEEP_STEPS)

    def skipped(self) -> tuple[int, list[int]]:
        """Lines skipped and the first few of their numbers (those of the tail once the
        history before it is read)."""
        history, decoder = self.history, self.decoder
        if history is None:
            return decoder.skipped, decoder.skipped_at
        at = list(history.decoder.skipped_at)
        if history.done:
            at += [history.decoder.line + n for n in decoder.skipped_at]
        return history.decoder.skipped + decoder.skipped, at[:SHOWN_SKIPS]

    def check(self) -> None:
        """``LineDecoder.check`` over the history and the tail together. When the part read
        so far has more bad lines than records, the rest of the history is read before
        deciding (the rule is about the file read from its start) and naming the first."""
        history, decoder = self.history, self.decoder
        if history is None:
            decoder.check(final=False)
            return
        if history.decoder.skipped + decoder.skipped <= history.decoder.records + decoder.records:
            return
        while history.offset < history.end:
            history.keep(history.read(CHUNK_BYTES))
        skipped = history.decoder.skipped + decoder.skipped
        if skipped > history.decoder.records + decoder.records:
            first = history.decoder.first_problem or (
                f"line {history.decoder.line + decoder.first_problem_at}: {decoder.first_why}")
            raise too_many_bad(self.path, skipped,
                               history.decoder.records + decoder.records, first)


class Follower:
    """Returns the records appended to a run directory's rank logs since the last ``poll``."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._tails: dict[str, _Tail] = {}

    @property
    def exists(self) -> bool:
        return os.path.isdir(self.run_dir)

    @property
    def skipped(self) -> dict[int, tuple[int, list[int]]]:
        """``{rank: (lines skipped, their first line numbers)}`` for ranks that skipped any."""
        found = {rank_of(path): tail.skipped() for path, tail in self._tails.items()}
        return {rank: skipped for rank, skipped in found.items() if skipped[0]}

    @property
    def has_logs(self) -> bool:
        return self.exists and bool(rank_logs(self.run_dir))

    @property
    def history_left(self) -> float:
        """The fraction of the logs' histories not read yet (0: all read)."""
        histories = [t.history for t in self._tails.values() if t.history is not None]
        if all(h.done for h in histories):
            return 0.0
        left = sum(h.end - h.offset for h in histories) / sum(h.end for h in histories)
        return max(left, 1e-9)      # read, but not returned yet by read_history

    def poll(self) -> list[Record]:
        if not self.exists:
            return []
        for _, path in rank_logs(self.run_dir):
            if path not in self._tails:
                self._tails[path] = _Tail(path)
        found: list[Record] = []
        for path in sorted(self._tails):
            found.extend(self._read(self._tails[path]))
        return found

    def read_history(self, size: int = CHUNK_BYTES) -> list[Record]:
        """What the view keeps of the next ``size`` bytes of each history not read yet, to
        fold before everything ``poll`` returned (``history.History.read``); 0: of the
        first bytes of the logs, read by ``poll`` (their ``run`` records, for the first
        frame)."""
        found: list[Record] = []
        for path in sorted(self._tails):
            tail = self._tails[path]
            if tail.history is not None and not tail.history.done:
                found.extend(self._own(tail.history.read(size), path))
                tail.check()
        return found

    def _read(self, tail: _Tail) -> list[Record]:
        try:
            if not S_ISREG(os.stat(tail.path).st_mode):     # a FIFO would block the open
                raise RunLogError(f"{tail.path}: not a regular file; not a mindwatch log")
            with open(tail.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_ino != tail.inode or stat.st_size < tail.offset:
                    # New, or recreated by a new run without resume: start it over.
                    tail.start(handle, stat.st_size)
                    tail.inode = stat.st_ino
                    if tail.history is not None:
                        tail.history.read_head()          # is it a run log?
                handle.seek(tail.offset)
                found: list[Record] = []
                # In chunks: an enormous line costs the decoder's cap, not its length.
                while chunk := handle.read(CHUNK_BYTES):
                    tail.offset += len(chunk)
                    found.extend(tail.decoder.feed(chunk))
        except FileNotFoundError:     # removed between glob and open: it may come back
            return []
        except OSError as exc:
            raise RunLogError(f"cannot read {tail.path}: {exc.strerror or exc}") from exc
        tail.check()
        return self._own(found, tail.path)

    @staticmethod
    def _own(found: list[Record], path: str) -> list[Record]:
        for record in found:
            record.setdefault(Common.RANK, rank_of(path))
        return found
