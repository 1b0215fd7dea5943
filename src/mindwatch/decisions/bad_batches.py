"""The bad batches (contract 1.10): which samples a step's anomaly came with, kept in a
ledger, and withheld by themselves when the run comes back.

- every anomaly of a step whose batch the adapter identified (``observe(batch=...)``,
  basics/batch_identity.py) carries it: ``batch`` = its fingerprint and sample indices;
- a withheld step (``skipped``) whose loss or gradients were out of bounds (``BATCH_KINDS``)
  and replayed as anomalous again (bit-identical or not: the batch fails again), or that no
  replay checked, enters ``bad_batches.jsonl`` in
  the run directory: one line per batch (fingerprint, indices, step, epoch, kinds, origin rank,
  ``reproduced``: true, or null without a replay). A replay that came out healthy is a
  transient fault of the device, never the batch's: it never enters; nor does a step whose
  LR or update size was found at fault (``NOT_THE_BATCH``), or came within ``DAMAGE_STEPS``
  of such an update that went into the weights. Each rank writes its own
  batch's line (appends of one short line: whole on a local or network filesystem). Under
  data parallelism the reduced gradients are every rank's: a gradient anomaly is a rank's
  own where its ``origin_rank`` names it; where no rank is named (no local norms: Hugging
  Face's Trainer's DDP, a communication hook of the user's), only beside an anomaly of the
  rank's own loss, so that the healthy ranks' batches stay out;
- the ledger of a resumed run directory (``resume=True``) and the ledgers ``skip_batches``
  names are read at the start: ``known(fingerprint)`` answers the adapters, whose protected
  step withholds a known batch's update before it is applied, and reports the step
  ``skipped`` with ``skip_reason="known_bad_batch"``: then its anomalies are left unsaid
  (no stop, no new report) and one notice says which batch it was. Matched by content, never
  by step: a restarted run's data may come in another order.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..anomaly import (
    LOSS_NONFINITE,
    LOSS_SPIKE,
    LR_ANOMALY,
    TRANSIENT_FAULT,
    UPDATE_RATIO,
    Anomaly,
)
from ..basics.batch_identity import FINGERPRINT, INDICES
from ..observation import StepObservation
from ..records import Anomaly as AnomalyRecord
from ..records import BadBatch, Replay
from ..recovery.skipping import SKIPPABLE_KINDS
from ..runlog.bad_batches import LEDGER, read_ledger
from ..settings import MonitorSettings, ledger_list

KNOWN_BAD_BATCH = "known_bad_batch"
# What a batch can cause: its loss or its gradients out of bounds, the kinds a step withholds
# on its own values (recovery/skipping.py) less the LR's
BATCH_KINDS = frozenset(SKIPPABLE_KINDS) - {LR_ANOMALY}
# Of those, the kinds each rank finds in its own loss (the others: the gradients, reduced
# over the ranks under data parallelism)
LOSS_KINDS = frozenset({LOSS_NONFINITE, LOSS_SPIKE})
# Found with those, these say the step's fault lies elsewhere: the LR (its schedule, a bad
# value), or an update absurd against the weights (the optimizer's state); a transient fault
# is the device's. The batch then stays out of the ledger: a run resumed with the LR fixed
# trains on it as the healthy run did (resume advice).
NOT_THE_BATCH = frozenset({LR_ANOMALY, UPDATE_RATIO, TRANSIENT_FAULT})
# An LR or update-size anomaly whose update went into the weights leaves the model's state
# suspect for this many steps: a fault then is the state's as much as the batch's (the resume
# advice names a state from before it), and the batch stays out of the ledger.
DAMAGE_STEPS = 50


def ledger_paths(settings: MonitorSettings, log_dir: str) -> list[str]:
    """The bad-batch ledgers a run reads at its start: ``skip_batches``, and under ``resume``
    the run directory's own."""
    paths = ledger_list(settings.skip_batches)
    own = os.path.join(log_dir, LEDGER)
    if settings.resume and os.path.isfile(own) and own not in paths:
        paths.append(own)
    return paths


def with_indices(batch: Mapping[str, Any] | None, indices: Any) -> dict[str, Any] | None:
    """``batch`` (an identity) with the sample ``indices`` a loop gave; None without a batch
    (indices alone identify nothing: a restarted run's data may be ordered otherwise)."""
    if batch is None:
        return None
    found = dict(batch)
    if indices is not None:
        try:
            found[INDICES] = [int(index) for index in indices]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"batch_indices must be a sequence of ints (the step's sample "
                            f"indices); got {indices!r}") from exc
    return found


