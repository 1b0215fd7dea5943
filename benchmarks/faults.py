"""Fault-detection benchmark: mindwatch's rules against two plain baselines, on real training.

Every run trains a real MindSpore model on the CPU (GRAPH_MODE) under TrainMonitor + wrap
with every policy set to "warn", so the run goes on past the fault and every rule's alarms
can be compared on the same run log. Scenarios inject a fault at step FAULT_STEP:

    healthy         nothing (any alarm is a false alarm)
    lr_spike        the LR x1000 for one step
    nan_batch       a NaN in one batch (the regressor: a NaN input; the LM: a NaN in its loss,
                    token ids cannot be NaN)
    poisoned_batch  one batch with huge values (the regressor: inputs x1e4; the LM: its loss
                    x1e4, the closest a token batch gets)
    slow_divergence the LR grows 15% per step from the fault on (x270 after 40 steps)
    vanishing       the loss (hence every gradient) scaled by 1e-9 from the fault on
    layer_lr_50x    one layer group's LR x50 from the fault on (FAST_LAYER: an MLP block of
                    the LM, the regressor's middle layer); every run trains with that group
                    on its own schedule, so the healthy runs are the same runs without it
    query_scale     the LM only: the first block's query weights (QUERY_LAYER) x1.1 before
                    every step from the fault on, so its attention logits grow ~10% per step
    one_shot_fault  the loss divided by zero once, by a Cell that disarms itself inside the
                    graph: a device's transient fault (the same step computed again is
                    healthy); every run trains through that Cell, disarmed
    throughput_drop every step takes longer from the fault on: a callback inside the step
                    waits the run's own median step time (measured on steps 10-50), at least
                    10 ms, so the step takes twice as long (a device throttled to half speed)
    data_bound      the input pipeline slows from the fault's batch on: a dataset map waits 3x
                    the run's median step time (at least 20 ms) per batch, so the devices
                    wait for it
    memory_growth   not a run of this table: leak_grid.py, at the default settings (real
                    runs of minutes, healthy and leaking 10 GB/min, and a grid of leak rates
                    from 10 GB/min to 1 GB/day, each found against the time it leaves)
    slow_ranks      not a run of this table: the fleet rows (slow_ranks.py), a rank 20%
                    slower in its compute or 30 ms late with its input among 8, 16 and 4096
                    ranks, every rank's straggler rule simulated in one process: detection
                    latency after the warm-up and false alarms over healthy runs

State records every STATE_INTERVAL steps (the update_ratio rule reads them; the LM's runs
watch every block's attention logits, for the attention_logit rule). For layer_lr_50x and
query_scale the benchmark also prints how many steps ahead of the loss's divergence (the
first loss above 1.5x the median of the 20 steps before the fault) the first alarm came, and
of the first alarm of a rule that reads only step records (loss, gradient norm, LR).

Baselines, written as plain rules over the same step records:
    fixed:        grad_norm > 100 or grad_norm < 1e-6 (a NaN compares false: silent)
    running-mean: loss > (1 + 2.0) x mean of the previous 10 losses (Lightning-style, rtol 2)

Detected = the rule fires within HORIZON steps from the fault; latency = first alarm step -
fault step; false alarms = alarms in healthy runs plus alarms before the fault.

    python benchmarks/faults.py [--seeds 3] [--steps 200] [--only data_bound,memory_growth]
    python benchmarks/faults.py --only slow_ranks          # the fleet rows alone

What each policy makes of the same faults (final loss, steps lost): benchmarks/recovery.py.
"""
from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import Callback

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.demo.inject import InjectableLoss, InjectableSchedule
from mindwatch.mindspore.demo.model import build_demo
from mindwatch.runlog import read_rank_log

FAULT_STEP = 100
HORIZON = 80          # slow divergence needs ~40 steps to show in the loss
SCENARIOS = ("healthy", "lr_spike", "nan_batch", "poisoned_batch", "slow_divergence",
             "vanishing", "layer_lr_50x", "query_scale", "one_shot_fault", "throughput_drop",
             "data_bound")
