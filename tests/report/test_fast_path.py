"""The fast path (msgspec) and the standard path (json) read run logs identically: the same
records and values (non-finite strings revived), the same skipped lines and line numbers, the
same errors with the same messages, and the same scans (``RankScan``) for the views."""
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindwatch import records
from mindwatch.runlog import fast, read_rank_log
from mindwatch.runlog.lines import LineDecoder
from mindwatch.runlog.scan import scan_records

pytestmark = pytest.mark.skipif(fast.msgspec is None, reason="msgspec is not installed")

RUN = {"kind": "run", "rank": 0, "time": 1.0, "schema": 1, "world_size": 1, "host": "h",
       "pid": 1, "config": {"grad_explode": 100.0}, "versions": {}}


def step(n, **fields):
    return {"kind": "step", "rank": 0, "time": 2.0 + n, "step": n, "epoch": 1, "loss": 1.0 / n,
            "loss_smooth": 1.0, "lr": 1e-3, "grad_norm": 1.0, "step_time_s": 0.1,
            "skipped": False, "samples_per_s": 320.0, **fields}


def hardware(n, **fields):
    return {"kind": "hardware", "rank": 0, "time": 2.5 + n, "cpu_percent": 50.0,
            "mem_used_gb": 10.0, "rss_gb": 1.0, "devices": [
                {"type": "npu", "index": 0, "util_percent": 90.0, "mem_used_mb": 100.0 + n,
                 "mem_total_mb": 200.0, "temp_c": 60.0, "power_w": None}], **fields}


def outcome(call):
    """What a call gives, as text that compares NaN equal to NaN and -0.0 unequal to 0.0."""
    try:
        return repr(call())
    except Exception as exc:           # the same type and message is the point
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture
def standard(monkeypatch):
    """A function running ``call`` with the standard json path, then with msgspec."""
    def both(call):
        monkeypatch.setenv(fast.ENV, "json")
        assert fast.parser() is None
        slow = outcome(call)
        monkeypatch.delenv(fast.ENV)
        assert fast.parser() is not None
        return slow, outcome(call)
    return both


# -- one line ----------------------------------------------------------------------------------
NUMBERS = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(),
                    st.integers(min_value=2**63 - 2, max_value=2**70),
                    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "Inf", None, True]))
VALUES = st.recursive(st.one_of(NUMBERS, st.text(max_size=5)),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["loss", "a", "temp_c"]), inner,
                                        max_size=3), max_leaves=6)
KEYS = st.sampled_from(["kind", "rank", "time", "step", "epoch", "loss", "loss_smooth", "lr",
                        "grad_norm", "step_time_s", "skipped", "devices", "cpu_percent", "x"])
KINDS = st.sampled_from(["step", "hardware", "run", "anomaly", "future", 3])


@st.composite
def lines(draw):
    record = draw(st.dictionaries(KEYS, VALUES, max_size=8))
    if draw(st.booleans()):
        record = {"kind": draw(KINDS), **record}
    text = json.dumps(record, ensure_ascii=draw(st.booleans()))
    raw = text.encode("utf-8")
    damage = draw(st.sampled_from(["none", "none", "cut", "byte", "nan", "dup", "deep",
                                   "space", "big", "wide"]))
    if damage == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif damage == "byte":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\\ud800", b"\x00", b"\\u004e"])) \
            + raw[at:]
    elif damage == "nan":
        raw = raw.replace(b"1.0", b"NaN", 1)
    elif damage == "dup" and raw.endswith(b"}") and len(raw) > 2:
        raw = raw[:-1] + b', "kind": "step"}'
    elif damage == "deep":
        depth = draw(st.sampled_from([10, 249, 250, 300, 600, 1200]))
        raw = raw[:1] + b'"deep": ' + b"[" * depth + b"]" * depth + b", " + raw[1:]
    elif damage == "wide":          # many brackets, shallow or not, some of them in strings
        depth = draw(st.sampled_from([1, 2, 124, 125, 248, 249, 250, 260]))
        inner = draw(st.sampled_from([b"[]", b'{"a": "]["}', b'"\\\\"']))
        raw = raw[:1] + b'"wide": [' + b"[" * depth + b"]" * depth + b"," \
            + b",".join([inner] * 300) + b"], " + raw[1:]
    elif damage == "space":
        raw = b" \t" + raw + b" \r"
    elif damage == "big":
        raw = raw.replace(b"1.0", b"1e400", 1)
    return raw


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines())
def test_one_line_decodes_the_same(raw):
    parser = fast.FastParser()
    expected = outcome(lambda: records.decode(raw.decode("utf-8")))
    assert outcome(lambda: parser.decode_record(raw)) == expected
    assert outcome(lambda: fast.standard_record(raw)) == expected


