"""What a resumed run needs to keep its history (``Monitor.state_dict``): the detectors'
windows, the loss average, withheld updates and rewinds counted towards escalation, the last
step. Plain JSON, saved beside the model's checkpoint."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..detectors import Detector
from ..recovery.rewinding import RewindGuard
from ..recovery.skipping import SkipGuard
from .loss_stats import LossStats


def save(*, detectors: Sequence[Detector], loss_stats: LossStats, skips: SkipGuard,
         rewinds: RewindGuard, last_step: int) -> dict[str, Any]:
    return {**loss_stats.state_dict(), **skips.state_dict(), "last_step": last_step,
            "rewinds": rewinds.rewinds, "detectors": [d.state_dict() for d in detectors]}


def restore(state: Mapping[str, Any], *, detectors: Sequence[Detector], loss_stats: LossStats,
            skips: SkipGuard, rewinds: RewindGuard, last_step: int) -> int:
    """Loads ``state`` into the parts; returns the last step (``last_step`` when ``state``
    has none). Raises ValueError for a state saved with a different set of detectors."""
    saved = state.get("detectors", [])
    if len(saved) != len(detectors):
        raise ValueError(f"state holds {len(saved)} detectors, this monitor has "
                         f"{len(detectors)}; it was saved by a different version")
    for detector, detector_state in zip(detectors, saved, strict=True):
        detector.load_state_dict(detector_state)
    loss_stats.load_state_dict(state)
    skips.load_state_dict(state)
    rewinds.rewinds = int(state.get("rewinds", 0))
    return state.get("last_step", last_step)
