"""``on_anomaly="rewind"``: back to the last healthy snapshot of the training state, then on.

Who does what:

- The adapter holds the snapshots: a ``SnapshotStore`` handed in through ``FrameworkHooks``
  (host copies of the train cell's weights, optimizer state and step, loss scale). On
  several ranks it also exchanges each rank's wish after every step.
- This module decides when a snapshot is due, which snapshot a rewind goes back to, when
  rewinding escalates, and what the detectors remember:
  - **Snapshots** every ``snapshot_every`` steps, only of a step no anomaly of the training
    state touched (a touched step defers it to the next healthy one), plus one when training
    begins; the last ``snapshots_kept`` are kept.
  - **Target**: the most recent snapshot taken before the anomaly's onset (its step, or
    where a rise began for ``loss_rising``). The batches in between are not trained on again.
  - **Escalation**: after ``max_rewinds`` rewinds, or when no kept snapshot is old enough,
    the anomaly becomes ``checkpoint_and_stop``, and its message says why.
  - **Detectors** go back with the weights: their state at the snapshot is restored, so the
    bad values leave the spike and trend windows (hardware rules keep theirs).

Ranks must agree on every one of these, so a step's decision is made in two halves:
``review`` (inside ``Monitor.observe``) marks this rank's anomalies and forms its wish, and
``settle`` (after the adapter's exchange, with every rank's wish) carries out the same
decision on every rank. Snapshot steps are collective decisions too, so every rank holds
snapshots of the same steps and picks the same target.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..anomaly import Anomaly
from ..basics.once import OnceMessages
from ..detectors import Detector
from ..policy import REWIND, REWINDABLE_KINDS, Policy


def require_snapshots(policies: Mapping[str, str], store: SnapshotStore | None) -> None:
    """Refuse "rewind" at construction, before any file is made, when nothing can snapshot."""
    if store is None and REWIND in policies.values():
        raise ValueError(
            "on_anomaly 'rewind' needs a framework that can snapshot the training state "
            "(FrameworkHooks.snapshots): use mindwatch.mindspore.TrainMonitor, or another "
            "policy with the framework-free Monitor")


class SnapshotStore(Protocol):
    """The framework's side: copies of the whole training state, kept by step."""

    def take(self, step: int) -> int:
        """Copy the training state as it is after ``step``; returns the bytes held."""

    def restore(self, step: int) -> None:
        """Put the state copied at ``step`` back, bit for bit."""

    def drop(self, step: int) -> None:
        """Forget the copy of ``step``."""


@dataclass(frozen=True)
class RewindWish:
    """One rank's request at a step: go back before ``onset``, because of ``kind``."""
    onset: int
    kind: str
    rank: int


@dataclass
class _Snapshot:
    step: int
    detectors: list[dict[str, Any]]


@dataclass
class RewindEvent:
    """A rewind carried out: at ``step``, back to the snapshot of ``to_step``."""
    step: int
    to_step: int
    anomaly: str
    rewinds: int
    origin_rank: int