class BadBatches:
    """``log_dir``: where this run's ledger is written; ``known_from``: ledgers read at the
    start (the resumed directory's own, ``skip_batches``); ``replayed(step)``: the replay
    record of ``step`` when one ran (None: no replay); ``world_size``: the job's ranks."""

    def __init__(self, *, log_dir: str, rank: int, known_from: Iterable[str] = (),
                 replayed: Callable[[int], Mapping[str, Any] | None] = lambda step: None,
                 world_size: int = 1):
        self.path = os.path.join(log_dir, LEDGER)
        self.rank = rank
        self.world_size = world_size
        self._replayed = replayed
        self._lock = threading.Lock()
        self._known: dict[str, dict[str, Any]] = {}
        self._damaged_at: int | None = None     # the latest step an absurd update went in
        for path in known_from:
            for entry in read_ledger(path):
                self._known.setdefault(entry[FINGERPRINT], entry)

    def known(self, batch: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
        """The ledger entry of a batch (its identity or fingerprint); None: not a known one."""
        if batch is None:
            return None
        fingerprint = batch if isinstance(batch, str) else batch.get(FINGERPRINT)
        return self._known.get(str(fingerprint))

    @property
    def entries(self) -> list[dict[str, Any]]:
        return list(self._known.values())

    def review(self, obs: StepObservation, found: list[Anomaly]) -> tuple[list[Anomaly],
                                                                        str | None]:
        """The step's anomalies with its batch, and a notice to give (a known batch's step:
        its anomalies are left unsaid). Enters the batch into the ledger when it earned it."""
        batch = obs.batch
        if obs.skip_reason == KNOWN_BAD_BATCH:
            entry = self.known(batch)
            kept = [a for a in found if a.kind == TRANSIENT_FAULT]
            if entry is None:       # under data parallelism: another rank's batch is known
                return kept, (f"step {obs.step}: its update was withheld on every rank, "
                              "another rank's batch being a known bad one; training goes on")
            return kept, (
                f"step {obs.step}: its update was withheld, its batch being a known bad one "
                f"({entry.get(BadBatch.FINGERPRINT)}, bad at step {entry.get(BadBatch.STEP)}: "
                f"{', '.join(entry.get(BadBatch.KINDS) or [])}); training goes on")
        if batch is None:
            return found, None
        for anomaly in found:
            anomaly.fields[AnomalyRecord.BATCH] = dict(batch)
        own = self._own(found)
        elsewhere = any(a.kind in NOT_THE_BATCH for a in found)
        if elsewhere and not obs.skipped:
            self._damaged_at = obs.step
        damaged = self._damaged_at is not None and \
            0 <= obs.step - self._damaged_at <= DAMAGE_STEPS
        if obs.skipped and own and not elsewhere and not damaged:
            return found, self._enter(obs, batch, own)
        return found, None

    def _own(self, found: list[Anomaly]) -> list[Anomaly]:
        """The anomalies of the step that this rank's batch caused (module docstring)."""
        own = [a for a in found if a.kind in BATCH_KINDS and a.origin_rank in (None, self.rank)]
        if self.world_size > 1 and not any(a.kind in LOSS_KINDS for a in own):
            # the reduced gradients' anomalies, no rank named: another rank's as much
            own = [a for a in own if a.origin_rank == self.rank]
        return own

    def _enter(self, obs: StepObservation, batch: Mapping[str, Any],
               found: list[Anomaly]) -> str | None:
        """Enters the batch; what to say when its line could not be written (a full disk:
        the batch is still known to this run, and training goes on)."""
        fingerprint = str(batch.get(FINGERPRINT))
        if fingerprint in self._known:
            return None
        replay = self._replayed(obs.step)
        entry = {BadBatch.FINGERPRINT: fingerprint, BadBatch.INDICES: batch.get(INDICES),
                 BadBatch.STEP: obs.step, BadBatch.EPOCH: obs.epoch,
                 BadBatch.KINDS: sorted({a.kind for a in found}),
                 BadBatch.ORIGIN_RANK: self.rank,
                 BadBatch.REPRODUCED: None if replay is None else True,
                 BadBatch.TIME: obs.time}
        if replay is not None and replay.get(Replay.HEALTHY):
            return None                         # the device's fault, not the batch's
        self._known[fingerprint] = entry
        line = json.dumps(entry, allow_nan=False) + "\n"
        try:
            with self._lock:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(line)
        except OSError as exc:
            return (f"step {obs.step}: its batch ({fingerprint}) could not be written to "
                    f"{self.path} ({exc.strerror or exc}); this run still withholds it if it "
                    "comes again, a restarted one will not know it")
        return None
