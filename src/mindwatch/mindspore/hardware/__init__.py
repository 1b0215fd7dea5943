"""MindSpore's device-memory accounting, read for the core's hardware sampler."""
