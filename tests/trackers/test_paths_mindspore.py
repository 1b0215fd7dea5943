"""report_to under MindSpore as users train: ``Model.train`` with the callback and its wrapped
train step, and MindSpore Transformers' Trainer from a YAML whose MindWatchMonitor entry names
the tracker. A NaN batch stops each run: the tracker's run ends as a stopped one, with every
step's loss, the withheld step, the settings, ``mindwatch summary``'s verdict, the anomaly,
its reports and the HTML report, all equal to the run log's."""
import io
import math
import sys
from pathlib import Path

import pytest

ms = pytest.importorskip("mindspore", reason="the MindSpore paths run in .venv-trackers")

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "mindspore"), str(TESTS / "mindformers")]

from against_log import check_against_log, step_records  # noqa: E402
from every_tracker import NAMES, tracker_for  # noqa: E402

from mindwatch.mindspore import TrainMonitor  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=NAMES)
def tracker(request, tmp_path):
    return tracker_for(request, request.param, tmp_path)


def _model_train(log_dir, report_to, nan_at):
    from ms_helpers import make_regressor, regression_dataset

    net = make_regressor()
    optimizer = ms.nn.Adam(net.trainable_params(), learning_rate=1e-3)
    monitor = TrainMonitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                           report_to=report_to, on_anomaly={"loss_nonfinite": "stop"})
    step_cell = monitor.wrap(ms.nn.WithLossCell(net, ms.nn.MSELoss()), optimizer)
    ms.train.Model(step_cell).train(1, regression_dataset(n=64, nan_at=nan_at),
                                    callbacks=[monitor], dataset_sink_mode=False)


def test_model_train_stopped_by_a_nan_batch(tracker, tmp_path):
    log_dir = tmp_path / "run"
    _model_train(log_dir, tracker.report_to("model-train"), nan_at=5)
    assert [s["step"] for s in step_records(log_dir)] == [1, 2, 3, 4, 5]
    run = tracker.read("model-train")
    check_against_log(run, log_dir, status=tracker.stopped, anomaly="loss_nonfinite",
                      setting=("policies", '"loss_nonfinite": "stop"'))
    # the pre-clip gradient norm the wrapped step measured, step by step (NaN at step 5,
    # which MLflow leaves out: its UI drops a chart whose last value is NaN)
    norms = [(step, value) for step, value in run.metrics["grad_norm"] if math.isfinite(value)]
    assert norms == [(s["step"], s["grad_norm"]) for s in step_records(log_dir)[:4]]


def test_mindformers_trainer_from_yaml_stopped(tracker, tmp_path):
    from mf_config import mf_config, run_launcher

    config = mf_config(tmp_path, callbacks=[{"type": "NanAtStep", "step": 4}],
                       monitor={"stop_exit_code": 42,
                                "report_to": tracker.report_to("mindformers-yaml")})
    run_launcher(tmp_path, config, returncode=42)
    run = tracker.read("mindformers-yaml")
    check_against_log(run, tmp_path / "mw", status=tracker.stopped, anomaly="loss_nonfinite",
                      setting=("stop_exit_code", "42"))
    assert [step for step, _ in run.metrics["lr"]] == [1, 2, 3, 4]


def test_a_healthy_model_train_finishes(tracker, tmp_path):
    log_dir = tmp_path / "run"
    _model_train(log_dir, tracker.report_to("model-train-healthy"), nan_at=None)
    run = tracker.read("model-train-healthy")
    check_against_log(run, log_dir, status=tracker.completed, anomaly=None)
    assert run.verdict == "HEALTHY"