AHEAD = ("layer_lr_50x", "query_scale")     # scenarios whose lead on the loss is printed
INSIDE = ("update_ratio", "attention_logit")  # the rules that read state records
STATE_INTERVAL = 10
FAST_LAYER = {"tinygpt": "blocks.1.mlp.", "mlp": "body.2."}
LAYER_LR_FACTOR = 50.0
QUERY_LAYER, QUERY_GROWTH = "blocks.0.attn.qkv.", 1.1
ATTENTION_LOGITS = {"tinygpt": ["blocks.*.attn.scores"], "mlp": None}
PACE_STEPS = range(10, 51)          # the steps whose median sets the slowdowns' size


class OneShotFault(nn.Cell):
    """The loss divided by (1 - armed): +inf once armed; the graph disarms it in the same
    step, so a replay of that step is healthy."""

    def __init__(self, loss):
        super().__init__(auto_prefix=False)
        self.loss = loss
        self.fault_armed = ms.Parameter(ms.Tensor(0.0, ms.float32), name="fault_armed",
                                        requires_grad=False)

    def construct(self, *inputs):
        out = self.loss(*inputs) / (1.0 - self.fault_armed)
        return ms.ops.depend(out, ms.ops.assign(self.fault_armed, ms.ops.zeros((), ms.float32)))


# What the dataset map reads: MindSpore copies the map's callable into its pipeline, so it
# cannot read the Knobs object the training loop updates.
SLOW_DATA = {"scenario": None, "seconds": 0.02}


class SlowBatches:
    """A dataset map that passes each batch on, waiting SLOW_DATA["seconds"] per batch from
    the fault's batch on (data_bound): the input pipeline falls behind the step."""

    def __init__(self):
        self.batches = 0

    def __call__(self, column):
        self.batches += 1
        if self.batches >= FAULT_STEP and SLOW_DATA["scenario"] == "data_bound":
            time.sleep(SLOW_DATA["seconds"])
        return column


