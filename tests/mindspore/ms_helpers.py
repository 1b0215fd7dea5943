"""Small real models and datasets for tests that train MindSpore on the CPU."""
import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn


class Regressor(nn.Cell):
    """Small, but with the layer kinds a Transformer has (dense, norm, nonlinearity)."""

    def __init__(self, width=16):
        super().__init__()
        self.inp = nn.Dense(4, width)
        self.norm = nn.LayerNorm((width,))
        self.act = nn.GELU()
        self.out = nn.Dense(width, 1)

    def construct(self, x):
        return self.out(self.act(self.norm(self.inp(x))))


def make_regressor(seed=0, width=16):
    ms.set_seed(seed)
    return Regressor(width)


def regression_arrays(n=64, seed=0, nan_at=None, batch=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    if nan_at is not None:               # poison every sample of batch ``nan_at`` (1-based)
        x[(nan_at - 1) * batch: nan_at * batch] = np.nan
    return x, y


def regression_dataset(n=64, batch=8, seed=0, nan_at=None):
    x, y = regression_arrays(n, seed, nan_at, batch)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)


def weights_of(cell):
    return {p.name: p.asnumpy().copy() for p in cell.get_parameters()}
