"""Step-time overhead of mindwatch.torch against a bare loop, measured side by side.

Both loops train the same small causal Transformer (same seed, same batches) on one device:
the bare one does backward, ``clip_grad_norm_``, ``optimizer.step()`` and reads its loss
(``loss.item()``, as any loop that logs does); the monitored one does
``monitor.backward``, the protected ``optimizer.step()`` (norm measured, decision on the
device, the update's copies for withholding) and ``monitor.observe``, with the JSONL run log
and the console. They take turns step by step, in a rotating order, so drift of the machine
hits all alike; the ratio is the median over steps of (monitored / bare) in the same turn.
Two sizes: a small model (tens of ms a step on a CPU) and one whose step takes 100 ms or
more. Rows: "mindwatch" as it runs on this device (on the CPU the verdict is read when it
is taken and a healthy step copies nothing; on an accelerator it is selected with on the
device); "device-verdict", the accelerator's way forced on this device (the copies of the
parameters and optimizer state, and the select, every step); "measure-only"
(``skip_anomalous_updates=False``: no withholding at all); "no-batch-identity" (mindwatch
without the forward pre-hook that fingerprints the step's batch, issue #46): the batch
identity's own cost is printed as mindwatch / no-batch-identity, in the same turn.

    python benchmarks/torch_overhead.py [--rounds 10] [--steps 20] [--device cpu|cuda]
                                        [--threads 1]
"""
from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time

import torch
from torch import nn

from mindwatch.torch import TrainMonitor


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d_model: int, layers: int, seq: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.zeros(seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.blocks(self.embed(tokens) + self.position, mask=self.mask,
                             is_causal=True)
        return self.head(hidden)


class Loop:
    """One configuration: its own model, optimizer and (for monitored ones) monitor."""

    def __init__(self, kind: str, size: dict, device: str, log_root: str):
        torch.manual_seed(0)
        self.model = TinyGPT(**size).to(device)
        self.kind = kind
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4)
        self.monitor = None
        if kind != "bare":
            self.monitor = TrainMonitor(f"{log_root}/{kind}", stream=io.StringIO(),
                                        hardware_interval_s=None)
            optimizer = self.monitor.protect(optimizer, model=self.model, clip_grad_norm=1.0,
                                             skip_anomalous_updates=kind != "measure-only")
            if kind == "device-verdict":
                assert self.monitor.train_step is not None
                self.monitor.train_step.verdict_on_host = False
            if kind == "no-batch-identity":
                assert self.monitor.train_step is not None
                self.monitor.train_step.batches.remove()
                self.monitor.train_step.batches = None
        self.optimizer = optimizer
        self.step = 0
        self.device = device

    def train(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        tokens, targets = batch
        logits = self.model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        self.step += 1
        if self.monitor is None:
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad()
            loss.item()
        else:
            self.monitor.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.monitor.observe(step=self.step)

    def timed(self, batch: tuple, device: str) -> float:
        start = time.perf_counter()
        self.train(batch)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start


def identity_seconds(tokens: torch.Tensor, repeats: int = 2000) -> float:
    """Seconds of one step's batch identity alone (reading/batch.py: the forward pre-hook's
    sums, their place in the step's vector, the host's fingerprint; its read to the host is
    the step's own, done here apart, so this is an upper bound): what the side-by-side rows
    cannot tell from their noise (a few percent on the CPU)."""
    from mindwatch.torch.reading.batch import BatchReading
    model = nn.Linear(1, 1)
    reading = BatchReading(model, model)

    def once() -> None:
        reading._add([tokens], len(tokens))
        batch = reading.take()
        assert batch is not None
        batch.given([float(v) for v in batch.on_device(tokens.device).tolist()])
        batch.identity()
    for _ in range(20):
        once()
    start = time.perf_counter()
    for _ in range(repeats):
        once()
    return (time.perf_counter() - start) / repeats


def measure(name: str, size: dict, args: argparse.Namespace) -> None:
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, size["vocab"], (args.batch, size["seq"]), generator=generator)
                .to(args.device),) * 2 for _ in range(args.steps)]
    with tempfile.TemporaryDirectory() as root:
        kinds = ("bare", "mindwatch", "device-verdict", "measure-only", "no-batch-identity")
        loops = [Loop(kind, size, args.device, root) for kind in kinds]
        for loop in loops:                   # warm-up: allocator, first-step state
            for batch in batches[:3]:
                loop.timed(batch, args.device)
        ratios: dict[str, list[float]] = {kind: [] for kind in kinds[1:]}
        bare_times, identity = [], []
        for turn in range(args.rounds * args.steps):
            batch = batches[turn % len(batches)]
            order = loops[turn % len(loops):] + loops[:turn % len(loops)]
            times = {loop.kind: loop.timed(batch, args.device) for loop in order}
            bare_times.append(times["bare"])
            for kind in ratios:
                ratios[kind].append(times[kind] / times["bare"])
            identity.append(times["mindwatch"] / times["no-batch-identity"])
        for loop in loops:
            if loop.monitor is not None:
                loop.monitor.close()
    params = sum(p.numel() for p in loops[0].model.parameters())
    print(f"{name}: {params / 1e6:.2f}M parameters, bare step "
          f"{statistics.median(bare_times) * 1e3:.1f} ms on {args.device}")
    for kind, values in ratios.items():
        quartiles = statistics.quantiles(values, n=4)
        print(f"  {kind:17s} {statistics.median(values):.3f}x the bare loop "
              f"(quartiles of the steps' ratios {quartiles[0]:.3f}-{quartiles[2]:.3f})")
    quartiles = statistics.quantiles(identity, n=4)
    print(f"  the batch identity: mindwatch {statistics.median(identity):.4f}x "
          f"no-batch-identity (quartiles {quartiles[0]:.4f}-{quartiles[2]:.4f})")
    seconds = identity_seconds(batches[0][0])
    print(f"  the batch identity alone, {tuple(batches[0][0].shape)} tokens: "
          f"{seconds * 1e3:.3f} ms = {seconds / statistics.median(bare_times):.2%} of the "
          "bare step")


SIZES = {
    "small": {"vocab": 512, "d_model": 128, "layers": 2, "seq": 64},
    "100 ms+": {"vocab": 2048, "d_model": 256, "layers": 4, "seq": 128},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", choices=sorted(SIZES))
    # one intra-op thread by default: on a 2-core host two threads make the rounds swing
    # by +-30% (the OS moves work between cores), one thread by a few percent
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, size in SIZES.items():
        if args.only in (None, name):
            measure(name, size, args)


if __name__ == "__main__":
    main()
