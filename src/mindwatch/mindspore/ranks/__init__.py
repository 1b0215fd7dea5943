"""What the ranks settle together through MindSpore's collectives: rank and world size, one
stop for all, data times, replica fingerprints, and MindSpore's own SDC detection."""
