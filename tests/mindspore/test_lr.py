"""The LR in each step record is the one applied at that step, not the next one."""
import math

import mindspore as ms
import pytest
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_dataset

STEPS = 8   # float32 schedules: compare to 1e-5; neighbouring steps differ by >5%


def cosine(t, low=0.001, high=0.1, decay=6):
    t = min(t, decay)
    return low + 0.5 * (high - low) * (1 + math.cos(math.pi * t / decay))


LIST = [0.1 - 0.01 * i for i in range(STEPS)]

# name -> (optimizer factory, expected LR of each group at 1-based step s)
CASES = {
    "fixed": (lambda p: nn.SGD(p, learning_rate=0.05), lambda s: [0.05]),
    "schedule": (lambda p: nn.Adam(p, learning_rate=nn.CosineDecayLR(0.001, 0.1, 6)),
                 lambda s: [cosine(s - 1)]),
    "list": (lambda p: nn.Momentum(p, learning_rate=LIST, momentum=0.9),
             lambda s: [LIST[s - 1]]),
    "groups": (lambda p: nn.Adam([{"params": p[:2], "lr": nn.CosineDecayLR(0.001, 0.1, 6)},
                                  {"params": p[2:]}], learning_rate=0.02),
               lambda s: [cosine(s - 1), 0.02]),
}


@pytest.mark.parametrize("build", ["wrap", "plain", "own_cell"])
@pytest.mark.parametrize("case", list(CASES))
def test_lr_is_the_one_applied_at_each_step(tmp_path, quiet, graph_mode, case, build):
    make_optimizer, expected = CASES[case]
    net = make_regressor()
    optimizer = make_optimizer(net.trainable_params())
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    if build == "wrap":
        model = ms.train.Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    elif build == "plain":
        model = ms.train.Model(net, nn.MSELoss(), optimizer)
    else:       # the user's own train cell: Model is given no optimizer to report
        own_cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
        model = ms.train.Model(own_cell)
    model.train(1, regression_dataset(n=8 * STEPS), callbacks=[monitor], dataset_sink_mode=False)
    steps = read_rank_log(str(tmp_path / "rank_0.jsonl")).steps
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    for record in steps:
        want = expected(record["step"])
        assert record["lr"] == pytest.approx(want[0], rel=1e-5), record["step"]
        if len(want) > 1:
            assert record["lr_groups"] == pytest.approx(want, rel=1e-5)
        else:
            assert "lr_groups" not in record


class _Knob(nn.learning_rate_schedule.LearningRateSchedule):
    """A schedule with a Parameter of its own, turned between steps (as fault injection does)."""

    def __init__(self):
        super().__init__()
        self.inner = nn.CosineDecayLR(0.001, 0.1, 6)
        self.factor = ms.Parameter(ms.Tensor(1.0, ms.float32), name="factor",
                                   requires_grad=False)

    def construct(self, global_step):
        return self.inner(global_step) * self.factor


class _NotElementwise(nn.learning_rate_schedule.LearningRateSchedule):
    """Gives one value for a whole vector of steps: must be read one step at a time."""

    def construct(self, global_step):
        return 0.1 / (1.0 + ms.ops.reduce_max(global_step.astype(ms.float32)))


def test_chunked_schedules_follow_knobs_and_fall_back_when_not_elementwise(pynative_mode):
    from mindwatch.mindspore.step.lr import CHUNK, LrReader

    knob, reader = _Knob(), LrReader()
    assert reader._schedule_value(knob, 3) == pytest.approx(cosine(3), rel=1e-6)
    knob.factor.set_data(ms.Tensor(10.0, ms.float32))
    assert reader._schedule_value(knob, 3) == pytest.approx(10 * cosine(3), rel=1e-6)
    assert reader._schedule_value(knob, CHUNK + 5) == pytest.approx(10 * cosine(6), rel=1e-6)

    odd = _NotElementwise()
    for step in (0, 1, 7, CHUNK + 2):
        assert reader._schedule_value(odd, step) == pytest.approx(0.1 / (1 + step), rel=1e-6)
    assert reader._schedules[id(odd)]._vectorised is False
