"""Gradient accumulation: the loss mindwatch logs for a step is the one the framework logs
for it (step/loss_window.py): Hugging Face's Trainer (a model that takes
``num_items_in_batch`` and one that does not), Lightning's ``accumulate_grad_batches`` and a
plain loop, each with micro-batches of equal and of different token counts (padding)."""
import io

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import records  # noqa: E402

LENGTH, VOCAB, MICRO = 12, 64, 2          # tokens per row, vocabulary, rows per micro-batch
TRANSFORMERS_4 = int(transformers.__version__.split(".")[0]) < 5


def gpt2(seed: int = 0) -> nn.Module:
    """A one-layer GPT-2 built from its config (no download)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=LENGTH,
                                     vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


class Rows(Dataset):
    """Random token rows; ``padded``: each row's tail of a random length is padding, its
    labels -100, so micro-batches count different numbers of tokens."""

    def __init__(self, n: int, padded: bool):
        generator = torch.Generator().manual_seed(3)
        self.ids = torch.randint(0, VOCAB, (n, LENGTH), generator=generator)
        keep = (torch.randint(2, LENGTH + 1, (n,), generator=generator) if padded
                else torch.full((n,), LENGTH))
        self.mask = (torch.arange(LENGTH)[None, :] < keep[:, None]).long()
        self.labels = self.ids.masked_fill(self.mask == 0, -100)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index],
                "labels": self.labels[index]}


class MeanOnly(nn.Module):
    """GPT-2 behind a forward without ``**kwargs``: the Trainer passes it no
    ``num_items_in_batch``; its loss is each micro-batch's own token mean."""

    def __init__(self):
        super().__init__()
        self.gpt = gpt2()

    def forward(self, input_ids, attention_mask=None, labels=None):
        out = self.gpt(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        return {"loss": out.loss, "logits": out.logits}


def token_counts(rows: Rows, windows: int, accumulate: int) -> list[int]:
    shifted = rows.labels[:, 1:] != -100            # the tokens a causal LM predicts
    per_micro = shifted.reshape(-1, MICRO * (LENGTH - 1)).sum(1)[:windows * accumulate]
    return per_micro.tolist()


@pytest.mark.parametrize("padded", [False, True], ids=["equal-tokens", "padded"])
@pytest.mark.parametrize("model_kind", ["num_items_in_batch", "mean_only"])
def test_hf_trainer_logs_the_loss_mindwatch_logs(tmp_path, model_kind, padded):
    from transformers import Trainer, TrainingArguments

    from mindwatch.torch import HFCallback
    steps, accumulate = 3, 2
    rows = Rows(steps * accumulate * MICRO, padded)
    model = gpt2() if model_kind == "num_items_in_batch" else MeanOnly()
    args = TrainingArguments(output_dir=str(tmp_path / "t"), per_device_train_batch_size=MICRO,
                             gradient_accumulation_steps=accumulate, max_steps=steps,
                             learning_rate=1e-3, logging_steps=1, report_to=[],
                             save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    callback = HFCallback(str(tmp_path / "run"), stream=io.StringIO())
    trainer = Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback])
    trainer.train()
    assert trainer.model_accepts_loss_kwargs is (model_kind == "num_items_in_batch")
    ours = [s["loss"] for s in records(tmp_path / "run", "step")]
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(ours) == len(logged) == steps
    if TRANSFORMERS_4:                # transformers 4 logs the loss rounded to 4 places
        assert [round(loss, 4) for loss in ours] == pytest.approx(logged, abs=1e-12)
    else:
        assert ours == pytest.approx(logged, rel=1e-6)
    counts = token_counts(rows, steps, accumulate)
    assert (len(set(counts)) > 1) is padded         # the padding does what it says


def test_lightning_logs_the_mean_of_training_steps_losses_over_the_window(tmp_path):
    import lightning.pytorch as pl

    from mindwatch.torch import LightningCallback
    rows = Rows(5 * MICRO, padded=True)              # 5 batches: windows of 2, 2 and 1
    returned: list[float] = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.gpt = gpt2()

        def training_step(self, batch, batch_idx):
            loss = self.gpt(**batch).loss            # the micro-batch's own token mean
            returned.append(float(loss.detach()))
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    callback = LightningCallback(str(tmp_path / "run"), stream=io.StringIO())
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", accumulate_grad_batches=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path / "t"),
                         callbacks=[callback])
    trainer.fit(Module(), torch.utils.data.DataLoader(rows, batch_size=MICRO))
    ours = [s["loss"] for s in records(tmp_path / "run", "step")]
    # what Lightning backpropagates: each loss / accumulate_grad_batches, summed over the
    # window; the epoch's last window holds one batch and is still divided by 2
    expected = [(returned[0] + returned[1]) / 2, (returned[2] + returned[3]) / 2,
                returned[4] / 2]
    assert ours == pytest.approx(expected, rel=1e-6)
    assert len(set(returned)) == 5


@pytest.mark.parametrize("normalise", ["micro_batch_mean", "window_token_mean"])
@pytest.mark.parametrize("padded", [False, True], ids=["equal-tokens", "padded"])
def test_a_plain_loop_logs_its_own_mean_over_the_window(tmp_path, normalise, padded):
    """The loop backpropagates each micro-batch's share of its window's loss: its mean
    divided by the window's micro-batches, or its tokens' summed loss divided by the
    window's token count; mindwatch logs the sum of those shares, the loop's own number."""
    model = gpt2()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-3), model=model)
    accumulate, steps = 3, 2
    rows = Rows(steps * accumulate * MICRO, padded)
    loader = list(torch.utils.data.DataLoader(rows, batch_size=MICRO))
    own: list[float] = []
    for step in range(1, steps + 1):
        window = loader[(step - 1) * accumulate:step * accumulate]
        tokens = sum(int((b["labels"][:, 1:] != -100).sum()) for b in window)
        means, sums = [], []
        for batch in window:
            logits = model(input_ids=batch["input_ids"],
                           attention_mask=batch["attention_mask"]).logits
            token_loss = nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, VOCAB), batch["labels"][:, 1:].reshape(-1),
                ignore_index=-100, reduction="sum")
            count = int((batch["labels"][:, 1:] != -100).sum())
            means.append(float(token_loss.detach()) / count)
            sums.append(float(token_loss.detach()))
            share = (token_loss / count / accumulate if normalise == "micro_batch_mean"
                     else token_loss / tokens)
            monitor.backward(share)
        own.append(sum(means) / accumulate if normalise == "micro_batch_mean"
                   else sum(sums) / tokens)
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    ours = [s["loss"] for s in records(tmp_path / "run", "step")]
    assert ours == pytest.approx(own, rel=1e-5)
    # the two conventions differ once the micro-batches' token counts do
    counts = token_counts(rows, steps, accumulate)
    assert (len(set(counts)) > 1) is padded
