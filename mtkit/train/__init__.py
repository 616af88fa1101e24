"""Training: loss, optimisers and schedules, checkpoints, the loop (`train`)."""
