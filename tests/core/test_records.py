import json
import math

import pytest

from mindwatch import records


def test_nonfinite_floats_become_contract_strings_at_any_depth():
    line = records.encode({"kind": "step", "loss": math.nan, "grad_norm": math.inf,
                           "lr_groups": [1e-3, -math.inf], "nested": {"value": math.nan}})
    raw = json.loads(line)       # the standard parser accepts it: strict JSON
    assert raw["loss"] == "NaN" and raw["grad_norm"] == "Infinity"
    assert raw["lr_groups"] == [0.001, "-Infinity"]
    assert raw["nested"]["value"] == "NaN"
    assert "NaN," not in line.replace('"NaN"', "")


def test_decode_revives_numeric_fields_only():
    record = records.decode('{"kind":"anomaly","value":"Infinity","message":"NaN","loss":"NaN"}')
    assert record["value"] == math.inf
    assert math.isnan(record["loss"])
    assert record["message"] == "NaN"      # free text stays text


@pytest.mark.parametrize("line", ['{"loss": NaN}', '{"loss": Infinity}', '{"loss": -Infinity}'])
def test_decode_rejects_bare_nonfinite_constants(line):
    with pytest.raises(ValueError, match="strict JSON"):
        records.decode(line)


def test_decode_rejects_non_objects():
    with pytest.raises(ValueError):
        records.decode("[1, 2]")


def test_round_trip_keeps_values():
    original = {"kind": "step", "step": 3, "loss": 2.5, "grad_norm": math.inf, "skipped": True}
    assert records.decode(records.encode(original)) == original
