"""A second ``model.train`` with the same monitor after a stop starts a clean run segment."""
import json

import mindspore as ms
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_dataset


def test_second_train_after_a_stop_runs_to_completion(tmp_path, quiet, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    optimizer = nn.SGD(net.trainable_params(), 0.01)
    model = ms.train.Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    model.train(1, regression_dataset(n=64, nan_at=3), callbacks=[monitor],
                dataset_sink_mode=False)
    assert monitor.monitor.stop_requested is not None
    model.train(1, regression_dataset(n=32), callbacks=[monitor], dataset_sink_mode=False)
    assert monitor.monitor.stop_requested is None and monitor.anomalies == []

    records = read_rank_log(str(tmp_path / "rank_0.jsonl")).records
    ends = [r for r in records if r["kind"] == "end"]
    assert [e["reason"] for e in ends] == ["stopped", "completed"]
    assert ends[0]["stopped_by"] == {"anomaly": "loss_nonfinite", "step": 3, "rank": 0}
    assert ends[1]["stopped_by"] is None
    runs = [i for i, r in enumerate(records) if r["kind"] == "run"]
    second = [r for r in records[runs[1]:] if r["kind"] == "step"]
    assert len(second) == 4 and not any(s["skipped"] for s in second)   # 32 samples / 8
    assert all(r["anomaly"] != "peer_stop" for r in records if r["kind"] == "anomaly")


def test_a_resumed_monitor_keeps_the_detectors_history(tmp_path, quiet, graph_mode):
    net = make_regressor()
    first = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    model = ms.train.Model(first.wrap(nn.WithLossCell(net, nn.MSELoss()),
                                      nn.SGD(net.trainable_params(), 0.01)))
    model.train(1, regression_dataset(n=64), callbacks=[first], dataset_sink_mode=False)
    state = json.loads(json.dumps(first.state_dict()))            # plain JSON, saved on disk
    assert len(state["detectors"][2]["logs"]) == 8                # the loss spike window

    resumed = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None, resume=True)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
