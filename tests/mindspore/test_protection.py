"""Checkpoint-and-stop without wrap, reports with per-layer norms, optimizer state saved."""
import json

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset


def test_without_wrap_the_report_says_the_weights_include_the_bad_update(tmp_path, quiet,
                                                                          graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    ms.train.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01)).train(
        2, regression_dataset(n=64, nan_at=4), callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4] and log.end["reason"] == "stopped"
    anomaly = log.anomalies[0]
    assert anomaly["anomaly"] == "loss_nonfinite" and anomaly["step"] == 4
    assert anomaly["actions"] == ["checkpoint", "stop"]
    saved = ms.load_checkpoint(anomaly["checkpoint"])
    assert np.isnan(saved["inp.weight"].asnumpy()).any()       # the bad update is in there
    report = json.loads((tmp_path / "anomalies" / "step4_rank0.json").read_text())
    assert any("INCLUDE step 4's update" in note for note in report["notes"])
    assert [row["step"] for row in report["history"]] == [1, 2, 3, 4]
    # the advice fits this set-up (a plain Model), and nothing points at the bad weights
    assert any("build it with monitor.wrap(net_with_loss, optimizer)" in note
               for note in report["notes"])
    assert "no training state saved before step 4 exists" in report["notes"]
    assert report["resume"] is None
    markdown = (tmp_path / "anomalies" / "step4_rank0.md").read_text()
    assert "INCLUDE step 4's update" in markdown


def test_explosion_report_names_the_offending_layers(tmp_path, quiet, graph_mode):
    x, y = regression_arrays(64)
    y[5 * 8: 6 * 8] = 1e7                                     # batch 6 explodes the gradients
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, layer_norms_interval=2)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                        nn.Adam(net.trainable_params(), learning_rate=0.01), per_layer_norms=True)
    ms.train.Model(step).train(1, data, callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4, 5, 6]
    with_layers = [s["step"] for s in log.steps if "layer_grad_norms" in s]
    assert with_layers == [2, 4, 6]
    layers = log.steps[1]["layer_grad_norms"]
    assert set(layers) == {"inp", "norm", "out"}
    # The per-layer norms compose to the global norm.
    total = np.sqrt(sum(v ** 2 for v in layers.values()))
    assert abs(total - log.steps[1]["grad_norm"]) / total < 1e-5
    explode = next(a for a in log.anomalies if a["anomaly"] == "gradient_explode")
    report = json.loads((tmp_path / "anomalies" / "step6_rank0.json").read_text())
    names = [name for name, _ in report["top_layers"]]
    norms = [norm for _, norm in report["top_layers"]]
    assert names[0] == "out" and norms == sorted(norms, reverse=True)
    assert explode["checkpoint"] and "Layers with the largest gradient norm" in \
        (tmp_path / "anomalies" / "step6_rank0.md").read_text()
    saved = ms.load_checkpoint(explode["checkpoint"])
    assert any(name.startswith("moment1.") for name in saved)  # optimizer state is saved too
    assert int(saved["global_step"].asnumpy()[0]) == 5         # step 6's update was withheld


def test_with_wrap_a_spike_on_stop_is_not_withheld_and_the_report_says_how_it_would_be(
        tmp_path, quiet, graph_mode):
    x, y = regression_arrays(96)
    y[10 * 8: 11 * 8] *= 30                                    # batch 11 spikes the loss
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None,
                           spike_warmup=8, spike_window=8, grad_explode=1e4,
                           on_anomaly={"loss_spike": "checkpoint_and_stop"})
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params(), 0.01))
    ms.train.Model(step).train(1, data, callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    spike = next(a for a in log.anomalies if a["anomaly"] == "loss_spike")
    assert spike["step"] == 11 and not log.steps[-1]["skipped"]
    report = json.loads((tmp_path / "anomalies" / "step11_rank0.json").read_text())
    assert ("the checkpoint's weights INCLUDE step 11's update (loss_spike is withheld on the "
            "step only under on_anomaly={'loss_spike': 'skip'}; its policy is "
            "'checkpoint_and_stop')") in report["notes"]
    assert "no training state saved before step 11 exists" in report["notes"]
