"""What state steps measure beyond the step's own numbers: per-parameter weight, update,
gradient and moment norms, chosen Cells' outputs and attention logits, in the graph (or
from the host, for a train cell mindwatch did not build)."""
