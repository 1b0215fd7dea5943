"""The protected train step: the graph that measures the gradients and decides, on the
device, whether the update is applied (``wrap``'s Cell, the functional loop's ``jit_step``),
with the limits the host hands it and the LR the step applied."""
