"""What a rank learns from the others after each step: who wants to stop, and why; who
makes everyone wait. The exchange itself is the adapter's (a collective); this module only
encodes a stop as a number and turns what came back into anomalies."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..anomaly import (
    ANOMALY_KINDS,
    GRAD_SPIKE,
    GRADIENT_EXPLODE,
    GRADIENT_NONFINITE,
    PEER_STOP,
    STOP_REQUESTS,
    USER_STOP,
    Anomaly,
)
from ..basics import format as fmt
from ..decisions.replays import place_text
from ..detectors.base import Detector
from ..detectors.straggler import StragglerDetector
from ..policy import SKIP, Policy

if TYPE_CHECKING:
    import numpy as np

STOP_REASONS = (*ANOMALY_KINDS, *STOP_REQUESTS)
# The anomalies of the reduced gradients, which one rank's own gradients can cause.
GRADIENT_KINDS = (GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRAD_SPIKE)
# A finite local norm this many times every other rank's names its rank as the origin.
ORIGIN_FACTOR = 4.0


def stop_code(reason: str | None) -> int:
    """0 for "go on", else 1 + the reason's index: small integers survive a float32 SUM."""
    return 0 if reason is None else 1 + STOP_REASONS.index(reason)


def stop_reason(code: int) -> str | None:
    return STOP_REASONS[code - 1] if 0 < code <= len(STOP_REASONS) else None


class Peers:
    def __init__(self, *, rank: int, world_size: int, policy: Policy, straggler_window: int,
                 straggler_factor: float, straggler_work_factor: float = 1.15,
                 straggler_warmup: int = 0, detectors: Sequence[Detector] = ()):
        self.rank, self.world_size, self.policy = rank, world_size, policy
        self._places: dict[int, tuple[str | None, int | None]] = {}
        self.straggler = StragglerDetector(rank=rank, world_size=world_size,
                                           window=straggler_window, factor=straggler_factor,
                                           work_factor=straggler_work_factor,
                                           warmup=straggler_warmup)
        # the other rules that read every rank's data time (throughput_drop names the ranks)
        self._detectors = list(detectors)
        # every rank's medians of own work and CPU wait, and the cause each is slow by, from
        # this step's exchange, handed in by ranks/rank_sync.py for the next ``findings``
        # (which clears it)
        self.shared_work: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None

    @property
    def places(self) -> dict[int, tuple[str | None, int | None]]:
        """rank -> (host, device), when the adapter has exchanged them (once, at the
        start); setting them names this rank's place in its straggler messages."""
        return self._places

    @places.setter
    def places(self, places: dict[int, tuple[str | None, int | None]]) -> None:
        self._places = places
        host, device = places.get(self.rank, (None, None))
        self.straggler.where = f" ({place_text(host, device)})" if host is not None else ""

    def findings(self, *, step: int, stop_codes: Sequence[int] | np.ndarray,
                 data_times: Sequence[float] | np.ndarray, step_time_s: float | None,
                 stopping: bool, middles: np.ndarray | None = None,
                 work: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
                 ) -> list[Anomaly]:
        """Stragglers, and a ``peer_stop`` for the first other rank that stops, unless this
        rank is ``stopping`` already (its own stop, or an earlier peer's). ``middles``: what
        the ranks' straggler rules shared (``Exchange.middles``), None: the rule keeps every
        rank's data times itself; ``work``: every rank's medians of own work and CPU wait and
        the cause each is slow by (``Exchange.work``, ``waits``, ``slow``), None:
        ``shared_work``, else the data rule alone."""
        if work is None:
            work = self.shared_work
        self.shared_work = None
        found = self.straggler.update_peers(step, data_times, step_time_s, middles,
                                            None if work is None else work[:2],
                                            None if work is None else work[2])
        if self._detectors:
            # The exchange's array as it is: its readers (throughput_drop's pace) keep it in
            # numpy rings, so no per-rank list is made per step. detectors/base.py declares
            # a Sequence; an array reads as one.
            times = cast("Sequence[float]", data_times)
            found += [anomaly for detector in self._detectors
                      for anomaly in detector.update_peers(step, times, step_time_s)]
        if stopping:
            return found
        for peer in _stopping(stop_codes):
            if peer == self.rank:
                continue
            found.append(self.peer_stop(step, peer, STOP_REASONS[int(stop_codes[peer]) - 1]))
            break
        return found

    def peer_stop(self, step: int, peer: int, reason: str) -> Anomaly:
        """This rank's ``peer_stop``: ``peer`` stopped the run at ``step`` for ``reason``."""
        # The peer's policy decides what this rank does too: if it checkpoints, every rank
        # that holds weights checkpoints. A "skip" kind stops only when escalated to
        # checkpoint_and_stop (skipping.py).
        actions = ["stop"]
        if reason != USER_STOP and ("checkpoint" in self.policy.actions_for(reason)
                                    or self.policy.policy_for(reason) == SKIP):
            actions = ["checkpoint", "stop"]
        return Anomaly(PEER_STOP, step, float(peer), None,
                       f"rank {peer} stopped the run at step {step} ({reason}); this rank "
                       f"stops after the same step", actions=actions, origin=(peer, reason))

    def attribute(self, obs: Any, found: list[Anomaly]) -> list[Anomaly]:
        """Name, in each gradient anomaly of this step, the rank whose own gradients (before
        the data-parallel reduction, ``obs.local_grad_norms``) caused it."""
        norms = obs.local_grad_norms
        kinds = [a for a in found if a.kind in GRADIENT_KINDS]
        if not kinds or not norms or len(norms) < 2:
            return found
        origin = origin_rank(norms)
        if origin is None:
            return found
        host, device = self.places.get(origin, (None, None))
        where = f" ({place_text(host, device)})" if host is not None else ""
        others = ", ".join(fmt.number(v) for r, v in enumerate(norms) if r != origin)
        for anomaly in kinds:
            anomaly.origin_rank, anomaly.origin_place = origin, (host, device)
            anomaly.message += (f"; it came from rank {origin}{where}: its own gradients' norm "
                                f"was {fmt.number(norms[origin])} before the reduction, the "
                                f"other ranks' {others}")
        return found


def _stopping(stop_codes: Sequence[int] | np.ndarray) -> list[int]:
    """The ranks whose code names a reason to stop, in rank order: found with numpy when the
    codes are an array (the exchange's), so a step visits only those ranks in Python."""
    if not hasattr(stop_codes, "nonzero"):
        return [peer for peer, code in enumerate(stop_codes) if stop_reason(code) is not None]
    import numpy as np

    codes = np.asarray(stop_codes)
    return np.flatnonzero((codes > 0) & (codes <= len(STOP_REASONS))).tolist()


def origin_rank(norms: Sequence[float | None]) -> int | None:
    """The one rank whose local norm is not finite, or finite and ORIGIN_FACTOR times every
    other's; None when no single rank stands out (all of them bad, or several)."""
    known = [v for v in norms if v is not None]
    if len(known) < len(norms):
        return None
    bad = [r for r, v in enumerate(known) if not math.isfinite(v)]
    if bad:
        return bad[0] if len(bad) == 1 else None
    top = max(range(len(known)), key=known.__getitem__)
    rest = max(v for r, v in enumerate(known) if r != top)
    return top if known[top] > ORIGIN_FACTOR * rest else None
