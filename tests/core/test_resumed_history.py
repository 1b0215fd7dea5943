"""``resume=True`` in a new process: the monitor reads its rules' history back from the run
log, so the first step of the resumed segment is judged as the run's next step. Each run is
a real process (``RUN``: a framework-free loop of ``mindwatch.Monitor``) on a real log."""
import io
import json
import math
import subprocess
import sys
import textwrap
import time

from mindwatch import Monitor, records
from mindwatch.detectors.lr_anomaly import PEAK_GRID
from mindwatch.runlog import read_rank_log

# argv: log_dir, the run's JSON: {"settings": {...}, "steps": [[step, loss, lr, skipped], ...],
# "states": {step: ratio}, "after_step": N or null, "load_state": {...} or null}; prints the
# anomalies found as JSON lines, and the monitor's state_dict last.
RUN = textwrap.dedent("""
    import io, json, sys
    from mindwatch import Monitor
    run = json.loads(sys.argv[2])
    monitor = Monitor(sys.argv[1], stream=io.StringIO(), hardware_interval_s=None,
                      **run["settings"])
    if run.get("load_state") is not None:
        monitor.load_state_dict(run["load_state"])
    if run.get("after_step") is not None:
        monitor.start(after_step=run["after_step"])
    for step, loss, lr, skipped in run["steps"]:
        found = monitor.observe(step=step, loss=loss, lr=lr, grad_norm=1.0, skipped=skipped)
        ratio = run.get("states", {}).get(str(step))
        if ratio is not None:
            found += monitor.observe_state(step=step, weight_norm=1.0, update_norm=ratio,
                layers={"fc": {"weight_norm": 1.0, "update_norm": ratio,
                               "update_ratio": ratio}})
        for anomaly in found:
            print(json.dumps({"step": step, "kind": anomaly.kind, "actions": anomaly.actions}))
    print(json.dumps(monitor.state_dict()))
    monitor.close()
""")


def run(log_dir, steps, **options):
    """One process of the loop; returns (anomalies found, state_dict at its end)."""
    result = subprocess.run([sys.executable, "-c", RUN, str(log_dir), json.dumps(
        {"steps": steps, "settings": options.pop("settings", {}), **options})],
        capture_output=True, text=True, timeout=120, check=True)
    *found, state = result.stdout.splitlines()
    return [json.loads(line) for line in found], json.loads(state)


def healthy(first, last, lr=1e-3):
    """Steps of a healthy run: a loss near 2 with noise, at ``lr``."""
    return [[step, 2.0 + 0.02 * ((step * 7919) % 13) / 13, lr, False]
            for step in range(first, last + 1)]


def notices(log_dir):
    return [n["message"] for n in read_rank_log(str(log_dir / "rank_0.jsonl")).of_kind("notice")]


def loss_window(state):
    """The loss spike rule's window (log losses): the first detector state with one."""
    return next(detector["logs"] for detector in state["detectors"] if "logs" in detector)


def lr_peak(state):
    return next(detector["peak"] for detector in state["detectors"] if "peak" in detector)


def test_a_resumed_process_judges_its_first_step_as_the_runs_next(tmp_path):
    found, before = run(tmp_path, healthy(1, 40))
    assert found == []
    # the restart: a mistyped LR (5e5 x the run's) and a loss spike at its first step
    found, after = run(tmp_path, [[41, 20.0, 500.0, False]], settings={"resume": True})
    assert {(f["step"], f["kind"]) for f in found} == {(41, "lr_anomaly"), (41, "loss_spike")}
    [said] = [n for n in notices(tmp_path) if n.startswith("resumed")]
    assert said.startswith("resumed after step 40: the history of the last 40 steps restored "
                           "from rank_0.jsonl (the rules' windows, the LR peak 0.001, the "
                           "smoothed loss 2.0")
    # the restored window is the first process's own, to the value, then step 41's loss
    assert loss_window(after)[:-1] == loss_window(before) and len(loss_window(after)) == 41


def test_without_resume_a_trainers_resume_says_the_history_is_missing(tmp_path):
    found, _ = run(tmp_path / "new", [[41, 20.0, 500.0, False]], after_step=40)
    assert [f["kind"] for f in found] == []        # nothing to judge step 41 against
    [said] = notices(tmp_path / "new")
    assert said.startswith("training resumes after step 40, but this monitor has no history "
                           "of the run") and "with resume=True" in said


def test_withheld_updates_count_towards_max_skips_across_the_restart(tmp_path):
    settings = {"on_anomaly": "skip", "max_skips": 2}
    steps = [*healthy(1, 40), [41, 100.0, 1e-3, True], [42, 100.0, 1e-3, True]]
    found, _ = run(tmp_path, steps, settings=settings)
    assert [(f["step"], f["actions"]) for f in found] == [(41, ["skip"]), (42, ["skip"])]
    found, _ = run(tmp_path, [[43, 100.0, 1e-3, True]], settings={**settings, "resume": True})
    assert [(f["step"], f["actions"]) for f in found] == [(43, ["skip", "checkpoint", "stop"])]
    assert "2 updates withheld in the last 100 steps" in notices(tmp_path)[-1]


