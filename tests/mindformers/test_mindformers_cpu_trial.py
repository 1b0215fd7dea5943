"""docs/mindformers.md's first run on the CPU, as a user runs it: the page's config and its
MindRecord script, read from the page, trained through mindwatch's CPU-trial launcher
(``mindwatch_cpu_trial.py``, which stands in for ``hyper_parallel`` where it is missing) on
run_mindformer.py's calls (mf_launcher.py); and a YAML entry without its ``auto_register``
failing there with mindwatch's message. Each run in a process of its own, as the launcher
is started."""
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mf_config import HERE, MINDWATCH_CELL, REGISTER_PATH, STEPS, mf_config, mf_steps

from docs_exec import run_block
from docs_markdown import ROOT, blocks
from mindwatch.cli import main

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300)]

PAGE = ROOT / "docs" / "mindformers.md"
SECTION = "docs/mindformers.md#a-first-run-on-the-cpu"
TRIAL = Path(REGISTER_PATH) / "mindwatch_cpu_trial.py"
STANDIN_NOTE = "mindwatch: hyper_parallel is not installed; a stand-in serves"


def _section(lang):
    return [block.code for block in blocks(PAGE)
            if block.key.startswith(SECTION + ":") and block.lang == lang]


def _trial(tmp_path, config):
    """``python mindwatch_cpu_trial.py mf_launcher.py CONFIG`` in ``tmp_path``, REGISTER_PATH
    set as run_mindformer.py's --register_path sets it; its exit status and output."""
    result = subprocess.run([sys.executable, str(TRIAL), str(HERE / "mf_launcher.py"),
                             str(config)], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "REGISTER_PATH": REGISTER_PATH}, timeout=280)
    output = result.stdout + result.stderr
    (tmp_path / "launcher.out").write_text(output)
    return result.returncode, output


def test_the_pages_cpu_config_trains_through_the_cpu_trial_launcher(tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.chdir(tmp_path)
    run_block(f"{SECTION}:1", lambda name: {})          # the page's MindRecord script
    [config] = _section("yaml")
    (tmp_path / "cpu_trial.yaml").write_text(config)
    commands = _section("sh")
    # both commands give run_mindformer.py an absolute config, the second through the launcher
    assert all('--config "$PWD/cpu_trial.yaml"' in command for command in commands)
    assert '"$REGISTER_PATH/mindwatch_cpu_trial.py"' in commands[1]

    status, output = _trial(tmp_path, tmp_path / "cpu_trial.yaml")
    assert status == 0, output[-6000:]
    # the stand-in served MindFormers 2.0's imports of hyper_parallel (1.6 to 1.9 make none)
    mindformers_2 = importlib.metadata.version("mindformers").startswith("2.")
    assert output.count(STANDIN_NOTE) == (1 if mindformers_2 else 0)
    assert "Now Create Causal Language Model Dataset" in output    # from the YAML's dataset
    assert "training returned" in output
    # what the page says of it: 20 steps, healthy; mindwatch's losses are MFLossMonitor's
    assert main(["summary", "output/mindwatch", "--json"]) == 0
    [rank] = json.loads(capsys.readouterr().out)["ranks"]
    assert (rank["steps"], rank["end"]) == (STEPS, "completed")
    printed = mf_steps(tmp_path)
    steps = [json.loads(line) for line in
             (tmp_path / "output" / "mindwatch" / "rank_0.jsonl").read_text().splitlines()]
    losses = {s["step"]: s["loss"] for s in steps if s["kind"] == "step"}
    assert sorted(losses) == sorted(printed) == list(range(1, STEPS + 1))
    for step, loss in losses.items():
        assert loss == pytest.approx(printed[step]["loss"], abs=printed[step]["loss_abs"])
    assert main(["summary", "output/mindwatch"]) == 0
    assert f"  rank 0: {STEPS} steps, completed in " in capsys.readouterr().out


def test_a_runner_wrapper_without_its_auto_register_fails_with_mindwatchs_message(tmp_path):
    """The monitor's entry has its auto_register, the cell's has none: MindFormers builds the
    wrapper first, and the launcher words its lookup error."""
    cell = {key: value for key, value in MINDWATCH_CELL.items() if key != "auto_register"}
    status, output = _trial(tmp_path, mf_config(tmp_path, cell=cell))
    assert status == 1
    [error] = [line for line in output.splitlines() if "UnregisteredEntry:" in line]
    assert error.startswith("mindwatch_entries.UnregisteredEntry: runner_wrapper: type "
                            "MindWatchTrainOneStepCell is not registered with MindSpore "
                            "Transformers: add `auto_register: "
                            "mindwatch_callback.MindWatchTrainOneStepCell` to the "
                            "runner_wrapper entry, and pass run_mindformer.py "
                            f"`--register_path {Path(REGISTER_PATH).resolve()}`")
    assert f"REGISTER_PATH is now {REGISTER_PATH})" in error
    # raised from MindFormers' own lookup error, which the traceback shows too
    assert "Can't find class type wrapper class name MindWatchTrainOneStepCell" in output
    assert "training returned" not in output


def _entries():
    spec = importlib.util.spec_from_file_location("mindwatch_entries",
                                                  Path(REGISTER_PATH) / "mindwatch_entries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("module_type", "name", "where"), [
    ("wrapper", "MindWatchTrainOneStepCell", "the runner_wrapper entry"),
    ("wrapper", "MindWatchPipelineCell", "the runner_wrapper entry"),
    ("callback", "MindWatchMonitor", "its entry in callbacks:"),
])
def test_each_of_mindwatchs_names_gets_its_own_line_to_add(module_type, name, where):
    said = _entries().message(module_type, name)
    assert f"add `auto_register: mindwatch_callback.{name}` to {where}, and pass" in said
    # any other name, and another registry type, keep MindFormers' own error
    assert _entries().message(module_type, "MFTrainOneStepCell") is None
    assert _entries().message("models", name) is None
