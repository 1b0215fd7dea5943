"""Records -> named scalars, shared by the TensorBoard and MindInsight sinks, so both dashboards
show the same numbers under the same names. A name is ``<group>/<record field>``
(``train/loss``, ``time/step_time_s``, ``hardware/npu0/temp_c``): the field carries its unit.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

from .. import records
from ..basics.numbers import to_number
from ..records import (
    Activation,
    Common,
    Device,
    Epoch,
    Hardware,
    LayerState,
    State,
    Step,
    device_label,
)

TRAIN, TIME, EPOCH, HARDWARE, ANOMALIES = "train", "time", "epoch", "hardware", "anomalies"
# State records: state/weight_norm, state/update_norm, and one chart group per quantity with
# a line per layer (state_update_ratio/blocks.0.attn), so TensorBoard shows each quantity's
# layers side by side; watched sub-Cells likewise (activation_max_logit/blocks.0.attn.scores).
STATE, ACTIVATION = "state", "activation"


def _named(group: str, *fields: str) -> tuple[tuple[str, str], ...]:
    return tuple((field, f"{group}/{field}") for field in fields)


# (record field, scalar name) per record kind; a missing or null field is skipped.
STEP_SCALARS = (_named(TRAIN, Step.LOSS, Step.LOSS_SMOOTH, Step.LR, Step.GRAD_NORM,
                       Step.LOSS_SCALE)
                + _named(TIME, Step.STEP_TIME_S, Step.SAMPLES_PER_S, Step.TOKENS_PER_S, Step.MFU))
EPOCH_SCALARS = _named(EPOCH, Epoch.LOSS_MEAN, Epoch.LOSS_CHANGE, Epoch.NONFINITE_LOSSES)
HARDWARE_SCALARS = _named(HARDWARE, Hardware.CPU_PERCENT, Hardware.MEM_USED_GB,
                          Hardware.MEM_AVAILABLE_GB, Hardware.RSS_GB)
STATE_SCALARS = _named(STATE, State.WEIGHT_NORM, State.UPDATE_NORM)
LAYER_FIELDS = LayerState.REQUIRED + LayerState.OPTIONAL
ACTIVATION_FIELDS = Activation.REQUIRED + Activation.OPTIONAL
# Per device, under hardware/<device label>/ (e.g. hardware/npu0/temp_c).
DEVICE_FIELDS = (Device.UTIL_PERCENT, Device.MEM_USED_MB, Device.TEMP_C, Device.POWER_W)


class Point(NamedTuple):
    step: int                              # global step the values belong to
    wall_time: float                       # Unix seconds
    scalars: list[tuple[str, float]]       # (name, value), non-finite values included
    anomaly: Mapping[str, Any] | None   # the record itself, for anomaly records


class ScalarView:
    """Turns records into named scalars at a global step. Stateful: records without a step
    (hardware, epoch) are placed at the latest step seen (0 before the first step), and each
    anomaly adds ``anomalies/<kind>``, the running count of that kind (unit: anomalies)."""

    def __init__(self) -> None:
        self.last_step = 0
        self._anomaly_counts: Counter = Counter()

    def point(self, record: Mapping[str, Any]) -> Point | None:
        kind = record.get(Common.KIND)
        step = record.get(Step.STEP)
        if isinstance(step, int) and not isinstance(step, bool):
            if kind == records.STEP:
                self.last_step = max(self.last_step, step)
        else:
            step = self.last_step
        wall = to_number(record.get(Common.TIME))
        wall = time.time() if wall is None or not math.isfinite(wall) else wall
        scalars: list[tuple[str, float]] = []
        anomaly = None
        if kind == records.STEP:
            scalars += _fields(record, STEP_SCALARS)
            for group, value in enumerate(record.get(Step.LR_GROUPS) or []):
                number = to_number(value)
                if number is not None:
                    scalars.append((f"{TRAIN}/lr_group{group}", number))
            if isinstance(record.get(Step.SKIPPED), bool):
                scalars.append((f"{TRAIN}/{Step.SKIPPED}", 1.0 if record[Step.SKIPPED] else 0.0))
        elif kind == records.EPOCH:
            scalars += _fields(record, EPOCH_SCALARS)
        elif kind == records.HARDWARE:
            scalars += _fields(record, HARDWARE_SCALARS)
            for device in record.get(Hardware.DEVICES) or []:
                scalars += _fields(device, _named(f"{HARDWARE}/{device_label(device)}",
                                                  *DEVICE_FIELDS))
        elif kind == records.STATE:
            scalars += _fields(record, STATE_SCALARS)
            for layer, fields in (record.get(State.LAYERS) or {}).items():
                if isinstance(fields, Mapping):
                    scalars += _fields(fields, tuple((field, f"{STATE}_{field}/{layer}")
                                                     for field in LAYER_FIELDS))
            for cell, fields in (record.get(State.ACTIVATIONS) or {}).items():
                if isinstance(fields, Mapping):
                    scalars += _fields(fields, tuple((field, f"{ACTIVATION}_{field}/{cell}")
                                                     for field in ACTIVATION_FIELDS))
        elif kind == records.ANOMALY:
            name = str(record.get(records.Anomaly.ANOMALY))
            self._anomaly_counts[name] += 1
            scalars.append((f"{ANOMALIES}/{name}", float(self._anomaly_counts[name])))
            anomaly = record
        else:
            return None                    # run, notice, end: nothing to plot
        return Point(step, wall, scalars, anomaly)


def _fields(record: Mapping[str, Any], table) -> list[tuple[str, float]]:
    out = []
    for field, name in table:
        value = to_number(record.get(field))
        if value is not None:
            out.append((name, value))
    return out
