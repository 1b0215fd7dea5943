"""Every setting of a monitor, validated once, at construction.

``MonitorSettings`` is keyword-only so call sites read as documentation, and validates in
``__post_init__`` so a typo fails before training starts, naming the argument and what it
accepts. Detector-specific knobs live here too, flat, so one ``Monitor(**settings)`` call
configures everything and the ``run`` record can store the effective values.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The checks live in .checks; they are re-exported here, where other modules import them.
from .basics.checks import check_bool, check_choice, check_int, check_number, check_token
from .policy import did_you_mean, resolve_policies
from .sinks.alert_body import ALERT_FORMATS
from .sinks.report_to import parse_report_to, redacted_report_to
from .sinks.webhook import check_webhook, redacted_url

SIGNAL_POLICIES = ("checkpoint_and_stop", "stop", None)
SINK_ERROR_POLICIES = ("warn", "raise")
# Ceilings far beyond any real use: a bigger count overflows the rules' windows (C-sized
# deques) and a longer interval the sampler thread's timed wait.
MAX_COUNT = 10**9
MAX_INTERVAL_S = 86400.0

__all__ = [
    "MonitorSettings",
    "check_bool",
    "check_choice",
    "check_int",
    "check_number",
    "check_token",
    "setting",
]


def setting(default: Any, doc: str, unit: str | None = None) -> Any:
    """A ``MonitorSettings`` field with its documentation: ``doc`` says what it does and what
    its default does, ``unit`` the unit of its value (None: none applies). The settings table
    of docs/api.md is generated from these (``make docs``)."""
    return field(default=default, metadata={"doc": doc, "unit": unit})


@dataclass(kw_only=True)
class MonitorSettings:
    # console
    print_interval: int = setting(
        10, "One console line (step, loss, smoothed loss, LR, grad norm, step time, throughput) "
        "every N steps. Anomalies and epoch lines are printed as they happen.", "steps")
    print_all_ranks: bool = setting(
        False, "Every rank prints its step lines. Off: ranks other than 0 print only anomalies, "
        "notices and errors.")
    # step metrics
    loss_smoothing: float = setting(
        0.9, "Weight of the history in the exponential moving average `loss_smooth`, in "
        "[0, 1): 0 is no smoothing. Non-finite losses are left out of the average.", "fraction")
    batch_size: int | None = setting(
        None, "Samples per step on this rank, for `samples_per_s`. None: `TrainMonitor` takes "
        "the leading dimension of the step's first input, else the dataset's batch size; "
        "`observe(batch_size=...)` may give it; unknown leaves `samples_per_s` null.",
        "samples")
    tokens_per_sample: int | None = setting(
        None, "Tokens in one sample (the sequence length, for a language model): step records "
        "then carry `tokens_per_s` = `samples_per_s` x this, per device. None: no "
        "`tokens_per_s`, no `mfu`.", "tokens")
    flops_per_token: float | None = setting(
        None, "Training FLOPs per token, forward and backward (a Transformer: 6 N + 12 L H Q T; "
        "see Tokens per second and MFU). With `peak_tflops`, step records carry `mfu`. Needs "
        "`tokens_per_sample`.", "FLOP")
    peak_tflops: float | None = setting(
        None, "The peak dense throughput of one device in the dtype trained in (the vendor's "
        "datasheet, e.g. BF16). `mfu` = `tokens_per_s` x `flops_per_token` / (this x 1e12). "
        "Needs `tokens_per_sample`.", "TFLOP/s")
    # absolute gradient bounds (global L2 norm, pre-clip)
    grad_explode: float = setting(
        100.0, "`gradient_explode` when the pre-clip global gradient norm is above this, on "
        "that step. With `wrap(skip_anomalous_updates=True)` the update of that step is "
        "withheld. Must be above `grad_vanish`.", "L2 norm")
    grad_vanish: float = setting(
        1e-6, "`gradient_vanish` when the pre-clip global gradient norm stays below this for "
        "`grad_vanish_steps` steps in a row.", "L2 norm")
    grad_vanish_steps: int = setting(
        3, "Consecutive steps below `grad_vanish` before `gradient_vanish` fires (once per "
        "streak).", "steps")
    # adaptive spike rules
    spike_window: int = setting(
        64, "History of the spike rules: the robust z-score of log(value) is taken against "
        "the median and MAD of the last N steps (withheld steps left out). At least 4.",
        "steps")
    spike_warmup: int = setting(
        32, "Steps of history before a spike rule may fire; at least 2, at most "
        "`spike_window`.", "steps")
    loss_spike_z: float = setting(
        6.0, "`loss_spike` when the robust z-score of log(loss) is at least this (and the "
        "ratio below holds).", "robust z")
    loss_spike_ratio: float = setting(
        1.5, "`loss_spike` also needs the loss to be at least this multiple of the window "
        "median; on a flat window (MAD 0) the ratio alone decides. Above 1.", "x median")
    grad_spike_z: float = setting(
        6.0, "`grad_spike` when the robust z-score of log(grad norm) is at least this (and "
        "the ratio below holds).", "robust z")
    grad_spike_ratio: float = setting(
        5.0, "`grad_spike` also needs the norm to be at least this multiple of the window "
        "median (benign transformer grad-norm jumps reach 3-4x). Above 1.", "x median")
    # divergence
    loss_rising_window: int = setting(
        40, "`loss_rising` compares the median loss of the recent half of the last N steps "
        "with that of the older half. At least 4.", "steps")
    loss_rising_min: float = setting(
        0.1, "`loss_rising` when the recent median is at least this fraction above the older "
        "one (0.1 = 10%) and the rise stands out of the run's own step-to-step noise. Fires "
        "once per episode.", "fraction")
    # learning rate
    lr_jump_factor: float = setting(
        10.0, "`lr_anomaly` when the LR is more than this factor above the highest LR the run "
        "has applied (rounded up to 5%); warm-ups and warm restarts never are. With `wrap` that "
        "step's update is withheld unless `lr_anomaly` is on \"warn\". A non-finite or negative "
        "LR is an `lr_anomaly` whatever this is. Above 1.", "x")
    max_lr: float | None = setting(
        None, "`lr_anomaly` when any parameter group's LR is above this, from the first step "
        "on; the update is withheld on the step, as for the rules above. None: no ceiling.",
        "LR")
    max_update_ratio: float | None = setting(
        1.0, "`lr_anomaly` when a step's update, estimated before it is applied, would be more "
        "than this many times the RMS of the weights it changes (Adam and its kin move each "
        "weight by about the LR: LR / RMS of the weights; SGD: LR x gradient norm / weight "
        "norm; LAMB/LARS: the LR; other optimizers: not judged). It needs no history, so the "
        "first step that would wreck the weights is withheld on the step, as for the rules "
        "above. Healthy updates are ~1e-3 of the weights. None: off.", "ratio")
    # several ranks
    straggler_window: int = setting(
        20, "Several ranks: the straggler rule compares medians of each rank's "
        "`data_time_s` over the last N steps. At least 2.", "steps")
    straggler_factor: float = setting(
        2.0, "`straggler` (in the slow rank's own log) when a rank's median `data_time_s` is "
        "above this multiple of the other ranks' median, and by at least 10% of a step and "
        "5 ms. Above 1.", "x")
    straggler_work_factor: float = setting(
        1.15, "`straggler` with cause `compute` when a rank's median own work before the "
        "step's collective (PyTorch DDP: to its last gradient bucket; MindSpore on the CPU: "
        "its CPU time in the step) is above this multiple of the other ranks' median, and "
        "by 1 ms, for a quarter of `straggler_window` steps in a row, after `trend_warmup` "
        "steps; cause `host` when its threads' wait for a CPU is `straggler_factor` times "
        "the others' and this minus one seconds per second more. Above 1.", "x")
    # a run that slowly gets worse
    trend_warmup: int = setting(
        50, "Steps at the start of each run segment (each `model.train`, a resumed run) that "
        "`throughput_drop`, `data_bound` and `memory_growth` leave out: compilation, memory "
        "pools and a cold input pipeline. Each segment learns its own pace after it. The "
        "straggler rule's compute and host causes leave out the run's first N steps.", "steps")
    pace_window: int = setting(
        20, "`throughput_drop` and `data_bound` read medians of step time, data time and "
        "samples/s over the last N steps (withheld updates and the step after each left out), "
        "so one slow step (a checkpoint, an epoch's first batch) moves nothing. At least 2.",
        "steps")
    throughput_drop_factor: float = setting(
        1.5, "`throughput_drop` when the median step time is above this multiple of the run's "
        "steady pace (and at least 5 ms slower): the median of five disjoint windows after "
        "`trend_warmup`, replaced only by a later five's that is faster. The message says "
        "whether data or compute time grew, and on which ranks. Above 1.", "x")
    throughput_baseline: float | None = setting(
        None, "`throughput_drop` also when the median samples/s of this rank falls below this "
        "(per device, as MindSpore Transformers' `throughput_baseline`). Needs `samples_per_s` "
        "(a known batch size). None: only the run's own pace is the baseline.", "samples/s")
    data_bound_share: float | None = setting(
        0.5, "`data_bound` when the median time outside the train step (`data_time_s`: the "
        "input pipeline, other callbacks) is above this share of the median step time. In "
        "(0, 1]. None: off.", "fraction")
    memory_growth_window_s: float | None = setting(
        30.0, "`memory_growth` judges each memory (this process's host RSS, each device's used "
        "memory) over windows of the hardware samples from this long, doubling up to 128 "
        "days: a robust slope, and a rise quarter after quarter (one jump is no trend). A "
        "steady rise over a window is flagged when at its rate the memory runs out within 4x "
        "that window, so a leak is found while more than half of its time remains, at any "
        "rate. None: off.", "s")
    memory_growth_horizon_s: float | None = setting(
        None, "`memory_growth` leaves out a rise that would take longer than this to run out "
        "(`projected_exhaustion_s` in the record). None: none is left out.", "s")
    total_steps: int | None = setting(
        None, "The run's last step, for `eta_s` in step records (and the console, `watch` and "
        "`summary`). None: `Model.train`'s epochs x dataset size; a custom loop's "
        "`Monitor.start(total_steps=...)`; else no `eta_s`.", "steps")
    # per-layer gradient norms
    layer_norms_interval: int = setting(
        50, "With `wrap(per_layer_norms=True)`: `layer_grad_norms` goes into the step record "
        "every N steps; gradient anomaly reports always name the largest layers of their "
        "step.", "steps")
    replay: bool = setting(
        True, "With `wrap` (MindSpore) or closures given to `monitor.backward` (PyTorch): a "
        "step whose update was withheld is computed once more on the same "
        "batch and weights before the next step (a `replay` record); healthy the second time, "
        "it is a `transient_fault` of this device. Costs nothing on other steps.")
    consistency_interval: int | None = setting(
        1000, "Under data parallelism: every N steps the ranks compare fingerprints of their "
        "weights and optimizer state (two float32 sums per tensor, in a graph); a rank that "
        "differs is `replica_mismatch`. `None` turns it off.", "steps")
    state_interval: int | None = setting(
        100, "With `wrap`: a `state` record every N steps (per-layer weight, update and "
        "gradient norms, the update/weight ratio, the optimizer's moment norms), measured by "
        "a second graph of the train step that only those steps run. `None` turns it off.",
        "steps")
    update_ratio_factor: float = setting(
        10.0, "`update_ratio` when a layer's update/weight ratio at a state step is more than "
        "this many times the median of its last 20 state records. Above 1.", "x")
    update_ratio_ceiling: float = setting(
        0.3, "`update_ratio` when a layer's update/weight ratio is above this, whatever its "
        "history.", "ratio")
    max_attention_logit: float = setting(
        100.0, "`attention_logit` when an attention cell named in `wrap(attention_logits=...)` "
        "has a logit (before the softmax) above this at a state step.", "logit")
    # what to do
    on_anomaly: str | Mapping[str, str] | None = setting(
        None, "What to do about an anomaly: one policy for every kind, or a dict kind -> "
        "policy over the defaults. Policies: `'warn'`, `'stop'`, `'checkpoint_and_stop'`, "
        "`'skip'` (withhold the step's update in `wrap`'s graph and go on), `'rewind'` (restore "
        "the last healthy snapshot and go on; for the kinds of the training state only); see "
        "What happens on an anomaly. `hang` takes `'warn'` or `'abort'` only (`{'hang': "
        "'abort'}`: exit with status 75; see Hang watchdog), and keeps `'warn'` when one other "
        "policy is given for every kind. None: `checkpoint_and_stop` for `loss_nonfinite`, "
        "`gradient_nonfinite`, `gradient_explode` and `overheat`, `warn` for the rest.")
    max_skips: int = setting(
        5, "With `on_anomaly` `'skip'`: after this many withheld updates within the last 100 "
        "steps, the next `'skip'` anomaly escalates to `checkpoint_and_stop` (its message "
        "says why). 0: the first one does.", "updates")
    snapshot_every: int = setting(
        100, "With `on_anomaly` `'rewind'`: a snapshot of the training state (weights, "
        "optimizer state and step, loss scale) is copied to host memory every N steps, of a "
        "step no anomaly touched (a touched step defers it to the next healthy one). A "
        "snapshot is also taken when training begins. Each costs one device-to-host copy of "
        "the whole state; see What happens on an anomaly for the figures.", "steps")
    snapshots_kept: int = setting(
        2, "With `'rewind'`: how many snapshots stay in host memory (the oldest is dropped). "
        "Each holds the whole training state: with Adam about 3x the weights' size.",
        "snapshots")
    max_rewinds: int = setting(
        3, "With `'rewind'`: after this many rewinds in a run, the next `'rewind'` anomaly "
        "escalates to `checkpoint_and_stop` (its message says why). 0: the first one does.",
        "rewinds")
    on_signal: str | None = setting(
        "checkpoint_and_stop", "SIGTERM or SIGINT during training: `'checkpoint_and_stop'` "
        "or `'stop'` finish the current step (writing a checkpoint for the first), stop every "
        "rank after the same step, end the log with reason `signal`, then let the signal take "
        "its usual course (exit status 143 for SIGTERM); a second signal exits at once. None: "
        "signals are left alone. Handlers are installed on the main thread only, previous "
        "handlers are chained.")
    on_sink_error: str = setting(
        "warn", "A sink that cannot write (full disk, vanished directory, lost permission): "
        "`'warn'` says so once, keeps trying and resumes when it can, while training and the "
        "other sinks go on; `'raise'` stops training cleanly after the step (end reason "
        "`error`) and `model.train` raises `SinkError`.")
    stop_exit_code: int | None = setting(
        None, "The exit status of a process whose training mindwatch stopped (an anomaly under "
        "`'stop'` or `'checkpoint_and_stop'`, on this rank or another): after the `end` record, "
        "the sinks and reports are written and every callback's `on_train_end` has run, "
        "`TrainMonitor` raises `SystemExit` with it, on every rank, so the job fails instead "
        "of looking successful and a scheduler rule can keep it from being restarted into the "
        "same fault (e.g. 42; docs/mindformers.md#making-the-job-fail-when-mindwatch-stops-it). "
        "A stop by a signal then exits 128 + its number (143 for SIGTERM) on every rank; a "
        "`request_stop()` (EarlyStopping) and a completed run exit as the script does. 1 to "
        "255; msrun itself exits 1 when a worker fails. None: the process exits as the "
        "training script does (0). Every adapter: `Model.train`, MindFormers' Trainer, Hugging "
        "Face's Trainer and Lightning once their own ending has run, a custom or plain loop "
        "at `monitor.close()`.",
        "exit status")
    hang_timeout_s: float | None = setting(
        None, "`hang` when no step has ended for this long (a watchdog thread watches, so it "
        "is reported while the step is still stuck); the first step of each `model.train` "
        "(graph compilation) is allowed 6 times as long. None: automatic, max(600 s, 20 x "
        "the median time between step ends), so 3600 s for the first step. At most 86400.",
        "s")
    # hardware
    max_temperature_c: float = setting(
        85.0, "`overheat` when a device's temperature is at or above this for "
        "`overheat_samples` hardware samples in a row.", "°C")
    overheat_samples: int = setting(
        3, "Consecutive hardware samples at or above `max_temperature_c` before `overheat` "
        "fires (once per episode).", "samples")
    memory_pressure_device: float = setting(
        0.95, "`memory_pressure` when a device's used / total memory is at or above this for "
        "2 hardware samples in a row. In (0, 1].", "fraction")
    memory_pressure_host: float = setting(
        0.05, "`memory_pressure` when the host's available / total memory is below this for "
        "2 hardware samples in a row. In (0, 1).", "fraction")
    hardware_interval_s: float | None = setting(
        2.0, "Seconds between hardware samples, taken on a background thread; at most 86400. "
        "None: no sampling, no `hardware` records, no `overheat` or `memory_pressure`.", "s")
    all_devices: bool = setting(
        False, "Sample every accelerator of the machine. Off: only this rank's devices (from "
        "the launcher's visible-devices variables).")
    # optional sinks
    tensorboard: bool = setting(
        False, "Also write TensorBoard event files to `tensorboard/rank_<R>/` (needs "
        "tensorboardX).")
    mindinsight: bool = setting(
        False, "Also write MindInsight summary files to `summary/mindwatch_rank<R>/` (needs "
        "MindSpore: `TrainMonitor` only).")
    prometheus_port: int | None = setting(
        None, "Serve Prometheus gauges at `http://<prometheus_host>:<port + local "
        "rank>/metrics` (needs prometheus-client); 0 takes a free port. None: off.",
        "TCP port")
    prometheus_host: str = setting(
        "127.0.0.1", "The address the Prometheus server binds (a host name or IP address). "
        "The default serves this machine only; the metrics have no authentication, so bind "
        "a wider one (`'0.0.0.0'`: every interface) only on purpose.")
    # alerts
    alert_webhook: str | None = setting(
        None, "POST an alert (JSON, from a background thread, timeout 5 s) to this `http(s)://` "
        "URL for every anomaly whose actions go beyond `'warn'`, every `hang` and every end "
        "other than `completed`. A failing webhook is said once and never slows training. "
        "The `run` record keeps only its scheme and host (the path often holds a token).")
    alert_format: str = setting(
        "json", "The body of an alert: `'json'` (the plain object), `'slack'`, `'feishu'` or "
        "`'dingtalk'` (those services' text messages).")
    # experiment trackers
    report_to: str | Sequence[str] | Mapping[str, Any] | None = setting(
        None, "Experiment trackers fed from a thread of their own: `'mlflow'`, `'swanlab'`, "
        "`'wandb'`, a list of names, or a mapping name -> options (`{'mlflow': {'experiment': "
        "'sft', 'tracking_uri': 'http://...'}}`); each also reads its library's environment "
        "variables (`MLFLOW_TRACKING_URI`, `SWANLAB_PROJECT`, `WANDB_MODE`, ...). Rank 0's, "
        "unless a tracker's options say `'all_ranks': True`. A tracker that fails is said once "
        "and never slows training; its package missing is refused at construction, naming "
        "the extra to install. None: none.")
    # the run log
    resume: bool = setting(
        False, "Append a new run segment to an existing `rank_<R>.jsonl`. Off: an existing, "
        "non-empty run log is refused at construction (never overwritten). On: the run "
        "directory's `bad_batches.jsonl` is read too, and a step whose batch it lists is "
        "withheld by itself.")
    skip_batches: str | Sequence[str] | None = setting(
        None, "Bad-batch ledgers (`bad_batches.jsonl` of earlier runs, a path or a list): a "
        "step whose batch one lists (by content, not by step) has its update withheld "
        "before it is applied (`skip_reason: \"known_bad_batch\"`), and training goes on "
        "with one notice. Needs a protected step that identifies its batches. None: the "
        "run directory's own ledger only, under `resume`.")
    policies: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("print_interval", self.print_interval, minimum=1, maximum=MAX_COUNT)
        check_bool("print_all_ranks", self.print_all_ranks)
        check_number("loss_smoothing", self.loss_smoothing, low=0.0, high=1.0, high_open=True)
        check_int("batch_size", self.batch_size, minimum=1, optional=True, maximum=MAX_COUNT)
        _check_throughput(self)
        check_number("grad_explode", self.grad_explode, low=0.0, low_open=True)
        check_number("grad_vanish", self.grad_vanish, low=0.0)
        if self.grad_vanish >= self.grad_explode:
            raise ValueError(f"grad_vanish ({self.grad_vanish}) must be below grad_explode "
                             f"({self.grad_explode})")
        check_int("grad_vanish_steps", self.grad_vanish_steps, minimum=1, maximum=MAX_COUNT)
        check_int("spike_window", self.spike_window, minimum=4, maximum=MAX_COUNT)
        check_int("spike_warmup", self.spike_warmup, minimum=2, maximum=MAX_COUNT)
        if self.spike_warmup > self.spike_window:
            raise ValueError(f"spike_warmup ({self.spike_warmup}) must not exceed spike_window "
                             f"({self.spike_window})")
        for name in ("loss_spike_z", "grad_spike_z"):
            check_number(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("loss_spike_ratio", "grad_spike_ratio", "lr_jump_factor"):
            check_number(name, getattr(self, name), low=1.0, low_open=True)
        check_int("loss_rising_window", self.loss_rising_window, minimum=4, maximum=MAX_COUNT)
        check_number("loss_rising_min", self.loss_rising_min, low=0.0, low_open=True)
        check_int("layer_norms_interval", self.layer_norms_interval, minimum=1, maximum=MAX_COUNT)
        check_bool("replay", self.replay)
        check_int("consistency_interval", self.consistency_interval, minimum=1,
                  maximum=MAX_COUNT, optional=True)
        check_int("state_interval", self.state_interval, minimum=1, maximum=MAX_COUNT,
                  optional=True)
        check_number("max_lr", self.max_lr, low=0.0, low_open=True, optional=True)
        check_number("max_update_ratio", self.max_update_ratio, low=0.0, low_open=True,
                     optional=True)
        check_number("update_ratio_factor", self.update_ratio_factor, low=1.0, low_open=True)
        check_number("update_ratio_ceiling", self.update_ratio_ceiling, low=0.0, low_open=True)
        check_number("max_attention_logit", self.max_attention_logit, low=0.0, low_open=True)
        _check_trends(self)
        check_int("straggler_window", self.straggler_window, minimum=2, maximum=MAX_COUNT)
        check_number("straggler_factor", self.straggler_factor, low=1.0, low_open=True)
        check_number("straggler_work_factor", self.straggler_work_factor, low=1.0,
                     low_open=True)
        self.policies = resolve_policies(self.on_anomaly)
        check_number("hang_timeout_s", self.hang_timeout_s, low=0.0, low_open=True,
                     high=MAX_INTERVAL_S, optional=True)
        check_int("max_skips", self.max_skips, minimum=0, maximum=MAX_COUNT)
        check_int("snapshot_every", self.snapshot_every, minimum=1, maximum=MAX_COUNT)
        check_int("snapshots_kept", self.snapshots_kept, minimum=1, maximum=1000)
        check_int("max_rewinds", self.max_rewinds, minimum=0, maximum=MAX_COUNT)
        check_choice("on_signal", self.on_signal, SIGNAL_POLICIES)
        check_choice("on_sink_error", self.on_sink_error, SINK_ERROR_POLICIES)
        check_int("stop_exit_code", self.stop_exit_code, minimum=1, maximum=255, optional=True)
        check_number("max_temperature_c", self.max_temperature_c, low=0.0, low_open=True)
        check_int("overheat_samples", self.overheat_samples, minimum=1, maximum=MAX_COUNT)
        check_number("memory_pressure_device", self.memory_pressure_device, low=0.0,
                     low_open=True, high=1.0)
        check_number("memory_pressure_host", self.memory_pressure_host, low=0.0, low_open=True,
                     high=1.0, high_open=True)
        check_bool("all_devices", self.all_devices)
        check_number("hardware_interval_s", self.hardware_interval_s, low=0.0, low_open=True,
                     high=MAX_INTERVAL_S, optional=True)
        check_bool("tensorboard", self.tensorboard)
        check_bool("mindinsight", self.mindinsight)
        check_int("prometheus_port", self.prometheus_port, minimum=0, optional=True)
        if self.prometheus_port is not None and self.prometheus_port > 65535:
            raise ValueError(f"prometheus_port must be <= 65535; got {self.prometheus_port}")
        check_token("prometheus_host", self.prometheus_host)
        check_webhook("alert_webhook", self.alert_webhook)
        check_choice("alert_format", self.alert_format, ALERT_FORMATS)
        parse_report_to(self.report_to)
        check_bool("resume", self.resume)
        _check_ledgers(self.skip_batches)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> MonitorSettings:
        """Like the constructor, with an error for unknown names that suggests the closest
        known name of each typo and lists all the known ones."""
        known = sorted(f.name for f in dataclasses.fields(cls) if f.init)
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            # Each guess follows the name it corrects: with several typos, each has its own.
            named = ", ".join(name + did_you_mean(name, known) for name in unknown)
            raise TypeError(f"unknown setting{'s' if len(unknown) > 1 else ''} {named}; "
                            f"known settings: {', '.join(known)}")
        return cls(**kwargs)

    def as_record(self) -> dict[str, Any]:
        """The effective settings, for the ``run`` record (policies fully expanded)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.pop("on_anomaly")
        values["alert_webhook"] = redacted_url(self.alert_webhook)
        values["report_to"] = redacted_report_to(self.report_to)
        return values


