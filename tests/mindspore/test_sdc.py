"""The run record's sdc_detection: MindSpore's own silent-corruption detection, from the
environment variables that configure it."""
from mindwatch.mindspore.ranks.sdc import sdc_detection


def test_each_way_of_switching_it_on():
    assert sdc_detection({}) == {"enabled": False, "env": {}}
    config = "enable:true,with_checksum:true,grad_sample_interval:10"
    assert sdc_detection({"MS_NPU_ASD_CONFIG": config, "PATH": "/bin"}) == {
        "enabled": True, "env": {"MS_NPU_ASD_CONFIG": config}}
    assert sdc_detection({"MS_NPU_ASD_CONFIG": "enable:false"})["enabled"] is False
    assert sdc_detection({"NPU_ASD_ENABLE": "2", "NPU_ASD_UPPER_THRESH": "1000000,10000"}) == {
        "enabled": True, "env": {"NPU_ASD_ENABLE": "2", "NPU_ASD_UPPER_THRESH": "1000000,10000"}}
    assert sdc_detection({"NPU_ASD_ENABLE": "0"})["enabled"] is False
    assert sdc_detection({"MS_SDC_DETECT_ENABLE": "1"})["enabled"] is True


def test_the_run_record_carries_it(tmp_path, monkeypatch):
    from mindspore import nn
    from mindspore.train import Model

    from mindwatch.mindspore import TrainMonitor
    from mindwatch.runlog import read_rank_log
    from ms_helpers import make_regressor, regression_dataset
    monkeypatch.setenv("NPU_ASD_ENABLE", "1")
    net = nn.WithLossCell(make_regressor(), nn.MSELoss())
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), hardware_interval_s=None)
    Model(monitor.wrap(net, optimizer)).train(1, regression_dataset(n=16), callbacks=[monitor],
                                              dataset_sink_mode=False)
    run = read_rank_log(str(tmp_path / "rank_0.jsonl")).records[0]
    assert run["sdc_detection"] == {"enabled": True, "env": {"NPU_ASD_ENABLE": "1"}}
