"""What a rewind snapshot costs: time to take and restore one, host memory, and the step-time
overhead amortised over ``snapshot_every`` steps, for the demo model and a 100M-parameter one.

A snapshot (``mindwatch.mindspore.checkpoints.snapshots.TrainStateSnapshots``) copies every
Parameter of the train cell (weights, Adam's two moments, the step) to host memory;
``snapshots_kept`` copies are held. The amortised overhead is ``take / (snapshot_every x
step time)``; the 100M model's step time is not measured on this CPU (minutes), so its rows
give the absolute cost per step instead, to set against the step time of the accelerator it
runs on.

    python benchmarks/snapshots.py [--big-params 100e6] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import mindspore as ms
from mindspore import nn

from mindwatch.mindspore.checkpoints.snapshots import TrainStateSnapshots
from mindwatch.mindspore.demo.model import build_demo

INTERVALS = (10, 100, 1000)


class Wide(nn.Cell):
    """Square Dense layers: ``params`` weights in all (a 100M model's state size)."""

    def __init__(self, params: float, width: int = 4096):
        super().__init__()
        layers = max(1, round(params / (width * width)))
        self.layers = nn.SequentialCell([nn.Dense(width, width, has_bias=False)
                                         for _ in range(layers)])

    def construct(self, x):
        return self.layers(x)


def timed(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(train_cell: nn.Cell, repeats: int) -> tuple[float, float, int]:
    store = TrainStateSnapshots(lambda: train_cell)
    nbytes = store.take(0)
    take = timed(lambda: store.take(1), repeats)
    restore = timed(lambda: store.restore(0), repeats)
    return take, restore, nbytes


def demo_step_time(train_cell: nn.Cell, dataset, steps: int = 30) -> float:
    batches = list(dataset.create_tuple_iterator())
    for inputs in batches[:5]:                                      # compile, warm up
        train_cell(*inputs)
    start = time.perf_counter()
    for inputs in batches[5:5 + steps]:
        train_cell(*inputs)
    return (time.perf_counter() - start) / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-params", type=float, default=100e6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

    net_with_loss, optimizer, dataset = build_demo(seed=0, steps=40)
    demo = nn.TrainOneStepCell(net_with_loss, optimizer)
    step_s = demo_step_time(demo, dataset)
    take, restore, nbytes = measure(demo, args.repeats)
    print(f"demo model: {sum(p.size for p in net_with_loss.trainable_params()):,} weights, "
          f"state {nbytes / 2**20:.2f} MiB per snapshot; take {take * 1e3:.2f} ms, restore "
          f"{restore * 1e3:.2f} ms; step {step_s * 1e3:.1f} ms")
    for every in INTERVALS:
        print(f"  snapshot_every={every:<5d} step-time ratio "
              f"{1 + take / (every * step_s):.4f}")

    big = Wide(args.big_params)
    weights = sum(p.size for p in big.trainable_params())
    big_cell = nn.TrainOneStepCell(nn.WithLossCell(big, nn.MSELoss()),
                                   nn.Adam(big.trainable_params(), learning_rate=1e-4))
    take, restore, nbytes = measure(big_cell, args.repeats)
    print(f"{weights / 1e6:.0f}M-weight model with Adam: state {nbytes / 2**30:.2f} GiB per "
          f"snapshot (x snapshots_kept in host memory); take {take:.2f} s, restore "
          f"{restore:.2f} s")
    for every in INTERVALS:
        print(f"  snapshot_every={every:<5d} {take / every * 1e3:8.1f} ms per step amortised")
    return 0


if __name__ == "__main__":
    sys.exit(main())
