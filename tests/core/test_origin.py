"""Which rank's own gradients caused a gradient anomaly: the one local norm that is not
finite, or finite and ORIGIN_FACTOR times every other; none when no single rank stands out."""
import math

from mindwatch.anomaly import Anomaly
from mindwatch.observation import StepObservation
from mindwatch.policy import Policy
from mindwatch.ranks.peers import Peers, origin_rank
from mindwatch.settings import MonitorSettings


def test_the_rank_that_stands_out():
    assert origin_rank([0.5, math.nan]) == 1
    assert origin_rank([math.inf, 0.5, 0.7]) == 0
    assert origin_rank([math.nan, math.nan]) is None              # all bad: no single rank
    assert origin_rank([0.5, 400.0, 0.7]) == 1
    assert origin_rank([0.5, 1.9, 0.6]) is None                   # under 4x: no one
    assert origin_rank([0.5, None]) is None                       # not known everywhere


def _obs(norms):
    return StepObservation.from_arguments(
        step=5, epoch=1, loss=1.0, lr=1e-3, grad_norm=math.nan, grads_finite=False,
        lr_groups=None, skipped=True, steps=1, layer_grad_norms=None, extra=None,
        local_grad_norms=norms)


def test_gradient_anomalies_name_it_with_its_host_and_device():
    settings = MonitorSettings()
    peers = Peers(rank=0, world_size=2, policy=Policy(settings.policies), straggler_window=8,
                  straggler_factor=3.0)
    peers.places = {0: ("node-a", 0), 1: ("node-b", 3)}
    found = [Anomaly("gradient_nonfinite", 5, math.nan, None, "gradients hold NaN"),
             Anomaly("loss_spike", 5, 9.0, 3.0, "loss spike")]
    peers.attribute(_obs([0.25, math.nan]), found)
    grads, spike = found
    assert (grads.origin_rank, grads.origin_place) == (1, ("node-b", 3))
    assert grads.message == ("gradients hold NaN; it came from rank 1 (host node-b, device 3): "
                             "its own gradients' norm was nan before the reduction, the "
                             "other ranks' 0.25")
    assert spike.origin_rank is None and spike.message == "loss spike"   # not a gradient's
    quiet = [Anomaly("gradient_explode", 5, 500.0, 100.0, "explode")]
    peers.attribute(_obs([300.0, 310.0]), quiet)                   # both ranks alike
    assert quiet[0].origin_rank is None
