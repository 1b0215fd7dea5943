"""Issue #46 on PyTorch: the sample indices of a step's batch, as the DataLoader given to
``protect(..., model=, data=)`` fetched them (reading/sample_indices.py): a plain loop over a
shuffled loader, in the main process, with workers and with persistent ones (reset each
epoch), under gradient accumulation; a forward that is no loader batch leaves them unknown,
never wrong. The expected indices are found independently: each batch's samples by their
content, and the sampler's permutation drawn again with its seed. Under the trainers:
test_bad_batches_torch.py."""
import io

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.runlog.bad_batches import read_ledger  # noqa: E402
from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import records, tiny_model  # noqa: E402

SAMPLES = torch.Generator().manual_seed(11)
X, Y = torch.randn(40, 8, generator=SAMPLES), torch.randn(40, 1, generator=SAMPLES)
BAD_SAMPLE = 17


def samples_of(y):
    """A batch's dataset indices, in its order, found by content (each Y row is its own)."""
    return [int((row == Y).all(1).nonzero()) for row in y]


def loader_run(log_dir, *, bad_epoch=1, batch=8, accumulate=1, workers=0, persistent=False,
               stray=False):
    """A plain loop over a shuffled DataLoader given to protect (data=): the loss is NaN
    where the batch holds BAD_SAMPLE in epoch ``bad_epoch``. ``stray``: a training forward
    on 3 samples of no batch before each step's. Returns each step's samples (found by
    content) and the step the run stopped at."""
    data = torch.utils.data.TensorDataset(X, Y)
    sampler = torch.utils.data.RandomSampler(data, generator=torch.Generator().manual_seed(5))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, sampler=sampler,
                                         num_workers=workers, persistent_workers=persistent)
    model = tiny_model()
    monitor = TrainMonitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model,
                                data=loader)
    step, window, steps = 0, [], []
    for epoch in range(1, 4):
        for x, y in loader:
            if stray:
                model(X[:3])
            window += samples_of(y)
            bad = epoch == bad_epoch and BAD_SAMPLE in samples_of(y)
            monitor.backward(lambda x=x, y=y, bad=bad: nn.functional.mse_loss(model(x), y) *
                             (float("nan") if bad else 1.0) / accumulate)
            if len(window) < batch * accumulate:
                continue
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            monitor.observe(step=step)
            steps.append(window)
            window = []
            if monitor.stop_requested:
                break
        if monitor.stop_requested:
            break
    monitor.close(exit=False)
    assert "_get_iterator" not in loader.__dict__      # the loader as it was
    return steps, step


@pytest.mark.parametrize("workers,persistent,bad_epoch", [
    (0, False, 1), (2, False, 1), (2, True, 2)], ids=["in-process", "workers",
                                                     "persistent-workers-2nd-epoch"])
def test_a_loader_given_to_protect_names_the_bad_batchs_samples(tmp_path, workers,
                                                                 persistent, bad_epoch):
    """The indices are the sampler's, as the loader fetched them, in the batch's order:
    with workers (which fetch ahead), and with persistent ones, reset each epoch."""
    steps, stopped = loader_run(tmp_path, workers=workers, persistent=persistent,
                                bad_epoch=bad_epoch)
    expected = steps[-1]
    assert BAD_SAMPLE in expected and len(expected) == 8
    if bad_epoch == 1:        # the sampler's own first permutation, cut in batches of 8
        order = torch.randperm(40, generator=torch.Generator().manual_seed(5)).tolist()
        assert expected == order[(stopped - 1) * 8:stopped * 8]
    else:
        assert stopped > 5
    anomalies = records(tmp_path, "anomaly")
    assert anomalies and {a["step"] for a in anomalies} == {stopped}
    assert all(a["batch"]["indices"] == expected for a in anomalies)
    [entry] = read_ledger(str(tmp_path / "bad_batches.jsonl"))
    assert (entry["step"], entry["indices"]) == (stopped, expected)


def test_under_accumulation_a_steps_samples_are_its_micro_batches(tmp_path):
    steps, stopped = loader_run(tmp_path, batch=4, accumulate=2)
    assert len(steps[-1]) == 8 and BAD_SAMPLE in steps[-1]
    [entry] = read_ledger(str(tmp_path / "bad_batches.jsonl"))
    assert (entry["step"], entry["indices"]) == (stopped, steps[-1])


def test_a_forward_that_is_no_loader_batch_leaves_the_samples_unknown_not_wrong(tmp_path):
    steps, stopped = loader_run(tmp_path, stray=True)
    assert BAD_SAMPLE in steps[-1]
    [entry] = read_ledger(str(tmp_path / "bad_batches.jsonl"))
    assert (entry["step"], entry["indices"]) == (stopped, None)


def test_a_watched_loader_is_watched_once_and_given_back_as_it_was():
    """Watching twice records each batch once; remove() restores the loader (and a
    persistent iterator's sampler); loaders whose indices cannot be told are not watched."""
    from mindwatch.torch.reading.sample_indices import SampleIndices

    data = torch.utils.data.TensorDataset(X, Y)
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=1,
                                         persistent_workers=True)
    indices, other = SampleIndices(), SampleIndices()
    assert indices.watch(loader) and indices.watch(loader)
    for _ in range(2):
        for x, y in loader:
            assert indices.pop(len(x)) == samples_of(y)
        assert indices.pop(8) is None                   # nothing left over
    assert other.watch(loader)          # another monitor's (the first never closed)
    [(x, y)] = [next(iter(loader))]
    assert (indices.pop(8), other.pop(8)) == (None, samples_of(y))
    other.remove()
    assert "_get_iterator" not in loader.__dict__
    assert not hasattr(loader._iterator._index_sampler, "loader")
    assert loader.batch_sampler.__class__ is torch.utils.data.BatchSampler

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(X)
    assert not indices.watch(torch.utils.data.DataLoader(Stream(), batch_size=8))
    assert not indices.watch(torch.utils.data.DataLoader(data, batch_size=None))
    assert not indices.watch(torch.utils.data.DataLoader(data, batch_size=8, num_workers=1,
                                                         in_order=False))


def test_data_needs_a_dataloader_and_the_model(tmp_path):
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    model = tiny_model()
    with pytest.raises(TypeError, match="DataLoader"):
        monitor.protect(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                        data=[(X, Y)])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=8)
    with pytest.raises(ValueError, match="model="):
        monitor.protect(torch.optim.SGD(model.parameters(), lr=0.1), data=loader)
    monitor.close(exit=False)
