"""throughput_drop's cause "host": other processes took the host's CPU and this process's
threads waited for one. Through the Monitor on a fake clock, hardware samples every 2 s; the
run's own slowdowns (a sleep, its own threads crowding) stay "compute"."""
import dataclasses
import io

import pytest

from mindwatch import Monitor
from mindwatch.detectors import host_load
from mindwatch.observation import DeviceSample, HardwareSample

WINDOW, WARMUP = 10, 5
HOG = [{"pid": 4242, "name": "stress-ng", "cpu_percent": 48.5}]


def _run(tmp_path, clock, *, slow_others, slow_wait, slow_step=0.3, top=HOG, npu=None,
         top_before=None, seeded=False, others_before=10.0):
    """100 steps of 0.1 s (the other processes at ``others_before`` % of the host, this
    process at 50% or what they leave of it, its threads waiting 5 ms a second), then 40
    steps of ``slow_step`` with the other processes at ``slow_others`` % of the host and this
    process's threads waiting ``slow_wait`` s a second; ``npu``: the other processes on this
    rank's NPU 0, ``(before, while slow)``; ``top_before``: the cpu_top of the samples
    before; ``seeded``: the first sample wholly within the slow steps seeds a scan (no
    cpu_top), the next names ``top``, as the sampler does (the one that straddles the
    slowdown's start saw too little of it)."""
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      pace_window=WINDOW, trend_warmup=WARMUP)
    found, last_sample, slow_samples = [], clock.time(), 0
    for step in range(1, 141):
        slow = step > 100
        clock.advance(slow_step if slow else 0.1)
        found += monitor.observe(step=step, loss=1.0, data_time_s=0.01)
        if clock.time() - last_sample >= 2.0:
            interval = clock.time() - last_sample
            others = slow_others if slow else others_before
            slow_samples += slow
            named = (top if not seeded or slow_samples >= 3 else None) if slow else top_before
            found += monitor.observe_hardware(HardwareSample(
                time=clock.time(), cpu_percent=min(others + 50.0, 100.0),
                process_cpu_percent=min(50.0, 100.0 - others) if not slow else 100.0 - others,
                cpu_wait_s=interval * (slow_wait if slow else 0.005),
                cpu_top=named, mem_used_gb=4.0, mem_available_gb=8.0,
                rss_gb=1.0, devices=[] if npu is None else [DeviceSample(
                    "npu", 0, mem_used_mb=30000.0, mem_total_mb=65536.0,
                    others=npu[slow])]))
            last_sample = clock.time()
    monitor.close()
    return [a for a in found if a.kind == "throughput_drop"]


def test_other_processes_that_take_the_cpu_are_the_cause(tmp_path, clock):
    [drop] = _run(tmp_path, clock, slow_others=60.0, slow_wait=1.5)
    assert drop.fields == {"cause": "host", "ranks": [0]}
    assert ("other processes took the host's CPU: their share rose from 10% to 60% of it (the "
            "host 100% busy; the most: pid 4242 stress-ng 48.5%), and this process's threads, "
            "between them, waited 450.0 ms per step for a CPU (0.5 ms before)") in drop.message
    assert drop.value == pytest.approx(0.2) and drop.threshold == pytest.approx(0.15)


def test_the_processes_named_are_those_that_took_the_cpu_since_the_slowdown(tmp_path, clock):
    """Another process was named before (a busy host's scan every 20 s); as the contention
    starts, the sampler seeds a scan and names the newcomers one sample later: the drop waits
    for that sample and names them, not the process named before."""
    [drop] = _run(tmp_path, clock, slow_others=60.0, slow_wait=1.5, seeded=True,
                  top_before=[{"pid": 7, "name": "python", "cpu_percent": 11.0}])
    assert drop.fields == {"cause": "host", "ranks": [0]}
    assert "the most: pid 4242 stress-ng 48.5%)" in drop.message and "pid 7 " not in drop.message


def test_others_that_had_filled_the_host_already_are_the_cause(tmp_path, clock):
    """A host the other processes had saturated before the baseline was learned: their share
    has nowhere to rise (here it wavers down by a point), but this process's threads now wait
    for a CPU."""
    [drop] = _run(tmp_path, clock, others_before=88.0, slow_others=87.0, slow_wait=1.5)
    assert drop.fields == {"cause": "host", "ranks": [0]}
    assert ("other processes took the host's CPU: they held 87% of it (88% before) (the host "
            "100% busy; the most: pid 4242 stress-ng 48.5%), and this process's threads, "
            "between them, waited 450.0 ms per step for a CPU") in drop.message


@pytest.mark.parametrize("busy, others", [(100.0, 45.0), (85.0, 60.0)])
def test_the_same_share_is_no_cause_unless_the_others_hold_most_of_a_full_host(busy, others):
    """The same share as at the baseline, and either the run holds most of the saturated host
    (its own threads crowding it) or the host has CPU to spare."""
    then = host_load.Load(others_percent=others, busy_percent=busy, waiting=0.005, top=())
    now = host_load.Load(others_percent=others, busy_percent=busy, waiting=1.5, top=())
    assert not host_load.explains(then, now, 0.1, 0.3)
    assert host_load.explains(then, dataclasses.replace(now, busy_percent=100.0,
                                                        others_percent=60.0), 0.1, 0.3)


def test_a_slowdown_of_the_runs_own_beside_a_busier_host_is_compute(tmp_path, clock):
    """The others took more of the host, but this process never waited for a CPU: its steps
    slowed on their own (a slower kernel, a sleep, a collective's wait)."""
    [drop] = _run(tmp_path, clock, slow_others=60.0, slow_wait=0.005)
    assert drop.fields == {"cause": "compute", "ranks": [0]}


