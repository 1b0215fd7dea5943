"""The run-log schema: the one definition used by the writer and every reader.

A run log (``rank_<R>.jsonl``) holds one JSON object per line (docs/log-format.md). Each
record kind is declared once below, one line per field: its name, whether every record of
the kind carries it (``required``, possibly null) or may leave it out (``optional``), and
whether it is a float that may be non-finite (``nonfinite=True``). Writers and readers use
the constants (``Step.LOSS``, ``Hardware.CPU_PERCENT``, ``Device.TEMP_C``, ...), so a field
name is spelled once, here.

JSON has no NaN or infinity, so non-finite floats travel as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``. ``encode`` applies that rule on the way out and ``decode``
undoes it on the way in, for the non-finite-capable fields only, so that a free-text field
that happens to read "NaN" stays text.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .basics.numbers import NONFINITE_TEXT

SCHEMA_VERSION = 1

RUN = "run"
STEP = "step"
EPOCH = "epoch"
HARDWARE = "hardware"
ANOMALY = "anomaly"
NOTICE = "notice"
END = "end"
REWIND = "rewind"
STATE = "state"
REPLAY = "replay"

KINDS = (RUN, STEP, EPOCH, HARDWARE, ANOMALY, NOTICE, END, REWIND, STATE, REPLAY)

END_REASONS = ("completed", "stopped", "error", "signal", "aborted")     # End.REASON
COMPLETED, STOPPED, ERROR, SIGNAL, ABORTED = END_REASONS

# (name, required, nonfinite) of the class body being declared; collected by Fields.
_declared: list[tuple[str, bool, bool]] = []


def required(name: str, *, nonfinite: bool = False) -> str:
    """A field every record of the kind carries (its value may still be null)."""
    _declared.append((name, True, nonfinite))
    return name


def optional(name: str, *, nonfinite: bool = False) -> str:
    """A field some records of the kind carry."""
    _declared.append((name, False, nonfinite))
    return name


class Fields:
    """The fields of one JSON object. A subclass declares each field once, as
    ``NAME = required("name")`` or ``optional(...)``; ``REQUIRED``, ``OPTIONAL`` (in
    declaration order) and ``NONFINITE`` are derived from those lines."""

    KIND = ""                                  # the record kind; "" for a nested object
    REQUIRED: tuple[str, ...] = ()
    OPTIONAL: tuple[str, ...] = ()
    NONFINITE: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = list(_declared)
        _declared.clear()
        cls.REQUIRED = tuple(name for name, needed, _ in declared if needed)
        cls.OPTIONAL = tuple(name for name, needed, _ in declared if not needed)
        cls.NONFINITE = frozenset(name for name, _, nonfinite in declared if nonfinite)


class Common(Fields):
    """What every record has."""
    KIND = required("kind")
    RANK = required("rank")
    TIME = required("time", nonfinite=True)          # Unix seconds


class Run(Fields):
    KIND = RUN
    SCHEMA = required("schema")
    WORLD_SIZE = required("world_size")
    HOST = required("host")
    PID = required("pid")
    CONFIG = required("config")
    VERSIONS = required("versions")
    LOG_PATH = optional("log_path")
    TOTAL_STEPS = optional("total_steps")
    ARGV = optional("argv")
    # MindSpore adapter only: how training was set up
    WRAPPED = optional("wrapped")
    MODE = optional("mode")
    DEVICE_TARGET = optional("device_target")
    DATASET_SINK_MODE = optional("dataset_sink_mode")
    # MindSpore's own silent-corruption detection: {"enabled": bool, "env": {name: value}}
    SDC_DETECTION = optional("sdc_detection")


class Versions(Fields):
    """``Run.VERSIONS``."""
    MINDWATCH = required("mindwatch")
    MINDSPORE = required("mindspore")
    PYTHON = required("python")
    MINDFORMERS = optional("mindformers")       # under mindwatch.mindformers
    TORCH = optional("torch")                   # under mindwatch.torch


class Step(Fields):
    KIND = STEP
    STEP = required("step")
    EPOCH = required("epoch")
    # the step's place in its epoch, 1-based (the last step of a sink), and the epoch's
    # length: MindSpore's LossMonitor / MindFormers' MFLossMonitor "step:[6/20]"
    EPOCH_STEP = optional("epoch_step")
    STEPS_PER_EPOCH = optional("steps_per_epoch")
    LOSS = required("loss", nonfinite=True)
    LOSS_SMOOTH = required("loss_smooth", nonfinite=True)
    LR = required("lr", nonfinite=True)
    GRAD_NORM = required("grad_norm", nonfinite=True)
    STEP_TIME_S = required("step_time_s", nonfinite=True)    # seconds per training step
    SKIPPED = required("skipped")
    SAMPLES_PER_S = optional("samples_per_s", nonfinite=True)
    STEPS_COVERED = optional("steps_covered")
    LR_GROUPS = optional("lr_groups", nonfinite=True)
    LAYER_GRAD_NORMS = optional("layer_grad_norms", nonfinite=True)
    DATA_TIME_S = optional("data_time_s", nonfinite=True)   # seconds before the step began
    LOSS_SCALE = optional("loss_scale", nonfinite=True)
    # with tokens_per_sample: samples_per_s x tokens_per_sample, this rank's
    TOKENS_PER_S = optional("tokens_per_s", nonfinite=True)
    # model FLOPs utilisation of this rank's device, a fraction (0.4 = 40%), with
    # flops_per_token and peak_tflops too
    MFU = optional("mfu", nonfinite=True)
    # under data parallelism with wrap: this rank's gradient norm before the reduction
    LOCAL_GRAD_NORM = optional("local_grad_norm", nonfinite=True)
    # seconds until the run's last step at the recent pace, when its length is known
    ETA_S = optional("eta_s", nonfinite=True)
    # why a withheld step was withheld, where not by its own anomalies: "known_bad_batch"
    # (its batch is in the bad-batch ledger, decisions/bad_batches.py)
    SKIP_REASON = optional("skip_reason")


class Epoch(Fields):
    KIND = EPOCH
    EPOCH = required(Step.EPOCH)
    LOSS_MEAN = required("loss_mean", nonfinite=True)
    STEPS = required("steps")
    LOSS_CHANGE = optional("loss_change", nonfinite=True)
    CONVERGING = optional("converging")
    NONFINITE_LOSSES = optional("nonfinite_losses")
    # Model.fit's evaluation at this epoch's end: metric name -> value (eval_loss included)
    EVAL = optional("eval", nonfinite=True)


class Hardware(Fields):
    KIND = HARDWARE
    CPU_PERCENT = required("cpu_percent", nonfinite=True)
    MEM_USED_GB = required("mem_used_gb", nonfinite=True)    # GB of 1e9 bytes
    RSS_GB = required("rss_gb", nonfinite=True)
    DEVICES = required("devices")
    MEM_AVAILABLE_GB = optional("mem_available_gb", nonfinite=True)
    FRAMEWORK_MEMORY = optional("framework_memory")
    # this process's part of cpu_percent, its threads' wait for a CPU (s, since the previous
    # sample), the other processes that took the most (TopProcess): hardware/cpu_share.py
    PROCESS_CPU_PERCENT = optional("process_cpu_percent", nonfinite=True)
    CPU_WAIT_S = optional("cpu_wait_s", nonfinite=True)
    CPU_TOP = optional("cpu_top")
    HOST_FIELDS = (CPU_PERCENT, MEM_USED_GB, MEM_AVAILABLE_GB, RSS_GB,     # what HostProbe reads
                   PROCESS_CPU_PERCENT, CPU_WAIT_S, CPU_TOP)


class TopProcess(Fields):
    """One entry of ``Hardware.CPU_TOP``: another process and its percent of the host's CPU."""
    PID = required("pid")
    NAME = required("name")
    CPU_PERCENT = required("cpu_percent", nonfinite=True)


