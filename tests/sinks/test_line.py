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
