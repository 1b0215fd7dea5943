"""One report and one checkpoint for a job-level event where every rank holds the same
training state (issue #43).

Under pure data parallelism (``FrameworkHooks.replicated``) the ranks' weights and optimizer
state are replicas and every rank stops after the same step (ranks/: one stop for all), so
a report and a checkpoint per rank would be N copies of one. When the ranks exchange after
each step, rank 0 writes the job's (for its own anomaly, or for the ``peer_stop`` by which
it follows another rank's) and the other ranks write none: they still log the anomaly with
its actions, since each holds the decision. Where ranks hold different parts of the state
(tensor, pipeline, expert or optimizer-state sharding) every rank writes its own.

A rank leaves its files to rank 0 only for what certainly reaches rank 0 at the same step:
a stop found before the step's exchange (rank 0 learns it from the stop codes and the job
rows' kinds), and a ``peer_stop``, which rank 0 takes too (or it stops on its own). What a
rank finds after its step's exchange (at ``close``, after the last one) reaches no one in
time, and a ``replica_mismatch`` says the replicas differ: those keep per-rank files.

The non-zero ranks' records say whose the files are; their ``report`` and ``checkpoint``
stay null rather than naming rank 0's paths: when they act (before the exchange) rank 0 has
written nothing yet, its names depend on what rank 0 found, and its save may fail; the
job log's ``event`` names the files rank 0 did write.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import PEER_STOP, REPLICA_MISMATCH, SIGNAL_STOP, Anomaly
from ..basics.rank_set import rank_set
from ..events import job_origin
from ..framework import FrameworkHooks
from ..policy import Policy
from ..records import Anomaly as Record
from .replays import place_text

if TYPE_CHECKING:
    import numpy as np

    from ..job.events import Places
    from ..ranks.peers import Peers
    from ..ranks.rank_sync import RankSync

# The anomaly report's section on the job (rank 0's report of a job-level event).
RANKS, BY_KIND = "ranks", "by_kind"
JOB_NOTE = ("one report and one checkpoint for the job: every rank holds the same training "
            "state (data parallelism), and the other ranks write none")
# Each anomaly kind -> the ranks (ascending) that found it (job/fields.py's ``kinds_of``).
Kinds = Mapping[str, "np.ndarray"]


class JobScope:
    """What the responder sees of the other ranks: whether they exchange after each step,
    the latest exchange's rows, which rank found which kinds in them (``kinds``: the job
    layer's reading of a row, job/fields.py's ``kinds_of``) and where each rank runs. The
    monitor builds it over its ``RankSync`` and ``Peers``; the default sees no other rank
    (every rank then writes its own files)."""

    def __init__(self, sync: RankSync | None = None, peers: Peers | None = None,
                 kinds: Callable[[np.ndarray], Kinds] | None = None):
        self._sync, self._peers, self.kinds = sync, peers, kinds

    @property
    def exchanging(self) -> bool:
        return self._sync is not None and self._sync.exchanging

    @property
    def rows(self) -> np.ndarray | None:
        return None if self._sync is None else self._sync.job_rows

    @property
    def places(self) -> Places:
        return {} if self._peers is None else self._peers.places


class JobShare:
    """Which of a job-level event's files this rank writes, and what rank 0's report says of
    the other ranks."""

    def __init__(self, *, rank: int, policy: Policy, framework: FrameworkHooks,
                 scope: JobScope):
        self.rank, self._policy, self._framework = rank, policy, framework
        self.scope = scope
        self._seen: Any = None                                  # the latest rows seen
        self._exchanged: tuple[int, np.ndarray] | None = None   # (step, its exchange's rows)
        # rank 0's reports of the job written before their step's exchange: (anomaly, its
        # job section then, path), written again after it with what the other ranks found
        self._written: list[tuple[Anomaly, dict[str, Any], str]] = []

    def shared(self) -> bool:
        """One set of files for the job: the ranks exchange and hold the same state."""
        return self.scope.exchanging and self._framework.replicated_state()

    def see(self, step: int) -> bool:
        """At every act (``step``: the latest step): True when an exchange came since the
        previous call. Each exchange hands new rows (ranks/consensus.py), and the first act
        after a step's exchange is the peers' findings (ranks/decisions.py), so new rows are
        ``step``'s."""
        rows = self.scope.rows
        if rows is None or rows is self._seen:
            return False
        self._seen, self._exchanged = rows, (step, rows)
        return True

    def exchanged(self, step: int) -> bool:
        """``step``'s exchange is over: what is found now reaches no other rank in time."""
        return self._exchanged is not None and self._exchanged[0] == step

    def leaves(self, anomaly: Anomaly, step: int) -> bool:
        """This rank leaves ``anomaly``'s report and checkpoint to rank 0."""
        if self.rank == 0 or not _job_level(anomaly):
            return False
        if anomaly.kind != PEER_STOP and self.exchanged(step):
            return False
        return self.shared()

    def leaves_signal(self, step: int) -> bool:
        """A signal's checkpoint at ``step`` is rank 0's: it follows this rank's stop."""
        self.see(step)
        return self.rank != 0 and not self.exchanged(step) and self.shared()

    def for_job(self, anomaly: Anomaly) -> bool:
        """Rank 0's report (and checkpoint) of ``anomaly`` are the job's."""
        return self.rank == 0 and _job_level(anomaly) and self.shared()

    def keep(self, anomaly: Anomaly, section: dict[str, Any], path: str, step: int) -> None:
        """Rank 0's report of the job at ``path``: kept for ``take`` when written before
        ``step``'s exchange."""
        if not self.exchanged(step):
            self._written.append((anomaly, section, path))

    def take(self, step: int) -> list[tuple[Anomaly, dict[str, Any], str]]:
        """After ``step``'s exchange: the reports ``keep`` kept of it."""
        written, self._written = [w for w in self._written if w[0].step == step], []
        return written

    def by_kind(self, step: int) -> Kinds:
        """Each kind the ranks found at ``step`` before its exchange -> those ranks."""
        if not self.exchanged(step) or self._exchanged is None or self.scope.kinds is None:
            return {}
        return self.scope.kinds(self._exchanged[1])

    def checkpoint_asked(self, step: int) -> bool:
        """A rank found at ``step`` a kind whose policy checkpoints (and stops): rank 0 writes
        the job's checkpoint even when its own anomaly, or the first stop it follows, asks
        for none."""
        return any("checkpoint" in self._policy.actions_for(kind) for kind in self.by_kind(step))

    def section(self, step: int, own: Sequence[Anomaly]) -> dict[str, Any]:
        """The report's ``job`` section: ``by_kind`` (each kind, a stop's reason included ->
        the ranks that found it, a rank set), ``ranks`` (all of them) and the origin rank
        with its host and device (the rank a gradient anomaly came from, the rank a peer
        stop follows, else the one rank that found anything; null when several)."""
        ranks_of = found_ranks(self.by_kind(step), own, self.rank, stops=True)
        every: set[int] = set().union(*ranks_of.values())
        origin = job_origin(named_origin(own), every)
        host, device = self.scope.places.get(origin, (None, None)) if origin is not None \
            else (None, None)
        return {RANKS: rank_set(every), BY_KIND: {k: rank_set(r) for k, r in ranks_of.items()},
                Record.ORIGIN_RANK: origin, Record.ORIGIN_HOST: host,
                Record.ORIGIN_DEVICE: device}