class Knobs(Callback):
    """Sets the injection knobs before each step (cur_step_num is the step about to run).
    Before the monitor in the callback list: what it does in ``on_train_step_end`` is inside
    the step's compute time as mindwatch measures it."""

    def __init__(self, scenario, loss, schedule, data_poisoned, layer_schedule, optimizer,
                 one_shot):
        self.scenario, self.loss, self.schedule, self.one_shot = scenario, loss, schedule, one_shot
        self.data_poisoned = data_poisoned      # the regressor poisons its data instead
        self.layer_schedule = layer_schedule    # FAST_LAYER's group
        self.query = [p for p in optimizer.parameters if p.name.startswith(QUERY_LAYER)]
        self.durations, self.began = [], None
        self.slow_compute_s = 0.01
        SLOW_DATA.update(scenario=scenario, seconds=0.02)

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        if step in PACE_STEPS:
            self.durations.append(time.perf_counter() - self.began)
            if step == PACE_STEPS[-1]:
                pace = statistics.median(self.durations)
                self.slow_compute_s = max(pace, 0.01)
                SLOW_DATA["seconds"] = max(3 * pace, 0.02)
        if self.scenario == "throughput_drop" and step >= FAULT_STEP:
            time.sleep(self.slow_compute_s)

    def on_train_step_begin(self, run_context):
        self.began = time.perf_counter()
        step = run_context.original_args().cur_step_num
        factor, poison, lr_factor = 1.0, 0.0, 1.0
        at = step == FAULT_STEP
        if self.scenario == "lr_spike" and at:
            lr_factor = 1000.0
        elif self.scenario == "slow_divergence" and step >= FAULT_STEP:
            lr_factor = 1.15 ** (step - FAULT_STEP + 1)
        elif self.scenario == "vanishing" and step >= FAULT_STEP:
            factor = 1e-9
        elif self.scenario == "nan_batch" and at and not self.data_poisoned:
            poison = math.nan
        elif self.scenario == "poisoned_batch" and at and not self.data_poisoned:
            factor = 1e4
        self.loss.fault_loss_factor.set_data(ms.Tensor(factor, ms.float32))
        self.loss.fault_loss_poison.set_data(ms.Tensor(poison, ms.float32))
        self.schedule.fault_lr_factor.set_data(ms.Tensor(lr_factor, ms.float32))
        layer = LAYER_LR_FACTOR if self.scenario == "layer_lr_50x" and step >= FAULT_STEP \
            else lr_factor
        self.layer_schedule.fault_lr_factor.set_data(ms.Tensor(layer, ms.float32))
        if self.scenario == "one_shot_fault" and at:
            ms.ops.assign(self.one_shot.fault_armed, ms.Tensor(1.0, ms.float32))
        if self.scenario == "query_scale" and step >= FAULT_STEP:
            for parameter in self.query:        # the fused q|k|v rows: the first third is q
                value = parameter.asnumpy().copy()
                value[:value.shape[0] // 3] *= QUERY_GROWTH
                ms.ops.assign(parameter, ms.Tensor(value))


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(16, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(),
                                      nn.Dense(64, 1))

    def construct(self, x):
        return self.body(x)


def regressor(seed, steps, scenario):
    """A noisy small-batch regression: its loss jumps around far more than the LM's."""
    ms.set_seed(seed)
    rng = np.random.default_rng(seed)
    batch = 8
    x = rng.standard_normal((steps * batch, 16)).astype(np.float32)
    w = rng.standard_normal((16, 1)).astype(np.float32)
    y = (x @ w + 0.5 * rng.standard_normal((steps * batch, 1))).astype(np.float32)
    rows = slice((FAULT_STEP - 1) * batch, FAULT_STEP * batch)
    if scenario == "nan_batch":
        x[rows][0, 0] = np.nan
        x[(FAULT_STEP - 1) * batch, 0] = np.nan
    elif scenario == "poisoned_batch":
        x[rows] *= 1e4
    net = Regressor()
    loss = InjectableLoss(nn.WithLossCell(net, nn.MSELoss()))
    schedule = InjectableSchedule(nn.CosineDecayLR(1e-4, 3e-3, steps))
    optimizer = nn.Adam(net.trainable_params(), learning_rate=schedule)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)
    return loss, optimizer, schedule, data, True


def tiny_gpt(seed, steps, scenario):
    boxes = {}

    def wrap_loss(cell):
        boxes["loss"] = InjectableLoss(cell)
        return boxes["loss"]

    def wrap_schedule(schedule):
        boxes["schedule"] = InjectableSchedule(schedule)
        return boxes["schedule"]

    loss, optimizer, data = build_demo(seed=seed, steps=steps, wrap_loss=wrap_loss,
                                       wrap_schedule=wrap_schedule)
    return loss, optimizer, boxes["schedule"], data, False


ARCHITECTURES = {"tinygpt": tiny_gpt, "mlp": regressor}


def with_layer_group(optimizer, schedule, prefix):
    """The same optimizer, FAST_LAYER's parameters in groups of their own whose LR is a
    second injectable copy of the schedule; the weight decay of each group kept."""
    decays = isinstance(optimizer, nn.AdamWeightDecay)
    layer_schedule = InjectableSchedule(schedule.schedule)
    layer_schedule.fault_lr_factor.name = "fault_layer_lr_factor"   # names are unique
    groups = []
    for in_layer in (False, True):
        for matrix in (True, False):
            params = [p for p in optimizer.parameters
                      if p.name.startswith(prefix) == in_layer and (p.ndim >= 2) == matrix]
            if params:
                groups.append({"params": params, "lr": layer_schedule if in_layer else schedule,
                               "weight_decay": 0.01 if decays and matrix else 0.0})
    if decays:
        return nn.AdamWeightDecay(groups, learning_rate=schedule, beta1=0.9,
                                  beta2=0.99), layer_schedule
    return nn.Adam(groups, learning_rate=schedule), layer_schedule


def scenarios(arch):
    """The scenarios that apply to ``arch``: the regressor has no attention to scale."""
    return [s for s in SCENARIOS if s != "query_scale" or ATTENTION_LOGITS[arch] is not None]


