"""A job-level event: the ``event`` record of a step on which any rank found an anomaly, from
what every rank found (the exchanged kinds: job/fields.py) and what rank 0 decided.

Every rank takes the same decision at the same step (ranks/: one stop for all), so rank 0's
actions are the job's, and its report and checkpoint are the job's (one for the job under
data parallelism: decisions/job_share.py). A ``peer_stop`` is rank 0 following another
rank, not a kind of its own: the kinds are those of the ranks that found them. The event's
shape is events.py's ``job_event``, which a view condensing rank logs builds too.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import PEER_STOP, Anomaly
from ..decisions.job_share import found_ranks, named_origin
from ..events import job_event
from ..records import Anomaly as AnomalyRecord

if TYPE_CHECKING:
    import numpy as np

Places = Mapping[int, tuple[str | None, int | None]]


def event(step: int, by_kind: Mapping[str, Sequence[int] | np.ndarray],
          own: Sequence[Anomaly], places: Places) -> dict[str, Any] | None:
    """The ``event`` fields of ``step``: ``by_kind``, each kind any rank found -> its ranks
    (from the exchange); ``own``, rank 0's anomalies of the step (its decisions, and the
    kinds it found after the exchange). None when no rank found anything."""
    ranks_of = found_ranks(by_kind, own, 0, stops=False)
    if not ranks_of:
        return None
    first = next((a for a in own if a.kind != PEER_STOP), own[0] if own else None)
    actions: list[str] = []
    for anomaly in own:
        actions += [action for action in anomaly.actions if action not in actions]
    return job_event(
        step, ranks_of, named=named_origin(own), place=(None, None), places=places,
        actions=actions, message=first.message if first is not None else None,
        report=next((a.report for a in own if a.report), None),
        checkpoint=next((a.checkpoint for a in own if a.checkpoint), None),
        verdict=next((a.fields[AnomalyRecord.REPLAY_VERDICT] for a in own
                      if a.fields.get(AnomalyRecord.REPLAY_VERDICT)), None))
