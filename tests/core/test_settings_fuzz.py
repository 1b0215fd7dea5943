"""Bad input, property-based: every setting of ``MonitorSettings`` (found through
``dataclasses.fields``, so a new one is covered at once), ``log_dir`` and ``observe``'s
arguments fail with a ``TypeError`` or ``ValueError`` that names the argument."""
import dataclasses
import io
import math
import types
import typing
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindwatch import Monitor, MonitorSettings, records
from mindwatch.detectors import build_detectors
from mindwatch.policy import Policy
from mindwatch.ranks.peers import Peers

FIELDS = [f for f in dataclasses.fields(MonitorSettings) if f.init]
HINTS = typing.get_type_hints(MonitorSettings)

# Values each setting must accept besides its default; a new setting needs an entry here.
VALID = {
    "print_interval": [1, 7, 10**6], "print_all_ranks": [True, False],
    "loss_smoothing": [0, 0.0, 0.5, 0.999], "batch_size": [None, 1, 4096],
    "grad_explode": [1, 1e-3, 1e12], "grad_vanish": [0, 0.0, 1e-9, 50],
    "grad_vanish_steps": [1, 100], "spike_window": [32, 4096], "spike_warmup": [2, 32],
    "loss_spike_z": [0.5, 100], "loss_spike_ratio": [1.01, 10], "grad_spike_z": [0.5, 100],
    "grad_spike_ratio": [1.01, 10], "loss_rising_window": [4, 1000],
    "loss_rising_min": [0.01, 3], "lr_jump_factor": [1.5, 1e6], "max_lr": [None, 1e-6, 10.0],
    "max_update_ratio": [None, 1e-3, 1.0, 1e6], "straggler_window": [2, 500],
    "straggler_factor": [1.1, 50], "straggler_work_factor": [1.01, 10],
    "layer_norms_interval": [1, 10**6],
    "replay": [True, False], "consistency_interval": [None, 1, 1000],
    "state_interval": [None, 1, 100], "update_ratio_factor": [1.01, 50],
    "update_ratio_ceiling": [1e-6, 5.0], "max_attention_logit": [1e-3, 1e6],
    "on_anomaly": [None, "warn", "stop", "checkpoint_and_stop", "skip", {},
                   {"loss_spike": "stop"}, {"loss_spike": "skip"}, "rewind",
                   {"loss_rising": "rewind"}, {"hang": "abort"}, {"hang": "warn"}],
    "max_skips": [0, 5, 1000], "hang_timeout_s": [None, 0.5, 60, 86400],
    "snapshot_every": [1, 100, 10**6], "snapshots_kept": [1, 2, 1000], "max_rewinds": [0, 3, 50],
    "on_signal": [None, "stop", "checkpoint_and_stop"], "on_sink_error": ["warn", "raise"],
    "stop_exit_code": [None, 1, 42, 255],
    "max_temperature_c": [1, 60.5, 120], "overheat_samples": [1, 10],
    "memory_pressure_device": [0.5, 1, 1.0], "memory_pressure_host": [0.01, 0.5],
    "hardware_interval_s": [None, 0.01, 1, 3600], "all_devices": [True, False],
    "tensorboard": [True, False], "mindinsight": [True, False],
    "prometheus_port": [None, 0, 9100, 65535],
    "prometheus_host": ["127.0.0.1", "0.0.0.0", "::1", "localhost", "node-3.cluster"],
    "resume": [True, False],
    # flops_per_token and peak_tflops need tokens_per_sample (test_throughput.py); alone only
    # their default passes
    "tokens_per_sample": [None, 1, 2048], "flops_per_token": [None], "peak_tflops": [None],
    "alert_webhook": [None, "http://127.0.0.1:8080/hook", "https://hooks.slack.com/services/T/B/X",
                      "https://oapi.dingtalk.com/robot/send?access_token=abc"],
    "alert_format": ["json", "slack", "feishu", "dingtalk"],
    "report_to": [None, "mlflow", ["mlflow"], {"mlflow": {"experiment": "sft", "port": 5}}],
    "skip_batches": [None],             # a path: it must exist (tests/core/test_bad_batches.py)
    "trend_warmup": [0, 1, 10**6], "pace_window": [2, 20, 10**4],
    "throughput_drop_factor": [1.01, 1.5, 100], "throughput_baseline": [None, 1e-3, 1e6],
    "data_bound_share": [None, 0.01, 0.5, 1.0], "memory_growth_window_s": [0.1, 600, 86400],
    "memory_growth_horizon_s": [None, 1, 3600, 1e9], "total_steps": [None, 1, 10**6],
}

ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([-1, 0, 1, 2**63, 10**400]),
    st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324]),
    st.text(max_size=12),
    st.sampled_from(["", " ", "warn", " warn", "stop\n", "127.0.0.1 ", "ünïcødé", "\x00",
                     "NaN", "10", "1e3", "True", "0.0.0.0\t"]),
    st.binary(max_size=6), st.lists(st.integers(), max_size=3), st.tuples(),
    st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=2),
    st.sampled_from([{"loss_spike": None}, {"loss_spike": ["stop"]}, {None: "stop"},
                     {("x",): "warn"}, {"peer_stop": "stop"}, set(), frozenset({1})]),
    st.complex_numbers(max_magnitude=10), st.decimals(), st.fractions(),
    st.builds(object), st.just(Decimal("1")), st.just(Fraction(1, 2)),
)


