"""The conformance matrix's PyTorch rows (docs/pipelines.md): every pipeline against every
scenario, with default settings but for the spike's "skip"."""
import pytest

pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch_conformance import (
    BAD_STEP,
    PIPELINES,
    SCENARIOS,
    STEPS,
    run_plain,
)
from torch_helpers import records

pytestmark = pytest.mark.conformance


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_pipeline_against_scenario(tmp_path, pipeline, scenario):
    run = PIPELINES[pipeline]
    log_dir = str(tmp_path / "run")
    if run is run_plain:
        run(log_dir, scenario)
    else:
        run(log_dir, scenario, str(tmp_path / "trainer"))
    steps = records(log_dir, "step")
    anomalies = records(log_dir, "anomaly")
    at_bad = {a["anomaly"] for a in anomalies if a["step"] == BAD_STEP}
    assert scenario.kinds <= at_bad <= scenario.kinds | scenario.also
    assert not [a for a in anomalies if a["step"] != BAD_STEP]
    withheld = [s["step"] for s in steps if s["skipped"]]
    assert withheld == ([BAD_STEP] if scenario.kinds else [])
    assert steps[-1]["step"] == (BAD_STEP if scenario.stops else STEPS)
    assert [s["step"] for s in steps] == list(range(1, steps[-1]["step"] + 1))
    (end,) = records(log_dir, "end")
    assert end["reason"] == ("stopped" if scenario.stops else "completed")
    healthy = [s for s in steps if not s["skipped"]]
    assert all(s["loss"] < 10 and 0 < s["grad_norm"] < 10 for s in healthy)
    assert healthy[0]["lr"] == 0.05
    if scenario.stops:
        checkpoint = anomalies[0]["checkpoint"]
        assert checkpoint and checkpoint.endswith(f"anomaly_step{BAD_STEP}_rank0.ckpt")
