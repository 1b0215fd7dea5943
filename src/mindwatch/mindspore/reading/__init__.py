"""Reading a step into plain Python numbers, at the adapter's boundary: MindSpore's callback
parameters, what a train cell returned, a train cell mindwatch did not build, and per-layer
norms."""