def ledger_list(value: Any) -> list[str]:
    """``skip_batches`` as a list of paths (None: none)."""
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _check_ledgers(value: Any) -> None:
    """``skip_batches``: paths of files that exist (a typo would otherwise skip nothing)."""
    listed = value is None or isinstance(value, (str, list, tuple))
    paths = ledger_list(value) if listed else []
    if not listed or not all(isinstance(p, str) for p in paths):
        raise TypeError(f"skip_batches must be a path or a list of paths to bad_batches.jsonl "
                        f"files; got {value!r}")
    for path in paths:
        if not os.path.isfile(path):
            raise ValueError(f"skip_batches: no file {path!r}; name an earlier "
                             "run's bad_batches.jsonl, or leave skip_batches unset")


def _check_throughput(settings: MonitorSettings) -> None:
    check_int("tokens_per_sample", settings.tokens_per_sample, minimum=1, optional=True,
              maximum=MAX_COUNT)
    for name in ("flops_per_token", "peak_tflops"):
        check_number(name, getattr(settings, name), low=0.0, low_open=True, optional=True)
        if getattr(settings, name) is not None and settings.tokens_per_sample is None:
            raise ValueError(f"{name} needs tokens_per_sample (tokens in one sample, e.g. the "
                             "sequence length): MFU is computed from tokens per second")


def _check_trends(settings: MonitorSettings) -> None:
    check_int("trend_warmup", settings.trend_warmup, minimum=0, maximum=MAX_COUNT)
    check_int("pace_window", settings.pace_window, minimum=2, maximum=MAX_COUNT)
    check_number("throughput_drop_factor", settings.throughput_drop_factor, low=1.0,
                 low_open=True)
    check_number("throughput_baseline", settings.throughput_baseline, low=0.0, low_open=True,
                 optional=True)
    check_number("data_bound_share", settings.data_bound_share, low=0.0, low_open=True,
                 high=1.0, optional=True)
    check_number("memory_growth_window_s", settings.memory_growth_window_s, low=0.0,
                 low_open=True, high=MAX_INTERVAL_S, optional=True)
    check_number("memory_growth_horizon_s", settings.memory_growth_horizon_s, low=0.0,
                 low_open=True, optional=True)
    check_int("total_steps", settings.total_steps, minimum=1, maximum=MAX_COUNT, optional=True)
