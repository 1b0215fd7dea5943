"""This MindSpore, as the run log records it, and an untested one: said once, training goes
on."""
import mindspore as ms
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.compat import TESTED
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_dataset

UNTESTED = "is not a version mindwatch is tested with"


def _train(tmp_path, quiet, epochs=2):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    model = ms.train.Model(step)
    for _ in range(epochs):      # two run segments: a second model.train appends one
        model.train(1, regression_dataset(n=32), callbacks=[monitor], dataset_sink_mode=False)
    return read_rank_log(str(tmp_path / "rank_0.jsonl"))


def test_this_mindspore_is_tested_and_recorded(tmp_path, quiet, graph_mode):
    assert TESTED.supports(ms.__version__)
    log = _train(tmp_path, quiet)
    assert log.run["versions"]["mindspore"] == ms.__version__
    assert not [r for r in log.records if r["kind"] == "notice" and UNTESTED in r["message"]]


def test_an_untested_mindspore_is_said_once_and_training_goes_on(tmp_path, quiet, monkeypatch,
                                                                 graph_mode):
    monkeypatch.setattr(ms, "__version__", "2.6.0")
    log = _train(tmp_path, quiet)
    [notice] = [r for r in log.records if r["kind"] == "notice" and UNTESTED in r["message"]]
    assert notice["message"].startswith("MindSpore 2.6.0 is not a version mindwatch is tested "
                                        "with; tested: MindSpore 2.7, 2.8, 2.9, 2.10.")
    assert quiet.getvalue().count(UNTESTED) == 1
    assert [r["versions"]["mindspore"] for r in log.records if r["kind"] == "run"] == \
        ["2.6.0", "2.6.0"]
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4] * 2     # each train() counts anew
    assert all(s["grad_norm"] > 0 for s in log.steps)       # wrap's checks still on
    assert log.end["reason"] == "completed"
