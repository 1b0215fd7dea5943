"""MindWatchPipelineCell, the cell MindFormers' Trainer builds under pipeline stages and
gradient accumulation: built as the Trainer builds it (build_wrapper, semi-automatic
parallelism) on two msrun ranks, trained in stand-alone mode (the CPU compiles no
semi-automatic parallel graph: pipeline_worker.py says how), against MindFormers' own
pipeline cell; and the Trainer keeping mindwatch's cell where it puts its own, which under the
YAML route takes mindwatch_launch.py."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mf_config import MINDWATCH_CELL, REGISTER_PATH, data_parallel, mf_config

from mindwatch.runlog import read_run
from msrun_env import free_port, msrun_environment, msrun_until_its_ranks_end

pytestmark = [pytest.mark.mindformers, pytest.mark.msrun, pytest.mark.timeout(300)]

HERE = Path(__file__).parent
FAULT = 36                                  # pipeline_worker.FAULT_STEP
SKIP = {"on_anomaly": "skip"}
OURS, THEIRS = "MindWatchPipelineCell", "CPUPipelineCell"
SCENARIOS = [
    {"name": "theirs", "cell": THEIRS, "fault": None, "dynamic": False, "local_norm": True},
    # state records every 10 steps, MindFormers' per-parameter norms on (local_norm)
    {"name": "ours", "cell": OURS, "fault": None, "dynamic": False, "local_norm": True,
     "settings": {"state_interval": 10}},
    # a NaN in one batch of rank 1 only: the verdict is shared, both ranks withhold
    {"name": "nan_rank_1", "cell": OURS, "fault": "nan", "fault_rank": 1, "dynamic": False},
    {"name": "inf_loss", "cell": OURS, "fault": "inf_loss", "dynamic": False, "settings": SKIP},
    # finite gradients, 1e4 times too large, under a dynamic loss scale: no overflow
    {"name": "explode", "cell": OURS, "fault": "explode", "dynamic": True, "settings": SKIP},
    # MindFormers' cell watched by MindWatchMonitor: found, applied, and said so
    {"name": "explode_theirs", "cell": THEIRS, "fault": "explode", "dynamic": True,
     "monitor": True, "settings": SKIP},
    {"name": "lr", "cell": OURS, "fault": "lr", "dynamic": False, "settings": SKIP},
    # a loss 1e4 times the run's (its gradients within grad_explode: the loss decides); the
    # window still holds the first steps' fall from 10 to 0.05, hence a z of 4
    # gradient accumulation over 4 micro-batches of 2; a NaN in the first of step 36's
    {"name": "ga_theirs", "cell": THEIRS, "fault": None, "dynamic": False, "micro": 4},
    {"name": "ga_ours", "cell": OURS, "fault": None, "dynamic": False, "micro": 4},
    {"name": "ga_nan", "cell": OURS, "fault": "nan", "dynamic": False, "micro": 4,
     "settings": SKIP},
    {"name": "spike", "cell": OURS, "fault": "spike", "dynamic": False,
     "settings": {**SKIP, "grad_explode": 1e6, "loss_spike_z": 4.0}},
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every scenario, one after another in one msrun job of two ranks (one start-up)."""
    out = tmp_path_factory.mktemp("pipeline")
    logs = out / "msrun_logs"
    result = subprocess.run(
        [sys.executable, "-m", "mindspore.parallel.cluster.run", "--worker_num=2",
         "--local_worker_num=2", f"--master_port={free_port()}", f"--log_dir={logs}",
         "--join=True", str(HERE / "pipeline_worker.py"), str(out), json.dumps(SCENARIOS)],
        cwd=out, env=msrun_environment(), capture_output=True, text=True, timeout=280)
    workers = [(logs / f"worker_{rank}.log").read_text(errors="replace") for rank in (0, 1)]
    assert result.returncode == 0, "\n".join(w[-3000:] for w in workers)
    return out


def _steps(runs, name, rank):
    return {s["step"]: s for s in json.loads((runs / name / f"rank_{rank}.json").read_text())}


