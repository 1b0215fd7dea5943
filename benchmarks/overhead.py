"""Step-time overhead of mindwatch on the demo Transformer, measured side by side.

Every configuration trains the same demo model (same seed, same batches) in GRAPH_MODE on
the CPU. Each is compiled once, then the configurations take turns, chunk by chunk, in a
rotating order, so drift of the machine (thermal, other load) hits them all alike. A
StepClock callback, first in every list, times each step from the previous step's end (so
every other callback's cost is inside, Model.train's set-up is not). Per chunk the median
step time is kept; the ratio is the median over chunks of (this configuration's chunk / the
bare chunk of the same round), against the bare train step with no callbacks. The sampler
configurations are also compared, the same way, with TrainMonitor+wrap without sampler, and
TrainMonitor+wrap with the bare step whose update sits inside the same kind of graph `if`
(MindSpore's own cost of withholding an update in the graph).
Then the host cost per step of the trend rules beside every rule's (``--only rules``: that
alone), and the cost of one sample of each hardware probe.

    python benchmarks/overhead.py [--chunks 12] [--steps-per-chunk 40] [--d-model 64 --layers 2]
                                  [--only wrap [--only ...]] [--only rules]
    e.g. --only "=TrainMonitor+wrap" --only "no batch identity": the batch's fingerprint's cost
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import mindspore as ms
from mindspore import nn, ops
from mindspore.train import Callback, LossMonitor, TimeMonitor

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.demo.model import build_demo


class StepClock(Callback):
    """First in the callback list: the time from one step's end to the next one's covers the
    next step and every other callback of this one, and none of Model.train's set-up."""

    def __init__(self):
        self.last = None
        self.intervals = []

    def on_train_epoch_begin(self, run_context):
        self.last = None

    def on_train_step_end(self, run_context):
        now = time.perf_counter()
        if self.last is not None:
            self.intervals.append(now - self.last)
        self.last = now


MODEL = {}      # TinyGPT size options, from the command line


def bare(steps, workdir, devnull):
    net, optimizer, dataset = build_demo(seed=0, steps=steps, **MODEL)
    return ms.train.Model(nn.TrainOneStepCell(net, optimizer)), dataset, []


class GuardedTrainOneStepCell(nn.TrainOneStepCell):
    """The bare step with its update inside a graph ``if`` (on a finite loss), nothing else:
    what any in-graph withholding costs in MindSpore on this device, for reference.
    (MindSpore's own TrainOneStepWithLossScaleCell does the same but does not run on the CPU:
    its overflow check is an NPU kernel.)"""

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.grad(self.network, self.weights)(*inputs, ops.ones_like(loss))
        if ops.isfinite(loss):
            loss = ops.depend(loss, self.optimizer(grads))
        return loss


def guarded_bare(steps, workdir, devnull):
    net, optimizer, dataset = build_demo(seed=0, steps=steps, **MODEL)
    return ms.train.Model(GuardedTrainOneStepCell(net, optimizer)), dataset, []


def mindspore_monitors(steps, workdir, devnull):
    model, dataset, _ = bare(steps, workdir, devnull)
    return model, dataset, [LossMonitor(per_print_times=10), TimeMonitor()]


def mindwatch(wrap=True, hardware_interval_s=None, settings=None, batch_identity=True,
              **wrap_options):
    def make(steps, workdir, devnull):
        net, optimizer, dataset = build_demo(seed=0, steps=steps, **MODEL)
        run_dir = tempfile.mkdtemp(dir=workdir)
        monitor = TrainMonitor(run_dir, stream=devnull, hardware_interval_s=hardware_interval_s,
                               **(settings or {}))
        if not batch_identity:      # the step's batch not identified (issue #46's cost)
            monitor._batches.begin = lambda step, inputs, cell: None
        step = (monitor.wrap(net, optimizer, **wrap_options) if wrap
                else nn.TrainOneStepCell(net, optimizer))
        return ms.train.Model(step), dataset, [monitor]
    return make