def test_the_runs_own_threads_crowding_each_other_is_compute(tmp_path, clock):
    """This process's threads waited for a CPU, but no other process took more of the host:
    the run's own work crowds its cores (more input workers, a busier callback)."""
    [drop] = _run(tmp_path, clock, slow_others=10.0, slow_wait=1.5)
    assert drop.fields == {"cause": "compute", "ranks": [0]}


def test_without_the_samples_cpu_fields_it_is_compute(tmp_path, clock):
    """A sampler that cannot read them (another OS, no psutil): no guess."""
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      pace_window=WINDOW, trend_warmup=WARMUP)
    found = []
    for step in range(1, 61):
        clock.advance(0.3 if step > 40 else 0.1)
        found += monitor.observe(step=step, loss=1.0, data_time_s=0.01)
        if step % 10 == 0:
            monitor.observe_hardware(HardwareSample(time=clock.time(), cpu_percent=100.0,
                                                    mem_used_gb=4.0, rss_gb=1.0))
    monitor.close()
    [drop] = [a for a in found if a.kind == "throughput_drop"]
    assert drop.fields["cause"] == "compute"


def test_another_process_on_this_ranks_npu_is_the_cause(tmp_path, clock):
    """npu-smi lists a process that came onto this rank's chip as the steps slowed (its
    share of the chip unknown); the host's CPU is as it was."""
    intruder = {"pid": 777, "name": "infer", "mem_used_mb": 3000.0}
    [drop] = _run(tmp_path, clock, slow_others=10.0, slow_wait=0.005, npu=([], [intruder]))
    assert drop.fields == {"cause": "host", "ranks": [0]}
    assert "other processes came onto NPU 0: pid 777 infer (2.9 GB)" in drop.message
    assert "the host's CPU" not in drop.message


def test_a_process_that_was_on_the_npu_before_or_barely_computes_is_no_cause(tmp_path, clock):
    there = {"pid": 777, "name": "infer", "mem_used_mb": 3000.0}
    [drop] = _run(tmp_path, clock, slow_others=10.0, slow_wait=0.005, npu=([there], [there]))
    assert drop.fields["cause"] == "compute"
    idle = {"pid": 778, "name": "watcher", "mem_used_mb": 20.0, "util_percent": 2.0}
    [drop] = _run(tmp_path / "idle", clock, slow_others=10.0, slow_wait=0.005,
                  npu=([], [idle]))
    assert drop.fields["cause"] == "compute"


def _busy(busy, others, waiting):
    return host_load.Load(others_percent=others, busy_percent=busy, waiting=waiting, top=())


def test_a_busy_baseline_whose_share_the_others_took_is_the_host():
    """Others held 93% of the host at the baseline, this process 5%, its threads waiting a
    CPU most of each second. More others came: the step took 3.9x as long, this process's
    share fell as much (its work per step the same), and its threads waited 0.58 s a step
    more; the host read 88% busy (a sample's dip) and the others' share read no higher. The
    rule before asked for a rise or a saturated host: "compute"."""
    then, now = _busy(98.0, 93.0, 1.0), _busy(88.0, 86.7, 1.0)
    assert host_load.explains(then, now, 0.2, 0.78)
    message = host_load.describe(then, now, 0.2, 0.78)
    assert ("this process's share of it fell from 5.0% to 1.3% as its step grew 3.9x (theirs "
            "93% before, 87% now) (the host 88% busy)") in message
    # its share held as the step grew: its own work, however long its threads waited
    assert not host_load.explains(then, _busy(88.0, 83.0, 1.0), 0.2, 0.78)


def test_more_work_a_step_on_a_host_as_busy_as_at_the_baseline_is_compute():
    """Others held 80% of a saturated host throughout, this process 20%, its threads waiting
    0.6 s a second for a CPU: a step of 4x the work takes 4x as long and waits 4x as long.
    The rule before called it "host" (the others held most of a saturated host, and the wait
    grew by more than half the step's growth); the wait is what the baseline's contention
    gives the CPU it uses now."""
    then = now = _busy(100.0, 80.0, 0.6)
    assert not host_load.explains(then, now, 0.1, 0.4)
    # the same step with this process's share down to a quarter: others took its CPU
    assert host_load.explains(then, _busy(100.0, 95.0, 0.9), 0.1, 0.4)


def test_processes_that_came_onto_a_saturated_host_are_the_host():
    """The others held 92.6% of a saturated host at the baseline and 92.8% now, this run's
    share and wait alike (its threads crowded, it spins): only the processes that came since
    tell, in the sampler's ``cpu_top``."""
    spinner = {"pid": 10, "name": "spin", "cpu_percent": 30.0}
    newcomer = {"pid": 11, "name": "spin", "cpu_percent": 25.0}
    then = host_load.Load(others_percent=92.6, busy_percent=100.0, waiting=1.91,
                          top=(spinner,))
    now = host_load.Load(others_percent=92.8, busy_percent=100.0, waiting=1.92,
                         top=(spinner, newcomer))
    assert host_load.cpu_newcomers(then, now) == [newcomer]
    assert host_load.explains(then, now, 0.10, 0.23)
    assert host_load.describe(then, now, 0.10, 0.23).startswith(
        "other processes came onto the host's CPU since the baseline: pid 11 spin 25.0%")
    # the same lists: its own work (as far as the host can tell)
    same = dataclasses.replace(now, top=(spinner,))
    assert host_load.cpu_newcomers(then, same) == []
    assert not host_load.explains(then, same, 0.10, 0.23)
    # no list at the baseline (a quiet host): nothing to compare
    assert host_load.cpu_newcomers(dataclasses.replace(then, top=()), now) == []
