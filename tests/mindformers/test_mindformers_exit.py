"""``stop_exit_code`` under MindSpore Transformers' Trainer, set in the YAML's MindWatchMonitor
entry: a stop ends the launcher (what run_mindformer.py does) with that status, so the job
fails, after the run log is complete and every callback has ended."""
import pytest
from mf_config import mf_config, run_launcher

from mindwatch.runlog import read_rank_log

pytestmark = [pytest.mark.mindformers, pytest.mark.default_pair, pytest.mark.timeout(300)]


def test_a_nan_stop_ends_the_launcher_with_stop_exit_code(tmp_path):
    config = mf_config(tmp_path, callbacks=[{"type": "NanAtStep", "step": 4}],
                       monitor={"stop_exit_code": 42})
    applied = run_launcher(tmp_path, config, returncode=42)
    log = read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl"))
    assert [s["step"] for s in log.steps] == [1, 2, 3, 4]
    assert log.end["reason"] == "stopped" and log.end["stopped_by"]["step"] == 4
    assert log.records[0]["config"]["stop_exit_code"] == 42
    output = (tmp_path / "launcher.out").read_text()
    assert "mindwatch [rank 0]: training stopped by " in output
    assert "exiting with status 42 (stop_exit_code)" in output
    # GlobalStepAtEnd, listed after mindwatch, still ended (its on_train_end printed the
    # updates applied: step 4's was dropped); Trainer.train never returned.
    assert applied == 3
    assert "training returned" not in output
