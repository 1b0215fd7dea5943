"""Alerts POSTed to a real local HTTP server: what is sent, in which shape, and that a dead or
slow webhook neither raises into training nor slows it."""
import math
import os
import socket
import threading
import time

import pytest

from mindwatch import FrameworkHooks, Monitor
from mindwatch.observation import ReplayOutcome
from mindwatch.runlog import read_rank_log
from mindwatch.sinks.alert import QUEUE_SIZE, AlertSink, wants_alert
from webhook_service import SECRET, Webhook


@pytest.fixture
def webhook():
    hooks = []

    def start(**kwargs):
        hooks.append(Webhook(**kwargs))
        return hooks[-1]
    yield start
    for hook in hooks:
        hook.close()


def closed_port_url():
    with socket.socket() as probe:                 # a port nothing listens on any more
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook?access_token={SECRET}"


def monitor(tmp_path, clock, stream, url, **settings):
    return Monitor(str(tmp_path), clock=clock, stream=stream, hardware_interval_s=None,
                   alert_webhook=url, **settings)


def explode(mon, clock, step=4):
    """Healthy steps, then one whose gradient norm explodes; returns that observe's wall time."""
    for s in range(1, step):
        clock.advance(0.1)
        mon.observe(step=s, loss=1.0, grad_norm=1.0)
    clock.advance(0.1)
    began = time.perf_counter()
    found = mon.observe(step=step, loss=1.0, grad_norm=1e9)
    assert [a.kind for a in found] == ["gradient_explode"]
    return time.perf_counter() - began


@pytest.mark.parametrize("alert_format", ["json", "slack", "feishu", "dingtalk"])
def test_a_stopping_anomaly_is_posted_once_in_the_chosen_shape(tmp_path, clock, stream, webhook,
                                                                alert_format):
    hook = webhook()
    mon = monitor(tmp_path, clock, stream, hook.url, on_anomaly="checkpoint_and_stop",
                  alert_format=alert_format)
    explode(mon, clock)
    bodies = hook.wait_for(1)
    time.sleep(0.3)                                  # room for a wrong second POST to arrive
    assert len(hook.posts) == 1
    assert hook.posts[0]["path"] == f"/hook?access_token={SECRET}"
    assert hook.posts[0]["type"] == "application/json; charset=utf-8"
    record = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("anomaly")[0]
    assert os.path.isfile(record["report"])
    body = bodies[0]
    if alert_format == "json":
        assert body == {
            "event": "anomaly", "run_dir": str(tmp_path), "host": socket.gethostname(),
            "rank": 0, "time": record["time"], "step": 4, "anomaly": "gradient_explode",
            "message": record["message"], "actions": ["checkpoint", "stop"],
            "report": record["report"], "checkpoint": None}
        assert "1e+09" in body["message"]
    else:
        text = {"slack": lambda b: b["text"], "feishu": lambda b: b["content"]["text"],
                "dingtalk": lambda b: b["text"]["content"]}[alert_format](body)
        assert body == {"slack": {"text": text},
                        "feishu": {"msg_type": "text", "content": {"text": text}},
                        "dingtalk": {"msgtype": "text", "text": {"content": text}}
                        }[alert_format]
        assert text.splitlines() == [
            f"mindwatch: gradient_explode at step 4 (rank 0 on {socket.gethostname()}; "
            "checkpoint+stop)",
            record["message"],
            f"run {tmp_path}; report {record['report']}"]
    mon.close()                                      # the stop is an abnormal end: one more
    assert len(hook.wait_for(2)) == 2
    assert SECRET not in (tmp_path / "rank_0.jsonl").read_text()    # the URL is redacted


