"""The part of a large log before the tail the live view starts from, read after its first
frame, a chunk at a time between frames (``Follower.read_history``).

The live view shows, per rank, the latest step, recent losses, the latest hardware sample,
the last anomalies with their count, the latest segment's ``run`` and ``end`` records, and
the lines skipped. All but the anomaly count, older anomalies, an older ``run`` record and
skipped lines far back are in the last MiB of a log: that tail makes the first frame. The
rest comes from here, with the typed decoding of ``batch.py``; each chunk gives back only
what the view keeps: every record but steps, hardware samples and states, the last few steps
and the last sample and state.
"""
from __future__ import annotations

from .batch import Batch, BatchDecoder
from .fast import as_record, revive
from .lines import Record, RunLogError

HEAD_BYTES = 64 * 2**10      # read at once: the first record says whether this is a run log


class History:
    """Bytes ``[0, end)`` of ``path``, which end with a newline."""

    def __init__(self, path: str, end: int, keep_steps: int):
        self.path, self.end, self.keep_steps = path, end, keep_steps
        self.decoder = BatchDecoder(path)
        self.offset = 0
        self._read_ahead: list[Record] = []

    @property
    def done(self) -> bool:
        return self.offset >= self.end and not self._read_ahead

    def read_head(self) -> None:
        """Reads the first ``HEAD_BYTES`` now (raising RunLogError if they say the file is no
        run log); ``read`` returns their records."""
        self.keep(self.read(HEAD_BYTES))

    def keep(self, found: list[Record]) -> None:
        """Records ``read`` returned, for its next call to return (first)."""
        self._read_ahead = found + self._read_ahead

    @property
    def fraction(self) -> float:
        return self.offset / self.end if self.end else 1.0

    def read(self, size: int) -> list[Record]:
        """The records the live view folds from the next ``size`` bytes at most (0: those
        read already, by ``read_head``): every record but steps, hardware samples and states,
        then the last ``keep_steps`` steps, the last hardware sample and the last state (the
        view keeps no more of them; their order against the others does not change what it
        shows)."""
        if size <= 0 or self.offset >= self.end:
            found, self._read_ahead = self._read_ahead, []
            return found
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(min(size, self.end - self.offset))
        except OSError as exc:
            raise RunLogError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        found, self._read_ahead = self._read_ahead, []
        if not data:            # the file shrank: the follower starts it over at its next poll
            self.offset = self.end
            return found
        self.offset += len(data)
        batch = Batch()
        self.decoder.feed_batch(data, batch)
        found += batch.others + [as_record(step) for step in batch.steps[-self.keep_steps:]]
        return found + [as_record(sample) for _, sample in batch.hardware[-1:]] \
            + [revive(state, False) for state in batch.states[-1:]]     # as records.decode
