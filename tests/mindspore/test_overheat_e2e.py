"""Real training while a fake npu-smi (real recorded output, temperature rewritten) reports a
card heating past the limit: training stops right after the sample that completes the
streak, with a checkpoint and a report that carries the hardware sample."""
import json
import os
import time
from pathlib import Path

import mindspore as ms
from mindspore import nn
from mindspore.train import Callback

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_dataset

FIXTURE = "info-23.0.rc3.3-910B1.txt"
RANK_VARS = ("DEVICE_ID", "ASCEND_RT_VISIBLE_DEVICES", "RANK_ID", "RANK", "LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_RANK", "MS_LOCAL_RANK", "MS_NODE_ID")


def heating_npu_smi(directory: Path, fixtures: Path) -> Path:
    """Card 0 reads 80, 82, 84, ... degrees, one step per call of ``npu-smi info``."""
    counter = directory / "calls"
    counter.write_text("0")
    script = directory / "npu-smi"
    script.write_text(f"""#!/bin/sh
if [ "$2" = "-m" ]; then exit 1; fi
n=$(cat {counter}); echo $((n + 1)) > {counter}
t=$((80 + 2 * n))
sed "s/| 271.1       41 /| 271.1       $t /" {fixtures / FIXTURE}
""")
    script.chmod(0o755)
    return script


class _Slow(Callback):
    def on_train_step_end(self, run_context):
        time.sleep(0.03)


def test_overheat_stops_training_after_the_right_sample(tmp_path, quiet, graph_mode,
                                                       monkeypatch, npu_smi_fixtures):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    heating_npu_smi(bin_dir, npu_smi_fixtures)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=quiet, hardware_interval_s=0.1,
                           max_temperature_c=85.0, overheat_samples=3)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    ms.train.Model(step).train(1, regression_dataset(n=8 * 400), callbacks=[_Slow(), monitor],
                               dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    temperatures = [h["devices"][0]["temp_c"] for h in log.of_kind("hardware")]
    assert temperatures[:6] == [80.0, 82.0, 84.0, 86.0, 88.0, 90.0]
    assert all(h["devices"][1]["temp_c"] == 42.0 for h in log.of_kind("hardware"))
    # The recorded cards are 99.3% full of HBM (65099 of 65536 MB): a warning, no stop.
    pressure = [a for a in log.anomalies if a["anomaly"] == "memory_pressure"]
    assert pressure and all(a["actions"] == ["warn"] for a in pressure)
    [overheat] = [a for a in log.anomalies if a["anomaly"] == "overheat"]
    assert overheat["value"] == 90.0                                   # the 3rd hot sample
    assert overheat["threshold"] == 85.0 and overheat["actions"] == ["checkpoint", "stop"]
    # The stop comes at the first step that ends after the sample completing the streak
    # (the sample may land while that step's record is being written, hence "at most one").
    hot = next(i for i, r in enumerate(log.records)
               if r["kind"] == "hardware" and r["devices"][0]["temp_c"] == 90.0)
    acted = next(i for i, r in enumerate(log.records)
                 if r["kind"] == "anomaly" and r["anomaly"] == "overheat")
    between = [r["step"] for r in log.records[hot:acted] if r["kind"] == "step"]
    assert hot < acted and between in ([], [overheat["step"]])
    assert overheat["step"] == log.steps[-1]["step"] < 400
    assert log.end["reason"] == "stopped"
    assert os.path.exists(overheat["checkpoint"])
    report = json.loads(Path(overheat["report"]).read_text())
    assert report["hardware"]["devices"][0]["temp_c"] >= 90.0
