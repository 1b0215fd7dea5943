"""The ``report_to`` setting (sinks/report_to.py): what it accepts, what it refuses
by name, and a tracker asked for whose package is missing (no MLflow in this venv: make
test-trackers has it) never disappears silently."""
import io
import json

import pytest

from mindwatch import Monitor
from mindwatch.settings import MonitorSettings
from mindwatch.sinks.report_to import parse_report_to


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


@pytest.mark.parametrize("tracker", ["mlflow", "swanlab", "wandb"])
def test_a_tracker_whose_package_is_missing_says_what_to_install(tmp_path, hide_package,
                                                                 tracker):
    hide_package(tracker)
    with pytest.raises(ImportError, match=rf"pip install 'mindwatch\[{tracker}\]'"):
        Monitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None,
                report_to=tracker).observe(step=1, loss=1.0)
    # nothing was lost: the refusal came before the run log was opened
    assert not (tmp_path / "rank_0.jsonl").exists() or \
        (tmp_path / "rank_0.jsonl").stat().st_size == 0


def test_the_run_record_keeps_the_trackers_without_their_credentials():
    settings = MonitorSettings(report_to={
        "mlflow": {"tracking_uri": "https://bob:s3cret@ml.example:5000/x", "experiment": "sft"},
        "wandb": {"api_key": "abc123", "project": "p"}})
    record = settings.as_record()["report_to"]
    assert "s3cret" not in json.dumps(record) and "bob" not in json.dumps(record)
    assert record == {"mlflow": {"tracking_uri": "https://ml.example:5000/x",
                                 "experiment": "sft"},
                      "wandb": {"api_key": "***", "project": "p"}}
    assert MonitorSettings(report_to="mlflow").as_record()["report_to"] == {"mlflow": {}}
    assert MonitorSettings().as_record()["report_to"] is None
