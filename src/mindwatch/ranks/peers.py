"""What a rank learns from the others after each step: who wants to stop, and why; who
makes everyone wait. The exchange itself is the adapter's (a collective); this module only
encodes a stop as a number and turns what came back into anomalies."""
from __future__ import annotations

from collections.abc import Sequence

from ..anomaly import ANOMALY_KINDS, PEER_STOP, STOP_REQUESTS, USER_STOP, Anomaly
from ..detectors.straggler import StragglerDetector
from ..policy import SKIP, Policy

STOP_REASONS = (*ANOMALY_KINDS, *STOP_REQUESTS)


def stop_code(reason: str | None) -> int:
    """0 for "go on", else 1 + the reason's index: small integers survive a float32 SUM."""
    return 0 if reason is None else 1 + STOP_REASONS.index(reason)


def stop_reason(code: int) -> str | None:
    return STOP_REASONS[code - 1] if 0 < code <= len(STOP_REASONS) else None


class Peers:
    def __init__(self, *, rank: int, world_size: int, policy: Policy, straggler_window: int,
                 straggler_factor: float):
        self.rank, self.world_size, self.policy = rank, world_size, policy
        self.straggler = StragglerDetector(rank=rank, world_size=world_size,
                                           window=straggler_window, factor=straggler_factor)

    def findings(self, *, step: int, stop_codes: Sequence[int], data_times: Sequence[float],
                 step_time_s: float | None, stopping: bool) -> list[Anomaly]:
        """Stragglers, and a ``peer_stop`` for the first other rank that stops, unless this
        rank is ``stopping`` already (its own stop, or an earlier peer's)."""
        found = self.straggler.update_peers(step, data_times, step_time_s)
        if stopping:
            return found
        for peer, code in enumerate(stop_codes):
            reason = stop_reason(code)
            if peer == self.rank or reason is None:
                continue
            # The peer's policy decides what this rank does too: if it checkpoints, every
            # rank that holds weights checkpoints. A "skip" kind stops only when escalated
            # to checkpoint_and_stop (skipping.py).
            actions = ["stop"]
            if reason != USER_STOP and ("checkpoint" in self.policy.actions_for(reason)
                                        or self.policy.policy_for(reason) == SKIP):
                actions = ["checkpoint", "stop"]
            found.append(Anomaly(
                PEER_STOP, step, float(peer), None,
                f"rank {peer} stopped the run at step {step} ({reason}); this rank stops "
                f"after the same step", actions=actions, origin=(peer, reason)))
            break
        return found