def test_nonfinite_strings_revive_only_in_float_fields():
    parser = fast.FastParser()
    raw = json.dumps(step(1, loss="NaN", lr="-Infinity", note="NaN",
                          layer_grad_norms={"w": "Infinity"})).encode()
    record = parser.decode_record(raw)
    assert math.isnan(record["loss"]) and record["lr"] == -math.inf
    assert record["note"] == "NaN" and record["layer_grad_norms"]["w"] == math.inf
    assert repr(record) == repr(records.decode(raw.decode()))


# -- whole files -------------------------------------------------------------------------------
def write(tmp_path, lines_):
    path = tmp_path / "rank_0.jsonl"
    path.write_bytes(b"".join(line if isinstance(line, bytes) else
                              (records.encode(line) + "\n").encode() for line in lines_))
    return str(path)


def scan_and_records(path):
    log = read_rank_log(path)
    scan = log.scan                               # from the file, before the records exist
    return (scan, log.skipped, log.skipped_at, log.torn_tail, log.records,
            scan_records(log.records))


LOGS = {
    "clean": [RUN] + [step(n) for n in range(1, 200)] + [hardware(1)],
    "nonfinite": [RUN, step(1, loss="NaN"), step(2, grad_norm=math.inf), hardware(2),
                  step(3, loss_smooth=None, samples_per_s=None), step(4, loss=2)],
    "damaged": [RUN, step(1), b'{"kind":"step","rank":0,"ti\n', step(2), b"\xff\xfe\n",
                b'{"kind":"step"}\n', hardware(2, devices=[{"type": "npu"}]), b"[1]\n",
                json.dumps(step(3, loss="\ud800")).encode() + b"\n", b"\n", b"   \n", step(4),
                b'{"kind":"step","rank":0,"time":1,"step":5,"loss":1e400,"epoch":1,'
                b'"loss_smooth":1,"lr":1,"grad_norm":1,"step_time_s":1,"skipped":false}\n',
                {"kind": "anomaly", "rank": 0, "time": 3.0, "anomaly": "loss_spike", "step": 2,
                 "value": "NaN", "threshold": 4.0, "message": "é", "actions": ["warn"],
                 "checkpoint": None, "report": None},
                {"kind": "future_kind", "rank": 0, "time": 4.0},
                {"kind": "end", "rank": 0, "time": 5.0, "reason": "completed", "steps": 5,
                 "elapsed_s": 1.0}, b'{"kind":"step","rank":0,"time":17'],
    "resumed": [RUN] + [step(n) for n in range(1, 6)]
               + [dict(RUN, time=9.0)] + [step(n) for n in range(3, 8)]
               + [hardware(1, devices=None), hardware(2, devices={"odd": 1})],
    "odd values": [RUN, step(1, step="x", skipped=1), step(2, loss=[1, "NaN"], lr={"a": 1}),
                   step(3, step=2**70, epoch=None), hardware(1, cpu_percent="Infinity")],
    "not a log": [step(1), RUN],
    "mostly bad": [RUN, b"x\n", b"y\n", step(1)],
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_files_read_the_same(tmp_path, standard, name):
    path = write(tmp_path, LOGS[name])
    slow, quick = standard(lambda: scan_and_records(path))
    assert quick == slow
    if name not in ("not a log", "mostly bad"):
        assert "Error" not in quick


def test_a_block_with_one_bad_line_reads_the_same(tmp_path, standard):
    """A 4 MiB chunk whose lines all decode goes through msgspec at once; one bad line
    sends the chunk line by line. Both give the standard path's results."""
    base = [RUN] + [hardware(n) if n % 7 == 0 else step(n) for n in range(1, 30_000)]
    for extra in ([], [b"garbage\n"], [b'{"kind":"notice","rank":0,"time":1}\n']):
        path = write(tmp_path, base[:15_000] + extra + base[15_000:])
        slow, quick = standard(lambda p=path: scan_and_records(p))
        assert quick == slow


def test_decoders_fed_in_pieces_agree(standard):
    data = b"".join((records.encode(r) + "\n").encode() for r in LOGS["nonfinite"])
    data += b"not json\n" + data[len(data) // 2:]

    def feed():
        decoder = LineDecoder("rank_0.jsonl")
        found = []
        for start in range(0, len(data), 37):
            found += decoder.feed(data[start:start + 37])
        return found, decoder.tail(), decoder.skipped, decoder.skipped_at, decoder.first_problem
    slow, quick = standard(feed)
    assert quick == slow and "Error" not in quick