def run_one(arch, scenario, seed, steps, workdir, policy="warn", **settings):
    """One run; ``policy`` is on_anomaly for every kind (recovery.py compares them)."""
    loss, optimizer, schedule, data, poisons_data = ARCHITECTURES[arch](seed, steps, scenario)
    optimizer, layer_schedule = with_layer_group(optimizer, schedule, FAST_LAYER[arch])
    run_dir = tempfile.mkdtemp(dir=workdir)
    monitor = TrainMonitor(run_dir, on_anomaly=policy, stream=io.StringIO(),
                           **{"state_interval": STATE_INTERVAL, **settings})
    one_shot = OneShotFault(loss)
    model = ms.train.Model(monitor.wrap(one_shot, optimizer,
                                        attention_logits=ATTENTION_LOGITS[arch]))
    knobs = Knobs(scenario, loss, schedule, poisons_data, layer_schedule, optimizer, one_shot)
    # one worker: the map's default several would wait side by side and keep up
    data = data.map(SlowBatches(), input_columns=data.get_col_names()[:1],
                    python_multiprocessing=False, num_parallel_workers=1)
    model.train(1, data, callbacks=[knobs, monitor], dataset_sink_mode=False)
    return read_rank_log(f"{run_dir}/rank_0.jsonl")


def divergence_step(steps):
    """The first step from the fault on whose loss is non-finite or above 1.5x the median of
    the 20 steps before the fault; None when the loss never diverges."""
    before = [s["loss"] for s in steps if FAULT_STEP - 20 <= s["step"] < FAULT_STEP]
    bound = 1.5 * statistics.median(before)
    for s in steps:
        if s["step"] >= FAULT_STEP and (not math.isfinite(s["loss"]) or s["loss"] > bound):
            return s["step"]
    return None


def fixed_rule(steps):
    return [s["step"] for s in steps if s["grad_norm"] is not None
            and (s["grad_norm"] > 100 or s["grad_norm"] < 1e-6)]


def running_mean_rule(steps, window=10, rtol=2.0):
    fired, history = [], []
    for s in steps:
        loss = s["loss"]
        if len(history) >= window and loss > (1 + rtol) * statistics.fmean(history[-window:]):
            fired.append(s["step"])
        if loss is not None and math.isfinite(loss):
            history.append(loss)
    return fired


