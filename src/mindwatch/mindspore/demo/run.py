"""``mindwatch demo``: a small Transformer LM trained on the CPU under full monitoring."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TextIO

import mindspore as ms

from ...anomaly import Anomaly
from ..callback import TrainMonitor
from .inject import FaultInjector, InjectableLoss, InjectableSchedule, Injection, parse_inject
from .model import build_demo

__all__ = ["DemoResult", "parse_inject", "run_demo"]


@dataclass
class DemoResult:
    run_dir: str
    anomalies: list[Anomaly] = field(default_factory=list)
    steps: int = 0


DEMO_SNAPSHOT_EVERY = 20
# The demo's runs are short: state records every 10 steps draw the report's heatmaps (a state
# step costs ~1.2 steps on this model, so ~2% of the run), with each block's outputs and
# attention logits.
DEMO_STATE_INTERVAL = 10
DEMO_ACTIVATIONS = ["blocks.*.attn", "blocks.*.mlp"]
DEMO_ATTENTION_LOGITS = ["blocks.*.attn.scores"]


def default_run_dir() -> str:
    return os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S"))


def run_demo(*, out: str | None = None, steps: int = 300, inject: Injection | None = None,
             seed: int = 0, stream: TextIO | None = None, print_interval: int = 25,
             policy: str | None = None, **settings) -> DemoResult:
    """``policy``: ``on_anomaly`` for every kind (None: the defaults). Under "rewind" the
    demo snapshots every DEMO_SNAPSHOT_EVERY steps: its runs are short."""
    if policy is not None:
        settings["on_anomaly"] = policy
    if policy == "rewind":
        settings.setdefault("snapshot_every", DEMO_SNAPSHOT_EVERY)
    settings.setdefault("state_interval", DEMO_STATE_INTERVAL)
    run_dir = out or default_run_dir()
    ms.set_device("CPU")                 # set_context(device_target=...) is deprecated
    ms.set_context(mode=ms.GRAPH_MODE)
    loss_box, schedule_box = [], []

    def wrap_loss(cell):
        loss_box.append(InjectableLoss(cell))
        return loss_box[-1]

    def wrap_schedule(schedule):
        schedule_box.append(InjectableSchedule(schedule))
        return schedule_box[-1]

    net_with_loss, optimizer, dataset = build_demo(
        seed=seed, steps=steps, wrap_loss=wrap_loss if inject else None,
        wrap_schedule=wrap_schedule if inject else None)
    monitor = TrainMonitor(run_dir, stream=stream, print_interval=print_interval, **settings)
    watching = monitor.settings.state_interval is not None
    train_step = monitor.wrap(net_with_loss, optimizer, per_layer_norms=True,
                              activations=DEMO_ACTIVATIONS if watching else None,
                              attention_logits=DEMO_ATTENTION_LOGITS if watching else None)
    callbacks = [monitor]
    if inject is not None:
        callbacks.insert(0, FaultInjector(inject, loss_box[0], schedule_box[0]))
    ms.train.Model(train_step).train(1, dataset, callbacks=callbacks, dataset_sink_mode=False)
    return DemoResult(run_dir=run_dir, anomalies=list(monitor.anomalies),
                      steps=monitor.monitor.last_step)
