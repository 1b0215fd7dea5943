"""The job's answer to a hang, given once by one rank: when its hang watchdog fires, each
rank looks whether a lower rank is still alive (its heartbeat fresh); the lowest live rank
(rank 0 unless it is the one gone) waits until every rank's heartbeat has caught up with the
stall (each stalled rank writes one at once; a live one within a period; a dead one goes
stale), then names the rank(s) the job waits for (job/holders.py) in its own hang anomaly,
the job log's ``hang`` record and ``heartbeats/hang_answer.json``.

Under ``on_anomaly={"hang": "abort"}`` a launcher takes the whole job down when one rank
exits, so the answer and every rank's records must be on disk first: the other ranks write
their end once the answer is there (``wait_for_answer``: at most ``settle_s`` +
``EXIT_GRACE_S``), and every rank exits once the ranks the job does not wait for have ended
(``wait_for_ends``).

Everything here runs on the watchdog's thread, while the training thread is stuck.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..basics.clock import Clock
from ..basics.rank_set import ranks_in
from ..basics.run_dir import write_text_atomically
from ..job.holders import Places, answer
from ..job_schema import HANG, JOB_FILE, JobHang
from ..records import Common
from ..runlog import heartbeats as hb
from .heartbeat import Heartbeat

EXIT_GRACE_S = 3.0      # beyond the answerer's settling, for its writes
MAX_END_WAIT_S = 60.0   # the longest an aborting rank waits for the others' ends beyond
POLL_S = 0.25           # between looks at the heartbeats (a few s at most, during a hang)


def pid_alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:             # another user's process, or no permission: alive
        return True
    return True


class HangAnswer:
    """``write_job``: rank 0's job log's ``hang`` writer (None on other ranks, or with no
    job log); ``places``: every rank's host and device once the ranks exchanged them."""

    def __init__(self, *, heartbeat: Heartbeat, world_size: int, clock: Clock,
                 places: Callable[[], Places],
                 write_job: Callable[[Mapping[str, Any]], None] | None,
                 sleep: Callable[[float], None] = time.sleep):
        self.heartbeat, self.world_size = heartbeat, world_size
        self.rank, self.log_dir = heartbeat.rank, heartbeat.log_dir
        self._clock, self._places, self._write_job, self._sleep = (
            clock, places, write_job, sleep)
        self._host = socket.gethostname()

    @property
    def settle_s(self) -> float:
        """How long the answerer waits for the ranks' heartbeats to catch up."""
        return 2 * self.heartbeat.interval_s + 1.0

    def _gone(self, beats: Mapping[int, hb.Beat]) -> dict[int, bool]:
        """Rank -> its process is dead, for the ranks of this host (a pid check)."""
        return {rank: True for rank, beat in beats.items()
                if beat.host == self._host and beat.state != hb.ENDED
                and not pid_alive(beat.pid)}

    def answerer(self, now: float) -> int:
        """The rank that answers: the lowest one alive (this one when no lower one is)."""
        beats = hb.read_beats(self.log_dir)
        gone = self._gone(beats)
        return min((rank for rank, beat in beats.items()
                    if rank < self.rank and beat.state != hb.ENDED
                    and not beat.stale(now) and not gone.get(rank)), default=self.rank)

    def answer(self, *, step: int, stalled_s: float) -> tuple[int, dict[str, Any] | None]:
        """The rank that answers, and the ``hang`` record's fields when it is this one
        (written)."""
        noticed = self._clock.time()
        given = self._answered(noticed - stalled_s)
        if given is not None:           # a rank that stalled first answered for this stall
            return given, None
        answerer = self.answerer(noticed)
        if answerer != self.rank:
            return answerer, None
        beats = self._settled(noticed)
        fields = answer(beats, self.world_size, now=self._clock.time(), step=step,
                        places=self._places(), gone=self._gone(beats))
        fields[JobHang.STALLED_S] = round(stalled_s, 3)
        fields[JobHang.ANSWERED_BY] = self.rank
        self._write(fields)
        return self.rank, fields

    def _settled(self, noticed: float) -> dict[int, hb.Beat]:
        """The heartbeats once each rank's says where it is since the stall (or it is gone),
        or after ``settle_s``."""
        beats: dict[int, hb.Beat] = {}

        def caught_up() -> bool:
            beats.clear()
            beats.update(hb.read_beats(self.log_dir))
            gone, now = self._gone(beats), self._clock.time()
            return all(rank in beats and (
                beats[rank].state in (hb.STALLED, hb.ENDED) or beats[rank].time >= noticed
                or beats[rank].stale(now) or gone.get(rank))
                for rank in range(self.world_size) if rank != self.rank)

        self._until(caught_up, self.settle_s)
        return beats

    def _until(self, done: Callable[[], bool], seconds: float) -> None:
        """Look whether ``done`` every ``POLL_S`` until it is, or ``seconds`` passed."""
        deadline = self._clock.perf_counter() + seconds
        while not done() and self._clock.perf_counter() < deadline:
            self._sleep(POLL_S)

    def _write(self, fields: Mapping[str, Any]) -> None:
        record = {Common.KIND: HANG, Common.RANK: self.rank, Common.TIME: self._clock.time(),
                  **fields}
        # a failure is said by the heartbeat's writer, which shares the directory
        with contextlib.suppress(OSError):
            write_text_atomically(hb.answer_path(self.log_dir), json.dumps(record))
        if self._write_job is not None:
            self._write_job(fields)
        elif self.rank != 0:
            # rank 0 is gone: its job log, if there is one, gets the answer appended
            path = os.path.join(self.log_dir, JOB_FILE)
            if os.path.exists(path) and os.path.getsize(path) > 0:
                with contextlib.suppress(OSError, ValueError), \
                        open(path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record, allow_nan=False) + "\n")

    def _answered(self, since: float) -> int | None:
        """The rank that answered for a stall that began at ``since`` (Unix s), when its
        answer is on disk: one rank answers each stall, though the ranks reach it seconds
        apart (those that stalled later find the lower ranks ended, not gone)."""
        found = hb.read_answer(self.log_dir)
        if found is None or not isinstance(found.get(Common.TIME), (int, float)) \
                or found[Common.TIME] < since:
            return None
        answered_by = found.get(JobHang.ANSWERED_BY, found.get(Common.RANK))
        return answered_by if isinstance(answered_by, int) else None

    def wait_for_answer(self, since: float) -> None:
        """Before this rank exits on a hang it did not answer: until an answer newer than
        ``since`` (Unix s: the stall's start) is on disk, or the answerer's time is up."""
        self._until(lambda: self._answered(since) is not None, self.settle_s + EXIT_GRACE_S)

    def wait_for_ends(self, timeout_s: float) -> None:
        """Before a rank exits on a hang (its own end written): until every rank the job
        does not wait for has ended too (its heartbeat says so, or it is gone), so that a
        launcher that takes the job down at the first exit finds every hang record and end
        written. The ranks reach the stall up to a timeout apart (the start-up exchange), so
        this waits up to ``timeout_s`` (at most ``MAX_END_WAIT_S``) more than the answer."""
        found = hb.read_answer(self.log_dir) or {}
        holders = set(ranks_in(found.get(JobHang.WAITING_FOR)))

        def ended() -> bool:
            beats = hb.read_beats(self.log_dir)
            gone, now = self._gone(beats), self._clock.time()
            return all(beat.state == hb.ENDED or beat.stale(now) or gone.get(rank)
                       for rank, beat in beats.items() if rank != self.rank and
                       (rank not in holders or beat.state == hb.STALLED))

        self._until(ended, self.settle_s + EXIT_GRACE_S + min(timeout_s, MAX_END_WAIT_S))