class RewindGuard:
    def __init__(self, policy: Policy, *, snapshot_every: int, snapshots_kept: int,
                 max_rewinds: int, rank: int, store: SnapshotStore | None,
                 detectors: Sequence[Detector]):
        self.kinds = frozenset(k for k in REWINDABLE_KINDS if policy.policy_for(k) == REWIND)
        self.snapshot_every, self.snapshots_kept = snapshot_every, snapshots_kept
        self.max_rewinds, self.rank, self.store = max_rewinds, rank, store
        # Detectors of the training state go back with it; hardware rules do not.
        self._detectors = [d for d in detectors if not d.watches_hardware]
        self._snapshots: deque[_Snapshot] = deque()
        self._last_due: int | None = None      # step the snapshot interval counts from
        self._held: list[Anomaly] = []
        self.rewinds = 0
        self.touched = False                   # this step had an anomaly of the training state
        self.wish: RewindWish | None = None
        self._problems = OnceMessages()        # failed snapshots, for the monitor to say

    @property
    def active(self) -> bool:
        return bool(self.kinds)

    @property
    def snapshot_steps(self) -> list[int]:
        return [snapshot.step for snapshot in self._snapshots]

    def begin(self, step: int) -> None:
        """Training begins after ``step``: the first snapshot, so that an early fault has a
        state to go back to (later run segments keep the snapshots they have)."""
        if self.active and not self._snapshots:
            self._take(step)

    def review(self, step: int, found: list[Anomaly]) -> list[Anomaly]:
        """Mark this step's "rewind" anomalies; returns the ones to record now. The others
        are held until ``settle``, whose outcome their record and report tell."""
        self.touched = any(anomaly.kind in REWINDABLE_KINDS for anomaly in found)
        self.wish = None
        if not self.kinds:
            return found
        now = []
        for anomaly in found:
            if anomaly.kind not in self.kinds or anomaly.actions:
                now.append(anomaly)
                continue
            onset = anomaly.first_step or step
            why_not = self._why_not(onset)
            if why_not is not None:
                anomaly.actions = ["checkpoint", "stop"]
                anomaly.message += f"; escalated to checkpoint_and_stop: {why_not}"
                now.append(anomaly)
                continue
            anomaly.actions = ["rewind"]
            self._held.append(anomaly)
            if self.wish is None or onset < self.wish.onset:
                self.wish = RewindWish(onset, anomaly.kind, self.rank)
        return now

    def _why_not(self, onset: int) -> str | None:
        if self.rewinds >= self.max_rewinds:
            return (f"{self.rewinds} rewinds already (max_rewinds={self.max_rewinds}), so "
                    "going back does not cure this fault")
        if self._before(onset) is None:
            kept = ", ".join(map(str, self.snapshot_steps)) or "none"
            return (f"no kept snapshot was taken before step {onset}, where it began "
                    f"(snapshots of steps: {kept}); keep more (snapshots_kept) or take them "
                    "more often (snapshot_every)")
        return None

    def _before(self, onset: int) -> _Snapshot | None:
        for snapshot in reversed(self._snapshots):
            if snapshot.step < onset:
                return snapshot
        return None

    def settle(self, step: int, wishes: Sequence[RewindWish], touched: bool,
               stopping: bool) -> tuple[RewindEvent | None, list[Anomaly]]:
        """Every rank's wishes for ``step`` (this one's included) and whether an anomaly
        touched it on any rank: rewind, or take a snapshot when one is due. Returns the
        rewind carried out (or None) and this rank's held anomalies, to record now."""
        held, self._held = self._held, []
        if stopping or not wishes:
            for anomaly in held:        # another rank's stop ends the run at this step
                anomaly.actions = ["stop"]
                anomaly.message += "; not rewound: the run stops at this step"
            if not stopping and not touched:
                self._snapshot_if_due(step)
            return None, held
        wish = min(wishes, key=lambda w: (w.onset, w.rank))
        target = self._before(wish.onset)
        if target is None:              # every rank holds the same snapshots: cannot happen
            raise RuntimeError(f"no snapshot before step {wish.onset} to rewind to; "
                               f"snapshots: {self.snapshot_steps}")
        assert self.store is not None
        self.store.restore(target.step)
        for detector, state in zip(self._detectors, target.detectors, strict=True):
            detector.load_state_dict(state)
        while self._snapshots[-1].step > target.step:      # taken after the onset: tainted
            self.store.drop(self._snapshots.pop().step)
        self.rewinds += 1
        self._last_due = step          # a just-restored state is no news worth a snapshot
        for anomaly in held:
            anomaly.message += (f"; rewound: the training state of step {target.step} was "
                                f"restored (rewind {self.rewinds} of max_rewinds="
                                f"{self.max_rewinds})")
        event = RewindEvent(step=step, to_step=target.step, anomaly=wish.kind,
                            rewinds=self.rewinds, origin_rank=wish.rank)
        return event, held

    def _snapshot_if_due(self, step: int) -> None:
        if self.active and (self._last_due is None
                            or step - self._last_due >= self.snapshot_every):
            self._take(step)

    def _take(self, step: int) -> None:
        assert self.store is not None
        self._last_due = step
        try:
            self.store.take(step)
        except Exception as exc:       # host memory: say so, rewinds then find older ones
            self._problems.report(type(exc).__name__,
                                  f"the snapshot of step {step} could not be taken "
                                  f"({type(exc).__name__}: {exc}); rewinds go back to an "
                                  "older one, or escalate")
            return
        self._snapshots.append(_Snapshot(step, [d.state_dict() for d in self._detectors]))
        while len(self._snapshots) > self.snapshots_kept:
            self.store.drop(self._snapshots.popleft().step)

    def pop_problems(self) -> list[str]:
        return self._problems.pop()