class Device(Fields):
    """One entry of ``Hardware.DEVICES``."""
    TYPE = required("type")                                  # "npu" or "gpu"
    INDEX = required("index")
    UTIL_PERCENT = required("util_percent", nonfinite=True)
    MEM_USED_MB = required("mem_used_mb", nonfinite=True)    # MB of 2**20 bytes
    MEM_TOTAL_MB = required("mem_total_mb", nonfinite=True)
    TEMP_C = required("temp_c", nonfinite=True)
    POWER_W = required("power_w", nonfinite=True)
    # the other processes on this device, when this process is on it and the tool lists
    # them (DeviceProcess entries); absent or null: not known
    OTHERS = optional("others")


class DeviceProcess(Fields):
    """One entry of ``Device.OTHERS``: another process on the device."""
    PID = required("pid")
    NAME = required("name")
    MEM_USED_MB = required(Device.MEM_USED_MB, nonfinite=True)     # its device memory
    UTIL_PERCENT = optional(Device.UTIL_PERCENT, nonfinite=True)   # its share (NVML only)


class FrameworkMemory(Fields):
    """``Hardware.FRAMEWORK_MEMORY``: the framework's memory pool, MB of 2**20 bytes."""
    DEVICE_TARGET = required(Run.DEVICE_TARGET)
    ALLOCATED_MB = required("allocated_mb")
    RESERVED_MB = required("reserved_mb")
    MAX_ALLOCATED_MB = required("max_allocated_mb")
    MAX_RESERVED_MB = required("max_reserved_mb")


