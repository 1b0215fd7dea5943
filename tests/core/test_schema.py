"""The run-log schema (mindwatch.records): a real Monitor writes every kind with its required
fields, and ``problems`` says what an incomplete record lacks."""
import io
import math

import pytest

from mindwatch import Monitor, records
from mindwatch.framework import FrameworkHooks
from mindwatch.observation import DeviceSample, HardwareSample, ReplayOutcome
from mindwatch.records import (
    Activation,
    Anomaly,
    Common,
    Device,
    End,
    Epoch,
    FrameworkMemory,
    Hardware,
    LayerState,
    Notice,
    Replay,
    Rewind,
    Run,
    State,
    Step,
    StoppedBy,
    Versions,
    device_label,
    problems,
)
from mindwatch.runlog import read_rank_log

FIELD_CLASSES = (Common, Run, Versions, Step, Epoch, Hardware, Device, FrameworkMemory, Anomaly,
                 Notice, End, StoppedBy, Rewind, State, LayerState, Activation, Replay)


class _Snapshots:
    """A training state with nothing in it: enough for "rewind" to write its record."""

    def take(self, step):
        return 0

    def restore(self, step):
        pass

    def drop(self, step):
        pass


@pytest.fixture
def log(tmp_path, clock):
    """Every kind, from the public API only: a NaN loss (withheld, replayed, rewound), an
    explosion (which stops the run), a hardware sample with a device and framework memory, a
    notice, two epochs."""
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      on_anomaly={"loss_nonfinite": "rewind", "gradient_explode": "stop"},
                      framework=FrameworkHooks(snapshots=_Snapshots(), replay=lambda: (
                          ReplayOutcome(loss=math.nan, grad_norm=1.0, healthy=False))))
    monitor.rewinds.begin(0)
    for step, loss, grad in [(1, 2.0, 1.0), (2, math.nan, 1.0), (3, 1.5, 1e4)]:
        clock.advance(0.1)
        monitor.observe(step=step, epoch=1 if step < 3 else 2, loss=loss, lr=1e-3,
                        grad_norm=grad, skipped=step == 2)
        monitor.settle_rewind(step=step)
    monitor.observe_hardware(HardwareSample(
        time=clock.time(), cpu_percent=12.5, mem_used_gb=7.0, mem_available_gb=9.0, rss_gb=1.0,
        devices=[DeviceSample(type="npu", index=0, util_percent=50.0, mem_used_mb=1024.0,
                              mem_total_mb=32768.0, temp_c=45.0, power_w=80.0)],
        framework_memory=dict.fromkeys(FrameworkMemory.REQUIRED)))
    monitor.observe_state(step=3, weight_norm=4.0, update_norm=0.0, layers={"inp": {
        "weight_norm": 4.0, "update_norm": 0.0, "update_ratio": 0.0, "grad_norm": 1e4,
        "m_norm": 0.5, "v_norm": 0.25}})
    monitor.notice("something to know once", source="test")
    monitor.end_epoch()
    monitor.close()
    return read_rank_log(str(tmp_path / "rank_0.jsonl"))


def test_every_record_a_monitor_writes_is_complete(log):
    for record in log.records:
        assert problems(record) == [], record
        assert set(records.REQUIRED_FIELDS[record[Common.KIND]]) <= set(record)
    assert {r[Common.KIND] for r in log.records} == set(records.KINDS)
    assert [a[Anomaly.ANOMALY] for a in log.anomalies] == ["loss_nonfinite", "gradient_explode"]
    [hardware] = log.of_kind(records.HARDWARE)
    assert set(hardware[Hardware.DEVICES][0]) == set(Device.REQUIRED)
    assert set(hardware[Hardware.FRAMEWORK_MEMORY]) == set(FrameworkMemory.REQUIRED)
    [replay] = log.of_kind(records.REPLAY)
    assert (replay[Replay.STEP], replay[Replay.REPRODUCED]) == (2, True)
    [state] = log.of_kind(records.STATE)
    assert set(state[State.LAYERS]["inp"]) == set(LayerState.REQUIRED + LayerState.OPTIONAL)
    assert set(log.run[Run.VERSIONS]) == set(Versions.REQUIRED)
    assert log.end[End.REASON] == records.STOPPED
    assert set(log.end[End.STOPPED_BY]) == set(StoppedBy.REQUIRED)
    every_field = {name for cls in FIELD_CLASSES for name in cls.REQUIRED + cls.OPTIONAL}
    for record in log.records:                       # nothing written outside the schema
        assert set(record) <= every_field, set(record) - every_field


