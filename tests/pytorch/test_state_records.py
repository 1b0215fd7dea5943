"""State records under PyTorch: every state_interval steps, per-layer weight, update,
pre-clip gradient and moment norms, checked against norms computed here from the tensors."""
import io
import math

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, records, tiny_model  # noqa: E402


def layer_norm(tensors):
    return math.sqrt(sum(float(t.double().square().sum()) for t in tensors))


@pytest.mark.parametrize("skip", [True, False], ids=["protected", "measure-only"])
def test_state_records_hold_each_layers_norms(tmp_path, skip):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(), state_interval=3)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model,
                                clip_grad_norm=0.05, skip_anomalous_updates=skip)
    expected = {}
    for step, (x, y) in enumerate(batches(6), start=1):
        monitor.backward(nn.functional.mse_loss(model(x), y))
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer.step()
        if step % 3 == 0:
            after = dict(model.named_parameters())
            expected[step] = {
                layer: {"weight_norm": layer_norm([after[f"{layer}.{k}"] for k in kinds]),
                        "update_norm": layer_norm([after[f"{layer}.{k}"] - before[f"{layer}.{k}"]
                                                   for k in kinds]),
                        "grad_norm": layer_norm([grads[f"{layer}.{k}"] for k in kinds]),
                        "m_norm": layer_norm([optimizer.state[after[f"{layer}.{k}"]]["exp_avg"]
                                              for k in kinds]),
                        "v_norm": layer_norm([optimizer.state[after[f"{layer}.{k}"]]
                                              ["exp_avg_sq"] for k in kinds])}
                for layer, kinds in (("0", ("weight", "bias")), ("1", ("weight", "bias")),
                                     ("3", ("weight", "bias")))}
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    states = records(tmp_path / "run", "state")
    assert [s["step"] for s in states] == [3, 6]
    for state in states:
        for layer, norms in expected[state["step"]].items():
            got = state["layers"][layer]
            for key, value in norms.items():
                assert got[key] == pytest.approx(value, rel=1e-5), (state["step"], layer, key)
            assert got["update_ratio"] == pytest.approx(norms["update_norm"]
                                                        / norms["weight_norm"], rel=1e-5)
        # the gradient norms are the pre-clip ones: clipping to 0.05 would shrink them
        assert state["layers"]["3"]["grad_norm"] > 0.05


def test_a_withheld_steps_update_is_zero(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(), state_interval=2,
                           on_anomaly={"loss_nonfinite": "skip"})
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    for step, (x, y) in enumerate(batches(4), start=1):
        loss = nn.functional.mse_loss(model(x), y)
        monitor.backward(loss + math.inf if step == 4 else loss)
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    states = {s["step"]: s for s in records(tmp_path / "run", "state")}
    assert states[2]["update_norm"] > 0
    assert states[4]["update_norm"] == 0.0
    assert all(layer["update_ratio"] == 0.0 for layer in states[4]["layers"].values())


class Attention(nn.Module):
    """A tiny self-attention exposing its logits before the softmax as a sub-module."""

    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(8, 16)
        self.logits = nn.Identity()

    def forward(self, x):                  # x: (batch, tokens, 8)
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = self.logits(q @ k.transpose(1, 2))
        return scores.softmax(-1) @ x


def test_activations_and_attention_logits_on_state_steps(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(Attention(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(), state_interval=2)
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.01), model=model,
                                activations=["1", "2"], attention_logits=["0.logits"])
    seen = {}
    model[2].register_forward_hook(lambda m, i, out: seen.__setitem__("relu", out.detach()))
    model[0].logits.register_forward_hook(
        lambda m, i, out: seen.__setitem__("logits", out.detach()))
    expected = {}
    generator = torch.Generator().manual_seed(3)
    for step in range(1, 5):
        x = torch.randn(4, 5, 8, generator=generator)
        monitor.backward(model(x).square().mean())
        expected[step] = (float(seen["relu"].abs().max()),
                          float(seen["relu"].square().mean().sqrt()),
                          float(seen["logits"].max()))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    states = records(tmp_path / "run", "state")
    assert [s["step"] for s in states] == [2, 4]
    for state in states:
        relu = state["activations"]["2"]
        max_abs, rms, logit = expected[state["step"]]
        assert relu == {"max_abs": pytest.approx(max_abs), "rms": pytest.approx(rms)}
        assert state["activations"]["0.logits"] == {"max_logit": pytest.approx(logit)}
        assert set(state["activations"]) == {"0.logits", "1", "2"}
    with pytest.raises(ValueError, match=r"'blocks\.\*' matches no module"):
        TrainMonitor(str(tmp_path / "other"), stream=io.StringIO()).protect(
            torch.optim.SGD(model.parameters(), lr=0.1), model=model, activations=["blocks.*"])


class Encoder(nn.Module):
    """Self-attention under a causal mask and a key padding mask, as a decoder-only model
    calls it: a Transformer encoder layer (which hands its ``nn.MultiheadAttention`` float
    masks), or the attention itself given bool masks."""

    def __init__(self, layer: bool):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
        self.use_layer = layer
        self.head = nn.Linear(16, 1)

    def forward(self, x, padding):
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1])   # 0 and -inf
        if not self.use_layer:
            out, _ = self.layer.self_attn(x, x, x, key_padding_mask=padding,
                                          attn_mask=causal.isinf(), need_weights=False)
            return self.head(out)
        if padding is not None:                                    # masks of one dtype
            causal = causal.isinf()
        return self.head(self.layer(x, src_mask=causal, src_key_padding_mask=padding))


@pytest.mark.parametrize("layer,padded", [(True, False), (True, True), (False, True)],
                         ids=["layer-causal", "layer-causal+padding", "bool-masks"])
def test_the_largest_logit_of_a_multihead_attention_is_the_one_torch_computes(
        tmp_path, monkeypatch, layer, padded):
    # the reference: the logits torch's own attention computes, caught where it hands its
    # projected queries, keys and merged masks to scaled_dot_product_attention
    sdpa = nn.functional.scaled_dot_product_attention
    computed = []

    def caught(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        computed.append((float((logits + attn_mask).max()), float(logits.max())))
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                    **kwargs)
    monkeypatch.setattr(nn.functional, "scaled_dot_product_attention", caught)
    torch.manual_seed(0)
    model = Encoder(layer)
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(), state_interval=2)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=0.05), model=model,
                                attention_logits=["layer.self_attn"])
    generator = torch.Generator().manual_seed(3)
    padding = None
    if padded:                               # the last two tokens of every sequence: padding
        padding = torch.zeros(3, 6, dtype=torch.bool)
        padding[:, 4:] = True
    expected = {}
    for step in range(1, 5):
        x = torch.randn(3, 6, 16, generator=generator)
        x[:, 4:] *= 8                        # the largest logits are the masked ones
        monitor.backward(model(x, padding).square().mean())
        expected[step], unmasked = computed[-1]
        assert unmasked > expected[step] + 1 or not padded       # the masks matter
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    states = records(tmp_path / "run", "state")
    assert [s["step"] for s in states] == [2, 4]
    for state in states:
        assert state["activations"] == {"layer.self_attn": {
            "max_logit": pytest.approx(expected[state["step"]], rel=1e-5)}}
    assert expected[2] != pytest.approx(expected[4], rel=1e-3)      # the steps differ