CONFIGS = [
    ("bare TrainOneStepCell", bare),
    ("LossMonitor+TimeMonitor", mindspore_monitors),
    ("bare step, update inside an if", guarded_bare),
    ("TrainMonitor, no wrap", mindwatch(wrap=False)),
    ("TrainMonitor+wrap", mindwatch()),
    # the batch's fingerprint (bad_batches.jsonl) not computed: its cost is the difference
    ("TrainMonitor+wrap, no batch identity", mindwatch(batch_identity=False)),
    ("TrainMonitor+wrap, no skipping", mindwatch(skip_anomalous_updates=False)),
    # the update-size rule (max_update_ratio) off: its cost is a weight norm measured when
    # training begins and every 100 steps, and nothing in the step's graph
    ("TrainMonitor+wrap, update-size rule off", mindwatch(settings=dict(max_update_ratio=None))),
    ("TrainMonitor+wrap, hardware every 2 s", mindwatch(hardware_interval_s=2.0)),
    ("TrainMonitor+wrap, hardware every 0.5 s", mindwatch(hardware_interval_s=0.5)),
    # State records: off, and on every step (the state graph's own step time; at the
    # default interval of 100 a chunk of 40 steps would never run it).
    ("TrainMonitor+wrap, state off", mindwatch(settings=dict(state_interval=None))),
    ("TrainMonitor+wrap, state every step", mindwatch(settings=dict(state_interval=1))),
    # ... and with every block's outputs and attention logits watched (the demo's set)
    ("TrainMonitor+wrap, state+activations every step", mindwatch(
        settings=dict(state_interval=1), activations=["blocks.*.attn", "blocks.*.mlp"],
        attention_logits=["blocks.*.attn.scores"])),
    # Every view and measurement on: per-layer norms, TensorBoard, MindInsight, Prometheus.
    ("everything on", mindwatch(hardware_interval_s=2.0, per_layer_norms=True, settings=dict(
        tensorboard=True, mindinsight=True, prometheus_port=0))),
]
SAMPLER_BASE = "TrainMonitor+wrap"    # the sampler configurations are also compared to this
STATE_OFF, STATE_EVERY_STEP = "TrainMonitor+wrap, state off", "TrainMonitor+wrap, state every step"
STATE_ROWS = (STATE_EVERY_STEP, "TrainMonitor+wrap, state+activations every step")
DEFAULT_STATE_INTERVAL, DEFAULT_CONSISTENCY_INTERVAL = 100, 1000
# The skipping step is also compared to the bare step with the same in-graph `if`: what is
# left is mindwatch's own cost (norm, outputs, callback), apart from MindSpore's control flow.
IF_BASE, IF_COMPARED = "bare step, update inside an if", "TrainMonitor+wrap"


def fingerprint_cost(model, repeats=20):
    """Seconds of one replica fingerprint (fingerprints.py) of the train cell ``model`` runs:
    what a consistency check costs besides its one all-reduce."""
    from mindwatch.mindspore.ranks.fingerprints import Fingerprinter
    fingerprinter = Fingerprinter(model.train_network)
    fingerprinter.vector()                                  # compile
    start = time.perf_counter()
    for _ in range(repeats):
        fingerprinter.vector()
    return (time.perf_counter() - start) / repeats


def batch_identity_cost(dataset, repeats=2000):
    """Seconds of one batch identity (issue #46: mindspore/reading/batch.py's host_identity)
    of the dataset's first batch, as the callback computes it before every step: its cost
    alone, which the interleaved chunks cannot tell from their noise (~1%)."""
    from mindwatch.mindspore.reading.batch import host_identity
    batch = next(dataset.create_tuple_iterator())
    for _ in range(10):
        host_identity(batch)
    start = time.perf_counter()
    for _ in range(repeats):
        host_identity(batch)
    return (time.perf_counter() - start) / repeats, [tuple(t.shape) for t in batch]