def _withheld_at_fault(steps):
    """The update of the fault's step withheld: the weights, moments and global_step as
    after the step before, bit for bit."""
    before, at = steps[FAULT - 1], steps[FAULT]
    return at["digest"] == before["digest"] and at["global_step"] == before["global_step"]


def test_a_healthy_run_is_the_one_mindformers_cell_trains(runs):
    log = read_run(str(runs / "ours" / "mw"))
    for rank in (0, 1):
        ours, theirs = _steps(runs, "ours", rank), _steps(runs, "theirs", rank)
        assert len(ours) == 40
        for step, mine in ours.items():
            assert mine == theirs[step]             # outputs and state, step by step
        records = log.ranks[rank].steps
        assert [r["step"] for r in records] == list(range(1, 41))
        for record in records:
            # the pre-clip norm the cell returns, as the tap kept it; the loss it returns
            assert record["grad_norm"] == pytest.approx(theirs[record["step"]]["global_norm"],
                                                        rel=1e-6)
            assert record["loss"] == pytest.approx(theirs[record["step"]]["loss"], rel=1e-6)
            assert record["skipped"] is False
        assert log.ranks[rank].anomalies == []
    notices = [n["message"] for n in log.ranks[0].of_kind("notice")]
    assert not any("applies the updates" in n for n in notices)


def test_state_records_hold_the_update(runs):
    for log in read_run(str(runs / "ours" / "mw")).ranks:
        states = log.of_kind("state")
        assert [s["step"] for s in states] == [10, 20, 30, 40]
        for state in states:
            assert 0 < state["update_norm"] < 0.5 * state["weight_norm"]
            assert sorted(state["layers"]) == ["net.0", "net.2"]       # the two Dense layers
            for entry in state["layers"].values():
                assert entry["update_ratio"] == pytest.approx(
                    entry["update_norm"] / entry["weight_norm"], rel=1e-9)
                assert entry["grad_norm"] > 0 and entry["m_norm"] > 0 and entry["v_norm"] > 0


def test_nan_on_one_rank_is_withheld_on_both(runs):
    log = read_run(str(runs / "nan_rank_1" / "mw"))
    for rank in (0, 1):
        steps = _steps(runs, "nan_rank_1", rank)
        assert _withheld_at_fault(steps) and steps[FAULT]["overflow"] is True
        assert max(steps) == FAULT                  # the non-finite rule stops, every rank
        assert log.ranks[rank].steps[-1]["skipped"] is True
    assert {a["anomaly"] for a in log.ranks[1].anomalies} >= {"gradient_nonfinite"}
    assert [a["anomaly"] for a in log.ranks[0].anomalies] == ["peer_stop"]


@pytest.mark.parametrize(("name", "anomaly"), [("inf_loss", "loss_nonfinite"),
                                               ("explode", "gradient_explode"),
                                               ("spike", "loss_spike")])
def test_each_fault_is_withheld_and_training_goes_on(runs, name, anomaly):
    log = read_run(str(runs / name / "mw"))
    for rank in (0, 1):
        steps = _steps(runs, name, rank)
        assert _withheld_at_fault(steps), steps[FAULT]
        assert steps[40]["global_step"] == 39       # every other update applied
        records = log.ranks[rank]
        assert [s["step"] for s in records.steps if s["skipped"]] == [FAULT]
        found = {(a["anomaly"], a["step"]) for a in records.anomalies}
        assert (anomaly, FAULT) in found, records.anomalies


def test_an_lr_blow_up_is_withheld_and_stays_withheld(runs):
    """The schedule's LR at global_step 35 is 500 times too high; withheld, global_step
    stays 35, so every later step meets the same LR: withheld too, and after max_skips (5)
    withheld updates the run stops."""
    log = read_run(str(runs / "lr" / "mw"))
    for rank in (0, 1):
        steps = _steps(runs, "lr", rank)
        assert _withheld_at_fault(steps)
        assert {steps[s]["global_step"] for s in range(FAULT, max(steps) + 1)} == {FAULT - 1}
        records = log.ranks[rank]
        assert [s["step"] for s in records.steps if s["skipped"]] == \
            list(range(FAULT, max(steps) + 1))
        assert ("lr_anomaly", FAULT) in {(a["anomaly"], a["step"]) for a in records.anomalies}