def evaluate(alarm_steps, scenario):
    early = [s for s in alarm_steps if s < FAULT_STEP]
    late = [s for s in alarm_steps if FAULT_STEP <= s < FAULT_STEP + HORIZON]
    if scenario == "healthy":
        return None, len(alarm_steps)
    return (late[0] - FAULT_STEP if late else None), len(early)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--only", default=None, metavar="A,B",
                        help="run only these scenarios (healthy always runs)")
    parser.add_argument("--recovery", action="store_true",
                        help="compare the policies instead (recovery.py, which takes --arch)")
    args, rest = parser.parse_known_args(argv)
    if args.recovery:
        from recovery import main as recovery
        return recovery(["--seeds", str(args.seeds), "--steps", str(args.steps), *rest])
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    workdir = tempfile.mkdtemp(prefix="mindwatch-faults-")
    rules = ("mindwatch", "fixed", "running-mean")
    table = defaultdict(lambda: {rule: {"latency": [], "missed": 0, "false": 0} for rule in rules})
    first_kinds = defaultdict(lambda: defaultdict(int))
    verdicts = defaultdict(lambda: defaultdict(int))    # (arch, scenario) -> verdict -> n
    ahead = []  # AHEAD: (arch, scenario, seed, first alarm, its kind, divergence, step rules')
    chosen = None if args.only is None else {"healthy", *args.only.split(",")}
    leaks = chosen is None or "memory_growth" in chosen
    fleet = chosen is None or "slow_ranks" in chosen
    if chosen == {"healthy", "memory_growth"}:           # the leak grid alone
        from leak_grid import main as leak_grid
        return leak_grid([])
    if chosen == {"healthy", "slow_ranks"}:              # the fleet rows alone
        from slow_ranks import main as slow_ranks
        return slow_ranks([])
    for arch in ARCHITECTURES:
        for scenario in scenarios(arch):
            if chosen is not None and scenario not in chosen:
                continue
            for seed in range(args.seeds):
                log = run_one(arch, scenario, seed, args.steps, workdir)
                anomalies = log.anomalies
                alarms = {"mindwatch": sorted({a["step"] for a in anomalies}),
                          "fixed": fixed_rule(log.steps),
                          "running-mean": running_mean_rule(log.steps)}
                for replay in log.of_kind("replay"):
                    verdict = ("reproduced" if replay["reproduced"] else
                               "healthy: transient_fault" if replay.get("healthy") else
                               "differs, no verdict")
                    verdicts[(arch, scenario)][verdict] += 1
                late = [a for a in anomalies if a["step"] >= FAULT_STEP]
                if late and scenario != "healthy":
                    first_kinds[(arch, scenario)][late[0]["anomaly"]] += 1
                if scenario in AHEAD:
                    diverged = divergence_step(log.steps)
                    outside = [a["step"] for a in late if a["anomaly"] not in INSIDE]
                    ahead.append((arch, scenario, seed, late[0]["step"] if late else None,
                                  late[0]["anomaly"] if late else None, diverged,
                                  outside[0] if outside else None))
                for rule in rules:
                    latency, false = evaluate(alarms[rule], scenario)
                    cell = table[(arch, scenario)][rule]
                    cell["false"] += false
                    if scenario != "healthy":
                        if latency is None:
                            cell["missed"] += 1
                        else:
                            cell["latency"].append(latency)
                print(f"  {arch:8s} {scenario:16s} seed {seed}: mindwatch alarms "
                      f"{[(a['step'], a['anomaly']) for a in anomalies][:4]}", file=sys.stderr)
    print(f"{args.seeds} seeds x {args.steps} steps, fault at step {FAULT_STEP}, horizon "
          f"{HORIZON}; detected n/N, median latency in steps, false alarms")
    header = f"{'model':8s} {'scenario':16s}" + "".join(f"{r:>24s}" for r in rules)
    print(header + "   mindwatch's first rule")
    for (arch, scenario), cells in table.items():
        row = f"{arch:8s} {scenario:16s}"
        for rule in rules:
            cell = cells[rule]
            if scenario == "healthy":
                text = f"FA {cell['false']}"
            else:
                found = len(cell["latency"])
                latency = statistics.median(cell["latency"]) if found else "-"
                text = f"{found}/{found + cell['missed']} lat {latency} FA {cell['false']}"
            row += f"{text:>24s}"
        kinds = ", ".join(f"{k} x{n}" for k, n in first_kinds[(arch, scenario)].items())
        print(row + "   " + kinds)
    print("\nreplays of the withheld steps (the same batch and weights, once more): the "
          "verdicts per scenario, all seeds")
    for (arch, scenario), counts in verdicts.items():
        print(f"  {arch:8s} {scenario:16s} " + ", ".join(f"{v} x{n}" for v, n in counts.items()))
    print(f"\n{', '.join(AHEAD)} (state records every {STATE_INTERVAL} steps): the first "
          "alarm against the loss's divergence")
    for arch, scenario, seed, alarm, kind, diverged, outside in ahead:
        lead = ("-" if alarm is None or diverged is None
                else f"{diverged - alarm} steps ahead")
        print(f"  {arch:8s} {scenario:13s} seed {seed}: first alarm step {alarm} ({kind}), "
              f"loss diverges at step {diverged}: {lead}; first step-record rule's alarm: "
              f"step {outside}")
    if leaks:
        from leak_grid import main as leak_grid
        print("\nmemory_growth (leak_grid.py)")
        leak_grid([])
    if fleet:
        from slow_ranks import main as slow_ranks
        print("\nslow ranks in a fleet (slow_ranks.py)")
        slow_ranks([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
