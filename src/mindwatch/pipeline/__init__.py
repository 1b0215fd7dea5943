"""One step through the core, in order: the observation, the run segment it belongs to, the
loss and throughput summaries, and the writer every record leaves through."""