def test_a_trainer_resuming_from_an_earlier_checkpoint_leaves_the_later_steps_out(tmp_path):
    # steps 41-50 went wrong (a 10x LR, a loss ten times higher), then the process died;
    # the trainer resumes from its checkpoint of step 40
    gone_wrong = [[step, 20.0 + step % 3, 1e-2, False] for step in range(41, 51)]
    run(tmp_path, healthy(1, 40) + gone_wrong, settings={"on_anomaly": "warn"})
    found, state = run(tmp_path, [[41, 20.0, 2e-2, False]], after_step=40,
                       settings={"resume": True, "on_anomaly": "warn"})
    # judged against steps 1-40 only: their LR peak and their losses
    assert {f["kind"] for f in found} == {"lr_anomaly", "loss_spike"}
    window = loss_window(state)           # log losses: steps 1-40's, then step 41's
    assert state["last_step"] == 41 and len(window) == 41 and max(window[:-1]) < 1.0
    said = notices(tmp_path)[-1]
    assert said.startswith("resumed after step 40: the history of the last 40 steps")
    assert said.endswith("; the log's 10 step records after step 40, where training resumes, "
                         "left out")


def test_a_state_dict_loaded_explicitly_replaces_the_logs_history(tmp_path):
    run(tmp_path / "other", healthy(1, 20, lr=1.0))
    _, saved = run(tmp_path / "other", [], settings={"resume": True})
    run(tmp_path / "run", healthy(1, 40))
    found, state = run(tmp_path / "run", [[41, 2.0, 5.0, False]], load_state=saved,
                       settings={"resume": True})
    assert found == []                # the loaded state's peak is 1.0: 5.0 is no jump from it
    assert lr_peak(state) == 5.0 and len(loss_window(state)) == 21
    assert not any(n.startswith("resumed") for n in notices(tmp_path / "run"))


def test_the_update_ratio_bands_come_back_from_the_state_records(tmp_path):
    states = {str(step): 1e-3 * (1 + 0.1 * (step % 3)) for step in range(10, 41, 10)}
    found, _ = run(tmp_path, healthy(1, 40), states=states)
    assert found == []
    # 20x the layer's band, under the ceiling of 0.3: only its history can tell
    found, _ = run(tmp_path, healthy(41, 50), states={"50": 0.02}, settings={"resume": True})
    assert [(f["step"], f["kind"]) for f in found] == [(50, "update_ratio")]


def test_a_log_that_cannot_be_read_is_said_and_the_run_goes_on(tmp_path):
    log = tmp_path / "rank_0.jsonl"
    log.write_text("not a run log\n")
    found, _ = run(tmp_path, healthy(1, 3), settings={"resume": True})
    assert found == []
    appended = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    [said] = [r["message"] for r in appended if r["kind"] == "notice"]
    assert said.startswith("resume=True: the run log's history could not be read (")
    assert said.endswith("); the rules start without it")


def test_the_lr_peak_of_a_long_log_is_the_whole_runs(tmp_path):
    # a warm-up to 1e-3 over 1000 steps, then a decay: the tail's LRs are 6x below the peak
    lines = [records.encode({"kind": "run", "rank": 0, "time": 1.0, "schema": 1,
                             "world_size": 1, "host": "h", "pid": 1, "config": {},
                             "versions": {}, "log_path": "x", "total_steps": None,
                             "argv": []})]
    lines += [records.encode({"kind": "step", "rank": 0, "time": 1.0 + step, "step": step,
                              "epoch": 1, "loss": 2.0, "loss_smooth": 2.0,
                              "lr": 1e-3 * (step / 1000 if step < 1000 else 1 - step / 60_000
                                            if step > 1000 else 1.0),
                              "grad_norm": 1.0, "step_time_s": 0.1, "skipped": False})
              for step in range(1, 50_001)]
    (tmp_path / "rank_0.jsonl").write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    monitor = Monitor(str(tmp_path), resume=True, hardware_interval_s=None,
                      stream=io.StringIO())
    elapsed = time.perf_counter() - start
    # lr_jump_factor x the peak on its 5% grid: a warm restart to the peak is no jump
    limit = 10 * PEAK_GRID ** math.ceil(math.log(1e-3, PEAK_GRID))
    assert monitor.last_step == 50_000 and monitor.step_limits.lr == limit
    monitor.close()
    assert elapsed < 3.0, elapsed      # ~0.1 s here; a 200k-step log: resume_history.py
