"""The optional views, switched on through TrainMonitor in real training, beside a user's
SummaryCollector: every value they hold equals the run log's."""
import glob
import math
import os
import urllib.request

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, SummaryCollector
from mindspore.train.summary_pb2 import Event

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.sinks.mindinsight import read_events
from mindwatch.runlog import read_rank_log
from mindwatch.sinks.prometheus import PrometheusSink
from ms_helpers import make_regressor, regression_dataset

# Test tools, not runtime extras: TensorBoard's own reader and the Prometheus client (the
# locks hold both; a venv with only `mindwatch[all]` lacks the reader).
event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="TensorBoard's reader is a test tool: pip install tensorboard")
pytest.importorskip("prometheus_client", reason="pip install 'mindwatch[prometheus]'")


class _Scrape(Callback):
    """After step 5 (placed after the monitor), scrape the Prometheus endpoint over loopback."""

    def __init__(self, monitor):
        self.monitor, self.text = monitor, None

    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == 5:
            [sink] = [s for s in self.monitor.monitor.sinks if isinstance(s, PrometheusSink)]
            with urllib.request.urlopen(sink.url, timeout=10) as response:
                self.text = response.read().decode()


def _prometheus_value(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not served")


@pytest.mark.summary_collector
@pytest.mark.fresh_process
def test_views_hold_the_run_logs_values(tmp_path, quiet, graph_mode):
    log_dir = tmp_path / "run"
    net = make_regressor()
    monitor = TrainMonitor(str(log_dir), stream=quiet, tensorboard=True, mindinsight=True,
                           prometheus_port=0, hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    scrape = _Scrape(monitor)
    collector = SummaryCollector(summary_dir=str(log_dir / "summary"), collect_freq=1)
    ms.train.Model(step).train(1, regression_dataset(n=64), dataset_sink_mode=False,
                               callbacks=[collector, monitor, scrape])
    steps = read_rank_log(str(log_dir / "rank_0.jsonl")).steps
    assert len(steps) == 8
    expect = {s["step"]: s for s in steps}

    # TensorBoard, read back with TensorBoard's own reader.
    accumulator = event_accumulator.EventAccumulator(str(log_dir / "tensorboard" / "rank_0"))
    accumulator.Reload()
    for tag, field in (("train/loss", "loss"), ("train/grad_norm", "grad_norm"),
                       ("train/lr", "lr"), ("time/step_time_s", "step_time_s")):
        events = accumulator.Scalars(tag)
        assert [e.step for e in events] == list(expect)
        for event in events:
            assert np.float32(event.value) == np.float32(expect[event.step][field]), tag

    # MindInsight: our file in its own directory, and the user's SummaryCollector's file.
    ours = glob.glob(str(log_dir / "summary" / "mindwatch_rank0" / "*.summary.*"))
    theirs = [p for p in glob.glob(str(log_dir / "summary" / "*summary*"))
              if os.path.isfile(p) and "_lineage" not in p]
    assert len(ours) == 1 and theirs
    values = {}
    for event in read_events(ours[0], Event):
        for value in event.summary.value:
            values[(value.tag, event.step)] = value.scalar_value
    for number, record in expect.items():
        assert np.float32(values[("train/loss", number)]) == np.float32(record["loss"])
        assert np.float32(values[("train/grad_norm", number)]) == np.float32(record["grad_norm"])

    # Prometheus, scraped during training.
    assert _prometheus_value(scrape.text, "mindwatch_step") == 5
    assert math.isclose(_prometheus_value(scrape.text, "mindwatch_loss"), expect[5]["loss"],
                        rel_tol=1e-6)


def test_a_missing_view_package_fails_at_construction(tmp_path, quiet, hide_package):
    hide_package("tensorboardX")
    with pytest.raises(ImportError, match="pip install tensorboardX"):
        TrainMonitor(str(tmp_path), stream=quiet, tensorboard=True)
