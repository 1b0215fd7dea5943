"""The epoch mean without holding every loss: exact as math.fsum over the list, flat memory."""
import math
import random

from mindwatch.pipeline.loss_stats import LossStats


def test_epoch_mean_is_the_exact_mean_of_finite_losses():
    rng = random.Random(0)
    losses = [rng.uniform(-1, 1) * 10 ** rng.randint(-8, 8) for _ in range(20_000)]
    stats = LossStats(0.9)
    stats.epoch = 1
    for loss in losses:
        stats.add(loss, 1)
    stats.add(math.nan, 1)
    stats.add(None, 1)                     # unknown, not non-finite
    fields = stats.end_epoch()
    assert fields["loss_mean"] == math.fsum(losses) / len(losses)
    assert fields["steps"] == 20_002 and fields["nonfinite_losses"] == 1
    assert len(stats._partials) == 0 and stats.end_epoch() is None


def test_partials_stay_few_over_a_long_epoch():
    stats = LossStats(0.9)
    stats.epoch = 1
    rng = random.Random(1)
    longest = 0
    for _ in range(200_000):
        stats.add(rng.lognormvariate(0, 1), 1)
        longest = max(longest, len(stats._partials))
    assert longest < 40


def test_sink_mode_counts_nonfinite_losses_not_steps():
    stats = LossStats(0.9)
    stats.epoch = 1
    for loss in (1.0, 2.0, math.inf):
        stats.add(loss, 4)                 # one observation per sink of 4 steps
    fields = stats.end_epoch()
    assert fields["steps"] == 12 and fields["nonfinite_losses"] == 1
    assert fields["loss_mean"] == 1.5