class Anomaly(Fields):
    KIND = ANOMALY
    ANOMALY = required("anomaly")                            # the anomaly kind
    STEP = required(Step.STEP)
    VALUE = required("value", nonfinite=True)
    THRESHOLD = required("threshold", nonfinite=True)
    MESSAGE = required("message")
    ACTIONS = required("actions")
    CHECKPOINT = required("checkpoint")
    REPORT = required("report")
    # hang only: the innermost frames of the stuck training thread, innermost first
    WHERE = optional("where")
    # hang, on several ranks: the rank that gives the job's answer (job/holders.py); the
    # others' hangs are its copies, posted by it alone (sinks/alert.py)
    ANSWERED_BY = optional("answered_by")
    # update_ratio: the layer; attention_logit: the attention sub-Cell
    LAYER = optional("layer")
    # a gradient anomaly one rank's own gradients caused: that rank, its host and device
    ORIGIN_RANK = optional("origin_rank")
    ORIGIN_HOST = optional("origin_host")
    ORIGIN_DEVICE = optional("origin_device")
    # throughput_drop: what grew, "data" (time outside the train step) or "compute", and
    # the ranks whose data time grew; straggler: "data", "host" or "compute"
    CAUSE = optional("cause")
    RANKS = optional("ranks")
    # memory_growth: which memory ("host", "npu:0", "framework") and the seconds until it
    # runs out at the current rate
    MEMORY = optional("memory")
    PROJECTED_EXHAUSTION_S = optional("projected_exhaustion_s", nonfinite=True)
    # a withheld step computed again (decisions/replays.py): what that says of the cause,
    # one sentence, the same on every anomaly of the step
    REPLAY_VERDICT = optional("replay_verdict")
    # the step's batch: {"fingerprint": hex, "indices": [...] or null} (basics/batch_identity)
    BATCH = optional("batch")


class BadBatch(Fields):
    """One line of ``bad_batches.jsonl``: a batch whose anomaly reproduced on replay, or that
    a stop or skip withheld without one (decisions/bad_batches.py). Not a run log record."""
    FINGERPRINT = required("fingerprint")
    INDICES = required("indices")
    STEP = required(Step.STEP)
    EPOCH = required(Step.EPOCH)
    KINDS = required("kinds")
    ORIGIN_RANK = required(Anomaly.ORIGIN_RANK)
    REPRODUCED = required("reproduced")             # failed again on replay; null: none ran
    TIME = required("time")


