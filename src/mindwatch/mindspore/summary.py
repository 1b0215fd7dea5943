"""MindSpore's summary protobuf, for the MindInsight sink (which lives in the core)."""
from __future__ import annotations

from typing import Any


def summary_event_class() -> Any:
    """MindSpore's summary ``Event`` class, or a loud ImportError saying what to install."""
    try:
        from mindspore.train.summary_pb2 import Event
    except ImportError as exc:
        raise ImportError(
            "the MindInsight sink (mindinsight=True) writes MindSpore's summary format and needs "
            "MindSpore's protobuf classes: pip install mindspore   (MindInsight itself is not "
            "needed to write, only to view)") from exc
    return Event
