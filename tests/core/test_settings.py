import dataclasses

import pytest

from mindwatch import Monitor, MonitorSettings
from mindwatch.policy import DEFAULT_POLICIES


@pytest.mark.parametrize("kwargs, error, names", [
    ({"print_interval": 0}, ValueError, "print_interval"),
    ({"print_interval": 2.5}, TypeError, "print_interval"),
    ({"print_interval": True}, TypeError, "print_interval"),
    ({"grad_explode": -1.0}, ValueError, "grad_explode"),
    ({"grad_explode": "big"}, TypeError, "grad_explode"),
    ({"grad_explode": float("inf")}, ValueError, "grad_explode"),
    ({"grad_vanish": 200.0}, ValueError, "grad_vanish"),
    ({"loss_smoothing": 1.0}, ValueError, "loss_smoothing"),
    ({"hardware_interval_s": 0}, ValueError, "hardware_interval_s"),
    ({"prometheus_port": 70000}, ValueError, "prometheus_port"),
    ({"tensorboard": "yes"}, TypeError, "tensorboard"),
    ({"on_anomaly": "explode"}, ValueError, "on_anomaly"),
    ({"on_anomaly": {"gradient_boom": "stop"}}, ValueError, "gradient_boom"),
    ({"on_anomaly": {"loss_spike": "halt"}}, ValueError, "loss_spike"),
    ({"on_anomaly": 3}, TypeError, "on_anomaly"),
    ({"max_temperature_c": 0}, ValueError, "max_temperature_c"),
])
def test_bad_settings_name_the_argument(kwargs, error, names):
    with pytest.raises(error, match=names):
        MonitorSettings(**kwargs)


def test_unknown_setting_lists_known_ones(tmp_path):
    with pytest.raises(TypeError, match=r"grad_exlpode.*known settings:.*grad_explode"):
        Monitor(str(tmp_path), grad_exlpode=5.0)


@pytest.mark.parametrize("typo, guess", [("grad_exploed", "grad_explode"),
                                         ("print_intervall", "print_interval"),
                                         ("tensorbord", "tensorboard")])
def test_a_mistyped_setting_gets_the_closest_name_then_the_full_list(tmp_path, typo, guess):
    with pytest.raises(TypeError) as error:
        Monitor(str(tmp_path), **{typo: 5})
    known = sorted(f.name for f in dataclasses.fields(MonitorSettings) if f.init)
    assert str(error.value) == (f"unknown setting {typo} (did you mean {guess!r}?); "
                                f"known settings: {', '.join(known)}")


def test_each_of_several_typos_has_its_own_guess_and_a_far_name_none(tmp_path):
    with pytest.raises(TypeError) as error:
        Monitor(str(tmp_path), grad_exploed=5.0, learning_rate=1e-3)
    assert str(error.value).startswith("unknown settings grad_exploed (did you mean "
                                       "'grad_explode'?), learning_rate; known settings: ")
    with pytest.raises(TypeError) as error:
        Monitor(str(tmp_path), learning_rate=1e-3)
    assert str(error.value).startswith("unknown setting learning_rate; known settings: ")
    assert "did you mean" not in str(error.value)


@pytest.mark.parametrize("kind, hint", [
    ("gradient_boom", " (did you mean 'gradient_explode'?)"),
    ("loss_spikes", " (did you mean 'loss_spike'?)"),
    ("learning_rate", ""),                       # far from every kind: no guess
])
def test_an_unknown_anomaly_kind_gets_the_closest_kind(kind, hint):
    with pytest.raises(ValueError) as error:
        MonitorSettings(on_anomaly={kind: "stop"})
    assert str(error.value) == (
        f"on_anomaly has unknown anomaly kind {kind!r}{hint}; known kinds: loss_nonfinite, "
        "gradient_nonfinite, gradient_explode, gradient_vanish, loss_spike, grad_spike, "
        "loss_rising, lr_anomaly, overheat, memory_pressure, straggler, hang, update_ratio, "
        "attention_logit, transient_fault, replica_mismatch, throughput_drop, memory_growth, "
        "data_bound")


def test_policies_default_and_overrides():
    assert MonitorSettings().policies == DEFAULT_POLICIES
    assert DEFAULT_POLICIES["gradient_explode"] == "checkpoint_and_stop"
    assert DEFAULT_POLICIES["loss_spike"] == "warn"
    table = MonitorSettings(on_anomaly={"loss_spike": "stop"}).policies
    assert table["loss_spike"] == "stop" and table["loss_nonfinite"] == "checkpoint_and_stop"
    assert set(MonitorSettings(on_anomaly="warn").policies.values()) == {"warn"}


def test_unwritable_log_dir_fails_at_construction(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="cannot be written"):
        Monitor(str(blocker / "run"))


def test_log_dir_type_is_checked():
    with pytest.raises(TypeError, match="log_dir"):
        Monitor(42)
