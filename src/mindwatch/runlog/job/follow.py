"""Following ``job.jsonl`` as it grows, for the live view (``mindwatch watch`` of a job).

One file, whatever the number of ranks: ``poll`` returns the whole new records (a line
without its newline yet is kept back; a bad line is skipped and counted, as the reader does:
read.py's ``JobDecoder``). A job log over follower.py's ``TAIL_BYTES`` is read from the first
line of its last ``TAIL_BYTES`` (``tail_start``; some 2,000 steps: the latest step and
losses), after the rare records before it (``run``, ``event``, ``hang``, ``end``: the job's
places, every event), found by their first bytes: the ``job_step`` and ``job_ranks`` lines
before the tail are neither decoded nor kept.
"""
from __future__ import annotations

import os
from stat import S_ISREG

from ...job_schema import JOB_FILE
from ..follower import tail_start
from ..lines import Record, RunLogError
from ..reader import CHUNK_BYTES
from .read import JobDecoder

_SKIPPED = (b'{"kind":"job_step",', b'{"kind":"job_ranks",')


class JobFollower:
    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, JOB_FILE)
        self.offset = 0
        self.inode: int | None = None
        self.decoder = JobDecoder(self.path, bins=False)

    @property
    def exists(self) -> bool:
        return os.path.isfile(self.path)

    @property
    def skipped(self) -> tuple[int, list[int]]:
        return self.decoder.skipped, list(self.decoder.skipped_at)

    def poll(self) -> list[Record]:
        """The records written since the last poll (the first: the rare records of the
        part before the tail, then the tail's)."""
        found: list[Record] = []
        try:
            if not os.path.lexists(self.path):
                return []
            if not S_ISREG(os.stat(self.path).st_mode):
                raise RunLogError(f"{self.path}: not a regular file; not a job log")
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_ino != self.inode or stat.st_size < self.offset:
                    self.inode = stat.st_ino     # new, or made anew: start it over
                    found += self._start(handle, stat.st_size)
                handle.seek(self.offset)
                while chunk := handle.read(CHUNK_BYTES):
                    self.offset += len(chunk)
                    found += self.decoder.feed(chunk)
        except FileNotFoundError:
            return found
        except OSError as exc:
            raise RunLogError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        self.decoder.check(final=False)
        return found

    def _start(self, handle, size: int) -> list[Record]:
        self.offset, self.decoder = 0, JobDecoder(self.path, bins=False)
        start = tail_start(handle, size)
        if start is None:
            return []
        found = self._rare(handle, start)
        self.offset = start
        return found

    def _rare(self, handle, stop: int) -> list[Record]:
        """The records before ``stop`` other than job steps and bins, the first checked as
        any first record is (a job log begins with its ``run`` record)."""
        handle.seek(0)
        decoder, found, pending, read = self.decoder, [], b"", 0
        while read < stop and (chunk := handle.read(min(CHUNK_BYTES, stop - read))):
            read += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for raw in lines:
                decoder.line += 1
                if raw.startswith(_SKIPPED) and not decoder._first:
                    decoder.records += 1
                    continue
                record = decoder._record(raw, decoder.line)
                if record is not None:
                    found.append(record)
        self.decoder = JobDecoder(self.path, bins=False, at_start=False)
        self.decoder.skipped, self.decoder.skipped_at = decoder.skipped, decoder.skipped_at
        self.decoder.line, self.decoder.records = decoder.line, decoder.records
        return found
