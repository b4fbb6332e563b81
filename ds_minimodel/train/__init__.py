"""Training: DeepSpeed set-up and the one loop every stage shares, batch arithmetic, process groups, checkpoints,
metrics."""