class Notice(Fields):
    KIND = NOTICE
    MESSAGE = required(Anomaly.MESSAGE)
    SOURCE = optional("source")                              # HARDWARE for probe messages
    # mindwatch could not watch this run as set up (no loss and no gradient norm reached it,
    # or the optimizer was never protected): the fix, in one sentence. A view never calls
    # a segment holding one HEALTHY.
    UNWATCHED = optional("unwatched")


class End(Fields):
    KIND = END
    REASON = required("reason")                              # one of END_REASONS
    STEPS = required(Epoch.STEPS)                            # the last step recorded
    ELAPSED_S = required("elapsed_s", nonfinite=True)
    ERROR = optional("error")
    STOPPED_BY = optional("stopped_by")


class Rewind(Fields):
    """on_anomaly "rewind": training state went back to the snapshot of ``to_step``."""
    KIND = REWIND
    STEP = required(Step.STEP)                               # where the anomaly was found
    TO_STEP = required("to_step")                            # the snapshot's step
    ANOMALY = required(Anomaly.ANOMALY)                      # the kind that asked for it
    REWINDS = required("rewinds")                            # rewinds so far in this run
    ORIGIN_RANK = optional("origin_rank")                    # the rank whose anomaly it was


class State(Fields):
    """Inside the model, every ``state_interval`` steps (with ``wrap``): L2 norms after the
    step's update, over all trained parameters and per layer (``LayerState`` fields)."""
    KIND = STATE
    STEP = required(Step.STEP)
    WEIGHT_NORM = required("weight_norm", nonfinite=True)
    UPDATE_NORM = required("update_norm", nonfinite=True)    # of the update applied
    LAYERS = required("layers", nonfinite=True)              # layer -> LayerState fields
    ACTIVATIONS = optional("activations", nonfinite=True)    # cell -> Activation fields


class LayerState(Fields):
    """One layer of ``State.LAYERS``; the moments only where the optimizer keeps them."""
    WEIGHT_NORM = required(State.WEIGHT_NORM, nonfinite=True)
    UPDATE_NORM = required(State.UPDATE_NORM, nonfinite=True)
    UPDATE_RATIO = required("update_ratio", nonfinite=True)  # update_norm / weight_norm
    GRAD_NORM = required(Step.GRAD_NORM, nonfinite=True)     # pre-clip
    M_NORM = optional("m_norm", nonfinite=True)
    V_NORM = optional("v_norm", nonfinite=True)


class Replay(Fields):
    """A withheld step computed again on the same batch and weights (decisions/replays.py)."""
    KIND = REPLAY
    STEP = required(Step.STEP)
    ANOMALY = required(Anomaly.ANOMALY)             # the step's first anomaly, or null
    REPRODUCED = required("reproduced")             # loss and norm bit-identical
    LOSS = required(Step.LOSS, nonfinite=True)
    GRAD_NORM = required(Step.GRAD_NORM, nonfinite=True)
    REPLAY_LOSS = required("replay_loss", nonfinite=True)
    REPLAY_GRAD_NORM = required("replay_grad_norm", nonfinite=True)
    HEALTHY = optional("healthy")                   # the replay within every bound


class Activation(Fields):
    """One sub-Cell of ``State.ACTIVATIONS``: its output's statistics (``wrap``'s
    ``activations``) and/or its largest attention logit (``attention_logits``)."""
    MAX_ABS = optional("max_abs", nonfinite=True)            # max |x| over the output
    RMS = optional("rms", nonfinite=True)                    # sqrt(mean(x^2))
    MAX_LOGIT = optional("max_logit", nonfinite=True)        # before the softmax


class StoppedBy(Fields):
    """``End.STOPPED_BY``: what stopped the run, and where it was found."""
    ANOMALY = required(Anomaly.ANOMALY)
    STEP = required(Step.STEP)
    RANK = required(Common.RANK)


