"""A job-level event: the ``event`` record of a step on which any rank found an anomaly, from
what every rank found (the exchanged kinds: job/fields.py) and what rank 0 decided.

Every rank takes the same decision at the same step (ranks/: one stop for all), so rank 0's
actions are the job's, and its report and checkpoint are the job's (one for the job under
data parallelism: decisions/job_share.py). A ``peer_stop`` is rank 0 following another
rank, not a kind of its own: the kinds are those of the ranks that found them. The event's
shape is events.py's ``job_event``, which a view condensing rank logs builds too.

A straggler event says which ranks are slow now and by what cause (each rank's judgement of
itself, exchanged: ``slow``), grouped by host: when every rank of a host is slow, the answer
is the host, not its eight ranks.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import PEER_STOP, STRAGGLER, Anomaly
from ..basics.rank_set import rank_set
from ..decisions.job_share import found_ranks, named_origin
from ..decisions.replays import place_text
from ..detectors.slow_cause import CAUSES
from ..events import job_event
from ..job_schema import Event as JobEvent
from ..records import Anomaly as AnomalyRecord

if TYPE_CHECKING:
    import numpy as np

Places = Mapping[int, tuple[str | None, int | None]]


def event(step: int, by_kind: Mapping[str, Sequence[int] | np.ndarray],
          own: Sequence[Anomaly], places: Places, slow: np.ndarray | None = None
          ) -> dict[str, Any] | None:
    """The ``event`` fields of ``step``: ``by_kind``, each kind any rank found -> its ranks
    (from the exchange); ``own``, rank 0's anomalies of the step (its decisions, and the
    kinds it found after the exchange); ``slow``, the cause each rank is slow by now (0:
    none, else 1 + its index in slow_cause.CAUSES). None when no rank found anything."""
    ranks_of = found_ranks(by_kind, own, 0, stops=False)
    if not ranks_of:
        return None
    first = next((a for a in own if a.kind != PEER_STOP), own[0] if own else None)
    actions: list[str] = []
    for anomaly in own:
        actions += [action for action in anomaly.actions if action not in actions]
    fields = job_event(
        step, ranks_of, named=named_origin(own), place=(None, None), places=places,
        actions=actions, message=first.message if first is not None else None,
        report=next((a.report for a in own if a.report), None),
        checkpoint=next((a.checkpoint for a in own if a.checkpoint), None),
        verdict=next((a.fields[AnomalyRecord.REPLAY_VERDICT] for a in own
                      if a.fields.get(AnomalyRecord.REPLAY_VERDICT)), None))
    if STRAGGLER in ranks_of and slow is not None:
        fields[JobEvent.MESSAGE] += slow_note(slow, places)
    return fields


def slow_note(slow: np.ndarray, places: Places) -> str:
    """"; slow now: all 8 ranks of host node-b (ranks 8-15) by their compute: the host",
    or each slow rank with its place and cause; "" when none is slow. A host is named when
    it has several ranks and all of them are slow."""
    import numpy as np

    ranks = np.flatnonzero(slow > 0).tolist()
    if not ranks:
        return ""
    cause = {rank: CAUSES[int(slow[rank]) - 1] if slow[rank] <= len(CAUSES) else "unknown"
             for rank in ranks}
    on_host: dict[str | None, list[int]] = {}
    for rank in ranks:
        on_host.setdefault(places.get(rank, (None, None))[0], []).append(rank)
    sizes: dict[str | None, int] = {}
    for host, _ in places.values():     # at an event only: the ranks of each slow host
        if host in on_host:
            sizes[host] = sizes.get(host, 0) + 1
    parts = []
    for host, slow_ranks in on_host.items():
        named = {cause[rank] for rank in slow_ranks}
        causes = [c for c in (*CAUSES, "unknown") if c in named]
        if host is not None and len(slow_ranks) > 1 and sizes.get(host) == len(slow_ranks):
            parts.append(f"all {len(slow_ranks)} ranks of host {host} (ranks "
                         f"{rank_set(slow_ranks)}) by their {' and '.join(causes)}: the host")
            continue
        for rank in slow_ranks:
            where = f" ({place_text(*places[rank])})" if rank in places else ""
            parts.append(f"rank {rank}{where} by its {cause[rank]}")
    return "; slow now: " + ", ".join(parts)