def found_ranks(by_kind: Mapping[str, Sequence[int] | np.ndarray], own: Sequence[Anomaly],
                rank: int, *, stops: bool
                ) -> dict[str, set[int]]:
    """Each kind found at a step -> the ranks that found it: ``by_kind`` (the exchange's),
    and ``own``, this ``rank``'s anomalies. A ``peer_stop`` is this rank following another,
    no kind of its own; ``stops``: its reason counts as the followed rank's kind (a signal,
    a user's stop), as a report tells it."""
    ranks_of = {kind: {int(r) for r in ranks} for kind, ranks in by_kind.items() if len(ranks)}
    for anomaly in own:
        if anomaly.kind != PEER_STOP:
            ranks_of.setdefault(anomaly.kind, set()).add(rank)
        elif stops and anomaly.origin is not None:
            ranks_of.setdefault(anomaly.origin[1], set()).add(anomaly.origin[0])
    return ranks_of


def named_origin(own: Sequence[Anomaly]) -> int | None:
    """The rank ``own``'s anomalies name as the origin: a gradient anomaly's attribution,
    else the rank a peer stop follows (``events.job_origin``)."""
    origin = next((a.origin_rank for a in own if a.origin_rank is not None), None)
    return origin if origin is not None else \
        next((a.origin[0] for a in own if a.origin is not None), None)


def left_note(anomaly: Anomaly) -> str:
    """What a non-zero rank's record says of the files it left to rank 0."""
    what = "report and checkpoint are" if "checkpoint" in anomaly.actions else "report is"
    return f"; the job's {what} rank 0's (every rank holds the same training state)"


def checkpoint_reason(anomaly: Anomaly) -> str:
    """Rank 0's checkpoint for a peer that stopped on a signal is the job's signal
    checkpoint (that rank wrote none)."""
    origin = anomaly.origin
    return "signal" if anomaly.kind == PEER_STOP and origin and origin[1] == SIGNAL_STOP \
        else "anomaly"


def section_lines(job: dict[str, Any]) -> list[str]:
    """The report's Markdown of its ``job`` section."""
    lines = ["", "## The ranks", ""]
    lines += [f"- {kind}: rank{'s' if ',' in ranks or '-' in ranks else ''} {ranks}"
              for kind, ranks in job[BY_KIND].items()]
    origin = job[Record.ORIGIN_RANK]
    if origin is not None:
        host, device = job[Record.ORIGIN_HOST], job[Record.ORIGIN_DEVICE]
        where = f" ({place_text(host, device)})" if host is not None else ""
        lines.append(f"- it came from rank {origin}{where}")
    return lines


def _job_level(anomaly: Anomaly) -> bool:
    """Every rank stops after the step, and holds what a checkpoint would save."""
    return anomaly.stops and anomaly.kind != REPLICA_MISMATCH
