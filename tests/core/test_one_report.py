"""One report and one checkpoint for a job-level event where every rank holds the same
training state (issue #43): real Monitors on threads exchanging through a real SUM
(tests/thread_ranks.py), each with a ``save_checkpoint`` hook that writes a real file."""
import json
import os

import pytest

from mindwatch.basics.run_dir import checkpoint_path
from thread_ranks import run_ranks

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
NAN = float("nan")
STEP = 20
LEFT = "the job's report and checkpoint are rank 0's (every rank holds the same training state)"


def _saver(log_dir, rank):
    def save(step, reason):
        path = checkpoint_path(log_dir, step, rank, reason)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"step": step, "rank": rank, "weights": [0.5, -1.25]}, handle)
        return path
    return save


@pytest.fixture
def ranks(tmp_path):
    """``run(body, replicated=...)``: four thread ranks whose hooks also save a checkpoint
    and say whether the state is replicated; returns the run directory."""
    def run(body, *, replicated, **settings):
        log_dir = str(tmp_path / "run")

        def framework(rank):
            return {"save_checkpoint": _saver(log_dir, rank), "replicated": lambda: replicated}
        assert run_ranks(4, body, log_dir=log_dir, hosts=HOSTS, framework=framework,
                         **settings) == [STEP] * 4
        return log_dir
    return run


def _train(*, nan_loss=(), grad_norms=None, local=None, steps=30):
    """Healthy steps but at STEP: a NaN loss on the ranks ``nan_loss``; ``grad_norms``,
    each rank's reduced norm there; ``local``, every rank's own norm before the reduction."""
    def body(monitor, rank):
        for step in range(1, steps + 1):
            loss, grad_norm, extra = 2.0 - 0.01 * step + 0.001 * rank, 1.0, {}
            if step == STEP:
                loss = NAN if rank in nan_loss else loss
                grad_norm = grad_norms[rank] if grad_norms else grad_norm
                extra = {"local_grad_norms": local} if local else {}
            found = monitor.end_step(step=step, loss=loss, lr=0.01, grad_norm=grad_norm,
                                     step_time_s=0.1, data_time_s=0.001, **extra)
            if any(a.stops for a in found) or monitor.stop_requested:
                break
        monitor.close()
        return monitor.last_step
    return body


def _records(log_dir, name, kind):
    with open(os.path.join(log_dir, name), encoding="utf-8") as handle:
        return [r for r in map(json.loads, handle) if r["kind"] == kind]


def _files(log_dir, folder):
    path = os.path.join(log_dir, folder)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def _anomalies(log_dir, rank):
    return {a["anomaly"]: a for a in _records(log_dir, f"rank_{rank}.jsonl", "anomaly")}


def _event(log_dir):
    (event,) = _records(log_dir, "job.jsonl", "event")
    return event