def test_an_alert_of_a_replayed_step_says_the_replays_verdict(tmp_path, clock, stream,
                                                               webhook):
    """The verdict is a field of its own in the record; the alert, read alone, ends its
    message with it."""
    hook = webhook()
    mon = Monitor(str(tmp_path), clock=clock, stream=stream, hardware_interval_s=None,
                  alert_webhook=hook.url, framework=FrameworkHooks(
                      replay=lambda: ReplayOutcome(loss=math.nan, grad_norm=2.0,
                                                   healthy=False)))
    mon.observe(step=1, loss=1.0, grad_norm=1.0)
    mon.observe(step=2, loss=math.nan, grad_norm=2.0, skipped=True)
    [body] = hook.wait_for(1)
    record = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("anomaly")[0]
    assert record["anomaly"] == "loss_nonfinite" and "bit-identical" in record["replay_verdict"]
    assert body["message"] == f"{record['message']}; {record['replay_verdict']}"
    mon.close()


def test_warn_only_anomalies_and_a_completed_run_post_nothing(tmp_path, clock, stream, webhook):
    hook = webhook()
    mon = monitor(tmp_path, clock, stream, hook.url, on_anomaly="warn")
    explode(mon, clock)
    mon.close()                                      # drains the queue: nothing was in it
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [a["actions"] for a in log.of_kind("anomaly")] == [["warn"]]
    assert log.end["reason"] == "completed"
    time.sleep(0.3)
    assert hook.posts == []


def test_an_abnormal_end_is_posted_with_the_anomaly_that_caused_it(tmp_path, clock, stream,
                                                                   webhook):
    hook = webhook()
    mon = monitor(tmp_path, clock, stream, hook.url, on_anomaly="stop")
    explode(mon, clock, step=2)
    mon.close()
    bodies = hook.wait_for(2)
    end = bodies[1]
    assert [b["event"] for b in bodies] == ["anomaly", "end"]
    assert (end["reason"], end["step"], end["anomaly"]) == ("stopped", 2, "gradient_explode")
    assert end["report"] == bodies[0]["report"] is not None
    assert end["message"].startswith("training ended stopped after step 2, stopped by "
                                     "gradient_explode at step 2 on rank 0")


def test_an_error_end_without_anomaly_is_posted(tmp_path, clock, stream, webhook):
    hook = webhook()
    mon = monitor(tmp_path, clock, stream, hook.url, alert_format="slack")
    clock.advance(0.1)
    mon.observe(step=1, loss=1.0, grad_norm=1.0)
    mon.close(error="RuntimeError: out of memory")
    assert len(hook.wait_for(1)) == 1
    assert hook.posts[0]["body"]["text"].splitlines()[:2] == [
        f"mindwatch: training ended error (rank 0 on {socket.gethostname()})",
        "training ended error after step 1: RuntimeError: out of memory"]


def test_a_stop_another_rank_decided_is_left_to_that_rank():
    """Rank 1 stopped because rank 0 found an overheat: rank 0 posts it, rank 1 does not
    (tests/mindspore/test_multirank.py checks the posts of a real two-rank run)."""
    copy = {"kind": "anomaly", "rank": 1, "anomaly": "peer_stop", "step": 5,
            "actions": ["checkpoint", "stop"]}
    followed = {"kind": "end", "rank": 1, "reason": "stopped",
                "stopped_by": {"anomaly": "overheat", "step": 5, "rank": 0}}
    assert not wants_alert(copy) and not wants_alert(followed)
    assert wants_alert(dict(followed, rank=0))
    assert wants_alert({"kind": "end", "rank": 1, "reason": "error", "stopped_by": None})


def test_a_hang_is_posted_whatever_its_actions(tmp_path, webhook):
    hook = webhook()
    sink = AlertSink(hook.url, "json", log_dir=str(tmp_path), host="node7")
    sink.write({"kind": "anomaly", "rank": 3, "time": 1.0, "anomaly": "hang", "step": 9,
                "value": 600.0, "threshold": 300.0, "message": "no step for 600 s",
                "actions": ["warn"], "checkpoint": None, "report": None})
    sink.write({"kind": "anomaly", "rank": 3, "time": 2.0, "anomaly": "loss_spike", "step": 9,
                "value": 9.0, "threshold": 6.0, "message": "spike", "actions": ["warn"],
                "checkpoint": None, "report": None})
    sink.close()
    assert [(b["anomaly"], b["host"], b["rank"]) for b in hook.wait_for(1)] == [
        ("hang", "node7", 3)]
    assert sink.sent == 1 and sink.pop_messages() == []


