"""What the ranks settle together under torchrun: the rank, the consensus, the replicas'
fingerprints, each rank's own gradient norm before DDP reduces it."""