class Alert(Fields):
    """The JSON object an alert webhook receives (``alert_format="json"``); not a log
    record. ``event`` is ``anomaly`` or ``end``; for an end, ``anomaly``, ``report`` and
    ``checkpoint`` are those of what stopped the run, when known."""
    EVENT = required("event")
    RUN_DIR = required("run_dir")                            # absolute path
    HOST = required(Run.HOST)
    RANK = required(Common.RANK)
    TIME = required(Common.TIME)
    STEP = required(Step.STEP)
    ANOMALY = required(Anomaly.ANOMALY)
    MESSAGE = required(Anomaly.MESSAGE)
    ACTIONS = required(Anomaly.ACTIONS)
    REPORT = required(Anomaly.REPORT)
    CHECKPOINT = required(Anomaly.CHECKPOINT)
    REASON = optional(End.REASON)                            # events "end" only


_RECORDS: tuple[type[Fields], ...] = (Run, Step, Epoch, Hardware, Anomaly, Notice, End,
                                      Rewind, State, Replay)
SCHEMAS: dict[str, type[Fields]] = {cls.KIND: cls for cls in _RECORDS}

# The names other modules have imported since the first schema version.
REQUIRED_FIELDS: dict[str, tuple] = {kind: cls.REQUIRED for kind, cls in SCHEMAS.items()}
COMMON_FIELDS = Common.REQUIRED
# Only these are decoded back to floats, at any depth of a record.
_EVERY: tuple[type[Fields], ...] = (Common, *_RECORDS, Device, DeviceProcess, TopProcess,
                                    LayerState, Activation)
FLOAT_FIELDS = frozenset[str]().union(*(cls.NONFINITE for cls in _EVERY))


def device_label(device: Any, sep: str = "") -> str:
    """"npu0" for a ``devices`` entry (a mapping) or a ``DeviceSample``; ``sep`` goes between
    type and index ("npu:0"). The one name a device has in every view."""
    if isinstance(device, Mapping):
        kind, index = device.get(Device.TYPE), device.get(Device.INDEX)
    else:
        kind, index = device.type, device.index
    return f"{kind or 'device'}" + ("" if index is None else f"{sep}{index}")


def problems(record: Any) -> list[str]:
    """What keeps ``record`` from being a complete record of its kind: each missing common or
    required field (devices of a hardware record included) and an unknown kind. Empty for a
    complete record; values are not judged (null is allowed)."""
    if not isinstance(record, Mapping):
        return [f"a record must be a JSON object; got {type(record).__name__}"]
    kind = record.get(Common.KIND)
    found = [f"lacks the field {name!r} every record has"
             for name in Common.REQUIRED if name not in record]
    schema = SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        if Common.KIND in record:
            found.append(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        return found
    found += [f"{kind} record lacks {name!r}" for name in schema.REQUIRED if name not in record]
    devices = record.get(Hardware.DEVICES) if kind == HARDWARE else None
    for position, device in enumerate(devices if isinstance(devices, list) else ()):
        missing = [name for name in Device.REQUIRED
                   if not isinstance(device, Mapping) or name not in device]
        found += [f"{kind} record: device {position} lacks {name!r}" for name in missing]
    return found


def to_strict(value: Any) -> Any:
    """Replace non-finite floats (at any depth) by their run-log strings."""
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


def revive(value: Any, numeric: bool) -> Any:
    """Turn the run log's strings "NaN", "Infinity", "-Infinity" back into floats where the
    value is of a float field (``numeric``), at any depth; everything else as it is."""
    if numeric and isinstance(value, str) and value in NONFINITE_TEXT:
        return NONFINITE_TEXT[value]
    if isinstance(value, dict):
        # the values of a numeric mapping (layer_grad_norms) are numbers whatever their keys
        return {key: revive(item, numeric or key in FLOAT_FIELDS) for key, item in value.items()}
    if isinstance(value, list):
        return [revive(item, numeric) for item in value]
    return value


def decode(line: str) -> dict[str, Any]:
    """Parse one run-log line; raises ValueError on anything that is not a strict JSON object."""
    record = json.loads(line, parse_constant=_reject_constant)
    if not isinstance(record, dict):
        raise ValueError("a run-log line must be a JSON object")
    return revive(record, False)
