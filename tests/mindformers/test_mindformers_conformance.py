"""The conformance matrix's Trainer column (mf_conformance.py) run for real: the 1-layer legacy
Llama through MindFormers' Trainer and YAML, each fault injected at one step, with
MindFormers' cell and with MindWatchTrainOneStepCell; the run log, `mindwatch summary`, the
stop's checkpoint and the reports checked against the table."""
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from mf_config import MINDWATCH_CELL, STEPS, mf_config, mf_steps
from mf_conformance import FAULT_STEP, SETTINGS, TrainerCase, cases, markdown_table

from mindwatch.cli import main as cli
from mindwatch.runlog import read_rank_log

# one worker under xdist: one launcher process runs the cases (the launcher fixture)
pytestmark = [pytest.mark.mindformers, pytest.mark.conformance, pytest.mark.default_pair,
              pytest.mark.timeout(300), pytest.mark.xdist_group("launcher")]


def run(case: TrainerCase, tmp_path: Path, launcher) -> Path:
    settings = dict(SETTINGS)
    if case.skip_spike:
        settings["on_anomaly"] = {"loss_spike": "skip"}
    callbacks = []
    if case.fault in ("nan", "inf_loss", "explode", "spike"):
        callbacks.append({"type": "FaultAt", "step": FAULT_STEP, "fault": case.fault,
                          "good_weights": str(tmp_path / "good.ckpt")})
    config = mf_config(tmp_path, callbacks=callbacks, monitor=settings,
                       **({"cell": MINDWATCH_CELL} if case.cell == "mindwatch" else {}))
    yaml_config = yaml.safe_load(config.read_text())
    yaml_config["model"]["arch"]["type"] = "FaultyLlamaForCausalLM"
    if case.fault == "lr_blowup":
        yaml_config["lr_schedule"].update(type="JumpLR", jump_step=FAULT_STEP)
        yaml_config["callbacks"].insert(1, {"type": "FaultAt", "step": FAULT_STEP,
                                            "fault": "none", "good_weights":
                                            str(tmp_path / "good.ckpt")})
    config.write_text(yaml.safe_dump(yaml_config))
    launcher.run(tmp_path, config)
    return tmp_path / "mw"


def check(case: TrainerCase, tmp_path: Path, log_dir: Path, capsys) -> None:
    import mindspore as ms
    expected = case.outcome
    log = read_rank_log(str(log_dir / "rank_0.jsonl"))
    last = FAULT_STEP if expected.end == "stopped" else STEPS
    assert [s["step"] for s in log.steps] == list(range(1, last + 1))
    assert log.end["reason"] == expected.end and log.end["steps"] == last
    assert [s["step"] for s in log.steps if s["skipped"]] == list(expected.skipped)
    assert cli(["summary", str(log_dir)]) == expected.exit_code
    capsys.readouterr()
    if expected.first is None:
        assert log.anomalies == []
    else:
        assert log.anomalies[0]["step"] == FAULT_STEP
        assert expected.first in {a["anomaly"] for a in log.anomalies if a["step"] == FAULT_STEP}
    # mindwatch's numbers are MFLossMonitor's before the fault
    theirs = mf_steps(tmp_path)
    for step in log.steps[:FAULT_STEP - 1]:
        assert step["loss"] == pytest.approx(theirs[step["step"]]["loss"],
                                             abs=theirs[step["step"]]["loss_abs"])
    written = {a["checkpoint"] for a in log.anomalies if a["checkpoint"]}
    if expected.checkpoint is None:
        assert written == set()
        return
    [path] = written
    saved, good = ms.load_checkpoint(path), ms.load_checkpoint(str(tmp_path / "good.ckpt"))
    names = [name for name in good if not name.endswith(("fault_scale", "fault_offset"))]
    same = [np.array_equal(saved[name].asnumpy(), good[name].asnumpy()) for name in names]
    assert all(same) if expected.checkpoint == "good" else not all(same)
    notes = [note for a in log.anomalies if a["report"]
             for note in json.loads(Path(a["report"]).read_text())["notes"]]
    if expected.checkpoint == "bad":      # the report says how to protect
        assert any("MindWatchTrainOneStepCell" in note for note in notes), notes
    else:
        assert not any("INCLUDE" in note for note in notes), notes


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in cases()])
def test_trainer_conformance(case, tmp_path, capsys, launcher):
    check(case, tmp_path, run(case, tmp_path, launcher), capsys)


def test_the_docs_show_the_trainer_table():
    docs = Path(__file__).parents[2] / "docs" / "pipelines.md"
    assert markdown_table() in docs.read_text(), "regenerate docs/pipelines.md's Trainer " \
        "table from tests/mindformers/mf_conformance.py markdown_table()"
