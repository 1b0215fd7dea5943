"""One fault, one line: the ``anomaly`` records of one step on one rank, read as one event.

A single fault often trips several rules at once: an explosion is a ``gradient_explode``, a
``loss_spike`` and a ``grad_spike`` of the same step. The run log keeps one record per kind
(the contract: every kind is counted, alerted and policed on its own); the views (console,
``watch``, the HTML report, ``summary``'s text) show them as one event: one line naming the
kinds, the action of the anomaly that acted, its checkpoint, its message and the replay's
verdict, said once.

An event is a run of consecutive ``anomaly`` records of one rank with the same step, in log
order (records of other kinds between them do not break it: the ``replay`` and ``rewind``
records of that step, a hardware sample the sampler thread wrote meanwhile). The rule needs
no field a writer adds, so logs written before events existed group the same way. A ``hang``
is an event of its own: its step is the last step that ended, not a finding of that step.

A job's event (``job_event``) is one step of a job of several ranks: the kinds every rank
found, the ranks, the rank it came from, and rank 0's decision. Rank 0's job log
(job/events.py) and a view condensing rank logs (runlog/job/condense.py) both build it here.

Plain records in, plain text out: the console (a sink) and the views share this module, so
it sits below both and imports only the schema and the number format.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any

from .anomaly import ANOMALY_KINDS, HANG
from .basics import format as fmt
from .basics.rank_set import rank_set
from .job_schema import Event as JobEvent
from .records import Anomaly, Common

WARN = "warn"
# How far an action goes, weakest first: the event's acting anomaly is the one whose
# strongest action comes latest here (then the one with more actions, then the first).
_STRENGTH = {WARN: 0, "checkpoint": 1, "skip": 2, "rewind": 3, "stop": 4, "abort": 5}

Record = Mapping[str, Any]


def _strength(record: Record) -> tuple[int, int]:
    actions = record.get(Anomaly.ACTIONS) or []
    return max((_STRENGTH.get(a, 0) for a in actions), default=0), len(actions)


@dataclass(frozen=True)
class Event:
    """The anomaly records of one step on one rank (at least one), in log order."""

    records: tuple[Record, ...]

    @property
    def rank(self) -> Any:
        return self.records[0].get(Common.RANK)

    @property
    def step(self) -> Any:
        return self.records[0].get(Anomaly.STEP)

    @property
    def lead(self) -> Record:
        """The anomaly that acted: the strongest actions (``checkpoint+stop`` over
        ``warn``), the first of equals."""
        best = self.records[0]
        for record in self.records[1:]:
            if _strength(record) > _strength(best):
                best = record
        return best

    @property
    def kinds(self) -> list[str]:
        """Each kind once: the acting anomaly's first (the message is its), then the others
        in log order."""
        lead = self.lead
        found = [str(lead.get(Anomaly.ANOMALY))]
        for record in self.records:
            kind = str(record.get(Anomaly.ANOMALY))
            if kind not in found:
                found.append(kind)
        return found

    @property
    def actions(self) -> list[str]:
        return list(self.lead.get(Anomaly.ACTIONS) or [])

    @property
    def checkpoint(self) -> Any:
        """The acting anomaly's checkpoint (the step's anomalies share one), else any."""
        return self._first(Anomaly.CHECKPOINT)

    @property
    def report(self) -> Any:
        return self._first(Anomaly.REPORT)

    @property
    def message(self) -> str:
        return str(self.lead.get(Anomaly.MESSAGE))

    @property
    def verdict(self) -> str | None:
        """The replay's verdict on the step (``replay_verdict``; every anomaly of a replayed
        step carries the same one); None when the step was not replayed, or in a log
        written before the field existed (its messages end with the verdict instead)."""
        found = self._first(Anomaly.REPLAY_VERDICT)
        return None if found is None else str(found)

    def _first(self, name: str) -> Any:
        """``name`` of the acting anomaly, else of the first record that has one."""
        value = self.lead.get(name)
        if value is None:
            value = next((r.get(name) for r in self.records if r.get(name) is not None), None)
        return value


def _joins(records: Sequence[Record], record: Record) -> bool:
    """Whether ``record`` continues the event of ``records`` (its records so far)."""
    first = records[0]
    return (record.get(Common.RANK) == first.get(Common.RANK)
            and record.get(Anomaly.STEP) == first.get(Anomaly.STEP)
            and record.get(Anomaly.ANOMALY) != HANG
            and records[-1].get(Anomaly.ANOMALY) != HANG)


def add(events: MutableSequence[Event], record: Record) -> bool:
    """Fold one anomaly record into ``events`` (in log order): it joins the last event or
    opens a new one (returns True). The last event is replaced, never changed, so an event
    already handed out stays what it was."""
    if events and _joins(events[-1].records, record):
        events[-1] = Event((*events[-1].records, record))
        return False
    events.append(Event((record,)))
    return True


def group(anomalies: Iterable[Record]) -> list[Event]:
    """The events of ``anomalies`` (``anomaly`` records in log order). Each event is built
    once, whatever its size (``add`` copies the growing event per record)."""
    runs: list[list[Record]] = []
    for record in anomalies:
        if runs and _joins(runs[-1], record):
            runs[-1].append(record)
        else:
            runs.append([record])
    return [Event(tuple(records)) for records in runs]


def joined(past: Sequence[Event], recent: Iterable[Event]) -> list[Event]:
    """The events of ``past``'s records followed by ``recent``'s: the first of ``recent``
    continues the last of ``past`` when both are of one rank and step (the live view reads
    a log's older records and its tail apart, and may cut an event in two)."""
    events, later = list(past), list(recent)
    if events and later and _joins(events[-1].records, later[0].records[0]):
        # every record of that event has its first's rank and step, and none is a hang
        events[-1] = Event(events[-1].records + later.pop(0).records)
    return events + later


def acted(event: Event) -> str:
    """"checkpoint+stop -> <checkpoint>": what the acting anomaly did."""
    checkpoint = event.checkpoint
    return ("+".join(event.actions) or WARN) + (f" -> {checkpoint}" if checkpoint else "")


def detail(message: Any, verdict: Any) -> Any:
    """A message followed by the replay's verdict, when there is one (else the message as it
    is): how the verdict reads where one anomaly is told alone (an alert, its report)."""
    return f"{message}; {verdict}" if verdict else message


def event_line(event: Event, place: str = "") -> str:
    """The one line an event is shown as: ``"gradient_explode, loss_spike, grad_spike at step
    120<place>: <the acting anomaly's message>; <the replay's verdict> [checkpoint+stop ->
    <checkpoint>]"``. ``place``: where the step lies in its epoch (the console's
    ``" (epoch 1 step 120)"``). A single anomaly without a verdict reads as its record did
    before events: ``"loss_nonfinite at step 2: <message> [checkpoint+stop]"``."""
    return (f"{', '.join(event.kinds)} at step {event.step}{place}: "
            f"{detail(event.message, event.verdict)} [{acted(event)}]")


def summary_entry(event: Event) -> dict[str, Any]:
    """An event as plain JSON (``summary --json``'s ``events``), its line included."""
    return {Anomaly.STEP: event.step, "kinds": event.kinds, Anomaly.ACTIONS: event.actions,
            Anomaly.CHECKPOINT: event.checkpoint, Anomaly.REPORT: event.report,
            Anomaly.MESSAGE: event.message, Anomaly.REPLAY_VERDICT: event.verdict,
            "line": event_line(event)}


def counts(anomalies: int, events: int) -> str:
    """"3 anomalies in 1 event", or "2 anomalies" when each is an event of its own."""
    what = fmt.count(anomalies, "anomaly", "anomalies")
    return what if events == anomalies else f"{what} in {fmt.count(events, 'event')}"


def job_origin(named: int | None, every: Iterable[int]) -> int | None:
    """The rank a job's event came from: ``named`` (the rank a gradient anomaly's attribution
    names, or the one a peer stop follows), else the one rank that found anything; None when
    several did and none is named."""
    if named is not None:
        return named
    ranks = set(every)
    return next(iter(ranks)) if len(ranks) == 1 else None


def job_event(step: Any, ranks_of: Mapping[str, Iterable[int]], *, named: int | None,
              place: tuple[Any, Any], places: Mapping[int, tuple[Any, Any]],
              actions: Sequence[str], message: Any, report: Any, checkpoint: Any,
              verdict: Any) -> dict[str, Any]:
    """The ``event`` fields (job_schema.Event) of a job's step: ``ranks_of``, each kind any
    rank found -> those ranks (not empty); ``named``, the origin when known (``job_origin``);
    ``place``, its (host, device) when known, else looked up in ``places``; the rest, the
    job's decision (rank 0's): ``actions`` (none: warned), its first anomaly's ``message``
    (None: the kinds and ranks said), ``report``, ``checkpoint``, the replay's ``verdict``."""
    kinds = sorted(ranks_of, key=lambda kind: ANOMALY_KINDS.index(kind)
                   if kind in ANOMALY_KINDS else len(ANOMALY_KINDS))
    every: set[int] = set().union(*ranks_of.values())
    origin = job_origin(named, every)
    if origin is not None and tuple(place) == (None, None):
        place = places.get(origin, (None, None))
    host, device = place if origin is not None else (None, None)
    fields: dict[str, Any] = {
        JobEvent.STEP: step, JobEvent.KINDS: kinds, JobEvent.RANKS: rank_set(every),
        JobEvent.RANK_COUNT: len(every), JobEvent.ORIGIN_RANK: origin,
        JobEvent.ORIGIN_HOST: host, JobEvent.ORIGIN_DEVICE: device,
        JobEvent.ACTIONS: list(actions) or [WARN],
        JobEvent.MESSAGE: message if message is not None else
        f"{', '.join(kinds)} on rank(s) {rank_set(every)}",
        JobEvent.REPORT: report, JobEvent.CHECKPOINT: checkpoint}
    if verdict is not None:
        fields[JobEvent.REPLAY_VERDICT] = verdict
    if len(kinds) > 1:
        fields[JobEvent.BY_KIND] = {kind: rank_set(ranks_of[kind]) for kind in kinds}
    return fields