def _accepts(hint, value):
    """Whether ``value`` has a type the annotation ``hint`` names (bools are not numbers)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_accepts(arg, value) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is Mapping:
        return isinstance(value, Mapping)
    if typing.get_origin(hint) is Sequence:
        return isinstance(value, Sequence) and not isinstance(value, str)
    raise AssertionError(f"teach this test the annotation {hint!r}")


def _usable(built):
    """An accepted configuration must also build the monitor's rules and encode as JSON."""
    build_detectors(built)
    Peers(rank=0, world_size=2, policy=Policy(built.policies, signal=built.on_signal),
          straggler_window=built.straggler_window, straggler_factor=built.straggler_factor,
          straggler_work_factor=built.straggler_work_factor)
    records.encode(built.as_record())


def _check(kwargs):
    try:
        built = MonitorSettings(**kwargs)
    except (TypeError, ValueError) as exc:
        assert any(name in str(exc) for name in kwargs), (kwargs, exc)
        return
    for name, value in kwargs.items():
        assert _accepts(HINTS[name], value), f"{name}={value!r} accepted"
        if isinstance(value, float):
            assert math.isfinite(value), f"{name}={value!r} accepted"
        if isinstance(value, str) and name != "on_anomaly":
            assert value.strip() and value == value.strip(), f"{name}={value!r} accepted"
    _usable(built)


def test_every_setting_has_valid_examples():
    assert sorted(VALID) == sorted(f.name for f in FIELDS)


@pytest.mark.parametrize("name", [f.name for f in FIELDS])
def test_valid_values_are_accepted(name):
    for value in VALID[name]:
        built = MonitorSettings(**{name: value})
        assert getattr(built, name) == value
        _usable(built)


@pytest.mark.parametrize("name", [f.name for f in FIELDS])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=ANY_VALUE)
def test_any_value_is_accepted_or_refused_by_name(name, value):
    _check({name: value})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([f.name for f in FIELDS]),
                       st.one_of(ANY_VALUE, st.sampled_from([v for vs in VALID.values()
                                                             for v in vs])),
                       min_size=1, max_size=6))
def test_several_values_at_once(kwargs):
    _check(kwargs)


@pytest.mark.parametrize("value, error", [
    (None, TypeError), (42, TypeError), (b"runs", TypeError), ("", ValueError),
    ("runs\x00evil", ValueError), ("\udc00\ud800", ValueError)])
def test_bad_log_dir_is_refused_by_name(value, error):
    with pytest.raises(error, match="log_dir"):
        Monitor(value, stream=io.StringIO(), hardware_interval_s=None)


def test_log_dir_that_is_a_file_or_under_one(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    for log_dir in (a_file, a_file / "run", str(a_file / "deeper" / "run")):
        with pytest.raises(ValueError, match=r"log_dir .* cannot be written"):
            Monitor(log_dir, stream=io.StringIO(), hardware_interval_s=None)
    assert a_file.read_text() == "not a directory"


@pytest.mark.parametrize("rank", [-1, "0", "../x", 1.0, True])
def test_bad_rank_writes_nothing(tmp_path, rank):
    with pytest.raises((TypeError, ValueError), match="rank"):
        Monitor(tmp_path / "run", rank=rank, stream=io.StringIO(), hardware_interval_s=None)
    assert not (tmp_path / "run").exists()


@pytest.fixture
def monitor(tmp_path):
    monitor = Monitor(tmp_path, stream=io.StringIO(), hardware_interval_s=None)
    yield monitor
    monitor.close()


@pytest.mark.parametrize("name", ["step", "steps"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3", None, 2.0, [1]])
def test_bad_step_counts_are_refused_by_name(monitor, name, value):
    kwargs = {"step": 1, name: value}
    with pytest.raises((TypeError, ValueError), match=name):
        monitor.observe(**kwargs)
    assert monitor.last_step == 0


@pytest.mark.parametrize("name", ["loss", "lr", "grad_norm"])
@pytest.mark.parametrize("value", ["abc", [], object(), b"1", True, {"x": 1}, "1.5"])
def test_bad_numbers_are_refused_by_name(monitor, name, value):
    with pytest.raises((TypeError, ValueError), match=name):
        monitor.observe(step=1, **{name: value})
    assert monitor.last_step == 0
    [found] = [monitor.observe(step=1, **{name: 2.5})]
    assert found == [] and monitor.last_step == 1


@pytest.mark.parametrize("kwargs, error, match", [
    ({"hardware_interval_s": 1e12}, ValueError, "hardware_interval_s must be <= 86400"),
    ({"memory_pressure_host": 0}, ValueError, "memory_pressure_host must be > 0"),
    ({"spike_window": 2**63}, ValueError, "spike_window must be <= 1000000000"),
    ({"grad_explode": 10**400}, ValueError, "grad_explode must be finite; got an int of 1329"),
    ({"print_interval": -(10**5000)}, ValueError, "print_interval must be >= 1; got -an int"),
    ({"prometheus_host": ""}, ValueError, "prometheus_host must be a non-empty string"),
    ({"prometheus_host": "0.0.0.0 "}, ValueError, "prometheus_host .* without whitespace"),
    ({"prometheus_host": "a\x00b"}, ValueError, "prometheus_host"),
    ({"prometheus_host": 127}, TypeError, "prometheus_host must be a str"),
])
def test_holes_found_by_the_fuzzer_stay_closed(kwargs, error, match):
    # each was accepted, or raised OverflowError or an error naming another argument
    with pytest.raises(error, match=match):
        MonitorSettings(**kwargs)
