"""The fast line encoder writes exactly what the standard one means: same records back,
non-finite floats as strings, nested records through the standard path."""
import json
import math

from hypothesis import given
from hypothesis import strategies as st

from mindwatch import records
from mindwatch.sinks import line

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
flat = st.dictionaries(st.sampled_from(["loss", "lr", "grad_norm", "step", "message", "x"]),
                       scalars, max_size=6)


@given(flat, st.dictionaries(st.sampled_from(["devices", "lr_groups"]),
                             st.lists(scalars, max_size=3), max_size=1))
def test_fast_and_standard_lines_decode_to_the_same_record(fields, nested):
    record = {"kind": "step", "rank": 0, "time": 1.5, **fields, **nested}
    fast = line.encode_line(record)
    standard = (records.encode(record) + "\n").encode("utf-8")
    assert fast.endswith(b"\n") and fast.count(b"\n") == 1
    json.loads(fast, parse_constant=lambda name: 1 / 0)    # strict JSON: no bare NaN token
    got, want = records.decode(fast.decode()), records.decode(standard.decode())
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got[key])
        else:
            assert got[key] == value and type(got[key]) is type(value)


def test_step_records_take_the_fast_path_and_non_finite_ones_do_not(monkeypatch):
    assert line._FAST is not None                      # msgspec is pinned for development
    calls = []
    monkeypatch.setattr(line, "_FAST", type("Spy", (), {
        "encode": lambda self, r: calls.append(r) or b"{}"})())
    line.encode_line({"kind": "step", "loss": 1.0})
    line.encode_line({"kind": "step", "loss": math.nan})
    line.encode_line({"kind": "hardware", "devices": [{"temp_c": 60.0}]})
    assert calls == [{"kind": "step", "loss": 1.0}]


def test_lists_of_finite_numbers_take_the_fast_path(monkeypatch):
    """The job log's per-rank bins (lists of floats and None) go through msgspec; a list
    with a non-finite float, a nested value or a string does not, nor one whose sum
    overflows (finite values, refused to stay simple: only a slower encoder for them)."""
    calls = []
    monkeypatch.setattr(line, "_FAST", type("Spy", (), {
        "encode": lambda self, r: calls.append(r) or b"{}"})())
    fast = [{"kind": "job_ranks", "step": 3, "loss": [1.0, None, -0.0, 2], "lr": (0.5, 1)},
            {"kind": "job_ranks", "loss": [], "memory_mb": [None, None]}]
    slow = [{"kind": "job_ranks", "loss": [1.0, math.inf]},
            {"kind": "job_ranks", "loss": [None, math.nan, 2.0]},
            {"kind": "job_ranks", "loss": [-math.inf, math.inf]},
            {"kind": "x", "v": [1.0, [2.0]]}, {"kind": "x", "v": [{"a": 1.0}]},
            {"kind": "x", "v": ["a", 1.0]}, {"kind": "x", "v": [1e308, 1e308]},
            {"kind": "x", "v": [1.0], "d": {"a": 1.0}}]
    for record in fast + slow:
        line.encode_line(record)
    assert calls == fast


def test_a_bin_of_16384_ranks_decodes_to_the_standard_values():
    """A job_ranks record as RankBins writes it (shorts, None for ranks without a value):
    the fast line decodes to the very floats of the standard one; only their spelling may
    differ (``1e-9`` for ``1e-09``, ``0.0000672`` for ``6.72e-05``)."""
    from mindwatch.job.fields import short

    rng = __import__("numpy").random.default_rng(0)
    values = rng.uniform(0, 1, 16384) * 10.0 ** rng.integers(-12, 12, 16384)
    column = [None if i % 97 == 0 else short(v) for i, v in enumerate(values.tolist())]
    record = {"kind": "job_ranks", "rank": 0, "time": 1.5, "step_from": 101, "step": 200,
              "loss": column, "memory_mb": column[::-1]}
    fast = line.encode_line(record)
    standard = (records.encode(record) + "\n").encode("utf-8")
    assert fast != standard                     # the fast path was taken
    assert json.loads(fast) == json.loads(standard) == record
    assert records.decode(fast.decode()) == records.decode(standard.decode())
