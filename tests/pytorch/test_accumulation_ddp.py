"""Gradient accumulation under torchrun: each rank logs what it backpropagates, and the mean
over the ranks is the loss Hugging Face's Trainer logs (it gathers the ranks' and averages
them), with its loss multiplied in place by the number of processes before backward."""
import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")
pytest.importorskip("transformers")

from test_ddp import torchrun

from torch_helpers import records

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torchrun")]


def test_the_ranks_mean_is_the_loss_the_trainer_logs(tmp_path):
    torchrun(tmp_path, script=Path(__file__).with_name("hf_accumulation_ddp.py"))
    ranks = [[s["loss"] for s in records(tmp_path, "step", rank)] for rank in (0, 1)]
    history = json.loads((tmp_path / "log_history.json").read_text())
    logged = [entry["loss"] for entry in history if "loss" in entry]
    assert len(logged) == len(ranks[0]) == len(ranks[1]) == 3
    assert [(a + b) / 2 for a, b in zip(*ranks, strict=True)] == pytest.approx(logged,
                                                                               rel=1e-6)
    assert ranks[0] != pytest.approx(ranks[1], rel=1e-3)     # each rank logs its own