def test_declarations_derive_the_tables():
    assert records.COMMON_FIELDS == ("kind", "rank", "time")
    assert records.REQUIRED_FIELDS[records.STEP] == (
        "step", "epoch", "loss", "loss_smooth", "lr", "grad_norm", "step_time_s", "skipped")
    assert Step.OPTIONAL == ("epoch_step", "steps_per_epoch", "samples_per_s", "steps_covered",
                             "lr_groups", "layer_grad_norms", "data_time_s", "loss_scale",
                             "tokens_per_s", "mfu", "local_grad_norm", "eta_s", "skip_reason")
    assert Anomaly.OPTIONAL == ("where", "answered_by", "layer", "origin_rank", "origin_host",
                                "origin_device", "cause", "ranks", "memory",
                                "projected_exhaustion_s", "replay_verdict", "batch")
    assert Run.OPTIONAL == ("log_path", "total_steps", "argv", "wrapped", "mode",
                            "device_target", "dataset_sink_mode", "sdc_detection")
    assert Epoch.OPTIONAL == ("loss_change", "converging", "nonfinite_losses", "eval")
    assert Hardware.OPTIONAL == ("mem_available_gb", "framework_memory", "process_cpu_percent",
                                 "cpu_wait_s", "cpu_top")
    assert End.OPTIONAL == ("error", "stopped_by") and Notice.OPTIONAL == ("source", "unwatched")
    assert {Step.LOSS, Device.TEMP_C, Common.TIME, Anomaly.VALUE} <= records.FLOAT_FIELDS
    assert Step.SKIPPED not in records.FLOAT_FIELDS and Step.STEP not in records.FLOAT_FIELDS
    for cls in FIELD_CLASSES:
        names = cls.REQUIRED + cls.OPTIONAL
        assert len(names) == len(set(names)), cls
        assert set(names) >= cls.NONFINITE, cls
    # a name shared by two kinds is one string: Anomaly.STEP is Step.STEP
    assert Anomaly.STEP is Step.STEP and End.STEPS is Epoch.STEPS


def test_problems_of_a_complete_record():
    record = {Common.KIND: records.NOTICE, Common.RANK: 0, Common.TIME: 1.0,
              Notice.MESSAGE: "hi"}
    assert problems(record) == []


def test_problems_names_missing_fields():
    record = {Common.KIND: records.STEP, Common.RANK: 0, Step.STEP: 1, Step.LOSS: None}
    found = problems(record)
    assert found[0] == "lacks the field 'time' every record has"
    assert "step record lacks 'grad_norm'" in found and "step record lacks 'skipped'" in found
    assert not any("'loss'" in p for p in found)        # null is a value: not missing
    assert len(found) == 1 + len(Step.REQUIRED) - 2


def test_problems_of_devices_and_of_unknown_kinds():
    hardware = {Common.KIND: records.HARDWARE, Common.RANK: 0, Common.TIME: 1.0,
                Hardware.CPU_PERCENT: None, Hardware.MEM_USED_GB: None, Hardware.RSS_GB: None,
                Hardware.DEVICES: [{Device.TYPE: "gpu"}]}
    found = problems(hardware)
    assert "hardware record: device 0 lacks 'index'" in found and len(found) == 6
    assert problems({Common.KIND: "bogus", Common.RANK: 0, Common.TIME: 0.0}) == [
        "unknown kind 'bogus'; known: run, step, epoch, hardware, anomaly, notice, end, "
        "rewind, state, replay"]
    assert problems({}) == [f"lacks the field {name!r} every record has"
                            for name in records.COMMON_FIELDS]
    assert problems([1]) == ["a record must be a JSON object; got list"]


def test_decode_revives_every_value_of_a_numeric_mapping():
    record = records.decode('{"kind":"step","layer_grad_norms":{"dense.weight":"NaN"},'
                            '"devices":[{"type":"NaN","temp_c":"Infinity"}]}')
    assert math.isnan(record[Step.LAYER_GRAD_NORMS]["dense.weight"])
    assert record[Hardware.DEVICES][0] == {Device.TYPE: "NaN", Device.TEMP_C: math.inf}


def test_device_label():
    device = DeviceSample(type="npu", index=3)
    assert device_label(device) == "npu3" and device_label(device, ":") == "npu:3"
    assert device_label({Device.TYPE: "gpu", Device.INDEX: 0}) == "gpu0"
    assert device_label({Device.INDEX: 1}) == "device1" and device_label({}) == "device"
