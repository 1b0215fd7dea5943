"""The run-log schema: the one definition used by the writer and every reader.

A run log (``rank_<R>.jsonl``) holds one JSON object per line. JSON has no NaN or infinity,
so non-finite floats travel as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``
(see docs/log-format.md). ``encode`` applies that rule on the way out and ``decode`` undoes
it on the way in, for the numeric fields named here only, so that a free-text field that
happens to read "NaN" stays text.
"""
from __future__ import annotations

import json
import math
from typing import Any, Dict, Mapping

SCHEMA_VERSION = 1

RUN = "run"
STEP = "step"
EPOCH = "epoch"
HARDWARE = "hardware"
ANOMALY = "anomaly"
NOTICE = "notice"
END = "end"

KINDS = (RUN, STEP, EPOCH, HARDWARE, ANOMALY, NOTICE, END)

# Fields every record of a kind must carry (a value may be null where the contract allows).
REQUIRED_FIELDS: Dict[str, tuple] = {
    RUN: ("schema", "world_size", "host", "pid", "config", "versions"),
    STEP: ("step", "epoch", "loss", "loss_smooth", "lr", "grad_norm", "step_time_s", "skipped"),
    EPOCH: ("epoch", "loss_mean", "steps"),
    HARDWARE: ("cpu_percent", "mem_used_gb", "rss_gb", "devices"),
    ANOMALY: ("anomaly", "step", "value", "threshold", "message", "actions", "checkpoint", "report"),
    NOTICE: ("message",),
    END: ("reason", "steps", "elapsed_s"),
}
COMMON_FIELDS = ("kind", "rank", "time")

# Float fields that may hold a non-finite value; only these are decoded back to floats.
FLOAT_FIELDS = frozenset({
    "time", "loss", "loss_smooth", "lr", "lr_groups", "grad_norm", "step_time_s",
    "samples_per_s", "loss_mean", "value", "threshold", "elapsed_s", "cpu_percent",
    "mem_used_gb", "rss_gb", "util_percent", "mem_used_mb", "mem_total_mb", "temp_c", "power_w",
    "layer_grad_norms",
})

END_REASONS = ("completed", "stopped", "error")

NONFINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def to_strict(value: Any) -> Any:
    """Replace non-finite floats (at any depth) by their contract strings."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if math.isnan(value):
            return "NaN"
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {key: to_strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_strict(item) for item in value]
    return value


# One encoder for every record: json.dumps with options builds a new one per call.
_STRICT_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def encode(record: Mapping[str, Any]) -> str:
    """One record as one line of strict JSON, without the trailing newline."""
    try:
        # Most records hold finite numbers only: encode them as they are, and walk the
        # record for non-finite values only when the strict encoder refuses one.
        return _STRICT_ENCODER.encode(record)
    except ValueError:
        return _STRICT_ENCODER.encode(to_strict(dict(record)))


def _reject_constant(name: str) -> None:
    raise ValueError(f"bare {name} is not strict JSON")


def _revive(value: Any, numeric: bool) -> Any:
    if numeric and isinstance(value, str) and value in NONFINITE_TEXT:
        return NONFINITE_TEXT[value]
    if isinstance(value, dict):
        return {key: _revive(item, key in FLOAT_FIELDS) for key, item in value.items()}
    if isinstance(value, list):
        return [_revive(item, numeric) for item in value]
    return value


def decode(line: str) -> Dict[str, Any]:
    """Parse one run-log line; raises ValueError on anything that is not a strict JSON object."""
    record = json.loads(line, parse_constant=_reject_constant)
    if not isinstance(record, dict):
        raise ValueError("a run-log line must be a JSON object")
    return _revive(record, False)