def test_gradient_accumulation_is_judged_once_per_optimizer_step(runs):
    """Four micro-batches a step: the same training as MindFormers' cell; mindwatch's loss
    is their mean (MindFormers returns the sum, MFLossMonitor prints the mean); a NaN in one
    micro-batch withholds that optimizer step, one step record, and the next steps apply."""
    healthy = read_run(str(runs / "ga_ours" / "mw"))
    faulty = read_run(str(runs / "ga_nan" / "mw"))
    for rank in (0, 1):
        ours, theirs = _steps(runs, "ga_ours", rank), _steps(runs, "ga_theirs", rank)
        assert ours == theirs and len(ours) == 40
        for record in healthy.ranks[rank].steps:
            assert record["loss"] == pytest.approx(theirs[record["step"]]["loss"] / 4,
                                                   rel=1e-6)
        steps = _steps(runs, "ga_nan", rank)
        assert _withheld_at_fault(steps) and steps[40]["global_step"] == 39
        records = faulty.ranks[rank]
        assert [s["step"] for s in records.steps] == list(range(1, 41))
        assert [s["step"] for s in records.steps if s["skipped"]] == [FAULT]


def test_a_withheld_update_is_no_overflow_for_the_loss_scale(runs):
    for rank in (0, 1):
        ours, theirs = _steps(runs, "explode", rank), _steps(runs, "explode_theirs", rank)
        # MindFormers' cell applies the finite explosion; its loss scale stays at 1024
        assert theirs[FAULT]["global_step"] == FAULT and not _withheld_at_fault(theirs)
        assert ours[FAULT]["overflow"] is True              # dropped, as MindFormers says
        assert {s["scale"] for s in ours.values()} == {s["scale"] for s in theirs.values()} \
            == {1024.0}


def test_the_monitor_beside_mindformers_pipeline_cell_says_so(runs):
    """The explosion under MindFormers' pipeline cell: found, applied (the cell's overflow
    check sees finite gradients), and the monitor says at the start that it cannot withhold
    and how to have mindwatch's cell there."""
    for log in read_run(str(runs / "explode_theirs" / "mw")).ranks:
        assert log.run["wrapped"] is False
        assert ("gradient_explode", FAULT) in {(a["anomaly"], a["step"]) for a in log.anomalies}
        # said once at the start (the skip of step 36 repeats it inside its own notice)
        [notice] = [n["message"] for n in log.of_kind("notice")
                    if n["message"].startswith("CPUPipelineCell applies the updates")]
        assert notice == log.of_kind("notice")[0]["message"]
        assert "mindwatch_launch.py\" run_mindformer.py" in notice
        assert "runner_wrapper: {type: MindWatchTrainOneStepCell}" in notice


def test_the_trainer_keeps_mindwatchs_cell_where_it_puts_its_pipeline_cell():
    """MindFormers' own methods, on a Trainer's config: under pipeline stages and gradient
    accumulation either of mindwatch's cells becomes MindWatchPipelineCell (micro_batch_num
    set as MindFormers sets it), any other type MindFormers' pipeline cell, as before."""
    import hyper_parallel_standin
    hyper_parallel_standin.install()
    from mindformers import MindFormerConfig
    from mindformers.trainer.base_trainer import BaseTrainer

    import mindwatch.mindformers  # noqa: F401  (its import has the Trainer keep the cells)
    from mindwatch.mindformers import MindWatchMonitor  # noqa: F401

    def reset(wrapper_type, method, *args):
        trainer = BaseTrainer.__new__(BaseTrainer)
        trainer.config = MindFormerConfig(
            runner_wrapper={"type": wrapper_type, "use_clip_grad": True},
            parallel_config={"micro_batch_num": 4}, calculate_per_token_loss=False)
        getattr(trainer, method)(*args)
        return trainer.config.runner_wrapper

    for method, args in (("_reset_wrapper_for_pipeline_parallel", ()),
                         ("_reset_wrapper_for_grad_accu", (8,))):
        for ours in ("MindWatchTrainOneStepCell", "MindWatchPipelineCell"):
            wrapper = reset(ours, method, *args)
            assert wrapper.type == "MindWatchPipelineCell" and wrapper.use_clip_grad is True
            assert wrapper.micro_batch_num == (args[0] if args else 4)
        assert reset("MFTrainOneStepCell", method, *args).type == "MFPipelineWithLossScaleCell"


