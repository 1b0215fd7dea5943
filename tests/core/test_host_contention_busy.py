"""throughput_drop's cause on a host that other processes kept busy while its baseline was
learned, for real: a plain training loop whose steps are CPU work, the sampler reading the
host every half second, spinning processes started before the baseline. More of them later
is the cause "host"; more work per step beside the same ones is the run's own "compute",
though its threads wait for a CPU then as long, per second, as they did."""
import hashlib
import io
import itertools
import os
import statistics
import time

import psutil
import pytest

import spinners
from mindwatch import Monitor
from mindwatch.runlog import read_rank_log

# On make test's last worker (tests/waits_scheduling.py): beside the two workers that
# compute, a load that is there at the baseline and stays, never beside an msrun job's
# ranks starting at once
pytestmark = pytest.mark.waits

WINDOW, WARMUP = 10, 10
CHANGE = 61             # the first step after the first group of 5 baseline windows
# A step hashes CHUNKS of 4 MiB (~40 ms of a core here): hashlib lets go of the GIL, so the
# sampler's thread reads the host on time (a loop of Python would hold it for 5 ms a turn)
CHUNK = bytes(4 << 20)
CHUNKS = 16
INTERVAL_S = 0.5        # the sampler's
SETTLE_S = 1.0          # the spinners started before run that long before the first step
LIMIT_S = 100           # the most one try may take (its spinners stop by themselves then)
TRIES = 3
# s per s: this process's threads waited at least this for a CPU at the baseline (the
# premise: a busy host; 4 spinners on 2 cores leave a thread 0.4 of a core, 0.6 s/s waited)
WAITED = 0.4


def _work(chunks):
    for _ in range(chunks):
        hashlib.sha256(CHUNK).digest()


def _run(tmp_path, *, before, more, work_factor=1.0):
    """Steps beside ``before`` spinners; from step CHANGE, ``more()`` spinners more and
    ``work_factor`` times the work a step, until a throughput_drop found after CHANGE.
    A drop before CHANGE is the host's other load changing under the baseline (the other
    tests, on a 2-core host): the premise failed, and the run is tried again, up to TRIES.
    Returns the drops, the run log and when the change came (Unix s)."""
    for attempt in range(TRIES):
        drops, log, changed_at = _try(tmp_path / f"try{attempt}", before, more, work_factor)
        if not [d for d in drops if d.step < CHANGE]:
            break
    return drops, log, changed_at


def _try(run_dir, before, more, work_factor):
    busy, newcomers, drops, chunks, changed_at = [], [], [], CHUNKS, float("inf")
    monitor = None
    try:
        busy = spinners.start(before, seconds=LIMIT_S) if before else []
        time.sleep(SETTLE_S if before else 0.0)
        monitor = Monitor(str(run_dir), stream=io.StringIO(), hardware_interval_s=INTERVAL_S,
                          pace_window=WINDOW, trend_warmup=WARMUP)
        deadline, step = time.monotonic() + LIMIT_S - 10, 0
        while not drops and time.monotonic() < deadline:
            step += 1
            if step == CHANGE:
                changed_at = time.time()
                newcomers = spinners.start(more(), seconds=LIMIT_S) if more else []
                chunks = round(CHUNKS * work_factor)
            _work(chunks)
            drops += [a for a in monitor.observe(step=step, loss=1.0)
                      if a.kind == "throughput_drop"]
    finally:
        if monitor is not None:
            monitor.close()
        spinners.stop(busy + newcomers)
    return drops, read_rank_log(str(run_dir / "rank_0.jsonl")), changed_at


def _story(drops, log, changed_at) -> str:
    """Every drop, the hardware samples (s from the change: host busy %, this process %, its
    threads' wait for a CPU per s) and the steps' medians, for a failure's message."""
    lines = [f"step {d.step} ({d.fields['cause']}): {d.message}" for d in drops]
    lines += [f"  {h['time'] - changed_at:6.1f}: {h['cpu_percent']}, "
              f"{h.get('process_cpu_percent')}, {h.get('cpu_wait_s')}"
              for h in log.of_kind("hardware")]
    steps = log.steps
    lines += [f"  steps {steps[i]['step']}-: "
              f"{1000 * statistics.median(s['step_time_s'] for s in steps[i:i + 10]):.1f} ms"
              for i in range(0, len(steps), 10)]
    return "\n".join(lines)


def _baseline_waited(log, changed_at) -> float:
    """This process's threads' wait for a CPU, s per s, over the baseline's steps."""
    start = next(s["time"] for s in log.steps if s["step"] == WARMUP + 1)
    samples = log.of_kind("hardware")
    spans = [(h["cpu_wait_s"], h["time"] - previous["time"])
             for previous, h in itertools.pairwise(samples)
             if start <= previous["time"] and h["time"] <= changed_at
             and h.get("cpu_wait_s") is not None]
    return sum(wait for wait, _ in spans) / sum(span for _, span in spans)


def _more(before):
    """Twice as many spinners as compete at the baseline (these, the host's other load and
    the run), counted as the change comes: the run's share of the host falls to a third."""
    return lambda: min(2 * (before + round(os.getloadavg()[0]) + 1), 32)


@pytest.mark.parametrize("before", [0, 2])
def test_more_processes_beside_a_busy_or_quiet_baseline_are_the_host(tmp_path, before):
    """``before`` per core spin from the start (0: the host as the test finds it); as many
    again and more start after the baseline."""
    before *= psutil.cpu_count()
    drops, log, changed_at = _run(tmp_path, before=before, more=_more(before))
    story = _story(drops, log, changed_at)
    late = [d for d in drops if d.step >= CHANGE]
    assert late, story
    if before:                  # the premise: the run waited for a CPU at its baseline
        assert _baseline_waited(log, changed_at) >= WAITED, story
    assert late[0].fields["cause"] == "host", story
    assert "other processes took the host's CPU" in late[0].message, story


def test_more_work_a_step_beside_the_same_busy_host_is_compute(tmp_path):
    """The same spinners throughout; the steps do four times the work from CHANGE on. The
    run's threads wait for a CPU as long per second as before, so four times as long per
    step, while the others hold most of a saturated host (the rule before said "host"): its
    CPU per step grew with its step, which no contention does."""
    before = 2 * psutil.cpu_count()
    drops, log, changed_at = _run(tmp_path, before=before, more=None, work_factor=4.0)
    story = _story(drops, log, changed_at)
    late = [d for d in drops if d.step >= CHANGE]
    assert late, story
    assert _baseline_waited(log, changed_at) >= WAITED, story
    assert late[0].fields["cause"] == "compute", story
