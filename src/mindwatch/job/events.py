"""A job-level event: the ``event`` record of a step on which any rank found an anomaly, from
what every rank found (the exchanged kinds: job/fields.py) and what rank 0 decided.

Every rank takes the same decision at the same step (ranks/: one stop for all), so rank 0's
actions are the job's, and its report and checkpoint are the job's (one for the job under
data parallelism: decisions/job_share.py). A ``peer_stop`` is rank 0 following another
rank, not a kind of its own: the kinds are those of the ranks that found them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import ANOMALY_KINDS, PEER_STOP, Anomaly
from ..basics.rank_set import rank_set
from ..job_schema import Event
from ..records import Anomaly as AnomalyRecord

if TYPE_CHECKING:
    import numpy as np

Places = Mapping[int, tuple[str | None, int | None]]


def event(step: int, by_kind: Mapping[str, Sequence[int] | np.ndarray],
          own: Sequence[Anomaly], places: Places) -> dict[str, Any] | None:
    """The ``event`` fields of ``step``: ``by_kind``, each kind any rank found -> its ranks
    (from the exchange); ``own``, rank 0's anomalies of the step (its decisions, and the
    kinds it found after the exchange). None when no rank found anything."""
    ranks_of: dict[str, set[int]] = {kind: {int(r) for r in ranks}
                                     for kind, ranks in by_kind.items() if len(ranks)}
    for anomaly in own:
        if anomaly.kind != PEER_STOP:
            ranks_of.setdefault(anomaly.kind, set()).add(0)
    if not ranks_of:
        return None
    kinds = sorted(ranks_of, key=lambda k: ANOMALY_KINDS.index(k)
                   if k in ANOMALY_KINDS else len(ANOMALY_KINDS))
    every = set().union(*ranks_of.values())
    origin = _origin(own, every)
    host, device = places.get(origin, (None, None)) if origin is not None else (None, None)
    first = next((a for a in own if a.kind != PEER_STOP), own[0] if own else None)
    actions: list[str] = []
    for anomaly in own:
        actions += [action for action in anomaly.actions if action not in actions]
    fields: dict[str, Any] = {
        Event.STEP: step, Event.KINDS: kinds, Event.RANKS: rank_set(every),
        Event.RANK_COUNT: len(every), Event.ORIGIN_RANK: origin, Event.ORIGIN_HOST: host,
        Event.ORIGIN_DEVICE: device, Event.ACTIONS: actions or ["warn"],
        Event.MESSAGE: first.message if first is not None else
        f"{', '.join(kinds)} on rank(s) {rank_set(every)}",
        Event.REPORT: next((a.report for a in own if a.report), None),
        Event.CHECKPOINT: next((a.checkpoint for a in own if a.checkpoint), None)}
    verdict = next((a.fields[AnomalyRecord.REPLAY_VERDICT] for a in own
                    if a.fields.get(AnomalyRecord.REPLAY_VERDICT)), None)
    if verdict is not None:
        fields[Event.REPLAY_VERDICT] = verdict
    if len(kinds) > 1:
        fields[Event.BY_KIND] = {kind: rank_set(ranks_of[kind]) for kind in kinds}
    return fields


def _origin(own: Sequence[Anomaly], every: set[int]) -> int | None:
    """The rank the event came from: the one a gradient anomaly's attribution names, the
    rank a peer stop follows, else the one rank that found anything (None: several)."""
    for anomaly in own:
        if anomaly.origin_rank is not None:
            return anomaly.origin_rank
    for anomaly in own:
        if anomaly.origin is not None:
            return anomaly.origin[0]
    return next(iter(every)) if len(every) == 1 else None