def _notices(tmp_path):
    return [n["message"] for n in read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("notice")
            if "alert webhook" in n["message"]]


@pytest.mark.parametrize("server", ["refused", "http 500"])
def test_a_failing_webhook_is_said_once_and_never_raises(tmp_path, clock, stream, webhook,
                                                          server):
    url = closed_port_url() if server == "refused" else webhook(status=500).url
    mon = monitor(tmp_path, clock, stream, url, on_anomaly="stop")
    assert explode(mon, clock) < 0.5
    mon.close()                                      # the end alert fails too: still one line
    notices = _notices(tmp_path)
    assert len(notices) == 1, notices
    assert ("Connection refused" if server == "refused" else "HTTP Error 500") in notices[0]
    assert "http://127.0.0.1:" in notices[0] and SECRET not in notices[0]
    assert stream.getvalue().count("alert webhook") == 1           # and on the console


@pytest.mark.waits
def test_a_slow_webhook_neither_slows_training_nor_holds_the_end(tmp_path, clock, stream,
                                                                  webhook):
    hook = webhook(delay_s=10.0)
    mon = monitor(tmp_path, clock, stream, hook.url, on_anomaly="stop")
    assert explode(mon, clock) < 0.5
    clock.advance(0.1)
    began = time.perf_counter()
    mon.observe(step=5, loss=1.0, grad_norm=1.0)     # while the POST hangs
    assert time.perf_counter() - began < 0.5
    began = time.perf_counter()
    mon.close()
    assert time.perf_counter() - began < 8.0         # a bounded wait, not the 10 s answer
    notices = _notices(tmp_path)
    assert len(notices) == 1 and "given up" in notices[0], notices
    assert len(hook.posts) == 1                       # the end alert never left the queue


def test_a_full_queue_drops_alerts_and_counts_them(tmp_path):
    entered, release, posted = threading.Event(), threading.Event(), []

    def post(url, body):
        entered.set()
        release.wait(10)
        posted.append(body)

    sink = AlertSink("http://127.0.0.1:9/x", "json", log_dir=str(tmp_path), post=post)
    stop = {"kind": "anomaly", "rank": 0, "time": 1.0, "anomaly": "loss_nonfinite", "step": 1,
            "value": None, "threshold": None, "message": "NaN", "actions": ["stop"],
            "checkpoint": None, "report": None}
    sink.write(stop)
    assert entered.wait(5)                           # the first one is being POSTed
    began = time.perf_counter()
    for _ in range(QUEUE_SIZE + 2):
        sink.write(stop)
    assert time.perf_counter() - began < 0.5
    assert sink.dropped == 2
    messages = sink.pop_messages()
    assert len(messages) == 1 and "dropped" in messages[0]
    release.set()
    sink.close()
    assert len(posted) == QUEUE_SIZE + 1 and sink.sent == QUEUE_SIZE + 1


@pytest.mark.parametrize("url, error", [
    ("ftp://example.com/hook", ValueError), ("file:///etc/passwd", ValueError),
    ("http://", ValueError), ("hooks.slack.com/services/x", ValueError),
    ("https://exa mple.com/x", ValueError), ("http://host:99999/x", ValueError),
    (b"https://example.com", TypeError), (42, TypeError)])
def test_only_http_urls_are_accepted(tmp_path, url, error):
    with pytest.raises(error, match="alert_webhook"):
        Monitor(str(tmp_path), alert_webhook=url)
    assert not (tmp_path / "rank_0.jsonl").exists()


def test_alert_format_is_one_of_four(tmp_path):
    with pytest.raises(ValueError, match="alert_format must be one of 'json', 'slack', "
                                         "'feishu', 'dingtalk'"):
        Monitor(str(tmp_path), alert_webhook="https://example.com/x", alert_format="teams")