def trend_costs(steps=20000, steps_per_sample=20):
    """Host microseconds per step of the three trend rules (throughput_drop, data_bound,
    memory_growth) on a run with one hardware sample every ``steps_per_sample`` steps (2 s
    samples of 100 ms steps), beside the whole default rule set's, on prebuilt observations:
    what the rules cost on the training thread, with nothing else in the measurement (the
    loop's own cost, measured with no rule, is taken off)."""
    from mindwatch.detectors import (
        DataBoundDetector,
        MemoryGrowthDetector,
        ThroughputDropDetector,
        build_detectors,
    )
    from mindwatch.observation import HardwareSample, StepObservation
    from mindwatch.settings import MonitorSettings
    rng = random.Random(0)
    observations = [StepObservation(step=i, loss=2.0 + rng.random() * 0.1, lr=1e-3,
                                    grad_norm=1.0 + rng.random() * 0.1,
                                    step_time_s=0.1 + rng.random() * 0.01,
                                    data_time_s=0.005 + rng.random() * 0.001,
                                    samples_per_s=320.0, segment_step=i)
                    for i in range(1, steps + 1)]
    samples = [HardwareSample(time=2.0 * i, rss_gb=4.0 + rng.random() * 0.01,
                              mem_available_gb=100.0, segment_steps=i * steps_per_sample)
               for i in range(steps // steps_per_sample)]
    trend = (ThroughputDropDetector, DataBoundDetector, MemoryGrowthDetector)

    def per_step(chosen):
        start = time.perf_counter()
        for index, obs in enumerate(observations):
            for detector in chosen:
                detector.update(obs)
            if index % steps_per_sample == 0:
                for detector in chosen:
                    detector.update_hardware(samples[index // steps_per_sample])
        return (time.perf_counter() - start) / steps * 1e6

    # the loop itself, with no rule in it, is measured alike and taken off
    harness = statistics.median(per_step([]) for _ in range(5))
    costs = {}
    for name, pick in (("the three trend rules", lambda d: isinstance(d, trend)),
                       ("every default rule", lambda d: True)):
        runs = [per_step([d for d in build_detectors(MonitorSettings()) if pick(d)])
                for _ in range(5)]
        costs[name] = statistics.median(runs) - harness
    return costs


def probe_costs(repeats=50):
    """Wall time of one sample() per probe, on this thread (the sampler's own cost)."""
    from mindwatch.hardware.framework_memory import FrameworkMemoryProbe
    from mindwatch.hardware.host import HostProbe
    from mindwatch.hardware.npu_smi import NpuSmiProbe
    from mindwatch.mindspore.hardware.memory import mindspore_memory_reader
    probes = {"host (psutil)": HostProbe(),
              "framework memory (mindspore.runtime)": FrameworkMemoryProbe(
                  mindspore_memory_reader())}
    fixture = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "npu-smi",
                           "info-23.0.rc3.3-910B1.txt")
    if os.path.exists(fixture):
        fake = os.path.join(tempfile.mkdtemp(), "npu-smi")
        with open(fake, "w") as handle:
            handle.write(f"#!/bin/sh\nif [ \"$2\" = \"-m\" ]; then exit 1; fi\n"
                         f"cat {os.path.abspath(fixture)}\n")
        os.chmod(fake, 0o755)
        probes["npu-smi (recorded output, fake executable)"] = NpuSmiProbe(executable=fake)
    costs = {}
    for name, probe in probes.items():
        probe.sample()
        start = time.perf_counter()
        for _ in range(repeats):
            probe.sample()
        costs[name] = (time.perf_counter() - start) / repeats
    return costs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=12)
    parser.add_argument("--steps-per-chunk", type=int, default=40)
    parser.add_argument("--d-model", type=int, default=64, help="demo default: 64")
    parser.add_argument("--layers", type=int, default=2, help="demo default: 2")
    parser.add_argument("--only", action="append", default=None,
                        help="run only the configurations whose name contains this text (the "
                        "bare baseline always runs), e.g. 'wrap'; '=NAME': that one alone; "
                        "several: any of them")
    args = parser.parse_args(argv)
    if args.only == ["rules"]:              # the rules' host cost alone, no training
        for name, micros in trend_costs().items():
            print(f"{name:<46}{micros:>8.2f} us/step")
        return 0
    MODEL.update(d_model=args.d_model, n_layers=args.layers, n_heads=4, d_ff=2 * args.d_model)
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    workdir = tempfile.mkdtemp(prefix="mindwatch-bench-")
    # Open for the whole measurement: the monitors and sys.stdout write to it while training.
    with open(os.devnull, "w") as devnull:
        configs = []
        real_stdout = sys.stdout
        chosen = [(name, make) for index, (name, make) in enumerate(CONFIGS)
                  if index == 0 or args.only is None or any(
                      name == text[1:] if text.startswith("=") else text in name
                      for text in args.only)]
        for name, make in chosen:
            model, dataset, callbacks = make(args.steps_per_chunk, workdir, devnull)
            sys.stdout = devnull                      # LossMonitor prints; printing is not measured
            try:
                model.train(1, dataset, callbacks=callbacks, dataset_sink_mode=False)   # compile
            finally:
                sys.stdout = real_stdout
            clock = StepClock()
            configs.append((name, model, dataset, [clock, *callbacks], clock))
        per_chunk = {name: [] for name, *_ in configs}      # median interval of each chunk
        for chunk in range(args.chunks):
            shift = chunk % len(configs)
            for name, model, dataset, callbacks, clock in configs[shift:] + configs[:shift]:
                sys.stdout = devnull
                try:
                    clock.intervals.clear()
                    model.train(1, dataset, callbacks=callbacks, dataset_sink_mode=False)
                    per_chunk[name].append(statistics.median(clock.intervals))
                finally:
                    sys.stdout = real_stdout
        base_name = configs[0][0]
        print(f"demo TinyGPT d_model={args.d_model} layers={args.layers}, GRAPH_MODE CPU, "
              f"{args.chunks} interleaved chunks x "
              f"{args.steps_per_chunk} steps")
        print("ms/step: median over chunks of each chunk's median step-to-step time; ratio: median")
        print("over chunks of (this chunk / the bare chunk of the same round), so drift cancels")
        print(f"{'configuration':<50}{'ms/step':>9}{'ratio':>8}{'vs no sampler':>15}"
              f"{'vs if-step':>12}{'vs state off':>14}")
        state_ratios = {}
        for name, *_ in configs:
            ratios = [mine / bare for mine, bare
                      in zip(per_chunk[name], per_chunk[base_name], strict=True)]
            line = (f"{name:<50}{statistics.median(per_chunk[name]) * 1000:>9.2f}"
                    f"{statistics.median(ratios):>8.3f}")
            if "hardware" in name and SAMPLER_BASE in per_chunk:
                own = [mine / base for mine, base
                       in zip(per_chunk[name], per_chunk[SAMPLER_BASE], strict=True)]
                line += f"{statistics.median(own):>15.3f}"
            if name == IF_COMPARED and IF_BASE in per_chunk:
                own = [mine / base for mine, base
                       in zip(per_chunk[name], per_chunk[IF_BASE], strict=True)]
                line += f"{'':>15}{statistics.median(own):>12.3f}"
            if name in STATE_ROWS and STATE_OFF in per_chunk:
                state_ratios[name] = statistics.median(
                    mine / base for mine, base
                    in zip(per_chunk[name], per_chunk[STATE_OFF], strict=True))
                line += f"{'':>27}{state_ratios[name]:>14.3f}"
            print(line)
        for name, ratio in state_ratios.items():
            print(f"{name.split(', ')[1].replace(' every step', '')} at the default "
                  f"state_interval ({DEFAULT_STATE_INTERVAL}): "
                  f"{(ratio - 1) / DEFAULT_STATE_INTERVAL:.2%} of a step on average "
                  f"(one state step costs {ratio - 1:.2f} extra steps)")
        wrapped = [c for c in configs if c[0] == SAMPLER_BASE]
        if wrapped:
            seconds = fingerprint_cost(wrapped[0][1])
            step_s = statistics.median(per_chunk[SAMPLER_BASE])
            print(f"replica fingerprint (consistency_interval, weights and optimizer state): "
                  f"{seconds * 1e3:.2f} ms = {seconds / step_s:.2f} steps; at the default "
                  f"interval ({DEFAULT_CONSISTENCY_INTERVAL}): "
                  f"{seconds / step_s / DEFAULT_CONSISTENCY_INTERVAL:.3%} of a step")
            seconds, shapes = batch_identity_cost(wrapped[0][2])
            print(f"batch identity (bad_batches.jsonl), every step, inputs {shapes}: "
                  f"{seconds * 1e3:.3f} ms = {seconds / step_s:.2%} of a step")
        print("\nhost cost of the rules per step (prebuilt observations, a hardware sample every "
              "20 steps; median of 5 runs of 20000 steps):")
        for name, micros in trend_costs().items():
            print(f"  {name:<46}{micros:>8.2f} us/step")
        print("\ncost of one sample() per probe (on the sampler thread, never on the step):")
        for name, seconds in probe_costs().items():
            print(f"  {name:<46}{seconds * 1e3:>8.3f} ms")
        return 0


if __name__ == "__main__":
    sys.exit(main())
