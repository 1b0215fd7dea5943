"""The ``report_to`` setting (sinks/trackers/report_to.py): what it accepts, what it refuses
by name, and a tracker asked for whose package is missing (no MLflow in this venv: make
test-trackers has it) or that is not built yet never disappears silently."""
import io

import pytest

from mindwatch import Monitor
from mindwatch.sinks.trackers.report_to import parse_report_to


@pytest.mark.parametrize(("value", "parsed"), [
    (None, {}), ("none", {}), ([], {}),
    ("mlflow", {"mlflow": {}}), (["mlflow", "wandb"], {"mlflow": {}, "wandb": {}}),
    ({"mlflow": {"experiment": "sft"}, "swanlab": None},
     {"mlflow": {"experiment": "sft"}, "swanlab": {}}),
])
def test_the_forms_hugging_face_users_know(value, parsed):
    assert parse_report_to(value) == parsed


@pytest.mark.parametrize(("value", "error", "says"), [
    ("tensorboard", ValueError, "unknown tracker 'tensorboard'; choose among mlflow, swanlab"),
    (3, TypeError, "a tracker name, a list of names or a mapping"),
    ({"mlflow": ["x"]}, TypeError, "the options of 'mlflow' must be a mapping"),
    ({"mlflow": {"experiment": object()}}, TypeError, "option 'experiment' of 'mlflow'"),
])
def test_what_is_refused_names_the_setting(value, error, says):
    with pytest.raises(error, match="report_to") as caught:
        parse_report_to(value)
    assert says in str(caught.value)


def test_a_tracker_whose_package_is_missing_says_what_to_install(tmp_path, hide_package):
    hide_package("mlflow")
    with pytest.raises(ImportError, match=r"pip install 'mindwatch\[mlflow\]'"):
        Monitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None,
                report_to="mlflow").observe(step=1, loss=1.0)


def test_a_tracker_not_built_yet_is_refused_at_the_start(tmp_path):
    with pytest.raises(NotImplementedError, match="report_to='wandb' is not available yet"):
        Monitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None,
                report_to="wandb").observe(step=1, loss=1.0)
