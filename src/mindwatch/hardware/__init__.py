"""Hardware probes: host, NPU and GPU state sampled beside the training loop."""