def test_a_nan_on_one_replicated_rank_writes_one_report_and_one_checkpoint(ranks):
    log_dir = ranks(_train(nan_loss={2}), replicated=True)
    assert _files(log_dir, "anomalies") == [f"step{STEP}_rank0.json", f"step{STEP}_rank0.md"]
    assert _files(log_dir, "checkpoints") == [f"anomaly_step{STEP}_rank0.ckpt"]
    # rank 2 found it and holds the decision; its files are rank 0's
    found = _anomalies(log_dir, 2)["loss_nonfinite"]
    assert found["actions"] == ["checkpoint", "stop"]
    assert (found["report"], found["checkpoint"]) == (None, None)
    assert found["message"].endswith(LEFT)
    for rank in (1, 3):
        peer = _anomalies(log_dir, rank)["peer_stop"]
        assert peer["actions"] == ["checkpoint", "stop"] and peer["report"] is None
        assert peer["message"].endswith(LEFT)
    peer = _anomalies(log_dir, 0)["peer_stop"]
    checkpoint = os.path.join(log_dir, "checkpoints", f"anomaly_step{STEP}_rank0.ckpt")
    assert peer["checkpoint"] == checkpoint
    with open(checkpoint, encoding="utf-8") as handle:
        assert json.load(handle) == {"step": STEP, "rank": 0, "weights": [0.5, -1.25]}
    # rank 0's report, though its own anomaly is only the peer stop, names rank 2's
    with open(peer["report"], encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["job"] == {"ranks": "2", "by_kind": {"loss_nonfinite": "2"},
                             "origin_rank": 2, "origin_host": "node-b", "origin_device": 2}
    assert report["checkpoint"] == checkpoint and report["rank"] == 0
    assert any(note.startswith("one report and one checkpoint for the job")
               for note in report["notes"])
    with open(peer["report"][:-len(".json")] + ".md", encoding="utf-8") as handle:
        markdown = handle.read()
    assert "- loss_nonfinite: rank 2\n- it came from rank 2 (host node-b, device 2)" in markdown
    event = _event(log_dir)
    assert (event["report"], event["checkpoint"]) == (peer["report"], checkpoint)
    assert (event["ranks"], event["origin_rank"]) == ("2", 2)


def test_without_a_replicated_state_every_rank_writes_its_own(ranks):
    log_dir = ranks(_train(nan_loss={2}), replicated=False)
    assert _files(log_dir, "anomalies") == sorted(
        f"step{STEP}_rank{r}.{ext}" for r in range(4) for ext in ("json", "md"))
    assert _files(log_dir, "checkpoints") == [f"anomaly_step{STEP}_rank{r}.ckpt"
                                              for r in range(4)]
    found = _anomalies(log_dir, 2)["loss_nonfinite"]
    assert found["checkpoint"].endswith(f"anomaly_step{STEP}_rank2.ckpt")
    assert "rank 0's" not in found["message"]
    with open(found["report"], encoding="utf-8") as handle:
        assert "job" not in json.load(handle)


def test_a_gradient_every_rank_finds_is_reported_once_naming_its_origin(ranks):
    """The reduced gradients are NaN on every rank: each finds gradient_nonfinite before the
    exchange, rank 0 writes its report then, and again after it naming every rank."""
    local = [1.0, 1.1, NAN, 0.9]
    log_dir = ranks(_train(grad_norms=[NAN] * 4, local=local), replicated=True)
    assert _files(log_dir, "anomalies") == [f"step{STEP}_rank0.json", f"step{STEP}_rank0.md"]
    assert _files(log_dir, "checkpoints") == [f"anomaly_step{STEP}_rank0.ckpt"]
    own = _anomalies(log_dir, 0)["gradient_nonfinite"]
    with open(own["report"], encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["job"] == {"ranks": "0-3", "by_kind": {"gradient_nonfinite": "0-3"},
                             "origin_rank": 2, "origin_host": "node-b", "origin_device": 2}
    for rank in (1, 2, 3):
        found = _anomalies(log_dir, rank)["gradient_nonfinite"]
        assert found["origin_rank"] == 2 and found["checkpoint"] is None
        assert found["message"].endswith(LEFT)


def test_rank_0_checkpoints_when_another_ranks_policy_asks_though_its_own_does_not(ranks):
    """Rank 0 stops on its own gradient_explode ("stop": no checkpoint) at the step rank 2
    stops on a NaN loss (checkpoint_and_stop): rank 0 follows no peer, and still writes the
    job's one checkpoint, which its report and the job log's event name."""
    norms = [1e6, 1.0, 1.0, 1.0]
    log_dir = ranks(_train(nan_loss={2}, grad_norms=norms), replicated=True,
                    on_anomaly={"gradient_explode": "stop"})
    checkpoint = os.path.join(log_dir, "checkpoints", f"anomaly_step{STEP}_rank0.ckpt")
    assert _files(log_dir, "checkpoints") == [os.path.basename(checkpoint)]
    assert _files(log_dir, "anomalies") == [f"step{STEP}_rank0.json", f"step{STEP}_rank0.md"]
    own = _anomalies(log_dir, 0)["gradient_explode"]
    assert own["actions"] == ["stop"] and own["checkpoint"] is None   # written before
    with open(own["report"], encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["checkpoint"] == checkpoint
    assert report["actions"] == ["checkpoint", "stop"]
    assert report["job"]["by_kind"] == {"gradient_explode": "0", "loss_nonfinite": "2"}
    assert report["job"]["origin_rank"] is None           # two ranks, no attribution
    notices = [n["message"] for n in _records(log_dir, "rank_0.jsonl", "notice")]
    assert f"step {STEP}: another rank's policy asked for a checkpoint; the job's is " \
           f"{checkpoint}" in notices
    event = _event(log_dir)
    assert event["checkpoint"] == checkpoint and "checkpoint" in event["actions"]


def test_rank_0_following_a_stop_without_a_checkpoint_writes_the_one_another_asked_for(ranks):
    """Rank 1 stops on gradient_explode ("stop") and rank 2 on a NaN loss
    (checkpoint_and_stop) at one step: rank 0 follows rank 1, the first, and still writes
    the checkpoint rank 2's policy asked for."""
    log_dir = ranks(_train(nan_loss={2}, grad_norms=[1.0, 1e6, 1.0, 1.0]), replicated=True,
                    on_anomaly={"gradient_explode": "stop"})
    assert _files(log_dir, "checkpoints") == [f"anomaly_step{STEP}_rank0.ckpt"]
    assert _files(log_dir, "anomalies") == [f"step{STEP}_rank0.json", f"step{STEP}_rank0.md"]
    peer = _anomalies(log_dir, 0)["peer_stop"]
    assert peer["actions"] == ["checkpoint", "stop"] and "rank 1 stopped" in peer["message"]
    with open(peer["report"], encoding="utf-8") as handle:
        job = json.load(handle)["job"]
    assert job["by_kind"] == {"gradient_explode": "1", "loss_nonfinite": "2"}
    assert (job["ranks"], job["origin_rank"], job["origin_host"]) == ("1-2", 1, "node-a")
    assert _anomalies(log_dir, 3)["peer_stop"]["checkpoint"] is None
