"""Issue #46 under MindSpore Transformers' Trainer with mindwatch's cell (sink_mode False):
the batch of a step stopped on enters bad_batches.jsonl, and the run restarted on the same
directory (resume) withholds that batch's update by itself, in the cell's graph, the
training state untouched by that step, and trains on to the end; resumed as the report
advises (MindFormers' own resume_training from the checkpoint, the data skipped to the
stopped step), it meets the batch again at once and withholds it by itself."""
import json
from pathlib import Path

import pytest
import yaml
from mf_config import MINDWATCH_CELL, STEPS, mf_config, state_digests
from test_mindformers_resume import ADVICE, apply

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300),
              pytest.mark.xdist_group("launcher")]

BAD = 12


def _records(path):
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return records[max(i for i, r in enumerate(records) if r["kind"] == "run"):]


def _stopped_on_the_bad_batch(first, launcher):
    """The first run, stopped on step BAD's batch."""
    # a NaN embedding during step 12 (NanAtStep), kept until after the monitor's step end so
    # that the replay fails again (restored before it, the replay is healthy: a transient
    # fault, never the batch's): the step's batch is the one stopped on
    config = mf_config(first, cell=MINDWATCH_CELL, seed=1,
                       monitor={"on_anomaly": {"loss_nonfinite": "stop"}})
    settings = yaml.safe_load(config.read_text())
    settings["callbacks"].append({"type": "NanAtStep", "step": BAD})
    config.write_text(yaml.safe_dump(settings))
    launcher.run(first, config)


def test_a_stopped_batch_is_withheld_by_itself_when_the_trainer_comes_back(tmp_path, launcher):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    _stopped_on_the_bad_batch(first, launcher)
    log_dir = first / "mw"
    [entry] = [json.loads(line) for line in
               (log_dir / "bad_batches.jsonl").read_text().splitlines()]
    assert entry["step"] == BAD and entry["indices"] is None
    assert {a["batch"]["fingerprint"] for a in _records(log_dir / "rank_0.jsonl")
            if a["kind"] == "anomaly"} == {entry["fingerprint"]}

    # the same data from the start, on the same directory: step 12's batch withheld
    config = mf_config(second, cell=MINDWATCH_CELL, seed=1,
                       callbacks=[{"type": "StateDigest"}],
                       monitor={"log_dir": str(log_dir), "resume": True})
    applied = launcher.run(second, config)
    segment = _records(log_dir / "rank_0.jsonl")
    steps = {r["step"]: r for r in segment if r["kind"] == "step"}
    assert [(s, r.get("skip_reason")) for s, r in steps.items() if r["skipped"]] == [
        (BAD, "known_bad_batch")]
    assert [r for r in segment if r["kind"] == "anomaly"] == []
    assert segment[-1]["kind"] == "end" and segment[-1]["reason"] == "completed"
    assert applied == STEPS - 1
    digests = state_digests((second / "launcher.out").read_text())
    assert digests[BAD][0] == digests[BAD - 1][0]          # the state untouched by step 12
    assert digests[BAD + 1][0] != digests[BAD][0]


def test_resumed_as_the_report_advises_the_trainer_withholds_the_batch_by_itself(tmp_path,
                                                                                launcher):
    """The issue's user: run_mindformer.py resumed with the report's YAML (resume_training
    from mindformers_resume, the data skipped to the checkpoint's step) met the same step's
    batch at once and stopped again; now that step is withheld by itself and the run ends.
    The NaN during step 12 is undone before the monitor's step end (NanAtStep listed before
    it), so the checkpoint holds the clean state after step 11, as after a batch's fault;
    without a replay (replay: False) the withheld step's batch enters the ledger unchecked."""
    config = mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1, monitor={"replay": False},
                       callbacks=[{"type": "NanAtStep", "step": BAD}])
    launcher.run(tmp_path, config)
    log_dir = tmp_path / "mw"
    [entry] = [json.loads(line) for line in
               (log_dir / "bad_batches.jsonl").read_text().splitlines()]
    assert (entry["step"], entry["reproduced"]) == (BAD, None)
    [anomaly] = [r for r in _records(log_dir / "rank_0.jsonl")
                 if r["kind"] == "anomaly" and r.get("report")][:1]
    _, advice = ADVICE.search(Path(anomaly["report"]).with_suffix(".md").read_text()).groups()
    settings = yaml.safe_load(config.read_text())
    settings["callbacks"] = [c for c in settings["callbacks"] if c["type"] != "NanAtStep"]
    config.write_text(yaml.safe_dump(apply(settings, yaml.safe_load(advice))))
    launcher.run(tmp_path, config)
    segment = _records(log_dir / "rank_0.jsonl")
    steps = {r["step"]: r for r in segment if r["kind"] == "step"}
    assert sorted(steps) == list(range(BAD, STEPS + 1))       # resumed at the withheld step
    assert [(s, r.get("skip_reason")) for s, r in steps.items() if r["skipped"]] == [
        (BAD, "known_bad_batch")]
    assert [r for r in segment if r["kind"] == "anomaly"] == []
    [said] = [r["message"] for r in segment if r["kind"] == "notice" and "known bad" in
              r["message"]]
    assert f"step {BAD}: its update was withheld" in said and f"bad at step {BAD}" in said
    assert segment[-1]["kind"] == "end" and segment[-1]["reason"] == "completed"
