"""Throughput people quote: tokens per second and model FLOPs utilisation (MFU), per device.

Both follow from ``samples_per_s``, which is already this rank's (its batch size over its
step time, the time of one training step even when an observation covers several), so they
are per device too: a job's tokens/s is the sum over its ranks, its MFU the mean.

    tokens_per_s = samples_per_s * tokens_per_sample
    mfu          = tokens_per_s * flops_per_token / (peak_tflops * 1e12)

MFU counts the FLOPs the model needs (``flops_per_token``, 6 N + 12 L H Q T for a
Transformer), not those the hardware ran: recomputation and padding do not raise it, which
is why it compares runs and systems fairly. Nothing is made up: a figure whose inputs are
unknown is left out of the step record.
"""
from __future__ import annotations

TERA = 1e12


class Throughput:
    def __init__(self, tokens_per_sample: int | None, flops_per_token: float | None,
                 peak_tflops: float | None):
        self.tokens_per_sample = tokens_per_sample
        self.flops_per_token, self.peak_tflops = flops_per_token, peak_tflops

    def rates(self, samples_per_s: float | None) -> tuple[float | None, float | None]:
        """(tokens_per_s, mfu) for a step with ``samples_per_s``; None where unknown."""
        if samples_per_s is None or self.tokens_per_sample is None:
            return None, None
        tokens_per_s = samples_per_s * self.tokens_per_sample
        if self.flops_per_token is None or self.peak_tflops is None:
            return tokens_per_s, None
        return tokens_per_s, tokens_per_s * self.flops_per_token / (self.peak_tflops * TERA)
