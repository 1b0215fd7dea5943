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
