"""PyTorch's device-memory accounting (CUDA, Ascend through torch_npu)."""