LAUNCH = Path(REGISTER_PATH) / "mindwatch_launch.py"
# what a user's environment has and the tests' does not: hyper_parallel, before anything
# imports MindFormers (mindwatch_launch.py imports it first)
STANDIN_THEN = f"""
import runpy, sys
sys.path.insert(0, {str(HERE)!r})
import hyper_parallel_standin
hyper_parallel_standin.install()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# alone: MindFormers' own order, the same in every release; make test only (CI's minutes)
@pytest.mark.parametrize("through_launch", [
    True, pytest.param(False, marks=pytest.mark.default_pair)], ids=["mindwatch_launch", "alone"])
def test_gradient_accumulation_under_the_yaml_route_needs_mindwatch_launch(tmp_path,
                                                                        through_launch):
    """The YAML alone (auto_register) under gradient accumulation in semi-automatic
    parallelism: the Trainer puts its pipeline cell in place of mindwatch's when it is
    constructed, before auto_register imports mindwatch. Started through mindwatch_launch.py,
    the Trainer keeps mindwatch's (MindWatchPipelineCell), which the monitor adopts; alone,
    MindFormers' cell. Two msrun ranks; the CPU then refuses to compile the semi-automatic
    parallel graph, once the monitor has started."""
    config = data_parallel(mf_config(tmp_path, cell=MINDWATCH_CELL))
    settings = yaml.safe_load(config.read_text())
    # semi_auto_parallel over the whole batch, as MindFormers' shipped configs set it (1.6 to
    # 1.8 refuse full_batch: False there without a dataset_strategy)
    settings["parallel"].update(parallel_mode=1, full_batch=True)
    settings["runner_config"]["gradient_accumulation_steps"] = 2
    config.write_text(yaml.safe_dump(settings))
    shim = tmp_path / "standin_then.py"
    shim.write_text(STANDIN_THEN)
    script = [str(LAUNCH)] if through_launch else []
    logs = tmp_path / "msrun_logs"
    # the job fails: it ends once both ranks have (MS_NODE_TIMEOUT: how long a rank still
    # joining waits for the other, which died); msrun's status is then -SIGTERM
    result = msrun_until_its_ranks_end(
        [sys.executable, "-m", "mindspore.parallel.cluster.run", "--worker_num=2",
         "--local_worker_num=2", f"--master_port={free_port()}", f"--log_dir={logs}",
         "--join=True", str(shim), *script, str(HERE / "mf_launcher.py"), str(config)],
        cwd=tmp_path, env=msrun_environment(REGISTER_PATH=REGISTER_PATH, MS_NODE_TIMEOUT="10"),
        timeout=280)
    workers = [(logs / f"worker_{rank}.log").read_text(errors="replace") for rank in (0, 1)]
    # the rank that first meets the CPU's refusal ends the job: on a loaded host the other
    # may still be joining the cluster then, and time out before its monitor starts
    assert result.returncode != 0 and any("Invalid backend: CPU" in w for w in workers), \
        "\n".join(w[-3000:] for w in workers)
    ranks = read_run(str(tmp_path / "mw")).ranks
    assert ranks
    for log in ranks:
        assert log.run["argv"][0] == str(HERE / "mf_launcher.py")   # the script's own argv
        assert log.run["wrapped"] is through_launch
    # (alone, the monitor's notice of it comes after its start, which on the CPU meets the
    # semi-automatic graph first: test_the_monitor_beside_mindformers_pipeline_cell_says_so)


def test_mindwatch_launch_without_a_script_says_how_to_use_it():
    result = subprocess.run([sys.executable, str(LAUNCH), "no_such_script.py"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "usage: python mindwatch_launch.py run_mindformer.py" in result.stderr
    assert "no such file: no_such_script.py" in result.stderr
