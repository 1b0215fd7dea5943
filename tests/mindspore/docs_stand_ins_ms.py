"""The user's model and data that the MindSpore blocks of the docs leave out, small enough
to train in a second (docs_table.py lists what each gives). Each runs in the block's
temporary directory and returns the names the block then finds."""
from __future__ import annotations

import os
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn, ops

from mindwatch.mindspore import TrainMonitor

BATCH = 4


def _data(batches: int, nan_batch: int | None = None, seed: int = 0):
    """``batches`` batches of 4 samples of 4 features, labelled by the sign of the first;
    ``nan_batch`` (1-based) holds a NaN."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((batches * BATCH, 4)).astype(np.float32)
    label = (data[:, 0] > 0).astype(np.int32)
    if nan_batch is not None:
        data[(nan_batch - 1) * BATCH, 0] = np.nan
    return data, label


def _dataset(batches: int, nan_batch: int | None = None, seed: int = 0):
    data, label = _data(batches, nan_batch, seed)
    return ds.NumpySlicesDataset({"data": data, "label": label}, shuffle=False).batch(BATCH)


def _model() -> dict[str, Any]:
    ms.set_seed(0)
    net = nn.Dense(4, 2)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)

    def forward_fn(data, label):
        logits = net(data)
        return loss_fn(logits, label), logits

    return {"net": net, "loss_fn": loss_fn, "optimizer": optimizer, "forward_fn": forward_fn,
            "net_with_loss": nn.WithLossCell(net, loss_fn)}


def classifier() -> dict[str, Any]:
    train = _dataset(2)
    return {**_model(), "dataset": train, "train_dataset": train,
            "valid_dataset": _dataset(1, seed=1)}


def classifier_nan() -> dict[str, Any]:
    return {**_model(), "dataset": _dataset(4, nan_batch=2)}


def classifier_nan_restart() -> dict[str, Any]:
    return {**_model(), "make_dataset": lambda: _dataset(4, nan_batch=2)}


def own_step_nan() -> dict[str, Any]:
    """A custom loop's own step: ``value_and_grad``, the optimizer, and the numbers it knows
    (the loss and the global gradient norm) as Python floats."""
    model = _model()
    grad_fn = ms.value_and_grad(model["forward_fn"], None, model["optimizer"].parameters,
                                has_aux=True)

    def train_one_step(batch):
        (loss, _), grads = grad_fn(*batch)
        norm = ops.sqrt(sum((grad.astype(ms.float32) ** 2).sum() for grad in grads))
        model["optimizer"](grads)
        return float(loss), float(norm)

    data, label = _data(6, nan_batch=3)
    batches = [(ms.Tensor(data[i:i + BATCH]), ms.Tensor(label[i:i + BATCH]))
               for i in range(0, len(data), BATCH)]
    return {"batches": batches, "train_one_step": train_one_step, "current_lr": 1e-2}


def trained_monitor() -> dict[str, Any]:
    model, dataset = _model(), _dataset(2)
    monitor = TrainMonitor("runs/exp1", print_interval=10)
    train_step = monitor.wrap(model["net_with_loss"], model["optimizer"])
    ms.train.Model(train_step).train(3, dataset, callbacks=[monitor], dataset_sink_mode=False)
    os.makedirs("ckpt")
    return {"monitor": monitor}


def demo_model() -> dict[str, Any]:
    from mindwatch.mindspore.demo.model import build_demo
    net_with_loss, optimizer, _ = build_demo(steps=1, batch_size=1)
    return {"monitor": TrainMonitor("runs/exp1"), "net_with_loss": net_with_loss,
            "optimizer": optimizer}
